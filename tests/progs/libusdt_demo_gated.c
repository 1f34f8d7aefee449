/* The semaphore-gated probe of libusdt_demo.c. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short demolib_gated_semaphore __attribute__((unused, section(".probes")));
__attribute__((noinline)) void lib_gated(long k) {
    if (demolib_gated_semaphore)
        DTRACE_PROBE1(demolib, gated, k * 100);
}
