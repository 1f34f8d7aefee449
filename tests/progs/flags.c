/* flags.c - the probed code's flags survive a hit: flags_probe sets RFLAGS
 * from its argument (popfq), runs a 5-byte nop (flags_probe+2, where the
 * tests put a probe), and returns RFLAGS as they are after it. main prints
 * each setting of the arithmetic flags and DF with what came back, masked
 * to those bits: identical with and without a probe at the nop. */
#include <stdint.h>
#include <stdio.h>

uint64_t flags_probe(uint64_t flags);
__asm__(".text\n"
        ".globl flags_probe\n"
        ".type flags_probe, @function\n"
        "flags_probe:\n"
        "  push %rdi\n"
        "  popfq\n"
        "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nopl 0x0(%rax,%rax,1) */
        "  pushfq\n"
        "  pop %rax\n"
        "  cld\n"
        "  ret\n"
        ".size flags_probe, .-flags_probe\n");

/* CF PF AF ZF SF DF OF */
#define MASK 0xcd5u

int main(void)
{
    /* Each flag alone, all arithmetic ones, all with DF, none. */
    static const uint64_t bits[] = {0x1, 0x4, 0x10, 0x40, 0x80, 0x400, 0x800, 0x8d5, 0xcd5, 0};
    for (unsigned i = 0; i < sizeof bits / sizeof *bits; i++) {
        uint64_t in = 0x202 | bits[i]; /* IF and the always-set bit 1 */
        printf("0x%llx 0x%llx\n", (unsigned long long)(in & MASK),
               (unsigned long long)(flags_probe(in) & MASK));
    }
    return 0;
}
