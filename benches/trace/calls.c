/* calls.c - the target of benches/trace/call_cost.sh: main calls f(i) N
 * times (argv[1]). f is a real function (not inlined, 5 bytes of nops at
 * its entry from -fpatchable-function-entry=5, which uftrace's dynamic
 * patching uses), so every tracer sees N calls of f, each an entry and a
 * return. With a second argument `time`, it prints on stderr what its loop
 * took per call (wall, from the monotonic clock around the loop) and the
 * process's CPU per call so far (getrusage): the traced program's own view,
 * used for quick comparisons (docs/BENCHMARKS.md, "wprobe trace"). With
 * -DSHORT_F, f is too short for a jump (below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

volatile long sink;

#ifdef SHORT_F
/* Built with -DSHORT_F: f is 4 bytes (lea, ret), too short for the jump
 * of --transport inproc, which puts an int3 at its entry and at its ret
 * instead (a ptrace stop each). noipa: the calls stay, though f has no
 * side effect. */
__attribute__((noinline, noipa)) int f(int i)
{
    return i + 1;
}
#else
__attribute__((noinline)) long f(long i)
{
    sink += i;
    return i;
}
#endif

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    int timed = argc > 2 && !strcmp(argv[2], "time");
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        f(i);
    if (timed && n > 0) {
        double wall = now_ns() - t0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
                     (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
        fprintf(stderr, "loop: %.1f ns/call wall, process cpu %.1f ns/call\n", wall / n,
                cpu / n);
    }
    return 0;
}
