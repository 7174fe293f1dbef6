/* pool.h - page-run allocator of the preallocated huge-page pool
 * (plan `pool hugetlb-2m N`, seed 002: one pool shared by all threads).
 *
 * Why a pure module: the apply layer maps the pool once at start-up and hands
 * out runs of whole pages under its lock; the bookkeeping (first fit over a
 * bitmap, in-place extension, which pages were handed out before and are no
 * longer zero) is independent of mapping and is unit-tested alone. Owned
 * blocks are large and rare, so a first-fit scan over a bitmap is enough. */
#ifndef HT_POOL_H
#define HT_POOL_H

#include <stddef.h>
#include <stdint.h>

struct ht_pool {
    uintptr_t base;  /* first page (0: no pool) */
    uint64_t page;   /* page size in bytes */
    uint32_t npages;
    uint32_t used;   /* pages handed out now */
    uint32_t peak;   /* most pages handed out at once */
    uint64_t *bits;  /* 1 = handed out */
    uint64_t *dirty; /* 1 = handed out at least once (content not zero) */
};

/* Bytes of metadata (two bitmaps) for npages pages. */
static inline size_t ht_pool_meta_bytes(uint32_t npages)
{
    return 2 * (size_t)((npages + 63) / 64) * sizeof(uint64_t);
}
/* meta: ht_pool_meta_bytes(npages) zeroed bytes. */
void ht_pool_init(struct ht_pool *p, uintptr_t base, uint64_t page, uint32_t npages, void *meta);
/* First-fit run of k pages: returns its first page index, or -1. */
long ht_pool_take(struct ht_pool *p, uint32_t k);
/* Returns run [idx, idx+k) (marks it dirty). */
void ht_pool_give(struct ht_pool *p, uint32_t idx, uint32_t k);
/* Extends the run [idx, idx+k) to k2 pages if the pages after it are free;
 * 0 on success, -1 otherwise (nothing changed). */
int ht_pool_extend(struct ht_pool *p, uint32_t idx, uint32_t k, uint32_t k2);
/* 1 if any page of [idx, idx+k) was handed out before the current run. */
int ht_pool_dirty(const struct ht_pool *p, uint32_t idx, uint32_t k);
/* Marks [idx, idx+k) dirty (after the current holder wrote to it). */
void ht_pool_mark_dirty(struct ht_pool *p, uint32_t idx, uint32_t k);
/* Page index of address a inside the pool, or -1. */
long ht_pool_index(const struct ht_pool *p, uintptr_t a);

#endif
