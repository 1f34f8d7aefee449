/* dispatch_user.c - calls libdispatch's dispatch() 100 times with a
 * function of its own (static: no probe site), and once with -1; prints
 * the sum. Built with and without -fno-plt. */
#include <stdio.h>

int dispatch(int (*f)(int), int x);

static int twice(int x)
{
    return 2 * x;
}

int main(void)
{
    long s = 0;
    for (int i = 0; i < 100; i++)
        s += dispatch(twice, i);
    s += dispatch(twice, -1);
    printf("%ld\n", s);
    return 0;
}
