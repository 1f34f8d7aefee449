#include "redirect.h"
// Forks K children; each calls target(i) M times and exits 0 (or 1 if its
// checksum is wrong). Prints how many children exited 0. usage: forker K M [vfork]
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) long target(long i) {
    asm volatile("");
    return i + 1;
}

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    int k = argc > 1 ? atoi(argv[1]) : 10;
    long m = argc > 2 ? atol(argv[2]) : 100;
    int use_vfork = argc > 3 && argv[3][0] == 'v';
    int ok = 0;
    for (int c = 0; c < k; c++) {
        pid_t p = use_vfork ? vfork() : fork();
        if (p == 0) {
            if (use_vfork) execl("/bin/true", "true", (char *)0), _exit(3);
            long s = 0;
            for (long i = 0; i < m; i++) s += target(i);
            _exit(s == m * (m + 1) / 2 ? 0 : 1);
        }
        int st;
        waitpid(p, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
        else fprintf(stderr, "child status %#x\n", st);
    }
    long s = 0;
    for (long i = 0; i < m; i++) s += target(i);
    printf("ok=%d sum=%ld\n", ok, s);
    return 0;
}
