// Reads numbers from stdin; for each number N adds 1 to the global `g` N
// times (one write each) and prints `g N`; at EOF prints "done" and exits
// 0. A watchpoint on `g` fires once per write, when a test decides.
#include <stdio.h>

volatile long g;

int main(void) {
    long n;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (scanf("%ld", &n) == 1) {
        for (long i = 0; i < n; i++) g += 1;
        printf("g %ld\n", g);
    }
    printf("done\n");
    return 0;
}
