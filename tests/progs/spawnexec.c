// Runs argv[1] (forkexecd) twice: through posix_spawn, then vfork and
// execv, waiting for each; calls work() before and after. Prints
// "spawn done 6".
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
__attribute__((noinline)) int work(int i) { asm volatile(""); return i * 2; }
int main(int argc, char **argv) {
    pid_t p;
    char *args[] = {argv[1], NULL};
    int s = work(1);
    if (posix_spawn(&p, argv[1], NULL, NULL, args, environ) != 0) return 1;
    waitpid(p, NULL, 0);
    pid_t q = vfork();
    if (q == 0) { execv(argv[1], args); _exit(127); }
    waitpid(q, NULL, 0);
    printf("spawn done %d\n", s + work(2));
    return 0;
}
