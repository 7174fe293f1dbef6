/* t_threads - multithreaded stress with content checks.
 *
 *   t_threads [threads=4] [ops=200000 per thread] [seed=1] [secs=S]
 *   (positional: t_threads 4 200000 also works)
 *
 * Each thread keeps 256 live blocks; every op picks a slot: an empty slot gets
 * a new block (malloc / calloc / posix_memalign / aligned_alloc, size 16 B ..
 * 4 MiB, ~0.5% above 128 KiB), a full one is verified then freed or
 * realloc'ed (verified again, re-patterned). Blocks carry a per-allocation
 * pattern: small blocks fully, large ones on every 4 KiB page plus head and
 * tail. With secs=S, waves of `threads` fresh threads (each doing `ops` ops,
 * then exiting: thread caches are created and torn down) run until S seconds
 * have passed, each wave with the next seed (the soak under ASan,
 * stress_asan.sh). Prints one JSON line; exit 0 when every check passed. */
#include "tcommon.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define SLOTS 256
#define PAGE 4096

struct blk {
    unsigned char *p;
    size_t n;
    unsigned char tag;
};

static long g_ops = 200000;
static unsigned g_seed = 1;
static _Atomic long g_errors, g_large, g_done_ops;
static _Atomic unsigned g_wave_seed;

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static size_t pick_size(unsigned *s)
{
    unsigned r = rnd(s) % 1000;
    if (r < 5) /* 0.5%: 128 KiB .. 4 MiB */
        return (128u << 10) + rnd(s) % ((4u << 20) - (128u << 10) + 1);
    if (r < 100)
        return 1024 + rnd(s) % (64u << 10);
    return 16 + rnd(s) % 1008;
}

/* Writes or checks the pattern positions of b (laid out for b->n bytes) that
 * lie below limit. */
static void pattern_lim(struct blk *b, int write, size_t limit)
{
    size_t n = b->n;
    unsigned char t = b->tag;
    int bad = 0;
#define TOUCH(i)                                                   \
    do {                                                           \
        unsigned char v = (unsigned char)(t + (i) * 31u);          \
        if ((i) >= limit)                                          \
            break;                                                 \
        if (write)                                                 \
            b->p[i] = v;                                           \
        else if (b->p[i] != v)                                     \
            bad = 1;                                               \
    } while (0)
    if (n <= 4 * PAGE) {
        for (size_t i = 0; i < n; i++)
            TOUCH(i);
    } else {
        for (size_t i = 0; i < 64; i++)
            TOUCH(i);
        for (size_t i = 64; i < n; i += PAGE)
            TOUCH(i);
        for (size_t i = n - 64; i < n; i++)
            TOUCH(i);
    }
#undef TOUCH
    if (bad)
        atomic_fetch_add(&g_errors, 1);
}

static void pattern(struct blk *b, int write) { pattern_lim(b, write, b->n); }

/* After a realloc to m bytes: the old pattern must survive below m. */
static void verify_prefix(struct blk *b, size_t m) { pattern_lim(b, 0, m); }

static void *worker(void *arg)
{
    long id = (long)arg;
    unsigned s = atomic_load(&g_wave_seed) * 7919u + (unsigned)id * 104729u;
    static __thread struct blk live[SLOTS];
    memset(live, 0, sizeof live);
    for (long op = 0; op < g_ops; op++) {
        struct blk *b = &live[rnd(&s) % SLOTS];
        if (!b->p) {
            size_t n = pick_size(&s);
            unsigned kind = rnd(&s) % 8;
            void *p = NULL;
            if (kind < 5) {
                p = malloc(n);
            } else if (kind == 5) {
                p = calloc(1, n);
                if (p && (((unsigned char *)p)[0] != 0 || ((unsigned char *)p)[n - 1] != 0))
                    atomic_fetch_add(&g_errors, 1);
            } else if (kind == 6) {
                if (posix_memalign(&p, 64, n) != 0)
                    p = NULL;
                if (p && ((uintptr_t)p & 63))
                    atomic_fetch_add(&g_errors, 1);
            } else {
                p = aligned_alloc(256, (n + 255) & ~(size_t)255);
                if (p && ((uintptr_t)p & 255))
                    atomic_fetch_add(&g_errors, 1);
            }
            if (!p)
                die("allocation of %zu failed", n);
            if (n >= (128u << 10))
                atomic_fetch_add(&g_large, 1);
            if (malloc_usable_size(p) < n)
                atomic_fetch_add(&g_errors, 1);
            b->p = p;
            b->n = n;
            b->tag = (unsigned char)rnd(&s);
            pattern(b, 1);
        } else if (rnd(&s) % 3) {
            pattern(b, 0);
            free(b->p);
            b->p = NULL;
        } else {
            pattern(b, 0);
            size_t n = pick_size(&s);
            unsigned char *q = realloc(b->p, n);
            if (!q)
                die("realloc to %zu failed", n);
            if (n >= (128u << 10))
                atomic_fetch_add(&g_large, 1);
            b->p = q;
            verify_prefix(b, n);
            b->n = n;
            b->tag = (unsigned char)rnd(&s);
            pattern(b, 1);
        }
    }
    for (int i = 0; i < SLOTS; i++) {
        if (live[i].p) {
            pattern(&live[i], 0);
            free(live[i].p);
        }
    }
    atomic_fetch_add(&g_done_ops, g_ops);
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = 4;
    const char *v;
    if (argc > 1 && argv[1][0] >= '0' && argv[1][0] <= '9')
        threads = atol(argv[1]);
    if (argc > 2 && argv[2][0] >= '0' && argv[2][0] <= '9')
        g_ops = atol(argv[2]);
    if ((v = arg_value(argc, argv, "threads")))
        threads = atol(v);
    if ((v = arg_value(argc, argv, "ops")))
        g_ops = atol(v);
    if ((v = arg_value(argc, argv, "seed")))
        g_seed = (unsigned)atol(v);
    if (threads < 1 || threads > 256 || g_ops < 1)
        die("bad arguments");
    double secs = 0;
    if ((v = arg_value(argc, argv, "secs")))
        secs = atof(v);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long waves = 0;
    pthread_t th[256];
    do {
        atomic_store(&g_wave_seed, g_seed + (unsigned)waves);
        for (long i = 0; i < threads; i++)
            if (pthread_create(&th[i], NULL, worker, (void *)i) != 0)
                die("pthread_create");
        for (long i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
        waves++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (!atomic_load(&g_errors) &&
             (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
    long errors = atomic_load(&g_errors);
    printf("{\"pid\":%ld,\"threads\":%ld,\"ops_per_thread\":%ld,\"waves\":%ld,\"ops\":%ld,"
           "\"large_allocs\":%ld,\"errors\":%ld,\"ok\":%s}\n",
           (long)getpid(), threads, g_ops, waves, atomic_load(&g_done_ops), atomic_load(&g_large),
           errors, errors ? "false" : "true");
    if (errors) {
        fprintf(stderr, "FAIL: %ld content/alignment errors\n", errors);
        return 1;
    }
    return 0;
}
