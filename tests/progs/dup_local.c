// One of two definitions of `dup_sym`: a local (static) one, called by
// call_local() 3 times. The global one is in dup_global.c.
__attribute__((noinline)) static int dup_sym(int x) { return x + 1; }
int call_local(void) {
    int s = 0;
    for (int i = 0; i < 3; i++) s += dup_sym(i);
    return s;
}
