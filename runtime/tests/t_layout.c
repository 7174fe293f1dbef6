/* t_layout - the page layout of owned blocks, checked in /proc/self/smaps and
 * /proc/self/maps (docs/formats.md section 3, "Layout of owned blocks").
 *
 *   t_layout [backing=hugetlb-2m|thp-2m|hugetlb-1g] [layout=head-tail|round-up]
 *
 * Run under a plan `heap-large BACKING` (threshold 131072) with enough pages
 * for BACKING (the caller sets the pool). Cases, each reported as an object
 * with its checks:
 *   b2m1     malloc(2 MiB + 1): one huge page + one 4 KB page (head-tail) or
 *            two huge pages (round-up); the last byte is usable
 *   b8m1     malloc(8 MiB + 1)
 *   sub      malloc(1 MiB): owned but not huge (head-tail): 4 KB pages
 *   calloc   calloc(3 MiB + 5): zero everywhere
 *   align    posix_memalign(8 MiB alignment, 3 MiB) and aligned_alloc(4 MiB, 5 MiB)
 *   grow     realloc growing in place (the space above was freed first):
 *            same pointer, contents kept, head now huge up to the new end
 *   move     realloc growing with the space above taken: contents kept
 *   shrink   realloc shrinking: whole pages beyond the end released (maps)
 *   g1       (backing=hugetlb-1g) malloc(1 GiB + 6 MiB + 1): 1 GB page, three
 *            2 MB pages, one 4 KB page
 * Prints one JSON line; exit 0 when every check passed. */
#include "tcommon.h"

#include <malloc.h>
#include <sys/mman.h>

#define MIB ((size_t)1 << 20)
#define M2 (2 * MIB)

static int g_ok = 1;
static int g_first = 1;

/* smaps of exactly [a, b) summed per VMA kind */
struct seg {
    long hugetlb_kb, anon_huge_kb, rss_kb, kernel_page_kb;
};

static struct seg range(uintptr_t a, uintptr_t b)
{
    struct smaps_info si = smaps_range(a, b);
    struct seg s = {si.private_hugetlb_kb, si.anon_huge_kb, si.rss_kb, si.kernel_page_kb};
    return s;
}

/* End of the VMA run that starts at p (adjacent VMAs merged), from maps. */
static uintptr_t mapping_end(uintptr_t p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uintptr_t end = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) != 2)
            continue;
        if (a <= p && p < b)
            end = b;
        else if (end && a == end)
            end = b; /* contiguous (head VMA, then tail VMA) */
    }
    if (f)
        fclose(f);
    return end;
}

static void report(const char *name, int ok, const char *fmt, ...)
{
    va_list ap;
    printf("%s\"%s\":{\"ok\":%s", g_first ? "" : ",", name, ok ? "true" : "false");
    g_first = 0;
    if (fmt) {
        printf(",");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
    }
    printf("}");
    if (!ok) {
        g_ok = 0;
        fprintf(stderr, "FAIL: %s\n", name);
    }
}

static const char *g_backing;

/* Expected head bytes of an n-byte block. */
static size_t head_of(size_t n)
{
    size_t h = n & ~(M2 - 1);
    if (g_round_up && h < n)
        h += M2;
    return h;
}

static int head_ok(uintptr_t p, size_t head)
{
    if (head == 0)
        return 1;
    struct seg s = range(p, p + head);
    if (strcmp(g_backing, "thp-2m") == 0)
        return s.kernel_page_kb == 4 && s.anon_huge_kb > 0;
    return s.kernel_page_kb == 2048 && (size_t)s.hugetlb_kb * 1024 == head;
}

static int tail_ok(uintptr_t p, size_t head, size_t n)
{
    if (g_round_up || n == head)
        return 1;
    struct seg s = range(p + head, p + n);
    return s.kernel_page_kb == 4 && s.hugetlb_kb == 0 && s.anon_huge_kb == 0;
}

static void one(const char *name, size_t n)
{
    unsigned char *p = malloc(n);
    if (!p)
        die("malloc %zu", n);
    memset(p, 0x5c, n);
    size_t head = head_of(n);
    size_t total = g_round_up ? head : head + ((n - head + 4095) & ~(size_t)4095);
    uintptr_t end = mapping_end((uintptr_t)p);
    int ok = ((uintptr_t)p & (M2 - 1)) == 0 && head_ok((uintptr_t)p, head) &&
             tail_ok((uintptr_t)p, head, n) && malloc_usable_size(p) == total &&
             end - (uintptr_t)p >= total && p[n - 1] == 0x5c;
    report(name, ok, "\"addr\":\"%p\",\"head\":%zu,\"usable\":%zu,\"mapped_to\":%zu", (void *)p, head,
           malloc_usable_size(p), (size_t)(end - (uintptr_t)p));
    free(p);
}

int main(int argc, char **argv)
{
    g_backing = arg_value(argc, argv, "backing");
    if (!g_backing)
        g_backing = "hugetlb-2m";
    const char *lay = arg_value(argc, argv, "layout");
    g_round_up = lay && strcmp(lay, "round-up") == 0;
    printf("{\"pid\":%ld,\"backing\":\"%s\",\"layout\":\"%s\",", (long)getpid(), g_backing,
           g_round_up ? "round-up" : "head-tail");

    one("b2m1", M2 + 1);
    one("b8m1", 8 * MIB + 1);

    /* below one huge page */
    {
        unsigned char *p = malloc(MIB);
        memset(p, 1, MIB);
        struct seg s = range((uintptr_t)p, (uintptr_t)p + MIB);
        int aligned = ((uintptr_t)p & (M2 - 1)) == 0;
        int ok = g_round_up ? aligned && head_ok((uintptr_t)p, M2)
                            : aligned && s.kernel_page_kb == 4 && s.hugetlb_kb == 0 && s.anon_huge_kb == 0 &&
                                  malloc_usable_size(p) == MIB;
        report("sub", ok, "\"usable\":%zu", malloc_usable_size(p));
        free(p);
    }

    /* calloc: zero without a memset by the library (fresh mapping) */
    {
        size_t n = 3 * MIB + 5;
        unsigned char *p = calloc(1, n);
        int ok = p != NULL;
        for (size_t i = 0; ok && i < n; i += 997)
            ok = p[i] == 0;
        ok = ok && p[n - 1] == 0;
        if (ok) {
            memset(p, 1, n); /* THP: reading zero pages maps the zero page only */
            ok = head_ok((uintptr_t)p, head_of(n));
        }
        report("calloc", ok, NULL);
        free(p);
    }

    /* alignment beyond 2 MB */
    {
        void *a = NULL;
        int rc = posix_memalign(&a, 8 * MIB, 3 * MIB);
        unsigned char *b = aligned_alloc(4 * MIB, 5 * MIB);
        int ok = rc == 0 && a && b && ((uintptr_t)a & (8 * MIB - 1)) == 0 && ((uintptr_t)b & (4 * MIB - 1)) == 0;
        if (ok) {
            memset(a, 2, 3 * MIB);
            memset(b, 3, 5 * MIB);
            ok = head_ok((uintptr_t)a, head_of(3 * MIB)) && head_ok((uintptr_t)b, head_of(5 * MIB));
        }
        report("align", ok, "\"a\":\"%p\",\"b\":\"%p\"", a, (void *)b);
        free(a);
        free(b);
    }

    /* grow in place: make the space above the block free, then grow */
    {
        unsigned char *hi = malloc(16 * MIB); /* mmap places new mappings below older ones */
        unsigned char *p = malloc(4 * MIB + 100);
        memset(p, 0x77, 4 * MIB + 100);
        free(hi);
        unsigned char *q = realloc(p, 12 * MIB + 100);
        int ok = q != NULL;
        for (size_t i = 0; ok && i < 4 * MIB + 100; i += 4093)
            ok = q[i] == 0x77;
        ok = ok && q[4 * MIB + 99] == 0x77;
        if (ok) {
            memset(q + 4 * MIB + 100, 0x78, 8 * MIB);
            ok = head_ok((uintptr_t)q, head_of(12 * MIB + 100)) && tail_ok((uintptr_t)q, head_of(12 * MIB + 100), 12 * MIB + 100);
        }
        report("grow", ok && q == p, "\"in_place\":%s,\"from\":\"%p\",\"to\":\"%p\"", q == p ? "true" : "false",
               (void *)p, (void *)q);
        free(q);
    }

    /* grow with the space above taken: moved (mremap) or copied */
    {
        unsigned char *p = malloc(4 * MIB + 100);
        unsigned char *blocker = malloc(8 * MIB); /* below p */
        memset(p, 0x66, 4 * MIB + 100);
        /* p was mapped after any free space above it was used up: take the
         * page right above p if it is free */
        uintptr_t end = mapping_end((uintptr_t)p);
        void *pin = mmap((void *)end, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        unsigned char *q = realloc(p, 10 * MIB);
        int ok = q != NULL && q != p;
        for (size_t i = 0; ok && i < 4 * MIB + 100; i += 4093)
            ok = q[i] == 0x66;
        ok = ok && q[4 * MIB + 99] == 0x66;
        if (ok) {
            memset(q, 0x67, 10 * MIB);
            ok = head_ok((uintptr_t)q, head_of(10 * MIB));
        }
        report("move", ok, "\"from\":\"%p\",\"to\":\"%p\"", (void *)p, (void *)q);
        if (pin != MAP_FAILED)
            munmap(pin, 4096);
        free(q);
        free(blocker);
    }

    /* shrink: whole pages beyond the new end are released */
    {
        unsigned char *p = malloc(10 * MIB + 7);
        memset(p, 0x44, 10 * MIB + 7);
        unsigned char *q = realloc(p, 3 * MIB);
        uintptr_t end = mapping_end((uintptr_t)q);
        int ok = q == p && q[3 * MIB - 1] == 0x44 && q[0] == 0x44;
        /* keeps the two huge pages holding 3 MiB */
        ok = ok && end - (uintptr_t)q == 2 * M2 && malloc_usable_size(q) == 2 * M2;
        report("shrink", ok, "\"mapped_to\":%zu", (size_t)(end - (uintptr_t)q));
        free(q);
    }

    if (strcmp(g_backing, "hugetlb-1g") == 0) {
        size_t n = (1u << 30) + 6 * MIB + 1;
        unsigned char *p = malloc(n);
        int ok = p != NULL && ((uintptr_t)p & ((1u << 30) - 1)) == 0;
        if (ok) {
            memset(p, 9, n);
            struct smaps_info g = smaps_range((uintptr_t)p, (uintptr_t)p + (1u << 30));
            struct smaps_info m = smaps_range((uintptr_t)p + (1u << 30), (uintptr_t)p + (1u << 30) + 6 * MIB);
            struct smaps_info t = smaps_range((uintptr_t)p + (1u << 30) + 6 * MIB, (uintptr_t)p + n);
            ok = g.kernel_page_kb == 1048576 && m.kernel_page_kb == 2048 && m.private_hugetlb_kb == 6144 &&
                 (g_round_up || (t.kernel_page_kb == 4 && malloc_usable_size(p) == (1u << 30) + 6 * MIB + 4096));
            report("g1", ok, "\"g_kb\":%ld,\"m_kb\":%ld,\"t_page_kb\":%ld", g.kernel_page_kb, m.private_hugetlb_kb,
                   t.kernel_page_kb);
        } else {
            report("g1", 0, NULL);
        }
        free(p);
    }
    printf(",\"ok\":%s}\n", g_ok ? "true" : "false");
    return g_ok ? 0 : 1;
}
