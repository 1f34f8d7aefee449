/* switch_shapes.c - `switch`es whose jump tables GCC -O2 (PIE) bounds in
 * shapes the in-process transport's table reader once missed, leaving
 * every `ret` of the function a trap (a ptrace stop per call):
 *   classify: the check on a 16-bit register (`cmp $8, %dx; ja`), the
 *             switch on a 9-bit field (Perl's `op_type`);
 *   masked:   no check at all, the index masked (`and $7, %edi`): all 8
 *             values are cases;
 *   run:      the table's base loaded once before the loop that
 *             dispatches (`lea TABLE(%rip), %r8`), far from its `jmp`.
 * N = argv[1] (default 10) rounds of the three; prints the sum. */
#include <stdio.h>
#include <stdlib.h>

struct op {
    unsigned short type : 9, flags : 7;
};

__attribute__((noinline)) int classify(const struct op *o, int x)
{
    switch (o->type) {
    case 0: return x + 11;
    case 1: return x * 3;
    case 2: return x - 7;
    case 3: return 42;
    case 4: return x ^ 5;
    case 5: return x << 2;
    case 6: return 2 * x + 1;
    case 7: return 1000;
    case 8: return x - 100;
    default: return -1;
    }
}

__attribute__((noinline)) int masked(unsigned v, int x)
{
    switch ((v >> 3) & 7) {
    case 0: return x + 1;
    case 1: return x * 5;
    case 2: return x - 9;
    case 3: return 77;
    case 4: return x ^ 0x33;
    case 5: return x << 3;
    case 6: return 3 * x + 2;
    case 7: return x - 1;
    default: __builtin_unreachable();
    }
}

__attribute__((noinline)) long run(const unsigned char *ops, int n)
{
    long acc = 0;
    for (int i = 0; i < n; i++) {
        unsigned v = ops[i];
        v = v * 2654435761u;
        v ^= v >> 13;
        v *= 0x5bd1e995u;
        v ^= v >> 15;
        v += (unsigned)i * 40503u;
        v ^= v >> 7;
        acc += v & 3;
        switch ((v ^ ops[i]) % 11u) {
        case 0: acc += 3; break;
        case 1: acc *= 2; break;
        case 2: acc -= 7; break;
        case 3: acc ^= 0x55; break;
        case 4: acc += i; break;
        case 5: acc = acc * 3 + 1; break;
        case 6: acc >>= 1; break;
        case 7: acc += 1000; break;
        case 8: acc -= i * 2; break;
        case 9: if (acc > 1000000) return acc - i; break;
        case 10: if (acc < -1000000) return acc + i; break;
        default: break;
        }
    }
    return acc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    long s = 0;
    unsigned char ops[64];
    for (int i = 0; i < 64; i++)
        ops[i] = (unsigned char)(i * 7);
    for (int i = 0; i < n; i++) {
        struct op o = { .type = (unsigned short)(i % 10), .flags = 1 };
        s += classify(&o, i);
        s += masked((unsigned)i * 13, i);
        s += run(ops, 64);
    }
    printf("%ld\n", s);
    return 0;
}
