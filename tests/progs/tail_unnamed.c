/* tail_unnamed.c - calls that leave by a tail call into a function no
 * symbol names, built stripped (-s) with its functions exported
 * (-rdynamic), and bound lazily (the linker's default): `via_hidden` ends
 * in `jmp hidden`, a static function; `via_ifunc` in `jmp
 * lib_thrice@plt` and `via_got` in `jmp *lib_four@GOTPCREL(%rip)`,
 * IFUNCs of libifunc.so whose implementations have no symbol either: the
 * first is found through the library's own IRELATIVE slot (its PLT slot
 * here is still unbound at start), the second through this program's
 * GOT slot (`noplt`: filled at load, not lazily). None has a `ret` of its
 * own. Prints the sum, 168 for N = 4 (argv[1]). */
#include <stdio.h>
#include <stdlib.h>

int lib_thrice(int x);
__attribute__((noplt)) int lib_four(int x);

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

__attribute__((noinline)) int via_got(int x)
{
    return lib_four(x + 3);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long s = 0;
    for (int i = 0; i < n; i++) {
        s += via_hidden(i);
        s += via_ifunc(i);
        s += via_got(i);
    }
    printf("%ld\n", s);
    return 0;
}
