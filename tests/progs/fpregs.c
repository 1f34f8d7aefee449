// Known x87, SSE and thread state at a probe, on a thread that is not the
// main thread: xmm0 = {lo 0x1122334455667788, hi 0x99aabbccddeeff00},
// ST(0) = pi, ST(1) = 1.0 (fldpi over fld1), default MXCSR and FCW, then a
// call of probed(). The thread prints its pthread_self() (its thread
// pointer) so a test can compare it with `push task`.
// usage: fpregs
#include <pthread.h>
#include <stdio.h>

__attribute__((noinline)) void probed(void) { asm volatile(""); }

static void *worker(void *arg) {
    (void)arg;
    printf("self=%#lx\n", (unsigned long)pthread_self());
    fflush(stdout);
    asm volatile(
        "movabsq $0x1122334455667788, %%rax\n\t"
        "movq %%rax, %%xmm0\n\t"
        "movabsq $0x99aabbccddeeff00, %%rax\n\t"
        "movq %%rax, %%xmm1\n\t"
        "punpcklqdq %%xmm1, %%xmm0\n\t"
        "fld1\n\t"
        "fldpi\n\t"
        "call probed\n\t"
        "fstp %%st(0)\n\t"
        "fstp %%st(0)\n\t"
        :
        :
        : "rax", "xmm0", "xmm1", "memory", "cc");
    return 0;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    return 0;
}
