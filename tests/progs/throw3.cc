// Tracee of the return-probe tests: a C++ exception thrown through three
// traced frames (one with a destructor to run while unwinding) and caught
// in main; the output and the exit status must be those of an untraced run.
// usage: throw3 [>OUT]
#include <cstdio>
#include <stdexcept>

#include "redirect.h"

#define NOINLINE __attribute__((noinline))

static int destroyed;

struct Guard {
    ~Guard() { destroyed++; }
};

NOINLINE int t3(int x) {
    if (x > 0) throw std::runtime_error("boom");
    return x + 3;
}

NOINLINE int t2(int x) {
    Guard g;
    return t3(x) + 2;
}

NOINLINE int t1(int x) { return t2(x) + 1; }

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    for (int i = 0; i < 3; i++) {
        try {
            printf("t1(%d) = %d\n", i, t1(i));
        } catch (const std::exception &e) {
            printf("caught %s (%d destroyed)\n", e.what(), destroyed);
        }
    }
    return 5;
}
