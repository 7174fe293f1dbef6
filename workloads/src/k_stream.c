/* stream: STREAM triad a[i] = b[i] + s*c[i] over three arrays of --size/3 bytes each
 * (bandwidth bound).  The rate counts 24 bytes per element (two loads, one store). */
#include <omp.h>
#include <string.h>

#include "access.h"
#include "kernels.h"
#include "trace.h"
#include "memory.h"
#include "nodes.h"
#include "rng.h"
#include "util.h"

static const double SCALAR = 3.0;

/* Initial values: exact in binary, so the results (and checksum) are exact. */
static inline double init_b(uint64_t i) { return 1.0 + (double)(i & 1023); }
static inline double init_c(uint64_t i) { return 0.5 * (double)(1 + i % 7); }

static inline uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static void stream_flat(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct bigbuf bb[3];
    bigbufs_get(cfg, 3, cfg->size / 3, bb);
    uint64_t n = bb[0].len;
    for (int i = 1; i < 3; i++)
        if (bb[i].len < n)
            n = bb[i].len;
    n /= sizeof(double);
    double *const a = (double *)bb[0].base, *const b = (double *)bb[1].base, *const c = (double *)bb[2].base;
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = init_b(i);
        c[i] = init_c(i);
    }
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    for (uint64_t it = 0; it < iters; it++) {
#pragma omp for schedule(static)
        for (uint64_t i = 0; i < n; i++)
            ref_store_f64(&a[i], ref_load_f64(&b[i]) + SCALAR * ref_load_f64(&c[i]));
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t i = 0; i < n; i++)
        sum += checksum_word(i, f64_bits(a[i]));
    res->accesses = n;
    res->checksum = sum;
    res->buffer = (uintptr_t)bb[0].alloc;
    bigbufs_put(3, bb);
}

/* heap-small: three node lists with identical size sequences (allocated one list
 * after the other); the triad runs node by node, word by word, in lockstep.  Each
 * thread takes an equal range of node numbers. */
static void stream_small(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    const uint64_t lseed = stream_seed(cfg->seed, RNG_LAYOUT, 0);
    const size_t bytes = cfg->size / 3;
    struct nodeplan plan;
    nodelist_plan(lseed, bytes, &plan);
    struct arena ar;
    arena_init(&ar, cfg, 3 * plan.alloc_bytes);
    struct nodelist l[3];
    for (int i = 0; i < 3; i++)
        nodelist_build(&l[i], &ar, lseed, bytes);
    uint64_t g = 0;
    for (struct node *a = l[0].first, *b = l[1].first, *c = l[2].first; a;
         a = a->next.ptr, b = b->next.ptr, c = c->next.ptr) {
        for (uint64_t w = 0; w < a->meta; w++, g++) {
            a->data[w].d = 0.0;
            b->data[w].d = init_b(g);
            c->data[w].d = init_c(g);
        }
    }
    struct node *start[MAX_THREADS][3];
    for (unsigned t = 0; t < cfg->threads; t++) {
        uint64_t lo, cnt;
        split_range(l[0].count, t, cfg->threads, &lo, &cnt);
        for (int i = 0; i < 3; i++)
            start[t][i] = nx_get(&l[i].ix, lo);
    }
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt;
        split_range(l[0].count, t, nt, &lo, &cnt);
        for (uint64_t it = 0; it < iters; it++) {
            struct node *a = start[t][0], *b = start[t][1], *c = start[t][2];
            for (uint64_t k = 0; k < cnt; k++) {
                const uint64_t nw = ref_load_u64(&a->meta);
                for (uint64_t w = 0; w < nw; w++)
                    ref_store_f64(&a->data[w].d, ref_load_f64(&b->data[w].d) + SCALAR * ref_load_f64(&c->data[w].d));
                a = ref_load_ptr(&a->next.ptr);
                b = ref_load_ptr(&b->next.ptr);
                c = ref_load_ptr(&c->next.ptr);
            }
#pragma omp barrier
        }
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0;
    g = 0;
    for (struct node *a = l[0].first; a; a = a->next.ptr)
        for (uint64_t w = 0; w < a->meta; w++, g++)
            sum += checksum_word(g, f64_bits(a->data[w].d));
    res->accesses = l[0].words;
    res->checksum = sum;
    res->buffer = (uintptr_t)l[0].first;
    for (int i = 0; i < 3; i++)
        nodelist_free(&l[i], &ar);
    arena_destroy(&ar);
}

void kernel_stream(const struct config *cfg, struct kresult *res)
{
    if (cfg->place == PLACE_HEAP_SMALL)
        stream_small(cfg, res);
    else
        stream_flat(cfg, res);
}
