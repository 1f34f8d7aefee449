/* footprint.c - how deep below its stack pointer a call of target() writes
 * on the calling thread's stack (a probe's stub and agent included): the
 * 16 KiB below the caller's rsp (its red zone excepted) are painted, target
 * is called, and the lowest byte that changed is found. Prints that depth
 * for the first call (a first hit: the agent makes the thread's slot and
 * stack) and the most of 1000 later calls; the tests compare it with the
 * same untraced. */
#include <stdio.h>
#include <string.h>

#define SPAN 16384
#define KEEP 256 /* our red zone and the call's return address */

__attribute__((noinline)) long target(long i)
{
    asm volatile("");
    return i + 1;
}

/* Depth below the rsp on entry that one call of target(i) wrote to. */
__attribute__((noinline)) static long depth_of_call(long i)
{
    unsigned char *sp;
    asm volatile("mov %%rsp, %0" : "=r"(sp));
    unsigned char *low = sp - SPAN;
    for (long k = 0; k < SPAN - KEEP; k++)
        ((volatile unsigned char *)low)[k] = 0xa5;
    target(i);
    long k = 0;
    while (k < SPAN - KEEP && ((volatile unsigned char *)low)[k] == 0xa5)
        k++;
    return SPAN - k;
}

int main(void)
{
    long first = depth_of_call(0), most = 0;
    for (long i = 1; i <= 1000; i++) {
        long d = depth_of_call(i);
        if (d > most)
            most = d;
    }
    printf("first %ld later %ld\n", first, most);
    return 0;
}
