/* The semaphore-gated probe of usdt_demo.c (see there). */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short demo_gated_semaphore __attribute__((unused, section(".probes")));
__attribute__((noinline)) void gated(long x) {
    if (demo_gated_semaphore)
        DTRACE_PROBE1(demo, gated, x * 10);
}
