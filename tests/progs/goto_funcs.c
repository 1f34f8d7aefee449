/* goto_funcs.c - two shapes whose returns took a trap under the in-process
 * transport (built with -O2 -fcf-protection=none, PIE or not):
 *
 * - `run`, an interpreter loop with GCC's labels as values (CPython's
 *   `_PyEval_EvalFrameDefault` shape): its indirect jumps go through
 *   `ops`, a table of its own labels, so any window past its entry was
 *   refused (a jump table "may land anywhere"). The labels are read from
 *   the data (an absolute word, or a relative relocation in a PIE) and a
 *   window goes where none lands.
 * - `pad_ret`, whose `ret` has room for a near jump's 2 bytes only, and
 *   no padding between functions in reach but 5 bytes of dead padding
 *   after a `jmp` inside it: the near jump's cave goes there.
 *
 * `outer(i)` calls `run(prog[i % 3], i)` and `pad_ret(i % 4 - 1)`. With a
 * number N: N calls of `outer`, then the sum. */
#include <stdio.h>
#include <stdlib.h>

#define NOI __attribute__((noinline, noipa))

/* Opcodes: 0 add one, 1 double, 2 end. */
NOI long run(const unsigned char *code, long x)
{
    static void *ops[] = {&&op_inc, &&op_dbl, &&op_end};
    const unsigned char *pc = code;
    goto *ops[*pc++];
op_inc:
    x += 1;
    goto *ops[*pc++];
op_dbl:
    x *= 2;
    goto *ops[*pc++];
op_end:
    return x;
}

/* int pad_ret(int n): n + 1 if n > 0, else n. Its `ret` follows a `nop`
 * that the `jmp 1b` after it lands on: the window must start at the
 * `nop`, 2 bytes, and live code follows the `ret`. */
__asm__(".text\n"
        ".p2align 5\n"
        ".globl pad_ret\n"
        ".type pad_ret, @function\n"
        "pad_ret:\n"
        "  mov %edi, %eax\n"
        "  test %eax, %eax\n"
        "  jg 3f\n"
        "1: nop\n"
        "  ret\n"
        "3: lea 1(%rdi), %eax\n"
        "  jmp 1b\n"
        "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nopl 0(%rax,%rax,1) */
        "  ud2\n"
        ".size pad_ret, .-pad_ret\n");
int pad_ret(int n);

static const unsigned char progs[3][5] = {
    {0, 1, 2},    /* (x + 1) * 2 */
    {1, 1, 0, 2}, /* x * 4 + 1 */
    {2},          /* x */
};

NOI long outer(long i)
{
    return run(progs[i % 3], i) + pad_ret((int)(i % 4) - 1);
}

int main(int argc, char **argv)
{
    long sum = 0, n = argc > 1 ? atol(argv[1]) : 3;
    for (long i = 0; i < n; i++)
        sum += outer(i);
    printf("%ld\n", sum);
    return 0;
}
