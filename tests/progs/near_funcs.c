/* near_funcs.c - sites where no 5-byte jump fits, with alignment padding
 * nearby (built with -O2 -falign-functions=32 -fcf-protection=none): the
 * entries of `inc` and `twice` (4 bytes each), and the `ret` of
 * `countdown` (a branch target from after it, followed by 2 bytes of
 * in-function padding before an aligned loop). Under --transport inproc
 * each takes a near jump (`jmp rel8`) to a `jmp` to its stub written into
 * the padding between functions, none a trap. `outer(i)` calls
 * `countdown(i)`, `inc(i)` and `twice(i)`, and returns 3i+1. With a number N: N calls of `outer`, then
 * the sum. With none: reads numbers from standard input; for each N makes
 * N more calls and prints the running sum ("sum S"); at EOF "done S" (a
 * test decides when the probes can fire). */
#include <stdio.h>
#include <stdlib.h>

#define NOI __attribute__((noinline, noipa))

NOI int inc(int i) { return i + 1; }
NOI int twice(int i) { return i + i; }

/* int countdown(int n): n if n <= 0, else n minus 2 until it is <= 0 (0 or
 * -1). Its `ret` (at offset 13) is the target of the `jmp` after it, and
 * only 2 bytes of padding follow it: no 5-byte window can hold it. */
__asm__(".text\n"
        ".p2align 5\n"
        ".globl countdown\n"
        ".type countdown, @function\n"
        "countdown:\n"
        "  mov %edi, %eax\n"
        "  nopl 0x0(%rax)\n"
        "  nop\n nop\n nop\n"
        "  test %eax, %eax\n"
        "  jg 2f\n"
        "1: ret\n"
        "  .p2align 4\n"
        "2: sub $2, %eax\n"
        "  jg 2b\n"
        "  jmp 1b\n"
        ".size countdown, .-countdown\n");
int countdown(int n);

NOI long outer(long i)
{
    return (long)inc((int)i) + twice((int)i) - countdown((int)i) * 0;
}

int main(int argc, char **argv)
{
    long sum = 0, i = 0, n;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1) {
        n = atol(argv[1]);
        for (long k = 0; k < n; k++, i++)
            sum += outer(i);
        printf("%ld\n", sum);
        return 0;
    }
    while (scanf("%ld", &n) == 1) {
        for (long k = 0; k < n; k++, i++)
            sum += outer(i);
        printf("sum %ld\n", sum);
    }
    printf("done %ld\n", sum);
    return 0;
}
