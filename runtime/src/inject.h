/* inject.h - fault injection for tests (HUGETUNE_INJECT, docs/formats.md
 * section 1): every Nth attempt of the library's own hugetlb mmaps,
 * MADV_HUGEPAGE calls, owned-memory mmaps, moves (mremap MREMAP_FIXED, which
 * then unmaps the destination as the kernel does), munmaps or other madvise
 * calls, or userfaultfd creations (the write protection of a hugetlb-backed
 * program mapping while it is cut, mapped.c) fails as if the kernel refused.
 *
 * Pure: the spec parser and the "is this attempt the Nth" rule; the apply
 * layer keeps one atomic attempt counter per kind. */
#ifndef HT_INJECT_H
#define HT_INJECT_H

#include <stdint.h>

enum { HT_INJ_HUGETLB = 0, HT_INJ_THP, HT_INJ_MMAP, HT_INJ_MREMAP, HT_INJ_MUNMAP, HT_INJ_MADVISE, HT_INJ_UFFD, HT_INJ_N };

struct ht_inject {
    uint32_t every[HT_INJ_N]; /* 0: never */
    char error[128];          /* set when the spec was rejected */
};

/* Parses "hugetlb:N,thp:N,mmap:N,mremap:N,munmap:N,madvise:N,uffd:N" (any subset, any order, each kind once,
 * N decimal 1..2^31). Returns 0, or -1 with every[] all 0 and error set. */
int ht_inject_parse(struct ht_inject *in, const char *spec);
/* Attempt number `n` (1-based) of a kind injected every `every`: fails? */
static inline int ht_inject_fires(uint64_t n, uint32_t every) { return every && n % every == 0; }
const char *ht_inject_kind_name(int kind);

#endif
