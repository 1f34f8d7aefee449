// A thread asleep in epoll_wait(2) while main calls tick() every
// millisecond until SIGUSR1 (which only main takes), then wakes it through
// an eventfd. epoll_wait fails with EINTR whenever its thread is stopped by
// a tracer (signal(7)), even without a signal handler: the thread says so
// on stdout, so a test can tell whether attaching and detaching disturbed
// it.
// usage: epoll_waiter  -> "ready\n" ... "woken\n" "done\n"
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static int ep, ev;
static volatile sig_atomic_t stop;

static void on_usr1(int s) {
    (void)s;
    stop = 1;
}

__attribute__((noinline)) long tick(long i) {
    asm volatile("");
    return i + 1;
}

static void *waiter(void *arg) {
    (void)arg;
    struct epoll_event got;
    for (;;) {
        int n = epoll_wait(ep, &got, 1, -1);
        if (n < 0) {
            printf("EINTR\n");
            fflush(stdout);
            continue;
        }
        printf("woken\n");
        fflush(stdout);
        return 0;
    }
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    ep = epoll_create1(0);
    ev = eventfd(0, 0);
    struct epoll_event want = {.events = EPOLLIN, .data.fd = ev};
    epoll_ctl(ep, EPOLL_CTL_ADD, ev, &want);
    // The waiter inherits SIGUSR1 blocked: main alone takes it.
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, 0);
    pthread_t t;
    pthread_create(&t, 0, waiter, 0);
    signal(SIGUSR1, on_usr1);
    pthread_sigmask(SIG_UNBLOCK, &usr1, 0);
    printf("ready\n");
    fflush(stdout);
    for (long i = 0; !stop; i = tick(i))
        usleep(1000);
    uint64_t one = 1;
    if (write(ev, &one, sizeof one) != sizeof one)
        return 1;
    pthread_join(t, 0);
    printf("done\n");
    return 0;
}
