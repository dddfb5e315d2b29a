/* first_touch: issue 17's measure. Allocates a fresh buffer with malloc (whichever malloc the
 * process has: glibc's, or LD_PRELOAD's), touches it page by page in order, timing each 2 MiB,
 * then reports p50/p99/max per 2 MiB and the total; waits WAIT_MS (a deferred collapse's chance),
 * then reports the buffer's AnonHugePages (smaps, summed over the mappings it overlaps) and
 * the time of random 8-byte reads over it. One line of key=value on stdout.
 *
 *   cc -O2 -o first_touch first_touch.c
 *   ./first_touch [MIB=512] [WAIT_MS=1500] [READS=5000000]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* AnonHugePages (kB) of the mappings overlapping [lo, hi), and whether any has hg. */
static long huge_kb(uintptr_t lo, uintptr_t hi, int *hg) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    long kb = 0;
    int inside = 0;
    *hg = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        long v;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < hi && lo < b;
        } else if (inside && sscanf(line, "AnonHugePages: %ld kB", &v) == 1) {
            kb += v;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " hg")) {
            *hg = 1;
        }
    }
    fclose(f);
    return kb;
}

static long minflt(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    long v = -1;
    if (f && fgets(buf, sizeof buf, f)) {
        char *p = strrchr(buf, ')');
        /* fields after the command: state ppid pgrp session tty tpgid flags minflt */
        if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %ld", &v);
    }
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 512;
    long wait_ms = argc > 2 ? strtol(argv[2], 0, 10) : 1500;
    long reads = argc > 3 ? strtol(argv[3], 0, 10) : 5000000;
    size_t len = mib << 20, seg = 2 << 20, nseg = len / seg;
    double *t = calloc(nseg, sizeof *t);
    long f0 = minflt();
    double start = now_s();
    char *p = malloc(len);
    if (!p || !t) return 1;
    for (size_t s = 0; s < nseg; s++) {
        double a = now_s();
        for (size_t o = 0; o < seg; o += 4096) p[s * seg + o] = 1;
        t[s] = now_s() - a;
    }
    double total = now_s() - start;
    long faults = minflt() - f0;
    qsort(t, nseg, sizeof *t, cmp);
    int hg0;
    long kb0 = huge_kb((uintptr_t)p, (uintptr_t)p + len, &hg0);
    usleep(wait_ms * 1000);
    int hg1;
    long kb1 = huge_kb((uintptr_t)p, (uintptr_t)p + len, &hg1);
    uint64_t x = 88172645463325252ull, sum = 0;
    double r0 = now_s();
    for (long i = 0; i < reads; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        sum += p[(x % (len / 8)) * 8];
    }
    double rd = now_s() - r0;
    printf("mib=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f total_ms=%.1f minflt=%ld huge_mib_at_touch=%ld "
           "huge_mib_after_wait=%ld hg=%d read_ns=%.1f sum=%llu\n",
           mib, t[nseg / 2] * 1e6, t[nseg * 99 / 100] * 1e6, t[nseg - 1] * 1e6, total * 1e3, faults, kb0 / 1024,
           kb1 / 1024, hg0 | hg1, reads ? rd * 1e9 / reads : 0.0, (unsigned long long)sum);
    free(p);
    return 0;
}
