// Target of `wprobe trace -f`: spawn() forks inside a traced call; the
// child calls child_work(1) and returns from spawn() and main() (calls its
// parent entered), the parent waits and returns from both too. Exits 0.
#include <sys/wait.h>
#include <unistd.h>

#define NI __attribute__((noinline, noclone))

static volatile long sink;

NI int child_work(int x) {
    sink += x;
    return x * 2;
}
NI int parent_work(int x) {
    sink += x;
    return x * 3;
}
NI int spawn(void) {
    pid_t p = fork();
    if (p == 0) return child_work(1) + 100;
    int st = 0;
    waitpid(p, &st, 0);
    return parent_work(WIFEXITED(st) ? WEXITSTATUS(st) : 0);
}
int main(void) {
    int r = spawn();
    return r > 100 ? 0 : r == 0 ? 0 : 0;
}
