/* tcommon.h - helpers shared by the test programs (plain C, stdio allowed:
 * these are ordinary programs run under LD_PRELOAD=libhugetune.so). */
#ifndef HT_TCOMMON_H
#define HT_TCOMMON_H

#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static inline long tid_self(void) { return (long)syscall(SYS_gettid); }

/* smaps fields summed over the VMAs overlapping [start, end). kernel_page_kb
 * is the one of the VMA containing start. */
struct smaps_info {
    long rss_kb, anon_huge_kb, private_hugetlb_kb, shared_hugetlb_kb, kernel_page_kb;
    int vmas;
};

static inline struct smaps_info smaps_range(uintptr_t start, uintptr_t end)
{
    struct smaps_info si = {0, 0, 0, 0, 0, 0};
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, contains = 0;
    if (!f)
        die("cannot open smaps");
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        long v;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a < end && b > start;
            contains = a <= start && start < b;
            si.vmas += in;
            continue;
        }
        if (!in)
            continue;
        if (sscanf(line, "Rss: %ld kB", &v) == 1)
            si.rss_kb += v;
        else if (sscanf(line, "AnonHugePages: %ld kB", &v) == 1)
            si.anon_huge_kb += v;
        else if (sscanf(line, "Private_Hugetlb: %ld kB", &v) == 1)
            si.private_hugetlb_kb += v;
        else if (sscanf(line, "Shared_Hugetlb: %ld kB", &v) == 1)
            si.shared_hugetlb_kb += v;
        else if (contains && sscanf(line, "KernelPageSize: %ld kB", &v) == 1)
            si.kernel_page_kb = v;
    }
    fclose(f);
    return si;
}

static inline void print_smaps(const char *key, const void *p, size_t size, struct smaps_info si)
{
    printf("\"%s\":{\"addr\":\"%p\",\"size\":%zu,\"private_hugetlb_kb\":%ld,\"shared_hugetlb_kb\":%ld,"
           "\"anon_huge_kb\":%ld,\"kernel_page_kb\":%ld,\"rss_kb\":%ld,\"vmas\":%d}",
           key, p, size, si.private_hugetlb_kb, si.shared_hugetlb_kb, si.anon_huge_kb, si.kernel_page_kb,
           si.rss_kb, si.vmas);
}

static int bias_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)size;
    *(uintptr_t *)p = (uintptr_t)info->dlpi_addr;
    return 1; /* the first entry is the main program */
}

static inline uintptr_t exe_bias(void)
{
    uintptr_t b = 0;
    dl_iterate_phdr(bias_cb, &b);
    return b;
}

static inline const char *exe_path(void)
{
    static char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

/* Optional "key=value" arguments. */
static inline const char *arg_value(int argc, char **argv, const char *key)
{
    size_t n = strlen(key);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=')
            return argv[i] + n + 1;
    return NULL;
}

/* Layout of owned blocks the checks expect: "head-tail" (default: floor(size
 * / 2 MB) huge pages, the rest on 4 KB pages) or "round-up" (whole huge
 * pages); set from the test's layout= argument. */
static int g_round_up;

/* Checks an expected backing of [p, p+size): hugetlb-2m, thp-2m, 4k (owned on
 * 4 KB pages), glibc (not owned), owned (any owned backing), any. */
static inline int backing_ok(const char *want, const void *p, size_t size, struct smaps_info si)
{
    int aligned = ((uintptr_t)p & ((2u << 20) - 1)) == 0;
    size_t m2 = (size_t)2 << 20;
    long whole_kb = (long)((g_round_up ? (size + m2 - 1) & ~(m2 - 1) : size & ~(m2 - 1)) >> 10);
    if (!want || strcmp(want, "any") == 0)
        return 1;
    if (strcmp(want, "hugetlb-2m") == 0)
        return aligned && si.kernel_page_kb == 2048 && si.private_hugetlb_kb == whole_kb;
    if (strcmp(want, "thp-2m") == 0)
        return aligned && si.kernel_page_kb == 4 && si.anon_huge_kb > 0;
    if (strcmp(want, "4k") == 0)
        return aligned && si.kernel_page_kb == 4 && si.anon_huge_kb == 0;
    if (strcmp(want, "owned") == 0)
        return aligned;
    if (strcmp(want, "glibc") == 0)
        return !aligned;
    die("unknown expectation %s", want);
    return 0;
}

#endif
