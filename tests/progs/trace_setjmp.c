// Target of the setjmp test (uftrace's s-longjmp shape): main calls
// setjmp, foo longjmps back, then main calls bar(1) = -1. Exits 0.
#include <setjmp.h>

#define NI __attribute__((noinline, noclone))

static jmp_buf env;

NI int foo(void) {
    longjmp(env, 1);
    return 0;
}

NI int bar(int a) { return a - 2; }

int main(int argc, char **argv) {
    (void)argv;
    int ret;
    if (!setjmp(env))
        ret = foo();
    else
        ret = bar(argc);
    return !(ret == -1);
}
