// Target of the trace test of a daemon (uftrace's s-daemon shape): main
// calls daemon(), whose parent exits inside it (`_exit` after its fork);
// the child, a new session, returns from daemon() and calls a(), which
// calls b(), which calls c(), which calls getpid(). Exits 0.
#include <stdlib.h>
#include <unistd.h>

#define NI __attribute__((noinline, noclone))

static volatile int sink;

NI static int c(void) { return getpid() % 100000; }
NI static int b(void) { return c() + 1; }
NI static int a(void) { return b() - 1; }

int main(void) {
    if (daemon(1, 0) < 0)
        return 1;
    sink = a();
    return 0;
}
