/* The dlopen'ed library of usdt_demo.c: a probe without a semaphore here,
 * one with a semaphore in libusdt_demo_gated.c. */
#include <sys/sdt.h>
long lib_static = 1234;
void lib_gated(long k);
void lib_fire(long k) {
    DTRACE_PROBE2(demolib, plain, k, lib_static);
    lib_gated(k);
}
