/* slow_target.c - calls work(i) every 2 ms for N iterations (argv[1],
 * default 500), then prints a checksum: long enough to attach to, detach
 * from, and check that it finished unharmed. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long acc;

__attribute__((noinline)) void work(long i)
{
    acc += i;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 500;
    for (long i = 0; i < n; i++) {
        work(i);
        usleep(2000);
    }
    printf("acc=%ld\n", acc);
    return 0;
}
