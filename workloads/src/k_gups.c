/* gups: random read-modify-write updates (throughput bound): table[r % n] ^= r for
 * random r (the index uses below(), see rng.h).  Updates are independent, so many
 * are in flight at once, unlike chase.  With several threads the xor is a relaxed
 * atomic: xor commutes, so the final table, and the checksum taken from it, are
 * deterministic. */
#include <omp.h>

#include "access.h"
#include "kernels.h"
#include "trace.h"
#include "memory.h"
#include "nodes.h"
#include "rng.h"
#include "util.h"

static void gups_flat(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct bigbuf bb;
    bigbufs_get(cfg, 1, cfg->size, &bb);
    uint64_t *table = (uint64_t *)bb.base;
    const uint64_t n = bb.len / 8;
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < n; i++)
        table[i] = i;
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t updates = cfg->accesses ? cfg->accesses : n, iters = cfg->iters;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt;
        split_range(updates, t, nt, &lo, &cnt);
        uint64_t st = stream_seed(cfg->seed, RNG_GUPS, t);
        if (nt == 1) {
            for (uint64_t it = 0; it < iters; it++) {
                for (uint64_t k = 0; k < cnt; k++) {
                    const uint64_t r = splitmix64(&st);
                    ref_xor_u64(&table[below(r, n)], r);
                }
            }
        } else {
            for (uint64_t it = 0; it < iters; it++) {
                for (uint64_t k = 0; k < cnt; k++) {
                    const uint64_t r = splitmix64(&st);
                    ref_xor_u64_atomic(&table[below(r, n)], r);
                }
            }
        }
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t i = 0; i < n; i++)
        sum += checksum_word(i, table[i]);
    res->accesses = updates;
    res->checksum = sum;
    res->buffer = (uintptr_t)bb.alloc;
    bigbufs_put(1, &bb);
}

/* heap-small: the table is the payload words of all nodes; an update picks a random
 * node through the index, reads its word count, and xors a random word in it. */
static void gups_small(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct arena ar;
    struct nodelist l;
    nodelist_setup(cfg, &ar, &l);
    nodelist_number_words(&l);
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t updates = cfg->accesses ? cfg->accesses : l.words, iters = cfg->iters;
    const uint64_t nnodes = l.count;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt;
        split_range(updates, t, nt, &lo, &cnt);
        uint64_t st = stream_seed(cfg->seed, RNG_GUPS, t);
        for (uint64_t it = 0; it < iters; it++) {
            for (uint64_t k = 0; k < cnt; k++) {
                const uint64_t r = splitmix64(&st);
                struct node *q = nx_get(&l.ix, below(r, nnodes));
                const uint64_t nw = ref_load_u64(&q->meta);
                uint64_t *p = &q->data[(((r >> 16) & 0xffff) * nw) >> 16].u;
                if (nt == 1)
                    ref_xor_u64(p, r);
                else
                    ref_xor_u64_atomic(p, r);
            }
        }
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0, g = 0;
    for (struct node *p = l.first; p; p = p->next.ptr)
        for (uint64_t w = 0; w < p->meta; w++, g++)
            sum += checksum_word(g, p->data[w].u);
    res->accesses = updates;
    res->checksum = sum;
    res->buffer = (uintptr_t)l.first;
    nodelist_free(&l, &ar);
    arena_destroy(&ar);
}

void kernel_gups(const struct config *cfg, struct kresult *res)
{
    if (cfg->place == PLACE_HEAP_SMALL)
        gups_small(cfg, res);
    else
        gups_flat(cfg, res);
}
