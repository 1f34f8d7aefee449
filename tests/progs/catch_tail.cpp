// Target of the trace tests of a catch block that ends in a tail call
// out of the module: at -O2 `catcher`'s catch block (in `catcher.cold`)
// ends in `jmp __cxa_end_catch@plt`, whose return leads through
// libgcc's `_Unwind_DeleteException` and its jump through a pointer (to
// the exception's cleanup, whose `ret`s no decoding finds); and
// `dispatch` tail-calls `catcher` (`jmp catcher`), as uftrace's
// s-exception3 `catch_exc` tail-calls `bar`. Called once through
// `dispatch`, once directly; then a call after. Exits 0.
#define NI __attribute__((noinline, noclone))

struct Exc {};

static volatile int sink;

NI void thrower() { throw Exc(); }

NI void handled() { sink++; }

struct Guard {
    NI Guard();
    NI ~Guard();
};
Guard::Guard() { sink++; }
Guard::~Guard() { sink--; }

NI void catcher() {
    try {
        Guard g;
        thrower();
    } catch (const Exc &) {
        handled();
    }
}

NI void dispatch(int i) {
    if (i == 1)
        catcher();
    else
        handled();
}

int main() {
    dispatch(1);
    catcher();
    handled();
    return sink == 3 ? 0 : 1;
}
