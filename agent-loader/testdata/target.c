/* A target for the agent's ptrace test: it installs a signal handler and
 * an alternate signal stack of its own, prints a deterministic line every
 * 20 ms, and at the end reports (from the inside) whether its alternate
 * stack and its caught-signal mask are still what it set up. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile long acc;

static void on_usr1(int sig) { (void)sig; acc += 1000; }

static void sigcgt(char *out, size_t n) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  out[0] = 0;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "SigCgt:", 7) == 0) {
      snprintf(out, n, "%s", line + 7);
      out[strcspn(out, "\n")] = 0;
    }
  if (f) fclose(f);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 40;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  static char alt[65536];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  char before[64];
  sigcgt(before, sizeof before);
  printf("ready %d\n", getpid());
  fflush(stdout);
  for (int i = 0; i < n; i++) {
    acc += (long)i * i;
    printf("line %d %ld\n", i, acc);
    fflush(stdout);
    usleep(20000);
  }
  stack_t cur;
  sigaltstack(NULL, &cur);
  char after[64];
  sigcgt(after, sizeof after);
  printf("altstack %s size=%zu flags=%d\n", cur.ss_sp == alt ? "same" : "changed",
         cur.ss_size, cur.ss_flags);
  printf("sigcgt %s\n", strcmp(before, after) == 0 ? "same" : "changed");
  return 0;
}
