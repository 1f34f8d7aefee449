/* faulting.c - load(p) returns *p; called with &x, NULL, &x. The NULL call
 * faults on load's first instruction (mov (%rdi),%rax at -O2); a SIGSEGV
 * handler longjmps back, so the program goes on and prints what it saw:
 * "sum=10 caught=1" untraced. For logonfault (spec §14 step 8). */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>

static sigjmp_buf env;

static void on_segv(int sig)
{
    (void)sig;
    siglongjmp(env, 1);
}

__attribute__((noinline)) long load(long *p)
{
    return *p;
}

int main(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_segv;
    sigaction(SIGSEGV, &sa, 0);
    long x = 5, sum = 0;
    int caught = 0;
    long *volatile ptrs[3] = {&x, 0, &x};
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(env, 1) == 0)
            sum += load(ptrs[i]);
        else
            caught++;
    }
    printf("sum=%ld caught=%d\n", sum, caught);
    return 0;
}
