// A library the fork/exec/dlopen tests' programs call (forklib.c and
// forkexecd.c link it): one function, counted per caller.
__attribute__((noinline)) int lib_add(int x) {
    asm volatile("");
    return x + 1;
}
