/* fpspin.c - computes in SSE registers for a while (four doubles that stay
 * in registers at -O2 across the whole loop), calling work() now and then
 * so that a probe has a site, then prints the four values: a process
 * whose registers a tracer changed prints other values. argv[1]: the
 * number of iterations. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void work(long i)
{
    __asm__ volatile("" : : "r"(i) : "memory");
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000000;
    double a = 1.0, b = 0.0, c = 3.0, d = 0.5;
    for (long i = 0; i < n; i++) {
        a = a * 1.0000001 + d;
        b += a * 1e-9;
        c = c * 0.9999999 + b;
        d = d * 0.999 + 1e-6;
        if ((i & 0xfffff) == 0)
            work(i);
    }
    printf("%.17g %.17g %.17g %.17g\n", a, b, c, d);
    return 0;
}
