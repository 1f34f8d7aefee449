// Target of `wprobe trace`: every kind of call a call tree must survive,
// with call counts known by hand (tests/all/trace.rs):
//   fact(5)            recursion                     fact: 5
//   is_even(6)         mutual recursion              is_even: 4, is_odd: 3
//   tail_caller(1)     a tail call (jmp)             tail_caller: 1, tail_target: 1
//   try_jump()         setjmp, longjmp out of 3      try_jump: 1, jumper: 3
//                      frames (never return)
//   sig_during()       SIGUSR1 delivered inside it,  sig_during: 1, on_signal: 1,
//                      its handler calls leaf()      leaf: +1
//   4 threads          worker(i) calls leaf 10 times worker: 4, leaf: +40
// and main: 1. Every function is at least 5 bytes and starts with 5 bytes
// of nops (-fpatchable-function-entry=5, the asm function by hand), so
// uftrace's dynamic patching traces the same set. Prints a checksum.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>

#define NI __attribute__((noinline, noclone))

static volatile long sink;

NI int leaf(int x) {
    sink += x;
    return x + 1;
}

NI int fact(int n) {
    sink++;
    return n <= 1 ? 1 : n * fact(n - 1);
}

NI int is_odd(int n);
NI int is_even(int n) {
    sink++;
    return n == 0 ? 1 : is_odd(n - 1);
}
NI int is_odd(int n) {
    sink++;
    return n == 0 ? 0 : is_even(n - 1);
}

NI int tail_target(int x) {
    sink += x;
    return x * 3;
}
// tail_caller(x): tail_target(x + 1) by a jump, the caller's return address
// left for tail_target's `ret`.
int tail_caller(int x);
asm(".text\n"
    ".globl tail_caller\n"
    ".type tail_caller, @function\n"
    "tail_caller:\n"
    "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" // nopl 0(%rax,%rax,1)
    "  addl $1, %edi\n"
    "  jmp tail_target\n"
    ".size tail_caller, .-tail_caller\n"
    // Listed where gcc lists the others' nops, for uftrace.
    ".section __patchable_function_entries,\"awo\",@progbits,tail_caller\n"
    ".align 8\n"
    ".quad tail_caller\n"
    ".text\n");

static jmp_buf env;
NI void jumper(int depth) {
    sink++;
    if (depth == 0) longjmp(env, 1);
    jumper(depth - 1);
    sink++;
}
NI int try_jump(void) {
    if (setjmp(env) == 0) {
        jumper(2);
        return 0;
    }
    return 1;
}

NI void on_signal(int sig) { sink += leaf(sig); }
NI int sig_during(void) {
    sink++;
    raise(SIGUSR1);
    return (int)sink;
}

NI void *worker(void *arg) {
    long s = 0;
    for (int k = 0; k < 10; k++) s += leaf(k);
    return (void *)s;
}

int main(void) {
    signal(SIGUSR1, on_signal);
    long sum = fact(5) + is_even(6) + tail_caller(1) + try_jump();
    sum += sig_during() > 0;
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    printf("sum %ld\n", sum);
    return 0;
}
