/* short_funcs.c - forty functions too short for a 5-byte jump (`lea; ret`,
 * 4 bytes each at -O1), each called N times (argv[1], default 3): under
 * --transport inproc every one of their entries and rets gets an int3,
 * and wprobe says so in one line rather than one per site. Prints the sum
 * of what they return. */
#include <stdio.h>
#include <stdlib.h>

#define SHORT(k) \
    __attribute__((noinline, noipa)) int s##k(int i) { return i + k; }
#define TEN(t) SHORT(t##0) SHORT(t##1) SHORT(t##2) SHORT(t##3) SHORT(t##4) \
    SHORT(t##5) SHORT(t##6) SHORT(t##7) SHORT(t##8) SHORT(t##9)
SHORT(0) SHORT(1) SHORT(2) SHORT(3) SHORT(4) SHORT(5) SHORT(6) SHORT(7) SHORT(8) SHORT(9)
TEN(1) TEN(2) TEN(3)
#define CALLS(t) (s##t##0(i) + s##t##1(i) + s##t##2(i) + s##t##3(i) + s##t##4(i) + \
    s##t##5(i) + s##t##6(i) + s##t##7(i) + s##t##8(i) + s##t##9(i))

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += s0(i) + s1(i) + s2(i) + s3(i) + s4(i) + s5(i) + s6(i) + s7(i) + s8(i) + s9(i) +
               CALLS(1) + CALLS(2) + CALLS(3);
    printf("%ld\n", sum);
    return 0;
}
