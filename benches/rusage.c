/* rusage.c - run a command and print "WALL_NS CPU_NS" on fd 3 (or on
 * stdout when fd 3 is not open): the wall time from fork to reap (monotonic
 * clock) and the user + system CPU time of the command and every process
 * it waited for (wait4's rusage: a tracer and its traced target, a tool and
 * its handler threads), in nanoseconds with microsecond resolution. The
 * command's own stdout and stderr are left alone; the exit status is passed
 * on (128 + signal for a signal), and an interrupt (Ctrl-C) too: rusage then
 * dies of SIGINT after the command has ended.
 *
 * usage: rusage CMD [ARGS...]   (used by benches/compare) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;
static void on_int(int sig) { (void)sig; interrupted = 1; }

static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }
static long long tv(struct timeval t) { return t.tv_sec * 1000000000LL + t.tv_usec * 1000LL; }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CMD [ARGS...]\n", argv[0]);
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        close(3);
        execvp(argv[1], argv + 1);
        perror(argv[1]);
        _exit(127);
    }
    /* Ctrl-C reaches the whole foreground group: let the command handle it
     * and end, then die of SIGINT ourselves, so that the calling shell sees
     * an interrupted command (not a normal exit) and stops too. */
    signal(SIGINT, on_int);
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("wait4");
            return 2;
        }
    }
    if (interrupted || (WIFSIGNALED(st) && WTERMSIG(st) == SIGINT)) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    FILE *out = fdopen(3, "w");
    if (!out)
        out = stdout;
    fprintf(out, "%lld %lld\n", ns(b) - ns(a), tv(ru.ru_utime) + tv(ru.ru_stime));
    fclose(out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
