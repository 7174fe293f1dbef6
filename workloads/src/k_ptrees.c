/* ptrees: PTrees-like "hundreds of thousands of ~2 KB objects" (seed 000: the
 * vertical data-mining application allocated one object of 2,224 bytes per predicate
 * tree, hundreds of thousands of them, 6.5 GB in all, and ANDs their bit vectors).
 *
 * --size bytes of individually malloc'ed objects of 1536..2560 bytes (uniform, 16-byte
 * steps, from the seed; objects are added while the next one fits), each a stand-in
 * for a compressed bit vector: a header (allocation-order link, 8 child pointers,
 * number of children and of words) and 64-bit words (182..310).  The objects form a
 * tree of fan-out 8 built in allocation order: object i's children are objects
 * 8i + 1 .. 8i + 8 (a heap-ordered tree: the root is object 0, the last level is
 * partly filled).  The words are random bits from the seed.
 *
 * A pass evaluates --accesses predicates (default: one per two objects).  Predicate p
 * takes 2 or 3 leaves (from its own random numbers), each reached by a walk from the
 * root through random children (its ancestors), then, from the leaves up: the AND of
 * the k leaves' words and its popcount, then the same for their parents, and so on
 * up to the root (a leaf that is higher in the tree stays at the root once its path
 * is used up); the popcounts are summed into the checksum.  The words compared are
 * the shortest vector's.
 *
 * Threads: the predicates of a pass are split into equal ranges (OpenMP); a
 * predicate's random numbers depend only on the seed, the pass and its number, and
 * the tree is only read, so the checksum is the same for every --threads.  --place and
 * --page are ignored (reported as given). */
#include <omp.h>
#include <stdlib.h>

#include "access.h"
#include "kernels.h"
#include "rng.h"
#include "trace.h"
#include "util.h"

#define FANOUT 8u
#define MAX_DEPTH 32u
#define MAX_LEAVES 3u

struct ptnode {
    struct ptnode *next;                 /* allocation order */
    struct ptnode *child[FANOUT];
    uint32_t nchild, nwords;
    uint64_t w[];
};
_Static_assert(sizeof(struct ptnode) == PT_HEADER_BYTES, "ptnode header");

/* Population count without the popcnt instruction (the build targets plain x86-64,
 * where __builtin_popcountll is a library call). */
static inline uint64_t popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (x * 0x0101010101010101ULL) >> 56;
}

/* Predicate number `id`: popcounts of the ANDs, level by level; *nodes += objects read. */
static uint64_t predicate(const struct ptnode *root, uint64_t key, uint64_t id, uint64_t *nodes)
{
    uint64_t st = mix64(key ^ mix64(id));
    const struct ptnode *path[MAX_LEAVES][MAX_DEPTH];
    unsigned len[MAX_LEAVES], maxlen = 0;
    const unsigned k = 2 + (unsigned)(splitmix64(&st) & 1);
    for (unsigned j = 0; j < k; j++) {
        const struct ptnode *x = root;
        unsigned d = 0;
        path[j][d++] = x;
        for (;;) {
            const uint32_t nc = ref_load_u32(&x->nchild);
            if (nc == 0 || d == MAX_DEPTH)
                break;
            x = ref_load_ptr((void *const *)&x->child[below(splitmix64(&st), nc)]);
            path[j][d++] = x;
        }
        len[j] = d;
        if (d > maxlen)
            maxlen = d;
    }
    uint64_t total = 0;
    for (unsigned s = 0; s < maxlen; s++) {
        const struct ptnode *x[MAX_LEAVES];
        uint32_t nw = UINT32_MAX;
        for (unsigned j = 0; j < k; j++) {
            x[j] = path[j][len[j] > s ? len[j] - 1 - s : 0];
            const uint32_t n = ref_load_u32(&x[j]->nwords);
            nw = n < nw ? n : nw;
        }
        uint64_t c = 0;
        if (k == 2) {
            for (uint32_t i = 0; i < nw; i++)
                c += popcount64(ref_load_u64(&x[0]->w[i]) & ref_load_u64(&x[1]->w[i]));
        } else {
            for (uint32_t i = 0; i < nw; i++)
                c += popcount64(ref_load_u64(&x[0]->w[i]) & ref_load_u64(&x[1]->w[i]) & ref_load_u64(&x[2]->w[i]));
        }
        total += c;
        *nodes += k;
    }
    return total;
}

void kernel_ptrees(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    uint64_t st = stream_seed(cfg->seed, RNG_PTREES, 0);
    const uint64_t skey = splitmix64(&st), wkey = splitmix64(&st), pkey = splitmix64(&st);
    struct ptnode *root = NULL, *last = NULL, *parent = NULL;
    uint64_t count = 0, used = 0;
    for (;;) {
        const uint64_t bytes = PT_MIN_BYTES + 16 * below(mix64(skey ^ count), (PT_MAX_BYTES - PT_MIN_BYTES) / 16 + 1);
        if (used + bytes > cfg->size)
            break;
        struct ptnode *x = malloc(bytes);
        if (!x)
            die_resource("malloc(%llu) failed: out of memory", (unsigned long long)bytes);
        x->next = NULL;
        x->nchild = 0;
        x->nwords = (uint32_t)((bytes - PT_HEADER_BYTES) / 8);
        uint64_t ws = mix64(wkey ^ count);
        for (uint32_t i = 0; i < x->nwords; i++)
            x->w[i] = splitmix64(&ws);
        if (last) {
            last->next = x;
            if (parent->nchild == FANOUT)
                parent = parent->next;
            parent->child[parent->nchild++] = x;
        } else {
            root = parent = x;
        }
        last = x;
        count++;
        used += bytes;
    }
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t preds = cfg->accesses ? cfg->accesses : ptrees_default(count), iters = cfg->iters;
    uint64_t sum = 0, nodes = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel reduction(+ : sum, nodes)
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t lo, cnt;
        split_range(preds, t, nt, &lo, &cnt);
        for (uint64_t it = 0; it < iters; it++)
            for (uint64_t p = lo; p < lo + cnt; p++)
                sum += predicate(root, pkey, it * preds + p, &nodes);
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    res->accesses = preds;
    res->checksum = sum;
    res->work = (double)nodes;
    res->buffer = (uintptr_t)root;
    for (struct ptnode *x = root, *nx; x; x = nx) {
        nx = x->next;
        free(x);
    }
}
