// Target of the `.cold` fragment test: built with -O2, GCC moves the
// unlikely branches of work() and main() into `work.cold` and `main.cold`,
// entered by jumps, never by calls. work(-1) takes its cold branch, which
// calls report(). Writes "odd -1" to stderr and exits 0.
#include <stdio.h>

#define NI __attribute__((noinline, noclone))

static volatile long sink;

// Not a tail call to fprintf (every transport traces it).
__attribute__((cold, noinline)) int report(int x) {
    fprintf(stderr, "odd %d\n", x);
    sink += 1;
    return x + 8;
}

NI int work(int x) {
    if (__builtin_expect(x < 0, 0)) {
        sink += report(x);
        return -x;
    }
    sink += x;
    return x * 2;
}

int main(int argc, char **argv) {
    (void)argv;
    int s = 0;
    for (int i = -1; i < 3; i++) s += work(i);
    if (__builtin_expect(argc > 5, 0)) {
        report(argc);
        return 3;
    }
    return s == 7 ? 0 : 1;
}
