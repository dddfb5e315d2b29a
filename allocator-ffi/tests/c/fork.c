/* fork while other threads allocate: every child must be able to allocate (from any size
 * class, and from a new thread) and exit 0; a deadlock in the child is caught by alarm().
 * Prints "fork (MODE): ok". */
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define NTHREADS 4
#define FORKS 60

static volatile int stop;

/* Deadlock alarms, in seconds, times HUGEALLOC_TEST_SLOW (e.g. 10 under valgrind). */
static unsigned slow(unsigned secs) {
    const char *f = getenv("HUGEALLOC_TEST_SLOW");
    unsigned k = f ? (unsigned)atoi(f) : 1;
    return secs * (k ? k : 1);
}

static void *churn(void *arg) {
    uint64_t rng = (uintptr_t)arg * 1234567 + 1;
    void *slots[64] = {0};
    while (!stop) {
        size_t i = xorshift(&rng) % 64;
        free(slots[i]);
        uint64_t r = xorshift(&rng);
        size_t size = r % 50 == 0 ? 3u << 20 : r % 10 == 0 ? 40000 : 1 + r % 2000;
        slots[i] = malloc(size);
        if (!slots[i])
            abort();
        memset(slots[i], 1, size < 64 ? size : 64);
    }
    for (int i = 0; i < 64; i++)
        free(slots[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++)
        free(malloc(1 + i * 13));
    return malloc(10);
}

static int child(void) {
    alarm(slow(20));
    uint64_t rng = (uint64_t)getpid() * 31 + 1;
    void *keep[256];
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 256; i++) {
            uint64_t r = xorshift(&rng);
            keep[i] = malloc(r % 64 == 0 ? 5u << 20 : r % 8 == 0 ? 30000 : 1 + r % 3000);
            if (!keep[i])
                return 2;
        }
        for (int i = 0; i < 256; i++)
            free(keep[i]);
    }
    pthread_t t;
    void *from_thread = NULL;
    if (pthread_create(&t, NULL, child_thread, NULL) != 0)
        return 3;
    pthread_join(t, &from_thread);
    free(from_thread);
    char *s = strdup("child");
    free(s);
    return 0;
}

int main(void) {
    alarm(slow(120));
    pthread_t th[NTHREADS];
    for (uintptr_t i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&th[i], NULL, churn, (void *)i) == 0);
    int ok = 0;
    for (int f = 0; f < FORKS; f++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(child());
        CHECK(pid > 0);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else
            fprintf(stderr, "child %d: status %#x%s\n", f, status,
                    WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (deadlock)" : "");
        /* Let the threads run between forks. */
        for (int i = 0; i < 200; i++)
            free(malloc(100 + i));
    }
    stop = 1;
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(ok, FORKS);
    /* A child that exits through exit() (atexit handlers, stdio flush) as well. */
    pid_t pid = fork();
    if (pid == 0) {
        void *p = malloc(1000);
        printf("%s", "");
        free(p);
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return finish("fork");
}
