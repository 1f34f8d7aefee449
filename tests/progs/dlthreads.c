// A thread calls hot() in a loop while another dlopen()s a library, calls
// its fa2 N times, closes it, and does it again. usage: dlthreads DIR N ROUNDS
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
static atomic_int done;
static long hots;
__attribute__((noinline)) long hot(long x) { return x + 1; }
static void *spin(void *a) { (void)a; while (!atomic_load(&done)) hots = hot(hots); return 0; }
int main(int argc, char **argv) {
    char p[4096];
    snprintf(p, sizeof p, "%s/libreopen_a.so", argc > 1 ? argv[1] : ".");
    int n = argc > 2 ? atoi(argv[2]) : 5, rounds = argc > 3 ? atoi(argv[3]) : 2;
    pthread_t t;
    pthread_create(&t, 0, spin, 0);
    long s = 0;
    for (int r = 0; r < rounds; r++) {
        void *h = dlopen(p, RTLD_NOW);
        if (!h) return 1;
        int (*fa2)(int) = (int (*)(int))dlsym(h, "fa2");
        for (int i = 0; i < n; i++) s += fa2(i);
        dlclose(h);
    }
    atomic_store(&done, 1);
    pthread_join(t, 0);
    printf("s=%ld hot>0=%d\n", s, hots > 0);
    return 0;
}
