/* pool.c - page-run allocator of the huge-page pool (see pool.h). Pure. */
#include "pool.h"

static int bit(const uint64_t *b, uint32_t i) { return (int)((b[i >> 6] >> (i & 63)) & 1); }
static void set_range(uint64_t *b, uint32_t i, uint32_t k, int v)
{
    for (uint32_t j = i; j < i + k; j++) {
        if (v)
            b[j >> 6] |= 1ull << (j & 63);
        else
            b[j >> 6] &= ~(1ull << (j & 63));
    }
}

void ht_pool_init(struct ht_pool *p, uintptr_t base, uint64_t page, uint32_t npages, void *meta)
{
    size_t words = (npages + 63) / 64;
    p->base = base;
    p->page = page;
    p->npages = npages;
    p->used = 0;
    p->peak = 0;
    p->bits = meta;
    p->dirty = (uint64_t *)meta + words;
}

long ht_pool_take(struct ht_pool *p, uint32_t k)
{
    if (k == 0 || k > p->npages - p->used)
        return -1;
    uint32_t run = 0;
    for (uint32_t i = 0; i < p->npages; i++) {
        if ((i & 63) == 0 && run == 0 && i + 64 <= p->npages && p->bits[i >> 6] == ~0ull) {
            i += 63; /* whole word taken */
            continue;
        }
        if (bit(p->bits, i)) {
            run = 0;
            continue;
        }
        if (++run == k) {
            uint32_t s = i + 1 - k;
            set_range(p->bits, s, k, 1);
            p->used += k;
            if (p->used > p->peak)
                p->peak = p->used;
            return (long)s;
        }
    }
    return -1;
}

void ht_pool_give(struct ht_pool *p, uint32_t idx, uint32_t k)
{
    set_range(p->bits, idx, k, 0);
    set_range(p->dirty, idx, k, 1);
    p->used -= k;
}

int ht_pool_extend(struct ht_pool *p, uint32_t idx, uint32_t k, uint32_t k2)
{
    if (k2 <= k)
        return k2 == k ? 0 : -1;
    if ((uint64_t)idx + k2 > p->npages)
        return -1;
    for (uint32_t j = idx + k; j < idx + k2; j++)
        if (bit(p->bits, j))
            return -1;
    set_range(p->bits, idx + k, k2 - k, 1);
    p->used += k2 - k;
    if (p->used > p->peak)
        p->peak = p->used;
    return 0;
}

int ht_pool_dirty(const struct ht_pool *p, uint32_t idx, uint32_t k)
{
    for (uint32_t j = idx; j < idx + k; j++)
        if (bit(p->dirty, j))
            return 1;
    return 0;
}

void ht_pool_mark_dirty(struct ht_pool *p, uint32_t idx, uint32_t k) { set_range(p->dirty, idx, k, 1); }

long ht_pool_index(const struct ht_pool *p, uintptr_t a)
{
    if (p->base == 0 || a < p->base)
        return -1;
    uint64_t i = (a - p->base) / p->page;
    return i < p->npages ? (long)i : -1;
}
