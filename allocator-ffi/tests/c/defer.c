/* thp:defer under a real C program (run with HUGEALLOC_CONF=thp:defer): a 64 MiB block
 * touched page by page becomes huge-backed (AnonHugePages of the mappings it overlaps) within a
 * 30 s hang bound, its mappings never carry hg (no MADV_HUGEPAGE), and the collapse counters
 * say the background thread collapsed its 32 chunks. Prints "skipped" where THP is never. */
#include "check.h"

#include <time.h>
#include <unistd.h>

#define MIB (1UL << 20)
#define LEN (64 * MIB)

/* AnonHugePages (bytes) of the mappings overlapping [lo, hi); sets *hg when one has hg. */
static size_t huge_bytes(uintptr_t lo, uintptr_t hi, int *hg) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    size_t kb = 0;
    int inside = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        long v;
        char *dash = strchr(line, '-'), *space = strchr(line, ' ');
        if (dash && space && dash < space && sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            inside = a < hi && lo < b;
        } else if (inside && sscanf(line, "AnonHugePages: %ld kB", &v) == 1) {
            kb += v;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " hg")) {
            *hg = 1;
        }
    }
    fclose(f);
    return kb * 1024;
}

static uint64_t stat_u64(const char *name) {
    uint64_t v = 0;
    size_t len = sizeof v;
    CHECK_EQ(X(mallctl)(name, &v, &len, NULL, 0), 0);
    return v;
}

int main(void) {
    char mode[64] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f || !fgets(mode, sizeof mode, f) || strstr(mode, "[never]")) {
        printf("defer (%s): skipped, THP unavailable\n", MODE);
        return 0;
    }
    fclose(f);
    char *p = malloc(LEN);
    CHECK(p != NULL && (uintptr_t)p % (2 * MIB) == 0);
    int hg = 0;
    huge_bytes((uintptr_t)p, (uintptr_t)p + LEN, &hg);
    CHECK(!hg);
    for (size_t o = 0; o < LEN; o += 4096) p[o] = (char)(o >> 12);
    time_t start = time(NULL);
    size_t huge = 0;
    /* The background thread counts a collapse after madvise returns, so smaps can show the
     * last chunk huge a moment before the counter says so: wait for both. */
    while (((huge = huge_bytes((uintptr_t)p, (uintptr_t)p + LEN, &hg)) < LEN ||
            stat_u64("stats.arenas.4096.thp.collapse.done") < LEN / (2 * MIB)) &&
           !hg && time(NULL) - start < 30)
        usleep(50000);
    CHECK(!hg);
    CHECK(huge >= LEN);
    CHECK(stat_u64("stats.arenas.4096.thp.collapse.done") >= LEN / (2 * MIB));
    for (size_t o = 0; o < LEN; o += 4096) CHECK_EQ(p[o], (char)(o >> 12));
    free(p);
    return finish("defer");
}
