/* libifunc.c - the library of tail_unnamed.c: `lib_thrice` is an IFUNC
 * (as glibc's string functions are), its resolver choosing `thrice_impl`,
 * which the library, built stripped (-s), names nowhere: only its unwind
 * table entry bounds it. Long enough for a jump at its `ret`. */
__attribute__((noinline)) static int thrice_impl(int x)
{
    volatile int k = x;
    return 3 * k;
}

static int (*resolve_thrice(void))(int)
{
    return thrice_impl;
}

int lib_thrice(int x) __attribute__((ifunc("resolve_thrice")));
