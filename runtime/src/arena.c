/* arena.c - huge-page-backed small-object arena, the allocator (see arena.h;
 * arena_chunks.c maps its chunks). */
#include "arena.h"

#include <string.h>

#define R HT_MAG_GRANULE

/* 16 KiB worth of objects per batch, 1..64 (min(64, max(1, 16384 / class
 * size)); unit_arena checks the table). */
const uint8_t ht_mag_batch_tab[HT_MAG_NCLASS] = {
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 60, 56, 53, 51,
    48, 46, 44, 42, 40, 39, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 26, 25,
    24, 24, 23, 23, 22, 22, 21, 21, 20, 20, 20, 19, 19, 18, 18, 18, 17, 17, 17, 17,
    16, 16, 16, 16, 15, 15, 15, 15, 14, 14, 14, 14, 14, 13, 13, 13, 13, 13, 12, 12,
    12, 12, 12, 12, 12, 11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10,
    10, 10, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8,
    8, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
    6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 3, 2, 2,
    2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

void ht_mag_init(struct ht_mag *m, uintptr_t base, size_t len, uint8_t *meta,
                 ht_mag_commit_fn commit, void *ctx, uint64_t key)
{
    memset(m, 0, sizeof *m);
    m->base = base;
    m->end = base + len;
    m->committed = base;
    m->carve = base;
    m->meta = meta;
    m->bnd = meta ? (_Atomic uint64_t *)(void *)(meta + ht_mag_meta_granules(len)) : NULL;
    m->key = key ? key : 0x6a09e667f3bcc909ull;
    m->commit = commit;
    m->ctx = ctx;
    pthread_mutex_init(&m->chunk_lock, NULL);
    for (int c = 0; c < HT_MAG_NCLASS; c++)
        pthread_mutex_init(&m->cls[c].lock, NULL);
}

size_t ht_mag_span_far(const struct ht_mag *m, size_t u)
{
    size_t lim = u + (HT_MAG_SCAN_MAX >> HT_MAG_UNIT_SHIFT);
    size_t units = (m->end - m->base) >> HT_MAG_UNIT_SHIFT;
    if (lim > units)
        lim = units; /* the range's end: the last mark there can be */
    for (size_t i = ((u + 1) >> 6) + 1; i <= (lim >> 6); i++) {
        uint64_t w = atomic_load_explicit(&m->bnd[i], memory_order_relaxed);
        if (w) {
            size_t x = i * 64 + (size_t)__builtin_ctzll(w);
            return x <= lim ? (x - u) << HT_MAG_UNIT_SHIFT : 0;
        }
    }
    return 0;
}

/* The next granule [*lo, *lo + R), committed. Chunk lock held. */
static int carve_granule(struct ht_mag *m, uintptr_t *lo)
{
    uintptr_t s = m->carve;
    if (s + R > m->end || s + R < s)
        return -1;
    if (s + R > m->committed) {
        uintptr_t want = (s + R + HT_MAG_CHUNK - 1) & ~(uintptr_t)(HT_MAG_CHUNK - 1);
        if (want > m->end)
            want = m->end;
        if (m->commit(m->ctx, m->committed, want - m->committed) != 0)
            return -1;
        m->committed = want;
    }
    m->carve = s + R;
    m->meta[(s - m->base) >> HT_MAG_GRANULE_SHIFT] = 1;
    /* Its first unit starts a chunk (unless its owner's region runs on into
     * it), and so does the next granule's (nobody owns it yet), which ends
     * this granule's last chunk. */
    ht_mag_mark(m, s);
    ht_mag_mark(m, s + R);
    atomic_fetch_add_explicit(&m->regions, 1, memory_order_relaxed);
    *lo = s;
    return 0;
}

/* A region's unused tail [top, limit) as a free chunk on the thread's list
 * (top is marked; the unit at limit is the next granule's first, marked). */
static void retire(struct ht_mag *m, struct ht_mag_tcache *t, uintptr_t top, uintptr_t limit)
{
    if (limit == 0 || limit - top < HT_MAG_MIN_CHUNK)
        return;
    ht_mag_set_free(m, (void *)top);
    ht_mag_push(m, t, (void *)top, limit - top);
}

/* Gives the thread a region with room for `need` bytes at its top: the next
 * granule when it follows the thread's region (one run of memory), else a
 * stashed remainder that fits, else a new granule; the old region's tail
 * becomes a free chunk. On failure the region is unchanged. */
static int new_region(struct ht_mag *m, struct ht_mag_tcache *t, size_t need)
{
    uintptr_t otop = t->top, olim = t->limit, lo;
    pthread_mutex_lock(&m->chunk_lock);
    if (olim != 0 && olim == m->carve && otop + need <= olim + R && carve_granule(m, &lo) == 0) {
        t->limit = olim + R;
        if (otop != olim)
            ht_mag_unmark(m, olim); /* the next chunk spans the two granules */
        atomic_fetch_add_explicit(&m->adjacent, 1, memory_order_relaxed);
        pthread_mutex_unlock(&m->chunk_lock);
        return 0;
    }
    uintptr_t top = 0, limit = 0;
    for (uintptr_t *pp = &m->stash; *pp; pp = (uintptr_t *)*pp) {
        uintptr_t e = *pp, elim = ((uintptr_t *)e)[1];
        if (e + need <= elim) {
            *pp = ((uintptr_t *)e)[0];
            ((uintptr_t *)e)[0] = ((uintptr_t *)e)[1] = 0; /* fresh memory is zero */
            top = e;
            limit = elim;
            break;
        }
    }
    if (limit == 0) {
        if (carve_granule(m, &lo) != 0) {
            pthread_mutex_unlock(&m->chunk_lock);
            return -1;
        }
        top = lo; /* marked by the carve */
        limit = lo + R;
    }
    pthread_mutex_unlock(&m->chunk_lock);
    t->top = top;
    t->limit = limit;
    retire(m, t, otop, olim);
    return 0;
}

void ht_mag_drop(struct ht_mag *m, struct ht_mag_tcache *t, int c)
{
    t->head[c] = NULL;
    t->n[c] = 0;
    atomic_fetch_add_explicit(&m->dropped, 1, memory_order_relaxed);
}

/* Moves up to a batch of class c from the global list to the thread's (whose
 * list is empty). A bad link ends the global list there. */
static void refill(struct ht_mag *m, struct ht_mag_tcache *t, int c)
{
    struct ht_mag_class *k = &m->cls[c];
    unsigned want = ht_mag_batch(c), got = 0;
    pthread_mutex_lock(&k->lock);
    uint32_t left = atomic_load_explicit(&m->nfree[c], memory_order_relaxed);
    while (got < want && k->free) {
        void *p = k->free;
        if (!ht_mag_free_chunk(m, p)) {
            k->free = NULL; /* (the count goes to 0 below) */
            atomic_fetch_add_explicit(&m->dropped, 1, memory_order_relaxed);
            break;
        }
        k->free = *(void **)p;
        *(void **)p = t->head[c];
        t->head[c] = p;
        got++;
    }
    /* A count off after a bad link must not stay above zero with nothing
     * listed: the fast path would keep sending the class here. */
    atomic_store_explicit(&m->nfree[c], k->free && left > got ? left - got : 0, memory_order_relaxed);
    pthread_mutex_unlock(&k->lock);
    t->n[c] = (uint16_t)(t->n[c] + got);
}

/* The next s bytes of the region (they fit): a chunk; its end marked unless
 * it is the region's limit (the next granule's first unit, marked already,
 * and not this thread's to write). */
static void *bump(struct ht_mag *m, struct ht_mag_tcache *t, size_t s, int *fresh)
{
    uintptr_t top = t->top;
    t->top = top + s;
    if (top + s < t->limit)
        ht_mag_mark(m, top + s);
    if (fresh)
        *fresh = 1;
    return (void *)top;
}

void *ht_mag_alloc_slow(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, int *fresh)
{
    if (m->end == m->base || n > HT_MAG_MAX)
        return NULL;
    int c;
    size_t s = ht_mag_req(n, &c);
    if (!t->head[c] && atomic_load_explicit(&m->nfree[c], memory_order_relaxed))
        refill(m, t, c);
    void *p = ht_mag_pop(m, t, c);
    if (p) {
        if (fresh)
            *fresh = 0;
        return p;
    }
    if (t->top + s > t->limit && new_region(m, t, s) != 0) {
        atomic_fetch_add_explicit(&m->full, 1, memory_order_relaxed);
        return NULL;
    }
    return bump(m, t, s, fresh);
}

/* An aligned chunk among the first 64 of the global list of class c, taken
 * off and live, else NULL. A thread keeps only one or two chunks of a coarse
 * class and the rest overflow here: without this look an aligned request
 * missed whenever its thread's few chunks were unaligned and took fresh
 * memory, while the global list grew by the chunks those misses freed (1.6 MB
 * per million t_threads operations, without bound). A bad link cuts the list
 * there, as in refill. */
static void *take_aligned(struct ht_mag *m, int c, size_t align)
{
    struct ht_mag_class *k = &m->cls[c];
    void *hit = NULL;
    pthread_mutex_lock(&k->lock);
    uint32_t left = atomic_load_explicit(&m->nfree[c], memory_order_relaxed), seen = 0;
    for (void **pp = &k->free; *pp && seen < 64; seen++) {
        void *p = *pp;
        if (!ht_mag_free_chunk(m, p)) {
            *pp = NULL;
            left = seen;
            atomic_fetch_add_explicit(&m->dropped, 1, memory_order_relaxed);
            break;
        }
        if (((uintptr_t)p & (align - 1)) == 0) {
            *pp = *(void **)p;
            left = left ? left - 1 : 0;
            ht_mag_set_live(p);
            hit = p;
            break;
        }
        pp = (void **)p;
    }
    atomic_store_explicit(&m->nfree[c], k->free ? left : 0, memory_order_relaxed);
    pthread_mutex_unlock(&k->lock);
    return hit;
}

void *ht_mag_alloc_aligned(struct ht_mag *m, struct ht_mag_tcache *t, size_t n, size_t align)
{
    if (align <= 16)
        return ht_mag_alloc(m, t, n);
    if (m->end == m->base || n > HT_MAG_MAX || align > HT_MAG_ALIGN_MAX || (align & (align - 1)))
        return NULL;
    int c;
    size_t s = ht_mag_req(n, &c);
    /* Recycle first. Aligned requests free aligned chunks, so a class's list
     * holds them near its head: up to 16 candidates are looked at and the others
     * go back. Without this every aligned request took fresh memory and a
     * program that keeps making them grew without bound (the ASan soak:
     * 15 GB in 450 s). No boundary is written here: a recycled chunk may lie
     * in another thread's granule (the bitmap's single-writer rule). */
    if (!t->head[c] && atomic_load_explicit(&m->nfree[c], memory_order_relaxed))
        refill(m, t, c);
    void *seen[16], *hit = NULL;
    int k = 0;
    while (k < 16) {
        void *p = ht_mag_pop(m, t, c);
        if (!p)
            break;
        if (((uintptr_t)p & (align - 1)) == 0) {
            hit = p;
            break;
        }
        seen[k++] = p;
    }
    while (k > 0)
        ht_mag_free(m, t, seen[--k]);
    if (!hit && atomic_load_explicit(&m->nfree[c], memory_order_relaxed))
        hit = take_aligned(m, c, align);
    if (hit)
        return hit;
    for (int tries = 0; tries < 2; tries++) {
        uintptr_t top = t->top;
        uintptr_t c0 = (top + align - 1) & ~(uintptr_t)(align - 1);
        if (t->limit != 0 && c0 + s <= t->limit) {
            if (c0 != top) { /* the gap [top, c0): a free chunk (top is marked) */
                ht_mag_mark(m, c0);
                ht_mag_set_free(m, (void *)top);
                ht_mag_push(m, t, (void *)top, c0 - top);
            }
            t->top = c0;
            return bump(m, t, s, NULL);
        }
        if (new_region(m, t, s + align) != 0)
            break;
    }
    atomic_fetch_add_explicit(&m->full, 1, memory_order_relaxed);
    return NULL;
}

int ht_mag_grow(struct ht_mag *m, struct ht_mag_tcache *t, void *p, size_t n)
{
    size_t s = ht_mag_live_size(m, p);
    if (s == 0 || n > HT_MAG_MAX)
        return 0;
    uintptr_t c0 = (uintptr_t)p;
    size_t ns = ht_mag_chunk_size(n);
    if (ns <= s)
        return 1;
    if (c0 + s != t->top || c0 + ns > t->limit)
        return 0;
    /* c0 + s = top < limit: marked by this thread */
    ht_mag_unmark(m, c0 + s);
    t->top = c0 + ns;
    if (c0 + ns < t->limit)
        ht_mag_mark(m, c0 + ns);
    return 1;
}

/* Puts the chain [first .. last] of n chunks on the global list of class c. */
static void give_back(struct ht_mag *m, int c, void *first, void *last, unsigned n)
{
    struct ht_mag_class *k = &m->cls[c];
    pthread_mutex_lock(&k->lock);
    *(void **)last = k->free;
    k->free = first;
    atomic_store_explicit(&m->nfree[c], atomic_load_explicit(&m->nfree[c], memory_order_relaxed) + n,
                          memory_order_relaxed);
    pthread_mutex_unlock(&k->lock);
}

void ht_mag_flush(struct ht_mag *m, struct ht_mag_tcache *t, int c)
{
    /* The newest n - batch chunks: head .. mark (the mark was pushed when n
     * became batch + 1 and nothing above it was popped since); no walk, so
     * a bulk free does not read back the chunks it freed. A mark that is no
     * free chunk (a double free rewrote the list) drops the list instead. */
    void *first = t->head[c], *last = t->mark[c];
    unsigned b = ht_mag_batch(c);
    if (!ht_mag_free_chunk(m, last)) {
        ht_mag_drop(m, t, c);
        return;
    }
    t->head[c] = *(void **)last;
    give_back(m, c, first, last, t->n[c] - b);
    t->n[c] = (uint16_t)b;
}

void ht_mag_flush_all(struct ht_mag *m, struct ht_mag_tcache *t)
{
    uintptr_t top = t->top, limit = t->limit;
    t->top = t->limit = 0;
    if (limit != 0 && limit - top >= HT_MAG_STASH_MIN) {
        /* The untouched remainder goes to the next thread that needs a region. */
        pthread_mutex_lock(&m->chunk_lock);
        ((uintptr_t *)top)[0] = m->stash;
        ((uintptr_t *)top)[1] = limit;
        m->stash = top;
        pthread_mutex_unlock(&m->chunk_lock);
    } else {
        retire(m, t, top, limit);
    }
    for (int c = 0; c < HT_MAG_NCLASS; c++) {
        /* The whole list (checked link by link: cut at a bad one). */
        void *first = t->head[c], *last = NULL;
        unsigned n = 0;
        for (void *p = first; p && n < t->n[c] && ht_mag_free_chunk(m, p); p = *(void **)p) {
            last = p;
            n++;
        }
        if (n != t->n[c] || (last && *(void **)last != NULL))
            atomic_fetch_add_explicit(&m->dropped, 1, memory_order_relaxed);
        if (last)
            give_back(m, c, first, last, n);
        t->head[c] = NULL;
        t->n[c] = 0;
    }
}

void ht_mag_lock_all(struct ht_mag *m)
{
    for (int c = 0; c < HT_MAG_NCLASS; c++)
        pthread_mutex_lock(&m->cls[c].lock);
    pthread_mutex_lock(&m->chunk_lock);
}

void ht_mag_unlock_all(struct ht_mag *m)
{
    pthread_mutex_unlock(&m->chunk_lock);
    for (int c = HT_MAG_NCLASS - 1; c >= 0; c--)
        pthread_mutex_unlock(&m->cls[c].lock);
}

void ht_mag_reinit_locks(struct ht_mag *m)
{
    pthread_mutex_init(&m->chunk_lock, NULL);
    for (int c = 0; c < HT_MAG_NCLASS; c++)
        pthread_mutex_init(&m->cls[c].lock, NULL);
}
