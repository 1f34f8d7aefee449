#include "redirect.h"
// Calls target() 10 times, then re-execs itself (from the main thread, or
// from a second thread with "thread") with stage 1, which calls target()
// 10 times again. usage: execer [0|1] [thread]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char *self;
__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}
static void *do_exec(void *arg) {
    execl(self, self, "1", (char *)0);
    perror("execl");
    exit(2);
}
int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    self = argv[0];
    int stage = argc > 1 ? atoi(argv[1]) : 0;
    long s = 0;
    for (long i = 0; i < 10; i++) s += target(i);
    if (stage == 0) {
        if (argc > 2) {
            pthread_t t;
            pthread_create(&t, NULL, do_exec, NULL);
            for (;;) pause();
        }
        do_exec(NULL);
    }
    printf("stage1 sum=%ld\n", s);
    return 0;
}
