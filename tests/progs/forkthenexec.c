// A fork child whose parent executes a program at once, not waiting for
// the child to run (its first stop may be seen after the exec): the child
// waits until that exec closes the pipe, calls work(0..4) and exits with
// 3; the parent executes itself as `forkthenexec DIR after`, which waits
// for the child, calls after(1) and after(2) and exits with 0.
// usage: forkthenexec [DIR [after]]
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NI __attribute__((noinline, noclone))

static volatile long sink;

NI int work(int x) {
    sink += x;
    return x * 2;
}
NI int after(int x) {
    sink += x;
    return x * 3;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "after") == 0) {
        int st = 0;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 3) return 5;
        after(1);
        after(2);
        return 0;
    }
    int fds[2];
    if (pipe(fds)) return 1;
    if (fork() == 0) {
        char c;
        close(fds[1]);
        if (read(fds[0], &c, 1) != 0) _exit(2); /* EOF: the parent exec'd */
        int s = 0;
        for (int i = 0; i < 5; i++) s += work(i);
        _exit(s == 20 ? 3 : 1);
    }
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    execl("/proc/self/exe", argv[0], argc > 1 ? argv[1] : ".", "after", (char *)0);
    return 4;
}
