/* Target of the metrics tests (runtime/tests/all/metrics.rs): known calls,
 * in two halves with a wait between them, so that a scrape can see the
 * first half exactly before the second begins.
 *
 *   metrics_target N GOFILE   alloc(size) N times, sizes cycling through
 *                             SIZES; after N/2 calls, waits until GOFILE
 *                             exists (no GOFILE: no wait)
 *   metrics_target names      named(s, v) with strings that need escapes
 *   metrics_target until FILE alloc(8) every 10 ms until FILE exists, then
 *                             exits with status 0
 *   metrics_target forks N    the process and 3 children it forks each
 *                             call alloc(8) N times
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) void alloc(long size) { sink += size; }
__attribute__((noinline)) void named(const char *s, long v) { sink += strlen(s) + v; }

static const long SIZES[] = {0, 1, 3, 8, 100, 1000, 4096, 70000};

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "8";
    if (!strcmp(mode, "names")) {
        const char *names[] = {"plain", "quote\"d", "back\\slash", "new\nline",
                               "bad\xff\xfe", "tab\there", "plain"};
        for (int i = 0; i < 7; i++)
            named(names[i], i - 3);
        return 0;
    }
    if (!strcmp(mode, "until") && argc > 2) {
        while (access(argv[2], F_OK) != 0) {
            alloc(8);
            usleep(10000);
        }
        return 0;
    }
    if (!strcmp(mode, "forks") && argc > 2) {
        long n = atol(argv[2]);
        for (int c = 0; c < 3; c++)
            if (fork() == 0) {
                for (long i = 0; i < n; i++)
                    alloc(8);
                return 0;
            }
        for (long i = 0; i < n; i++)
            alloc(8);
        while (wait(0) > 0)
            ;
        return 0;
    }
    long n = atol(mode);
    const char *go = argc > 2 ? argv[2] : 0;
    for (long i = 0; i < n; i++) {
        if (i == n / 2 && go)
            while (access(go, F_OK) != 0)
                usleep(10000);
        alloc(SIZES[i % (long)(sizeof SIZES / sizeof SIZES[0])]);
    }
    return 0;
}
