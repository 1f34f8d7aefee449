// Calls work() about 100,000 times a second, forever (a spin of 10 us
// between calls): the target of benches/attach-kill/run.
#include <time.h>

__attribute__((noinline)) long work(long i) {
    asm volatile("");
    return i + 1;
}

static void spin_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < us * 1000);
}

int main(void) {
    for (long s = 0;; spin_us(10)) s = work(s);
}
