/* ifunc.c - f is an IFUNC: its resolver picks impl_b at load time (the
 * dynamic linker stores the choice in f's IRELATIVE slot). Calls f(i) for
 * i < N (argv[1], default 10) and prints the sum (i + 2 each). A probe on
 * `f` must fire in impl_b at every call, not once in the resolver. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static long impl_a(long x) { return x + 1; }
__attribute__((noinline)) static long impl_b(long x) { return x + 2; }

static long (*resolve_f(void))(long)
{
    return impl_b;
}

long f(long x) __attribute__((ifunc("resolve_f")));

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10, s = 0;
    for (long i = 0; i < n; i++)
        s += f(i);
    printf("sum=%ld unused=%p\n", s, (void *)impl_a);
    return 0;
}
