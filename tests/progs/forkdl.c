// A fork child that opens a library after its fork: it dlopen()s
// libreopen_a.so, calls fa2 twice, dlclose()s it, dlopen()s
// libreopen_b.so (laid out as the first: the dynamic linker maps it where
// the first was), calls fb2 once, closes it and exits with the sum; the
// parent waits for it and prints it. usage: forkdl DIR
#include <dlfcn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int (*sym(void *h, const char *n))(int) { return (int (*)(int))dlsym(h, n); }

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/libreopen_a.so", dir);
    snprintf(pb, sizeof pb, "%s/libreopen_b.so", dir);
    pid_t p = fork();
    if (p == 0) {
        int s = 0;
        void *a = dlopen(pa, RTLD_NOW);
        if (!a) _exit(101);
        int (*fa2)(int) = sym(a, "fa2");
        s += fa2(1);
        s += fa2(2);
        char *where_a = (char *)fa2;
        dlclose(a);
        void *b = dlopen(pb, RTLD_NOW);
        if (!b) _exit(102);
        int (*fb2)(int) = sym(b, "fb2");
        s += fb2(3);
        int same = (char *)fb2 == where_a;
        dlclose(b);
        _exit(s * 2 + same);
    }
    int st = 0;
    waitpid(p, &st, 0);
    printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
