/* Every export of libhugealloc and the C semantics it promises (hugealloc.h). Runs in three
 * ways: under LD_PRELOAD (built without the library), linked with -lhugealloc (HA_LINKED) and
 * linked statically with libhugealloc.a (HA_LINKED, HA_STATIC). Prints "abi (MODE): ok". */
#include "check.h"

#include <dirent.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <unistd.h>

/* glibc's aliases, which no header declares. */
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void __libc_free(void *);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);
int __libc_mallopt(int, int);
struct mallinfo __libc_mallinfo(void);
void cfree(void *);

#define PAGE 4096
#define MiB ((size_t)1 << 20)

static int aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static int all_bytes(const void *p, int v, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)v)
            return 0;
    return 1;
}

static int start_errno;

/* The first allocation happens before main. */
static void *early;
__attribute__((constructor)) static void before_main(void) {
    early = malloc(123);
    if (early)
        memset(early, 7, 123);
}

/* Every symbol the default build exports. */
__attribute__((unused)) static const char *const exported[] = {
    "malloc", "calloc", "realloc", "reallocarray", "free", "cfree", "free_sized",
    "free_aligned_sized", "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
    "malloc_usable_size", "malloc_trim", "mallopt", "mallinfo", "mallinfo2", "malloc_stats",
    "__libc_malloc", "__libc_calloc", "__libc_realloc", "__libc_free", "__libc_memalign",
    "__libc_valloc", "__libc_pvalloc", "__libc_mallopt", "__libc_mallinfo", "mallocx",
    "rallocx", "xallocx", "sallocx", "dallocx", "sdallocx", "nallocx", "mallctl",
    "mallctlnametomib", "mallctlbymib", "malloc_stats_print", "hugealloc_malloc",
    "hugealloc_calloc", "hugealloc_realloc", "hugealloc_reallocarray", "hugealloc_free",
    "hugealloc_free_sized", "hugealloc_free_aligned_sized", "hugealloc_posix_memalign",
    "hugealloc_aligned_alloc", "hugealloc_memalign", "hugealloc_valloc", "hugealloc_pvalloc",
    "hugealloc_malloc_usable_size", "hugealloc_malloc_trim", "hugealloc_mallopt",
    "hugealloc_mallinfo", "hugealloc_mallinfo2", "hugealloc_malloc_stats", "hugealloc_mallocx",
    "hugealloc_rallocx", "hugealloc_xallocx", "hugealloc_sallocx", "hugealloc_dallocx",
    "hugealloc_sdallocx", "hugealloc_nallocx", "hugealloc_mallctl",
    "hugealloc_mallctlnametomib", "hugealloc_mallctlbymib", "hugealloc_stats_print", NULL};

int main(void);

static void test_symbols(void) {
    Dl_info info;
    /* The malloc this program calls. */
    CHECK(dladdr((void *)malloc, &info) != 0);
#ifdef HA_STATIC
    /* Linked in: malloc is the program's own, and glibc's calls resolve to it as well. */
    Dl_info main_info;
    CHECK(dladdr((void *)main, &main_info) != 0);
    CHECK(info.dli_fbase == main_info.dli_fbase);
    CHECK(dlsym(RTLD_DEFAULT, "malloc") == (void *)malloc);
    CHECK(dlsym(RTLD_DEFAULT, "free") == (void *)free);
#else
    CHECK(info.dli_fname && strstr(info.dli_fname, "libhugealloc.so"));
    if (info.dli_fname)
        printf("dladdr(malloc): %s\n", info.dli_fname);
    for (const char *const *name = exported; *name; name++) {
        void *f = dlsym(RTLD_DEFAULT, *name);
        if (!f || !dladdr(f, &info) || !info.dli_fname ||
            !strstr(info.dli_fname, "libhugealloc.so")) {
            fprintf(stderr, "%s does not resolve to libhugealloc.so (%s)\n", *name,
                    f && info.dli_fname ? info.dli_fname : "missing");
            failures++;
        }
    }
#endif
}

static void test_malloc_free(void) {
    /* C11 7.5: errno is 0 at program start, whatever the library's initialisation met. */
    CHECK_EQ(start_errno, 0);
    CHECK(early != NULL && all_bytes(early, 7, 123));
    CHECK(X(sallocx)(early, 0) >= 123);
    free(early);

    /* malloc(0): unique, non-null, freeable. */
    void *z1 = malloc(0), *z2 = malloc(0);
    CHECK(z1 && z2 && z1 != z2);
    free(z1);
    free(z2);

    /* Alignment and usable size for every size up to 20 KiB, and some larger ones. */
    for (size_t size = 1; size <= 20000; size += (size < 512 ? 1 : 61)) {
        unsigned char *p = malloc(size);
        CHECK(p != NULL);
        if (!p)
            continue;
        CHECK(aligned(p, size >= 16 ? 16 : 8));
        CHECK(malloc_usable_size(p) >= size);
        memset(p, 0xab, malloc_usable_size(p));
        free(p);
    }
    size_t big[] = {64 * 1024, MiB, 2 * MiB - 1, 2 * MiB, 3 * MiB + 5, 17 * MiB};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        unsigned char *p = malloc(big[i]);
        CHECK(p && aligned(p, 16) && malloc_usable_size(p) >= big[i]);
        if (p) {
            p[0] = 1;
            p[big[i] - 1] = 2;
        }
        free(p);
    }
    free(NULL);
    CHECK(malloc_usable_size(NULL) == 0);

    /* errno is left alone on success. */
    errno = EDOM;
    void *p = malloc(100), *q = malloc(64 * MiB);
    free(p);
    free(q);
    CHECK_EQ(errno, EDOM);

    /* Impossible sizes: NULL and ENOMEM. */
    size_t huge[] = {SIZE_MAX, SIZE_MAX - PAGE, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1,
                     (size_t)1 << 50};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        errno = 0;
        CHECK(malloc(huge[i]) == NULL);
        CHECK_EQ(errno, ENOMEM);
    }

    /* cfree and free_sized. */
    X(cfree)(malloc(10));
    for (size_t size = 0; size < 70000; size = size * 2 + 1) {
        void *s = malloc(size);
        X(free_sized)(s, size);
        s = calloc(1, size);
        X(free_sized)(s, size);
    }
    void *u = malloc(100);
    X(free_sized)(u, malloc_usable_size(u));
    X(free_sized)(NULL, 7);
}

static void test_calloc(void) {
    /* Dirty some memory, then calloc the same sizes: zeroed every time. */
    size_t sizes[] = {8, 24, 100, 1000, 5000, 40000, 300000, 3 * MiB};
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            void *d = malloc(sizes[i]);
            memset(d, 0xff, sizes[i]);
            free(d);
            void *c = calloc(1, sizes[i]);
            CHECK(c && all_bytes(c, 0, sizes[i]));
            free(c);
            c = calloc(sizes[i], 1);
            CHECK(c && all_bytes(c, 0, sizes[i]));
            free(c);
        }
    void *c0 = calloc(0, 5);
    CHECK(c0 != NULL);
    free(c0);
    errno = 0;
    CHECK(calloc(SIZE_MAX, 2) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(calloc((size_t)1 << 33, (size_t)1 << 33) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(calloc(1, SIZE_MAX) == NULL);
    CHECK_EQ(errno, ENOMEM);
}

static void fill(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + 1);
}

static int filled(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + 1))
            return 0;
    return 1;
}

static void test_realloc(void) {
    unsigned char *p = realloc(NULL, 10);
    CHECK(p != NULL);
    fill(p, 10);
    /* Grow through every kind of block and back, keeping the contents. */
    size_t steps[] = {10, 100, 3000, 20000, 500000, 3 * MiB, 9 * MiB, 4 * MiB, 30000, 50, 7};
    size_t kept = 10;
    for (size_t i = 1; i < sizeof steps / sizeof steps[0]; i++) {
        unsigned char *q = realloc(p, steps[i]);
        CHECK(q != NULL);
        if (!q)
            break;
        p = q;
        size_t common = kept < steps[i] ? kept : steps[i];
        CHECK(filled(p, common));
        CHECK(malloc_usable_size(p) >= steps[i]);
        CHECK(aligned(p, 16) || steps[i] < 16);
        fill(p, steps[i]);
        kept = steps[i];
    }
    /* Failure leaves p untouched. */
    errno = 0;
    CHECK(realloc(p, SIZE_MAX) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK(filled(p, kept));
    errno = 0;
    CHECK(reallocarray(p, SIZE_MAX / 2, 3) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK(filled(p, kept));
    unsigned char *r = reallocarray(p, 100, 10);
    CHECK(r && filled(r, kept) && malloc_usable_size(r) >= 1000);
    /* realloc(p, 0) frees p and returns NULL, as glibc. */
    CHECK(realloc(r, 0) == NULL);
    void *s = malloc(5);
    CHECK(reallocarray(s, 0, 8) == NULL);
    /* realloc(NULL, 0) is malloc(0). */
    void *z = realloc(NULL, 0);
    CHECK(z != NULL);
    free(z);
    /* Same-class realloc stays in place. */
    void *t = malloc(40);
    CHECK(realloc(t, 41) == t);
    free(t);
}

static void test_aligned(void) {
    void *out;
    for (size_t a = sizeof(void *); a <= 16 * MiB; a *= 2) {
        size_t sizes[] = {0, 1, a / 2 + 1, a, 3 * a + 1, 100000};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            out = NULL;
            CHECK_EQ(posix_memalign(&out, a, sizes[i]), 0);
            CHECK(out && aligned(out, a) && malloc_usable_size(out) >= sizes[i]);
            if (out && sizes[i])
                memset(out, 1, sizes[i]);
            free(out);
        }
    }
    size_t bad[] = {0, 1, 2, 4, 12, 24, 48, 1000, (size_t)3 << 20};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = (void *)0x1234;
        errno = 0;
        CHECK_EQ(posix_memalign(&out, bad[i], 16), EINVAL);
        CHECK(out == (void *)0x1234);
        CHECK_EQ(errno, 0);
    }
    out = (void *)0x1234;
    CHECK_EQ(posix_memalign(&out, 64, SIZE_MAX), ENOMEM);
    CHECK(out == (void *)0x1234);

    size_t al[] = {1, 2, 8, 16, 32, 64, 256, 4096, 8192, 2 * MiB, 4 * MiB};
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        void *p = aligned_alloc(al[i], 100);
        CHECK(p && aligned(p, al[i]));
        X(free_aligned_sized)(p, al[i], 100);
        p = aligned_alloc(al[i], 3 * al[i]);
        CHECK(p && aligned(p, al[i]));
        free(p);
        p = memalign(al[i], 5000);
        CHECK(p && aligned(p, al[i]) && malloc_usable_size(p) >= 5000);
        free(p);
    }
    errno = 0;
    CHECK(aligned_alloc(3, 10) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(aligned_alloc(0, 10) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(aligned_alloc(64, SIZE_MAX - 10) == NULL);
    CHECK_EQ(errno, ENOMEM);
    /* memalign rounds a non-power-of-two up, as glibc. */
    void *m = memalign(24, 100);
    CHECK(m && aligned(m, 32));
    free(m);
    m = memalign(0, 100);
    CHECK(m != NULL);
    free(m);
    errno = 0;
    CHECK(memalign(SIZE_MAX / 2 + 2, 1) == NULL);
    CHECK_EQ(errno, EINVAL);

    void *v = valloc(10);
    CHECK(v && aligned(v, PAGE));
    free(v);
    v = pvalloc(1);
    CHECK(v && aligned(v, PAGE) && malloc_usable_size(v) >= PAGE);
    memset(v, 1, PAGE);
    free(v);
    v = pvalloc(0);
    CHECK(v && aligned(v, PAGE) && malloc_usable_size(v) >= PAGE);
    free(v);
    v = pvalloc(PAGE + 1);
    CHECK(v && malloc_usable_size(v) >= 2 * PAGE);
    memset(v, 1, 2 * PAGE);
    free(v);
    errno = 0;
    CHECK(pvalloc(SIZE_MAX - 10) == NULL);
    CHECK_EQ(errno, ENOMEM);
}

static void test_glibc_extras(void) {
    /* The __libc_ aliases are hugealloc's: sallocx accepts their blocks. */
    void *p = __libc_malloc(50);
    CHECK(p && X(sallocx)(p, 0) >= 50);
    p = __libc_realloc(p, 5000);
    CHECK(p && X(sallocx)(p, 0) >= 5000);
    __libc_free(p);
    p = __libc_calloc(10, 10);
    CHECK(p && all_bytes(p, 0, 100));
    free(p);
    p = __libc_memalign(256, 10);
    CHECK(p && aligned(p, 256));
    free(p);
    p = __libc_valloc(10);
    CHECK(p && aligned(p, PAGE));
    free(p);
    p = __libc_pvalloc(10);
    CHECK(p && aligned(p, PAGE) && malloc_usable_size(p) >= PAGE);
    free(p);
    CHECK_EQ(__libc_mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
    CHECK_EQ(mallopt(M_ARENA_MAX, 2), 1);
    CHECK_EQ(mallopt(12345, 2), 1);

    void *hold = malloc(10 * MiB);
    memset(hold, 1, 10 * MiB);
    struct mallinfo2 m2 = mallinfo2();
    CHECK(m2.uordblks >= 10 * MiB);
    CHECK(m2.arena >= m2.uordblks);
    CHECK_EQ(m2.arena, m2.uordblks + m2.fordblks);
    struct mallinfo m = mallinfo();
    CHECK(m.uordblks >= (int)(10 * MiB));
    m = __libc_mallinfo();
    CHECK(m.uordblks >= (int)(10 * MiB));
    free(hold);
    int t = malloc_trim(0);
    CHECK(t == 0 || t == 1);
    malloc_stats();

    /* glibc's own allocations land on hugealloc's heap (sallocx would abort otherwise). */
    char *s = strdup("hugealloc");
    CHECK(s && X(sallocx)(s, 0) >= 10);
    free(s);
    char *a = NULL;
    CHECK(asprintf(&a, "%0500d", 7) == 500);
    CHECK(a && X(sallocx)(a, 0) >= 501);
    free(a);
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    if (f) {
        char *line = NULL;
        size_t cap = 0;
        int lines = 0;
        while (getline(&line, &cap, f) > 0)
            lines++;
        CHECK(lines > 5 && line && X(sallocx)(line, 0) >= cap);
        free(line);
        fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    if (d) {
        while (readdir(d))
            ;
        closedir(d);
    }
    /* dlopen, dlsym, dlerror allocate through malloc as well. */
    void *libm = dlopen("libm.so.6", RTLD_NOW);
    CHECK(libm != NULL);
    if (libm) {
        double (*cosine)(double) = (double (*)(double))dlsym(libm, "cos");
        CHECK(cosine && cosine(0.0) == 1.0);
        CHECK(dlsym(libm, "no_such_symbol_here") == NULL);
        CHECK(dlerror() != NULL);
        dlclose(libm);
    }
}

static void test_allocx(void) {
    int aligns[] = {0, MALLOCX_ALIGN(16), MALLOCX_ALIGN(64), MALLOCX_LG_ALIGN(12),
                    MALLOCX_ALIGN(8192), MALLOCX_ALIGN(2 << 20), MALLOCX_ALIGN(8 << 20)};
    int extras[] = {0, MALLOCX_ZERO, MALLOCX_TCACHE_NONE, MALLOCX_ZERO | MALLOCX_TCACHE_NONE,
                    MALLOCX_TCACHE(0)};
    size_t sizes[] = {1, 8, 9, 16, 17, 100, 4096, 14336, 14337, 16384, 16385, 70000, 2 * MiB, 5 * MiB + 3};
    for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++)
        for (size_t ei = 0; ei < sizeof extras / sizeof extras[0]; ei++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                int flags = aligns[ai] | extras[ei];
                size_t size = sizes[si];
                size_t align = aligns[ai] ? (size_t)1 << (aligns[ai] & 63) : 1;
                /* Dirty a block of this size first, so zeroing is tested on reuse. */
                void *d = X(mallocx)(size, flags & ~MALLOCX_ZERO);
                memset(d, 0xee, size);
                X(dallocx)(d, flags);
                unsigned char *p = X(mallocx)(size, flags);
                CHECK(p != NULL);
                if (!p)
                    continue;
                CHECK(aligned(p, align));
                CHECK_EQ(X(nallocx)(size, flags), X(sallocx)(p, 0));
                CHECK(X(sallocx)(p, flags) >= size);
                if (flags & MALLOCX_ZERO)
                    CHECK(all_bytes(p, 0, size));
                memset(p, 1, size);
                if ((si + ei) % 2)
                    X(sdallocx)(p, size, flags);
                else if (si % 3 == 0)
                    X(sdallocx)(p, X(sallocx)(p, 0), flags);
                else
                    X(dallocx)(p, flags);
            }
    CHECK_EQ(X(nallocx)(SIZE_MAX, 0), 0);
    CHECK_EQ(X(nallocx)(100, MALLOCX_LG_ALIGN(63)), 0);
    errno = 0;
    CHECK(X(mallocx)(SIZE_MAX, 0) == NULL);
    CHECK_EQ(errno, ENOMEM);

    /* Arenas: create one, allocate there, with and without the cache. */
    unsigned narenas = 0, arena = 0;
    size_t len = sizeof narenas;
    CHECK_EQ(X(mallctl)("arenas.narenas", &narenas, &len, NULL, 0), 0);
    len = sizeof arena;
    CHECK_EQ(X(mallctl)("arenas.create", &arena, &len, NULL, 0), 0);
    CHECK(arena >= narenas);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        void *p = X(mallocx)(sizes[si], MALLOCX_ARENA(arena));
        void *q = X(mallocx)(sizes[si], MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE | MALLOCX_ZERO);
        CHECK(p && q && all_bytes(q, 0, sizes[si]));
        CHECK_EQ(X(nallocx)(sizes[si], MALLOCX_ARENA(arena)), X(sallocx)(p, 0));
        X(dallocx)(p, 0);
        X(sdallocx)(q, sizes[si], MALLOCX_TCACHE_NONE);
    }
    errno = 0;
    CHECK(X(mallocx)(10, MALLOCX_ARENA(250)) == NULL);
    CHECK_EQ(errno, ENOMEM);

    /* rallocx: contents kept, MALLOCX_ZERO zeroes past the old usable size. */
    unsigned char *p = X(mallocx)(100, 0);
    fill(p, 100);
    size_t old = X(sallocx)(p, 0);
    memset(p + 100, 0x55, old - 100);
    unsigned char *q = X(rallocx)(p, 10000, MALLOCX_ZERO);
    CHECK(q && filled(q, 100) && all_bytes(q + old, 0, X(sallocx)(q, 0) - old));
    q = X(rallocx)(q, 3 * MiB, MALLOCX_ZERO);
    CHECK(q && filled(q, 100) && all_bytes(q + 10000, 0, 3 * MiB - 10000));
    q = X(rallocx)(q, 5000, MALLOCX_ALIGN(4096));
    CHECK(q && aligned(q, 4096) && filled(q, 100));
    q = X(rallocx)(q, 6000, MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE);
    CHECK(q && filled(q, 100) && X(sallocx)(q, 0) >= 6000);
    errno = 0;
    CHECK(X(rallocx)(q, SIZE_MAX, 0) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK(filled(q, 100));
    X(dallocx)(q, 0);

    /* xallocx: never moves; the result is always the block's usable size afterwards. */
    unsigned char *small = X(mallocx)(100, 0);
    size_t su = X(sallocx)(small, 0);
    CHECK_EQ(X(xallocx)(small, 10000, 0, 0), su);
    CHECK_EQ(X(xallocx)(small, 10, 0, 0), su);
    X(dallocx)(small, 0);
    unsigned char *large = X(mallocx)(20000, MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE);
    fill(large, 20000);
    size_t lu = X(sallocx)(large, 0);
    size_t grown = X(xallocx)(large, 60000, 0, MALLOCX_ZERO);
    CHECK_EQ(grown, X(sallocx)(large, 0));
    CHECK(grown == lu || grown >= 60000);
    CHECK(filled(large, 20000));
    CHECK(all_bytes(large + lu, 0, grown - lu));
    printf("xallocx: 20000 -> 60000 in place: %s (usable %zu -> %zu)\n",
           grown >= 60000 ? "yes" : "no", lu, grown);
    size_t extra = X(xallocx)(large, 30000, 100000, 0);
    CHECK(extra >= 30000 && extra == X(sallocx)(large, 0));
    size_t shrunk = X(xallocx)(large, 16384, 0, 0);
    CHECK(shrunk >= 16384 && shrunk == X(sallocx)(large, 0));
    CHECK(filled(large, 16384));
    X(sdallocx)(large, shrunk, 0);
    unsigned char *hblock = X(mallocx)(4 * MiB, 0);
    size_t hu = X(xallocx)(hblock, 8 * MiB, 0, 0);
    CHECK(hu == X(sallocx)(hblock, 0) && (hu == 4 * MiB || hu >= 8 * MiB));
    hu = X(xallocx)(hblock, 2 * MiB, 0, 0);
    CHECK(hu == X(sallocx)(hblock, 0) && hu >= 2 * MiB);
    X(dallocx)(hblock, 0);
    X(dallocx)(NULL, 0);
    X(sdallocx)(NULL, 10, 0);
}

struct sink {
    int calls;
    char text[65536]; /* the JSON stats with every option row pass 8 KiB */
    size_t len;
};

static void collect(void *opaque, const char *text) {
    struct sink *s = opaque;
    size_t n = strlen(text);
    s->calls++;
    if (s->len + n < sizeof s->text) {
        memcpy(s->text + s->len, text, n + 1);
        s->len += n;
    }
}

static void test_mallctl(void) {
    const char *version = NULL;
    size_t len = sizeof version;
    CHECK_EQ(X(mallctl)("version", &version, &len, NULL, 0), 0);
    CHECK(version && strcmp(version, HUGEALLOC_VERSION) == 0);
    /* Wrong sizes are EINVAL and change nothing. */
    len = 4;
    CHECK_EQ(X(mallctl)("version", &version, &len, NULL, 0), EINVAL);
    CHECK_EQ(X(mallctl)("version", NULL, NULL, &version, sizeof version), EPERM);
    CHECK_EQ(X(mallctl)("no.such.name", NULL, NULL, NULL, 0), ENOENT);
    CHECK_EQ(X(mallctl)("stats", NULL, NULL, NULL, 0), ENOENT);
    CHECK_EQ(X(mallctl)("", NULL, NULL, NULL, 0), ENOENT);
    CHECK_EQ(X(mallctl)("arena.x.purge", NULL, NULL, NULL, 0), ENOENT);

    uint64_t epoch = 0, epoch2 = 0, one = 1;
    len = sizeof epoch;
    CHECK_EQ(X(mallctl)("epoch", &epoch, &len, NULL, 0), 0);
    CHECK_EQ(X(mallctl)("epoch", &epoch2, &len, &one, sizeof one), 0);
    CHECK_EQ(epoch2, epoch + 1);
    CHECK_EQ(X(mallctl)("epoch", NULL, NULL, &one, 4), EINVAL);

    unsigned narenas = 0, created = 0, cur = 0, other = 0;
    len = sizeof narenas;
    CHECK_EQ(X(mallctl)("arenas.narenas", &narenas, &len, NULL, 0), 0);
    CHECK(narenas >= 1);
    CHECK_EQ(X(mallctl)("arenas.narenas", NULL, NULL, &narenas, sizeof narenas), EPERM);
    CHECK_EQ(X(mallctl)("arenas.create", &created, &len, NULL, 0), 0);
    unsigned after = 0;
    CHECK_EQ(X(mallctl)("arenas.narenas", &after, &len, NULL, 0), 0);
    CHECK_EQ(after, created + 1);

    CHECK_EQ(X(mallctl)("thread.arena", &cur, &len, NULL, 0), 0);
    CHECK(cur < after);
    CHECK_EQ(X(mallctl)("thread.arena", &other, &len, &created, sizeof created), 0);
    CHECK_EQ(other, cur);
    CHECK_EQ(X(mallctl)("thread.arena", &other, &len, NULL, 0), 0);
    CHECK_EQ(other, created);
    void *p = malloc(1000);
    free(p);
    unsigned nope = 100000;
    CHECK_EQ(X(mallctl)("thread.arena", NULL, NULL, &nope, sizeof nope), EFAULT);
    CHECK_EQ(X(mallctl)("thread.arena", NULL, NULL, &cur, 2), EINVAL);
    CHECK_EQ(X(mallctl)("thread.arena", NULL, NULL, &cur, sizeof cur), 0);

    CHECK_EQ(X(mallctl)("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    CHECK_EQ(X(mallctl)("thread.tcache.flush", &cur, &len, NULL, 0), EPERM);
    CHECK_EQ(X(mallctl)("thread.tcache.flush", NULL, NULL, &cur, sizeof cur), EPERM);

    uint64_t allocated = 0;
    len = sizeof allocated;
    CHECK_EQ(X(mallctl)("thread.allocated", &allocated, &len, NULL, 0), 0);
    CHECK_EQ(X(mallctl)("thread.deallocated", &allocated, &len, NULL, 0), 0);

    size_t page = 0, quantum = 0;
    len = sizeof page;
    CHECK_EQ(X(mallctl)("arenas.page", &page, &len, NULL, 0), 0);
    CHECK_EQ(page, PAGE);
    CHECK_EQ(X(mallctl)("arenas.quantum", &quantum, &len, NULL, 0), 0);
    CHECK_EQ(quantum, 16);

    /* Statistics follow a big block. */
    const char *figures[] = {"stats.allocated", "stats.active", "stats.resident",
                             "stats.mapped", "stats.retained", "stats.metadata", "stats.dirty"};
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
        CHECK(stat_size(figures[i]) != (size_t)-1);
    size_t before = stat_size("stats.allocated");
    void *big = malloc(8 * MiB);
    CHECK(stat_size("stats.allocated") >= before + 8 * MiB);
    CHECK(stat_size("stats.mapped") >= 8 * MiB);
    CHECK(stat_size("stats.resident") <= stat_size("stats.mapped"));
    free(big);
    size_t v = 0;
    len = sizeof v;
    CHECK_EQ(X(mallctl)("stats.allocated", &v, &len, &v, sizeof v), EPERM);
    len = 4;
    CHECK_EQ(X(mallctl)("stats.allocated", &v, &len, NULL, 0), EINVAL);

    /* Arena actions and the THP policy. */
    CHECK_EQ(X(mallctl)("arena.0.purge", NULL, NULL, NULL, 0), 0);
    CHECK_EQ(X(mallctl)("arena.4096.purge", NULL, NULL, NULL, 0), 0);
    CHECK_EQ(X(mallctl)("arena.9999.purge", NULL, NULL, NULL, 0), EFAULT);
    const char *thp = NULL, *never = "never", *bogus = "sometimes";
    len = sizeof thp;
    char name[64];
    snprintf(name, sizeof name, "arena.%u.thp", created);
    CHECK_EQ(X(mallctl)(name, &thp, &len, NULL, 0), 0);
    CHECK(thp && (strcmp(thp, "madvise") == 0 || strcmp(thp, "always") == 0 ||
                  strcmp(thp, "never") == 0 || strcmp(thp, "default") == 0));
    CHECK_EQ(X(mallctl)(name, NULL, NULL, &never, sizeof never), 0);
    CHECK_EQ(X(mallctl)(name, &thp, &len, NULL, 0), 0);
    CHECK(thp && strcmp(thp, "never") == 0);
    CHECK_EQ(X(mallctl)(name, NULL, NULL, &bogus, sizeof bogus), EINVAL);
    CHECK_EQ(X(mallctl)("arena.9999.thp", &thp, &len, NULL, 0), EFAULT);

    /* MIBs: translate once, change the arena component. */
    size_t mib[4], miblen = 4;
    CHECK_EQ(X(mallctlnametomib)("arena.0.purge", mib, &miblen), 0);
    CHECK_EQ(miblen, 3);
    mib[1] = created;
    CHECK_EQ(X(mallctlbymib)(mib, miblen, NULL, NULL, NULL, 0), 0);
    mib[1] = 9999;
    CHECK_EQ(X(mallctlbymib)(mib, miblen, NULL, NULL, NULL, 0), EFAULT);
    miblen = 4;
    CHECK_EQ(X(mallctlnametomib)("stats.allocated", mib, &miblen), 0);
    CHECK_EQ(miblen, 2);
    v = 0;
    len = sizeof v;
    CHECK_EQ(X(mallctlbymib)(mib, miblen, &v, &len, NULL, 0), 0);
    CHECK(v > 0);
    miblen = 4;
    CHECK_EQ(X(mallctlnametomib)("epoch", mib, &miblen), 0);
    CHECK_EQ(miblen, 1);
    len = sizeof epoch;
    CHECK_EQ(X(mallctlbymib)(mib, miblen, &epoch, &len, &one, sizeof one), 0);
    CHECK_EQ(epoch, epoch2 + 1);
    miblen = 1;
    CHECK_EQ(X(mallctlnametomib)("arena.0.purge", mib, &miblen), EINVAL);
    CHECK_EQ(X(mallctlnametomib)("nothing", mib, &miblen), ENOENT);
    mib[0] = 100000;
    CHECK_EQ(X(mallctlbymib)(mib, 1, NULL, NULL, NULL, 0), ENOENT);

    /* Stats printing through a callback, as text and JSON, and to stderr. */
    static struct sink s;
    X(malloc_stats_print)(collect, &s, NULL);
    CHECK(s.calls >= 5);
    CHECK(strstr(s.text, "stats.allocated: ") != NULL);
    memset(&s, 0, sizeof s);
    X(hugealloc_stats_print)(collect, &s, "J");
    const char *json = "{\"hugealloc\":{\"version\":\"" HUGEALLOC_VERSION "\",\"stats\":{";
    CHECK(strncmp(s.text, json, strlen(json)) == 0);
    CHECK(strstr(s.text, "\"allocated\":") != NULL);
    CHECK(s.len > 0 && s.text[s.len - 1] == '\n');
    X(malloc_stats_print)(NULL, NULL, "");
}

static void test_prefixed(void) {
    /* The prefixed names are the same allocator: blocks cross between the two sets. */
    void *p = X(hugealloc_malloc)(10);
    CHECK(p && X(hugealloc_malloc_usable_size)(p) == malloc_usable_size(p));
    free(p);
    p = malloc(10);
    p = X(hugealloc_realloc)(p, 100);
    CHECK(p != NULL);
    X(hugealloc_free)(p);
    p = X(hugealloc_calloc)(4, 4);
    CHECK(p && all_bytes(p, 0, 16));
    p = X(hugealloc_reallocarray)(p, 8, 8);
    X(hugealloc_free_sized)(p, 64);
    void *out = NULL;
    CHECK_EQ(X(hugealloc_posix_memalign)(&out, 64, 10), 0);
    CHECK(aligned(out, 64));
    X(hugealloc_free)(out);
    CHECK_EQ(X(hugealloc_posix_memalign)(&out, 3, 10), EINVAL);
    p = X(hugealloc_aligned_alloc)(128, 128);
    CHECK(aligned(p, 128));
    X(hugealloc_free_aligned_sized)(p, 128, 128);
    p = X(hugealloc_memalign)(512, 10);
    CHECK(aligned(p, 512));
    free(p);
    p = X(hugealloc_valloc)(10);
    CHECK(aligned(p, PAGE));
    free(p);
    p = X(hugealloc_pvalloc)(10);
    CHECK(aligned(p, PAGE) && malloc_usable_size(p) >= PAGE);
    free(p);
    CHECK(X(hugealloc_malloc_trim)(0) >= 0);
    CHECK_EQ(X(hugealloc_mallopt)(M_MXFAST, 0), 1);
    CHECK(X(hugealloc_mallinfo2)().arena > 0);
    CHECK(X(hugealloc_mallinfo)().arena > 0);
    X(hugealloc_malloc_stats)();
    p = X(hugealloc_mallocx)(100, MALLOCX_ZERO);
    CHECK(p && all_bytes(p, 0, 100));
    CHECK_EQ(X(hugealloc_sallocx)(p, 0), X(hugealloc_nallocx)(100, 0));
    CHECK_EQ(X(hugealloc_xallocx)(p, 100, 0, 0), X(sallocx)(p, 0));
    p = X(hugealloc_rallocx)(p, 200, 0);
    CHECK(p != NULL);
    X(hugealloc_sdallocx)(p, 200, 0);
    X(hugealloc_dallocx)(X(hugealloc_mallocx)(5, 0), 0);
    const char *version = NULL;
    size_t len = sizeof version;
    CHECK_EQ(X(hugealloc_mallctl)("version", &version, &len, NULL, 0), 0);
    size_t mib[2], miblen = 2;
    CHECK_EQ(X(hugealloc_mallctlnametomib)("stats.mapped", mib, &miblen), 0);
    size_t v = 0;
    len = sizeof v;
    CHECK_EQ(X(hugealloc_mallctlbymib)(mib, miblen, &v, &len, NULL, 0), 0);
    CHECK(v > 0);
}

int main(void) {
    start_errno = errno;
    test_symbols();
    test_malloc_free();
    test_calloc();
    test_realloc();
    test_aligned();
    test_glibc_extras();
    test_allocx();
    test_mallctl();
    test_prefixed();
    return finish("abi");
}
