// Four worker threads that exist before a tracer attaches, asleep until
// main reads a number N from stdin; then each calls work(i) N times, main
// waits for all four and prints "sum S" (S over every call), and they go
// back to sleep. EOF ends the program. Lets a test attach to a
// multi-threaded process and count calls exactly.
// usage: gated_threads  (stdin: one N per line)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4

__attribute__((noinline)) long work(long i) {
    asm volatile("");
    return i + 1;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static long n, round_no, finished, total;

static void *worker(void *arg) {
    (void)arg;
    long seen = 0;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (round_no == seen) pthread_cond_wait(&go, &mu);
        seen = round_no;
        long calls = n;
        pthread_mutex_unlock(&mu);
        if (calls < 0) return 0;
        long s = 0;
        for (long i = 0; i < calls; i++) s += work(i);
        pthread_mutex_lock(&mu);
        total += s;
        finished++;
        pthread_cond_signal(&done);
        pthread_mutex_unlock(&mu);
    }
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], 0, worker, 0);
    printf("ready\n");
    fflush(stdout);
    long want;
    while (scanf("%ld", &want) == 1) {
        pthread_mutex_lock(&mu);
        n = want;
        finished = 0;
        total = 0;
        round_no++;
        pthread_cond_broadcast(&go);
        while (finished < THREADS) pthread_cond_wait(&done, &mu);
        printf("sum %ld\n", total);
        fflush(stdout);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_lock(&mu);
    n = -1;
    round_no++;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], 0);
    return 0;
}
