/* Shapes the in-process transport must survive unharmed and count exactly
 * (runtime/tests/all/inproc_safety.rs):
 *   harm strs N             calls strs(a, b) N times with two fixed strings
 *   harm deep D             one recursion D deep (rec), then prints its sum
 *   harm mutual D R         R rounds of a mutual recursion (ping/pong) D deep
 *   harm threads T R D      T threads, each R rounds of rec D deep
 *   harm huge D             one recursion D deep on a thread with a 1 GiB stack
 *   harm sum N              sums N calls of work(i): a leaf function whose
 *                           result shows a corrupted register or stack
 *   harm code               prints the first 16 bytes of work and of rec
 *   harm tiny S [T]         calls tiny(i), 4 bytes (no jump fits), for S
 *                           seconds in T threads (1), checking each result
 * Every mode prints what it computed, so a harmed run shows. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) int strs(const char *a, const char *b) {
    __asm__ volatile("" ::: "memory");
    return (int)(strlen(a) + strlen(b));
}

/* The recursions end in straight code (the nops): their `ret`s take a
 * jump under the in-process transport at -O0, not a trap. */
__attribute__((noinline)) long rec(long d) {
    long r = 0;
    if (d > 0)
        r = d + rec(d - 1);
    __asm__ volatile("nop; nop; nop; nop; nop" ::: "memory");
    return r;
}

long pong(long d);
__attribute__((noinline)) long ping(long d) {
    long r = 0;
    if (d > 0)
        r = 1 + pong(d - 1);
    __asm__ volatile("nop; nop; nop; nop; nop" ::: "memory");
    return r;
}
__attribute__((noinline)) long pong(long d) {
    long r = 0;
    if (d > 0)
        r = 2 + ping(d - 1);
    __asm__ volatile("nop; nop; nop; nop; nop" ::: "memory");
    return r;
}

/* Four bytes: too short for a jump, an int3 under the in-process
 * transport; called as fast as the loop goes. */
int tiny(int i);
__asm__(".text\n.globl tiny\n.type tiny, @function\ntiny:\n"
        "  lea 1(%rdi), %eax\n  ret\n.size tiny, . - tiny\n");

/* A leaf with live values across the probed instruction and a frame of
 * its own: wrong registers or stack after a hit change its result. */
__attribute__((noinline)) long work(long i) {
    volatile long buf[8];
    for (int k = 0; k < 8; k++)
        buf[k] = i * k;
    long s = 0;
    for (int k = 0; k < 8; k++)
        s += buf[k] ^ (i + k);
    return s;
}

struct job {
    long rounds, depth, sum;
};

static void *worker(void *p) {
    struct job *j = p;
    for (long r = 0; r < j->rounds; r++)
        j->sum += rec(j->depth);
    return NULL;
}

static time_t tiny_end;

/* Calls tiny until tiny_end; returns how many results were wrong. */
static void *tiny_loop(void *p) {
    long calls = 0, bad = 0;
    (void)p;
    for (;;) {
        for (int k = 0; k < 4096; k++, calls++)
            bad += tiny((int)calls) != (int)calls + 1;
        if (time(NULL) >= tiny_end)
            break;
    }
    return (void *)bad;
}

static void *huge(void *p) {
    struct job *j = p;
    j->sum = rec(j->depth);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "strs") && argc == 3) {
        long n = atol(argv[2]), t = 0;
        for (long i = 0; i < n; i++)
            t += strs("hello, probe", "a second string, longer than the first");
        printf("strs %ld\n", t);
    } else if (!strcmp(mode, "deep") && argc == 3) {
        printf("deep %ld\n", rec(atol(argv[2])));
    } else if (!strcmp(mode, "mutual") && argc == 4) {
        long d = atol(argv[2]), r = atol(argv[3]), t = 0;
        for (long k = 0; k < r; k++)
            t += ping(d);
        printf("mutual %ld\n", t);
    } else if (!strcmp(mode, "threads") && argc == 5) {
        long n = atol(argv[2]);
        pthread_t th[64];
        struct job jobs[64];
        if (n > 64)
            return 2;
        for (long k = 0; k < n; k++) {
            jobs[k] = (struct job){atol(argv[3]), atol(argv[4]), 0};
            pthread_create(&th[k], NULL, worker, &jobs[k]);
        }
        long t = 0;
        for (long k = 0; k < n; k++) {
            pthread_join(th[k], NULL);
            t += jobs[k].sum;
        }
        printf("threads %ld\n", t);
    } else if (!strcmp(mode, "huge") && argc == 3) {
        pthread_attr_t a;
        pthread_t th;
        struct job j = {1, atol(argv[2]), 0};
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, (size_t)1 << 30);
        if (pthread_create(&th, &a, huge, &j))
            return 3;
        pthread_join(th, NULL);
        printf("huge %ld\n", j.sum);
    } else if (!strcmp(mode, "sum") && argc == 3) {
        long n = atol(argv[2]), t = 0;
        for (long i = 0; i < n; i++)
            t += work(i);
        printf("sum %ld\n", t);
    } else if (!strcmp(mode, "tiny") && (argc == 3 || argc == 4)) {
        long n = argc == 4 ? atol(argv[3]) : 1, bad = 0;
        pthread_t th[64];
        if (n < 1 || n > 64)
            return 2;
        tiny_end = time(NULL) + atol(argv[2]);
        for (long k = 1; k < n; k++)
            pthread_create(&th[k], NULL, tiny_loop, NULL);
        bad = (long)tiny_loop(NULL);
        for (long k = 1; k < n; k++) {
            void *r;
            pthread_join(th[k], &r);
            bad += (long)r;
        }
        printf(bad ? "tiny wrong\n" : "tiny ok\n");
        return bad ? 1 : 0;
    } else if (!strcmp(mode, "code")) {
        const unsigned char *w = (const unsigned char *)work, *r = (const unsigned char *)rec;
        printf("work");
        for (int k = 0; k < 16; k++)
            printf(" %02x", w[k]);
        printf("\nrec");
        for (int k = 0; k < 16; k++)
            printf(" %02x", r[k]);
        printf("\n");
    } else {
        return 2;
    }
    return 0;
}
