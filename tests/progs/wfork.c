/* Watchpoints under -f: the parent writes g_value (100, 101), forks a
 * child whose second thread writes it (200, 201, 202) and which forks a
 * grandchild that writes it (400, 401); once both are waited for, the
 * parent writes 300. Every write goes through put(), whose store takes
 * the value from rdi. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long g_value;

__attribute__((noinline)) void put(long v) { g_value = v; }

static void *writer(void *arg) {
    (void)arg;
    for (long i = 0; i < 3; i++)
        put(200 + i);
    return 0;
}

int main(void) {
    put(100);
    put(101);
    pid_t child = fork();
    if (child == 0) {
        pthread_t t;
        pthread_create(&t, 0, writer, 0);
        pthread_join(t, 0);
        pid_t grandchild = fork();
        if (grandchild == 0) {
            put(400);
            put(401);
            _exit(0);
        }
        waitpid(grandchild, 0, 0);
        _exit(0);
    }
    waitpid(child, 0, 0);
    put(300);
    return 0;
}
