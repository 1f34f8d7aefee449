/* selfref.c - functions that take their own address, as code comparing a
 * callback with itself does (CPython's subtype_traverse walks base types
 * while their tp_traverse is itself): `lea reg, [rip - k]` naming the
 * function's first instruction, inside the window a probe's jump
 * replaces. Prints 2 * N (argv[1], default 3) when every comparison holds. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int is_self(void *p)
{
    return p == (void *)is_self;
}

__attribute__((noinline)) long self_addr(void)
{
    return (long)self_addr;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    int (*volatile f)(void *) = is_self;
    long s = 0;
    for (int i = 0; i < n; i++)
        s += f((void *)is_self) + (self_addr() == (long)self_addr);
    printf("%ld\n", s);
    return 0;
}
