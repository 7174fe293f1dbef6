/* unit_proc.c - line reader and smaps parser on synthetic text (tiny buffers
 * to exercise refills and over-long lines), plus a live /proc/self/smaps
 * sanity check. */
#include "proc.h"
#include "unit.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int memfd_with(const char *text)
{
    int fd = memfd_create("unit", 0);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        abort();
    lseek(fd, 0, SEEK_SET);
    return fd;
}

static void test_lines(void)
{
    char buf[8];
    struct ht_lines l;
    const char *s;
    size_t n;
    int fd = memfd_with("ab\n\nthis line is long\nxyz");
    ht_lines_init(&l, fd, buf, sizeof buf);
    CHECK(ht_lines_next(&l, &s, &n) == 1 && n == 2 && memcmp(s, "ab", 2) == 0);
    CHECK(ht_lines_next(&l, &s, &n) == 1 && n == 0);
    CHECK(ht_lines_next(&l, &s, &n) == 1 && n == 8 && memcmp(s, "this lin", 8) == 0);
    CHECK(ht_lines_next(&l, &s, &n) == 1 && n == 3 && memcmp(s, "xyz", 3) == 0);
    CHECK(ht_lines_next(&l, &s, &n) == 0);
    close(fd);
}

static const char SMAPS[] =
    "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]\n"
    "Size:                132 kB\n"
    "KernelPageSize:        4 kB\n"
    "Rss:                  12 kB\n"
    "AnonHugePages:         0 kB\n"
    "VmFlags: rd wr mr mw me ac sd\n"
    "7f0000000000-7f0000a00000 rw-p 00000000 00:00 0 \n"
    "Size:              10240 kB\n"
    "KernelPageSize:        4 kB\n"
    "Rss:               10240 kB\n"
    "AnonHugePages:      8192 kB\n"
    "Private_Hugetlb:       0 kB\n"
    "VmFlags: rd wr mr mw me ac sd hg\n"
    "7f0000a00000-7f0001400000 rw-p 00000000 00:0f 12345                      /anon_hugepage (deleted)\n"
    "Size:              10240 kB\n"
    "KernelPageSize:     2048 kB\n"
    "Rss:                   0 kB\n"
    "AnonHugePages:         0 kB\n"
    "Shared_Hugetlb:        0 kB\n"
    "Private_Hugetlb:   10240 kB\n"
    "VmFlags: rd wr mr mw me de ht sd\n"
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
    "Rss:                   0 kB\n";

struct collect {
    int n;
    struct ht_vma v[8];
};

static int collect_cb(const struct ht_vma *v, void *p)
{
    struct collect *c = p;
    if (c->n < 8)
        c->v[c->n++] = *v;
    return 0;
}

static void test_smaps(size_t bufsz)
{
    char *buf = malloc(bufsz);
    struct collect c = {0};
    int fd = memfd_with(SMAPS);
    CHECK(ht_smaps_scan_fd(fd, buf, bufsz, collect_cb, &c) == 0);
    close(fd);
    CHECK(c.n == 4);
    CHECK(c.v[0].start == 0x55d0c0000000ull && c.v[0].end == 0x55d0c0021000ull);
    if (bufsz >= 128)
        CHECK_STR(c.v[0].name, "[heap]");
    CHECK_STR(c.v[0].perms, "rw-p");
    CHECK(c.v[0].rss_kb == 12 && c.v[0].kernel_page_kb == 4);
    CHECK_STR(c.v[1].name, "");
    CHECK(c.v[1].anon_huge_kb == 8192 && c.v[1].rss_kb == 10240);
    CHECK(c.v[2].private_hugetlb_kb == 10240 && c.v[2].kernel_page_kb == 2048);
    if (bufsz >= 128)
        CHECK_STR(c.v[2].name, "/anon_hugepage (deleted)");
    CHECK(c.v[3].start == 0xffffffffff600000ull);
    free(buf);
}

static int stop_cb(const struct ht_vma *v, void *p)
{
    (void)v;
    return ++*(int *)p == 2;
}

static void test_live(void)
{
    /* A THP-advised, touched, 2 MB-aligned region: AnonHugePages may or may
     * not be granted, but the scan must work and stay within the range. */
    size_t len = 4u << 20;
    char *m = mmap(NULL, len + (2u << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    char *a = (char *)(((unsigned long)m + (2u << 20) - 1) & ~((2ul << 20) - 1));
    madvise(a, len, MADV_HUGEPAGE);
    memset(a, 1, len);
    long long ah = ht_smaps_anon_huge_in((uint64_t)(unsigned long)a, (uint64_t)(unsigned long)a + len);
    CHECK(ah >= 0 && ah <= (long long)len);
    int cnt = 0;
    CHECK(ht_smaps_scan_self(stop_cb, &cnt) == 0 && cnt == 2);
    munmap(m, len + (2u << 20));
    char rb[64];
    CHECK(ht_read_file("/proc/self/nonexistent", rb, sizeof rb) < 0);
    CHECK(ht_read_file("/proc/self/comm", rb, sizeof rb) > 0);
}

static void test_hugepages_counter(void)
{
    uint64_t v = 12345;
    /* No 3 kB huge page size anywhere: an error, *out untouched. */
    CHECK(ht_hugepages_counter(3, "nr_hugepages", &v) == -1 && v == 12345);
    CHECK(ht_hugepages_counter(2048, "no_such_counter", &v) == -1);
    /* Where the kernel has 2 MB hugetlb pages, the value is the file's. */
    FILE *f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
    if (f) {
        unsigned long long want = 0;
        CHECK(fscanf(f, "%llu", &want) == 1);
        fclose(f);
        CHECK(ht_hugepages_counter(2048, "free_hugepages", &v) == 0);
        CHECK(v == want);
    }
}

int main(void)
{
    test_lines();
    test_smaps(4096);
    test_smaps(64); /* forces truncation of long header lines and many refills */
    test_live();
    test_hugepages_counter();
    return unit_done("unit_proc");
}
