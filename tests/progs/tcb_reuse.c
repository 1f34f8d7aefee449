// Threads created and joined one after another, so that glibc hands each
// new thread the previous one's stack and TCB (the same thread pointer)
// with a new tid. Each prints "ROUND TID THREAD_POINTER" and calls
// f(ROUND) three times.
// usage: tcb_reuse ROUNDS
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long f(long i) {
    asm volatile("");
    return i + 1;
}

static void *worker(void *a) {
    long r = (long)a;
    printf("%ld %d %p\n", r, gettid(), (void *)pthread_self());
    fflush(stdout);
    for (int i = 0; i < 3; i++) f(r);
    return 0;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10;
    for (long r = 0; r < rounds; r++) {
        pthread_t t;
        pthread_create(&t, 0, worker, (void *)r);
        pthread_join(t, 0);
    }
    return 0;
}
