/* magazine.c - huge-page-backed small-object arena (see magazine.h). */
#include "magazine.h"

#include <string.h>

void ht_mag_init(struct ht_mag *m, uintptr_t base, size_t len, uint8_t *meta,
                 ht_mag_commit_fn commit, void *ctx)
{
    memset(m, 0, sizeof *m);
    m->base = base;
    m->end = base + len;
    m->committed = base;
    m->carve = base;
    m->meta = meta;
    m->commit = commit;
    m->ctx = ctx;
    pthread_mutex_init(&m->chunk_lock, NULL);
    for (int c = 0; c < HT_MAG_NCLASS; c++)
        pthread_mutex_init(&m->cls[c].lock, NULL);
}

static size_t slab_bytes(int c) { return ht_mag_class_size(c) > 8192 ? 4 * HT_MAG_GRANULE : HT_MAG_GRANULE; }

/* A new slab for class c: [*lo, *hi). Called with the class lock held;
 * takes the chunk lock (order: class, then chunk). */
static int new_slab(struct ht_mag *m, int c, uintptr_t *lo, uintptr_t *hi)
{
    size_t sb = slab_bytes(c);
    pthread_mutex_lock(&m->chunk_lock);
    uintptr_t s = m->carve;
    if (s + sb > m->end || s + sb < s) {
        pthread_mutex_unlock(&m->chunk_lock);
        return -1;
    }
    if (s + sb > m->committed) {
        uintptr_t want = (s + sb + HT_MAG_CHUNK - 1) & ~(uintptr_t)(HT_MAG_CHUNK - 1);
        if (want > m->end)
            want = m->end;
        if (m->commit(m->ctx, m->committed, want - m->committed) != 0) {
            pthread_mutex_unlock(&m->chunk_lock);
            return -1;
        }
        m->committed = want;
    }
    m->carve = s + sb;
    size_t g0 = (s - m->base) >> HT_MAG_GRANULE_SHIFT;
    for (size_t g = 0; g < sb >> HT_MAG_GRANULE_SHIFT; g++)
        m->meta[g0 + g] = (uint8_t)(c + 1);
    pthread_mutex_unlock(&m->chunk_lock);
    *lo = s;
    *hi = s + sb;
    return 0;
}

/* The first object of a refill goes to the caller, the rest to the thread cache. */
static void *hand_out(struct ht_mag_tcache *t, int c, void *first, void *p)
{
    if (!first)
        return p;
    *(void **)p = t->head[c];
    t->head[c] = p;
    t->n[c]++;
    return first;
}

void *ht_mag_refill(struct ht_mag *m, struct ht_mag_tcache *t, int c)
{
    struct ht_mag_class *k = &m->cls[c];
    size_t sz = ht_mag_class_size(c);
    unsigned want = ht_mag_batch(c);
    void *first = NULL;
    unsigned got = 0;
    if (m->end == m->base)
        return NULL;
    pthread_mutex_lock(&k->lock);
    /* Reuse freed objects first, then carve the current slab, then a new one. */
    while (got < want && k->free) {
        void *p = k->free;
        k->free = *(void **)p;
        k->nfree--;
        first = hand_out(t, c, first, p);
        got++;
    }
    while (got < want) {
        if (k->bump + sz > k->end || k->bump == 0) {
            uintptr_t lo, hi;
            if (new_slab(m, c, &lo, &hi) != 0) {
                atomic_fetch_add_explicit(&m->full, 1, memory_order_relaxed);
                break;
            }
            k->bump = lo;
            k->end = hi;
        }
        void *p = (void *)k->bump;
        k->bump += sz;
        first = hand_out(t, c, first, p);
        got++;
    }
    pthread_mutex_unlock(&k->lock);
    return first;
}

void ht_mag_flush(struct ht_mag *m, struct ht_mag_tcache *t, int c, unsigned keep)
{
    if (t->n[c] <= keep)
        return;
    /* Detach everything after the first `keep` objects, splice it in. */
    void *chain = t->head[c], *last = NULL;
    unsigned n = t->n[c] - keep;
    if (keep == 0) {
        t->head[c] = NULL;
    } else {
        void *p = t->head[c];
        for (unsigned i = 1; i < keep; i++)
            p = *(void **)p;
        chain = *(void **)p;
        *(void **)p = NULL;
    }
    last = chain;
    for (unsigned i = 1; i < n; i++)
        last = *(void **)last;
    t->n[c] = (uint16_t)keep;
    struct ht_mag_class *k = &m->cls[c];
    pthread_mutex_lock(&k->lock);
    *(void **)last = k->free;
    k->free = chain;
    k->nfree += n;
    pthread_mutex_unlock(&k->lock);
}

void ht_mag_flush_all(struct ht_mag *m, struct ht_mag_tcache *t)
{
    for (int c = 0; c < HT_MAG_NCLASS; c++)
        if (t->n[c])
            ht_mag_flush(m, t, c, 0);
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
