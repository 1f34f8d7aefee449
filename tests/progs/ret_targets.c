/* ret_targets.c - functions whose `ret` a `je` lands on, with no room
 * after it for a jump: the shapes of CPython's PyObject_GC_UnTrack (the
 * `je` nine instructions before the `ret` that ends the function) and
 * _PyTrash_end (two bytes of padding after the `ret`, code after them),
 * where most of the ptrace stops of a traced `python3 -c pass` were. The
 * in-process transport's window at such a `ret` takes the `je` with it.
 * add_words, pick8 and pickm are more shapes found in Node.js, vtail
 * CPython's traverse functions. For i < N
 * (argv[1], default 6): each on a state that depends on i; prints the sum
 * of their values. */
#include <stdio.h>
#include <stdlib.h>

long untrack(long *p);
int trash_end(long *p);

#define FN(name, body) \
    asm(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n" body "\n.size " #name ", .-" #name "\n")

/* p[0] == 0: returns 0 at once (the `je` to the `ret`); else returns
 * (p[1] & ~3 | p[2] & 3) + 5 and clears p[0]. trash_end follows at once. */
FN(untrack, "mov (%rdi),%rax\n test %rax,%rax\n je 1f\n mov 8(%rdi),%rcx\n mov 16(%rdi),%rdx\n"
            " and $-4,%rcx\n and $3,%edx\n or %rcx,%rdx\n mov %rdx,%rax\n add $5,%rax\n"
            " movq $0,(%rdi)\n1: ret");
/* --p[0] (as an int); returns it when p[1] == 0 or it is positive, else it + 100. */
FN(trash_end, "mov (%rdi),%eax\n sub $1,%eax\n cmpq $0,8(%rdi)\n mov %eax,(%rdi)\n je 1f\n"
              " test %eax,%eax\n jle 2f\n1: ret\n xchg %ax,%ax\n2: mov $100,%edx\n"
              " add %edx,%eax\n ret");

/* OpenSSL's bn_add_words: r[] = a[] + b[] over n words, the carry out;
 * a `jle` to the `ret` over a loop entered by a `jmp` forward, two bytes of
 * padding after the `ret`: one window holds the whole function. */
long add_words(long *r, const long *a, const long *b, int n);
FN(add_words, "xor %eax,%eax\n test %ecx,%ecx\n jle 2f\n sub %r8,%r8\n jmp 1f\n"
              " .byte 0x0f,0x1f,0x44,0x00,0x00\n1: mov (%rsi,%rax,8),%r8\n"
              " adc (%rdx,%rax,8),%r8\n mov %r8,(%rdi,%rax,8)\n lea 1(%rax),%rax\n"
              " dec %ecx\n jne 1b\n sbb %r8,%r8\n mov %r8,%rax\n and $1,%eax\n2: ret\n"
              " xchg %ax,%ax");

/* V8's dispatch: a `switch` on a byte, checked as a byte (`cmp $3, %sil`)
 * and zero-extended into the index of an absolute table (this file is
 * linked -no-pie); the cases return in the middle of the function. */
long pick8(long x, unsigned char k);
FN(pick8, "cmp $3,%sil\n ja 9f\n movzbl %sil,%eax\n mov %rdi,%rdx\n jmp *8f(,%rax,8)\n"
          "0: lea 1(%rdx),%rax\n ret\n1: lea (%rdx,%rdx),%rax\n ret\n"
          "2: mov %rdx,%rax\n neg %rax\n ret\n3: mov $77,%eax\n nop\n ret\n"
          "9: mov $-1,%rax\n ret\n .section .rodata\n .p2align 3\n8: .quad 0b, 1b, 2b, 3b\n"
          " .text");

/* OpenSSL's asn1_item_embed_d2i: the byte checked in memory, then read
 * into the index (`cmpb $3, (%rsi); ja; movzbl (%rsi), %eax`); the same
 * cases as pick8. */
long pickm(long x, const unsigned char *k);
FN(pickm, "cmpb $3,(%rsi)\n ja 9f\n movzbl (%rsi),%eax\n mov %rdi,%rdx\n jmp *8f(,%rax,8)\n"
          "0: lea 1(%rdx),%rax\n ret\n1: lea (%rdx,%rdx),%rax\n ret\n"
          "2: mov %rdx,%rax\n neg %rax\n ret\n3: mov $77,%eax\n nop\n ret\n"
          "9: mov $-1,%rax\n ret\n .section .rodata\n .p2align 3\n8: .quad 0b, 1b, 2b, 3b\n"
          " .text");

/* CPython's tp_traverse: `return visit(op, arg)` ends in a tail call
 * through the pointer it was given (`jmp *%rax` after the epilogue), and a
 * `ret` in the middle of the function; the `ret`'s window needs the
 * instruction before it, which is allowed once the `jmp` is known not to
 * be a jump table's. vtail(x, f): 5 when x is 0, else f(x). */
long vtail(long x, long (*f)(long));
FN(vtail, "push %rbx\n mov %rsi,%rbx\n test %rdi,%rdi\n jne 1f\n mov $5,%eax\n pop %rbx\n ret\n"
          "1: mov %rbx,%rax\n pop %rbx\n jmp *%rax");

__attribute__((noinline)) long thrice(long x)
{
    asm volatile("");
    return 3 * x;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 6;
    long sum = 0;
    for (int i = 0; i < n; i++) {
        long s[3] = {i % 2, 40 + i, i};
        sum += untrack(s);
        long t[2] = {i, i % 3};
        sum += trash_end(t);
        long a[3] = {-1, -1, i}, b[3] = {1, 0, i}, r[3] = {0, 0, 0};
        sum += add_words(r, a, b, i % 4) + r[0] + 2 * (i % 4 > 2 ? r[2] : 0);
        sum += pick8(i, (unsigned char)(i % 5));
        unsigned char km = (unsigned char)(i % 5);
        sum += pickm(i, &km);
        sum += vtail(i % 3 == 0 ? 0 : i, thrice);
    }
    printf("%ld\n", sum);
    return 0;
}
