#include "redirect.h"
/* ctor_user.c - linked with libctorlib.so (whose constructor calls
 * ctor_target CTOR_CALLS times before main), calls ctor_target N times
 * itself. usage: ctor_user N */
#include <stdio.h>
#include <stdlib.h>

long ctor_target(long);
extern long ctor_sum;

int main(int argc, char **argv) {
    REDIRECT_STDOUT(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 2, s = 0;
    for (long i = 0; i < n; i++) s += ctor_target(i);
    printf("ctor_sum=%ld sum=%ld\n", ctor_sum, s);
    return 0;
}
