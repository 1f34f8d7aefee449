/* Watchpoints under -f across an exec: the parent writes g_value (100),
 * forks a child that waits on a pipe, and executes itself again; the new
 * image writes 300, closes the pipe (the child then writes 200, 201 in
 * the old image) and, once the child is waited for, writes 301. Every
 * write goes through put(), whose store takes the value from rdi. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
volatile long g_value;
__attribute__((noinline)) void put(long v) { g_value = v; }
int main(int argc, char **argv) {
    if (argc > 2) { /* the exec'd image: fd to close, child pid */
        put(300);
        close(atoi(argv[1]));
        waitpid(atoi(argv[2]), 0, 0);
        put(301);
        return 0;
    }
    int p[2]; pipe(p);
    put(100);
    pid_t c = fork();
    if (c == 0) { char b; close(p[1]); read(p[0], &b, 1); put(200); put(201); _exit(0); }
    close(p[0]);
    char fd[16], pid[16]; snprintf(fd, sizeof fd, "%d", p[1]); snprintf(pid, sizeof pid, "%d", c);
    execl("/proc/self/exe", argv[0], fd, pid, (char *)0);
    return 1;
}
