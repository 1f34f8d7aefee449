/* A target of the system-wide tests (no -c/-p): started after wprobe
 * attached, it calls probed() N times with a string of its own and
 * lib_line() (in libsyswide.so) N times, libc's l64a(N) once, prints
 * "done", and exits at EOF on stdin, so that a tracer reading its memory
 * after the fact (perf) still finds the process.
 *
 *   syswide N TAG
 */
#include <stdio.h>
#include <stdlib.h>

const char *lib_line(int i);

__attribute__((noinline)) int probed(int x, const char *tag) {
    __asm__ volatile("" ::"r"(tag) : "memory");
    return x * 3;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int n = atoi(argv[1]);
    int sum = 0;
    for (int i = 1; i <= n; i++) {
        sum += probed(100 + i, argv[2]);
        sum += (int)lib_line(i)[0];
    }
    /* A libc function nothing else on the machine is likely to call
     * (uprobe:libc:l64a, system-wide). */
    printf("done %d %s\n", sum, l64a(n));
    fflush(stdout);
    while (getchar() != EOF) {
    }
    return 0;
}
