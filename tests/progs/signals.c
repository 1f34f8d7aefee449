#include "redirect.h"
// Signals under tracing: a sibling process sends N SIGUSR1 (each acknowledged
// by the handler through a pipe), a SIGALRM interval timer runs, the program
// raises SIGTRAP and runs its own int3 (handled by its own handler), while
// the main thread calls target(). Prints the counts. usage: signals N
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long usr1, alrm, trap;
static int ack[2];
__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}
static void on_usr1(int s) { usr1++; char b = 1; write(ack[1], &b, 1); }
static void on_alrm(int s) { alrm++; }
static void on_trap(int s) { trap++; }

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 1000;
    pipe(ack);
    struct sigaction sa = {0};
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_usr1; sigaction(SIGUSR1, &sa, 0);
    sa.sa_handler = on_alrm; sigaction(SIGALRM, &sa, 0);
    sa.sa_handler = on_trap; sigaction(SIGTRAP, &sa, 0);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, 0);
    pid_t parent = getpid();
    pid_t kid = fork();
    if (kid == 0) {
        for (long i = 0; i < n; i++) {
            char b;
            kill(parent, SIGUSR1);
            if (read(ack[0], &b, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    long calls = 0;
    for (int k = 0; k < 100; k++) {
        raise(SIGTRAP);
        asm volatile("int3");
        target(k);
        calls++;
    }
    int st;
    while (waitpid(kid, &st, WNOHANG) == 0) { target(calls); calls++; }
    it.it_value.tv_usec = 0; it.it_interval.tv_usec = 0;
    setitimer(ITIMER_REAL, &it, 0);
    printf("usr1=%ld trap=%ld calls=%ld alrm_pos=%d kid=%d\n", usr1, trap, calls, alrm > 0, WEXITSTATUS(st));
    return 0;
}
