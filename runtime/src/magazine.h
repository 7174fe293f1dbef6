/* magazine.h - the huge-page-backed arena for small objects (plan
 * `heap-small arena hugetlb-2m|thp-2m [BYTES]`, the "object magazine").
 *
 * Why: glibc's tunable only advises the memory glibc manages with THP; an
 * arena of our own can put small objects on hugetlb pages, and on THP without
 * depending on glibc's heap layout. The planner predicts the gain of huge
 * pages from a profile taken under glibc's layout, so the arena keeps glibc's
 * layout property: consecutive allocations of one thread are adjacent in
 * memory and spaced like glibc's chunks (a walk in allocation order stays
 * sequential; only the page size differs). Design:
 *
 *   - one contiguous reserved range [base, end) (PROT_NONE, no commit), so
 *     free() recognizes arena pointers with a single range check;
 *   - memory is committed from the bottom in 2 MB chunks through a callback
 *     (the apply layer maps hugetlb/THP/4k there along its fallback chain)
 *     and carved into 64 KiB granules; one byte per granule marks it carved;
 *   - each thread bumps through a private region of granules: a new object
 *     is the next chunk, `max(32, (n + 8 + 15) & ~15)` bytes as in glibc on
 *     x86-64 (above 1 KiB rounded up to its class, below), an 8-byte header
 *     (chunk size, live/free tag) right before the 16-byte aligned user
 *     pointer. When the region is used up the thread takes the next granule,
 *     which is adjacent to its region when no other thread carved in between
 *     (a single thread's objects form one run); otherwise a remainder stashed
 *     by an exited thread or a new granule, and the old region's tail becomes
 *     a free chunk (of any size up to a granule);
 *   - freed chunks keep their size and go to per-thread LIFO lists (like
 *     glibc's tcache) by class: 63 classes exact to 16 bytes for chunks up to
 *     1 KiB, then 8 per power of two up to 32 KiB, and one for the largest
 *     request's chunk (32784 bytes) and above. A chunk is listed under the
 *     largest class not above its size, a request takes the smallest class
 *     not below its chunk size, so every reused chunk fits (new chunks above
 *     1 KiB have their class's size, so each class recycles its own). malloc
 *     takes from the thread's list first, then (when another thread has given
 *     chunks of the class back) from the global list, then from its region;
 *   - per-thread state needs no lock or atomic on the common path (a relaxed
 *     load of the global count per class, written only under the class lock);
 *     batches move between thread lists and per-class global lists under a
 *     per-class mutex, regions are carved under the chunk lock;
 *   - memory stays with its class once freed (no coalescing, no return to the
 *     kernel): a predictable allocator that holds the peak per class;
 *   - memory a thread has not bumped into yet is zero (fresh from a commit),
 *     so calloc clears recycled chunks only;
 *   - aligned requests (up to 4 KiB) bump to the alignment; the gap before
 *     becomes a free chunk.
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
#include <string.h>

#define HT_MAG_NCLASS 104
#define HT_MAG_MAX 32768u       /* largest request the arena serves */
#define HT_MAG_MIN_CHUNK 32u
#define HT_MAG_MAX_CHUNK 32784u /* the chunk of an HT_MAG_MAX request */
#define HT_MAG_ALIGN_MAX 4096u  /* largest alignment the arena serves */
#define HT_MAG_GRANULE_SHIFT 16
#define HT_MAG_GRANULE (1ul << HT_MAG_GRANULE_SHIFT) /* unit of a thread's region */
#define HT_MAG_CHUNK (2ul << 20)
#define HT_MAG_STASH_MIN 4096u /* smaller remainders of exiting threads become free chunks */
/* Header tags (upper half of the 8-byte header; lower half: chunk size). */
#define HT_MAG_LIVE 0xa110c8edu
#define HT_MAG_FREE 0xf1eec8edu

struct ht_mag_class {
    pthread_mutex_t lock;
    void *free; /* global free list (linked through the objects) */
};

/* Commits [addr, addr + len) (chunk multiples). Returns 0, or -1. */
typedef int (*ht_mag_commit_fn)(void *ctx, uintptr_t addr, size_t len);

struct ht_mag {
    uintptr_t base, end;  /* reserved range (end = base when off) */
    uintptr_t committed;  /* [base, committed) is usable */
    uintptr_t carve;      /* next granule for a region */
    uintptr_t stash;      /* remainders of exited threads ({next, limit} at their top) */
    pthread_mutex_t chunk_lock; /* committed, carve, stash, meta */
    uint8_t *meta;        /* 1 per carved granule */
    ht_mag_commit_fn commit;
    void *ctx;
    _Atomic uint64_t full;    /* requests that found no memory */
    _Atomic uint64_t regions; /* granules carved */
    _Atomic uint64_t adjacent; /* of which extended the thread's region in place */
    _Atomic uint32_t nfree[HT_MAG_NCLASS]; /* global list lengths (written under the class lock) */
    struct ht_mag_class cls[HT_MAG_NCLASS];
};

struct ht_mag_tcache {
    uintptr_t top, limit; /* region: next chunk at top, chunks end <= limit */
    void *head[HT_MAG_NCLASS];
    uint16_t n[HT_MAG_NCLASS];
};

/* Objects moved per refill/flush (a thread keeps at most twice as many). */
extern const uint8_t ht_mag_batch_tab[HT_MAG_NCLASS];
static inline unsigned ht_mag_batch(int c) { return ht_mag_batch_tab[c]; }


/* Smallest class whose size is >= the chunk size s (32 <= s <= HT_MAG_MAX_CHUNK,
 * a multiple of 16): the class a request takes from. */
static inline int ht_mag_class(size_t s)
{
    if (s <= 1024)
        return (int)(s >> 4) - 2;
    if (s > 32768)
        return HT_MAG_NCLASS - 1;
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(s - 1));
    return 63 + (int)(e - 10) * 8 + (int)((s - 1 - ((size_t)1 << e)) >> (e - 3));
}

static inline size_t ht_mag_class_size(int c)
{
    if (c < 63)
        return (size_t)(c + 2) * 16;
    if (c == HT_MAG_NCLASS - 1)
        return HT_MAG_MAX_CHUNK;
    unsigned e = 10 + (unsigned)(c - 63) / 8;
    return ((size_t)1 << e) + ((size_t)((c - 63) % 8 + 1) << (e - 3));
}

/* Class and chunk size of an n-byte request (n <= HT_MAG_MAX): glibc's chunk
 * size (request2size on x86-64) up to 1 KiB, above that the size of its class
 * (at most 1/8 more): a freed chunk then goes back to the list its class
 * takes from, so coarse classes recycle their own memory (with chunks of any
 * size in a coarse class, memory would drift down one class per life). */
static inline size_t ht_mag_req(size_t n, int *cp)
{
    size_t s = (n + 8 + 15) & ~(size_t)15;
    if (s <= 1024) {
        s = s < HT_MAG_MIN_CHUNK ? HT_MAG_MIN_CHUNK : s;
        *cp = (int)(s >> 4) - 2;
        return s;
    }
    if (s > 32768) {
        *cp = HT_MAG_NCLASS - 1;
        return HT_MAG_MAX_CHUNK;
    }
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(s - 1)), sh = e - 3;
    size_t k = (s - 1 - ((size_t)1 << e)) >> sh;
    *cp = 63 + (int)(e - 10) * 8 + (int)k;
    return ((size_t)1 << e) + ((k + 1) << sh);
}

static inline size_t ht_mag_chunk_size(size_t n)
{
    int c;
    return ht_mag_req(n, &c);
}

/* Largest class whose size is <= the chunk size s (s >= 32, a multiple of
 * 16): the list a freed chunk goes to. */
static inline int ht_mag_class_floor(size_t s)
{
    if (s <= 1024)
        return (int)(s >> 4) - 2;
    if (s >= HT_MAG_MAX_CHUNK)
        return HT_MAG_NCLASS - 1;
    int c = ht_mag_class(s);
    return ht_mag_class_size(c) > s ? c - 1 : c;
}

static inline size_t ht_mag_bytes_needed_meta(size_t len) { return len >> HT_MAG_GRANULE_SHIFT; }

/* base, len: 2 MB aligned reserved range; meta: len/64Ki zeroed bytes. */
void ht_mag_init(struct ht_mag *m, uintptr_t base, size_t len, uint8_t *meta,
                 ht_mag_commit_fn commit, void *ctx);

static inline int ht_mag_owns(const struct ht_mag *m, const void *p)
{
    return (uintptr_t)p - m->base < m->end - m->base;
}

/* The header of a live chunk at p (an owned pointer), else 0. Robust against
 * any pointer in the range: a granule not carved, a misaligned pointer or a
 * header that is not a live chunk's (already freed, overwritten) give 0. */
static inline uint64_t ht_mag_live_hdr(const struct ht_mag *m, const void *p)
{
    uintptr_t off = (uintptr_t)p - m->base;
    if ((off & 15) != 0 || off < 16 || off >= m->end - m->base || !m->meta[off >> HT_MAG_GRANULE_SHIFT])
        return 0;
    uint64_t h;
    memcpy(&h, (const char *)p - 8, sizeof h);
    uint32_t s = (uint32_t)h;
    /* (a region's tail, a free chunk of its own, can be larger than any
     * request's chunk, never than a granule) */
    if ((uint32_t)(h >> 32) != HT_MAG_LIVE || s < HT_MAG_MIN_CHUNK || s > HT_MAG_GRANULE || (s & 15))
        return 0;
    return h;
}

static inline void ht_mag_set_hdr(uintptr_t chunk, size_t s, uint32_t tag)
{
    uint64_t h = (uint64_t)tag << 32 | (uint32_t)s;
    memcpy((void *)chunk, &h, sizeof h);
}

static inline void ht_mag_set_tag(void *p, uint32_t tag)
{
    memcpy((char *)p - 4, &tag, sizeof tag); /* x86-64: the header's upper half */
}

/* The fast path: the thread's list, else its region; NULL when neither can
 * serve without the slow path. *fresh (when non-NULL) is set to 1 for memory
 * never handed out (zero), 0 for a recycled chunk. */
static inline void *ht_mag_alloc_fast(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, int *fresh)
{
    int c;
    size_t s = ht_mag_req(n, &c);
    void *p = t->head[c];
    if (__builtin_expect(p != NULL, 1)) {
        t->head[c] = *(void **)p;
        t->n[c]--;
        ht_mag_set_tag(p, HT_MAG_LIVE);
        if (fresh)
            *fresh = 0;
        return p;
    }
    uintptr_t top = t->top;
    if (__builtin_expect(top + s <= t->limit, 1) &&
        __builtin_expect(atomic_load_explicit(&m->nfree[c], memory_order_relaxed) == 0, 1)) {
        t->top = top + s;
        ht_mag_set_hdr(top, s, HT_MAG_LIVE);
        if (fresh)
            *fresh = 1;
        return (void *)(top + 8);
    }
    return NULL;
}

/* The slow path: a batch from the global list, the region, a new region.
 * NULL when the arena has no memory left. */
void *ht_mag_alloc_slow(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, int *fresh);

static inline void *ht_mag_alloc(struct ht_mag *m, struct ht_mag_tcache *t, size_t n)
{
    void *p = ht_mag_alloc_fast(m, t, n, NULL);
    return p ? p : ht_mag_alloc_slow(m, t, n, NULL);
}

/* n bytes at an alignment of align (a power of two <= HT_MAG_ALIGN_MAX),
 * always from the region. NULL when the arena has no memory left. */
void *ht_mag_alloc_aligned(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, size_t align);

void ht_mag_flush(struct ht_mag *m, struct ht_mag_tcache *t, int c, unsigned keep);

/* Puts a chunk of size s (tag already FREE) on the thread's list. */
static inline void ht_mag_push(struct ht_mag *m, struct ht_mag_tcache *t, void *p, size_t s)
{
    int c = ht_mag_class_floor(s);
    *(void **)p = t->head[c];
    t->head[c] = p;
    if (__builtin_expect(++t->n[c] > 2 * ht_mag_batch(c), 0))
        ht_mag_flush(m, t, c, ht_mag_batch(c));
}

static inline void ht_mag_free(struct ht_mag *m, struct ht_mag_tcache *t, void *p)
{
    uint64_t h = ht_mag_live_hdr(m, p);
    if (__builtin_expect(h == 0, 0))
        return; /* not a live object of ours: ignore rather than corrupt */
    ht_mag_set_tag(p, HT_MAG_FREE);
    ht_mag_push(m, t, p, (uint32_t)h);
}

/* Usable bytes of a live object (0: not one). */
static inline size_t ht_mag_usable(const struct ht_mag *m, const void *p)
{
    uint64_t h = ht_mag_live_hdr(m, p);
    return h ? (uint32_t)h - 8 : 0;
}

/* Grows the live object p to n bytes (n <= HT_MAG_MAX) in place when it is
 * the last chunk of this thread's region and the region has room: 1 when
 * done. The new bytes are zero. */
int ht_mag_grow(struct ht_mag *m, struct ht_mag_tcache *t, void *p, size_t n);

/* Gives a thread's lists and region back (thread exit). */
void ht_mag_flush_all(struct ht_mag *m, struct ht_mag_tcache *t);
/* fork: every lock, in a fixed order. */
void ht_mag_lock_all(struct ht_mag *m);
void ht_mag_unlock_all(struct ht_mag *m);
/* The child has one thread: fresh locks. */
void ht_mag_reinit_locks(struct ht_mag *m);

#endif
