#include "redirect.h"
// Functions with known first instructions, one per step-over path, called
// N times each; prints a checksum. usage: asmfuncs N
#include <stdio.h>
#include <stdlib.h>

long g_var = 5;
long f_push(long), f_sub(long), f_lea(long), f_endbr(long), f_nop(long),
    f_jmp(long), f_call(long), f_ool(long), f_ool2(long), f_movimm(long), f_pushimm(long),
    f_rep(long);

#define FN(name, body) \
    asm(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n" body "\n.size " #name ", .-" #name "\n")

FN(f_push, "push %rbp\n mov %rsp,%rbp\n push %r12\n mov %rdi,%rax\n pop %r12\n pop %rbp\n ret");
FN(f_sub, "sub $0x18,%rsp\n add $0x18,%rsp\n lea 2(%rdi),%rax\n ret");
FN(f_lea, "lea 1(%rdi,%rdi,2),%rax\n ret");
FN(f_endbr, "endbr64\n xor %eax,%eax\n add %rdi,%rax\n ret");
FN(f_nop, "nopl 0(%rax)\n nop\n mov %rdi,%rax\n ret");
FN(f_jmp, "jmp 1f\n ud2\n1: mov %rdi,%rax\n ret");
FN(f_call, "call f_lea\n ret");
FN(f_ool, "mov g_var(%rip),%rax\n add %rdi,%rax\n ret");
FN(f_ool2, "cmp $3,%rdi\n jne 1f\n mov $7,%eax\n ret\n1: mov %rdi,%rax\n ret");
FN(f_movimm, "mov $9,%eax\n mov $-2,%rcx\n add %rcx,%rax\n add %rdi,%rax\n ret");
FN(f_pushimm, "push $42\n pop %rax\n add %rdi,%rax\n ret");
FN(f_rep, "mov %rdi,%rcx\n and $7,%rcx\n lea -64(%rsp),%rdi\n xor %eax,%eax\n rep stosb\n mov %rcx,%rax\n ret");

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long (*fs[])(long) = {f_push, f_sub, f_lea, f_endbr, f_nop, f_jmp, f_call, f_ool, f_ool2, f_movimm, f_pushimm, f_rep};
    unsigned long long sum = 0;
    for (long i = 0; i < n; i++)
        for (unsigned k = 0; k < sizeof fs / sizeof fs[0]; k++) sum = sum * 31 + fs[k](i);
    printf("sum=%llu\n", sum);
    return 0;
}
