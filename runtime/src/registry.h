/* registry.h - open-addressing hash table of owned allocations, keyed by the
 * user pointer.
 *
 * Why a pure module with caller-provided memory: the apply layer keeps the table
 * in mmap'd memory (no malloc inside hooks) and grows it by rehashing into a
 * bigger mapping; the table itself neither allocates nor locks, so it can be
 * unit-tested in isolation. Linear probing with backward-shift deletion (no
 * tombstones), load factor <= 3/4. Key 0 marks an empty bucket (owned pointers
 * are never NULL). */
#ifndef HT_REGISTRY_H
#define HT_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* flags */
#define HT_REG_POOL 1u /* a run of pool pages (returned to the pool, not unmapped) */
#define HT_REG_FORKED 2u /* a fork child's copy of a hugetlb block (see apply.c) */

struct ht_reg_entry {
    uintptr_t ptr;   /* user pointer == block start, >= 2 MB aligned */
    struct ht_layout l; /* its segments (l.size: requested size) */
    uint8_t category;
    uint8_t want;    /* planned backing (HT_B_*) */
    uint8_t flags;
    uint8_t pool;    /* HT_POOL_* when HT_REG_POOL */
    uint32_t pool_idx; /* first pool page */
};

struct ht_registry {
    struct ht_reg_entry *tab;
    size_t cap; /* power of two */
    size_t count;
};

/* Bytes needed for a table of cap buckets. */
static inline size_t ht_reg_bytes(size_t cap) { return cap * sizeof(struct ht_reg_entry); }

/* mem: ht_reg_bytes(cap) bytes of zeroed memory; cap a power of two >= 4. */
void ht_reg_init(struct ht_registry *r, void *mem, size_t cap);
/* 1 if one more insert would exceed the load factor. */
int ht_reg_full(const struct ht_registry *r);
/* 0: inserted; -1: table full (grow first); -2: pointer already present. */
int ht_reg_insert(struct ht_registry *r, const struct ht_reg_entry *e);
/* Pointer to the entry (valid until the next insert/remove) or NULL. */
struct ht_reg_entry *ht_reg_find(const struct ht_registry *r, uintptr_t ptr);
/* 0 and *out filled (if out) when found and removed; -1 if absent. */
int ht_reg_remove(struct ht_registry *r, uintptr_t ptr, struct ht_reg_entry *out);
/* Re-inserts every entry of src into dst (dst initialized, large enough).
 * Returns 0, or -1 if dst filled up. */
int ht_reg_rehash(const struct ht_registry *src, struct ht_registry *dst);

#endif
