/* bench_malloc - malloc-heavy microbenchmark for overhead comparisons.
 *
 *   bench_malloc [threads=2] [ops=10000000 in total] [touch=first|all]
 *
 * Each thread keeps a ring of 64 blocks and replaces one per op (free + malloc
 * of 16..1024 bytes). touch=first (default) writes the first byte of each new
 * block: almost nothing but allocator work, the worst case for a recorder.
 * touch=all writes the whole new block and reads 16 bytes of the one it
 * replaces, as a
 * program that uses its memory does. Prints one JSON line. */
#include "tcommon.h"

#include <pthread.h>
#include <time.h>

static long g_per_thread;
static int g_touch_all;
static volatile unsigned long g_sum;

static void *worker(void *arg)
{
    unsigned s = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    void *ring[64] = {0};
    for (long i = 0; i < g_per_thread; i++) {
        s = s * 1103515245u + 12345u;
        unsigned k = (s >> 8) & 63;
        size_t n = 16 + ((s >> 14) % 1009);
        if (g_touch_all && ring[k]) {
            const unsigned char *o = ring[k];
            unsigned long sum = 0;
            for (size_t j = 0; j < 16; j++)
                sum += o[j];
            g_sum += sum;
        }
        free(ring[k]);
        char *p = malloc(n);
        if (g_touch_all)
            memset(p, (int)i, n);
        else
            p[0] = (char)i;
        ring[k] = p;
    }
    for (int k = 0; k < 64; k++)
        free(ring[k]);
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
    printf("{\"threads\":%ld,\"ops\":%ld,\"touch\":\"%s\",\"seconds\":%.4f,\"ns_per_op\":%.2f}\n", threads,
           total, g_touch_all ? "all" : "first", sec, sec * 1e9 / (double)total);
    return 0;
}
