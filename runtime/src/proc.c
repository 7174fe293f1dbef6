/* proc.c - allocation-free /proc readers (see proc.h). */
#include "proc.h"

#include "fmt.h"
#include "sys.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>

long ht_read_file(const char *path, char *buf, size_t cap)
{
    long fd = ht_sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    size_t n = 0;
    if (fd < 0)
        return fd;
    if (cap == 0) {
        ht_sys_close((int)fd);
        return -EINVAL;
    }
    while (n + 1 < cap) {
        long r = ht_sys_read((int)fd, buf + n, cap - 1 - n);
        if (r == -EINTR)
            continue;
        if (r < 0) {
            ht_sys_close((int)fd);
            return r;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    ht_sys_close((int)fd);
    return (long)n;
}

int ht_hugepages_counter(uint64_t page_kb, const char *field, uint64_t *out)
{
    char path[128], buf[32];
    struct ht_buf b;
    hb_init(&b, path, sizeof path);
    hb_puts(&b, "/sys/kernel/mm/hugepages/hugepages-");
    hb_u64(&b, page_kb);
    hb_puts(&b, "kB/");
    hb_puts(&b, field);
    long n = ht_read_file(path, buf, sizeof buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    if (n <= 0 || ht_parse_u64(buf, (size_t)n, 10, out) != 0)
        return -1;
    return 0;
}

void ht_lines_init(struct ht_lines *l, int fd, char *buf, size_t cap)
{
    l->fd = fd;
    l->buf = buf;
    l->cap = cap;
    l->start = l->end = 0;
    l->eof = 0;
    l->skip = 0;
}

int ht_lines_next(struct ht_lines *l, const char **line, size_t *len)
{
    for (;;) {
        char *nl = l->end > l->start ? memchr(l->buf + l->start, '\n', l->end - l->start) : NULL;
        if (nl) {
            size_t s = l->start;
            size_t n = (size_t)(nl - (l->buf + s));
            l->start = s + n + 1;
            if (l->skip) {
                l->skip = 0;
                continue;
            }
            *line = l->buf + s;
            *len = n;
            return 1;
        }
        if (l->eof) {
            if (l->end > l->start && !l->skip) {
                *line = l->buf + l->start;
                *len = l->end - l->start;
                l->start = l->end;
                return 1;
            }
            return 0;
        }
        /* Compact, then refill. */
        if (l->start > 0) {
            memmove(l->buf, l->buf + l->start, l->end - l->start);
            l->end -= l->start;
            l->start = 0;
        }
        if (l->end == l->cap) {
            /* Line longer than the buffer: hand out the truncated head and
             * drop the rest of it. */
            if (l->skip) {
                l->end = 0;
                continue;
            }
            *line = l->buf;
            *len = l->end;
            l->start = l->end = 0;
            l->skip = 1;
            return 1;
        }
        long r = ht_sys_read(l->fd, l->buf + l->end, l->cap - l->end);
        if (r == -EINTR)
            continue;
        if (r < 0)
            return (int)r;
        if (r == 0)
            l->eof = 1;
        else
            l->end += (size_t)r;
    }
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* "start-end perms offset dev inode   name" */
static int parse_header(const char *s, size_t n, struct ht_vma *v)
{
    size_t i = 0, j;
    memset(v, 0, sizeof *v);
    for (j = i; j < n && is_hex(s[j]); j++)
        ;
    if (j == i || j >= n || s[j] != '-' || ht_parse_u64(s + i, j - i, 16, &v->start))
        return -1;
    i = j + 1;
    for (j = i; j < n && is_hex(s[j]); j++)
        ;
    if (j == i || ht_parse_u64(s + i, j - i, 16, &v->end))
        return -1;
    i = j;
    /* perms, offset, dev, inode */
    for (int f = 0; f < 4; f++) {
        while (i < n && s[i] == ' ')
            i++;
        j = i;
        while (j < n && s[j] != ' ')
            j++;
        if (f == 0) {
            size_t k = j - i < 4 ? j - i : 4;
            memcpy(v->perms, s + i, k);
            v->perms[k] = 0;
        }
        i = j;
    }
    while (i < n && s[i] == ' ')
        i++;
    size_t k = n - i < sizeof v->name - 1 ? n - i : sizeof v->name - 1;
    memcpy(v->name, s + i, k);
    v->name[k] = 0;
    return 0;
}

/* "Name:   123 kB" -> value of the first number. */
static int field(const char *s, size_t n, const char *name, uint64_t *out)
{
    size_t k = strlen(name);
    if (n <= k || memcmp(s, name, k) != 0 || s[k] != ':')
        return 0;
    size_t i = k + 1;
    while (i < n && s[i] == ' ')
        i++;
    size_t j = i;
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    if (j > i)
        ht_parse_u64(s + i, j - i, 10, out);
    return 1;
}

int ht_smaps_scan_fd(int fd, char *buf, size_t cap, ht_vma_cb cb, void *ctx)
{
    struct ht_lines l;
    struct ht_vma v;
    int have = 0;
    const char *s;
    size_t n;
    int r;

    ht_lines_init(&l, fd, buf, cap);
    while ((r = ht_lines_next(&l, &s, &n)) > 0) {
        if (n > 0 && is_hex(s[0])) {
            struct ht_vma nv;
            if (parse_header(s, n, &nv) != 0)
                continue;
            if (have && cb(&v, ctx))
                return 0;
            v = nv;
            have = 1;
            continue;
        }
        if (!have)
            continue;
        if (field(s, n, "Rss", &v.rss_kb) || field(s, n, "AnonHugePages", &v.anon_huge_kb) ||
            field(s, n, "Private_Hugetlb", &v.private_hugetlb_kb) ||
            field(s, n, "Shared_Hugetlb", &v.shared_hugetlb_kb) ||
            field(s, n, "KernelPageSize", &v.kernel_page_kb))
            continue;
    }
    if (r < 0)
        return r;
    if (have)
        cb(&v, ctx);
    return 0;
}

int ht_smaps_scan_self(ht_vma_cb cb, void *ctx)
{
    char buf[4096];
    long fd = ht_sys_open("/proc/self/smaps", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return (int)fd;
    int r = ht_smaps_scan_fd((int)fd, buf, sizeof buf, cb, ctx);
    ht_sys_close((int)fd);
    return r;
}

struct anon_ctx {
    uint64_t start, end;
    uint64_t bytes;
};

static int anon_cb(const struct ht_vma *v, void *p)
{
    struct anon_ctx *c = p;
    if (v->start >= c->end)
        return 1; /* smaps is sorted by address */
    if (v->end <= c->start)
        return 0;
    uint64_t lo = v->start > c->start ? v->start : c->start;
    uint64_t hi = v->end < c->end ? v->end : c->end;
    uint64_t ah = v->anon_huge_kb * 1024;
    c->bytes += ah < hi - lo ? ah : hi - lo;
    return 0;
}

long long ht_smaps_anon_huge_in(uint64_t start, uint64_t end)
{
    struct anon_ctx c = {start, end, 0};
    int r = ht_smaps_scan_self(anon_cb, &c);
    if (r < 0)
        return r;
    return (long long)c.bytes;
}

/* ---- hugetlb cgroup limits ---- */

/* The cgroup2 mount point from /proc/self/mountinfo ("... MOUNTPOINT ... - cgroup2 ..."). */
static int cgroup2_mount(char *out, size_t cap)
{
    char buf[2048];
    long fd = ht_sys_open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct ht_lines l;
    const char *line;
    size_t n;
    int found = -1;
    ht_lines_init(&l, (int)fd, buf, sizeof buf);
    while (found < 0 && ht_lines_next(&l, &line, &n) > 0) {
        const char *dash = NULL;
        for (size_t i = 0; i + 3 <= n; i++)
            if (line[i] == ' ' && line[i + 1] == '-' && line[i + 2] == ' ') {
                dash = line + i + 3;
                break;
            }
        if (!dash || (size_t)(line + n - dash) < 8 || memcmp(dash, "cgroup2 ", 8) != 0)
            continue;
        /* Field 5 is the mount point. */
        const char *p = line, *end = line + n;
        for (int f = 0; f < 4 && p < end; f++) {
            while (p < end && *p != ' ')
                p++;
            if (p < end)
                p++;
        }
        const char *q = p;
        while (q < end && *q != ' ')
            q++;
        if ((size_t)(q - p) + 1 > cap || q == p)
            break;
        memcpy(out, p, (size_t)(q - p));
        out[q - p] = 0;
        found = 0;
    }
    ht_sys_close((int)fd);
    return found;
}

static int limited_now(uint64_t page_kb)
{
    char cg[1024], mnt[512], path[1024 + 512 + 32], v[64];
    if (ht_read_file("/proc/self/cgroup", cg, sizeof cg) <= 0)
        return 0;
    /* The v2 line: "0::/some/path". */
    char *p = cg;
    for (;;) {
        if (p[0] == '0' && p[1] == ':' && p[2] == ':')
            break;
        char *nl = strchr(p, '\n');
        if (!nl)
            return 0;
        p = nl + 1;
    }
    p += 3;
    char *nl = strchr(p, '\n');
    if (nl)
        *nl = 0;
    if (cgroup2_mount(mnt, sizeof mnt) != 0)
        return 0;
    const char *file = page_kb == (1u << 20) ? "/hugetlb.1GB.max" : "/hugetlb.2MB.max";
    /* From the process's cgroup up to the root (which has no limit files). */
    size_t plen = strlen(p);
    while (plen > 1) {
        struct ht_buf b;
        hb_init(&b, path, sizeof path);
        hb_puts(&b, mnt);
        hb_putn(&b, p, plen);
        hb_puts(&b, file);
        if (b.trunc)
            return 0;
        long r = ht_read_file(path, v, sizeof v);
        if (r > 0 && strncmp(v, "max", 3) != 0)
            return 1;
        while (plen > 0 && p[plen - 1] != '/')
            plen--;
        if (plen > 0)
            plen--; /* the '/' */
    }
    return 0;
}

int ht_hugetlb_cgroup_limited(uint64_t page_kb)
{
    static _Atomic int cache[2] = {-1, -1};
    int i = page_kb == (1u << 20);
    int c = atomic_load_explicit(&cache[i], memory_order_acquire);
    if (c < 0) {
        c = limited_now(page_kb);
        atomic_store_explicit(&cache[i], c, memory_order_release);
    }
    return c;
}
