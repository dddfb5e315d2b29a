/* Explicit huge pages under LD_PRELOAD (tests/hugetlb_preload.rs runs it with
 * HUGEALLOC_CONF=hugetlb:2M or hugetlb:1G): allocates BLOCKS blocks of 8 MiB (argv[1]) and
 * many small ones, writes them all, and prints per block the KernelPageSize of its mapping
 * in /proc/self/smaps, the 2M pool's free_hugepages while they live, and the arenas' hugetlb
 * fallbacks (mallctl, found with dlsym: the program is built without the library). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long kernel_page_kb(void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int inside = 0;
    long kb = -1;
    uintptr_t a = (uintptr_t)p;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char c;
        if (sscanf(line, "%lx-%lx%c", &lo, &hi, &c) == 3 && c == ' ') {
            inside = lo <= a && a < hi;
            continue;
        }
        if (inside && sscanf(line, "KernelPageSize: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

int main(int argc, char **argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 2;
    size_t len = 8 << 20;
    void *big[16];
    void *small[4000];
    if (blocks > 16) blocks = 16;
    for (int i = 0; i < blocks; i++) {
        big[i] = malloc(len);
        if (!big[i]) {
            printf("malloc(8 MiB) failed\n");
            return 1;
        }
        memset(big[i], i + 1, len);
        printf("block %d: KernelPageSize %ld kB\n", i, kernel_page_kb(big[i]));
    }
    for (int i = 0; i < 4000; i++) {
        small[i] = malloc(16 + i % 3000);
        if (!small[i]) {
            printf("malloc(small) failed\n");
            return 1;
        }
        memset(small[i], 7, 16 + i % 3000);
    }
    printf("free_hugepages 2M %ld\n",
           read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"));
    int (*ctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
    uint64_t fallbacks = 0;
    size_t sz = sizeof fallbacks;
    if (!ctl || ctl("stats.arenas.4096.hugetlb.fallbacks", &fallbacks, &sz, NULL, 0) != 0) {
        printf("mallctl(stats.arenas.4096.hugetlb.fallbacks) failed\n");
        return 1;
    }
    printf("fallbacks %llu\n", (unsigned long long)fallbacks);
    for (int i = 0; i < blocks; i++) {
        for (size_t off = 0; off < len; off += 4096)
            if (((unsigned char *)big[i])[off] != i + 1) {
                printf("block %d lost its contents\n", i);
                return 1;
            }
        free(big[i]);
    }
    for (int i = 0; i < 4000; i++) free(small[i]);
    printf("hugetlb: ok\n");
    return 0;
}
