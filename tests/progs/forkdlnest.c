// A library opened by a fork child, inherited by the child's own fork
// child: the child opens libreopen_a.so and calls fa2(1), forks; the
// grandchild calls fa2(2), opens libreopen_b.so, calls fb2(3) and exits;
// the child waits for it, calls fa2(4) and exits; the parent waits.
// usage: forkdlnest DIR
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
        void *a = dlopen(pa, RTLD_NOW);
        if (!a) _exit(1);
        int (*fa2)(int) = sym(a, "fa2");
        fa2(1);
        pid_t g = fork();
        if (g == 0) {
            fa2(2);
            void *b = dlopen(pb, RTLD_NOW);
            if (!b) _exit(2);
            sym(b, "fb2")(3);
            _exit(0);
        }
        int st = 1;
        waitpid(g, &st, 0);
        fa2(4);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 3);
    }
    int st = 1;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 4;
}
