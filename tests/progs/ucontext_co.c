// Target of the swapcontext tests (`wprobe trace`), two shapes in one run:
//
// 1. uftrace's s-ucontext (its t014 test): main makes a context that runs
//    bar on a stack that is an array in main's own frame (above the frames
//    of the calls main makes), foo switches to it, bar calls getpid and
//    returns, the context's link resumes foo inside swapcontext; then main
//    calls baz.
// 2. A coroutine on a stack in .bss (below main's), resumed three times by
//    resume(): co_body runs two steps, each calling leaf, yielding back to
//    main, and calling leaf again when resumed; after each resume main
//    calls leaf; the third resume lets co_body end (its link resumes main).
//
// No output; exits 0 when every value came out as computed by hand.
#include <ucontext.h>
#include <unistd.h>

#define NI __attribute__((noinline, noclone))

static ucontext_t main_ctx, co_ctx;
static char co_stack[65536];
static volatile int co_sum;

NI int foo(ucontext_t *old, ucontext_t *new) { return swapcontext(old, new); }

NI int bar(int c) { return c + getpid(); }

NI int baz(volatile int c) { return c % 2; }

NI int leaf(int x) {
    __asm__ volatile("");
    return x + 1;
}

NI int co_step(int i) {
    int r = leaf(i);
    swapcontext(&co_ctx, &main_ctx);
    return r + leaf(i);
}

NI void co_body(void) {
    int s = 0;
    for (int i = 0; i < 2; i++)
        s += co_step(i);
    co_sum = s;
}

NI int resume(void) {
    swapcontext(&main_ctx, &co_ctx);
    return leaf(100);
}

int main(void) {
    int n = 10;
    char stack[8192];
    ucontext_t curr, new;

    getcontext(&new);
    new.uc_link = &curr;
    new.uc_stack.ss_sp = stack;
    new.uc_stack.ss_size = sizeof stack;
    makecontext(&new, (void (*)(void))bar, 1, n);
    foo(&curr, &new);
    n = baz(n);

    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = co_stack;
    co_ctx.uc_stack.ss_size = sizeof co_stack;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, co_body, 0);
    int t = 0;
    for (int i = 0; i < 3; i++)
        t += resume();
    // leaf(i) twice per step: (1 + 1) + (2 + 2); resume: 101 three times.
    return !(n == 0 && co_sum == 6 && t == 303);
}
