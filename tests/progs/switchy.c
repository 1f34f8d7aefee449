/* switchy.c - a `switch` compiled to a jump table whose cases return
 * directly (`mov $k, %eax; ret` in the middle of the function): the
 * windows at those `ret`s need the instruction before them, which the
 * in-process transport allows in a function with an indirect `jmp` only
 * when it could read the table's targets. pick(i % 9) for i < N (argv[1],
 * default 9); prints the sum, 1084 for N = 9. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int pick(unsigned k, int x)
{
    switch (k) {
    case 0: return x + 11;
    case 1: return x * 3;
    case 2: return x - 7;
    case 3: return 42;
    case 4: return x ^ 5;
    case 5: return x << 2;
    case 6: return 2 * x + 1;
    case 7: return 1000;
    default: return -1;
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 9;
    long s = 0;
    for (int i = 0; i < n; i++)
        s += pick(i % 9, i);
    printf("%ld\n", s);
    return 0;
}
