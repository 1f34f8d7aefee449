#include "redirect.h"
// Hardware watchpoint targets: THREADS threads each write g_counter-like
// globals N times; also reads g_read N times. usage: watch N [THREADS]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
volatile long g_write;
volatile long g_read = 7;
volatile long g_shared;
static long n;
__attribute__((noinline)) long watched_fn(long i) { asm volatile(""); return i; }
static void *worker(void *a) {
    for (long i = 0; i < n; i++) __atomic_fetch_add(&g_shared, 1, __ATOMIC_RELAXED);
    return 0;
}
int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    n = argc > 1 ? atol(argv[1]) : 100;
    long threads = argc > 2 ? atol(argv[2]) : 0;
    long s = 0;
    for (long i = 0; i < n; i++) { g_write = i + 1; s += g_read; s += watched_fn(i); }
    pthread_t t[16];
    for (long k = 0; k < threads; k++) pthread_create(&t[k], 0, worker, 0);
    for (long k = 0; k < threads; k++) pthread_join(t[k], 0);
    printf("s=%ld shared=%ld\n", s, g_shared);
    return 0;
}
