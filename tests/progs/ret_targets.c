/* ret_targets.c - functions whose `ret` a `je` lands on, with no room
 * after it for a jump: the shapes of CPython's PyObject_GC_UnTrack (the
 * `je` nine instructions before the `ret` that ends the function) and
 * _PyTrash_end (two bytes of padding after the `ret`, code after them),
 * where most of the ptrace stops of a traced `python3 -c pass` were. The
 * in-process transport's window at such a `ret` takes the `je` with it.
 * For i < N (argv[1], default 6): untrack(s) and trash_end(s) on a state
 * that depends on i; prints the sum of their values, 253 for N = 6. */
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

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 6;
    long sum = 0;
    for (int i = 0; i < n; i++) {
        long s[3] = {i % 2, 40 + i, i};
        sum += untrack(s);
        long t[2] = {i, i % 3};
        sum += trash_end(t);
    }
    printf("%ld\n", sum);
    return 0;
}
