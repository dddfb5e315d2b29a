/* Out of memory through the C ABI. The program warms hugealloc up, lowers its own RLIMIT_AS
 * to a little above what it has mapped (so mmap fails with ENOMEM), and checks that:
 * - every allocating entry point returns NULL with errno = ENOMEM for a request that cannot be
 *   met (posix_memalign returns ENOMEM and leaves *out and errno alone; xallocx returns the old
 *   usable size), and a failed realloc/reallocarray/rallocx leaves the block as it was;
 * - filling the address space with huge, large and small blocks ends in NULL + ENOMEM;
 * - blocks the thread cache holds are still served, and another thread can still call malloc
 *   (it returns: no deadlock, no abort);
 * - after the blocks are freed the same allocations succeed again, and once the limit is
 *   raised a 1 GiB block can be had, on both threads.
 * Prints "oom (MODE): ok". Nothing here calls malloc implicitly once the limit is set (stdout's
 * buffer is allocated before, stderr is unbuffered). */
#include "check.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define HEADROOM (64 * MiB)
#define CACHED 32
#define NHUGE 1024
#define NLARGE 4096
#define NSMALL 400000

/* The hugealloc exports <stdlib.h> does not declare, resolved before the limit (dlsym may
 * allocate). */
static __typeof__(&mallocx) p_mallocx;
static __typeof__(&rallocx) p_rallocx;
static __typeof__(&xallocx) p_xallocx;
static __typeof__(&sallocx) p_sallocx;

static size_t vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

static int set_limit(rlim_t bytes) {
    struct rlimit r = {bytes, RLIM_INFINITY};
    return setrlimit(RLIMIT_AS, &r);
}

/* NULL with errno == ENOMEM, errno reset before the call by the macro. */
#define CHECK_OOM(call)                                                                   \
    do {                                                                                  \
        errno = 0;                                                                        \
        void *r_ = (call);                                                                \
        int e_ = errno;                                                                   \
        if (r_ != NULL || e_ != ENOMEM) {                                                 \
            fprintf(stderr, "%s:%d: %s: %p, errno %d (want NULL, ENOMEM)\n", __FILE__,    \
                    __LINE__, #call, r_, e_);                                             \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

static int touch(void *p, size_t n, unsigned char v) {
    unsigned char *c = p;
    c[0] = v;
    c[n - 1] = v ^ 0x5a;
    return c[0] == v && c[n - 1] == (unsigned char)(v ^ 0x5a);
}

/* Successful calls that changed errno (C: errno is never changed by a call that succeeds). */
static size_t errno_changed;

/* Mallocs blocks of `size` into out[0..cap) until NULL; returns how many it got. The NULL
 * must come with ENOMEM; a success must leave errno alone. */
static size_t exhaust(void **out, size_t cap, size_t size) {
    for (size_t i = 0; i < cap; i++) {
        errno = 0;
        out[i] = malloc(size);
        if (out[i] == NULL) {
            CHECK_EQ(errno, ENOMEM);
            return i;
        }
        if (errno != 0) {
            if (errno_changed++ == 0)
                fprintf(stderr, "oom: malloc(%zu) succeeded with errno set to %d\n", size, errno);
        }
        CHECK(touch(out[i], size, (unsigned char)i));
    }
    return cap;
}

/* The helper thread: round k runs when `go` reaches k; its result goes to `result`, then k to
 * `done`. */
static atomic_int go, done, ready;
static int result; /* 1: small block served, 0: NULL with ENOMEM, -1: wrong */

static void *helper(void *arg) {
    (void)arg;
    void *w = malloc(48); /* warm: this thread has a cache before the limit */
    CHECK(w != NULL);
    free(w);
    atomic_store(&ready, 1);
    for (int round = 1; round <= 2; round++) {
        while (atomic_load(&go) < round)
            sched_yield();
        errno = 0;
        void *s = malloc(48);
        int small_errno = errno;
        void *l = malloc(MiB);
        void *h = malloc(GiB);
        int r;
        if (round == 1) {
            /* Under the limit: the huge one fails; the others return something. */
            r = s ? 1 : (small_errno == ENOMEM ? 0 : -1);
            if (h != NULL)
                r = -1;
        } else {
            r = (s && l && h) ? 1 : -1;
        }
        if (s) {
            CHECK(touch(s, 48, 1));
            free(s);
        }
        if (l) {
            CHECK(touch(l, MiB, 2));
            free(l);
        }
        if (h) {
            CHECK(touch(h, GiB, 3));
            free(h);
        }
        result = r;
        atomic_store(&done, round);
    }
    return NULL;
}

static int helper_run(int round) {
    atomic_store(&go, round);
    while (atomic_load(&done) < round)
        sched_yield();
    return result;
}

static void **huge, **large, **small;

int main(void) {
    p_mallocx = X(mallocx);
    p_rallocx = X(rallocx);
    p_xallocx = X(xallocx);
    p_sallocx = X(sallocx);
    huge = calloc(NHUGE, sizeof *huge);
    large = calloc(NLARGE, sizeof *large);
    small = calloc(NSMALL, sizeof *small);
    CHECK(huge && large && small);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, helper, NULL), 0);
    while (!atomic_load(&ready))
        sched_yield();
    char *keep = malloc(1000);
    memset(keep, 0xab, 1000);
    size_t keep_usable = malloc_usable_size(keep);
    void *parked[CACHED];
    for (int i = 0; i < CACHED; i++)
        parked[i] = malloc(64);
    for (int i = 0; i < CACHED; i++)
        free(parked[i]);
    printf("oom: limit at VmSize + %zu MiB\n", HEADROOM / MiB);
    fflush(stdout);
    CHECK_EQ(set_limit(vm_size() + HEADROOM), 0);

    /* 1. Requests that cannot be met. */
    CHECK_OOM(malloc(GiB));
    CHECK_OOM(calloc(GiB / 8, 8));
    CHECK_OOM(realloc(keep, GiB));
    CHECK_OOM(reallocarray(keep, GiB / 8, 8));
    CHECK_OOM(aligned_alloc(2 * MiB, GiB));
    CHECK_OOM(memalign(4096, GiB));
    CHECK_OOM(valloc(GiB));
    CHECK_OOM(pvalloc(GiB));
    CHECK_OOM(p_mallocx(GiB, 0));
    CHECK_OOM(p_mallocx(GiB, MALLOCX_ZERO | MALLOCX_ALIGN(2 * MiB)));
    CHECK_OOM(p_mallocx(GiB, MALLOCX_TCACHE_NONE | MALLOCX_ARENA(0)));
    CHECK_OOM(p_rallocx(keep, GiB, 0));
    {
        void *out = (void *)&out;
        errno = EDOM;
        CHECK_EQ(posix_memalign(&out, 64, GiB), ENOMEM);
        CHECK(out == (void *)&out);
        CHECK_EQ(errno, EDOM);
        CHECK_EQ(posix_memalign(&out, 2 * MiB, 512 * MiB), ENOMEM);
        CHECK(out == (void *)&out);
    }
    errno = 0;
    CHECK_EQ(p_xallocx(keep, GiB, 0, 0), keep_usable);
    CHECK_EQ(errno, 0);
    CHECK_EQ(p_sallocx(keep, 0), keep_usable);
    for (int i = 0; i < 1000; i++)
        if ((unsigned char)keep[i] != 0xab) {
            CHECK(!"a failed realloc changed the block");
            break;
        }

    /* 2. Fill the address space. */
    size_t nhuge = exhaust(huge, NHUGE, 3 * MiB);
    size_t nlarge = exhaust(large, NLARGE, MiB);
    size_t nsmall = exhaust(small, NSMALL, 1000);
    fprintf(stderr, "oom: filled with %zu x 3 MiB, %zu x 1 MiB, %zu x 1000 B before NULL\n", nhuge,
            nlarge, nsmall);
    CHECK(nhuge > 0 && nhuge < NHUGE);
    CHECK_EQ(errno_changed, 0);
    CHECK(nlarge < NLARGE && nsmall < NSMALL);
    CHECK_OOM(malloc(MiB));
    CHECK_OOM(calloc(1, 3 * MiB));
    CHECK_OOM(aligned_alloc(4096, 100000));
    if (nhuge > 0) {
        CHECK_OOM(realloc(huge[0], 64 * MiB));
        CHECK(touch(huge[0], 3 * MiB, 7));
    }

    /* 3. The cache still serves what it holds. */
    for (int i = 0; i < CACHED; i++) {
        parked[i] = malloc(64);
        CHECK(parked[i] != NULL);
    }

    /* 4. Another thread is not blocked. */
    int r = helper_run(1);
    fprintf(stderr, "oom: other thread under OOM: small block %s\n",
            r == 1 ? "served" : r == 0 ? "NULL + ENOMEM" : "WRONG");
    CHECK_EQ(r, 1);

    /* 5. Freed memory is reusable under the same limit. */
    for (int i = 0; i < CACHED; i++)
        free(parked[i]);
    for (size_t i = 0; i < nhuge; i++)
        free(huge[i]);
    for (size_t i = 0; i < nlarge; i++)
        free(large[i]);
    for (size_t i = 0; i < nsmall; i++)
        free(small[i]);
    CHECK_EQ(exhaust(huge, nhuge, 3 * MiB), nhuge);
    CHECK_EQ(exhaust(large, nlarge, MiB), nlarge);
    CHECK_EQ(exhaust(small, nsmall, 1000), nsmall);
    for (size_t i = 0; i < nhuge; i++)
        free(huge[i]);
    for (size_t i = 0; i < nlarge; i++)
        free(large[i]);
    for (size_t i = 0; i < nsmall; i++)
        free(small[i]);

    /* 6. The limit raised. */
    CHECK_EQ(set_limit(RLIM_INFINITY), 0);
    void *big = aligned_alloc(2 * MiB, GiB);
    CHECK(big != NULL && ((uintptr_t)big & (2 * MiB - 1)) == 0);
    if (big) {
        CHECK(touch(big, GiB, 5));
        free(big);
    }
    char *grown = realloc(keep, 64 * MiB);
    CHECK(grown != NULL);
    if (grown) {
        for (int i = 0; i < 1000; i++)
            if ((unsigned char)grown[i] != 0xab) {
                CHECK(!"realloc lost the contents");
                break;
            }
        free(grown);
    }
    CHECK_EQ(helper_run(2), 1);
    pthread_join(t, NULL);
    free(huge);
    free(large);
    free(small);
    return finish("oom");
}
