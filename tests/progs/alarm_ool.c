// A probed function whose first instruction is RIP-relative (it runs out
// of line under ptrace), called N times while a SIGALRM interval timer
// fires every 200 µs (or PERIOD_US): a signal often arrives while a hit's displaced
// instruction is about to run. Prints how many calls the function counted
// and the sum of its results. usage: alarm_ool [>OUT] N [PERIOD_US]
#include "redirect.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

long calls;
static volatile long alarms;
long counted(long);
asm(".text\n.globl counted\n.type counted,@function\ncounted:\n"
    " incq calls(%rip)\n lea 1(%rdi),%rax\n ret\n.size counted, .-counted\n");

static void on_alarm(int s) { (void)s; alarms++; }

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 20000;
    long period = argc > 2 ? atol(argv[2]) : 200;
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, period}, {0, period}};
    setitimer(ITIMER_REAL, &it, 0);
    long sum = 0;
    for (long i = 0; i < n; i++) sum += counted(i);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    printf("calls=%ld sum=%ld alarms>0=%d\n", calls, sum, alarms > 0);
    return 0;
}
