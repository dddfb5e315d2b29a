/* Misuse on the default configuration, run under LD_PRELOAD by c_programs.rs: each case must
 * abort with one "hugealloc: " line naming the pointer (printed first as "pointer %p").
 *   interior     free of a pointer inside a small block (through the thread cache);
 *   double_late  p freed, 5,000 blocks of its class allocated and freed (p goes back to its
 *                slab), p freed again: the flush that takes it home finds it free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 5000

/* Stores the program cannot drop: the calls stay real malloc/free calls. */
static void *volatile sink;
static void *blocks[N];

static void cycle(void) {
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(64);
        sink = blocks[i];
    }
    for (int i = 0; i < N; i++)
        free(blocks[i]);
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    char *p = malloc(64);
    /* Keeps p's slab from emptying, so it is never released. */
    char *neighbour = malloc(64);
    sink = neighbour;
    fprintf(stderr, "pointer %p\n", (void *)(p + (strcmp(argv[1], "interior") == 0 ? 16 : 0)));
    if (strcmp(argv[1], "interior") == 0) {
        free(p + 16);
        /* Not reached: had the pointer been cached, this would return it. */
        printf("interior: not caught, malloc gave %p\n", malloc(64));
        return 1;
    }
    if (strcmp(argv[1], "double_late") == 0) {
        free(p);
        cycle();
        cycle();
        free(p);
        cycle();
        printf("double_late: not caught\n");
        return 1;
    }
    return 2;
}
