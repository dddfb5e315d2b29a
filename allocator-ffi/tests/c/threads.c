/* Threads under hugealloc: blocks freed by other threads than their allocators (through a
 * shared mailbox), thread churn (short threads that leave blocks behind and exit with full
 * caches), and allocation inside pthread key destructors at thread exit. Contents are
 * checked before every free. Prints "threads (MODE): ok". */
#include "check.h"

#include <malloc.h>
#include <pthread.h>

#define NTHREADS 8
#define OPS 150000
#define SLOTS 256
#define MAILBOX 1024

struct block {
    unsigned char *p;
    size_t size;
};

static pthread_mutex_t mailbox_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block mailbox[MAILBOX];
static size_t cross_frees;
static int errno_changed;

static size_t pick_size(uint64_t *rng) {
    uint64_t r = xorshift(rng);
    switch (r % 100) {
    case 0:
        return 2 * 1024 * 1024 + r % (3 * 1024 * 1024); /* huge */
    case 1: case 2: case 3:
        return 16384 + r % 200000; /* large */
    default:
        return 1 + r % 1024; /* small */
    }
}

static void stamp(struct block b) {
    unsigned char tag = (unsigned char)(b.size * 31 + 7);
    b.p[0] = tag;
    b.p[b.size / 2] = tag;
    b.p[b.size - 1] = tag;
}

static int intact(struct block b) {
    unsigned char tag = (unsigned char)(b.size * 31 + 7);
    return b.p[0] == tag && b.p[b.size / 2] == tag && b.p[b.size - 1] == tag;
}

static void release(struct block b) {
    if (!b.p)
        return;
    if (!intact(b)) {
        fprintf(stderr, "block %p of %zu bytes was overwritten\n", (void *)b.p, b.size);
        abort();
    }
    free(b.p);
}

static void *worker(void *arg) {
    uint64_t rng = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1);
    struct block mine[SLOTS] = {{0}};
    size_t crossed = 0;
    int changed = 0;
    errno = 0;
    for (int op = 0; op < OPS; op++) {
        /* errno survives every successful call, lock contention included. */
        if (errno != 0) {
            changed++;
            errno = 0;
        }
        size_t slot = xorshift(&rng) % SLOTS;
        release(mine[slot]);
        mine[slot].p = NULL;
        if (xorshift(&rng) % 4 == 0) {
            /* Swap with the mailbox: our block goes to whoever takes it next. */
            struct block b = {malloc(pick_size(&rng)), 0};
            b.size = b.p ? malloc_usable_size(b.p) : 0;
            if (!b.p)
                abort();
            stamp(b);
            size_t m = xorshift(&rng) % MAILBOX;
            pthread_mutex_lock(&mailbox_lock);
            struct block old = mailbox[m];
            mailbox[m] = b;
            pthread_mutex_unlock(&mailbox_lock);
            if (old.p)
                crossed++;
            release(old);
        } else {
            size_t size = pick_size(&rng);
            mine[slot].p = (xorshift(&rng) % 8 == 0) ? calloc(1, size) : malloc(size);
            if (!mine[slot].p)
                abort();
            mine[slot].size = size;
            stamp(mine[slot]);
            if (xorshift(&rng) % 16 == 0) {
                size_t bigger = size * 2 + 1;
                unsigned char *q = realloc(mine[slot].p, bigger);
                if (!q || q[0] != (unsigned char)(size * 31 + 7))
                    abort();
                mine[slot].p = q;
                mine[slot].size = bigger;
                stamp(mine[slot]);
            }
        }
    }
    for (size_t i = 0; i < SLOTS; i++)
        release(mine[i]);
    pthread_mutex_lock(&mailbox_lock);
    cross_frees += crossed;
    errno_changed += changed;
    pthread_mutex_unlock(&mailbox_lock);
    return NULL;
}

/* Thread churn: each short thread leaves blocks for main to free and allocates in its key
 * destructor. */
#define CHURN 400
#define LEFT 64
static struct block left_behind[CHURN][LEFT];
static pthread_key_t key;
static int destructor_runs;

static void key_destructor(void *value) {
    free(value);
    void *p = malloc(333);
    void *q = calloc(10, 100);
    if (!p || !q)
        abort();
    free(p);
    free(q);
    __atomic_fetch_add(&destructor_runs, 1, __ATOMIC_RELAXED);
}

static void *short_thread(void *arg) {
    size_t t = (uintptr_t)arg;
    uint64_t rng = t * 7919 + 1;
    pthread_setspecific(key, malloc(77));
    void *scratch[100];
    for (int i = 0; i < 100; i++)
        scratch[i] = malloc(pick_size(&rng));
    for (int i = 0; i < LEFT; i++) {
        struct block b = {malloc(1 + xorshift(&rng) % 4000), 0};
        b.size = malloc_usable_size(b.p);
        stamp(b);
        left_behind[t][i] = b;
    }
    /* Freed here, these sit in this thread's cache when it exits: the exit hook flushes them. */
    for (int i = 0; i < 100; i++)
        free(scratch[i]);
    return NULL;
}

int main(void) {
    X(mallctl)("thread.tcache.flush", NULL, NULL, NULL, 0);
    size_t start = stat_size("stats.allocated");

    pthread_t th[NTHREADS];
    for (uintptr_t i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (size_t m = 0; m < MAILBOX; m++)
        release(mailbox[m]);
    printf("cross-thread frees: %zu\n", cross_frees);
    CHECK(cross_frees > 1000);
    CHECK_EQ(errno_changed, 0);

    CHECK(pthread_key_create(&key, key_destructor) == 0);
    for (size_t wave = 0; wave < CHURN; wave += NTHREADS) {
        for (size_t i = 0; i < NTHREADS; i++)
            CHECK(pthread_create(&th[i], NULL, short_thread, (void *)(wave + i)) == 0);
        for (size_t i = 0; i < NTHREADS; i++)
            pthread_join(th[i], NULL);
    }
    for (size_t t = 0; t < CHURN; t++)
        for (size_t i = 0; i < LEFT; i++)
            release(left_behind[t][i]);
    CHECK_EQ(destructor_runs, CHURN);

    /* Everything is freed and every exited thread's cache flushed: what remains allocated
     * is this thread's cache and the bookkeeping of libc. */
    X(mallctl)("thread.tcache.flush", NULL, NULL, NULL, 0);
    size_t end = stat_size("stats.allocated");
    printf("stats.allocated: start %zu, end %zu\n", start, end);
    CHECK(end < start + 4 * 1024 * 1024);
    return finish("threads");
}
