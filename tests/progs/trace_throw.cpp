// Target of `wprobe trace`: a C++ exception thrown in level3 unwinds
// through level3, level2 and level1 (all traced) and is caught in main,
// three times; then one call returns normally. Untraced and traced, it
// prints the same lines and exits with status 3 (the catches).
#include <cstdio>
#include <stdexcept>

#define NI __attribute__((noinline, noclone))

static volatile int sink;

NI int level3(int x) {
    sink++;
    if (x > 0) throw std::runtime_error("boom");
    return x;
}
NI int level2(int x) {
    int r = level3(x);
    sink++;
    return r + 1;
}
NI int level1(int x) {
    int r = level2(x);
    sink++;
    return r + 1;
}

int main() {
    int caught = 0;
    for (int i = 0; i < 3; i++) {
        try {
            level1(i + 1);
        } catch (const std::exception &e) {
            caught++;
            std::printf("caught %s %d\n", e.what(), i);
        }
    }
    std::printf("level1(0) = %d\n", level1(0));
    return caught;
}
