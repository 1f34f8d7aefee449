// Spawns short-lived threads in a tight loop (strace many_looping_threads):
// each calls target() and exits. usage: spawner [THREADS_ALIVE]
#include "redirect.h"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}
static void *worker(void *a) {
    for (long i = 0; i < 100; i++) target(i);
    return a;
}
int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    int alive = argc > 1 ? atoi(argv[1]) : 8;
    pthread_t t[64];
    for (long round = 0;; round++) {
        for (int k = 0; k < alive; k++) pthread_create(&t[k], 0, worker, 0);
        for (int k = 0; k < alive; k++) pthread_join(t[k], 0);
        target(-1);
    }
}
