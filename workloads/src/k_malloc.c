/* malloc: allocator-bound control (the "many small objects" shape of seed 000's
 * PTrees-like programs, and the benchmark of the runtime library's overhead).
 * Each thread keeps a ring of live blocks (--size bytes in all, 64 blocks per
 * thread at least); an operation frees a random block of its ring and allocates
 * a new one of 16..1024 bytes, reading the old block's first byte and writing the
 * new one's, so every block is really used. A pass is --accesses operations
 * (default 10 M), split over the threads. */
#include <omp.h>
#include <stdlib.h>

#include "access.h"
#include "kernels.h"
#include "trace.h"
#include "rng.h"
#include "util.h"

#define AVG_BLOCK 520u   /* mean of 16..1024 */
#define MIN_RING 64u

void kernel_malloc(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    const unsigned nt = cfg->threads;
    uint64_t ring = cfg->size / AVG_BLOCK / nt;
    if (ring < MIN_RING)
        ring = MIN_RING;
    unsigned char **slots = calloc(ring * nt, sizeof *slots);
    if (!slots)
        die_resource("cannot allocate the ring of %llu blocks", (unsigned long long)(ring * nt));

    phase_begin(&ph);
    uint64_t init_sum = 0;
#pragma omp parallel num_threads(nt) reduction(+ : init_sum)
    {
        const unsigned t = omp_get_thread_num();
        uint64_t st = stream_seed(cfg->seed, RNG_MALLOC, t);
        unsigned char **mine = slots + (uint64_t)t * ring;
        for (uint64_t k = 0; k < ring; k++) {
            const size_t n = 16 + below(splitmix64(&st), 1009);
            mine[k] = malloc(n);
            if (!mine[k])
                die_resource("malloc(%zu) failed", n);
            mine[k][0] = (unsigned char)k;
            init_sum += n;
        }
    }
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t ops = cfg->accesses ? cfg->accesses : 10000000u, iters = cfg->iters;
    uint64_t sum = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel num_threads(nt) reduction(+ : sum)
    {
        const unsigned t = omp_get_thread_num();
        uint64_t lo, cnt, s = 0;
        split_range(ops, t, nt, &lo, &cnt);
        uint64_t st = stream_seed(cfg->seed, RNG_MALLOC, nt + t);
        unsigned char **mine = slots + (uint64_t)t * ring;
        for (uint64_t it = 0; it < iters; it++) {
            for (uint64_t i = 0; i < cnt; i++) {
                const uint64_t r = splitmix64(&st);
                const uint64_t k = below(r, ring);
                const size_t n = 16 + below(r >> 20 | r << 44, 1009);
                unsigned char *blk = ref_load_ptr((void *const *)&mine[k]);
                s += ref_load_u8(blk);
                free(blk);
                blk = malloc(n);
                if (!blk)
                    die_resource("malloc(%zu) failed", n);
                ref_store_u8(blk, (unsigned char)i);
                mine[k] = blk; /* the slot's store: counted with its load above */
                s += n;
            }
        }
        sum += s;
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    for (uint64_t k = 0; k < ring * nt; k++)
        free(slots[k]);
    res->buffer = (uintptr_t)slots;
    free(slots);
    res->accesses = ops;
    res->checksum = sum + init_sum;
}
