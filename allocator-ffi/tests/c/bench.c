/* malloc/free cost, for the TLS note in docs/c-api.md: compare the same program under
 * LD_PRELOAD (the cdylib reaches its thread-local state through __tls_get_addr) with the
 * program linked statically against libhugealloc.a (the linker relaxes the access to a
 * %fs-relative load) and with glibc.
 *   bench [pairs] : ns per malloc(size)+free pair (size 32), and per pair in batches of 64 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 50000000;
    void *volatile sink;
    for (long i = 0; i < 1000; i++)
        free(malloc(32));
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        void *p = malloc(32);
        sink = p;
        free(p);
    }
    double t1 = now_ns();
    void *batch[64];
    long rounds = n / 64;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 64; i++)
            batch[i] = malloc(16 + (i & 7) * 16);
        sink = batch[r & 63];
        for (int i = 0; i < 64; i++)
            free(batch[i]);
    }
    double t2 = now_ns();
    (void)sink;
    printf("malloc+free pair: %.2f ns\n", (t1 - t0) / n);
    printf("batch of 64 (16..128 B), per pair: %.2f ns\n", (t2 - t1) / (rounds * 64.0));
    return 0;
}
