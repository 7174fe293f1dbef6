/* t_bigalloc - every block handed out is mapped, whatever failed on the way.
 *
 *   t_bigalloc [sizes=1M,2M,...] [seed=N] [threads=1] [rounds=1] [realloc=1]
 *
 * For each size (suffixes K, M, G; "+N" adds bytes, e.g. 2M+1): malloc,
 * then the whole block is checked mapped (mincore over every page: a hole
 * anywhere fails) and written (first and last byte, one word per 2 MB);
 * realloc to 3/2 of it + 12345 (checked mapped, old words kept), realloc
 * down to a third (old words kept), calloc of the same size (mapped, zero
 * where read), posix_memalign to 1 GB of a quarter of it; all freed. Before
 * each size a seeded random amount of address space is mapped and left, so
 * that runs with different seeds place the blocks differently (the kernel's
 * refusal to move hugetlb mappings depends on their 1 GiB offsets). With
 * threads=N each thread does the same concurrently (a refilled hole races
 * with the others' mmaps). A NULL from the allocator is counted, not a
 * failure (memory may really be short); a crash or a wrong byte is one.
 * realloc=0 skips the reallocs (a block of GBs then never needs 3/2 of itself).
 * Prints one JSON line; exit 0 when every check passed. */
#include "tcommon.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>

#define MAX_SIZES 32
static size_t g_sizes[MAX_SIZES];
static int g_nsizes, g_rounds = 1, g_realloc = 1;
static unsigned g_seed = 1;
static _Atomic long g_checked, g_nulls, g_bad;

/* TERM ('+' TERM)*, TERM = decimal with an optional K, M or G. */
static size_t parse_size(const char *s, const char **end)
{
    unsigned long long total = 0;
    for (;;) {
        char *e;
        unsigned long long v = strtoull(s, &e, 10);
        if (e == s)
            die("bad size in sizes=");
        if (*e == 'K' || *e == 'k')
            v <<= 10, e++;
        else if (*e == 'M' || *e == 'm')
            v <<= 20, e++;
        else if (*e == 'G' || *e == 'g')
            v <<= 30, e++;
        total += v;
        if (*e != '+') {
            *end = e;
            return (size_t)total;
        }
        s = e + 1;
    }
}

/* Every page of [p, p + n) mapped: mincore fails with ENOMEM on a hole. */
static int mapped(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, end = (uintptr_t)p + n;
    static __thread unsigned char vec[4096];
    for (; a < end; a += sizeof vec * 4096) {
        size_t k = end - a < sizeof vec * 4096 ? end - a : sizeof vec * 4096;
        if (mincore((void *)a, k, vec) != 0)
            return 0;
    }
    return 1;
}

static uint64_t word(uintptr_t p, size_t off) { return (uint64_t)(p + off) * 0x9E3779B97F4A7C15ull; }

static void put(unsigned char *p, size_t n)
{
    for (size_t off = 0; off + 8 <= n; off += 2u << 20)
        memcpy(p + off, &(uint64_t){word((uintptr_t)p, off)}, 8);
    p[n - 1] = 0x5A;
}

/* The words put at base (the block's first address then) are still at p. */
static int kept(const unsigned char *p, uintptr_t base, size_t n)
{
    for (size_t off = 0; off + 8 <= n; off += 2u << 20) {
        uint64_t v;
        memcpy(&v, p + off, 8);
        if (v != word(base, off))
            return 0;
    }
    return 1;
}

static void bad(const char *what, size_t n)
{
    fprintf(stderr, "FAIL: %s (size %zu)\n", what, n);
    g_bad++;
}

/* p (n bytes, words put at base) grown by realloc to 3/2 + 12345, then shrunk
 * to a third; returns the shrunk block (NULL: a realloc said no, p freed). */
static unsigned char *grow_shrink(unsigned char *p, size_t n, uintptr_t base)
{
    size_t up = n + n / 2 + 12345;
    unsigned char *q = realloc(p, up);
    if (!q) {
        g_nulls++;
        free(p);
        return NULL;
    }
    if (!mapped(q, up))
        bad("realloc (grow) returned a block with a hole", up);
    if (!kept(q, base, n) || q[n - 1] != 0x5A)
        bad("realloc (grow) lost data", up);
    q[up - 1] = 0xA5;
    g_checked++;

    size_t down = n / 3 + 1;
    unsigned char *r = realloc(q, down);
    if (!r) {
        g_nulls++;
        free(q);
        return NULL;
    }
    if (!mapped(r, down))
        bad("realloc (shrink) returned a block with a hole", down);
    if (!kept(r, base, down))
        bad("realloc (shrink) lost data", down);
    g_checked++;
    return r;
}

static void one_size(size_t n, unsigned *rng)
{
    /* Vary the layout: 0..255 MB of address space, left mapped. */
    *rng = *rng * 1103515245u + 12345u;
    size_t pad = ((size_t)(*rng >> 8) % 128) << 21;
    if (pad && mmap(NULL, pad, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED)
        die("pad mmap");

    unsigned char *p = malloc(n);
    if (!p) {
        g_nulls++;
        return;
    }
    if (!mapped(p, n))
        bad("malloc returned a block with a hole", n);
    put(p, n);
    g_checked++;
    unsigned char *r = NULL;
    if (g_realloc) {
        r = grow_shrink(p, n, (uintptr_t)p);
        if (!r)
            return;
    } else {
        free(p);
    }

    unsigned char *c = calloc(1, n);
    if (c) {
        if (!mapped(c, n))
            bad("calloc returned a block with a hole", n);
        for (size_t off = 0; off < n; off += (1u << 20) + 4096)
            if (c[off] != 0)
                bad("calloc memory not zero", n);
        if (c[n - 1] != 0)
            bad("calloc memory not zero at the end", n);
        put(c, n);
        g_checked++;
    } else {
        g_nulls++;
    }

    void *a = NULL;
    size_t an = n / 4 + 1;
    if (posix_memalign(&a, 1u << 30, an) == 0) {
        if (((uintptr_t)a & ((1u << 30) - 1)) != 0)
            bad("posix_memalign: not aligned", an);
        if (!mapped(a, an))
            bad("posix_memalign returned a block with a hole", an);
        put(a, an);
        g_checked++;
    } else {
        g_nulls++;
    }
    free(a);
    free(c);
    free(r);
}

static void *worker(void *arg)
{
    unsigned rng = g_seed * 2654435761u + (unsigned)(uintptr_t)arg;
    for (int k = 0; k < g_rounds; k++)
        for (int i = 0; i < g_nsizes; i++)
            one_size(g_sizes[i], &rng);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *v = arg_value(argc, argv, "sizes");
    if (!v)
        v = "1M,2M,2M+1,3M+5,64M+1";
    while (*v && g_nsizes < MAX_SIZES) {
        const char *e;
        g_sizes[g_nsizes++] = parse_size(v, &e);
        v = *e == ',' ? e + 1 : e;
        if (*e && *e != ',')
            die("bad sizes=");
    }
    if ((v = arg_value(argc, argv, "seed")))
        g_seed = (unsigned)strtoul(v, NULL, 10);
    if ((v = arg_value(argc, argv, "realloc")))
        g_realloc = atoi(v) != 0;
    if ((v = arg_value(argc, argv, "rounds")))
        g_rounds = atoi(v);
    int threads = 1;
    if ((v = arg_value(argc, argv, "threads")))
        threads = atoi(v);
    if (threads < 1 || threads > 16 || g_rounds < 1)
        die("bad threads or rounds");
    pthread_t t[16];
    for (int i = 1; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            die("pthread_create");
    worker((void *)0);
    for (int i = 1; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("{\"ok\":%s,\"checked\":%ld,\"nulls\":%ld,\"bad\":%ld}\n", g_bad ? "false" : "true", (long)g_checked,
           (long)g_nulls, (long)g_bad);
    return g_bad ? 1 : 0;
}
