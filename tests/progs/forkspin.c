// forkspin K: calls target() in a loop (a 1 ms nap every 1000 calls);
// at each SIGUSR1 it forks K children that do the same (and print their
// pids, one per line, on standard output). Every process runs until it is
// killed. forkspin K PROG: the children execute PROG (as `PROG 0`)
// instead.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t go;

__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}

static void on_usr1(int sig) {
    (void)sig;
    go = 1;
}

static void spin(void) {
    for (long i = 0;; i++) {
        target(i);
        if (i % 1000 == 0) usleep(1000);
        if (go == 1) return;
    }
}

int main(int argc, char **argv) {
    int k = argc > 1 ? atoi(argv[1]) : 2;
    signal(SIGUSR1, on_usr1);
    for (;;) {
        spin();
        go = 0;
        for (int c = 0; c < k; c++) {
            pid_t p = fork();
            if (p == 0 && argc > 2) {
                execl(argv[2], argv[2], "0", (char *)0);
                _exit(127);
            }
            if (p == 0) {
                for (;;) {
                    spin();
                    go = 0;
                }
            }
            printf("%d\n", (int)p);
            fflush(stdout);
        }
    }
}
