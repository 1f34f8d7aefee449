// dlopen()s libreopen_a.so, calls fa2 3 times, dlclose()s it, dlopen()s
// libreopen_b.so (same size and layout: the dynamic linker maps it where
// the first was), calls fb2 2 times, closes it, then opens the first
// again and calls fa2 once. Prints whether the second library took the
// first one's address. usage: dlreopen DIR
#include <dlfcn.h>
#include <stdio.h>

static int (*sym(void *h, const char *n))(int) { return (int (*)(int))dlsym(h, n); }

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/libreopen_a.so", dir);
    snprintf(pb, sizeof pb, "%s/libreopen_b.so", dir);
    int s = 0;
    void *a = dlopen(pa, RTLD_NOW);
    if (!a) return 1;
    int (*fa2)(int) = sym(a, "fa2");
    for (int i = 0; i < 3; i++) s += fa2(i);
    char *where_a = (char *)fa2;
    dlclose(a);
    void *b = dlopen(pb, RTLD_NOW);
    if (!b) return 2;
    int (*fb2)(int) = sym(b, "fb2");
    for (int i = 0; i < 2; i++) s += fb2(i);
    int same = (char *)fb2 == where_a;
    dlclose(b);
    a = dlopen(pa, RTLD_NOW);
    if (!a) return 3;
    s += sym(a, "fa2")(7);
    dlclose(a);
    printf("sum=%d same_address=%d\n", s, same);
    return 0;
}
