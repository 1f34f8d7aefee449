// Maps /dev/zero readable and executable (as some JITs and old loaders
// do), prints "mapped", then sleeps N seconds. usage: map_devzero N
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int fd = open("/dev/zero", O_RDONLY);
    void *p = mmap(0, 1 << 20, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (fd < 0 || p == MAP_FAILED) {
        perror("mapping /dev/zero");
        return 1;
    }
    printf("mapped\n");
    fflush(stdout);
    sleep(argc > 1 ? atoi(argv[1]) : 5);
    return 0;
}
