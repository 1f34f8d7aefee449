// Target of `wprobe trace`'s exact-output tests: one thread, a fixed tree.
//   main { top(2) { middle(0) { leaf(0) leaf(1) } middle(1) { leaf(1) leaf(2) } } }
// top returns 1+2+2+3 = 8; main returns 0 when it does.
#define NI __attribute__((noinline, noclone))

static volatile long sink;

NI int leaf(int x) {
    sink += x;
    return x + 1;
}
NI int middle(int x) { return leaf(x) + leaf(x + 1); }
NI int top(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += middle(i);
    return s;
}
int main(void) { return top(2) == 8 ? 0 : 1; }
