// Appends "started" to the file argv[1] as its first act, then calls f()
// 5 times and prints the sum: a command that ran twice leaves two lines.
#include <stdio.h>
__attribute__((noinline)) int f(int x) { return x * 2; }
int main(int argc, char **argv) {
    FILE *m = fopen(argv[1], "a");
    if (!m) return 2;
    fputs("started\n", m);
    fclose(m);
    int s = 0;
    for (int i = 0; i < 5; i++) s += f(i);
    printf("sum=%d\n", s);
    return 0;
}
