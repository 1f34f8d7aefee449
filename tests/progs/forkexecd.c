// Exec'd by forklib's third child: exec_work 3 times, lib_add once.
#include <stdio.h>

int lib_add(int x);

__attribute__((noinline)) int exec_work(int i) {
    asm volatile("");
    return i * 2;
}

int main(void) {
    int s = 0;
    for (int i = 0; i < 3; i++) s += exec_work(i);
    s += lib_add(s);
    printf("forkexecd %d\n", s);
    return 0;
}
