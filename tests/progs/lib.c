// Shared library with a probed function.
__attribute__((noinline)) long lib_target(long i) {
    asm volatile("");
    return i * 2 + 1;
}
