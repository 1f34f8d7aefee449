/* wloop.c - writes the global `watched` N times (argv[1], default 100000)
 * and prints a checksum: the target of the watchpoint measurements. */
#include <stdio.h>
#include <stdlib.h>

volatile long watched;

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long s = 0;
    for (long i = 0; i < n; i++) {
        watched = i;
        s += i;
    }
    printf("checksum=%ld\n", s + watched);
    return 0;
}
