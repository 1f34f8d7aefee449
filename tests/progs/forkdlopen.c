// A thread opens a library, calls its fa and closes it, ITERS times,
// while the main thread forks FORKS children, one at a time, each calling
// child_fn twice and exiting. usage: forkdlopen LIB FORKS ITERS. Prints
// "ok FORKS forks, fa ITERS"; exits 0 when every child did.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) int child_fn(int i) { asm volatile(""); return i + 1; }
static const char *lib;
static int iters;
static void *opener(void *a) {
    (void)a;
    long n = 0;
    for (int i = 0; i < iters; i++) {
        void *h = dlopen(lib, RTLD_NOW);
        if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); exit(3); }
        int (*f)(int) = (int (*)(int))dlsym(h, "fa");
        n += f(0);
        dlclose(h);
    }
    return (void *)n;
}
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    lib = argv[1];
    int forks = atoi(argv[2]);
    iters = atoi(argv[3]);
    pthread_t t;
    pthread_create(&t, 0, opener, 0);
    for (int i = 0; i < forks; i++) {
        pid_t p = fork();
        if (p == 0) { child_fn(1); child_fn(2); _exit(0); }
        int st;
        waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    }
    void *r;
    pthread_join(t, &r);
    printf("ok %d forks, fa %ld\n", forks, (long)r);
    return 0;
}
