// A vfork child's calls. usage: vforkwork DIR MODE (DIR is not used).
// MODE exec / exit: vfork; the child calls child_work twice, then
// executes /bin/true (exec) or _exit(0)s (exit). MODE clone: as
// posix_spawn makes its child, clone(CLONE_VM | CLONE_VFORK) on a stack of
// its own, the child calling child_work twice and executing /bin/true.
// MODE spawn: posix_spawn of /bin/true. MODE tracer: as exec, and the
// parent prints its TracerPid line of /proc/self/status after the child
// is gone. The parent waits for the child, then calls parent_work. Prints
// nothing else; exits 0 when the child did.
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
__attribute__((noinline)) int child_work(int i) { asm volatile(""); return i + 1; }
__attribute__((noinline)) int parent_work(int i) { asm volatile(""); return i * 2; }
static int in_clone(void *arg) {
    (void)arg;
    child_work(1);
    child_work(2);
    execl("/bin/true", "true", (char *)0);
    _exit(127);
}
static char stack[64 * 1024] __attribute__((aligned(16)));
int main(int argc, char **argv) {
    const char *mode = argc > 2 ? argv[2] : "exec";
    pid_t p;
    if (strcmp(mode, "spawn") == 0) {
        char *args[] = {"true", NULL};
        if (posix_spawn(&p, "/bin/true", NULL, NULL, args, environ) != 0) return 1;
    } else if (strcmp(mode, "clone") == 0) {
        p = clone(in_clone, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
        if (p < 0) return 1;
    } else {
        int execs = strcmp(mode, "exec") == 0 || strcmp(mode, "tracer") == 0;
        p = vfork();
        if (p == 0) {
            child_work(1);
            child_work(2);
            if (execs) execl("/bin/true", "true", (char *)0);
            _exit(0);
        }
    }
    int st = 1;
    waitpid(p, &st, 0);
    if (strcmp(mode, "tracer") == 0) {
        char line[256];
        FILE *f = fopen("/proc/self/status", "r");
        while (f && fgets(line, sizeof line, f))
            if (strncmp(line, "TracerPid:", 10) == 0) fputs(line, stdout);
        if (f) fclose(f);
    }
    parent_work(3);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
