#include "redirect.h"
// Tracee of the return-probe tests: every way a call can end. Built with
// -O1 -fno-optimize-sibling-calls so that the C functions make real calls
// (the tail call is written in assembly); each mode prints what it
// computed, so that a traced run can be compared with an untraced one.
//
// usage: retprobe [>OUT] MODE...   MODE: calls sleep rec mutual tail
//                                        longjmp signal threads fork all
//                                        exec napsN[,MS] (N naps of MS ms,
//                                        100 by default)
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

// Known calls: add3(a, b, c) = a + b + c.
NOINLINE long add3(long a, long b, long c) {
    asm volatile("");
    return a + b + c;
}

// Sleeps `ms` milliseconds; returns ms.
NOINLINE long sleeper(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return ms;
}

// Recursion: rec(n) calls rec(n - 1) down to rec(1); returns n(n+1)/2.
NOINLINE long rec(long n) {
    if (n <= 1) return 1;
    return n + rec(n - 1);
}

// Mutual recursion: is_even(n) / is_odd(n) alternate down to 0.
NOINLINE long is_odd(long n);
NOINLINE long is_even(long n) {
    if (n == 0) return 1;
    return is_odd(n - 1);
}
NOINLINE long is_odd(long n) {
    if (n == 0) return 0;
    return is_even(n - 1);
}

// A tail call: tailer(a, b, c) adds 100 to a and jumps to add3, which
// returns to tailer's caller.
long tailer(long a, long b, long c);
__asm__(
    ".text\n"
    ".globl tailer\n"
    ".type tailer, @function\n"
    "tailer:\n"
    "    addq $100, %rdi\n"
    "    jmp add3\n"
    ".size tailer, .-tailer\n");

// longjmp out of traced frames: jumper(n) recurses to 0, then jumps back.
static jmp_buf jb;
NOINLINE long jumper(long n) {
    if (n == 0) longjmp(jb, 1);
    return jumper(n - 1) + 1;
}

// A signal delivered during a traced call, with a traced handler that
// makes a traced call.
static volatile long handled;
NOINLINE long in_handler(long s) {
    asm volatile("");
    return s * 2;
}
NOINLINE void on_signal(int s) { handled += in_handler(s); }
NOINLINE long with_signal(long x) {
    raise(SIGUSR1);
    return x + handled;
}

// exec while a traced call is live: execer(path) runs `path calls`.
NOINLINE long execer(const char *path) {
    fflush(stdout);
    execl(path, path, "calls", (char *)NULL);
    return -1;
}

// A slow loop for attaching: n calls of sleeper(ms), one line each.
static void naps(long n, long ms) {
    for (long i = 0; i < n; i++) {
        printf("nap %ld %ld\n", i, sleeper(ms));
        fflush(stdout);
    }
}

static void *worker(void *arg) {
    long id = (long)arg, sum = 0;
    for (long i = 0; i < 50; i++) sum += add3(id, i, 1000);
    sum += rec(4);
    return (void *)sum;
}

static void mode(const char *m) {
    if (!strcmp(m, "calls")) {
        long s = 0;
        for (long i = 0; i < 3; i++) s += add3(i, 10 * i, 100);
        printf("calls %ld\n", s);
    } else if (!strcmp(m, "sleep")) {
        printf("sleep %ld\n", sleeper(10));
    } else if (!strcmp(m, "rec")) {
        long s = 0;
        for (int i = 0; i < 2; i++) s += rec(5);
        printf("rec %ld\n", s);
    } else if (!strcmp(m, "mutual")) {
        printf("mutual %ld %ld\n", is_even(6), is_even(3));
    } else if (!strcmp(m, "tail")) {
        printf("tail %ld\n", tailer(1, 2, 3));
    } else if (!strcmp(m, "longjmp")) {
        int jumps = 0;
        for (int i = 0; i < 3; i++)
            if (setjmp(jb) == 0)
                jumper(3);
            else
                jumps++;
        printf("longjmp %d %ld\n", jumps, add3(1, 1, 1));
    } else if (!strcmp(m, "signal")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGUSR1, &sa, NULL);
        long a = with_signal(1);
        long b = with_signal(2);
        printf("signal %ld %ld\n", a, b);
    } else if (!strcmp(m, "threads")) {
        pthread_t t[4];
        long total = 0;
        for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
        for (int i = 0; i < 4; i++) {
            void *r;
            pthread_join(t[i], &r);
            total += (long)r;
        }
        printf("threads %ld\n", total);
    } else if (!strcmp(m, "fork")) {
        fflush(stdout);
        long before = add3(1, 2, 3);
        pid_t c = fork();
        if (c == 0) {
            long s = add3(7, 8, 9) + rec(3);
            printf("child %ld\n", s);
            fflush(stdout);
            _exit(0);
        }
        int st = 0;
        waitpid(c, &st, 0);
        printf("parent %ld %d\n", before + add3(4, 5, 6), WEXITSTATUS(st));
    } else if (!strcmp(m, "exec")) {
        printf("exec %ld\n", execer("/proc/self/exe"));
    } else if (!strncmp(m, "naps", 4)) {
        const char *ms = strchr(m, ',');
        naps(atol(m + 4), ms ? atol(ms + 1) : 100);
    } else {
        printf("unknown mode %s\n", m);
        exit(2);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    const char *all[] = {"calls", "sleep", "rec",     "mutual", "tail",
                         "longjmp", "signal", "threads", "fork"};
    if (argc < 2 || !strcmp(argv[1], "all")) {
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) mode(all[i]);
    } else {
        for (int i = 1; i < argc; i++) mode(argv[i]);
    }
    return 3;
}
