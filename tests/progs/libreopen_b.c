// dlreopen.c's second library, laid out as the first: fb2 calls fb.
__attribute__((noinline)) int fb(int x) { return x + 2; }
int fb2(int x) { return fb(x) * 3; }
