/* tail_unnamed.c - calls that leave by a tail call into a function no
 * symbol names, built stripped (-s) with its functions exported
 * (-rdynamic): `via_hidden` ends in `jmp hidden`, a static function, and
 * `via_ifunc` in `jmp lib_thrice@plt`, an IFUNC of libifunc.so whose
 * implementation has no symbol either. Neither has a `ret` of its own.
 * Prints the sum, 96 for N = 4 (argv[1]). */
#include <stdio.h>
#include <stdlib.h>

int lib_thrice(int x);

__attribute__((noinline)) static int hidden(int x)
{
    volatile int k = x;
    return 5 * k + 1;
}

__attribute__((noinline)) int via_hidden(int x)
{
    return hidden(x + 1);
}

__attribute__((noinline)) int via_ifunc(int x)
{
    return lib_thrice(x + 2);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long s = 0;
    for (int i = 0; i < n; i++) {
        s += via_hidden(i);
        s += via_ifunc(i);
    }
    printf("%ld\n", s);
    return 0;
}
