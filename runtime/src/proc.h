/* proc.h - /proc and /sys readers that never allocate.
 *
 * Why: THP verification runs inside free() (a hook) and at exit; it must parse
 * /proc/self/smaps with a fixed buffer. The parser takes an fd so unit tests can
 * feed it synthetic text. */
#ifndef HT_PROC_H
#define HT_PROC_H

#include <stddef.h>
#include <stdint.h>

/* Reads up to cap-1 bytes of a file, NUL-terminates. Returns the byte count or
 * -errno. */
long ht_read_file(const char *path, char *buf, size_t cap);

/* One counter of a hugetlb page size, /sys/kernel/mm/hugepages/hugepages-<kb>kB/<field>
 * (nr_hugepages, free_hugepages, ...). 0 and *out set, or -1 (no such size, not a
 * number). */
int ht_hugepages_counter(uint64_t page_kb, const char *field, uint64_t *out);

/* Line reader over an fd with a fixed buffer. Lines longer than the buffer are
 * returned truncated (the rest of the line is skipped). */
struct ht_lines {
    int fd;
    char *buf;
    size_t cap, start, end;
    int eof;
    int skip; /* skipping the tail of an over-long line */
};
void ht_lines_init(struct ht_lines *l, int fd, char *buf, size_t cap);
/* 1: line and len set (no '\n', not NUL-terminated); 0: EOF; <0: -errno. */
int ht_lines_next(struct ht_lines *l, const char **line, size_t *len);

/* One VMA of /proc/PID/smaps. Sizes in kB as printed by the kernel. */
struct ht_vma {
    uint64_t start, end;
    char perms[5];
    char name[256]; /* pathname / [heap] / "" (truncated) */
    uint64_t rss_kb;
    uint64_t anon_huge_kb;
    uint64_t private_hugetlb_kb;
    uint64_t shared_hugetlb_kb;
    uint64_t kernel_page_kb;
};
/* Called once per VMA after all its fields were read; return non-zero to stop. */
typedef int (*ht_vma_cb)(const struct ht_vma *v, void *ctx);

/* Parses smaps text from fd with the given scratch buffer. Returns 0, or
 * -errno on read error. */
int ht_smaps_scan_fd(int fd, char *buf, size_t cap, ht_vma_cb cb, void *ctx);
/* Same on /proc/self/smaps with a 4 KiB stack buffer. */
int ht_smaps_scan_self(ht_vma_cb cb, void *ctx);

/* Sum of AnonHugePages bytes over [start, end): for each overlapping VMA,
 * min(AnonHugePages, overlap) (a VMA may have merged with a neighbour).
 * Returns bytes, or a negative errno. */
long long ht_smaps_anon_huge_in(uint64_t start, uint64_t end);

/* Whether this process's cgroup (v2), or one above it, limits the hugetlb
 * pages of `page_kb` it may fault in (hugetlb.<size>.max is not "max"). Such a
 * limit is charged at fault time, not at mmap: past it a touch is SIGBUS.
 * Read once (/proc/self/cgroup, /proc/self/mountinfo, the cgroup files), then
 * cached; 0 when anything cannot be read. */
int ht_hugetlb_cgroup_limited(uint64_t page_kb);

#endif
