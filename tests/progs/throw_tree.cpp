// Target of the trace tests of C++ exceptions (uftrace's s-exception3
// shape, the tree uftrace shows): an exception thrown three calls deep,
// through a frame with a destructor to run (a cleanup landing pad) and a
// frame that catches it and rethrows, caught in main; then a call after
// the catch. Exits 0.
#define NI __attribute__((noinline, noclone))

struct Exc {};

static volatile int sink;

struct Guard {
    NI Guard();
    NI ~Guard();
};
Guard::Guard() { sink++; }
Guard::~Guard() { sink--; }

NI void thrower() { throw Exc(); }

NI void cleanup() {
    Guard g;
    thrower();
    sink++;
}

NI void rethrower() {
    try {
        cleanup();
    } catch (const Exc &) {
        sink++;
        throw;
    }
}

NI void after() { sink++; }

int main() {
    try {
        rethrower();
    } catch (const Exc &) {
        after();
    }
    after();
    return sink == 3 ? 0 : 1;
}
