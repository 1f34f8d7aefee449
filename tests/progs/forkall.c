#include "redirect.h"
// Fork children that call target() while their parent does not wait.
//   forkall K M [J]  forks K children at once, each calls target(i) M times
//                    (with J, each child first forks J children of its own
//                    that do the same, and waits for them); the parent waits
//                    for them all and prints how many exited 0.
//   forkall daemon N double fork (the launched process exits at once, its
//                    child too); the grandchild, in a new session, waits
//                    until its parent is gone, calls target(i) N times and
//                    exits.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}

static int calls(long m) {
    long s = 0;
    for (long i = 0; i < m; i++) s += target(i);
    return s == m * (m + 1) / 2 ? 0 : 1;
}

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    if (argc > 2 && strcmp(argv[1], "daemon") == 0) {
        long n = atol(argv[2]);
        pid_t p = fork();
        if (p < 0) return 2;
        if (p > 0) return 0; /* the launched process exits at once */
        setsid();
        pid_t parent = getpid();
        pid_t q = fork();
        if (q < 0) _exit(2);
        if (q > 0) _exit(0);
        /* The grandchild: works once its parent is gone (the launched
           process exited before that parent did). */
        while (getppid() == parent) usleep(1000);
        usleep(100000);
        _exit(calls(n));
    }
    int k = argc > 1 ? atoi(argv[1]) : 10;
    long m = argc > 2 ? atol(argv[2]) : 100;
    int j = argc > 3 ? atoi(argv[3]) : 0;
    for (int c = 0; c < k; c++) {
        pid_t p = fork();
        if (p < 0) return 2;
        if (p == 0) {
            for (int g = 0; g < j; g++) {
                pid_t q = fork();
                if (q < 0) _exit(2);
                if (q == 0) _exit(calls(m));
            }
            int bad = calls(m), st;
            while (wait(&st) > 0)
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
            _exit(bad);
        }
    }
    int ok = 0, st;
    while (wait(&st) > 0)
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    printf("ok=%d\n", ok);
    return 0;
}
