/* fib.c - the recursive shape of benches/trace/percall.sh: fib(N) of
 * argv[1] (default 20) by plain double recursion, 2 fib(N+1) - 1 calls at
 * -O0; gcc -O2 keeps one recursive call and loops over the other (fewer
 * calls, each shorter: the tracers count them). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long fib(long n)
{
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20;
    printf("%ld\n", fib(n));
    return 0;
}
