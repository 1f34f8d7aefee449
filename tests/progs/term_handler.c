// Calls tick() every millisecond until SIGTERM, which its handler reports
// ("got TERM") before exiting with status 3; SIGINT is left at its default.
// usage: term_handler
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long tick(long i) {
    asm volatile("");
    return i + 1;
}

static void on_term(int s) {
    (void)s;
    static const char msg[] = "got TERM\n";
    write(1, msg, sizeof msg - 1);
    _exit(3);
}

int main(void) {
    signal(SIGTERM, on_term);
    printf("ready\n");
    fflush(stdout);
    for (long i = 0;; i = tick(i)) usleep(1000);
}
