// A SIGALRM handler that calls the probed function: a timer fires every
// 100 us while main calls f(i) N times (argv[1]), so signals land while a
// hit's handler is running in this thread (in-process transport). Prints
// how many calls each side made.
// usage: reenter N  -> "main N\nsignal S\n"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

static volatile long main_calls, signal_calls;

__attribute__((noinline)) long f(long i) {
    if (i < 0)
        signal_calls++;
    else
        main_calls++;
    return i + 1;
}

static void on_alarm(int s) {
    (void)s;
    f(-1);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval every = {{0, 100}, {0, 100}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, 0);
    for (long i = 0; i < n; i++)
        f(i);
    setitimer(ITIMER_REAL, &off, 0);
    printf("main %ld\nsignal %ld\n", main_calls, signal_calls);
    return 0;
}
