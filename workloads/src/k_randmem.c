/* randmem: the seed workload.  Each access reads one 8-byte word, adds it to the
 * checksum and writes it back +1.  --random-pct of the accesses go to a uniformly
 * random cache line, the rest to a sequential cursor that steps one 64-byte line at
 * a time and wraps.
 *
 * With several threads each thread owns an equal slice of the buffer (its own
 * random range and its own cursor): no two threads ever write the same word, so
 * the plain loads and stores are race-free and the checksum is deterministic. */
#include <omp.h>

#include "access.h"
#include "kernels.h"
#include "trace.h"
#include "memory.h"
#include "nodes.h"
#include "rng.h"
#include "util.h"

#define WORDS_PER_LINE (LINE_BYTES / 8)

static uint64_t accesses_per_pass(const struct config *cfg)
{
    return cfg->accesses ? cfg->accesses : cfg->size / LINE_BYTES;
}

/* heap-large and static: one contiguous buffer of cache lines. */
static void randmem_flat(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct bigbuf bb;
    bigbufs_get(cfg, 1, cfg->size, &bb);
    uint64_t *words = (uint64_t *)bb.base;
    const uint64_t nlines = bb.len / LINE_BYTES, nwords = nlines * WORDS_PER_LINE;
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < nwords; i++)
        words[i] = i;
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t accesses = accesses_per_pass(cfg), iters = cfg->iters;
    const uint32_t thr = pct_threshold(cfg->random_pct);
    uint64_t sum = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel reduction(+ : sum)
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt, alo, acnt;
        split_range(nlines, t, nt, &lo, &cnt);
        split_range(accesses, t, nt, &alo, &acnt);
        uint64_t *slice = words + lo * WORDS_PER_LINE;
        uint64_t st = stream_seed(cfg->seed, RNG_RANDMEM, t), cur = 0, s = 0;
        for (uint64_t it = 0; it < iters; it++) {
            for (uint64_t k = 0; k < acnt; k++) {
                const uint64_t r = splitmix64(&st);
                /* bits 0..15 decide; the line comes from the high bits.  Written
                 * branch-free so the mix does not cost branch mispredictions. */
                const int random = (uint32_t)(r & 0xffff) < thr;
                const uint64_t line = random ? below(r, cnt) : cur;
                cur += !random;
                cur = cur == cnt ? 0 : cur;
                uint64_t *p = slice + line * WORDS_PER_LINE;
                const uint64_t v = ref_load_u64(p);
                s += v;
                ref_store_u64(p, v + 1);
            }
        }
        sum += s;
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    res->accesses = accesses;
    res->checksum = sum;
    res->buffer = (uintptr_t)bb.alloc;
    bigbufs_put(1, &bb);
}

/* heap-small: sequential accesses walk the nodes in allocation order, one access
 * per 64 bytes of payload; random ones pick a node through the index and a word in
 * it.  Each thread owns an equal range of node numbers. */
static void randmem_small(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct arena ar;
    struct nodelist l;
    nodelist_setup(cfg, &ar, &l);
    nodelist_number_words(&l);
    struct node *start[MAX_THREADS];
    for (unsigned t = 0; t < cfg->threads; t++) {
        uint64_t lo, cnt;
        split_range(l.count, t, cfg->threads, &lo, &cnt);
        start[t] = nx_get(&l.ix, lo);
    }
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t accesses = accesses_per_pass(cfg), iters = cfg->iters;
    const uint32_t thr = pct_threshold(cfg->random_pct);
    uint64_t sum = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel reduction(+ : sum)
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt, alo, acnt;
        split_range(l.count, t, nt, &lo, &cnt);
        split_range(accesses, t, nt, &alo, &acnt);
        struct node *const first = start[t];
        struct node *cur = first;
        uint64_t st = stream_seed(cfg->seed, RNG_RANDMEM, t), s = 0;
        uint64_t ck = 0, off = 0, cur_words = ref_load_u64(&cur->meta);
        for (uint64_t it = 0; it < iters; it++) {
            for (uint64_t k = 0; k < acnt; k++) {
                const uint64_t r = splitmix64(&st);
                uint64_t *p;
                if ((uint32_t)(r & 0xffff) < thr) {
                    struct node *q = nx_get(&l.ix, lo + below(r, cnt));
                    const uint64_t nw = ref_load_u64(&q->meta);
                    p = &q->data[(((r >> 16) & 0xffff) * nw) >> 16].u;
                } else {
                    p = &cur->data[off].u;
                    off += WORDS_PER_LINE;
                    if (off >= cur_words) {
                        off = 0;
                        if (++ck == cnt) {
                            ck = 0;
                            cur = first;
                        } else {
                            cur = ref_load_ptr(&cur->next.ptr);
                        }
                        cur_words = ref_load_u64(&cur->meta);
                    }
                }
                const uint64_t v = ref_load_u64(p);
                s += v;
                ref_store_u64(p, v + 1);
            }
        }
        sum += s;
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    res->accesses = accesses;
    res->checksum = sum;
    res->buffer = (uintptr_t)l.first;
    nodelist_free(&l, &ar);
    arena_destroy(&ar);
}

void kernel_randmem(const struct config *cfg, struct kresult *res)
{
    if (cfg->place == PLACE_HEAP_SMALL)
        randmem_small(cfg, res);
    else
        randmem_flat(cfg, res);
}
