/* ctorlib.c - a shared library whose constructor calls its own exported
 * function, before the program that links it reaches its entry point. */
#include <stdlib.h>

__attribute__((noinline)) long ctor_target(long i) {
    __asm__ volatile("" ::: "memory");
    return i + 1;
}

long ctor_sum;

__attribute__((constructor)) static void init(void) {
    const char *n = getenv("CTOR_CALLS");
    long calls = n ? atol(n) : 3;
    for (long i = 0; i < calls; i++) ctor_sum += ctor_target(i);
}
