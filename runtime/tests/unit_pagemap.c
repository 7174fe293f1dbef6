/* unit_pagemap.c - classification of pagemap entries + page flags into page
 * sizes (THP runs, 4 KB pages, hugetlb, absent, unknown without root). */
#include "pagemap.h"
#include "unit.h"

#define P(pfn) (HT_PM_PRESENT | (uint64_t)(pfn))
#define HEAD (HT_KPF_THP | HT_KPF_COMPOUND_HEAD)
#define TAIL (HT_KPF_THP | HT_KPF_COMPOUND_TAIL)

static void test_sizes(void)
{
    struct ht_pm_hist h;
    uint64_t pm[64], fl[64];
    size_t n = 0;
    /* a 64 KB folio (16 pages), two 4 KB pages, absent, a 16 KB folio */
    for (int i = 0; i < 16; i++) {
        pm[n] = P(1000 + i);
        fl[n++] = i ? TAIL : HEAD;
    }
    pm[n] = P(5000);
    fl[n++] = 0;
    pm[n] = P(5001);
    fl[n++] = 0;
    pm[n] = 0;
    fl[n++] = 0;
    for (int i = 0; i < 4; i++) {
        pm[n] = P(2000 + i);
        fl[n++] = i ? TAIL : HEAD;
    }
    /* hugetlb page, unknown PFN */
    pm[n] = P(9000);
    fl[n++] = HT_KPF_HUGE | HT_KPF_COMPOUND_HEAD;
    pm[n] = HT_PM_PRESENT;
    fl[n++] = 0;
    ht_pm_hist_init(&h);
    ht_pm_feed(&h, pm, fl, n);
    ht_pm_finish(&h);
    CHECK(h.thp_bytes[4] == 64 << 10);
    CHECK(h.thp_bytes[2] == 16 << 10);
    CHECK(h.base_bytes == 8192 && h.absent_bytes == 4096);
    CHECK(h.hugetlb_bytes == 4096 && h.unknown_bytes == 4096);
    CHECK(ht_pm_thp_at_least(&h, 16) == 64 << 10 && ht_pm_thp_at_least(&h, 4) == 80 << 10);
}

static void test_runs_across_batches(void)
{
    /* A 2 MB THP fed in 512-page batches of 100: one run of 512 pages. */
    struct ht_pm_hist h;
    uint64_t pm[100], fl[100];
    ht_pm_hist_init(&h);
    for (int base = 0; base < 512; base += 100) {
        int k = 512 - base < 100 ? 512 - base : 100;
        for (int i = 0; i < k; i++) {
            pm[i] = P(7000 + base + i);
            fl[i] = base + i ? TAIL : HEAD;
        }
        ht_pm_feed(&h, pm, fl, (size_t)k);
    }
    ht_pm_finish(&h);
    CHECK(h.thp_bytes[9] == 2u << 20 && h.base_bytes == 0);
    /* two adjacent folios: the second head starts a new run */
    ht_pm_hist_init(&h);
    for (int i = 0; i < 32; i++) {
        pm[i] = P(100 + i);
        fl[i] = (i % 16) ? TAIL : HEAD;
    }
    ht_pm_feed(&h, pm, fl, 32);
    ht_pm_finish(&h);
    CHECK(h.thp_bytes[4] == 128 << 10);
    /* a PFN jump ends a run even on tail pages (range starting mid-folio) */
    ht_pm_hist_init(&h);
    pm[0] = P(50);
    fl[0] = TAIL;
    pm[1] = P(51);
    fl[1] = TAIL;
    pm[2] = P(90);
    fl[2] = TAIL;
    ht_pm_feed(&h, pm, fl, 3);
    ht_pm_finish(&h);
    CHECK(h.thp_bytes[1] == 8192 && h.thp_bytes[0] == 4096);
}

int main(void)
{
    test_sizes();
    test_runs_across_batches();
    return unit_done("unit_pagemap");
}
