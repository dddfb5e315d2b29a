/* Heap profiling test program: allocations from known functions in known proportions.
 * grow_cache keeps 70% of the live bytes, parse 30%; leak_here leaks one block on purpose;
 * churn allocates and frees from threads (nothing of it stays live); with an argument
 * "fork", a child allocates too and exits. Prints the true live bytes of each site. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 1000
#define CACHE_BYTES (14u << 20)
#define PARSE_BYTES (6u << 20)

static void *keep[(CACHE_BYTES + PARSE_BYTES) / BLOCK + 16];
static size_t nkeep;

__attribute__((noinline)) void grow_cache(size_t total) {
    for (size_t done = 0; done + BLOCK <= total; done += BLOCK) {
        char *p = malloc(BLOCK);
        memset(p, 1, BLOCK);
        keep[nkeep++] = p;
    }
}

__attribute__((noinline)) void parse(size_t total) {
    for (size_t done = 0; done + BLOCK <= total; done += BLOCK) {
        char *p = calloc(1, BLOCK);
        p[0] = 1;
        keep[nkeep++] = p;
    }
}

__attribute__((noinline)) void *leak_here(void) {
    void *p = malloc(3 << 20); /* one big block: sampled for sure */
    memset(p, 2, 4096);
    return p;
}

static void *churn(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        void *p = malloc((size_t)(i % 4000) + 1);
        p = realloc(p, (size_t)(i % 5000) + 8);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, NULL);
    grow_cache(CACHE_BYTES);
    parse(PARSE_BYTES);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    volatile void *leaked = leak_here();
    (void)leaked;
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            churn(NULL);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("child failed\n");
            return 1;
        }
    }
    if (argc > 2 && strcmp(argv[1], "dump") == 0) {
        /* prof.dump through mallctl, found at run time (the program is only preloaded). */
        int (*ctl)(const char *, void *, size_t *, void *, size_t) =
            (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
        const char *path = argv[2];
        if (!ctl || ctl("prof.dump", NULL, NULL, &path, sizeof path) != 0) {
            printf("prof.dump failed\n");
            return 1;
        }
    }
    printf("grow_cache %u\nparse %u\n", (CACHE_BYTES / BLOCK) * BLOCK, (PARSE_BYTES / BLOCK) * BLOCK);
    printf("prof_sites: ok\n");
    return 0;
}
