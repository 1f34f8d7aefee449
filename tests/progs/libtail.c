/* libtail.c - the library of tail_plt.c: a function its executable
 * reaches by a tail call through the PLT (long enough for a jump at its
 * `ret`). */
__attribute__((noinline)) int lib_twice(int x)
{
    volatile int k = x;
    return 2 * k;
}
