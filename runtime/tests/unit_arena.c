/* unit_arena.c - the small-object arena on ordinary memory: size classes,
 * headerless 16-byte chunk spacing in allocation order (across granules, the
 * boundary bitmap giving every object's size), LIFO reuse,
 * global lists and cross-thread frees, usable sizes, aligned requests,
 * in-place growth, zero fresh memory, robustness against bad frees,
 * exhaustion, thread exit (stash), a seeded property test that checks every
 * live object's contents and that no two overlap, and a multithreaded
 * stress. */
#include "arena.h"
#include "unit.h"

#include <pthread.h>
#include <stdlib.h>

static int g_commits;
static size_t g_committed;
static size_t g_commit_limit = (size_t)-1;

/* Committing gives zero memory, as a fresh mapping does. */
static int commit(void *ctx, uintptr_t addr, size_t len)
{
    (void)ctx;
    if (g_committed + len > g_commit_limit)
        return -1;
    g_commits++;
    g_committed += len;
    memset((void *)addr, 0, len);
    return 0;
}

static struct ht_mag M;
static void *g_mem;
static uint8_t *g_meta;

/* A fresh arena of len bytes; its memory is garbage until committed. */
static void arena_setup(size_t len, size_t commit_limit)
{
    g_mem = aligned_alloc(HT_MAG_CHUNK, len);
    memset(g_mem, 0xa5, len < (16u << 20) ? len : (16u << 20));
    g_meta = calloc(1, ht_mag_bytes_needed_meta(len));
    g_commits = 0;
    g_committed = 0;
    g_commit_limit = commit_limit;
    ht_mag_init(&M, (uintptr_t)g_mem, len, g_meta, commit, NULL, 0x5eed5eed5eed5eedull);
}

static void arena_done(void)
{
    free(g_mem);
    free(g_meta);
}

/* The chunk of an n-byte request up to 4 KiB: n rounded up to 16, at least 16. */
static size_t exact_chunk(size_t n)
{
    size_t s = (n + 15) & ~(size_t)15;
    return s < 16 ? 16 : s;
}

/* xorshift64*: the property tests' fixed-seed generator */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}

/* A request size: mostly small, sometimes up to HT_MAG_MAX. */
static size_t rnd_size(void)
{
    uint64_t r = rnd();
    switch (r & 7) {
    case 0: return (r >> 8) % 25;                 /* minimum chunks */
    case 1: return (r >> 8) % (HT_MAG_MAX + 1);   /* anything */
    case 2: return 4000 + (r >> 8) % 12000;       /* coarse classes */
    default: return 1 + (r >> 8) % 1024;          /* exact classes */
    }
}

static void test_classes(void)
{
    int bad = 0;
    for (size_t s = HT_MAG_MIN_CHUNK; s <= HT_MAG_MAX_CHUNK; s += 16) {
        int c = ht_mag_class(s), f = ht_mag_class_floor(s);
        if (c < 0 || c >= HT_MAG_NCLASS || ht_mag_class_size(c) < s)
            bad++; /* a request's class holds its chunk */
        if (c > 0 && ht_mag_class_size(c - 1) >= s)
            bad++; /* ... and is the smallest that does */
        if (f < 0 || f >= HT_MAG_NCLASS || ht_mag_class_size(f) > s)
            bad++; /* a freed chunk serves every request of its list */
        if (f + 1 < HT_MAG_NCLASS && ht_mag_class_size(f + 1) <= s)
            bad++; /* ... and goes to the largest list it can */
        if (s <= HT_MAG_EXACT && (c != f || ht_mag_class_size(c) != s))
            bad++; /* exact to 16 bytes up to 4 KiB */
        if (ht_mag_class_size(c) * 8 > s * 9 + 1024)
            bad++; /* coarse classes waste at most 1/8 */
    }
    CHECK(bad == 0);
    for (int c = 0; c < HT_MAG_NCLASS; c++) {
        size_t sz = ht_mag_class_size(c);
        CHECK(sz % 16 == 0 && (c == 0 || sz > ht_mag_class_size(c - 1)));
        CHECK(ht_mag_class(sz) == c && ht_mag_class_floor(sz) == c);
        size_t b = 16384 / sz;
        CHECK(ht_mag_batch(c) == (b < 1 ? 1 : b > 64 ? 64 : b));
    }
    CHECK(ht_mag_class_size(0) == 16 && ht_mag_class_size(HT_MAG_NCLASS - 1) == HT_MAG_MAX_CHUNK);
    CHECK(ht_mag_chunk_size(HT_MAG_MAX) == HT_MAG_MAX_CHUNK);
    /* n rounded up to 16 up to 4 KiB, above it the class size */
    bad = 0;
    for (size_t n = 0; n <= HT_MAG_MAX; n++) {
        int c;
        size_t s = ht_mag_req(n, &c);
        bad += s != ht_mag_chunk_size(n) || c != ht_mag_class(exact_chunk(n)) || s != ht_mag_class_size(c);
        bad += n <= HT_MAG_EXACT ? s != exact_chunk(n) : s < n || s * 8 > n * 9 + 16 * 9;
    }
    CHECK(bad == 0);
    CHECK(ht_mag_chunk_size(0) == 16 && ht_mag_chunk_size(16) == 16 && ht_mag_chunk_size(17) == 32);
    CHECK(ht_mag_chunk_size(24) == 32 && ht_mag_chunk_size(100) == 112 && ht_mag_chunk_size(506) == 512);
    CHECK(ht_mag_chunk_size(4096) == 4096 && ht_mag_chunk_size(4097) == 4608);
}

/* Consecutive allocations of one thread are adjacent, spaced by their size
 * rounded to 16, across granule (region) boundaries; usable size = chunk. */
static void test_layout(void)
{
    arena_setup(8u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    CHECK(ht_mag_owns(&M, g_mem) && ht_mag_owns(&M, (char *)g_mem + (8u << 20) - 1));
    CHECK(!ht_mag_owns(&M, (char *)g_mem + (8u << 20)) && !ht_mag_owns(&M, (char *)g_mem - 1));
    size_t total = 0, bad_gap = 0, bad_use = 0, bad_align = 0, n_prev = 0;
    char *prev = NULL;
    int i = 0;
    while (total < (3u << 20)) { /* 48 granules */
        size_t n = rnd_size();
        char *p = ht_mag_alloc(&M, &t, n);
        if (!p)
            break;
        if (i == 0)
            CHECK((uintptr_t)p == M.base); /* no header */
        if (prev && p - prev != (ptrdiff_t)ht_mag_chunk_size(n_prev))
            bad_gap++;
        if (prev && n_prev <= HT_MAG_EXACT && p - prev != (ptrdiff_t)exact_chunk(n_prev))
            bad_gap++;
        bad_use += ht_mag_usable(&M, p) != ht_mag_chunk_size(n);
        bad_align += ((uintptr_t)p & 15) != 0;
        memset(p, 0x5a, ht_mag_usable(&M, p)); /* all of it is ours */
        prev = p;
        n_prev = n;
        total += ht_mag_chunk_size(n);
        i++;
    }
    CHECK(total >= (3u << 20));
    CHECK(bad_gap == 0 && bad_use == 0 && bad_align == 0);
    /* one thread: every new granule extended its region */
    CHECK(M.regions >= 48 && M.adjacent == M.regions - 1);
    CHECK(g_commits == 2 && g_committed == 2 * HT_MAG_CHUNK);
    /* every object's size still comes out of the bitmap (objects spanning
     * granules included) */
    bad_use = 0;
    for (char *q = (char *)M.base; q < prev; q += ht_mag_usable(&M, q))
        bad_use += ht_mag_usable(&M, q) == 0;
    CHECK(bad_use == 0 && ht_mag_usable(&M, prev) == ht_mag_chunk_size(n_prev));
    arena_done();
}

/* Frees go to the thread's list (LIFO, like glibc's tcache); a reused chunk
 * keeps its size; past twice the batch, lists flush to the global list. */
static void test_reuse(void)
{
    arena_setup(8u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    char *a = ht_mag_alloc(&M, &t, 100), *b = ht_mag_alloc(&M, &t, 100), *c = ht_mag_alloc(&M, &t, 40);
    CHECK(b - a == 112 && c - b == 112);
    ht_mag_free(&M, &t, a);
    ht_mag_free(&M, &t, b);
    CHECK(ht_mag_live_size(&M, a) == 0 && ht_mag_usable(&M, a) == 112); /* freed: no longer live, still a chunk */
    int fresh = -1;
    CHECK(ht_mag_alloc_fast(&M, &t, 97, &fresh) == b && fresh == 0); /* same chunk size 112 */
    CHECK(ht_mag_alloc(&M, &t, 104) == a);
    char *d = ht_mag_alloc(&M, &t, 100);
    CHECK(d == c + 48); /* list empty: back to the region */
    /* a coarse class: chunks have the class size and serve every request
     * of the class */
    char *e = ht_mag_alloc(&M, &t, 4200); /* class 4608 */
    CHECK(e == d + 112 && ht_mag_usable(&M, e) == 4608);
    ht_mag_free(&M, &t, e);
    char *f = ht_mag_alloc(&M, &t, 5000); /* class 5120 */
    CHECK(f != e && f == e + 4608);
    char *g = ht_mag_alloc(&M, &t, 4150); /* class 4608 */
    CHECK(g == e && ht_mag_usable(&M, g) == 4608);
    /* exact classes: a freed chunk serves its own size only */
    char *h = ht_mag_alloc(&M, &t, 1900);
    ht_mag_free(&M, &t, h);
    CHECK(ht_mag_alloc(&M, &t, 1870) != h && ht_mag_alloc(&M, &t, 1890) == h);
    /* flushing */
    int cl = ht_mag_class(ht_mag_chunk_size(24));
    unsigned bt = ht_mag_batch(cl);
    void *ptrs[400];
    for (unsigned i = 0; i < 3 * bt; i++)
        ptrs[i] = ht_mag_alloc(&M, &t, 24);
    for (unsigned i = 0; i < 3 * bt; i++)
        ht_mag_free(&M, &t, ptrs[i]);
    CHECK(t.n[cl] <= 2 * bt && M.nfree[cl] > 0 && t.n[cl] + M.nfree[cl] == 3 * bt);
    /* one flush, at 2 * batch + 1: the newest batch + 1 went back (no walk);
     * the thread kept the oldest */
    CHECK(M.nfree[cl] == bt + 1 && M.cls[cl].free == ptrs[2 * bt] && t.head[cl] == ptrs[3 * bt - 1]);
    ht_mag_flush_all(&M, &t);
    CHECK(t.n[cl] == 0 && t.head[cl] == NULL && M.nfree[cl] == 3 * bt);
    CHECK(t.top == 0 && t.limit == 0); /* the region went to the stash */
    /* the global list serves the class before any region */
    struct ht_mag_tcache u = {0};
    void *q = ht_mag_alloc(&M, &u, 20);
    int found = 0;
    for (unsigned i = 0; i < 3 * bt; i++)
        found |= q == ptrs[i];
    CHECK(found && u.n[cl] == bt - 1 && M.nfree[cl] == 2 * bt);
    arena_done();
}

/* A region's tail becomes a free chunk that ends where the next granule
 * (another thread's) starts: its size comes from that granule's first mark.
 * Reused, it is a live object like any other. */
static void test_tail(void)
{
    arena_setup(4u << 20, (size_t)-1);
    struct ht_mag_tcache a = {0}, b = {0};
    CHECK(ht_mag_alloc(&M, &a, 2000) && ht_mag_alloc(&M, &b, 16)); /* b carves after a */
    char *x = ht_mag_alloc(&M, &a, 30000);
    char *w = ht_mag_alloc(&M, &a, HT_MAG_MAX); /* up to 48 bytes before b's granule */
    uintptr_t top = a.top;
    CHECK(w && a.limit - top == 48);
    /* 112 bytes do not fit: a new granule, the 48-byte tail retired */
    char *y = ht_mag_alloc(&M, &a, 100);
    CHECK(y && (uintptr_t)y == M.base + 2 * HT_MAG_GRANULE);
    char *z = ht_mag_alloc(&M, &a, 40);
    CHECK((uintptr_t)z == top && ht_mag_usable(&M, z) == 48);
    memset(z, 0x3c, 48);
    ht_mag_free(&M, &a, z);
    CHECK(ht_mag_live_size(&M, z) == 0 && a.n[ht_mag_class(48)] == 1);
    CHECK(ht_mag_alloc(&M, &a, 33) == z && ht_mag_usable(&M, z) == 48);
    /* b's objects are untouched by all this */
    char *v = ht_mag_alloc(&M, &b, 16);
    CHECK((uintptr_t)v == M.base + HT_MAG_GRANULE + 16 && ht_mag_usable(&M, v) == 16);
    CHECK(ht_mag_usable(&M, x) == ht_mag_chunk_size(30000) && ht_mag_usable(&M, w) == HT_MAG_MAX);
    arena_done();
}

/* Objects freed by another thread come back to the allocating one through
 * the global list (the freeing thread's list overflows, or it exits). */
#define XT_N 1000
static void *g_xt[XT_N];

static void *xt_freer(void *arg)
{
    (void)arg;
    struct ht_mag_tcache t = {0};
    for (int i = 0; i < XT_N; i++)
        ht_mag_free(&M, &t, g_xt[i]);
    ht_mag_flush_all(&M, &t);
    return NULL;
}

static int xt_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void test_cross_thread(void)
{
    arena_setup(8u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    for (int i = 0; i < XT_N; i++)
        g_xt[i] = ht_mag_alloc(&M, &t, 200);
    uintptr_t carve = M.carve;
    pthread_t th;
    pthread_create(&th, NULL, xt_freer, NULL);
    pthread_join(th, NULL);
    int cl = ht_mag_class(ht_mag_chunk_size(200));
    CHECK(M.nfree[cl] == XT_N && t.n[cl] == 0);
    /* the allocating thread gets every one of them back before bumping */
    uintptr_t sorted[XT_N];
    for (int i = 0; i < XT_N; i++)
        sorted[i] = (uintptr_t)g_xt[i];
    qsort(sorted, XT_N, sizeof sorted[0], xt_cmp);
    int missing = 0;
    uintptr_t top = t.top;
    for (int i = 0; i < XT_N; i++) {
        uintptr_t p = (uintptr_t)ht_mag_alloc(&M, &t, 193 + i % 16);
        missing += bsearch(&p, sorted, XT_N, sizeof sorted[0], xt_cmp) == NULL;
    }
    CHECK(missing == 0 && t.top == top && M.carve == carve && M.nfree[cl] < ht_mag_batch(cl));
    arena_done();
}

/* Bad frees never corrupt: pointers inside objects, misaligned pointers,
 * granules never carved are ignored (free reads only the bitmap); a double
 * free is caught where a list reaches the chunk again, and so is a link
 * overwritten after free: the rest of the list is dropped, never handed out
 * twice or followed. */
static void test_bad_free(void)
{
    arena_setup(4u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    char *a = ht_mag_alloc(&M, &t, 64);
    char *b = ht_mag_alloc(&M, &t, 64);
    int cl = ht_mag_class(ht_mag_chunk_size(64));
    ht_mag_free(&M, &t, b + 16);                      /* inside an object */
    ht_mag_free(&M, &t, b + 8);                       /* misaligned */
    ht_mag_free(&M, &t, (char *)g_mem + 1);           /* the range's second byte */
    ht_mag_free(&M, &t, (char *)g_mem + (3u << 20));  /* not carved */
    CHECK(t.n[cl] == 0 && ht_mag_usable(&M, b) == 64 && ht_mag_usable(&M, a) == 64);
    CHECK(ht_mag_usable(&M, b + 16) == 0 && ht_mag_usable(&M, (char *)g_mem + (3u << 20)) == 0);
    /* a double free: handed out once, then the list is dropped */
    ht_mag_free(&M, &t, a);
    CHECK(ht_mag_live_size(&M, a) == 0);
    ht_mag_free(&M, &t, a);
    char *x = ht_mag_alloc(&M, &t, 64), *y = ht_mag_alloc(&M, &t, 64);
    CHECK(x == a && y != a && y != b && M.dropped == 1 && t.n[cl] == 0 && t.head[cl] == NULL);
    CHECK(ht_mag_usable(&M, x) == 64 && ht_mag_usable(&M, y) == 64);
    /* another chunk between the two frees (a, c, a: a cycle): a and c once each */
    char *c = ht_mag_alloc(&M, &t, 64);
    ht_mag_free(&M, &t, a);
    ht_mag_free(&M, &t, c);
    ht_mag_free(&M, &t, a);
    char *p1 = ht_mag_alloc(&M, &t, 64), *p2 = ht_mag_alloc(&M, &t, 64), *p3 = ht_mag_alloc(&M, &t, 64);
    CHECK(p1 == a && p2 == c && p3 != a && p3 != c && p3 != b && p3 != y && M.dropped == 2);
    /* a link overwritten after free (a use after free): cut there */
    ht_mag_free(&M, &t, a);
    ht_mag_free(&M, &t, c);
    memset(c, 0x41, 8);
    char *q1 = ht_mag_alloc(&M, &t, 64), *q2 = ht_mag_alloc(&M, &t, 64);
    CHECK(q1 == c && q2 != a && q2 != c && M.dropped == 3);
    /* ... and the key overwritten too: c is not taken for free */
    ht_mag_free(&M, &t, c);
    memset(c, 0, 16);
    CHECK(ht_mag_alloc(&M, &t, 64) != c && M.dropped == 4);
    /* realloc's case: live size 0 for a chunk that is free (malloc_usable_size gives its chunk) */
    ht_mag_free(&M, &t, q2);
    CHECK(ht_mag_live_size(&M, q2) == 0 && ht_mag_usable(&M, q2) == 64 && ht_mag_chunk_at(&M, q2) == 64);
    arena_done();
}

/* Double frees at random, through flushes, the global list, another
 * thread's cache and thread exits: no chunk is ever live twice, every live
 * object keeps its bytes, and the lists stay bounded. */
static void test_double_free_property(void)
{
    arena_setup(16u << 20, (size_t)-1);
    struct ht_mag_tcache tc[2] = {{0}};
    enum { SLOTS = 512 };
    unsigned char *live[SLOTS] = {0};
    unsigned char pat[SLOTS];
    void *freed[64] = {0}; /* recently freed: candidates for a second free */
    long bad = 0, doubles = 0;
    for (int it = 0; it < 200000; it++) {
        uint64_t r = rnd();
        struct ht_mag_tcache *tp = &tc[r & 1];
        int i = (int)((r >> 1) % SLOTS);
        size_t n = 16 + (size_t)((r >> 20) % 6) * 16; /* few classes: lists cycle */
        if ((r >> 40) % 53 == 0) {
            void *f = freed[(r >> 48) % 64];
            if (f) { /* a second free, maybe from the other thread's cache */
                ht_mag_free(&M, tp, f);
                doubles++;
            }
        } else if (live[i]) {
            for (size_t k = 0; k < 16; k++)
                bad += live[i][k] != pat[i];
            ht_mag_free(&M, tp, live[i]);
            freed[(r >> 48) % 64] = live[i];
            live[i] = NULL;
        } else {
            unsigned char *p = ht_mag_alloc(&M, tp, n);
            if (!p) {
                bad++;
                continue;
            }
            for (int j = 0; j < SLOTS; j++)
                bad += live[j] == p;
            for (int j = 0; j < 64; j++) /* live again: a free of it now would be no double free */
                if (freed[j] == p)
                    freed[j] = NULL;
            pat[i] = (unsigned char)(r >> 56);
            memset(p, pat[i], 16);
            live[i] = p;
        }
        if (it % 20000 == 0)
            ht_mag_flush_all(&M, tp);
    }
    if (bad || doubles <= 1000 || M.dropped == 0 || M.full)
        fprintf(stderr, "double-free property: bad %ld doubles %ld dropped %lu full %lu\n", bad, doubles,
                (unsigned long)M.dropped, (unsigned long)M.full);
    CHECK(bad == 0 && doubles > 1000 && M.dropped > 0 && M.full == 0);
    for (int c = 0; c < 6; c++)
        CHECK(tc[0].n[c] <= 2 * ht_mag_batch(c) && tc[1].n[c] <= 2 * ht_mag_batch(c));
    arena_done();
}

/* Aligned requests: bumped to the alignment, the gap a free chunk. */
static void test_aligned(void)
{
    arena_setup(64u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        size_t al = (size_t)32 << (rnd() % 8); /* 32 .. 4096 */
        size_t n = rnd_size();
        char *p = ht_mag_alloc_aligned(&M, &t, n, al);
        if (!p || ((uintptr_t)p & (al - 1)) || ht_mag_usable(&M, p) != ht_mag_chunk_size(n))
            bad++;
        else
            memset(p, 0x77, n);
        char *q = ht_mag_alloc(&M, &t, 50); /* gap chunks get reused */
        if (!q)
            bad++;
    }
    CHECK(bad == 0);
    /* small alignments are plain allocations */
    char *x = ht_mag_alloc_aligned(&M, &t, 10, 16);
    CHECK(x && ((uintptr_t)x & 15) == 0);
    CHECK(ht_mag_alloc_aligned(&M, &t, 10, 8192) == NULL);
    CHECK(ht_mag_alloc_aligned(&M, &t, 10, 48) == NULL);
    CHECK(ht_mag_alloc_aligned(&M, &t, HT_MAG_MAX + 1, 64) == NULL);
    arena_done();
}

/* Aligned requests recycle the chunks aligned requests freed: a program that
 * keeps allocating and freeing aligned objects (posix_memalign, aligned_alloc)
 * reaches a steady state instead of taking fresh memory each time (the ASan
 * soak grew to 15 GB in 450 s before). */
static void test_aligned_steady(void)
{
    arena_setup(256u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    char *slot[64] = {0};
    size_t al[64];
    int bad = 0;
    unsigned long after_warmup = 0;
    for (int i = 0; i < 200000; i++) {
        if (i == 20000)
            after_warmup = atomic_load(&M.regions);
        int k = (int)(rnd() % 64);
        if (slot[k]) {
            ht_mag_free(&M, &t, slot[k]);
            slot[k] = NULL;
            continue;
        }
        al[k] = (size_t)64 << (rnd() % 3); /* 64, 128, 256 */
        slot[k] = ht_mag_alloc_aligned(&M, &t, 16 + rnd() % 2000, al[k]);
        if (!slot[k] || ((uintptr_t)slot[k] & (al[k] - 1)))
            bad++;
    }
    CHECK(bad == 0);
    /* 64 live objects of at most 2 KiB: a few regions; far from one per few
     * hundred requests. */
    unsigned long end = atomic_load(&M.regions);
    fprintf(stderr, "aligned steady: %lu regions after warm-up, %lu at the end\n", after_warmup, end);
    CHECK(end <= after_warmup + 4);
    for (int k = 0; k < 64; k++)
        if (slot[k])
            ht_mag_free(&M, &t, slot[k]);
    arena_done();
}

/* Aligned and plain requests share a class (the t_threads mix: a quarter
 * aligned to 64 or 256, sizes up to 32 KiB, where a thread keeps 1..2 chunks
 * of a class and the rest overflow to the global list). An aligned request
 * that finds no aligned chunk on its thread's list must look at the global
 * list before taking fresh memory: when it did not, the overflow grew with
 * every such miss (t_threads: 1.6 MB per million operations, with one thread
 * or four). Steady state: no growth after the warm-up, with `nt` threads. */
#define NPH 12
struct mix_arg {
    unsigned seed;
    int iters;
    long bad;
};

static void *mix_worker(void *arg)
{
    struct mix_arg *a = arg;
    struct ht_mag_tcache t = {0};
    char *slot[256] = {0};
    unsigned s = a->seed;
    for (int i = 0; i < a->iters; i++) {
        s = s * 1103515245u + 12345u;
        unsigned k = (s >> 8) & 255;
        if (slot[k]) {
            ht_mag_free(&M, &t, slot[k]);
            slot[k] = NULL;
            continue;
        }
        s = s * 1103515245u + 12345u;
        size_t n = (s >> 9) % 10 ? 16 + (s >> 12) % 1008 : 1024 + (s >> 12) % (HT_MAG_MAX - 1024);
        unsigned kind = (s >> 4) % 8;
        size_t al = kind == 6 ? 64 : kind == 7 ? 256 : 0;
        if (al == 256)
            n = (n + 255) & ~(size_t)255;
        char *p = al ? ht_mag_alloc_aligned(&M, &t, n, al) : ht_mag_alloc(&M, &t, n);
        if (!p || (al && ((uintptr_t)p & (al - 1))))
            a->bad++;
        slot[k] = p;
    }
    for (int k = 0; k < 256; k++)
        if (slot[k])
            ht_mag_free(&M, &t, slot[k]);
    ht_mag_flush_all(&M, &t);
    return NULL;
}

static void test_aligned_mixed(int nt)
{
    arena_setup(1024u << 20, (size_t)-1);
    unsigned long regions[NPH];
    long bad = 0;
    for (int phase = 0; phase < NPH; phase++) { /* fresh threads each phase (stashes, churn) */
        pthread_t th[8];
        struct mix_arg a[8];
        for (int i = 0; i < nt; i++) {
            a[i] = (struct mix_arg){.seed = (unsigned)(phase * 131 + i * 7919 + 1),
                                    .iters = 200000};
            pthread_create(&th[i], NULL, mix_worker, &a[i]);
        }
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            bad += a[i].bad;
        }
        regions[phase] = atomic_load(&M.regions);
    }
    CHECK(bad == 0);
    fprintf(stderr, "aligned mixed, %d thread(s): regions after each phase:", nt);
    for (int i = 0; i < NPH; i++)
        fprintf(stderr, " %lu", regions[i]);
    fprintf(stderr, "\n");
    /* Each class keeps its peak, so memory still grows while rarer peaks are
     * reached, ever more slowly: 1 thread 46 51 ... 60, 4 threads 81..95
     * after the first phase, 184..217 after the 12th, 239 after 30 phases.
     * The leak grew by about the same amount every phase (1 thread 131 179
     * 220 ... 608, 4 threads 282 459 ... 1642). A thread's 256 slots hold
     * about 1.5 MB (a tenth of them up to 32 KiB): 100 granules (6.4 MB) per
     * thread is four times that, a third of what the leak took. */
    CHECK(regions[NPH - 1] <= 100ul * (unsigned long)nt);
    arena_done();
}

/* Memory from the region is zero (fresh), recycled chunks are reported so;
 * the last chunk of the region grows in place. */
static void test_fresh_grow(void)
{
    arena_setup(4u << 20, (size_t)-1);
    struct ht_mag_tcache t = {0};
    int fresh = -1, zero = 1;
    unsigned char *p = ht_mag_alloc_fast(&M, &t, 500, &fresh);
    CHECK(p == NULL); /* no region yet: the slow path */
    p = ht_mag_alloc_slow(&M, &t, 500, &fresh);
    CHECK(p && fresh == 1);
    for (int i = 0; i < 500; i++)
        zero &= p[i] == 0;
    CHECK(zero);
    memset(p, 0xff, 500);
    /* grows at the region's top, the new bytes zero */
    CHECK(ht_mag_grow(&M, &t, p, 3000) && ht_mag_usable(&M, p) == ht_mag_chunk_size(3000));
    zero = 1;
    for (int i = 500; i < 3000; i++)
        zero &= p[i] == 0;
    CHECK(zero && p[499] == 0xff);
    unsigned char *q = ht_mag_alloc(&M, &t, 16);
    CHECK(q == p + ht_mag_chunk_size(3000));
    CHECK(!ht_mag_grow(&M, &t, p, 4000)); /* not the last any more */
    CHECK(ht_mag_grow(&M, &t, p, 100));   /* fits already */
    CHECK(!ht_mag_grow(&M, &t, q, HT_MAG_MAX + 1));
    /* the freed chunk serves requests of its class (2993 .. 3008) */
    ht_mag_free(&M, &t, p);
    CHECK(ht_mag_alloc_fast(&M, &t, 3100, &fresh) != p);
    p = ht_mag_alloc_fast(&M, &t, 2995, &fresh);
    CHECK(p && fresh == 0 && p[100] == 0xff && ht_mag_usable(&M, p) == 3008);
    /* a whole region's worth of fresh objects, across granules: all zero */
    zero = 1;
    for (int i = 0; i < 4000; i++) {
        size_t n = 1 + rnd() % 1000;
        unsigned char *r = ht_mag_alloc_fast(&M, &t, n, &fresh);
        if (!r)
            r = ht_mag_alloc_slow(&M, &t, n, &fresh);
        if (fresh)
            for (size_t k = 0; k < n; k++)
                zero &= r[k] == 0;
        memset(r, 0xee, n);
    }
    CHECK(zero);
    arena_done();
}

static void test_exhaustion(void)
{
    /* 4 MiB reserved, one 2 MB chunk committable */
    arena_setup(4u << 20, HT_MAG_CHUNK);
    struct ht_mag_tcache t = {0};
    size_t got = 0;
    void *p, *last = NULL;
    while ((p = ht_mag_alloc(&M, &t, 1000)) != NULL) {
        got++;
        last = p;
    }
    /* one run of chunks from base to the end of the committed chunk */
    CHECK(got == HT_MAG_CHUNK / 1008 && M.full > 0 && g_commits == 1);
    /* the tail still serves small requests; larger or aligned ones fail */
    CHECK(ht_mag_alloc(&M, &t, 16) != NULL);
    CHECK(ht_mag_alloc(&M, &t, 5000) == NULL && ht_mag_alloc_aligned(&M, &t, 100, 4096) == NULL);
    /* what is freed is reused */
    ht_mag_free(&M, &t, last);
    CHECK(ht_mag_alloc(&M, &t, 1000) == last);
    arena_done();
    /* the whole range used up, commits never failing */
    arena_setup(2u << 20, (size_t)-1);
    got = 0;
    memset(&t, 0, sizeof t);
    while ((p = ht_mag_alloc(&M, &t, 30000)) != NULL)
        got++;
    CHECK(got == HT_MAG_CHUNK / ht_mag_chunk_size(30000) && M.full > 0 && M.carve == M.end);
    arena_done();
    /* an arena that is off owns nothing and serves nothing */
    struct ht_mag off;
    ht_mag_init(&off, 0, 0, NULL, commit, NULL, 0);
    struct ht_mag_tcache u = {0};
    CHECK(!ht_mag_owns(&off, (void *)0x1000) && ht_mag_alloc(&off, &u, 10) == NULL);
    CHECK(ht_mag_alloc_aligned(&off, &u, 10, 64) == NULL && ht_mag_usable(&off, (void *)0x1000) == 0);
}

/* A thread's region remainder is stashed at exit and taken by the next
 * thread that needs a region (before new granules). */
static void test_stash(void)
{
    arena_setup(4u << 20, (size_t)-1);
    struct ht_mag_tcache a = {0}, b = {0};
    char *p = ht_mag_alloc(&M, &a, 100);
    uintptr_t top = a.top;
    ht_mag_flush_all(&M, &a);
    CHECK(M.stash == top);
    uint64_t regions = M.regions;
    int fresh = 0;
    unsigned char *q = ht_mag_alloc_slow(&M, &b, 200, &fresh);
    CHECK((uintptr_t)q == top && M.stash == 0 && M.regions == regions);
    CHECK(q - (unsigned char *)p == 112);
    /* the stash's link words were cleared: fresh memory is zero */
    int zero = fresh == 1;
    for (size_t k = 0; k < ht_mag_usable(&M, q); k++)
        zero &= q[k] == 0;
    CHECK(zero && ht_mag_usable(&M, q) == exact_chunk(200));
    ht_mag_free(&M, &b, q);
    ht_mag_flush_all(&M, &b);
    arena_done();
}

/* Property test: random malloc / free / realloc (grow in place, else move) /
 * aligned malloc with a fixed seed, through three thread caches taken at
 * random (as threads: regions interleave, tails and frees cross); every live
 * object is filled with its own pattern over its whole usable size and
 * checked before it is freed and at the end; no two live objects overlap
 * (whole chunks). */
#define PT_SLOTS 2048
struct pt_obj {
    unsigned char *p;
    size_t n;
    unsigned char pat;
};

static int pt_check(const struct pt_obj *o)
{
    size_t u = ht_mag_usable(&M, o->p);
    if (u < o->n)
        return 0;
    for (size_t k = 0; k < u; k++)
        if (o->p[k] != (unsigned char)(o->pat + k))
            return 0;
    return 1;
}

static void pt_fill(struct pt_obj *o, unsigned char pat)
{
    size_t u = ht_mag_usable(&M, o->p);
    o->pat = pat;
    for (size_t k = 0; k < u; k++)
        o->p[k] = (unsigned char)(pat + k);
}

static int cmp_obj(const void *a, const void *b)
{
    const struct pt_obj *x = a, *y = b;
    return x->p < y->p ? -1 : x->p > y->p;
}

static void test_property(void)
{
    arena_setup(64u << 20, (size_t)-1);
    static struct pt_obj o[PT_SLOTS];
    memset(o, 0, sizeof o);
    struct ht_mag_tcache tcs[3];
    memset(tcs, 0, sizeof tcs);
    g_rng = 42;
    long bad = 0, allocs = 0, grown = 0;
    for (int it = 0; it < 300000; it++) {
        uint64_t r = rnd();
        struct pt_obj *s = &o[(r >> 16) % PT_SLOTS];
        struct ht_mag_tcache *tp = &tcs[(r >> 59) % 3];
        unsigned op = r & 15;
        if (s->p && op < 6) { /* free */
            bad += !pt_check(s);
            ht_mag_free(&M, tp, s->p);
            s->p = NULL;
        } else if (s->p && op < 9) { /* realloc */
            bad += !pt_check(s);
            size_t n = rnd_size();
            size_t u = ht_mag_usable(&M, s->p);
            if (n <= u || ht_mag_grow(&M, tp, s->p, n)) {
                grown += n > u;
                s->n = n;
                pt_fill(s, s->pat);
            } else {
                unsigned char *q = ht_mag_alloc(&M, tp, n);
                if (!q) {
                    bad++;
                    continue;
                }
                memcpy(q, s->p, u < n ? u : n);
                ht_mag_free(&M, tp, s->p);
                s->p = q;
                s->n = n;
                pt_fill(s, s->pat);
            }
        } else if (!s->p) { /* malloc, sometimes aligned */
            size_t n = rnd_size(), al = op == 15 ? (size_t)32 << (r >> 40) % 8 : 16;
            s->p = al > 16 ? ht_mag_alloc_aligned(&M, tp, n, al) : ht_mag_alloc(&M, tp, n);
            if (!s->p || ((uintptr_t)s->p & (al - 1))) {
                bad++;
                s->p = NULL;
                continue;
            }
            s->n = n;
            pt_fill(s, (unsigned char)r);
            allocs++;
        }
        if (it % 50000 == 0) /* every so often, a thread exit and back */
            ht_mag_flush_all(&M, tp);
    }
    struct pt_obj live[PT_SLOTS];
    size_t nl = 0;
    for (int i = 0; i < PT_SLOTS; i++)
        if (o[i].p) {
            bad += !pt_check(&o[i]);
            live[nl++] = o[i];
        }
    qsort(live, nl, sizeof live[0], cmp_obj);
    long overlap = 0;
    for (size_t i = 1; i < nl; i++)
        overlap += live[i - 1].p + ht_mag_usable(&M, live[i - 1].p) > live[i].p;
    CHECK(bad == 0 && overlap == 0 && allocs > 50000 && grown > 0 && nl > 100);
    /* lists are consistent: every listed chunk is a free chunk of a size
     * its class serves */
    for (int i = 0; i < PT_SLOTS; i++)
        if (o[i].p)
            ht_mag_free(&M, &tcs[i % 3], o[i].p);
    for (int i = 0; i < 3; i++)
        ht_mag_flush_all(&M, &tcs[i]);
    CHECK(M.adjacent < M.regions); /* the caches' regions did interleave */
    long badlist = 0;
    for (int c = 0; c < HT_MAG_NCLASS; c++) {
        uint32_t n = 0;
        for (char *p = M.cls[c].free; p; p = *(char **)p) {
            uint64_t k;
            memcpy(&k, p + 8, 8);
            size_t sz = ht_mag_span(&M, ((uintptr_t)p - M.base) >> HT_MAG_UNIT_SHIFT);
            badlist += k != M.key || ht_mag_live_size(&M, p) != 0 || sz < ht_mag_class_size(c) ||
                       ht_mag_class_floor(sz) != c;
            n++;
        }
        badlist += n != M.nfree[c];
    }
    CHECK(badlist == 0);
    arena_done();
}

/* Threads allocate, fill, check and free objects of all classes, handing some
 * of them to other threads (cross-thread frees). */
#define NT 4
static void *volatile g_handoff[64];

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
            if (n == 0 || q[0] != (unsigned char)k || q[n - 1] != (unsigned char)k)
                bad++;
            if ((s >> 20) % 8 == 0) { /* hand it to whoever takes the slot next */
                void *old = __atomic_exchange_n(&g_handoff[(s >> 12) & 63], q, __ATOMIC_ACQ_REL);
                if (old)
                    ht_mag_free(&M, &t, old);
            } else {
                ht_mag_free(&M, &t, q);
            }
            mine[k] = NULL;
        } else {
            size_t n = 1 + (s >> 14) % (((s >> 4) & 7) ? 512 : HT_MAG_MAX);
            unsigned char *q = ((s >> 4) & 31) == 1 ? ht_mag_alloc_aligned(&M, &t, n, 128)
                                                     : ht_mag_alloc(&M, &t, n);
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
    arena_setup(512u << 20, (size_t)-1);
    memset((void *)g_handoff, 0, sizeof g_handoff);
    long bad = 0;
    for (int round = 0; round < 3; round++) { /* later rounds reuse stashed regions */
        pthread_t th[NT];
        for (long i = 0; i < NT; i++)
            pthread_create(&th[i], NULL, worker, (void *)i);
        for (int i = 0; i < NT; i++) {
            void *r;
            pthread_join(th[i], &r);
            bad += (long)r;
        }
    }
    CHECK(bad == 0);
    struct ht_mag_tcache t = {0};
    for (int k = 0; k < 64; k++)
        if (g_handoff[k])
            ht_mag_free(&M, &t, g_handoff[k]);
    ht_mag_flush_all(&M, &t);
    /* everything was given back: every class list is consistent (walkable) */
    size_t total = 0;
    for (int c = 0; c < HT_MAG_NCLASS; c++) {
        size_t n = 0;
        for (void *p = M.cls[c].free; p; p = *(void **)p)
            n++;
        CHECK(n == M.nfree[c]);
        total += n;
    }
    CHECK(total > 0);
    /* memory stays bounded: threads reuse what others freed */
    CHECK(M.carve - M.base < (32u << 20));
    arena_done();
}

int main(void)
{
    test_classes();
    test_layout();
    test_reuse();
    test_tail();
    test_cross_thread();
    test_bad_free();
    test_double_free_property();
    test_aligned();
    test_aligned_steady();
    test_aligned_mixed(1);
    test_aligned_mixed(4);
    test_fresh_grow();
    test_exhaustion();
    test_stash();
    test_property();
    test_threads();
    return unit_done("unit_arena");
}
