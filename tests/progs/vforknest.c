// A vfork child that vforks. usage: vforknest DIR MODE (DIR is not used).
// The parent vforks a child, which calls middle: middle calls
// child_work(1), vforks a grandchild, waits for it, calls child_work(2)
// and returns; the child then calls child_work(3) and executes
// /bin/true (MODE exec) or _exit(0)s (MODE exit). The grandchild, inside
// middle, calls grand_work(10) and grand_work(11), then executes
// /bin/true or _exit(0)s likewise. The parent waits for the child, then
// calls parent_work. Prints nothing; exits 0 when both children did.
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static int execs;
__attribute__((noinline)) int child_work(int i) { asm volatile(""); return i + 1; }
__attribute__((noinline)) int grand_work(int i) { asm volatile(""); return i + 2; }
__attribute__((noinline)) int parent_work(int i) { asm volatile(""); return i * 2; }
__attribute__((noinline)) static void done(void) {
    if (execs) execl("/bin/true", "true", (char *)0);
    _exit(0);
}
__attribute__((noinline)) int middle(void) {
    child_work(1);
    pid_t g = vfork();
    if (g == 0) {
        grand_work(10);
        grand_work(11);
        done();
    }
    int st = 1;
    if (g < 0 || waitpid(g, &st, 0) != g) return 1;
    child_work(2);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
int main(int argc, char **argv) {
    execs = strcmp(argc > 2 ? argv[2] : "exec", "exec") == 0;
    pid_t p = vfork();
    if (p == 0) {
        if (middle() != 0) _exit(1);
        child_work(3);
        done();
    }
    int st = 1;
    waitpid(p, &st, 0);
    parent_work(3);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
