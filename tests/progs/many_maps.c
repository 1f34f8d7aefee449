/* many_maps.c - more readable memory than `wprobe bench` copies from a
 * hit (64 MiB): 320 separate 256 KiB mappings (80 MiB; alternating
 * protections keep the kernel from merging them), each holding the marker
 * 0x5EEDC0DE at its middle. Then probe_low(lowest, highest) and
 * probe_high(highest) are called once each. */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#define REGIONS 320
#define SIZE (256 * 1024)

__attribute__((noinline)) long probe_low(char *low, char *high)
{
    return low[0] + high[0];
}

__attribute__((noinline)) long probe_high(char *high)
{
    return high[0];
}

int main(void)
{
    char *low = (char *)UINTPTR_MAX, *high = 0;
    for (int i = 0; i < REGIONS; i++) {
        char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        *(uint64_t *)(p + SIZE / 2) = 0x5EEDC0DE;
        if (i % 2 && mprotect(p, SIZE, PROT_READ) != 0) {
            perror("mprotect");
            return 1;
        }
        low = p < low ? p : low;
        high = p > high ? p : high;
    }
    long r = probe_low(low, high) + probe_high(high);
    printf("%ld\n", r);
    return 0;
}
