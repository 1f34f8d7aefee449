// Forks K children (default 3); the parent and every child call target()
// forever. Each process prints "pid P" once it runs. Used to check that
// nothing survives when the tracer of a launched command is killed.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}

int main(int argc, char **argv) {
    int k = argc > 1 ? atoi(argv[1]) : 3;
    for (int c = 0; c < k; c++) {
        if (fork() == 0) break;
    }
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    long s = 0;
    for (long i = 0;; i++) {
        s += target(i);
        if (i % 1000 == 0) usleep(100);
    }
    return (int)s;
}
