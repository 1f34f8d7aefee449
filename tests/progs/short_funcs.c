/* short_funcs.c - ten functions too short for a 5-byte jump (`lea; ret`,
 * 4 bytes each at -O1), each called N times (argv[1], default 3): under
 * --transport inproc every one of their entries and rets gets an int3,
 * and wprobe says so in one line rather than one per site. Prints the sum
 * of what they return. */
#include <stdio.h>
#include <stdlib.h>

#define SHORT(k) \
    __attribute__((noinline, noipa)) int s##k(int i) { return i + k; }
SHORT(0) SHORT(1) SHORT(2) SHORT(3) SHORT(4)
SHORT(5) SHORT(6) SHORT(7) SHORT(8) SHORT(9)

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += s0(i) + s1(i) + s2(i) + s3(i) + s4(i) + s5(i) + s6(i) + s7(i) + s8(i) + s9(i);
    printf("%ld\n", sum);
    return 0;
}
