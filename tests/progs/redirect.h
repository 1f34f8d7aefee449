// Tests pass ">PATH" as the first argument to capture the output of a traced
// program (the tracer launches it directly, without a shell).
#include <stdio.h>
#define REDIRECT_STDOUT(argc, argv)                                   \
    do {                                                              \
        if ((argc) > 1 && (argv)[1][0] == '>') {                      \
            if (!freopen((argv)[1] + 1, "w", stdout)) return 99;      \
            setvbuf(stdout, NULL, _IOLBF, 0);                         \
            (argv)[1] = (argv)[0];                                    \
            (argv)++;                                                 \
            (argc)--;                                                 \
        }                                                             \
    } while (0)
