/* far_epilogues.c - `ret`s no jump can cover, reached by far jumps
 * (`jmp rel32`) from other functions, packed between 160-byte functions so
 * that no padding is in reach of a near jump (built with -O2
 * -fcf-protection=none, non-PIE).
 *
 * `ep_owner` ends in `add %rbx,%rax; pop %rbx; ret`, the `pop` a branch
 * target (its `ret` has no 5-byte window), and its `call`'s return
 * address leaves no room for a jump back into a copy: its `ret` traps.
 * `ep_hot` pushes `%rbx` and jumps (`e9 rel32`) to `ep_owner`'s `pop` (but
 * for n = -1, never asked, when it returns 0 by a `ret` of its own): its
 * calls return through `ep_owner`'s `ret`; under --transport inproc the jump is
 * sent to a return stub of that epilogue, so only `ep_owner`'s own calls
 * stop.
 *
 * `cp_func` is a leaf whose `ret` has no window (an `inc` before it where
 * `cp_func.cold` jumps back with an `e9 rel32`, a second `ret` right
 * after it): it runs as a relocated copy, the cold part's jump sent into
 * the copy. No trap.
 *
 * ep_owner(n) = 3n (it calls ep_twice); ep_hot(n) = n + 1; cp_func(n) = 0
 * for n = 0, else 2|n| + 1.
 * usage: far_epilogues N: calls ep_owner(i) for i < 3, ep_hot(i) and
 * cp_func(i % 5 - 2) for i < N; prints the sum. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline, noipa)) long ep_twice(long n) { return n + n; }

long ep_owner(long n);
long ep_hot(long n);
long cp_func(long n);
long filler_a(long n);
long filler_b(long n);
long filler_c(long n);

/* 26 x `add %rdi,%rax; xor %rdx,%rax` (6 bytes each) and a `ret`. */
#define FILL ".rept 26\n add %rdi,%rax\n xor %rdx,%rax\n .endr\n"
#define FN(name) ".globl " #name "\n.type " #name ", @function\n" #name ":\n"
#define END(name) ".size " #name ", .-" #name "\n"

__asm__(".text\n"
        ".p2align 4\n"
        FN(filler_a) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_a)
        FN(ep_owner)
        "  push %rbx\n"
        "  mov %rdi,%rbx\n"
        "  call ep_twice\n"
        "  add %rbx,%rax\n"
        ".Lep_shared:\n"
        "  pop %rbx\n"
        "  ret\n"
        END(ep_owner)
        FN(filler_b) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_b)
        FN(ep_hot)
        "  push %rbx\n"
        "  lea 1(%rdi),%rax\n"
        "  cmp $-1,%rdi\n"
        "  je 1f\n"
        "  .byte 0xe9\n .long .Lep_shared - . - 4\n"
        "1: pop %rbx\n"
        "  xor %eax,%eax\n"
        "  nop\n nop\n"
        "  ret\n"
        END(ep_hot)
        FN(cp_func)
        "  xor %eax,%eax\n"
        "  test %rdi,%rdi\n"
        "  je .Lcp_zero\n"
        "  .byte 0x0f, 0x88\n .long cp_func.cold - . - 4\n"
        "  lea (%rdi,%rdi),%rax\n"
        "  nop\n"
        ".Lcp_back:\n"
        "  inc %rax\n"
        "  ret\n"
        ".Lcp_zero:\n"
        "  ret\n"
        END(cp_func)
        FN(filler_c) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_c)
        ".type cp_func.cold, @function\n"
        "cp_func.cold:\n"
        "  neg %rdi\n"
        "  lea (%rdi,%rdi),%rax\n"
        "  .byte 0xe9\n .long .Lcp_back - . - 4\n"
        ".size cp_func.cold, .-cp_func.cold\n");

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long sum = filler_a(1) + filler_b(1) + filler_c(1);
    for (long i = 0; i < 3; i++) sum += ep_owner(i);
    for (long i = 0; i < n; i++) sum += ep_hot(i) + cp_func(i % 5 - 2);
    printf("%ld\n", sum);
    return 0;
}
