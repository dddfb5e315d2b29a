/*
 * hugealloc.h: the C interface of hugealloc, a general-purpose memory allocator with control
 * of Linux transparent huge pages (THP).
 *
 * Use it in one of three ways (docs/c-api.md has the details):
 *   - preload it:  LD_PRELOAD=/path/to/libhugealloc.so prog   (or: hugealloc run -- prog)
 *   - link it:     cc prog.c $(pkg-config --cflags --libs hugealloc)      (-lhugealloc)
 *   - statically:  cc prog.c libhugealloc.a -lpthread -ldl -lm -lgcc_s
 * Either way the standard functions (malloc, free, ...) are hugealloc's: a program never
 * mixes glibc's heap with hugealloc's. Nothing needs this header for that; it declares what
 * <stdlib.h> and <malloc.h> do not: jemalloc's non-standard API, mallctl, statistics, and the
 * hugealloc_-prefixed copy of everything.
 *
 * Every function below exists under two names: hugealloc_NAME always, and NAME itself in the
 * default build (cargo feature `override`). A library built with --no-default-features has
 * only the prefixed names and can be linked beside another allocator.
 *
 * Configuration: HUGEALLOC_CONF="thp:always,narenas:4" in the environment, the target of the
 * /etc/hugealloc.conf symbolic link, or a string the program defines (as jemalloc's
 * malloc_conf; seen when the program links the library, not when it is only preloaded):
 *     const char *hugealloc_conf = "thp:never";
 * See docs/configuration.md for the options.
 *
 * Common rules:
 *   - A failed allocation returns NULL and sets errno to ENOMEM. errno is not touched on
 *     success.
 *   - Blocks of 16 bytes or more are 16-byte aligned; smaller ones 8-byte aligned.
 *   - free and friends abort the program with a one-line message naming the pointer when
 *     given a pointer hugealloc did not hand out (or a size of another size class).
 */
#ifndef HUGEALLOC_H
#define HUGEALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HUGEALLOC_VERSION "0.1.0"

/* ---- The standard and glibc functions -----------------------------------------------------
 *
 * Under their plain names these are declared by <stdlib.h> and <malloc.h>; hugealloc exports
 * them (plain names in the default build) with these semantics:
 *
 * void *malloc(size_t size);
 *     At least size bytes. malloc(0) returns a unique non-NULL pointer to pass to free.
 * void *calloc(size_t n, size_t size);
 *     n * size zeroed bytes. NULL with ENOMEM when n * size overflows.
 * void *realloc(void *p, size_t size);
 *     As glibc: realloc(NULL, n) is malloc(n); realloc(p, 0) with p non-NULL frees p and
 *     returns NULL; otherwise resizes in place when the size class or page run allows, else
 *     moves. On failure returns NULL with ENOMEM and p is untouched.
 * void *reallocarray(void *p, size_t n, size_t size);
 *     realloc(p, n * size), with NULL and ENOMEM (p untouched) when the product overflows.
 * void free(void *p);   void cfree(void *p);
 *     Frees p; NULL is ignored.
 * void free_sized(void *p, size_t size);                          (C23)
 *     Frees a block of malloc/calloc/realloc that was asked for with size bytes (anything up
 *     to malloc_usable_size(p) is accepted). A size of another size class aborts.
 * void free_aligned_sized(void *p, size_t alignment, size_t size);  (C23)
 *     The same for a block of aligned_alloc(alignment, size).
 * int posix_memalign(void **out, size_t alignment, size_t size);
 *     Stores a block aligned to alignment in *out and returns 0. Returns EINVAL when
 *     alignment is not a power of two multiple of sizeof(void *), ENOMEM when memory is
 *     short; *out and errno are untouched then.
 * void *aligned_alloc(size_t alignment, size_t size);
 *     As glibc 2.38 and later: alignment must be a power of two (else NULL with EINVAL); size
 *     need not be a multiple of it.
 * void *memalign(size_t alignment, size_t size);
 *     As glibc: alignments up to 16 are malloc's; one that is not a power of two is rounded
 *     up to the next; one above SIZE_MAX / 2 + 1 gives NULL with EINVAL.
 * void *valloc(size_t size);
 *     Page-aligned (4096).
 * void *pvalloc(size_t size);
 *     Page-aligned, size rounded up to whole pages (pvalloc(0) gives one page).
 * size_t malloc_usable_size(void *p);
 *     The bytes usable in p (at least what was asked for); 0 for NULL.
 * int malloc_trim(size_t pad);
 *     Returns every free dirty chunk of every arena to the kernel; 1 if memory was released,
 *     else 0. pad is ignored.
 * int mallopt(int param, int value);
 *     Accepted and ignored: returns 1 (glibc's "accepted") for every parameter. Configure
 *     hugealloc with HUGEALLOC_CONF or mallctl instead.
 * struct mallinfo mallinfo(void);  struct mallinfo2 mallinfo2(void);
 *     From hugealloc's statistics: arena = bytes mapped, uordblks = bytes allocated,
 *     fordblks = arena - uordblks, keepcost = dirty free bytes malloc_trim would release;
 *     the other fields 0. mallinfo clamps each field to INT_MAX.
 * void malloc_stats(void);
 *     hugealloc's statistics on stderr.
 *
 * glibc's internal aliases __libc_malloc, __libc_calloc, __libc_realloc, __libc_free,
 * __libc_memalign, __libc_valloc, __libc_pvalloc, __libc_mallopt and __libc_mallinfo are
 * exported as well (default build), so code calling them directly stays on hugealloc's heap.
 */

/* glibc's struct mallinfo2 and struct mallinfo, under hugealloc's names (same layout). */
struct hugealloc_mallinfo2 {
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct hugealloc_mallinfo {
    int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};

void *hugealloc_malloc(size_t size);
void *hugealloc_calloc(size_t n, size_t size);
void *hugealloc_realloc(void *p, size_t size);
void *hugealloc_reallocarray(void *p, size_t n, size_t size);
void hugealloc_free(void *p);
void hugealloc_free_sized(void *p, size_t size);
void hugealloc_free_aligned_sized(void *p, size_t alignment, size_t size);
int hugealloc_posix_memalign(void **out, size_t alignment, size_t size);
void *hugealloc_aligned_alloc(size_t alignment, size_t size);
void *hugealloc_memalign(size_t alignment, size_t size);
void *hugealloc_valloc(size_t size);
void *hugealloc_pvalloc(size_t size);
size_t hugealloc_malloc_usable_size(void *p);
int hugealloc_malloc_trim(size_t pad);
int hugealloc_mallopt(int param, int value);
struct hugealloc_mallinfo hugealloc_mallinfo(void);
struct hugealloc_mallinfo2 hugealloc_mallinfo2(void);
void hugealloc_malloc_stats(void);

#if !defined(__cplusplus) && !defined(HUGEALLOC_NO_C23_DECLS)
/* C23's sized frees, which older C libraries do not declare (plain names: default build).
 * Define HUGEALLOC_NO_C23_DECLS if your <stdlib.h> declares them. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
#endif

/* ---- jemalloc's non-standard API --------------------------------------------------------
 *
 * The flags argument is jemalloc's encoding, 0 or an OR of:
 *   MALLOCX_LG_ALIGN(la)  align to 2^la bytes (la in the low six bits; 0: no alignment given)
 *   MALLOCX_ALIGN(a)      align to a, a power of two (= MALLOCX_LG_ALIGN(log2(a)))
 *   MALLOCX_ZERO          zero the memory (for rallocx/xallocx: bytes past the old usable size)
 *   MALLOCX_TCACHE_NONE   bypass the thread cache (to or from the arena directly)
 *   MALLOCX_TCACHE(tc)    hugealloc has no tcache.create, so this means the thread's cache
 *   MALLOCX_ARENA(a)      use arena a (from arenas.create, or 0 .. arenas.narenas - 1)
 * The macros are defined only if no jemalloc header defined them first; the values are the
 * same.
 */
#ifndef MALLOCX_LG_ALIGN
#define MALLOCX_LG_ALIGN(la) ((int)(la))
#define MALLOCX_ALIGN(a) ((int)(__builtin_ffsll((long long)(a)) - 1))
#define MALLOCX_ZERO ((int)0x40)
#define MALLOCX_TCACHE(tc) ((int)(((tc) + 2) << 8))
#define MALLOCX_TCACHE_NONE MALLOCX_TCACHE(-1)
#define MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)
#endif
/* arena.<i>.* for every arena. */
#ifndef MALLCTL_ARENAS_ALL
#define MALLCTL_ARENAS_ALL 4096
#endif

/* At least size bytes with the flags' alignment, zeroing, arena and cache choice. NULL (with
 * ENOMEM) when memory is short or the arena does not exist. size 0 gives the smallest block
 * (jemalloc leaves it undefined). */
void *hugealloc_mallocx(size_t size, int flags);
/* Resizes p to at least size bytes (in place when possible, else by moving; MALLOCX_ARENA
 * moves the block to that arena). NULL with ENOMEM on failure, p untouched. */
void *hugealloc_rallocx(void *p, size_t size, int flags);
/* Resizes p in place only: to at least size bytes, and up to size + extra if possible.
 * Returns the usable size afterwards (the old one when no resize was possible). */
size_t hugealloc_xallocx(void *p, size_t size, size_t extra, int flags);
/* The usable size of p (as malloc_usable_size). */
size_t hugealloc_sallocx(const void *p, int flags);
/* Frees p; MALLOCX_TCACHE_NONE frees it to its arena directly. */
void hugealloc_dallocx(void *p, int flags);
/* Frees p, allocated with size (anything from the size asked for up to the usable size) and
 * the same alignment flags; a size of another size class aborts. */
void hugealloc_sdallocx(void *p, size_t size, int flags);
/* The usable size mallocx(size, flags) would give, without allocating; 0 if it would fail.
 * nallocx(n, f) == sallocx(mallocx(n, f), 0). */
size_t hugealloc_nallocx(size_t size, int flags);

/* Reads and/or writes a control name, jemalloc's convention: when oldp and oldlenp are
 * non-NULL the value is stored in oldp (*oldlenp must be its size); when newp is non-NULL
 * newlen bytes are written from it. Returns 0 or an errno value: ENOENT unknown name, EINVAL
 * wrong size or bad value, EPERM a read-only name written (or an action given a value),
 * EFAULT no such arena, EAGAIN no arena could be created. A failed call changes nothing.
 * docs/configuration.md lists every name; the fixed ones:
 *
 *   name                 type          access  meaning
 *   version              const char *  r       hugealloc's version ("0.1.0")
 *   epoch                uint64_t      rw      a counter each write advances (statistics are
 *                                              always current)
 *   arenas.narenas       unsigned      r       arenas created so far
 *   arenas.create        unsigned      r       creates an arena, returns its index
 *   arenas.page          size_t        r       the page size (4096)
 *   arenas.quantum       size_t        r       the alignment of blocks of 16 bytes and more
 *   arenas.dirty_decay_ms ssize_t      rw      decay time of arenas without their own; -1 never
 *   arenas.nbins         unsigned      r       the number of small size classes
 *   arenas.bin.<i>.size  size_t        r       small class i's block size
 *   arenas.bin.<i>.nregs unsigned      r       blocks in one slab of small class i
 *   arenas.bin.<i>.slab_size size_t    r       bytes of one slab of small class i
 *   thread.arena         unsigned      rw      the calling thread's arena; a write moves it
 *   thread.tcache.flush  (none)        action  flushes the calling thread's cache
 *   thread.allocated     uint64_t      r       bytes this thread took from arenas
 *   thread.deallocated   uint64_t      r       bytes this thread returned to arenas
 *   arena.<i>.purge      (none)        action  returns arena i's free dirty memory to the
 *                                              kernel (i = MALLCTL_ARENAS_ALL: every arena)
 *   arena.<i>.decay      (none)        action  purges arena i's free chunks dirty for longer
 *                                              than its decay time, now (4096: every arena)
 *   arena.<i>.thp        const char *  rw      arena i's THP policy: "always", "madvise",
 *                                              "never", "default" or "defer" (chunks mapped
 *                                              later; "defer" starts the background thread)
 *   arena.<i>.hugetlb    const char *  rw      arena i's page source: "off", "2M" or "1G"
 *                                              (chunks from that hugetlb pool, ordinary memory
 *                                              with a counted fallback when it runs dry);
 *                                              writable while the arena holds no chunk, EPERM
 *                                              after (docs/hugetlb.md)
 *   arena.<i>.dirty_decay_ms ssize_t   rw      arena i's decay time; -1 never
 * heap profiling (ENOENT unless started with prof:true; see docs/profiling.md):
 *   prof.active          bool          rw      whether allocations are sampled
 *   prof.dump            const char *  rw      write a path: dumps the profile there (pprof
 *                                              protobuf if it ends in .pb, else jemalloc's
 *                                              heap_v2 text); EFAULT if it cannot
 *   prof.reset           size_t        rw      forgets every sample (a write also sets the
 *                                              sampling exponent)
 *   prof.lg_sample       size_t        r       mean sampling interval is 2^N bytes
 *   thread.prof.active   bool          rw      whether this thread's allocations are sampled
 * and the generated families:
 *   opt.<option>         bool, unsigned, size_t, ssize_t or const char *: every option's
 *                        effective value, read-only (opt.narenas, opt.thp, opt.tcache_max...)
 *   stats.arenas.<i>.<figure>          arena i's figures (i = 4096: all merged): nthreads,
 *                        pactive, pdirty, mapped, small.allocated, large.nmalloc, lock_waits,
 *                        hugetlb.mapped, hugetlb.active, hugetlb.reserved (bytes of hugetlb
 *                        chunks held, in use, from hugetlb_reserve), hugetlb.fallbacks (hugetlb
 *                        requests served from ordinary memory), hugetlb.returned (bytes given
 *                        back whole)...
 *   stats.arenas.<i>.bins.<j>.<figure> small class j of arena i: size, nmalloc, ndalloc,
 *                        curregs, curslabs, nfills, nflushes, lock_waits
 * and the process-wide figures:
 *   stats.allocated      size_t        r       bytes in blocks the program holds
 *   stats.active         size_t        r       bytes of pages in active use
 *   stats.metadata       size_t        r       bytes mapped for allocator metadata
 *   stats.resident       size_t        r       bytes likely resident
 *   stats.mapped         size_t        r       bytes mapped by arenas, plus metadata
 *   stats.retained       size_t        r       bytes of address space kept clean for reuse
 *   stats.dirty          size_t        r       bytes of freed pages kept dirty for reuse
 *   stats.huge_advised   size_t        r       bytes of chunks advised MADV_HUGEPAGE
 *   stats.nohuge_advised size_t        r       bytes of chunks advised MADV_NOHUGEPAGE
 *   stats.metadata_thp_queued    size_t  r  bytes of metadata chunks queued (metadata_thp:defer)
 *   stats.metadata_thp_collapsed size_t  r  bytes of them collapsed into huge pages
 */
int hugealloc_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
/* Translates name into a MIB of one entry per name component (*miblenp: room in, count out);
 * the <i> component of arena.<i>.* holds the index, so mib[1] may be changed before
 * mallctlbymib. ENOENT unknown name, EINVAL too little room. */
int hugealloc_mallctlnametomib(const char *name, size_t *mib, size_t *miblenp);
/* mallctl by a MIB from mallctlnametomib. */
int hugealloc_mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp,
                           void *newp, size_t newlen);

/* Writes the statistics, as jemalloc's malloc_stats_print: write_cb(cbopaque, text) is called
 * with NUL-terminated lines ("hugealloc: stats.allocated: 123\n"); a NULL write_cb writes to
 * stderr. opts holds jemalloc's letters: 'J' gives one JSON object instead
 * ({"hugealloc":{"version":"0.1.0","stats":{"allocated":123,...},...}}); 'g' (general), 'm'
 * (merged arenas), 'a' (each arena), 'b' (bins), 'l' (large and huge), 'x' (lock contention),
 * 'h' (THP advice) leave parts out; other bytes are ignored. Nothing is allocated while
 * printing. Plain name: malloc_stats_print. */
void hugealloc_stats_print(void (*write_cb)(void *cbopaque, const char *text), void *cbopaque,
                           const char *opts);

#ifndef HUGEALLOC_NO_JEMALLOC_NAMES
/* The plain jemalloc names (default build). Define HUGEALLOC_NO_JEMALLOC_NAMES when
 * including jemalloc's own header as well, or when the library was built without them. */
void *mallocx(size_t size, int flags);
void *rallocx(void *p, size_t size, int flags);
size_t xallocx(void *p, size_t size, size_t extra, int flags);
size_t sallocx(const void *p, int flags);
void dallocx(void *p, int flags);
void sdallocx(void *p, size_t size, int flags);
size_t nallocx(size_t size, int flags);
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
int mallctlnametomib(const char *name, size_t *mib, size_t *miblenp);
int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp, void *newp,
                 size_t newlen);
void malloc_stats_print(void (*write_cb)(void *cbopaque, const char *text), void *cbopaque,
                        const char *opts);
#endif

#ifdef __cplusplus
}
#endif

#endif /* HUGEALLOC_H */
