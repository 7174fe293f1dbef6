/* pagemap.h - which page sizes really back a range: /proc/self/pagemap +
 * /proc/kpageflags (docs/formats.md section 4, "thp_sizes").
 *
 * Why: smaps' AnonHugePages counts PMD-sized THP only; an mTHP folio (16 KB to
 * 1 MB) is visible only in the page flags of its physical pages. Reading PFNs
 * from pagemap needs CAP_SYS_ADMIN (root); without it the PFNs read as 0 and
 * the range is reported unverified. The classification of (pagemap entry,
 * page flags) sequences is pure and unit-tested; the reader does raw pread
 * syscalls into fixed buffers (no malloc). */
#ifndef HT_PAGEMAP_H
#define HT_PAGEMAP_H

#include <stddef.h>
#include <stdint.h>

#define HT_PM_PRESENT (1ull << 63)
#define HT_PM_SWAPPED (1ull << 62)
#define HT_PM_PFN_MASK ((1ull << 55) - 1)
#define HT_KPF_COMPOUND_HEAD (1ull << 15)
#define HT_KPF_COMPOUND_TAIL (1ull << 16)
#define HT_KPF_HUGE (1ull << 17)
#define HT_KPF_THP (1ull << 22)

#define HT_PM_ORDERS 11 /* 4 KB (order 0) .. 4 MB; 2 MB is order 9 */

struct ht_pm_hist {
    uint64_t thp_bytes[HT_PM_ORDERS]; /* THP runs, by floor(log2(pages)) */
    uint64_t base_bytes;      /* present, ordinary 4 KB pages */
    uint64_t hugetlb_bytes;   /* present hugetlb pages */
    uint64_t absent_bytes;    /* not present (never touched, or swapped) */
    uint64_t unknown_bytes;   /* present but PFN hidden (not root) */
    /* running THP run across batches */
    uint64_t run_pages, run_next_pfn;
};

void ht_pm_hist_init(struct ht_pm_hist *h);
/* Feeds n consecutive virtual pages: pm[i] their pagemap entries, fl[i] the
 * kpageflags of their PFNs (ignored when the entry has no PFN). */
void ht_pm_feed(struct ht_pm_hist *h, const uint64_t *pm, const uint64_t *fl, size_t n);
/* Closes the running THP run (call after the last batch). */
void ht_pm_finish(struct ht_pm_hist *h);
/* Bytes of THP runs of at least `pages` pages. */
uint64_t ht_pm_thp_at_least(const struct ht_pm_hist *h, unsigned pages);

/* Reads [start, end) of this process. Returns 0, or -errno (pagemap not
 * readable). Without root the PFNs are 0: everything present is unknown. */
int ht_pm_scan(uintptr_t start, uintptr_t end, struct ht_pm_hist *h);

#endif
