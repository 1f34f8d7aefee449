/* copy_throw.cpp - a C++ exception thrown through a function that runs as
 * a relocated copy under --transport inproc (built with -O2
 * -fcf-protection=none, non-PIE, -lstdc++). `through` (assembly, with its
 * unwind table written by .cfi directives) calls `thrower` and adds 1; its
 * `ret` is a branch target with `filler` right after it, so no jump can
 * cover it and the function is copied. `thrower(n)` throws n when n % 5 ==
 * 3, else returns 2n; `main` catches the throws, and `backtrace()` in
 * `thrower` (at n == 7) must see `through` between `thrower` and `main`.
 *
 * With a number N: for i < N, s += through(i), or 1000 * i when it threw;
 * prints the frames of that backtrace that are `through`'s or `main`'s
 * (resolved by dladdr) and s. Untraced and traced, the same lines. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <execinfo.h>

extern "C" long through(long n);
extern "C" long filler(long n);

static void *frames[16];
static int nframes;

extern "C" __attribute__((noinline)) long thrower(long n)
{
    if (n == 7)
        nframes = backtrace(frames, 16);
    if (n % 5 == 3)
        throw n;
    return 2 * n;
}

__asm__(".text\n"
        ".p2align 4\n"
        ".globl through\n.type through, @function\n"
        "through:\n"
        "  .cfi_startproc\n"
        "  xor %eax,%eax\n"
        "  test %rdi,%rdi\n"
        "  jle 2f\n"
        "  push %rbx\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  .cfi_offset rbx, -16\n"
        "  call thrower\n"
        "  pop %rbx\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  .cfi_restore rbx\n"
        "  add $1,%rax\n"
        "  nop\n nop\n nop\n"
        "  jmp 2f\n"
        "2: ret\n"
        "  .cfi_endproc\n"
        ".size through, .-through\n"
        ".globl filler\n.type filler, @function\n"
        "filler:\n"
        "  .rept 32\n add %rdi,%rax\n .endr\n"
        "  ret\n"
        ".size filler, .-filler\n");

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20, s = filler(0) * 0;
    for (long i = 0; i < n; i++) {
        try {
            s += through(i);
        } catch (long v) {
            s += 1000 * v;
        }
    }
    for (int k = 0; k < nframes; k++) {
        Dl_info d;
        if (dladdr(frames[k], &d) && d.dli_sname &&
            (!strcmp(d.dli_sname, "through") || !strcmp(d.dli_sname, "main")))
            printf("frame %d: %s\n", k, d.dli_sname);
    }
    printf("%ld\n", s);
    return 0;
}
