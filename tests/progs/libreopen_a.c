// dlreopen.c's first library: fa2 calls fa.
__attribute__((noinline)) int fa(int x) { return x + 1; }
int fa2(int x) { return fa(x) * 2; }
