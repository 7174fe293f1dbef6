/* registry.c - hash table of owned allocations (see registry.h). */
#include "registry.h"

#include <string.h>

static size_t slot_of(const struct ht_registry *r, uintptr_t p)
{
    /* Owned pointers are 2 MB aligned: drop the always-zero low bits, then
     * Fibonacci hashing spreads neighbouring mappings over the table. */
    uint64_t h = ((uint64_t)p >> 21) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> (64 - __builtin_ctzll((unsigned long long)r->cap)));
}

void ht_reg_init(struct ht_registry *r, void *mem, size_t cap)
{
    r->tab = mem;
    r->cap = cap;
    r->count = 0;
}

int ht_reg_full(const struct ht_registry *r)
{
    return (r->count + 1) * 4 > r->cap * 3;
}

int ht_reg_insert(struct ht_registry *r, const struct ht_reg_entry *e)
{
    if (e->ptr == 0)
        return -2;
    if (ht_reg_full(r))
        return -1;
    size_t i = slot_of(r, e->ptr);
    for (;;) {
        if (r->tab[i].ptr == 0) {
            r->tab[i] = *e;
            r->count++;
            return 0;
        }
        if (r->tab[i].ptr == e->ptr)
            return -2;
        i = (i + 1) & (r->cap - 1);
    }
}

struct ht_reg_entry *ht_reg_find(const struct ht_registry *r, uintptr_t ptr)
{
    if (ptr == 0 || r->count == 0)
        return NULL;
    size_t i = slot_of(r, ptr);
    for (;;) {
        if (r->tab[i].ptr == ptr)
            return &r->tab[i];
        if (r->tab[i].ptr == 0)
            return NULL;
        i = (i + 1) & (r->cap - 1);
    }
}

int ht_reg_remove(struct ht_registry *r, uintptr_t ptr, struct ht_reg_entry *out)
{
    struct ht_reg_entry *e = ht_reg_find(r, ptr);
    if (!e)
        return -1;
    if (out)
        *out = *e;
    size_t mask = r->cap - 1;
    size_t hole = (size_t)(e - r->tab);
    size_t j = hole;
    /* Backward-shift deletion: move later members of the probe run into the
     * hole when their home bucket does not lie (cyclically) after the hole. */
    for (;;) {
        j = (j + 1) & mask;
        if (r->tab[j].ptr == 0)
            break;
        size_t home = slot_of(r, r->tab[j].ptr);
        size_t dist_home = (j - home) & mask;
        size_t dist_hole = (j - hole) & mask;
        if (dist_home >= dist_hole) {
            r->tab[hole] = r->tab[j];
            hole = j;
        }
    }
    memset(&r->tab[hole], 0, sizeof r->tab[hole]);
    r->count--;
    return 0;
}

int ht_reg_rehash(const struct ht_registry *src, struct ht_registry *dst)
{
    for (size_t i = 0; i < src->cap; i++) {
        if (src->tab[i].ptr && ht_reg_insert(dst, &src->tab[i]) != 0)
            return -1;
    }
    return 0;
}
