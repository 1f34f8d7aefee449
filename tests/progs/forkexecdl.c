// A fork child that opens a library after its parent executed another
// program: the child says it runs (the parent executes nothing before),
// waits until its parent's exec closes the pipe, then opens
// libreopen_a.so, calls fa2(1) and exits; the parent executes
// `sleep 0.3`. usage: forkexecdl DIR
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    char pa[4096];
    snprintf(pa, sizeof pa, "%s/libreopen_a.so", dir);
    int fds[2], up[2];
    if (pipe(fds) || pipe(up)) return 1;
    if (fork() == 0) {
        char c = 'r';
        close(fds[1]);
        close(up[0]);
        if (write(up[1], &c, 1) != 1) _exit(3);
        if (read(fds[0], &c, 1) != 0) _exit(2); /* EOF: the parent exec'd */
        void *a = dlopen(pa, RTLD_NOW);
        if (!a) _exit(1);
        int (*fa2)(int) = (int (*)(int))dlsym(a, "fa2");
        fa2(1);
        _exit(0);
    }
    char c;
    close(fds[0]);
    close(up[1]);
    if (read(up[0], &c, 1) != 1) return 4;
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    execl("/bin/sleep", "sleep", "0.3", (char *)0);
    return 3;
}
