/* benches/hugepages.c - what the first touch of a page costs: N pages of
 * 2 MiB of fresh anonymous memory, advised for transparent huge pages
 * (MADV_HUGEPAGE, as mimalloc advises its arena) or not (MADV_NOHUGEPAGE:
 * each 2 MiB touched as 512 pages of 4 KiB), each timed. A huge page is
 * zeroed whole at its first touch: where the kernel must compact memory
 * for it, or the hypervisor back it (a virtual machine reporting its free
 * pages to its host), that costs milliseconds a page
 * (docs/architecture.md, "wprobe's heap in pages of 4 KiB").
 *
 * usage: cc -O2 -o hugepages benches/hugepages.c && ./hugepages N huge|4k
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	if (argc != 3 || atoi(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s N huge|4k\n", argv[0]);
		return 2;
	}
	size_t n = (size_t)atoi(argv[1]), huge = 2UL << 20;
	int thp = strcmp(argv[2], "huge") == 0;
	char *m = mmap(0, (n + 1) * huge, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	char *p = (char *)(((unsigned long)m + huge - 1) & ~(huge - 1));
	madvise(p, n * huge, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	double t0 = ms(), dearest = 0;
	for (size_t i = 0; i < n; i++) {
		double a = ms();
		for (size_t o = 0; o < huge; o += thp ? huge : 4096)
			p[i * huge + o] = 1;
		double d = ms() - a;
		if (d > dearest)
			dearest = d;
	}
	printf("%s: %zu x 2 MiB in %.2f ms (the dearest 2 MiB: %.2f ms)\n",
	       thp ? "huge pages" : "4 KiB pages", n, ms() - t0, dearest);
	return 0;
}
