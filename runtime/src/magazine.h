/* magazine.h - the huge-page-backed arena for small objects (plan
 * `heap-small arena hugetlb-2m|thp-2m [BYTES]`, the "object magazine").
 *
 * Why: glibc's tunable only advises the memory glibc manages with THP; an
 * arena of our own can put small objects on hugetlb pages, and on THP without
 * depending on glibc's heap layout. Design, chosen for a fast common case and
 * a one-compare ownership test:
 *
 *   - one contiguous reserved range [base, end) (PROT_NONE, no commit), so
 *     free() recognizes arena pointers with a single range check;
 *   - memory is committed from the bottom in 2 MB chunks through a callback
 *     (the apply layer maps hugetlb/THP/4k there along its fallback chain);
 *   - 40 size classes (16..128 by 16, then 4 per power of two up to 32 KiB);
 *     a slab (64 KiB, 256 KiB for classes above 8 KiB) holds one class; one
 *     byte per 64 KiB granule records the class, so free needs no header;
 *   - per-thread caches (singly linked through the objects) serve malloc and
 *     free without locks or atomics; refills and flushes move batches from/to
 *     a per-class free list under a per-class mutex;
 *   - memory stays with its class for the life of the process (no return to
 *     the kernel, no reuse across classes): a simple, predictable slab
 *     allocator, at the price of holding the peak per class.
 * When the range is used up (or committing fails all along the chain), alloc
 * returns NULL and the caller forwards to the allocator behind us.
 *
 * Pure except for pthread mutexes; unit-tested on ordinary memory. */
#ifndef HT_MAGAZINE_H
#define HT_MAGAZINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HT_MAG_NCLASS 40
#define HT_MAG_MAX 32768u /* largest object the arena serves */
#define HT_MAG_GRANULE_SHIFT 16
#define HT_MAG_GRANULE (1ul << HT_MAG_GRANULE_SHIFT)
#define HT_MAG_CHUNK (2ul << 20)

struct ht_mag_class {
    pthread_mutex_t lock;
    void *free;        /* global free list (linked through the objects) */
    uint32_t nfree;
    uintptr_t bump, end; /* current slab: next object, end */
};

/* Commits [addr, addr + len) (chunk multiples). Returns 0, or -1. */
typedef int (*ht_mag_commit_fn)(void *ctx, uintptr_t addr, size_t len);

struct ht_mag {
    uintptr_t base, end;  /* reserved range (end = base when off) */
    uintptr_t committed;  /* [base, committed) is usable */
    uintptr_t carve;      /* next free granule for a new slab */
    pthread_mutex_t chunk_lock;
    uint8_t *meta;        /* class + 1 per granule, 0 = not a slab */
    ht_mag_commit_fn commit;
    void *ctx;
    _Atomic uint64_t full; /* refills that found no memory */
    struct ht_mag_class cls[HT_MAG_NCLASS];
};

struct ht_mag_tcache {
    void *head[HT_MAG_NCLASS];
    uint16_t n[HT_MAG_NCLASS];
};

/* Class of an n-byte request (n <= HT_MAG_MAX; 0 counts as 1). */
static inline int ht_mag_class(size_t n)
{
    if (n <= 128)
        return n == 0 ? 0 : (int)((n + 15) / 16) - 1;
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1));
    size_t base = (size_t)1 << e;
    return 8 + (int)(e - 7) * 4 + (int)((n - 1 - base) / (base / 4));
}
static inline size_t ht_mag_class_size(int c)
{
    if (c < 8)
        return (size_t)(c + 1) * 16;
    unsigned e = 7 + (unsigned)(c - 8) / 4;
    size_t base = (size_t)1 << e;
    return base + (size_t)((c - 8) % 4 + 1) * (base / 4);
}
/* Objects moved per refill/flush, and the cache limit per class. */
static inline unsigned ht_mag_batch(int c)
{
    size_t b = (16u << 10) / ht_mag_class_size(c);
    return b < 1 ? 1 : b > 64 ? 64 : (unsigned)b;
}
static inline size_t ht_mag_bytes_needed_meta(size_t len) { return len >> HT_MAG_GRANULE_SHIFT; }

/* base, len: 2 MB aligned reserved range; meta: len/64Ki zeroed bytes. */
void ht_mag_init(struct ht_mag *m, uintptr_t base, size_t len, uint8_t *meta,
                 ht_mag_commit_fn commit, void *ctx);

static inline int ht_mag_owns(const struct ht_mag *m, const void *p)
{
    return (uintptr_t)p - m->base < m->end - m->base;
}

void *ht_mag_refill(struct ht_mag *m, struct ht_mag_tcache *t, int c);
void ht_mag_flush(struct ht_mag *m, struct ht_mag_tcache *t, int c, unsigned keep);

/* NULL when the arena has no memory left for the class. */
static inline void *ht_mag_alloc(struct ht_mag *m, struct ht_mag_tcache *t, int c)
{
    void *p = t->head[c];
    if (__builtin_expect(p != NULL, 1)) {
        t->head[c] = *(void **)p;
        t->n[c]--;
        return p;
    }
    return ht_mag_refill(m, t, c);
}

/* Class of an arena pointer (-1: not in a slab). */
static inline int ht_mag_class_of(const struct ht_mag *m, const void *p)
{
    return (int)m->meta[((uintptr_t)p - m->base) >> HT_MAG_GRANULE_SHIFT] - 1;
}

static inline void ht_mag_free(struct ht_mag *m, struct ht_mag_tcache *t, void *p)
{
    int c = ht_mag_class_of(m, p);
    if (__builtin_expect(c < 0, 0))
        return; /* not an object of ours: ignore rather than corrupt */
    *(void **)p = t->head[c];
    t->head[c] = p;
    if (__builtin_expect(++t->n[c] > 2 * ht_mag_batch(c), 0))
        ht_mag_flush(m, t, c, ht_mag_batch(c));
}

static inline size_t ht_mag_usable(const struct ht_mag *m, const void *p)
{
    int c = ht_mag_class_of(m, p);
    return c < 0 ? 0 : ht_mag_class_size(c);
}

/* Gives a thread's whole cache back (thread exit). */
void ht_mag_flush_all(struct ht_mag *m, struct ht_mag_tcache *t);
/* fork: every lock, in a fixed order. */
void ht_mag_lock_all(struct ht_mag *m);
void ht_mag_unlock_all(struct ht_mag *m);
/* The child has one thread: fresh locks. */
void ht_mag_reinit_locks(struct ht_mag *m);

#endif
