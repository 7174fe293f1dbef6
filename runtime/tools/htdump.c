/* htdump - print and check a hugetune allocation log (docs/formats.md §2).
 *
 *   htdump [-c|--check] [-q] [--raw] [--maps] LOG
 *
 * Default: header, then one line per record sorted by seq (MODULE blobs with
 * their path and segments). --raw keeps file order. --maps prints the MAPS
 * text. -q prints only the per-kind counts. --check validates the structure
 * (magic, version, known kinds, blobs inside the file, zero padding) and that
 * seq numbers are unique and contiguous from 1; exit status 1 on any problem. */
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
    size_t off; /* file offset of the record */
};

static const char *kind_name(unsigned k)
{
    static const char *const n[] = {
        [1] = "MALLOC", [2] = "CALLOC", [3] = "REALLOC", [4] = "FREE",
        [5] = "POSIX_MEMALIGN", [6] = "ALIGNED_ALLOC", [7] = "MEMALIGN", [8] = "VALLOC",
        [9] = "PVALLOC", [10] = "MMAP", [11] = "MUNMAP", [12] = "MREMAP",
        [13] = "REALLOCARRAY", [20] = "THREAD", [21] = "MODULE", [22] = "MAPS",
        [23] = "OWN_REGION",
    };
    if (k < sizeof n / sizeof n[0] && n[k])
        return n[k];
    return NULL;
}

static int is_blob(unsigned k) { return k == 21 || k == 22; }

static int cmp_seq(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    return x->r.seq < y->r.seq ? -1 : x->r.seq > y->r.seq;
}

static int problems;
static void problem(const char *msg, size_t off)
{
    if (problems < 20)
        fprintf(stderr, "htdump: %s (offset %zu)\n", msg, off);
    problems++;
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
    uint32_t ver, hsz, pid, ppid;
    uint64_t start, mbase, mspan, thr;
    memcpy(&ver, d + 8, 4);
    memcpy(&hsz, d + 12, 4);
    memcpy(&pid, d + 16, 4);
    memcpy(&ppid, d + 20, 4);
    memcpy(&start, d + 24, 8);
    memcpy(&mbase, d + 32, 8);
    memcpy(&mspan, d + 40, 8);
    memcpy(&thr, d + 48, 8);
    if (ver != 1 || hsz != 64) {
        fprintf(stderr, "htdump: %s: unsupported log version %u (header size %u)\n", path, ver, hsz);
        return 1;
    }
    if (!quiet)
        printf("# log %s: version %u pid %u ppid %u start %llu markers 0x%llx+0x%llx threshold %llu\n",
               path, ver, pid, ppid, (unsigned long long)start, (unsigned long long)mbase,
               (unsigned long long)mspan, (unsigned long long)thr);
    if ((mbase == 0) != (mspan == 0) || (mspan & (mspan - 1)))
        problem("inconsistent marker base/span", 32);

    size_t cap = n / 64 + 1, cnt = 0;
    struct item *it = malloc(cap * sizeof *it);
    unsigned long counts[64] = {0};
    size_t off = 64;
    while (off + 64 <= n) {
        struct rec r;
        memcpy(&r, d + off, 64);
        it[cnt].r = r;
        it[cnt].off = off;
        cnt++;
        if (!kind_name(r.kind))
            problem("unknown record kind", off);
        else
            counts[r.kind]++;
        off += 64;
        if (is_blob(r.kind)) {
            uint64_t pad = (r.size + 7) & ~7ull;
            if (r.size > n || off + pad > n) {
                problem("blob payload beyond end of file", off);
                break;
            }
            for (uint64_t k = r.size; k < pad; k++)
                if (d[off + k] != 0)
                    problem("non-zero blob padding", off + k);
            if (r.kind == 21) {
                size_t plen = strnlen((const char *)d + off, r.size);
                if (plen == r.size || ((plen + 1 + 7) & ~7ull) + r.arg * 32 != r.size)
                    problem("bad MODULE payload layout", off);
            }
            off += pad;
        }
    }
    if (off != n)
        problem("trailing bytes after the last record", off);

    if (!raw)
        qsort(it, cnt, sizeof *it, cmp_seq);
    else if (check) {
        struct item *s = malloc(cnt * sizeof *s);
        memcpy(s, it, cnt * sizeof *s);
        qsort(s, cnt, sizeof *s, cmp_seq);
        for (size_t i = 0; i < cnt; i++)
            if (s[i].r.seq != i + 1)
                problem("seq numbers not unique and contiguous from 1", s[i].off);
        free(s);
    }
    if (!raw && check) {
        for (size_t i = 0; i < cnt; i++)
            if (it[i].r.seq != i + 1) {
                problem("seq numbers not unique and contiguous from 1", it[i].off);
                break;
            }
    }

    for (size_t i = 0; i < cnt && !quiet; i++) {
        const struct rec *r = &it[i].r;
        const char *k = kind_name(r->kind);
        printf("%8llu %-14s tid=%-7u t=%llu addr=0x%llx size=%llu arg=0x%llx arg2=0x%llx caller=0x%llx\n",
               (unsigned long long)r->seq, k ? k : "?", r->tid, (unsigned long long)r->time,
               (unsigned long long)r->addr, (unsigned long long)r->size, (unsigned long long)r->arg,
               (unsigned long long)r->arg2, (unsigned long long)r->caller);
        const unsigned char *pl = d + it[i].off + 64;
        if (r->kind == 21 && it[i].off + 64 + r->size <= n) {
            size_t plen = strnlen((const char *)pl, r->size);
            printf("         path=%.*s\n", (int)plen, pl);
            const unsigned char *sg = pl + ((plen + 1 + 7) & ~7ull);
            for (uint64_t s = 0; s < r->arg && sg + 32 <= d + n; s++, sg += 32) {
                uint64_t v[3];
                uint32_t fl;
                memcpy(v, sg, 24);
                memcpy(&fl, sg + 24, 4);
                printf("         seg vaddr=0x%llx memsz=0x%llx filesz=0x%llx flags=%c%c%c\n",
                       (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2],
                       fl & 4 ? 'r' : '-', fl & 2 ? 'w' : '-', fl & 1 ? 'x' : '-');
            }
        }
        if (r->kind == 22 && maps && it[i].off + 64 + r->size <= n)
            printf("%.*s", (int)r->size, pl);
    }
    printf("# %zu records:", cnt);
    for (unsigned k = 0; k < 64; k++)
        if (counts[k])
            printf(" %s=%lu", kind_name(k), counts[k]);
    printf("\n");
    if (check) {
        if (problems)
            printf("# check FAILED: %d problem(s)\n", problems);
        else
            printf("# check ok\n");
    }
    free(it);
    free(d);
    return check && problems ? 1 : 0;
}
