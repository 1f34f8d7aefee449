/* Deterministic target of the one-liner tests (runtime/tests/oneliners.rs):
 * every mode makes a fixed sequence of calls with fixed arguments and
 * prints nothing on stdout, so that the tracer's output can be compared
 * exactly, with wprobe's and with bpftrace's.
 *
 *   bt_target calls     add/greet/scale/leaf/mid calls, fixed arguments
 *   bt_target threads N each of 8 threads calls tick(t) N times
 *   bt_target watch     writes `counter` 5 times
 *   bt_target keys N    calls key(i) for i in 0..N
 *   bt_target structs   visit(&a), visit(&b): a C structure and a pointer to another
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile long counter;
volatile long sink;

__attribute__((noinline)) int add(int a, int b) { sink += a; return a + b; }
__attribute__((noinline)) int greet(const char *name, int times) { sink += strlen(name); return times; }
__attribute__((noinline)) long scale(long v, long by) { sink += v; return v * by; }
__attribute__((noinline)) int leaf(int x) { sink += x; return x + 1; }
__attribute__((noinline)) int mid(int x) { return leaf(x * 2) + 1; }
__attribute__((noinline)) void tick(int t) { sink += t; }
__attribute__((noinline)) void key(long k) { sink += k; }
__attribute__((noinline)) void signed_vals(int v, long w) { sink += v + w; }

struct point {
    int x;
    long y;
    char name[8];
    unsigned int flags : 3, kind : 5;
    short pair[2];
    struct point *next;
};
__attribute__((noinline)) void visit(struct point *p) { sink += p->x; }

static void *worker(void *arg) {
    long n = (long)arg >> 8, t = (long)arg & 0xff;
    for (long i = 0; i < n; i++)
        tick((int)t);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "calls";
    if (!strcmp(mode, "calls")) {
        for (int i = 0; i < 10; i++)
            add(i, i * 2);
        const char *names[] = {"alice", "bob", "alice", "carol", "alice", "bob"};
        for (int i = 0; i < 6; i++)
            greet(names[i], i);
        long vals[] = {0, 1, 2, 3, 5, 8, 13, 100, 1000, 5000, 70000, 1 << 20};
        for (int i = 0; i < 12; i++)
            scale(vals[i], 3);
        for (int i = 0; i < 3; i++)
            mid(i);
        signed_vals(-5, -100);
        signed_vals(7, 9);
        signed_vals(-5, 1);
    } else if (!strcmp(mode, "threads")) {
        long n = argc > 2 ? atol(argv[2]) : 1000;
        pthread_t th[8];
        for (long t = 0; t < 8; t++)
            pthread_create(&th[t], 0, worker, (void *)((n << 8) | t));
        for (int t = 0; t < 8; t++)
            pthread_join(th[t], 0);
    } else if (!strcmp(mode, "watch")) {
        for (int i = 1; i <= 5; i++)
            counter = i * 10;
    } else if (!strcmp(mode, "keys")) {
        long n = argc > 2 ? atol(argv[2]) : 10;
        for (long i = 0; i < n; i++)
            key(i);
    } else if (!strcmp(mode, "structs")) {
        struct point b = {2, -20, "bee", 5, 17, {-1, 7}, 0};
        struct point a = {1, 10, "ay", 1, 2, {3, 4}, &b};
        visit(&a);
        visit(&b);
    } else if (!strcmp(mode, "sleep")) {
        usleep(argc > 2 ? atoi(argv[2]) * 1000 : 300000);
        add(1, 2);
    }
    return 0;
}
