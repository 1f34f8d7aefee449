/* lib_user.c - calls lib_fn(i) from a linked library (LINKED) or from one
 * loaded with dlopen after start (default), N times (argv[1], default 5). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef LINKED
long lib_fn(long);
#endif

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5, sum = 0;
#ifdef LINKED
    long (*f)(long) = lib_fn;
#else
    usleep(1000); /* the library appears well after start */
    void *h = dlopen(argc > 2 ? argv[2] : "./libshared.so", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    long (*f)(long) = (long (*)(long))dlsym(h, "lib_fn");
#endif
    for (long i = 0; i < n; i++)
        sum += f(i);
    printf("sum=%ld\n", sum);
    return 0;
}
