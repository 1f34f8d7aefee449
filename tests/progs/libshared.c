/* libshared.c - a shared library whose function the tests probe. */
__attribute__((noinline)) long lib_fn(long x)
{
    __asm__ volatile("" ::: "memory");
    return x * 3 + 1;
}
