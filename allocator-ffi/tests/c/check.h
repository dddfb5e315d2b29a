/* Shared by the C test programs: a CHECK macro that counts failures, and X(name), which calls
 * a hugealloc export that <stdlib.h> does not declare: directly when the program is linked
 * against the library (HA_LINKED), else through dlsym, so the same source runs under
 * LD_PRELOAD without linking the library. */
#ifndef CHECK_H
#define CHECK_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hugealloc.h"

static int failures;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

#define CHECK_EQ(a, b)                                                                    \
    do {                                                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);                              \
        if (a_ != b_) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__,  \
                    __LINE__, #a, #b, a_, b_);                                            \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

static inline void *resolve(const char *name) {
    void *f = dlsym(RTLD_DEFAULT, name);
    if (f == NULL) {
        fprintf(stderr, "cannot resolve %s: %s\n", name, dlerror());
        abort();
    }
    return f;
}

#ifdef HA_LINKED
#define X(name) name
#else
#define X(name) ((__typeof__(&name))resolve(#name))
#endif

#ifdef HA_STATIC
#define MODE "static"
#elif defined(HA_LINKED)
#define MODE "linked"
#else
#define MODE "preload"
#endif

static inline int finish(const char *prog) {
    if (failures) {
        printf("%s (%s): %d failures\n", prog, MODE, failures);
        return 1;
    }
    printf("%s (%s): ok\n", prog, MODE);
    return 0;
}

static inline uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static inline size_t stat_size(const char *name) {
    size_t v = 0, len = sizeof v;
    if (X(mallctl)(name, &v, &len, NULL, 0) != 0)
        return (size_t)-1;
    return v;
}

#endif
