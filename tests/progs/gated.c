// Reads numbers from stdin; for each number N calls work(i) N times and
// prints the running sum, so a test decides exactly when probes can fire.
// At EOF prints "done SUM" and exits 0.
#include <stdio.h>

__attribute__((noinline)) long work(long i) {
    asm volatile("");
    return i * 3 + 1;
}

int main(void) {
    long n, sum = 0, i = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (scanf("%ld", &n) == 1) {
        for (long k = 0; k < n; k++, i++) sum += work(i);
        printf("sum %ld\n", sum);
    }
    printf("done %ld\n", sum);
    return 0;
}
