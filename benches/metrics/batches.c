/* batches.c - calls hit(i) in batches of BATCH calls, one batch every
 * PERIOD_US microseconds (100000 calls every 100 ms: about 1 M calls/s),
 * and writes one line per batch to OUT: "START END WALL CPU", the batch's
 * start and end (CLOCK_REALTIME, ns: comparable with `date +%s%N`), and
 * its cost in nanoseconds per call: wall time (CLOCK_MONOTONIC) and the
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID: not the time another
 * process had the CPU, nor time spent waiting). Built like loop_target.c:
 * hit() starts with push %rbp.
 *
 * usage: batches BATCHES BATCH PERIOD_US OUT */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long sink;

__attribute__((noinline)) void hit(long i)
{
    sink += i;
}

static long long clock_ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s BATCHES BATCH PERIOD_US OUT\n", argv[0]);
        return 2;
    }
    long batches = atol(argv[1]), batch = atol(argv[2]);
    long long period = atoll(argv[3]) * 1000LL;
    FILE *out = fopen(argv[4], "w");
    if (!out || batch <= 0)
        return 2;
    double *wall = calloc(batches, sizeof *wall), *cpu = calloc(batches, sizeof *cpu);
    long long *start = calloc(batches, sizeof *start), *end = calloc(batches, sizeof *end);
    if (!wall || !cpu || !start || !end)
        return 2;
    long long next = now_ns();
    for (long b = 0; b < batches; b++) {
        start[b] = clock_ns(CLOCK_REALTIME);
        long long t0 = now_ns(), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (long i = 0; i < batch; i++)
            hit(i);
        cpu[b] = (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / batch;
        wall[b] = (double)(now_ns() - t0) / batch;
        end[b] = clock_ns(CLOCK_REALTIME);
        next += period;
        long long left = next - now_ns();
        if (left > 0) {
            struct timespec s = {left / 1000000000LL, left % 1000000000LL};
            nanosleep(&s, 0);
        }
    }
    for (long b = 0; b < batches; b++)
        fprintf(out, "%lld %lld %.2f %.2f\n", start[b], end[b], wall[b], cpu[b]);
    fclose(out);
    return 0;
}
