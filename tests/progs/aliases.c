// One function under two global names, as glibc defines `__open` and its
// alias `open`: `__count_impl` and `count`. main calls it 3 times by the
// alias; the exit status says whether the sum was right.
__attribute__((noinline)) int __count_impl(int x) { return x + 1; }
int count(int) __attribute__((alias("__count_impl")));
int main(void) {
    int s = 0;
    for (int i = 0; i < 3; i++) s += count(i);
    return s == 6 ? 0 : 1;
}
