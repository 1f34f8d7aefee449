/* Functions whose entries the stub test patches in this very process. */
long add3(long a, long b, long c) { return a + 2 * b + 3 * c; }

/* The same, never patched: the baseline of the timing. */
long add3_plain(long a, long b, long c) { return a + 2 * b + 3 * c; }

/* Same again, patched with a stub calling a native no-op (stub cost). */
long add3_nop(long a, long b, long c) { return a + 2 * b + 3 * c; }

/* Same again, patched with a site id without a handler. */
long add3_nohandler(long a, long b, long c) { return a + 2 * b + 3 * c; }

double fmadd(double x, double y, double z) { return x * y + z; }

static long total;
long accumulate(long v) {
  total += v;
  return total;
}
