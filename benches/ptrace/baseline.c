/* baseline.c - the minimal one-stop ptrace tracer: the floor for any
 * ptrace-based per-hit cost. It launches the target, puts an int3 at ADDR
 * (whose instruction must be `push %rbp`), and at every stop reads the
 * registers, emulates the displaced push (rsp -= 8, store rbp, rip += 1),
 * writes the registers back and resumes. One trap, one GETREGS, one
 * POKEDATA, one SETREGS per hit; no handler at all.
 *
 * usage: baseline ADDR TARGET [ARGS...]   (prints the hit count to stderr) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s ADDR TARGET [ARGS...]\n", argv[0]);
        return 2;
    }
    unsigned long addr = strtoul(argv[1], NULL, 0);
    pid_t pid = fork();
    if (pid == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        raise(SIGSTOP);
        execv(argv[2], argv + 2);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);                                /* SIGSTOP */
    ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_EXITKILL | PTRACE_O_TRACEEXEC);
    ptrace(PTRACE_CONT, pid, 0, 0);
    waitpid(pid, &st, 0);                                /* exec stop */
    errno = 0;
    long word = ptrace(PTRACE_PEEKTEXT, pid, addr, 0);
    if (errno || (word & 0xff) != 0x55) {
        fprintf(stderr, "baseline: 0x%lx does not hold push %%rbp\n", addr);
        kill(pid, SIGKILL);
        return 2;
    }
    ptrace(PTRACE_POKETEXT, pid, addr, (word & ~0xffL) | 0xcc);
    ptrace(PTRACE_CONT, pid, 0, 0);
    unsigned long hits = 0;
    for (;;) {
        if (waitpid(pid, &st, 0) < 0)
            break;
        if (WIFEXITED(st) || WIFSIGNALED(st))
            break;
        int sig = WIFSTOPPED(st) ? WSTOPSIG(st) : 0;
        if (sig == SIGTRAP) {
            struct user_regs_struct r;
            ptrace(PTRACE_GETREGS, pid, 0, &r);
            if (r.rip - 1 == addr) {
                hits++;
                r.rsp -= 8;
                ptrace(PTRACE_POKEDATA, pid, r.rsp, r.rbp);
                r.rip = addr + 1;
                ptrace(PTRACE_SETREGS, pid, 0, &r);
                sig = 0;
            }
        }
        ptrace(PTRACE_CONT, pid, 0, sig);
    }
    fprintf(stderr, "baseline: %lu hits\n", hits);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
