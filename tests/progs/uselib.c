#include "redirect.h"
// Calls lib_target() from libprobe.so N times (linked, or dlopen'ed after a
// short pause with "dl"). usage: uselib N [dl LIBPATH]
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
long lib_target(long) __attribute__((weak));
int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long (*f)(long) = lib_target;
    if (argc > 3 && strcmp(argv[2], "dl") == 0) {
        usleep(20000);
        void *h = dlopen(argv[3], RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        f = (long (*)(long))dlsym(h, "lib_target");
    }
    unsigned long long s = 0;
    for (long i = 0; i < n; i++) s += f(i);
    printf("sum=%llu\n", s);
    return 0;
}
