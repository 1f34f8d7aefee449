/* tail_plt.c - calls that leave by a tail call into another module, the
 * shape of a Rust allocator shim (`__rdl_alloc` ends in `jmp malloc@plt`)
 * or a C++ deleting destructor (`jmp operator delete@plt`). Built -O2 and
 * linked with libtail.so (tests/progs/libtail.c): `wrap` is `add; jmp
 * lib_twice@plt`, no `ret` of its own; `alloc` is `jmp malloc@plt`;
 * `twice_plus` calls `wrap` and returns after it. Under --transport inproc
 * their calls return through the `ret`s of lib_twice and malloc, found in
 * their modules. Prints the sum, 28 for N = 4 (argv[1]). */
#include <stdio.h>
#include <stdlib.h>

int lib_twice(int x);

__attribute__((noinline)) int wrap(int x)
{
    return lib_twice(x + 1);
}

__attribute__((noinline)) void *alloc(size_t n)
{
    return malloc(n);
}

__attribute__((noinline)) int twice_plus(int x)
{
    int r = wrap(x);
    asm volatile("");
    return r + 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long s = 0;
    for (int i = 0; i < n; i++) {
        void *p = alloc(16 + i);
        s += twice_plus(i) + (p != NULL);
        free(p);
    }
    printf("%ld\n", s);
    return 0;
}
