/* htdump - print and check a hugetune allocation log (docs/formats.md §2).
 *
 *   htdump [-c|--check] [-q] [--raw] [--maps] LOG
 *
 * Reads versions 1 and 2. Default: header, then one line per event in event
 * order (by seq; a version-2 log without seqs is put in order by time, each
 * thread's events keeping their order, and numbered 1..N), MODULE events with
 * their path and segments. Times are CLOCK_MONOTONIC ns (version 2: converted
 * from TSC ticks with the log's calibration pairs). --raw keeps file order.
 * --maps prints the MAPS text. -q prints only the per-kind counts. --check
 * validates the structure (magic, version, chunk tags and lengths, known
 * kinds, field widths, blob layouts, skipped events equal to the ones written
 * before, times non-decreasing within a thread's chunk) and that the seqs are
 * exactly 1..N; exit status 1 on any problem. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rec {
    uint16_t kind, flags;
    uint32_t tid;
    uint64_t seq, time, addr, size, arg, arg2, caller;
};

struct item {
    struct rec r;
    size_t off;    /* file offset of the record / event */
    size_t pl;     /* payload offset (blobs) */
    uint32_t chunk; /* version 2: chunk index, event index in it */
    uint32_t idx;
};

static const char *kind_name(unsigned k)
{
    static const char *const n[] = {
        [1] = "MALLOC", [2] = "CALLOC", [3] = "REALLOC", [4] = "FREE",
        [5] = "POSIX_MEMALIGN", [6] = "ALIGNED_ALLOC", [7] = "MEMALIGN", [8] = "VALLOC",
        [9] = "PVALLOC", [10] = "MMAP", [11] = "MUNMAP", [12] = "MREMAP",
        [13] = "REALLOCARRAY", [14] = "RANGE_CALL", [20] = "THREAD", [21] = "MODULE", [22] = "MAPS",
        [23] = "OWN_REGION", [24] = "STACK", [25] = "FORK", [26] = "EXEC",
    };
    if (k < sizeof n / sizeof n[0] && n[k])
        return n[k];
    return NULL;
}

static int is_blob(unsigned k) { return k == 21 || k == 22 || k == 26; }

/* Version 2: which of size/arg/arg2/caller a kind stores (formats.md §2.4). */
#define F_SIZE 1u
#define F_ARG 2u
#define F_ARG2 4u
#define F_CALLER 8u
static unsigned kind_fields(unsigned k)
{
    switch (k) {
    case 1: return F_SIZE | F_CALLER;
    case 3: case 6: case 7: case 8: case 9: case 11: case 13: return F_SIZE | F_ARG | F_CALLER;
    case 4: return F_CALLER;
    case 20: return 0;
    case 21: case 22: return F_SIZE | F_ARG;
    case 23: return F_SIZE;
    case 24: return F_SIZE | F_ARG | F_ARG2;
    case 25: return F_ARG | F_CALLER;
    default: return F_SIZE | F_ARG | F_ARG2 | F_CALLER; /* 2, 5, 10, 12, 26 */
    }
}

static int problems;
static void problem(const char *msg, size_t off)
{
    if (problems < 20)
        fprintf(stderr, "htdump: %s (offset %zu)\n", msg, off);
    problems++;
}

static uint32_t u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint64_t unzz(uint64_t v) { return (v >> 1) ^ (0 - (v & 1)); }

static int cmp_seq(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    return x->r.seq < y->r.seq ? -1 : x->r.seq > y->r.seq;
}

struct items {
    struct item *v;
    size_t n, cap;
};
static struct item *push(struct items *it)
{
    if (it->n == it->cap) {
        it->cap = it->cap ? it->cap * 2 : 1024;
        it->v = realloc(it->v, it->cap * sizeof *it->v);
        if (!it->v) {
            fprintf(stderr, "htdump: out of memory\n");
            exit(2);
        }
    }
    return &it->v[it->n++];
}

/* ---- version 1 ---- */

static void parse_v1(const unsigned char *d, size_t n, struct items *it)
{
    size_t off = 64;
    while (off + 64 <= n) {
        struct item *x = push(it);
        memset(x, 0, sizeof *x);
        memcpy(&x->r.kind, d + off, 2);
        memcpy(&x->r.flags, d + off + 2, 2);
        x->r.tid = u32(d + off + 4);
        x->r.seq = u64(d + off + 8);
        x->r.time = u64(d + off + 16);
        x->r.addr = u64(d + off + 24);
        x->r.size = u64(d + off + 32);
        x->r.arg = u64(d + off + 40);
        x->r.arg2 = u64(d + off + 48);
        x->r.caller = u64(d + off + 56);
        x->off = off;
        x->pl = off + 64;
        if (!kind_name(x->r.kind) || x->r.kind > 23)
            problem("unknown record kind", off);
        off += 64;
        if (is_blob(x->r.kind)) {
            uint64_t pad = (x->r.size + 7) & ~7ull;
            if (x->r.size > n || off + pad > n) {
                problem("blob payload beyond end of file", off);
                return;
            }
            for (uint64_t k = x->r.size; k < pad; k++)
                if (d[off + k] != 0)
                    problem("non-zero blob padding", off + k);
            off += pad;
        }
    }
    if (off != n)
        problem("trailing bytes after the last record", off);
}

/* ---- version 2 ---- */

struct chunk {
    uint32_t tid, events, skip;
    size_t first; /* index of its first event in items */
};

/* Calibration: a (ticks, ns) pair with the lowest and the highest ticks. */
static uint64_t cal_lo_t, cal_lo_ns, cal_hi_t, cal_hi_ns;
static int cal_n;
static void cal_add(uint64_t t, uint64_t ns)
{
    if (t == 0 && ns == 0)
        return;
    if (cal_n == 0 || t < cal_lo_t) {
        cal_lo_t = t;
        cal_lo_ns = ns;
    }
    if (cal_n == 0 || t > cal_hi_t) {
        cal_hi_t = t;
        cal_hi_ns = ns;
    }
    cal_n++;
}
static uint64_t to_ns(uint64_t t)
{
    if (cal_n == 0 || cal_hi_t == cal_lo_t)
        return cal_lo_ns + (t - cal_lo_t);
    long double r = (long double)(cal_hi_ns - cal_lo_ns) / (long double)(cal_hi_t - cal_lo_t);
    return (uint64_t)((long double)cal_lo_ns + ((long double)t - (long double)cal_lo_t) * r);
}

static int same_event(const struct rec *a, const struct rec *b)
{
    return a->kind == b->kind && a->flags == b->flags && a->seq == b->seq && a->time == b->time &&
           a->addr == b->addr && a->size == b->size && a->arg == b->arg && a->arg2 == b->arg2 &&
           a->caller == b->caller;
}

static struct chunk *g_chunks;
static size_t g_nchunks;
static unsigned long g_backwards;

static void parse_v2(const unsigned char *d, size_t n, int with_seq, struct items *it)
{
    size_t off = 128, cap = 0;
    while (off < n) {
        if (n - off >= 8 && u64(d + off) == 0) {
            /* A hole: space reserved by a writer that never wrote it. */
            size_t start = off;
            while (off + 8 <= n && u64(d + off) == 0)
                off += 8;
            problem("zero-filled hole (a writer died before writing its chunk)", start);
            if (off + 8 > n)
                break;
            continue;
        }
        if (n - off < 40) {
            problem("truncated chunk header", off);
            return;
        }
        const unsigned char *h = d + off;
        if (u32(h) != 0x4b435448u) {
            problem("bad chunk tag", off);
            return;
        }
        uint32_t tid = u32(h + 4), bytes = u32(h + 8), events = u32(h + 12), skip = u32(h + 16);
        if (skip > events)
            problem("chunk skips more events than it holds", off);
        cal_add(u64(h + 24), u64(h + 32));
        size_t total = 40 + (((size_t)bytes + 7) & ~(size_t)7);
        if (total > n - off) {
            problem("chunk beyond end of file", off);
            return;
        }
        if (g_nchunks == cap) {
            cap = cap ? cap * 2 : 256;
            g_chunks = realloc(g_chunks, cap * sizeof *g_chunks);
        }
        struct chunk *c = &g_chunks[g_nchunks];
        c->tid = tid;
        c->events = events;
        c->skip = skip;
        c->first = it->n;
        uint64_t prev_seq = 0, prev_time = 0, prev_addr = 0, last_caller[16] = {0};
        size_t p = off + 40, end = off + 40 + bytes;
        for (uint32_t e = 0; e < events; e++) {
            if (p >= end) {
                problem("chunk has fewer events than its header says", p);
                break;
            }
            unsigned op = d[p], kind = op & 63, longt = (op & 0x80) != 0;
            struct item *x = push(it);
            memset(x, 0, sizeof *x);
            x->off = p;
            x->chunk = (uint32_t)g_nchunks;
            x->idx = e;
            x->r.kind = (uint16_t)kind;
            x->r.flags = (uint16_t)((op >> 6) & 1);
            x->r.tid = tid;
            if (!kind_name(kind))
                problem("unknown event kind", p);
            size_t q = p + 1;
            uint64_t dt = 0;
            if (!longt) {
                if (q + 2 > end) {
                    problem("event beyond its chunk", p);
                    break;
                }
                dt = (uint64_t)d[q] | ((uint64_t)d[q + 1] << 8);
                q += 2;
            }
            unsigned m = kind_fields(kind);
            unsigned nf = (unsigned)with_seq + longt + 1 + !!(m & F_SIZE) + !!(m & F_ARG) +
                          !!(m & F_ARG2) + !!(m & F_CALLER);
            size_t nb = (nf + 1) / 2, nib = q;
            if (q + nb > end) {
                problem("event beyond its chunk", p);
                break;
            }
            uint64_t v[7];
            q += nb;
            int bad = 0;
            for (unsigned i = 0; i < nf; i++) {
                unsigned w = (d[nib + i / 2] >> (4 * (i % 2))) & 15;
                if (w > 8 || q + w > end) {
                    problem(w > 8 ? "field width above 8" : "event beyond its chunk", p);
                    bad = 1;
                    break;
                }
                v[i] = 0;
                memcpy(&v[i], d + q, w);
                q += w;
            }
            if (bad)
                break;
            if (nf % 2 && (d[nib + nb - 1] >> 4) != 0)
                problem("non-zero unused width nibble", p);
            unsigned i = 0;
            if (with_seq)
                x->r.seq = prev_seq = prev_seq + unzz(v[i++]);
            if (longt)
                dt = unzz(v[i++]);
            x->r.time = prev_time = prev_time + dt;
            x->r.addr = prev_addr = prev_addr + unzz(v[i++]);
            if (m & F_SIZE)
                x->r.size = v[i++];
            if (m & F_ARG)
                x->r.arg = v[i++];
            if (m & F_ARG2)
                x->r.arg2 = v[i++];
            if (m & F_CALLER)
                x->r.caller = last_caller[kind & 15] = last_caller[kind & 15] + unzz(v[i++]);
            x->pl = q;
            if (is_blob(kind)) {
                if (x->r.size > end - q) {
                    problem("blob payload beyond its chunk", p);
                    break;
                }
                q += x->r.size;
            }
            /* A time read before a signal handler's events were appended
             * (munmap) may be earlier than theirs: counted, not an error. */
            if (e > 0 && x->r.time < it->v[it->n - 2].r.time)
                g_backwards++;
            p = q;
        }
        if (p != end)
            problem("chunk length does not match its events", p);
        for (size_t k = end; k < off + total; k++)
            if (d[k] != 0)
                problem("non-zero chunk padding", k);
        /* Skipped events repeat the thread's previous chunk. */
        if (skip) {
            const struct chunk *prev = NULL;
            for (size_t k = g_nchunks; k-- > 0;)
                if (g_chunks[k].tid == tid) {
                    prev = &g_chunks[k];
                    break;
                }
            if (!prev || prev->events < skip)
                problem("skipped events without an earlier chunk holding them", off);
            else
                for (uint32_t e = 0; e < skip && c->first + e < it->n; e++)
                    if (!same_event(&it->v[prev->first + e].r, &it->v[c->first + e].r)) {
                        problem("skipped event differs from the one written before", off);
                        break;
                    }
        }
        g_nchunks++;
        off += total;
    }
}

/* Drops skipped events; without seqs, merges chunks by time (each chunk's
 * order kept) and numbers the events 1..N. */
static void order_v2(struct items *it, int with_seq)
{
    struct items out = {0, 0, 0};
    size_t *pos = calloc(g_nchunks + 1, sizeof *pos);
    for (size_t c = 0; c < g_nchunks; c++)
        pos[c] = g_chunks[c].skip;
    if (with_seq) {
        for (size_t c = 0; c < g_nchunks; c++)
            for (size_t e = pos[c]; e < g_chunks[c].events && g_chunks[c].first + e < it->n; e++)
                *push(&out) = it->v[g_chunks[c].first + e];
    } else {
        /* k-way merge over the chunks: a binary heap of chunk heads keyed
         * by (time, chunk index). */
        size_t *heap = malloc((g_nchunks + 1) * sizeof *heap), hn = 0;
#define HEAD(c) (it->v[g_chunks[c].first + pos[c]])
#define LESS(a, b) (HEAD(a).r.time < HEAD(b).r.time || (HEAD(a).r.time == HEAD(b).r.time && (a) < (b)))
#define LIVE(c) (pos[c] < g_chunks[c].events && g_chunks[c].first + pos[c] < it->n)
        for (size_t c = 0; c < g_nchunks; c++) {
            if (!LIVE(c))
                continue;
            size_t i = hn++;
            heap[i] = c;
            while (i > 0 && LESS(heap[i], heap[(i - 1) / 2])) {
                size_t t = heap[i];
                heap[i] = heap[(i - 1) / 2];
                heap[(i - 1) / 2] = t;
                i = (i - 1) / 2;
            }
        }
        while (hn > 0) {
            size_t c = heap[0];
            struct item *x = push(&out);
            *x = HEAD(c);
            x->r.seq = out.n;
            pos[c]++;
            if (!LIVE(c))
                heap[0] = heap[--hn];
            for (size_t i = 0;;) {
                size_t l = 2 * i + 1, r = l + 1, m = i;
                if (l < hn && LESS(heap[l], heap[m]))
                    m = l;
                if (r < hn && LESS(heap[r], heap[m]))
                    m = r;
                if (m == i)
                    break;
                size_t t = heap[i];
                heap[i] = heap[m];
                heap[m] = t;
                i = m;
            }
        }
        free(heap);
#undef HEAD
#undef LESS
#undef LIVE
    }
    free(pos);
    free(it->v);
    *it = out;
}

int main(int argc, char **argv)
{
    int check = 0, quiet = 0, raw = 0, maps = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--check"))
            check = 1;
        else if (!strcmp(argv[i], "-q"))
            quiet = 1;
        else if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else if (!strcmp(argv[i], "--maps"))
            maps = 1;
        else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: htdump [-c|--check] [-q] [--raw] [--maps] LOG\n");
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long fsz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc(fsz > 0 ? (size_t)fsz : 1);
    if (!d || fread(d, 1, (size_t)fsz, f) != (size_t)fsz) {
        fprintf(stderr, "htdump: cannot read %s\n", path);
        return 2;
    }
    fclose(f);
    size_t n = (size_t)fsz;
    if (n < 64 || memcmp(d, "HTALLOC\0", 8) != 0) {
        fprintf(stderr, "htdump: %s: not a hugetune allocation log\n", path);
        return 1;
    }
    uint32_t ver = u32(d + 8), hsz = u32(d + 12), pid = u32(d + 16), ppid = u32(d + 20);
    uint64_t start = u64(d + 24), mbase = u64(d + 32), mspan = u64(d + 40), thr = u64(d + 48);
    uint32_t flags = 0, gen = 0;
    if (!((ver == 1 && hsz == 64) || (ver == 2 && hsz == 128 && n >= 128))) {
        fprintf(stderr, "htdump: %s: unsupported log version %u (header size %u)\n", path, ver, hsz);
        return 1;
    }
    if (ver == 2) {
        flags = u32(d + 56);
        gen = u32(d + 60);
        if (flags & ~3u)
            problem("unknown header flags", 56);
        if ((flags & 1) != (mspan != 0))
            problem("seq flag and markers disagree", 56);
        cal_add(u64(d + 64), u64(d + 72));
        cal_add(u64(d + 96), u64(d + 104));
    }
    int with_seq = ver == 1 || (flags & 1);
    if (!quiet)
        printf("# log %s: version %u pid %u ppid %u exec-gen %u start %llu markers 0x%llx+0x%llx "
               "threshold %llu clock %s\n",
               path, ver, pid, ppid, gen, (unsigned long long)start, (unsigned long long)mbase,
               (unsigned long long)mspan, (unsigned long long)thr,
               ver == 2 && (flags & 2) ? "tsc" : "monotonic");
    if ((mbase == 0) != (mspan == 0) || (mspan & (mspan - 1)))
        problem("inconsistent marker base/span", 32);

    struct items it = {0, 0, 0};
    if (ver == 1)
        parse_v1(d, n, &it);
    else {
        parse_v2(d, n, (flags & 1) != 0, &it);
        if (!raw)
            order_v2(&it, (flags & 1) != 0);
        if (flags & 2)
            for (size_t i = 0; i < it.n; i++)
                it.v[i].r.time = to_ns(it.v[i].r.time);
    }

    unsigned long counts[64] = {0};
    for (size_t i = 0; i < it.n; i++)
        if (it.v[i].r.kind < 64)
            counts[it.v[i].r.kind]++;
    if (with_seq || raw) {
        struct item *s = malloc((it.n + 1) * sizeof *s);
        memcpy(s, it.v, it.n * sizeof *s);
        qsort(s, it.n, sizeof *s, cmp_seq);
        if (check && !(ver == 2 && raw && !(flags & 1)))
            for (size_t i = 0; i < it.n; i++)
                if (s[i].r.seq != i + 1) {
                    problem("seq numbers not unique and contiguous from 1", s[i].off);
                    break;
                }
        if (!raw)
            memcpy(it.v, s, it.n * sizeof *s);
        free(s);
    }

    for (size_t i = 0; i < it.n && !quiet; i++) {
        const struct rec *r = &it.v[i].r;
        const char *k = kind_name(r->kind);
        printf("%8llu %-14s%s tid=%-7u t=%llu addr=0x%llx size=%llu arg=0x%llx arg2=0x%llx caller=0x%llx\n",
               (unsigned long long)r->seq, k ? k : "?", r->flags & 1 ? " PREINIT" : "", r->tid,
               (unsigned long long)r->time, (unsigned long long)r->addr, (unsigned long long)r->size,
               (unsigned long long)r->arg, (unsigned long long)r->arg2, (unsigned long long)r->caller);
        const unsigned char *pl = d + it.v[i].pl;
        if (!is_blob(r->kind) || it.v[i].pl + r->size > n)
            continue;
        if (r->kind == 21) {
            size_t plen = strnlen((const char *)pl, r->size);
            if (check && (plen == r->size || ((plen + 1 + 7) & ~7ull) + r->arg * 32 != r->size))
                problem("bad MODULE payload layout", it.v[i].off);
            printf("         path=%.*s\n", (int)plen, pl);
            const unsigned char *sg = pl + ((plen + 1 + 7) & ~7ull);
            for (uint64_t s = 0; s < r->arg && sg + 32 <= pl + r->size; s++, sg += 32)
                printf("         seg vaddr=0x%llx memsz=0x%llx filesz=0x%llx flags=%c%c%c\n",
                       (unsigned long long)u64(sg), (unsigned long long)u64(sg + 8),
                       (unsigned long long)u64(sg + 16), u32(sg + 24) & 4 ? 'r' : '-',
                       u32(sg + 24) & 2 ? 'w' : '-', u32(sg + 24) & 1 ? 'x' : '-');
        }
        if (r->kind == 26)
            printf("         path=%.*s\n", (int)strnlen((const char *)pl, r->size), pl);
        if (r->kind == 22 && maps)
            printf("%.*s", (int)r->size, pl);
    }
    if (quiet && check)
        for (size_t i = 0; i < it.n; i++) {
            const struct rec *r = &it.v[i].r;
            const unsigned char *pl = d + it.v[i].pl;
            if (r->kind == 21 && it.v[i].pl + r->size <= n) {
                size_t plen = strnlen((const char *)pl, r->size);
                if (plen == r->size || ((plen + 1 + 7) & ~7ull) + r->arg * 32 != r->size)
                    problem("bad MODULE payload layout", it.v[i].off);
            }
        }
    if (g_backwards)
        printf("# note: %lu events have an earlier time than the event before them in their chunk\n",
               g_backwards);
    printf("# %zu records:", it.n);
    for (unsigned k = 0; k < 64; k++)
        if (counts[k])
            printf(" %s=%lu", kind_name(k) ? kind_name(k) : "?", counts[k]);
    printf("\n");
    if (check) {
        if (problems)
            printf("# check FAILED: %d problem(s)\n", problems);
        else
            printf("# check ok\n");
    }
    free(it.v);
    free(g_chunks);
    free(d);
    return check && problems ? 1 : 0;
}
