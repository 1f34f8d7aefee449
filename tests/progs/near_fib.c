/* near_fib.c - the shape of gcc -O2's fib (benches/trace/fib.c): two
 * `ret`s, the first followed by 6 bytes of in-function padding (a `nopw`),
 * the second a branch target 4 bytes long (`mov %rdi, %rax; ret`) with no
 * padding after it (`zero` follows at once). Under --transport inproc the second `ret` takes a
 * near jump to a cave in that padding, so the first `ret`'s window must
 * leave the padding alone (the epilogue before it holds 5 bytes). fib(N)
 * of argv[1] (default 10): the -O2 recursion, one call recursive and a
 * loop over the other. */
#include <stdio.h>
#include <stdlib.h>

__asm__(".text\n"
        ".p2align 4\n"
        ".globl fib\n"
        ".type fib, @function\n"
        "fib:\n"
        "  cmp $1, %rdi\n"
        "  jle 2f\n"
        "  push %r12\n"
        "  mov %rdi, %r12\n"
        "  push %rbp\n"
        "  xor %ebp, %ebp\n"
        "  push %rbx\n"
        "  mov %rdi, %rbx\n"
        "1: lea -1(%rbx), %rdi\n"
        "  sub $2, %rbx\n"
        "  call fib\n"
        "  add %rax, %rbp\n"
        "  cmp $1, %rbx\n"
        "  jg 1b\n"
        "  and $1, %r12d\n"
        "  pop %rbx\n"
        "  lea (%r12,%rbp,1), %rax\n"
        "  pop %rbp\n"
        "  pop %r12\n"
        "  ret\n"
        "  .byte 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        "2: mov %rdi, %rax\n"
        "  ret\n"
        ".size fib, .-fib\n"
        ".globl zero\n"
        ".type zero, @function\n"
        "zero:\n"
        "  xor %eax, %eax\n"
        "  ret\n"
        ".size zero, .-zero\n");
long fib(long n);
long zero(void);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    printf("%ld\n", fib(n) + zero());
    return 0;
}
