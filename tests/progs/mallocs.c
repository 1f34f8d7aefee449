// Calls malloc N times with the sizes 0x10000 + i (i < N) and frees each,
// so a handler logging malloc's first argument can tell these calls from
// the C library's own. usage: mallocs N
#include <stdio.h>
#include <stdlib.h>

// The compiler may not elide the allocations: they escape through here.
char *volatile last;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10;
    unsigned long sum = 0;
    for (long i = 0; i < n; i++) {
        last = malloc(0x10000 + i);
        last[0] = (char)i;
        sum += (unsigned char)last[0];
        free(last);
    }
    printf("sum=%lu\n", sum);
    return 0;
}
