/* mallctl from C: opt.* under the HUGEALLOC_CONF the runner sets (CTL_CONF in
 * allocator-ffi/tests/ctl.rs), per-arena decay time and THP policy round trips, per-bin
 * counters and their MIBs, a cache bin grown to a working set (no fills), arena.<i>.decay, error codes, and malloc_stats_print's JSON, which
 * is written to stdout between "JSON BEGIN" and "JSON END" lines for the runner to parse.
 * Run preloaded, linked and linked statically; prints "ctl (MODE): ok". */
#include "check.h"

#include <stdbool.h>
#include <sys/types.h>

static uint64_t read_u64(const char *name) {
    uint64_t v = 0;
    size_t len = sizeof v;
    CHECK_EQ(X(mallctl)(name, &v, &len, NULL, 0), 0);
    return v;
}

static const char *read_str(const char *name) {
    const char *s = NULL;
    size_t len = sizeof s;
    CHECK_EQ(X(mallctl)(name, &s, &len, NULL, 0), 0);
    return s ? s : "(null)";
}

static void test_opt(void) {
    unsigned narenas = 0;
    size_t len = sizeof narenas;
    CHECK_EQ(X(mallctl)("opt.narenas", &narenas, &len, NULL, 0), 0);
    CHECK_EQ(narenas, 2);
    CHECK(strcmp(read_str("opt.thp"), "never") == 0);
    CHECK(strcmp(read_str("opt.arena.63.thp"), "always") == 0);
    CHECK(strcmp(read_str("opt.arena.0.thp"), "inherit") == 0);
    CHECK(strcmp(read_str("opt.stats_print_opts"), "Jb") == 0);
    ssize_t decay = 0;
    len = sizeof decay;
    CHECK_EQ(X(mallctl)("opt.dirty_decay_ms", &decay, &len, NULL, 0), 0);
    CHECK_EQ(decay, 4321);
    CHECK_EQ(read_u64("opt.tcache_max"), 16384);
    bool tcache = false;
    len = sizeof tcache;
    CHECK_EQ(X(mallctl)("opt.tcache", &tcache, &len, NULL, 0), 0);
    CHECK(tcache);
    /* Wrong sizes, read-only names, unknown names. */
    len = 4;
    CHECK_EQ(X(mallctl)("opt.tcache", &tcache, &len, NULL, 0), EINVAL);
    len = sizeof narenas;
    CHECK_EQ(X(mallctl)("opt.narenas", NULL, NULL, &narenas, sizeof narenas), EPERM);
    CHECK_EQ(X(mallctl)("opt.bogus", NULL, NULL, NULL, 0), ENOENT);
    CHECK_EQ(X(mallctl)("opt.arena.64.thp", NULL, NULL, NULL, 0), ENOENT);
}

static void test_arena(unsigned a) {
    char name[96];
    snprintf(name, sizeof name, "arena.%u.thp", a);
    CHECK(strcmp(read_str(name), "never") == 0); /* thp:never, and no arena.<a>.thp */
    const char *always = "always";
    CHECK_EQ(X(mallctl)(name, NULL, NULL, &always, sizeof always), 0);
    CHECK(strcmp(read_str(name), "always") == 0);

    snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", a);
    ssize_t decay = 0, minus_one = -1, zero = 0, bad = -2;
    size_t len = sizeof decay;
    CHECK_EQ(X(mallctl)(name, &decay, &len, NULL, 0), 0);
    CHECK_EQ(decay, 4321);
    CHECK_EQ(X(mallctl)(name, &decay, &len, &minus_one, sizeof minus_one), 0);
    CHECK_EQ(decay, 4321);
    CHECK_EQ(X(mallctl)(name, NULL, NULL, &bad, sizeof bad), EINVAL);
    CHECK_EQ(X(mallctl)(name, &decay, &len, NULL, 0), 0);
    CHECK_EQ(decay, -1);

    /* Under -1 a freed huge block stays dirty; under 0 arena.<i>.decay purges it now. */
    char pdirty[96], decay_name[96];
    snprintf(pdirty, sizeof pdirty, "stats.arenas.%u.pdirty", a);
    snprintf(decay_name, sizeof decay_name, "arena.%u.decay", a);
    char *p = X(mallocx)(8 << 20, MALLOCX_ARENA(a) | MALLOCX_TCACHE_NONE);
    CHECK(p != NULL);
    memset(p, 1, 8 << 20);
    X(dallocx)(p, MALLOCX_TCACHE_NONE);
    CHECK(read_u64(pdirty) >= 2048);
    CHECK_EQ(X(mallctl)(decay_name, NULL, NULL, NULL, 0), 0);
    CHECK(read_u64(pdirty) >= 2048);
    CHECK_EQ(X(mallctl)(name, NULL, NULL, &zero, sizeof zero), 0);
    CHECK_EQ(X(mallctl)(decay_name, NULL, NULL, NULL, 0), 0);
    CHECK_EQ(read_u64(pdirty), 0);
    CHECK_EQ(X(mallctl)(decay_name, &decay, &len, NULL, 0), EPERM);
    CHECK_EQ(X(mallctl)("arena.99999.decay", NULL, NULL, NULL, 0), EFAULT);
}

/* The index of the bin of block size `size` (arenas.bin.<j>.size), checked to exist. */
static unsigned bin_of_size(uint64_t size) {
    unsigned nbins = 0, j;
    size_t len = sizeof nbins;
    CHECK_EQ(X(mallctl)("arenas.nbins", &nbins, &len, NULL, 0), 0);
    CHECK(nbins > 4);
    char name[96];
    for (j = 0; j < nbins; j++) {
        snprintf(name, sizeof name, "arenas.bin.%u.size", j);
        if (read_u64(name) == size)
            break;
    }
    CHECK(j < nbins);
    return j;
}

static void test_bins(unsigned a) {
    unsigned j = bin_of_size(48);
    unsigned old = 0;
    size_t len = sizeof old;
    CHECK_EQ(X(mallctl)("thread.arena", &old, &len, &a, sizeof a), 0);
    char nmalloc[96], ndalloc[96], curregs[96];
    snprintf(nmalloc, sizeof nmalloc, "stats.arenas.%u.bins.%u.nmalloc", a, j);
    snprintf(ndalloc, sizeof ndalloc, "stats.arenas.%u.bins.%u.ndalloc", a, j);
    snprintf(curregs, sizeof curregs, "stats.arenas.%u.bins.%u.curregs", a, j);
    uint64_t before = read_u64(nmalloc);
    static void *blocks[500];
    for (int k = 0; k < 500; k++)
        blocks[k] = malloc(48);
    uint64_t after = read_u64(nmalloc);
    CHECK(after >= before + 500);
    CHECK(read_u64(curregs) >= 500);
    for (int k = 0; k < 500; k++)
        free(blocks[k]);
    CHECK_EQ(X(mallctl)("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    CHECK(read_u64(ndalloc) >= 500);

    /* The MIB of a bin figure: change the arena and class components. */
    size_t mib[8], miblen = 8;
    CHECK_EQ(X(mallctlnametomib)("stats.arenas.0.bins.0.nmalloc", mib, &miblen), 0);
    CHECK_EQ(miblen, 6);
    mib[2] = a;
    mib[4] = j;
    uint64_t v = 0;
    len = sizeof v;
    CHECK_EQ(X(mallctlbymib)(mib, miblen, &v, &len, NULL, 0), 0);
    CHECK(v >= after);
    mib[4] = 9999;
    CHECK_EQ(X(mallctlbymib)(mib, miblen, &v, &len, NULL, 0), ENOENT);
    CHECK_EQ(X(mallctl)("thread.arena", NULL, NULL, &old, sizeof old), 0);
}

/* A thread-cache bin grows to hold a working set allocated and freed whole, over and over: after
 * a few rounds of 1,000 blocks of 64 B a round takes nothing from the arena's bin (no fill). */
static void test_tcache_grow(unsigned a) {
    unsigned slots = 0;
    size_t len = sizeof slots;
    CHECK_EQ(X(mallctl)("opt.tcache_nslots_small_max", &slots, &len, NULL, 0), 0);
    CHECK_EQ(slots, 2048);
    unsigned j = bin_of_size(64);
    unsigned old = 0;
    len = sizeof old;
    CHECK_EQ(X(mallctl)("thread.arena", &old, &len, &a, sizeof a), 0);
    char nfills[96];
    snprintf(nfills, sizeof nfills, "stats.arenas.%u.bins.%u.nfills", a, j);
    static void *blocks[1000];
    uint64_t fills[12];
    for (int round = 0; round < 12; round++) {
        for (int k = 0; k < 1000; k++)
            blocks[k] = malloc(64);
        for (int k = 0; k < 1000; k++)
            free(blocks[k]);
        fills[round] = read_u64(nfills);
    }
    /* The first round refills (1,000 blocks, a bin of 128), the last ones do not. */
    CHECK(fills[0] >= 1000 / 64);
    CHECK_EQ(fills[11], fills[8]);
    CHECK_EQ(X(mallctl)("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    CHECK_EQ(X(mallctl)("thread.arena", NULL, NULL, &old, sizeof old), 0);
}

struct sink {
    char text[1 << 18];
    size_t len;
};

static void collect(void *opaque, const char *text) {
    struct sink *s = opaque;
    size_t n = strlen(text);
    if (s->len + n < sizeof s->text) {
        memcpy(s->text + s->len, text, n);
        s->len += n;
        s->text[s->len] = 0;
    }
}

int main(void) {
    test_opt();
    unsigned a = 0;
    size_t len = sizeof a;
    CHECK_EQ(X(mallctl)("arenas.create", &a, &len, NULL, 0), 0);
    test_bins(a);
    test_tcache_grow(a);
    test_arena(a);
    static struct sink s;
    X(malloc_stats_print)(collect, &s, "J");
    CHECK(s.len > 0 && s.text[s.len - 1] == '\n');
    printf("JSON BEGIN\n%sJSON END\n", s.text);
    if (failures == 0)
        printf("ctl (%s): ok\n", MODE);
    return failures != 0;
}
