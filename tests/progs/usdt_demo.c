/* USDT probes of every argument form (sys/sdt.h, Debian's
 * systemtap-sdt-dev), with and without a semaphore (the gated one is in
 * usdt_demo_gated.c: sdt.h gives every probe of a translation unit a
 * semaphore or none), and a dlopen'ed library with the same (argv[2]).
 *
 *   usdt_demo run N LIB    fire N times, print the semaphores, exit
 *                          (after 300 ms with USDT_DEMO_LINGER set: a
 *                          tracer reading memory after the fact, perf,
 *                          finds the process)
 *   usdt_demo wait LIB     print "ready SEM LIBSEM" (the semaphores'
 *                          addresses), fire once per line of stdin,
 *                          printing the semaphores each time; exit at EOF
 *
 * Built with -O1: gcc then gives the operands %reg, $imm, disp(%reg),
 * disp(%base,%index,scale), sym(%rip) and off+sym(%rip).
 */
#include <sys/sdt.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void gated(long x);
extern unsigned short demo_gated_semaphore;

long g_static = 77;
struct S { long a; long b[4]; } g_s = { 1, { 10, 20, 30, 40 } };
volatile long spacer;

__attribute__((noinline)) void f(long x, int y, char c, long *p, long i) {
    DTRACE_PROBE4(demo, four, x, y, c, 42);
    spacer++;
    STAP_PROBE2(demo, mem, p[1], g_s.b[i]);
    spacer++;
    STAP_PROBE1(demo, stat, g_static);
    spacer++;
    gated(x);
    DTRACE_PROBE1(demo, two, y);
    spacer++;
}

__attribute__((noinline)) void h(void) {
    STAP_PROBE1(demo, stat, g_s.b[3]);
    spacer++;
}

static void (*lib_fire)(long);
static unsigned short *lib_sem;

static void fire(long k) {
    long v[3] = { 5, 6, 7 };
    h();
    f(k, (int)(-2 * k), 'c', v, 2);
    if (lib_fire)
        lib_fire(k);
}

static void sems(void) {
    printf("sem %u %u\n", demo_gated_semaphore, lib_sem ? *lib_sem : 0);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    const char *lib = strcmp(argv[1], "run") == 0 ? (argc > 3 ? argv[3] : NULL) : argv[2];
    if (lib) {
        void *hd = dlopen(lib, RTLD_NOW);
        if (!hd) {
            fprintf(stderr, "%s\n", dlerror());
            return 3;
        }
        lib_fire = (void (*)(long))dlsym(hd, "lib_fire");
        lib_sem = (unsigned short *)dlsym(hd, "demolib_gated_semaphore");
    }
    if (strcmp(argv[1], "run") == 0) {
        long n = atol(argv[2]);
        for (long k = 1; k <= n; k++)
            fire(k);
        sems();
        if (getenv("USDT_DEMO_LINGER"))
            usleep(300000);
        return 0;
    }
    printf("ready %p %p\n", (void *)&demo_gated_semaphore, (void *)lib_sem);
    fflush(stdout);
    char line[64];
    long k = 1;
    while (fgets(line, sizeof line, stdin)) {
        fire(k++);
        sems();
    }
    return 0;
}
