// forkdlspin LIB: at each SIGUSR1 it forks a child that opens LIB (one
// of dlreopen.c's libraries) with dlopen, prints the address of its `fa`
// on standard output, and calls `fa2` in a loop (a 1 ms nap after each
// call). Every process runs until it is killed.
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t go;

static void on_usr1(int sig) {
    (void)sig;
    go = 1;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    signal(SIGUSR1, on_usr1);
    for (;;) {
        while (!go) usleep(1000);
        go = 0;
        if (fork() == 0) {
            void *h = dlopen(argv[1], RTLD_NOW);
            if (!h) _exit(1);
            int (*fa2)(int) = (int (*)(int))dlsym(h, "fa2");
            printf("%p\n", dlsym(h, "fa"));
            fflush(stdout);
            for (;;) {
                fa2(1);
                usleep(1000);
            }
        }
    }
}
