/* flags_calls.c - the flags survive a traced call's entry and return:
 * flags_round(at_call, at_ret, &after) sets RFLAGS to at_call (popfq) and
 * calls flags_pass, which returns the flags it found at its entry (after
 * the 5-byte nop its entry window takes), sets RFLAGS to at_ret and
 * returns through a 5-byte nop and a `ret` (the return site's window);
 * flags_round stores the flags found after the return in *after. main
 * prints, for each setting of the arithmetic flags and DF, what the
 * function saw at its entry and what its caller saw after its return,
 * masked to those bits: identical traced and untraced. With an argument
 * N, it runs the settings N times, and sleeps 300 ms after the first
 * time: the first call of a thread, and every call before wprobe's first
 * clock anchor (5 ms after its transport opened, at the earliest), take
 * the full path of --transport inproc, the later ones its fast path. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t flags_round(uint64_t at_call, uint64_t at_ret, uint64_t *after);
__asm__(".text\n"
        ".globl flags_round\n"
        ".type flags_round, @function\n"
        "flags_round:\n"
        "  push %rbx\n"
        "  mov %rdx, %rbx\n"
        "  push %rdi\n"
        "  popfq\n"
        "  call flags_pass\n"
        "  pushfq\n"
        "  pop %rcx\n"
        "  mov %rcx, (%rbx)\n"
        "  cld\n"
        "  pop %rbx\n"
        "  ret\n"
        ".size flags_round, .-flags_round\n"
        ".globl flags_pass\n"
        ".type flags_pass, @function\n"
        "flags_pass:\n"
        "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nopl 0x0(%rax,%rax,1) */
        "  pushfq\n"
        "  pop %rax\n"
        "  push %rsi\n"
        "  popfq\n"
        "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        "  ret\n"
        ".size flags_pass, .-flags_pass\n");

/* CF PF AF ZF SF DF OF */
#define MASK 0xcd5u

int main(int argc, char **argv)
{
    static const uint64_t bits[] = {0x1, 0x4, 0x10, 0x40, 0x80, 0x400, 0x800, 0x8d5, 0xcd5, 0};
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    for (int r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < sizeof bits / sizeof *bits; i++) {
            /* The flags at the return: the others' (each setting meets a
             * different one at each end). */
            uint64_t b2 = bits[(i + 3) % (sizeof bits / sizeof *bits)];
            uint64_t after = 0;
            uint64_t seen = flags_round(0x202 | bits[i], 0x202 | b2, &after);
            printf("0x%llx 0x%llx 0x%llx 0x%llx\n", (unsigned long long)bits[i],
                   (unsigned long long)(seen & MASK), (unsigned long long)b2,
                   (unsigned long long)(after & MASK));
        }
        if (r == 0 && rounds > 1) {
            fflush(stdout);
            usleep(300000);
        }
    }
    return 0;
}
