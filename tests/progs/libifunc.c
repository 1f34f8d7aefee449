/* libifunc.c - the library of tail_unnamed.c, built stripped (-s): its
 * functions are IFUNCs (as glibc's string functions are), whose chosen
 * implementations the library names nowhere: only their unwind table
 * entries bound them. Each is long enough for a jump at its `ret`. */
__attribute__((noinline)) static int thrice_impl(int x)
{
    volatile int k = x;
    return 3 * k;
}

__attribute__((noinline)) static int four_impl(int x)
{
    volatile int k = x;
    return 4 * k;
}

static int (*resolve_thrice(void))(int)
{
    return thrice_impl;
}

static int (*resolve_four(void))(int)
{
    return four_impl;
}

int lib_thrice(int x) __attribute__((ifunc("resolve_thrice")));
int lib_four(int x) __attribute__((ifunc("resolve_four")));

/* The library calls `lib_thrice` itself, through a name of its own for it
 * (as glibc calls most of its string functions): a call that binds inside
 * the library, through a slot the dynamic linker fills at load from an
 * IRELATIVE relocation naming the resolver, however the callers of
 * `lib_thrice` bind. `lib_four` has no such slot. */
static int own_thrice(int x) __attribute__((ifunc("resolve_thrice")));

int lib_thrice_twice(int x)
{
    return own_thrice(own_thrice(x));
}
