// Watchpoint and transport-comparison target. usage: wtarget N [THREADS] [LINGER_MS]
// - writes g_value = 1..N, each store from %rax (handlers log rax: the
//   written value, under ptrace and perf alike);
// - calls watched_fn(i) N times (x watchpoints, uprobes);
// - THREADS threads each add 1 to g_shared N times;
// - lingers LINGER_MS before printing (keeps live memory readable).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
volatile long g_value;
volatile long g_shared;
volatile long g_pad[4];
static long n;
__attribute__((noinline)) long watched_fn(long i) {
    asm volatile("");
    return i * 2;
}
static void *worker(void *a) {
    (void)a;
    for (long i = 0; i < n; i++) __atomic_fetch_add(&g_shared, 1, __ATOMIC_RELAXED);
    return 0;
}
int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 100;
    long threads = argc > 2 ? atol(argv[2]) : 0;
    long linger = argc > 3 ? atol(argv[3]) : 0;
    long s = 0;
    for (long i = 1; i <= n; i++) {
        __asm__ volatile("movq %%rax, %0" : "=m"(g_value) : "a"(i));
        s += watched_fn(i);
    }
    pthread_t t[16];
    if (threads > 16) threads = 16;
    for (long k = 0; k < threads; k++) pthread_create(&t[k], 0, worker, 0);
    for (long k = 0; k < threads; k++) pthread_join(t[k], 0);
    if (linger) usleep(linger * 1000);
    printf("s=%ld shared=%ld value=%ld\n", s, g_shared, g_value);
    return 0;
}
