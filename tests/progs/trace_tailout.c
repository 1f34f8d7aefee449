/* trace_tailout.c - calls that leave by a tail call into code that is not
 * traced (the test runs `wprobe trace -X leaf -X k`): `f` always (an
 * indirect `jmp`, no `ret` at all), `g` on odd arguments (its even ones
 * return through its `ret`). `k`, not traced either, calls `h` at the
 * depth of `main`'s own calls, where the slot of the unseen return's
 * frame now holds `k`'s return address. Prints the sum, 72 for N = 4
 * (argv[1]). Built -O2: `f` and `g` must end in the tail jumps. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int leaf(int x)
{
    asm volatile("");
    return x * 3;
}

int (*volatile fp)(int) = leaf;

__attribute__((noinline)) int f(int x)
{
    return fp(x + 1);
}

__attribute__((noinline)) int g(int x)
{
    if (x & 1)
        return fp(x);
    return x + 5;
}

__attribute__((noinline)) int h(int x)
{
    asm volatile("");
    return x + 2;
}

__attribute__((noinline)) int k(int x)
{
    return h(x) + 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long s = 0;
    for (int i = 0; i < n; i++) {
        s += f(i);
        s += g(i);
        s += k(i);
    }
    printf("%ld\n", s);
    return 0;
}
