// The in-process transport's process-model target. usage:
//   inproc_target threads N M [linger]  N threads (created and joined) x M calls of target()
//   inproc_target fork M        M calls, fork: the child M calls, then the parent M
//   inproc_target exec M [linger]  M calls, then exec of `inproc_target threads 1 M`
//                               (lingering 0.5 s before exiting with `linger`)
//   inproc_target handover M    M calls on the main thread alone, then M more on it
//                               while a second thread makes M calls (the hits'
//                               store changes hands while the first thread is busy)
//   inproc_target signals M     own SIGSEGV and SIGTRAP handlers: a raised SIGTRAP,
//                               an int3, a SIGSEGV recovered by siglongjmp, M calls;
//                               prints whether its handlers are still its own
// Prints what it did; the sums are checked by the tests.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}

// Called once, after every thread was joined (a probe there sees the end).
__attribute__((noinline)) long done(long total) {
    asm volatile("");
    return total;
}

static long m;
static void *worker(void *a) {
    long s = 0;
    for (long i = 0; i < m; i++) s += target(i);
    *(long *)a = s;
    return 0;
}

static long calls(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += target(i);
    return s;
}

static volatile long segv, trap;
static sigjmp_buf jb;
static void on_segv(int s) { segv++; siglongjmp(jb, 1); }
static void on_trap(int s) { trap++; }

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) return 2;
    if (!strcmp(argv[1], "threads")) {
        int n = atoi(argv[2]);
        m = atol(argv[3]);
        pthread_t t[256];
        long sums[256], total = 0;
        for (int k = 0; k < n; k++) pthread_create(&t[k], 0, worker, &sums[k]);
        for (int k = 0; k < n; k++) { pthread_join(t[k], 0); total += sums[k]; }
        printf("threads %d sum %ld\n", n, done(total));
        if (argc > 4) usleep(500000);
    } else if (!strcmp(argv[1], "handover")) {
        m = atol(argv[2]);
        long total = calls(m), second = 0;
        pthread_t t;
        pthread_create(&t, 0, worker, &second);
        total += calls(m);
        pthread_join(t, 0);
        printf("handover sum %ld\n", done(total + second));
    } else if (!strcmp(argv[1], "fork")) {
        long n = atol(argv[2]);
        long s = calls(n);
        pid_t c = fork();
        if (c == 0) {
            printf("child sum %ld\n", calls(n));
            fflush(stdout);
            _exit(0);
        }
        int st;
        waitpid(c, &st, 0);
        printf("parent sum %ld child status %d\n", s + calls(n), WEXITSTATUS(st));
    } else if (!strcmp(argv[1], "exec")) {
        printf("before exec sum %ld\n", calls(atol(argv[2])));
        fflush(stdout);
        execl("/proc/self/exe", argv[0], "threads", "1", argv[2], argc > 3 ? argv[3] : (char *)0,
              (char *)0);
        perror("execl");
        return 1;
    } else if (!strcmp(argv[1], "signals")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv;
        sigaction(SIGSEGV, &sa, 0);
        sa.sa_handler = on_trap;
        sigaction(SIGTRAP, &sa, 0);
        long s = calls(atol(argv[2]) / 2);
        raise(SIGTRAP);
        asm volatile("int3");
        if (!sigsetjmp(jb, 1)) *(volatile long *)8 = 1;
        s += calls(atol(argv[2]) - atol(argv[2]) / 2);
        struct sigaction now;
        sigaction(SIGSEGV, 0, &now);
        int own = now.sa_handler == on_segv;
        sigaction(SIGTRAP, 0, &now);
        own &= now.sa_handler == on_trap;
        stack_t ss;
        sigaltstack(0, &ss);
        printf("signals segv %ld trap %ld sum %ld own handlers %d altstack %d\n", segv, trap, s,
               own, !(ss.ss_flags & SS_DISABLE));
    }
    return 0;
}
