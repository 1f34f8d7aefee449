// Calls lib_add once, then forks 3 children: children 0 and 1 each call
// work(i), which calls lib_add twice; child 2 execs forkexecd (argv[1]),
// which calls exec_work 3 times and lib_add once. The parent waits for
// all three and prints the sum of their exit statuses.
// usage: forklib PATH_OF_FORKEXECD
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int lib_add(int x);

__attribute__((noinline)) int work(int i) { return lib_add(i) + lib_add(i + 10); }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int s = lib_add(100);
    for (int i = 0; i < 3; i++) {
        pid_t p = fork();
        if (p < 0) return 1;
        if (p == 0) {
            if (i == 2) {
                execl(argv[1], argv[1], (char *)0);
                _exit(127);
            }
            _exit(work(i) & 0x7f);
        }
        waitpid(p, NULL, 0);  // one child at a time: a fixed order
    }
    printf("forklib done %d\n", s);
    return 0;
}
