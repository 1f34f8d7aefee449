// Library calls through GOT slots and no PLT entry (the trace tests build
// it with -fno-plt -Wl,-z,now): direct calls, a tail call (`tail`, at -O2
// `jmp *getpid@GOTPCREL(%rip)`) and calls through a pointer the program
// took from the slot. Prints 8 per round: `noplt N` prints 8 * N;
// `noplt N spin` then goes on calling them every millisecond, forever.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noipa)) int c(const char *s) { return (int)strlen(s) + (getpid() > 0); }
__attribute__((noipa)) int b(const char *s) { return c(s) + 1; }
__attribute__((noipa)) int a(const char *s) { return b(s) + 1; }
__attribute__((noipa)) pid_t tail(void) { return getpid(); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    pid_t (*volatile f)(void) = getpid;
    int t = 0;
    for (int i = 0; i < n; i++)
        t += a("abc") + (tail() > 0) + (f() > 0);
    printf("%d\n", t);
    fflush(stdout);
    while (argc > 2) {
        t += a("abc") + (tail() > 0) + (f() > 0);
        usleep(1000);
    }
    return t == 0;
}
