/* calls.c - the target of benches/trace/call_cost.sh: main calls f(i) N
 * times (argv[1]). f is a real function (not inlined, 5 bytes of nops at
 * its entry from -fpatchable-function-entry=5, which uftrace's dynamic
 * patching uses), so every tracer sees N calls of f, each an entry and a
 * return. */
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) long f(long i)
{
    sink += i;
    return i;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < n; i++)
        f(i);
    return 0;
}
