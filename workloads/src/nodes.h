/* heap-small placement: many small individually allocated nodes plus an index from
 * node number to node pointer, built only from small allocations. */
#ifndef HTW_NODES_H
#define HTW_NODES_H

#include <stddef.h>
#include <stdint.h>

#include "access.h"
#include "memory.h"

union word { uint64_t u; double d; };

/* Node header (16 bytes) followed by the payload.  The same layout is used for
 * chase's 64-byte nodes in a big buffer.  */
struct node {
    union {
        void *ptr;      /* chase: cycle successor; others: allocation-order successor */
        uint64_t idx;   /* chase, during construction only: successor's number */
    } next;
    uint64_t meta;      /* chase: node number; others: payload words */
    union word data[];  /* payload: (node size - 16) / 8 words */
};
#define NODE_HEADER_BYTES 16u
#define NODE_MIN_BYTES 64u
#define NODE_MAX_BYTES 512u

/* Radix index: top array -> `levels` levels of 64-pointer chunks (512 bytes, each a
 * separate small allocation) -> nodes.  levels is 2 unless the top array would need
 * more than INDEX_TOP_MAX entries (32 KiB), so no piece is ever >= 64 KiB. */
#define INDEX_CHUNK_SLOTS 64u
#define INDEX_CHUNK_BYTES (INDEX_CHUNK_SLOTS * sizeof(void *))
#define INDEX_TOP_MAX 4096u

struct nodeindex {
    void **top;
    size_t top_len;
    unsigned levels;
    unsigned top_shift;   /* 6 * levels */
};

struct nodelist {
    struct nodeindex ix;
    struct node *first;   /* first node allocated */
    size_t count;         /* nodes */
    uint64_t words;       /* payload words in all nodes */
};

/* What building a list of `bytes` node bytes will allocate (the size sequence is a
 * pure function of the layout seed, so this is exact). */
struct nodeplan {
    size_t count;
    uint64_t words;
    size_t alloc_bytes;   /* nodes + index pieces, each rounded to 16 bytes */
};
void nodelist_plan(uint64_t layout_seed, size_t bytes, struct nodeplan *plan);

/* Allocates the nodes in order (sizes 64..512, multiples of 16, from the layout
 * seed) until `bytes` are used, linking each to the next in allocation order
 * (next.ptr, NULL at the end) and setting meta = payload words.  Payloads are left
 * for the kernel to initialize. */
void nodelist_build(struct nodelist *l, struct arena *a, uint64_t layout_seed, size_t bytes);
void nodelist_free(struct nodelist *l, struct arena *a);

/* A kernel's heap-small data: an arena sized exactly for one list of cfg->size node
 * bytes (from the workload's layout seed), and the list built in it. */
void nodelist_setup(const struct config *cfg, struct arena *a, struct nodelist *l);

/* Numbers the payload words 0, 1, 2, ... in allocation order (the kernels' data). */
void nodelist_number_words(struct nodelist *l);

/* The index on its own, for other small pieces (cg's vector chunks): an index of
 * `count` items whose top array is allocated now and whose chunks are allocated as
 * items are set, in order (nx_set for i = 0, 1, 2, ...). */
void nx_init(struct nodeindex *x, struct arena *a, size_t count);
void nx_set(struct nodeindex *x, struct arena *a, size_t i, void *item);
/* Bytes the index of `count` items allocates (pieces rounded to 16 bytes). */
size_t nx_plan_bytes(size_t count);
/* Frees the index pieces and, with free_items, the items (malloc only; nothing for a
 * mapped arena, which goes back whole). */
void nx_free(struct nodeindex *x, struct arena *a, int free_items);

/* Item number i: top, `levels` chunk loads. */
static inline void *nx_at(const struct nodeindex *x, size_t i)
{
    void **c = ref_load_ptr(&x->top[i >> x->top_shift]);
    for (unsigned s = x->top_shift - 6; s != 0; s -= 6)
        c = ref_load_ptr(&c[(i >> s) & (INDEX_CHUNK_SLOTS - 1)]);
    return ref_load_ptr(&c[i & (INDEX_CHUNK_SLOTS - 1)]);
}

/* Node number i (0-based, allocation order). */
static inline struct node *nx_get(const struct nodeindex *x, size_t i) { return nx_at(x, i); }

#endif
