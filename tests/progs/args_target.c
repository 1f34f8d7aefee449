/* args_target.c - calls work(i, 7, msg) for i = 0..N-1 (argv[1], default 3).
 * Built in several ways by the tests (PIE or not, -O0 or -O2, with or
 * without CET) to check probe resolution and the step-over paths. */
#include <stdio.h>
#include <stdlib.h>

static const char msg[] = "hi";
volatile long acc;

__attribute__((noinline)) long work(long a, long b, const char *s)
{
    acc += a * b + s[0];
    __asm__ volatile("" ::: "memory");
    return acc;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3;
    for (long i = 0; i < n; i++)
        work(i, 7, msg);
    printf("acc=%ld\n", acc);
    return 0;
}
