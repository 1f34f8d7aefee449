/* whole_funcs.c - functions whose `ret` no jump can cover (a branch
 * target, the next function right after it, no padding within reach of a
 * near jump), packed between two 160-byte functions (built with -O2
 * -fcf-protection=none, non-PIE). Under --transport inproc each runs as a
 * relocated copy of the whole function, its `ret`s jumping to return
 * stubs: no trap. `leafsum` calls nothing; `callsum`, the same shape with
 * a `call`, and `recsum`, which calls itself, return from their callees
 * through a jump at each return address into the copy; `coldsum` leaves
 * for a `.cold` part that jumps back into its middle, where a jump sends
 * it into the copy again.
 *
 * leafsum(n): 0 if n <= 0; else s = 1 + 2 + ... + n plus `bias` (a global
 * read RIP-relative); s - 1000 if s > 1000 (returned by a second `ret`,
 * itself a branch target). callsum(n): twice(n) + 1 when n > 0, else 0.
 * recsum(n): n + recsum(n - 1) when n > 0, else 0. coldsum(n): |n| + 2
 * when n != 0, else 0.
 * With a number N: the sum over i < N of leafsum(i % 60 - 5) + callsum(i %
 * 7) + recsum(i % 5) + coldsum(i % 9 - 4), printed. With none: reads numbers from standard
 * input; for each N that many more terms and the running sum ("sum S"); at
 * EOF "done S". */
#include <stdio.h>
#include <stdlib.h>

long bias = 3;

__attribute__((noinline, noipa)) long twice(long n) { return n + n; }

long leafsum(long n);
long callsum(long n);
long recsum(long n);
long coldsum(long n);
long filler_a(long n);
long filler_b(long n);

/* 32 x `add %rdi,%rax; xor %rdx,%rax` (6 bytes each) and a `ret`. */
#define FILL32 ".rept 32\n add %rdi,%rax\n xor %rdx,%rax\n .endr\n"

__asm__(".text\n"
        ".p2align 4\n"
        ".globl filler_a\n.type filler_a, @function\n"
        "filler_a:\n"
        "  xor %eax,%eax\n xor %edx,%edx\n" FILL32 "  ret\n"
        ".size filler_a, .-filler_a\n"
        ".globl leafsum\n.type leafsum, @function\n"
        "leafsum:\n"
        "  xor %eax,%eax\n"
        "  test %rdi,%rdi\n"
        "  jle 2f\n"
        "1: add %rdi,%rax\n"
        "  dec %rdi\n"
        "  jne 1b\n"
        "  add bias(%rip),%rax\n"
        "  cmp $1000,%rax\n"
        "  jg 3f\n"
        "  jmp 2f\n"
        "3: sub $1000,%rax\n"
        "  test %rax,%rax\n"
        "  jns 4f\n"
        "  nop\n"
        "4: ret\n"
        "  nop\n"
        "  jmp 4b\n"
        "2: ret\n"
        ".size leafsum, .-leafsum\n"
        ".globl callsum\n.type callsum, @function\n"
        "callsum:\n"
        "  xor %eax,%eax\n"
        "  test %rdi,%rdi\n"
        "  jle 2f\n"
        "  push %rbx\n"
        "  call twice\n"
        "  pop %rbx\n"
        "  add $1,%rax\n"
        "  nop\n nop\n nop\n"
        "  jmp 2f\n"
        "2: ret\n"
        ".size callsum, .-callsum\n"
        ".globl recsum\n.type recsum, @function\n"
        "recsum:\n"
        "  xor %eax,%eax\n"
        "  test %rdi,%rdi\n"
        "  jle 2f\n"
        "  push %rbx\n"
        "  mov %rdi,%rbx\n"
        "  lea -1(%rdi),%rdi\n"
        "  call recsum\n"
        "  add %rbx,%rax\n"
        "  pop %rbx\n"
        "  nop\n"
        "  jmp 2f\n"
        "2: ret\n"
        ".size recsum, .-recsum\n"
        ".globl coldsum\n.type coldsum, @function\n"
        "coldsum:\n"
        "  mov %rdi,%rax\n"
        "  test %rdi,%rdi\n"
        "  js coldsum.cold\n"
        "  je 2f\n"
        "1: add $2,%rax\n"
        "  nop\n nop\n nop\n"
        "  jmp 2f\n"
        "2: ret\n"
        ".size coldsum, .-coldsum\n"
        ".globl filler_b\n.type filler_b, @function\n"
        "filler_b:\n"
        "  xor %eax,%eax\n xor %edx,%edx\n" FILL32 "  ret\n"
        ".size filler_b, .-filler_b\n"
        ".type coldsum.cold, @function\n"
        "coldsum.cold:\n"
        "  neg %rax\n"
        "  jmp 1b\n"
        ".size coldsum.cold, .-coldsum.cold\n");

static long term(long i)
{
    return leafsum(i % 60 - 5) + callsum(i % 7) + recsum(i % 5) + coldsum(i % 9 - 4);
}

int main(int argc, char **argv)
{
    long sum = 0, i = 0, n;
    setvbuf(stdout, NULL, _IOLBF, 0);
    sum += filler_a(1) * 0 + filler_b(1) * 0;
    if (argc > 1) {
        n = atol(argv[1]);
        for (long k = 0; k < n; k++, i++)
            sum += term(i);
        printf("%ld\n", sum);
        return 0;
    }
    while (scanf("%ld", &n) == 1) {
        for (long k = 0; k < n; k++, i++)
            sum += term(i);
        printf("sum %ld\n", sum);
    }
    printf("done %ld\n", sum);
    return 0;
}
