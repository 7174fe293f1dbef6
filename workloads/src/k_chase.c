/* chase: a dependent random pointer walk (latency bound).  The memory is split into
 * nodes (64-byte slots of one buffer, or the heap-small nodes) linked into ONE random
 * cycle through all of them.  A pass is one step per node; with T threads, T walkers
 * start at evenly spaced points of the cycle and each takes 1/T of the steps. */
#include <omp.h>

#include "access.h"
#include "kernels.h"
#include "trace.h"
#include "memory.h"
#include "nodes.h"
#include "rng.h"
#include "util.h"

/* Node i during construction: slot i of the buffer, or heap-small node i. */
struct nodeset {
    char *base;                    /* flat: 64-byte nodes from here */
    const struct nodeindex *ix;    /* heap-small */
};

static inline struct node *ns_get(const struct nodeset *ns, uint64_t i)
{
    return ns->ix ? nx_get(ns->ix, i) : (struct node *)(ns->base + i * LINE_BYTES);
}

/* Builds the cycle in place: successor numbers are stored in the nodes themselves
 * (Sattolo's algorithm yields a single cycle), then turned into pointers, so no
 * permutation array (no extra large allocation) is needed.  Fills start[] with T
 * evenly spaced points of the cycle. */
static void build_cycle(const struct config *cfg, const struct nodeset *ns, uint64_t n, struct node **start)
{
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < n; i++) {
        struct node *p = ns_get(ns, i);
        p->next.idx = i;
        p->meta = i;      /* node number: what the walk sums into the checksum */
    }
    uint64_t st = stream_seed(cfg->seed, RNG_CYCLE, 0);
    for (uint64_t i = n - 1; i > 0; i--) {
        struct node *a = ns_get(ns, i), *b = ns_get(ns, below(splitmix64(&st), i));
        const uint64_t tmp = a->next.idx;
        a->next.idx = b->next.idx;
        b->next.idx = tmp;
    }
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < n; i++) {
        struct node *p = ns_get(ns, i);
        p->next.ptr = ns_get(ns, p->next.idx);
    }

    /* Walker t starts n*t/T steps after node 0 (walks (T-1)/T of the cycle once). */
    const unsigned nt = cfg->threads;
    struct node *p = ns_get(ns, 0);
    start[0] = p;
    unsigned t = 1;
    for (uint64_t pos = 1; t < nt; pos++) {
        p = p->next.ptr;
        if (pos == (uint64_t)(((unsigned __int128)n * t) / nt))
            start[t++] = p;
    }
}

static uint64_t walk(const struct config *cfg, uint64_t steps, struct node **start)
{
    const uint64_t iters = cfg->iters;
    uint64_t sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt;
        split_range(steps, t, nt, &lo, &cnt);
        struct node *p = start[t];
        uint64_t s = 0;
        for (uint64_t it = 0; it < iters; it++) {
            for (uint64_t k = 0; k < cnt; k++) {
                p = ref_load_ptr(&p->next.ptr);
                s += ref_load_u64(&p->meta);
            }
        }
        sum += s;
    }
    return sum;
}

void kernel_chase(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    struct bigbuf bb;
    struct arena ar;
    struct nodelist l;
    struct nodeset ns = { 0 };
    struct node *start[MAX_THREADS];
    uint64_t n;

    phase_begin(&ph);
    if (cfg->place == PLACE_HEAP_SMALL) {
        nodelist_setup(cfg, &ar, &l);
        ns.ix = &l.ix;
        n = l.count;
        res->buffer = (uintptr_t)l.first;
    } else {
        bigbufs_get(cfg, 1, cfg->size, &bb);
        ns.base = bb.base;
        n = bb.len / LINE_BYTES;
        res->buffer = (uintptr_t)bb.alloc;
    }
    build_cycle(cfg, &ns, n, start);
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    res->accesses = cfg->accesses ? cfg->accesses : n;
    phase_begin(&ph);
    trace_begin();
    res->checksum = walk(cfg, res->accesses, start);
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    if (cfg->place == PLACE_HEAP_SMALL) {
        nodelist_free(&l, &ar);
        arena_destroy(&ar);
    } else {
        bigbufs_put(1, &bb);
    }
}
