/* arena.h - the huge-page-backed arena for small objects (plan
 * `heap-small arena hugetlb-2m|thp-2m [BYTES]`, the "object magazine": its functions are ht_mag_*).
 *
 * Why: glibc's tunable only advises the memory glibc manages with THP; an
 * arena of our own can put small objects on hugetlb pages, and on THP without
 * depending on glibc's heap layout. The planner predicts the gain of huge
 * pages from a profile taken under glibc's layout, so the arena keeps glibc's
 * layout property: consecutive allocations of one thread are adjacent in
 * memory (a walk in allocation order stays sequential; only the page size
 * differs), spaced by their size rounded to 16 bytes. Objects carry no
 * header: glibc's chunks are 8-16 bytes larger (size field, 32-byte
 * minimum), so the arena is denser than the layout profiled and needs fewer
 * huge pages (measured: 49 bytes less per Redis key, 5 % less on
 * PTrees-like 2 KiB objects). Design:
 *
 *   - one contiguous reserved range [base, end) (PROT_NONE, no commit), so
 *     free() recognizes arena pointers with a single range check;
 *   - memory is committed from the bottom in 2 MB chunks through a callback
 *     (the apply layer maps hugetlb/THP/4k there along its fallback chain)
 *     and carved into 64 KiB granules; one byte per granule marks it carved;
 *   - a boundary bitmap, one bit per 16 bytes (0.8 % of the memory used, on
 *     4 KB pages), marks where chunks start; a chunk ends where the next one
 *     starts, so free() finds its size from the bitmap. A thread's bump
 *     position (`top`) is always marked, a granule's first unit is marked
 *     when the granule before it is carved, and unmarked again when that
 *     granule extends its owner's region (a chunk may then span both);
 *   - each thread bumps through a private region of granules: a new object
 *     is the next chunk, `max(16, (n + 15) & ~15)` bytes up to 4 KiB (above,
 *     its class's size). When the region is used up the thread takes the
 *     next granule, which is adjacent to its region when no other thread
 *     carved in between (a single thread's objects form one run); otherwise
 *     a remainder stashed by an exited thread or a new granule, and the old
 *     region's tail becomes a free chunk (of any size up to a granule);
 *   - freed chunks keep their size and go to per-thread LIFO lists (like
 *     glibc's tcache) by class: 256 classes exact to 16 bytes for chunks up
 *     to 4 KiB, then 8 per power of two up to 32 KiB (the largest request's
 *     chunk, also the list for larger region tails). A chunk is listed under
 *     the largest class not above its size, a request takes the smallest
 *     class not below its chunk size, so every reused chunk fits (new chunks
 *     above 4 KiB have their class's size, so each class recycles its own).
 *     malloc takes from the thread's list first, then (when another thread
 *     has given chunks of the class back) from the global list, then from
 *     its region;
 *   - free() reads only the bitmap, never the object (a bulk free of cold
 *     objects then costs stores, not a cache miss each): it ignores a
 *     pointer that is not a marked chunk start (inside an object,
 *     misaligned, in a granule never carved) and anything outside. A free
 *     chunk holds its list link and, next to it, the arena's random key;
 *     every link is checked where it is followed (in the range, carved,
 *     the key beside it) and malloc clears the key of a chunk it hands out,
 *     so a double free is caught when a list reaches the chunk the second
 *     time: the rest of that list is dropped (leaked, counted), never handed
 *     out twice, never followed into an object (a link overwritten after
 *     free is caught the same way). (A thread's bump position, marked but
 *     never handed out, passes as a chunk; glibc does not catch every
 *     invalid free either);
 *   - per-thread state needs no lock or atomic read-modify-write on the
 *     common path (a relaxed load of the global count per class, written
 *     only under the class lock; bitmap words are written only by the thread
 *     that owns their granule, or under the chunk lock before anyone does);
 *     batches move between thread lists and per-class global lists under a
 *     per-class mutex, regions are carved under the chunk lock;
 *   - memory stays with its class once freed (no coalescing, no return to the
 *     kernel): a predictable allocator that holds the peak per class;
 *   - memory a thread has not bumped into yet is zero (fresh from a commit),
 *     so calloc clears recycled chunks only;
 *   - aligned requests (up to 4 KiB) take an aligned chunk of their class
 *     from the thread's list (among its first 16) or the global list (its
 *     first 64), else bump to the alignment; the gap before becomes a free
 *     chunk. No boundary is written in a recycled chunk (the single-writer
 *     rule above), so a chunk is never split to align it.
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

#define HT_MAG_NCLASS 280
#define HT_MAG_EXACT 4096u      /* chunks up to this size have their own class */
#define HT_MAG_MAX 32768u       /* largest request the arena serves */
#define HT_MAG_MIN_CHUNK 16u
#define HT_MAG_MAX_CHUNK 32768u /* the chunk of an HT_MAG_MAX request */
#define HT_MAG_ALIGN_MAX 4096u  /* largest alignment the arena serves */
#define HT_MAG_GRANULE_SHIFT 16
#define HT_MAG_GRANULE (1ul << HT_MAG_GRANULE_SHIFT) /* unit of a thread's region */
#define HT_MAG_CHUNK (2ul << 20)
#define HT_MAG_STASH_MIN 4096u /* smaller remainders of exiting threads become free chunks */
#define HT_MAG_UNIT_SHIFT 4     /* one boundary bit per 16 bytes */
/* The farthest free() looks for a chunk's end: no chunk is longer than a
 * granule (a retired region tail is below one request plus its alignment). */
#define HT_MAG_SCAN_MAX HT_MAG_GRANULE

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
    _Atomic uint64_t *bnd; /* chunk starts, 1 bit per 16 bytes (see above) */
    uint64_t key;         /* in every free chunk, after its link; never 0 */
    ht_mag_commit_fn commit;
    void *ctx;
    _Atomic uint64_t full;    /* requests that found no memory */
    _Atomic uint64_t regions; /* granules carved */
    _Atomic uint64_t adjacent; /* of which extended the thread's region in place */
    _Atomic uint64_t dropped;  /* lists cut at a bad link (double free, overwritten link) */
    _Atomic uint32_t nfree[HT_MAG_NCLASS]; /* global list lengths (written under the class lock) */
    struct ht_mag_class cls[HT_MAG_NCLASS];
};

struct ht_mag_tcache {
    uintptr_t top, limit; /* region: next chunk at top, chunks end <= limit */
    void *head[HT_MAG_NCLASS];
    /* While n > batch: the chunk pushed when n became batch + 1, the oldest
     * of the ones a flush gives back (a flush walks no list). */
    void *mark[HT_MAG_NCLASS];
    uint16_t n[HT_MAG_NCLASS];
};

/* Objects moved per refill/flush (a thread keeps at most twice as many). */
extern const uint8_t ht_mag_batch_tab[HT_MAG_NCLASS];
static inline unsigned ht_mag_batch(int c) { return ht_mag_batch_tab[c]; }

/* Smallest class whose size is >= the chunk size s (16 <= s <= HT_MAG_MAX_CHUNK,
 * a multiple of 16): the class a request takes from. */
static inline int ht_mag_class(size_t s)
{
    if (s <= HT_MAG_EXACT)
        return (int)(s >> 4) - 1;
    if (s > HT_MAG_MAX_CHUNK)
        return HT_MAG_NCLASS - 1;
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(s - 1));
    return 256 + (int)(e - 12) * 8 + (int)((s - 1 - ((size_t)1 << e)) >> (e - 3));
}

static inline size_t ht_mag_class_size(int c)
{
    if (c < 256)
        return (size_t)(c + 1) * 16;
    unsigned e = 12 + (unsigned)(c - 256) / 8;
    return ((size_t)1 << e) + ((size_t)((c - 256) % 8 + 1) << (e - 3));
}

/* Class and chunk size of an n-byte request (n <= HT_MAG_MAX): n rounded up
 * to 16 (at least 16) up to 4 KiB, above that the size of its class (at
 * most 1/8 more): a freed chunk then goes back to the list its class takes
 * from, so coarse classes recycle their own memory (with chunks of any size
 * in a coarse class, memory would drift down one class per life). */
static inline size_t ht_mag_req(size_t n, int *cp)
{
    size_t s = (n + 15) & ~(size_t)15;
    if (s <= HT_MAG_EXACT) {
        s = s < HT_MAG_MIN_CHUNK ? HT_MAG_MIN_CHUNK : s;
        *cp = (int)(s >> 4) - 1;
        return s;
    }
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(s - 1)), sh = e - 3;
    size_t k = (s - 1 - ((size_t)1 << e)) >> sh;
    *cp = 256 + (int)(e - 12) * 8 + (int)k;
    return ((size_t)1 << e) + ((k + 1) << sh);
}

static inline size_t ht_mag_chunk_size(size_t n)
{
    int c;
    return ht_mag_req(n, &c);
}

/* Largest class whose size is <= the chunk size s (s >= 16, a multiple of
 * 16): the list a freed chunk goes to. */
static inline int ht_mag_class_floor(size_t s)
{
    if (s <= HT_MAG_EXACT)
        return (int)(s >> 4) - 1;
    if (s >= HT_MAG_MAX_CHUNK)
        return HT_MAG_NCLASS - 1;
    int c = ht_mag_class(s);
    return ht_mag_class_size(c) > s ? c - 1 : c;
}

/* Metadata for a reserved range of len bytes: a byte per granule, then the
 * boundary bitmap (8-byte aligned). */
static inline size_t ht_mag_meta_granules(size_t len)
{
    return ((len >> HT_MAG_GRANULE_SHIFT) + 7) & ~(size_t)7;
}
static inline size_t ht_mag_bytes_needed_meta(size_t len)
{
    return ht_mag_meta_granules(len) + ((len >> (HT_MAG_UNIT_SHIFT + 6)) + 2) * 8;
}

/* base, len: 2 MB aligned reserved range; meta: ht_mag_bytes_needed_meta(len)
 * zeroed bytes, 8-byte aligned; key: random (0 is replaced). */
void ht_mag_init(struct ht_mag *m, uintptr_t base, size_t len, uint8_t *meta,
                 ht_mag_commit_fn commit, void *ctx, uint64_t key);

static inline int ht_mag_owns(const struct ht_mag *m, const void *p)
{
    return (uintptr_t)p - m->base < m->end - m->base;
}

/* ---- the boundary bitmap (u: 16-byte unit from base) ---- */

static inline int ht_mag_bit(const struct ht_mag *m, size_t u)
{
    return (int)(atomic_load_explicit(&m->bnd[u >> 6], memory_order_relaxed) >> (u & 63)) & 1;
}

/* Only the owner of the unit's granule writes it (or the chunk lock's holder
 * before anyone owns it): a plain load and store, no read-modify-write. */
static inline void ht_mag_mark(struct ht_mag *m, uintptr_t addr)
{
    size_t u = (addr - m->base) >> HT_MAG_UNIT_SHIFT;
    uint64_t w = atomic_load_explicit(&m->bnd[u >> 6], memory_order_relaxed);
    atomic_store_explicit(&m->bnd[u >> 6], w | (uint64_t)1 << (u & 63), memory_order_relaxed);
}

static inline void ht_mag_unmark(struct ht_mag *m, uintptr_t addr)
{
    size_t u = (addr - m->base) >> HT_MAG_UNIT_SHIFT;
    uint64_t w = atomic_load_explicit(&m->bnd[u >> 6], memory_order_relaxed);
    atomic_store_explicit(&m->bnd[u >> 6], w & ~((uint64_t)1 << (u & 63)), memory_order_relaxed);
}

/* The rest of ht_mag_span: the next mark more than 64 units away. */
size_t ht_mag_span_far(const struct ht_mag *m, size_t u);

/* Size of the chunk that starts at unit u: the distance to the next marked
 * unit (0 when there is none within HT_MAG_SCAN_MAX). The 64 units after u
 * are read from two words without a branch on where the mark lies (for
 * mixed sizes that branch would be a coin toss): chunks up to 1 KiB take no
 * other path. */
static inline size_t ht_mag_span(const struct ht_mag *m, size_t u)
{
    size_t v = u + 1, i = v >> 6;
    unsigned b = (unsigned)(v & 63);
    uint64_t w0 = atomic_load_explicit(&m->bnd[i], memory_order_relaxed);
    uint64_t w1 = atomic_load_explicit(&m->bnd[i + 1], memory_order_relaxed); /* (a spare word at the end) */
    uint64_t w = (w0 >> b) | ((w1 << 1) << (63 - b));
    if (__builtin_expect(w != 0, 1))
        return (size_t)(__builtin_ctzll(w) + 1) << HT_MAG_UNIT_SHIFT;
    return ht_mag_span_far(m, u);
}

/* 1 when p is 16-byte aligned and lies in a carved (so committed) granule:
 * its bytes can be read. */
static inline int ht_mag_carved(const struct ht_mag *m, const void *p)
{
    uintptr_t off = (uintptr_t)p - m->base;
    return (off & 15) == 0 && off < m->end - m->base && m->meta[off >> HT_MAG_GRANULE_SHIFT];
}

static inline uint64_t ht_mag_key_at(const void *p)
{
    uint64_t k;
    memcpy(&k, (const char *)p + 8, sizeof k);
    return k;
}

/* The size of the chunk that starts at p, from the bitmap alone (the
 * object is not read), else 0: a granule not carved, a misaligned pointer,
 * one that is not a chunk's start. */
static inline size_t ht_mag_chunk_at(const struct ht_mag *m, const void *p)
{
    if (!ht_mag_carved(m, p))
        return 0;
    size_t u = ((uintptr_t)p - m->base) >> HT_MAG_UNIT_SHIFT;
    return ht_mag_bit(m, u) ? ht_mag_span(m, u) : 0;
}

/* The size of a live chunk at p (an owned pointer), else 0: as
 * ht_mag_chunk_at, and a free chunk's (its key) gives 0 too. */
static inline size_t ht_mag_live_size(const struct ht_mag *m, const void *p)
{
    size_t s = ht_mag_chunk_at(m, p);
    return s != 0 && ht_mag_key_at(p) != m->key ? s : 0;
}

/* A link that may be followed: a free chunk of ours (see the top). */
static inline int ht_mag_free_chunk(const struct ht_mag *m, const void *p)
{
    return ht_mag_carved(m, p) && ht_mag_key_at(p) == m->key;
}

/* p becomes a free chunk: its link is written by the caller (the list). */
static inline void ht_mag_set_free(const struct ht_mag *m, void *p)
{
    memcpy((char *)p + 8, &m->key, sizeof m->key);
}

static inline void ht_mag_set_live(void *p)
{
    memset((char *)p + 8, 0, 8);
}

/* A bad link on the thread's list of class c: the list is dropped. */
void ht_mag_drop(struct ht_mag *m, struct ht_mag_tcache *t, int c);

/* The head of the thread's list of class c, taken off and live; NULL when the
 * list is empty (or was dropped at a bad link). */
static inline void *ht_mag_pop(struct ht_mag *m, struct ht_mag_tcache *t, int c)
{
    void *p = t->head[c];
    if (p == NULL)
        return NULL;
    if (__builtin_expect(!ht_mag_free_chunk(m, p), 0)) {
        ht_mag_drop(m, t, c);
        return NULL;
    }
    t->head[c] = *(void **)p;
    t->n[c]--;
    ht_mag_set_live(p);
    return p;
}

/* The fast path: the thread's list, else its region; NULL when neither can
 * serve without the slow path. *fresh (when non-NULL) is set to 1 for memory
 * never handed out (zero), 0 for a recycled chunk. */
static inline void *ht_mag_alloc_fast(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, int *fresh)
{
    int c;
    size_t s = ht_mag_req(n, &c);
    void *p = ht_mag_pop(m, t, c);
    if (__builtin_expect(p != NULL, 1)) {
        if (fresh)
            *fresh = 0;
        return p;
    }
    uintptr_t top = t->top;
    if (__builtin_expect(top + s < t->limit, 1) &&
        __builtin_expect(atomic_load_explicit(&m->nfree[c], memory_order_relaxed) == 0, 1)) {
        t->top = top + s;
        ht_mag_mark(m, top + s); /* (top itself is marked) */
        if (fresh)
            *fresh = 1;
        return (void *)top;
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

/* n bytes at an alignment of align (a power of two <= HT_MAG_ALIGN_MAX): a
 * recycled aligned chunk of the class, else from the region. NULL when the
 * arena has no memory left. */
void *ht_mag_alloc_aligned(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, size_t align);

/* The thread's list of class c is longer than twice the batch: its newest
 * chunks, down to the mark, go to the global list. */
void ht_mag_flush(struct ht_mag *m, struct ht_mag_tcache *t, int c);

/* Puts the free chunk p of size s (key already written) on the thread's list. */
static inline void ht_mag_push(struct ht_mag *m, struct ht_mag_tcache *t, void *p, size_t s)
{
    int c = ht_mag_class_floor(s);
    *(void **)p = t->head[c];
    t->head[c] = p;
    unsigned n = ++t->n[c], b = ht_mag_batch(c);
    if (__builtin_expect(n == b + 1, 0))
        t->mark[c] = p;
    else if (__builtin_expect(n > 2 * b, 0))
        ht_mag_flush(m, t, c);
}

static inline void ht_mag_free(struct ht_mag *m, struct ht_mag_tcache *t, void *p)
{
    size_t s = ht_mag_chunk_at(m, p);
    if (__builtin_expect(s == 0, 0))
        return; /* not a chunk of ours: ignore rather than corrupt */
    ht_mag_set_free(m, p);
    ht_mag_push(m, t, p, s);
}

/* Usable bytes of an object (0: not a chunk of ours): its whole chunk, from
 * the bitmap alone. malloc_usable_size must not read the object: programs
 * that count their memory (Redis's zmalloc) call it right after malloc, and
 * a load from a chunk never written stalls where the program's own stores
 * would not (in a profile of Redis it was the library's hottest
 * instruction). A freed
 * chunk still gives its size, as it would for a pointer glibc had reused;
 * realloc, which copies the object anyway, checks liveness (live_size). */
static inline size_t ht_mag_usable(const struct ht_mag *m, const void *p)
{
    return ht_mag_chunk_at(m, p);
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
