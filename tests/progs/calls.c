#include "redirect.h"
// Tracee for the ptrace provider tests: THREADS threads each call target(i)
// for i in 0..N, then the program prints a checksum. Optional DELAY_US
// between calls (for attach and job-control tests); N = 0 means forever.
// usage: calls N [THREADS] [DELAY_US]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long n_calls;
static long delay_us;

__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i * 3 + 1;
}

// Called once, after every thread has finished: a probe point for
// reading what handlers accumulated.
__attribute__((noinline)) void report(unsigned long long total) {
    asm volatile("" : : "r"(total));
}

static void *worker(void *arg) {
    unsigned long long sum = 0;
    for (long i = 0; n_calls == 0 || i < n_calls; i++) {
        sum += target(i);
        if (delay_us) usleep(delay_us);
    }
    return (void *)(unsigned long)sum;
}

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    n_calls = argc > 1 ? atol(argv[1]) : 1000;
    long threads = argc > 2 ? atol(argv[2]) : 1;
    delay_us = argc > 3 ? atol(argv[3]) : 0;
    pthread_t t[64];
    unsigned long long total = 0;
    if (threads <= 1) {
        total = (unsigned long)worker(NULL);
    } else {
        for (long k = 0; k < threads; k++) pthread_create(&t[k], NULL, worker, NULL);
        for (long k = 0; k < threads; k++) {
            void *r;
            pthread_join(t[k], &r);
            total += (unsigned long)r;
        }
    }
    report(total);
    printf("sum=%llu\n", total);
    return 0;
}
