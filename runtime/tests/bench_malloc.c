/* bench_malloc - malloc-heavy microbenchmark for overhead comparisons.
 *
 *   bench_malloc [threads=2] [ops=10000000 in total] [touch=first|all]
 *                [ring=64] [usable=0|1]
 *
 * Each thread keeps a ring of `ring` blocks and replaces a random one per op
 * (free + malloc of 16..1024 bytes); a ring larger than the caches makes
 * most frees ones of cold objects, and while it fills most mallocs ones of
 * fresh memory (a heap that grows, as a cache being loaded). usable=1 asks
 * malloc_usable_size after every malloc and before every free, as programs
 * that count their memory do (Redis's zmalloc). touch=first (default) writes the first byte of each new
 * block: almost nothing but allocator work, the worst case for a recorder.
 * touch=all writes the whole new block and reads 16 bytes of the one it
 * replaces, as a
 * program that uses its memory does. Prints one JSON line. */
#include "tcommon.h"

#include <malloc.h>
#include <pthread.h>
#include <time.h>

static long g_per_thread;
static int g_touch_all, g_usable;
static long g_ring = 64;
static volatile size_t g_counted;
static volatile unsigned long g_sum;

static void *worker(void *arg)
{
    unsigned s = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    void **ring = calloc((size_t)g_ring, sizeof *ring);
    size_t counted = 0;
    if (!ring)
        die("out of memory for the ring");
    for (long i = 0; i < g_per_thread; i++) {
        s = s * 1103515245u + 12345u;
        long k = (long)((s >> 8) % (unsigned)g_ring);
        size_t n = 16 + ((s >> 14) % 1009);
        if (g_touch_all && ring[k]) {
            const unsigned char *o = ring[k];
            unsigned long sum = 0;
            for (size_t j = 0; j < 16; j++)
                sum += o[j];
            g_sum += sum;
        }
        if (g_usable && ring[k])
            counted -= malloc_usable_size(ring[k]);
        free(ring[k]);
        char *p = malloc(n);
        if (!p)
            die("malloc failed");
        if (g_usable)
            counted += malloc_usable_size(p);
        if (g_touch_all)
            memset(p, (int)i, n);
        else
            p[0] = (char)i;
        ring[k] = p;
    }
    for (long k = 0; k < g_ring; k++)
        free(ring[k]);
    free(ring);
    g_counted += counted;
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = 2, ops = 10000000;
    const char *v;
    if ((v = arg_value(argc, argv, "threads")))
        threads = atol(v);
    if ((v = arg_value(argc, argv, "ops")))
        ops = atol(v);
    if ((v = arg_value(argc, argv, "touch")))
        g_touch_all = strcmp(v, "all") == 0;
    if ((v = arg_value(argc, argv, "ring")))
        g_ring = atol(v);
    if ((v = arg_value(argc, argv, "usable")))
        g_usable = atoi(v) != 0;
    if (g_ring < 1 || g_ring > (1L << 24))
        die("bad ring (1..2^24)");
    if (threads < 1 || threads > 64)
        die("bad threads");
    g_per_thread = ops / threads;
    pthread_t th[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
    for (long i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    long total = g_per_thread * threads;
    printf("{\"threads\":%ld,\"ops\":%ld,\"touch\":\"%s\",\"ring\":%ld,\"usable\":%d,\"seconds\":%.4f,"
           "\"ns_per_op\":%.2f}\n",
           threads, total, g_touch_all ? "all" : "first", g_ring, g_usable, sec, sec * 1e9 / (double)total);
    return 0;
}
