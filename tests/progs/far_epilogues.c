/* far_epilogues.c - `ret`s no jump can cover, reached by far jumps
 * (`jmp rel32`) from other functions, packed between 160-byte functions so
 * that no padding is in reach of a near jump (built with -O2
 * -fcf-protection=none, non-PIE).
 *
 * `ep_owner` ends in `add %rbx,%rax; pop %rbx; ret`, the `pop` a branch
 * target (its `ret` has no 5-byte window) of a short jump of its own (for
 * n < 0, never asked) and of `ep_hot`, and its `call`'s return address
 * leaves no room for a jump back into a copy: its `ret` traps. `ep_hot`
 * pushes `%rbx` and jumps (`e9 rel32`) to `ep_owner`'s `pop` (but for
 * n = -1, never asked, when it returns 0 by a `ret` of its own): its calls
 * return through `ep_owner`'s `ret`; under --transport inproc the jump is
 * sent to a return stub of that epilogue, so only `ep_owner`'s own calls
 * stop. `ep_owner2` and `ep_hot2` are the same but for the short jump:
 * `ep_hot2`'s jump is every branch to the `pop`, and once it is sent
 * `ep_owner2`'s `ret` takes a window: no stop.
 *
 * `cp_func` is a leaf whose `ret` has no window (an `inc` before it where
 * `cp_func.cold` jumps back with an `e9 rel32`, a second `ret` right
 * after it): it runs as a relocated copy, the cold part's jump sent into
 * the copy. No trap.
 *
 * `tp_func` leaves by a tail call through a pointer (to the C library's
 * `labs`), so its calls are seen returning at continuation sites after
 * them; `cc_func` calls it, and its `ret` has no window (a `je` to the
 * `pop` before it): it runs as a copy, the redirect at its call's return
 * address taking the continuation site's bytes and dispatching it on the
 * way back into the copy. No trap.
 *
 * `jt_tail` tail-calls `jb_owner` (`e9` to its entry), a leaf after it
 * whose `ret` has no window (its `pop` a branch target of a `jmp` after
 * the `ret`): planned first, `jt_tail` takes that `ret` as a return site
 * of its own, a trap; then `jb_owner` runs as a copy all the same, taking
 * that site over. No trap.
 *
 * cc_func(n) = 0 for n = 0, else |n| + n; jt_tail(n) = jb_owner(n + 1);
 * jb_owner(n) = 3|n|.
 * ep_owner(n) = ep_owner2(n) = 3n (they call ep_twice); ep_hot(n) = n + 1,
 * ep_hot2(n) = n + 2; cp_func(n) = 0 for n = 0, else 2|n| + 1.
 * usage: far_epilogues N: calls ep_owner(i) and ep_owner2(i) for i < 3,
 * ep_hot(i), ep_hot2(i), cp_func(i % 5 - 2), cc_func(i % 5 - 2) and
 * jt_tail(i) for i < N; prints the sum. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline, noipa)) long ep_twice(long n) { return n + n; }

long ep_owner(long n);
long ep_hot(long n);
long cp_func(long n);
long filler_a(long n);
long filler_b(long n);
long filler_c(long n);
long filler_d(long n);
long ep_owner2(long n);
long ep_hot2(long n);
long tp_func(long n);
long cc_func(long n);
long filler_e(long n);
long jt_tail(long n);
long jb_owner(long n);
long filler_f(long n);
long filler_g(long n);
long (*tp_ptr)(long) = labs;

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
        "  test %rdi,%rdi\n"
        "  js 1f\n"
        "  call ep_twice\n"
        "  add %rbx,%rax\n"
        ".Lep_shared:\n"
        "  pop %rbx\n"
        "  ret\n"
        "1: mov $-1,%rax\n"
        "  jmp .Lep_shared\n"
        END(ep_owner)
        FN(filler_d) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_d)
        FN(ep_owner2)
        "  push %rbx\n"
        "  mov %rdi,%rbx\n"
        "  call ep_twice\n"
        "  add %rbx,%rax\n"
        ".Lep_shared2:\n"
        "  pop %rbx\n"
        "  ret\n"
        END(ep_owner2)
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
        FN(ep_hot2)
        "  push %rbx\n"
        "  lea 2(%rdi),%rax\n"
        "  cmp $-1,%rdi\n"
        "  je 1f\n"
        "  .byte 0xe9\n .long .Lep_shared2 - . - 4\n"
        "1: pop %rbx\n"
        "  xor %eax,%eax\n"
        "  nop\n nop\n"
        "  ret\n"
        END(ep_hot2)
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
        FN(tp_func)
        "  mov tp_ptr(%rip),%rax\n"
        "  test %rax,%rax\n"
        "  je 1f\n"
        "  jmp *%rax\n"
        "1: lea 7(%rdi),%rax\n"
        "  ret\n"
        END(tp_func)
        FN(cc_func)
        "  push %rbx\n"
        "  xor %eax,%eax\n"
        "  mov %rdi,%rbx\n"
        "  test %rdi,%rdi\n"
        "  je 1f\n"
        "  call tp_func\n"
        "  add %rbx,%rax\n"
        "  nop\n nop\n"
        "1: pop %rbx\n"
        "  ret\n"
        END(cc_func)
        FN(filler_e) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_e)
        FN(jt_tail)
        "  add $1,%rdi\n"
        "  .byte 0xe9\n .long jb_owner - . - 4\n"
        END(jt_tail)
        FN(filler_f) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_f)
        FN(jb_owner)
        "  push %rbx\n"
        "  lea (%rdi,%rdi,2),%rax\n"
        "  test %rdi,%rdi\n"
        "  js 1f\n"
        ".Ljb_shared:\n"
        "  pop %rbx\n"
        "  ret\n"
        "1: neg %rax\n"
        "  jmp .Ljb_shared\n"
        END(jb_owner)
        FN(filler_g) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_g)
        ".type cp_func.cold, @function\n"
        "cp_func.cold:\n"
        "  neg %rdi\n"
        "  lea (%rdi,%rdi),%rax\n"
        "  .byte 0xe9\n .long .Lcp_back - . - 4\n"
        ".size cp_func.cold, .-cp_func.cold\n");

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long sum = filler_a(1) + filler_b(1) + filler_c(1) + filler_d(1) + filler_e(1) +
               filler_f(1) + filler_g(1);
    for (long i = 0; i < 3; i++) sum += ep_owner(i) + ep_owner2(i);
    for (long i = 0; i < n; i++)
        sum += ep_hot(i) + ep_hot2(i) + cp_func(i % 5 - 2) + cc_func(i % 5 - 2) + jt_tail(i);
    printf("%ld\n", sum);
    return 0;
}
