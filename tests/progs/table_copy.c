/* table_copy.c - a function with a dense `switch` (a jump table of
 * absolute addresses, `jmp *TABLE(,%rdi,8)`: built -O2
 * -fcf-protection=none, non-PIE; with -DREL, PIE, a table of offsets
 * from itself: `lea TABLE(%rip),%rdx; movslq (%rdx,%rdi,4),%rax; add
 * %rdx,%rax; jmp *%rax`) one of whose `ret`s no jump can cover,
 * packed between 160-byte functions so that no padding is in reach of a
 * near jump (the shape of Debian's python3.11 at 0x67396a).
 *
 * `sw_func`: case 1 ends in a `jmp` that leaves to the last `ret`; case 0
 * is `xor %eax,%eax; ret` (the `xor` a table entry and the target of case
 * 3's `jmp`), the byte after that `ret` case 2's entry: the `ret` has no
 * 5-byte window. Under --transport inproc it runs as a relocated copy of
 * the whole function carrying a copy of its table whose entries lead to
 * the copy's cases. No trap.
 *
 * sw_func(n) = 0, 3, 6, 12, 32 for n = 0..4, else -1.
 * usage: table_copy N: calls sw_func(i % 7) for i < N; prints the sum. */
#include <stdio.h>
#include <stdlib.h>

long sw_func(long n);
long filler_a(long n);
long filler_b(long n);

/* 26 x `add %rdi,%rax; xor %rdx,%rax` (6 bytes each) and a `ret`. */
#define FILL ".rept 26\n add %rdi,%rax\n xor %rdx,%rax\n .endr\n"
#define FN(name) ".globl " #name "\n.type " #name ", @function\n" #name ":\n"
#define END(name) ".size " #name ", .-" #name "\n"

__asm__(".text\n"
        ".p2align 4\n"
        FN(filler_a) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_a)
        FN(sw_func)
        "  cmp $4,%rdi\n"
        "  ja .Lsw_def\n"
#ifdef REL
        "  lea .Lsw_tab(%rip),%rdx\n"
        "  movslq (%rdx,%rdi,4),%rax\n"
        "  add %rdx,%rax\n"
        "  jmp *%rax\n"
#else
        "  jmp *.Lsw_tab(,%rdi,8)\n"
#endif
        ".Lsw_def:\n"
        "  mov $-1,%rax\n"
        "  ret\n"
        ".Lsw1:\n"
        "  lea 1(%rdi,%rdi),%rax\n"
        "  jmp .Lsw_out\n"
        ".Lsw0:\n"
        "  xor %eax,%eax\n"
        "  ret\n"
        ".Lsw2:\n"
        "  lea (%rdi,%rdi,2),%rax\n"
        "  ret\n"
        ".Lsw3:\n"
        "  lea 9(%rdi),%rax\n"
        "  test %rax,%rax\n"
        "  jne .Lsw_out\n"
        "  jmp .Lsw0\n"
        ".Lsw4:\n"
        "  mov %rdi,%rax\n"
        "  shl $3,%rax\n"
        ".Lsw_out:\n"
        "  ret\n"
        END(sw_func)
        FN(filler_b) "  xor %eax,%eax\n xor %edx,%edx\n" FILL "  ret\n" END(filler_b)
        ".section .rodata\n"
        ".p2align 3\n"
        ".Lsw_tab:\n"
#ifdef REL
        "  .long .Lsw0-.Lsw_tab, .Lsw1-.Lsw_tab, .Lsw2-.Lsw_tab, .Lsw3-.Lsw_tab, .Lsw4-.Lsw_tab\n"
#else
        "  .quad .Lsw0, .Lsw1, .Lsw2, .Lsw3, .Lsw4\n"
#endif
        ".text\n");

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10;
    long sum = filler_a(1) + filler_b(2);
    for (long i = 0; i < n; i++)
        sum += sw_func(i % 7);
    printf("%ld\n", sum);
    return 0;
}
