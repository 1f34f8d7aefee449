/* loop_target.c - calls hit(i) N times (argv[1], default 100000) and prints
 * a checksum, so traced and untraced runs can be compared. Built with
 * -O0 -fno-omit-frame-pointer -fcf-protection=none: hit() starts with
 * push %rbp (0x55), the instruction both tracers emulate. */
#include <stdio.h>
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) void hit(long i)
{
    sink += i;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    for (long i = 0; i < n; i++)
        hit(i);
    printf("checksum=%ld\n", sink);
    return 0;
}
