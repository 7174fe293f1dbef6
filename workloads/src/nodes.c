/* heap-small placement: a list of small nodes (64..512 bytes, individually
 * allocated) and a radix index from node number to node pointer whose every piece
 * is itself a small allocation, so that no single allocation reaches 64 KiB at any
 * --size.  See nodes.h for the layout. */
#include "nodes.h"

#include <string.h>

#include "rng.h"
#include "util.h"

/* Next node size: 64..512 bytes in 16-byte steps, uniform; the last node takes what
 * remains (if at least 64 bytes).  0 = done. */
static size_t next_node_size(uint64_t *st, size_t remaining)
{
    size_t sz = NODE_MIN_BYTES + 16 * (size_t)below(splitmix64(st), (NODE_MAX_BYTES - NODE_MIN_BYTES) / 16 + 1);
    if (sz > remaining)
        sz = remaining & ~(size_t)15;
    return sz >= NODE_MIN_BYTES ? sz : 0;
}

/* Smallest number of chunk levels (>= 2) whose top array fits INDEX_TOP_MAX. */
static unsigned index_levels(size_t count, size_t *top_len)
{
    unsigned levels = 2;
    while (ceil_div(count, 1ULL << (6 * levels)) > INDEX_TOP_MAX)
        levels++;
    *top_len = ceil_div(count, 1ULL << (6 * levels));
    if (*top_len == 0)
        *top_len = 1;
    return levels;
}

size_t nx_plan_bytes(size_t count)
{
    size_t top_len, chunks = 0;
    unsigned levels = index_levels(count, &top_len);
    for (unsigned l = 1; l <= levels; l++)
        chunks += ceil_div(count, 1ULL << (6 * l));
    return chunks * INDEX_CHUNK_BYTES + round_up(top_len * sizeof(void *), 16);
}

void nodelist_plan(uint64_t layout_seed, size_t bytes, struct nodeplan *plan)
{
    uint64_t st = layout_seed;
    size_t remaining = bytes, sz, node_bytes = 0;
    memset(plan, 0, sizeof *plan);
    while ((sz = next_node_size(&st, remaining)) != 0) {
        plan->count++;
        plan->words += (sz - NODE_HEADER_BYTES) / 8;
        node_bytes += sz;
        remaining -= sz;
    }
    plan->alloc_bytes = node_bytes + nx_plan_bytes(plan->count);
}

static void *new_chunk(struct arena *a)
{
    void *c = arena_alloc(a, INDEX_CHUNK_BYTES);
    memset(c, 0, INDEX_CHUNK_BYTES);
    return c;
}

/* Makes item number i reachable, allocating index chunks on the way as needed (so
 * they are interleaved with the items in allocation order, as in a real program). */
void nx_set(struct nodeindex *x, struct arena *a, size_t i, void *item)
{
    void **slot = &x->top[i >> x->top_shift];
    for (unsigned s = x->top_shift; s != 0; s -= 6) {
        if (!*slot)
            *slot = new_chunk(a);
        slot = &((void **)*slot)[(i >> (s - 6)) & (INDEX_CHUNK_SLOTS - 1)];
    }
    *slot = item;
}

void nx_init(struct nodeindex *x, struct arena *a, size_t count)
{
    memset(x, 0, sizeof *x);
    x->levels = index_levels(count, &x->top_len);
    x->top_shift = 6 * x->levels;
    x->top = arena_alloc(a, x->top_len * sizeof(void *));
    memset(x->top, 0, x->top_len * sizeof(void *));
}

void nodelist_build(struct nodelist *l, struct arena *a, uint64_t layout_seed, size_t bytes)
{
    struct nodeplan plan;
    nodelist_plan(layout_seed, bytes, &plan);
    memset(l, 0, sizeof *l);
    nx_init(&l->ix, a, plan.count);

    uint64_t st = layout_seed;
    size_t remaining = bytes, sz;
    struct node *prev = NULL;
    while ((sz = next_node_size(&st, remaining)) != 0) {
        struct node *n = arena_alloc(a, sz);
        n->next.ptr = NULL;
        n->meta = (sz - NODE_HEADER_BYTES) / 8;
        if (prev)
            prev->next.ptr = n;
        else
            l->first = n;
        nx_set(&l->ix, a, l->count, n);
        l->count++;
        l->words += n->meta;
        remaining -= sz;
        prev = n;
    }
}

void nodelist_setup(const struct config *cfg, struct arena *a, struct nodelist *l)
{
    const uint64_t lseed = stream_seed(cfg->seed, RNG_LAYOUT, 0);
    struct nodeplan plan;
    nodelist_plan(lseed, cfg->size, &plan);
    arena_init(a, cfg, plan.alloc_bytes);
    nodelist_build(l, a, lseed, cfg->size);
}

void nodelist_number_words(struct nodelist *l)
{
    uint64_t g = 0;
    for (struct node *n = l->first; n; n = n->next.ptr)
        for (uint64_t w = 0; w < n->meta; w++)
            n->data[w].u = g++;
}

/* level 1 = leaf chunk (slots point to items). */
static void free_chunk(struct arena *a, void **c, unsigned level, int free_items)
{
    for (unsigned s = 0; s < INDEX_CHUNK_SLOTS && c[s]; s++) {
        if (level > 1)
            free_chunk(a, c[s], level - 1, free_items);
        else if (free_items)
            arena_free(a, c[s]);
    }
    arena_free(a, c);
}

void nx_free(struct nodeindex *x, struct arena *a, int free_items)
{
    if (!x->top)
        return;
    if (a->use_malloc) {
        for (size_t t = 0; t < x->top_len && x->top[t]; t++)
            free_chunk(a, x->top[t], x->levels, free_items);
        arena_free(a, x->top);
    }
    memset(x, 0, sizeof *x);
}

void nodelist_free(struct nodelist *l, struct arena *a)
{
    nx_free(&l->ix, a, 1);
    memset(l, 0, sizeof *l);
}
