/* blocks.c - a deterministic allocation workload for the robustness tests.
 *
 *   blocks N SIZE [THREADS [simple]]
 *
 * Each of THREADS threads (default 1) mallocs N/THREADS blocks of SIZE bytes and
 * keeps them all live, fills every block from a seed, waits until every thread
 * holds all of its blocks (so all N are live at once, whatever the scheduling), grows every other block
 * with realloc (SIZE + SIZE/2), checks the kept prefix, callocs one block of SIZE
 * and checks it is zero, then frees everything. It prints one line with the
 * number of allocations and an FNV-1a checksum of all the data, which does not
 * depend on what backs the memory. With `simple`, only the N mallocs of SIZE
 * are made (no realloc or calloc), so the heap-large allocations are exactly N.
 * Exit 1 on a content error, 3 if an
 * allocation failed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t g_n, g_size;
static int g_threads;
static int g_simple;
static pthread_barrier_t g_all_live;

struct job {
    int id;
    uint64_t sum;
    int err;
};

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096) /* one byte per page keeps it fast */
        h = (h ^ p[i]) * 0x100000001b3ull;
    return (h ^ p[n - 1]) * 0x100000001b3ull;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i += 512) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
    p[n - 1] = (unsigned char)(seed * 7);
}

static void *worker(void *arg)
{
    struct job *j = arg;
    size_t n = g_n / (size_t)g_threads;
    unsigned char **b = calloc(n ? n : 1, sizeof *b);
    uint64_t h = 0xcbf29ce484222325ull;
    if (!b) {
        j->err = 3;
        pthread_barrier_wait(&g_all_live);
        return NULL;
    }
    size_t got = 0;
    for (; got < n; got++) {
        b[got] = malloc(g_size);
        if (!b[got]) {
            j->err = 3;
            break;
        }
        fill(b[got], g_size, (uint64_t)j->id * 100003 + got);
    }
    /* Every thread arrives, also after a failure, so none waits for ever. */
    pthread_barrier_wait(&g_all_live);
    if (j->err) {
        for (size_t i = 0; i < got; i++)
            free(b[i]);
        free(b);
        return NULL;
    }
    for (size_t i = 0; i < n && !g_simple; i += 2) {
        unsigned char *r = realloc(b[i], g_size + g_size / 2);
        if (!r) {
            j->err = 3;
            return NULL;
        }
        b[i] = r;
        unsigned char want[8192];
        fill(want, sizeof want, (uint64_t)j->id * 100003 + i);
        size_t k = g_size < sizeof want ? g_size : sizeof want;
        for (size_t q = 0; q + 1 < k; q += 512)
            if (b[i][q] != want[q])
                j->err = 1;
        memset(b[i] + g_size, 0x5a, g_size / 2);
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = (i % 2 == 0 && !g_simple) ? g_size + g_size / 2 : g_size;
        h = fnv(h, b[i], len);
    }
    if (!g_simple) {
        unsigned char *z = calloc(1, g_size);
        if (!z) {
            j->err = 3;
            return NULL;
        }
        for (size_t q = 0; q < g_size; q += 256)
            if (z[q])
                j->err = 1;
        free(z);
    }
    for (size_t i = 0; i < n; i++)
        free(b[i]);
    free(b);
    j->sum = h;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: blocks N SIZE [THREADS]\n");
        return 2;
    }
    g_n = strtoull(argv[1], NULL, 10);
    g_size = strtoull(argv[2], NULL, 10);
    g_threads = argc > 3 ? atoi(argv[3]) : 1;
    g_simple = argc > 4 && strcmp(argv[4], "simple") == 0;
    if (g_size < 2 || g_threads < 1 || g_threads > 64)
        return 2;
    pthread_t t[64];
    struct job jobs[64];
    if (pthread_barrier_init(&g_all_live, NULL, (unsigned)g_threads) != 0)
        return 3;
    for (int i = 0; i < g_threads; i++) {
        jobs[i] = (struct job){.id = i};
        if (pthread_create(&t[i], NULL, worker, &jobs[i]) != 0)
            return 3;
    }
    uint64_t sum = 0;
    int err = 0;
    for (int i = 0; i < g_threads; i++) {
        pthread_join(t[i], NULL);
        sum ^= jobs[i].sum * (uint64_t)(i + 1);
        if (jobs[i].err > err)
            err = jobs[i].err;
    }
    printf("blocks=%zu size=%zu threads=%d checksum=0x%016llx\n", g_n, g_size, g_threads,
           (unsigned long long)sum);
    if (err)
        fprintf(stderr, "blocks: %s\n", err == 3 ? "allocation failed" : "content error");
    return err;
}
