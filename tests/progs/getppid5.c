// Calls getppid() five times (a libc function its shell wrapper does not
// call) and prints "done".
#include <stdio.h>
#include <unistd.h>

int main(void) {
    long s = 0;
    for (int i = 0; i < 5; i++) s += getppid() > 0;
    printf("done %ld\n", s);
    return 0;
}
