// A tiny JIT: code in a page it maps read-write-execute at 0x70000000,
// driven by stdin: 'c' calls it and prints the result, 'r' rewrites it
// (first byte changes: mov $1,%eax; ret becomes xor %eax,%eax; inc %eax;
// inc %eax; ret), 'q' exits. It prints "ready" once the code is there.
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static const unsigned char v1[] = {0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3};
static const unsigned char v2[] = {0x31, 0xc0, 0xff, 0xc0, 0xff, 0xc0, 0xc3};

int main(void) {
    unsigned char *code = mmap((void *)0x70000000, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (code != (void *)0x70000000) {
        perror("mmap");
        return 1;
    }
    memcpy(code, v1, sizeof v1);
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("ready\n");
    int ch;
    while ((ch = getchar()) != EOF) {
        if (ch == 'c') printf("%d\n", ((int (*)(void))code)());
        else if (ch == 'r') { memcpy(code, v2, sizeof v2); printf("rewritten\n"); }
        else if (ch == 'q') return 0;
    }
    return 0;
}
