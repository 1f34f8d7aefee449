// The global `dup_sym`, called 5 times; call_local() calls the local one
// (dup_local.c) 3 times. A probe on `dup_sym` means the global one: the
// single global definition of a name wins over local ones.
#include <stdio.h>
int call_local(void);
__attribute__((noinline)) int dup_sym(int x) { return x * 2; }
int main(void) {
    int s = call_local();
    for (int i = 0; i < 5; i++) s += dup_sym(i);
    printf("s=%d\n", s);
    return 0;
}
