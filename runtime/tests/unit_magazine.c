/* unit_magazine.c - the small-object arena: size classes, alloc/free through
 * thread caches, refill/flush batches, class of a pointer, exhaustion,
 * commits in 2 MB chunks, and a multithreaded stress with content checks. */
#include "magazine.h"
#include "unit.h"

#include <pthread.h>
#include <stdlib.h>

static int g_commits;
static size_t g_committed;
static size_t g_commit_limit = (size_t)-1;

static int commit(void *ctx, uintptr_t addr, size_t len)
{
    (void)ctx;
    (void)addr;
    if (g_committed + len > g_commit_limit)
        return -1;
    g_commits++;
    g_committed += len;
    return 0;
}

static void test_classes(void)
{
    int bad = 0, prev = 0;
    for (size_t n = 1; n <= HT_MAG_MAX; n++) {
        int c = ht_mag_class(n);
        if (c < 0 || c >= HT_MAG_NCLASS || ht_mag_class_size(c) < n || c < prev)
            bad++;
        if (c > 0 && ht_mag_class_size(c - 1) >= n)
            bad++; /* the smallest class that fits */
        prev = c;
    }
    CHECK(bad == 0);
    CHECK(ht_mag_class(0) == 0 && ht_mag_class_size(0) == 16);
    CHECK(ht_mag_class(HT_MAG_MAX) == HT_MAG_NCLASS - 1 && ht_mag_class_size(HT_MAG_NCLASS - 1) == HT_MAG_MAX);
    for (int c = 0; c < HT_MAG_NCLASS; c++) {
        CHECK(ht_mag_class_size(c) % 16 == 0);
        CHECK(ht_mag_class(ht_mag_class_size(c)) == c);
        CHECK(ht_mag_batch(c) >= 1 && ht_mag_batch(c) <= 64);
    }
    /* waste per object stays below 25 % above 128 bytes */
    for (size_t n = 129; n <= HT_MAG_MAX; n += 7)
        CHECK(ht_mag_class_size(ht_mag_class(n)) * 4 <= n * 5 + 64);
}

static struct ht_mag M;

static void *arena_mem(size_t len, uint8_t **meta)
{
    void *mem = aligned_alloc(HT_MAG_CHUNK, len);
    *meta = calloc(1, ht_mag_bytes_needed_meta(len));
    return mem;
}

static void test_basic(void)
{
    size_t len = 8u << 20;
    uint8_t *meta;
    void *mem = arena_mem(len, &meta);
    g_commits = 0;
    g_committed = 0;
    g_commit_limit = (size_t)-1;
    ht_mag_init(&M, (uintptr_t)mem, len, meta, commit, NULL);
    struct ht_mag_tcache t = {0};
    CHECK(ht_mag_owns(&M, mem) && ht_mag_owns(&M, (char *)mem + len - 1) && !ht_mag_owns(&M, (char *)mem + len));
    CHECK(!ht_mag_owns(&M, (char *)mem - 1));
    void *a = ht_mag_alloc(&M, &t, ht_mag_class(24));
    CHECK(a != NULL && ht_mag_owns(&M, a) && ((uintptr_t)a & 15) == 0);
    CHECK(g_commits == 1 && g_committed == HT_MAG_CHUNK);
    CHECK(ht_mag_usable(&M, a) == 32 && ht_mag_class_of(&M, a) == 1);
    /* the refill put a batch in the cache */
    CHECK(t.n[1] == ht_mag_batch(1) - 1);
    void *b = ht_mag_alloc(&M, &t, 1);
    CHECK(b != a && b != NULL);
    ht_mag_free(&M, &t, a);
    CHECK(ht_mag_alloc(&M, &t, 1) == a); /* LIFO cache */
    /* freeing past twice the batch flushes to the class list */
    unsigned bt = ht_mag_batch(1);
    void *ptrs[400];
    for (unsigned i = 0; i < 3 * bt; i++)
        ptrs[i] = ht_mag_alloc(&M, &t, 1);
    for (unsigned i = 0; i < 3 * bt; i++)
        ht_mag_free(&M, &t, ptrs[i]);
    CHECK(t.n[1] <= 2 * bt && M.cls[1].nfree > 0);
    ht_mag_flush_all(&M, &t);
    CHECK(t.n[1] == 0 && t.head[1] == NULL);
    /* a big class uses 256 KiB slabs */
    void *big = ht_mag_alloc(&M, &t, ht_mag_class(30000));
    CHECK(big && ht_mag_usable(&M, big) == 32768);
    uintptr_t g = ((uintptr_t)big - M.base) >> HT_MAG_GRANULE_SHIFT;
    CHECK(meta[g] == ht_mag_class(30000) + 1);
    /* a pointer outside any slab is ignored by free */
    ht_mag_free(&M, &t, (char *)mem + len - 64);
    ht_mag_flush_all(&M, &t);
    free(mem);
    free(meta);
}

static void test_exhaustion(void)
{
    size_t len = 4u << 20;
    uint8_t *meta;
    void *mem = arena_mem(len, &meta);
    g_commits = 0;
    g_committed = 0;
    g_commit_limit = HT_MAG_CHUNK; /* the second chunk cannot be committed */
    ht_mag_init(&M, (uintptr_t)mem, len, meta, commit, NULL);
    struct ht_mag_tcache t = {0};
    int c = ht_mag_class(1000);
    size_t got = 0;
    void *p;
    while ((p = ht_mag_alloc(&M, &t, c)) != NULL)
        got++;
    CHECK(got > 0 && got * 1024 <= HT_MAG_CHUNK && M.full > 0);
    /* a different class cannot get memory either */
    CHECK(ht_mag_alloc(&M, &t, ht_mag_class(16)) == NULL);
    free(mem);
    free(meta);
    /* an arena that is off owns nothing and serves nothing */
    struct ht_mag off;
    ht_mag_init(&off, 0, 0, NULL, commit, NULL);
    CHECK(!ht_mag_owns(&off, (void *)0x1000) && ht_mag_refill(&off, &t, 0) == NULL);
}

/* Threads allocate, fill, check and free objects of all classes, handing half
 * of them to a neighbour (cross-thread frees). */
#define NT 4
static void *volatile g_handoff[NT][256];

static void *worker(void *arg)
{
    long id = (long)arg;
    struct ht_mag_tcache t = {0};
    unsigned s = (unsigned)id * 7919u + 1;
    void *mine[256] = {0};
    long bad = 0;
    for (int it = 0; it < 200000; it++) {
        s = s * 1103515245u + 12345u;
        unsigned k = (s >> 8) & 255;
        if (mine[k]) {
            unsigned char *q = mine[k];
            size_t n = ht_mag_usable(&M, q);
            if (q[0] != (unsigned char)k || q[n - 1] != (unsigned char)k)
                bad++;
            ht_mag_free(&M, &t, q);
            mine[k] = NULL;
        } else {
            size_t n = 1 + (s >> 14) % (((s >> 4) & 7) ? 512 : HT_MAG_MAX);
            unsigned char *q = ht_mag_alloc(&M, &t, ht_mag_class(n));
            if (!q) {
                bad++;
                continue;
            }
            size_t u = ht_mag_usable(&M, q);
            q[0] = q[u - 1] = (unsigned char)k;
            mine[k] = q;
        }
    }
    for (int k = 0; k < 256; k++)
        if (mine[k])
            ht_mag_free(&M, &t, mine[k]);
    ht_mag_flush_all(&M, &t);
    return (void *)bad;
}

static void test_threads(void)
{
    size_t len = 512u << 20;
    uint8_t *meta;
    void *mem = arena_mem(len, &meta);
    g_commits = 0;
    g_committed = 0;
    g_commit_limit = (size_t)-1;
    ht_mag_init(&M, (uintptr_t)mem, len, meta, commit, NULL);
    pthread_t th[NT];
    for (long i = 0; i < NT; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    long bad = 0;
    for (int i = 0; i < NT; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad += (long)r;
    }
    CHECK(bad == 0);
    /* everything was given back: every class list is consistent (walkable) */
    size_t total = 0;
    for (int c = 0; c < HT_MAG_NCLASS; c++) {
        size_t n = 0;
        for (void *p = M.cls[c].free; p; p = *(void **)p)
            n++;
        CHECK(n == M.cls[c].nfree);
        total += n;
    }
    CHECK(total > 0);
    (void)g_handoff;
    free(mem);
    free(meta);
}

int main(void)
{
    test_classes();
    test_basic();
    test_exhaustion();
    test_threads();
    return unit_done("unit_magazine");
}
