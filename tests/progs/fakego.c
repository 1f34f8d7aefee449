/* fakego.c - a C program that carries Go's build information section
 * (`.go.buildinfo`), as every Go executable does: wprobe takes it for a
 * Go program. Calls work() 5 times. */
#include <stdio.h>

__attribute__((section(".go.buildinfo"), used)) static const char buildinfo[32] =
    "\xff Go buildinf:";

__attribute__((noinline)) int work(int x)
{
    return x + 1;
}

int main(void)
{
    int s = 0;
    for (int i = 0; i < 5; i++)
        s += work(i);
    printf("%d\n", s);
    return 0;
}
