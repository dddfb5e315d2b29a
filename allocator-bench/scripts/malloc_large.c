/* malloc_large: a C port of mimalloc-bench's malloc-large (20 slots; 2000 times a random slot
 * gets a new buffer of 5-25 MiB, value-initialised as `std::make_unique<char[]>(n)` does: malloc
 * plus memset 0; the old one is freed). Prints time, minor faults and peak RSS, for profiling
 * (issue 17):
 *   cc -O2 -fno-builtin -o malloc_large malloc_large.c  (else gcc folds malloc+memset into calloc) && LD_PRELOAD=... ./malloc_large [ITERS=2000]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    enum { N = 20 };
    size_t lo = 5u << 20, hi = 25u << 20;
    char *buf[N] = {0};
    uint64_t x = 42;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < iters; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int k = x % N;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t n = lo + x % (hi - lo + 1);
        free(buf[k]);
        buf[k] = malloc(n);
        memset(buf[k], 0, n);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    for (int k = 0; k < N; k++) free(buf[k]);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("iters=%d secs=%.3f minflt=%ld maxrss_mib=%ld\n", iters,
           (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, ru.ru_minflt, ru.ru_maxrss / 1024);
    return 0;
}
