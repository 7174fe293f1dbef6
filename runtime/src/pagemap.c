/* pagemap.c - page-size verification from pagemap + kpageflags (see pagemap.h). */
#include "pagemap.h"

#include "sys.h"

#include <fcntl.h>
#include <string.h>

void ht_pm_hist_init(struct ht_pm_hist *h) { memset(h, 0, sizeof *h); }

static void close_run(struct ht_pm_hist *h)
{
    if (h->run_pages) {
        unsigned o = 63u - (unsigned)__builtin_clzll(h->run_pages);
        if (o >= HT_PM_ORDERS)
            o = HT_PM_ORDERS - 1;
        h->thp_bytes[o] += h->run_pages * 4096;
    }
    h->run_pages = 0;
}

void ht_pm_feed(struct ht_pm_hist *h, const uint64_t *pm, const uint64_t *fl, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t e = pm[i];
        if (!(e & HT_PM_PRESENT)) {
            close_run(h);
            h->absent_bytes += 4096;
            continue;
        }
        uint64_t pfn = e & HT_PM_PFN_MASK;
        if (pfn == 0) {
            close_run(h);
            h->unknown_bytes += 4096;
            continue;
        }
        uint64_t f = fl[i];
        if (f & HT_KPF_HUGE) {
            close_run(h);
            h->hugetlb_bytes += 4096;
            continue;
        }
        if (f & HT_KPF_THP) {
            /* A run continues on the next PFN with a tail page; a head page
             * or a jump starts a new one. */
            if (h->run_pages && (f & HT_KPF_COMPOUND_TAIL) && pfn == h->run_next_pfn) {
                h->run_pages++;
            } else {
                close_run(h);
                h->run_pages = 1;
            }
            h->run_next_pfn = pfn + 1;
            continue;
        }
        close_run(h);
        h->base_bytes += 4096;
    }
}

void ht_pm_finish(struct ht_pm_hist *h) { close_run(h); }

uint64_t ht_pm_thp_at_least(const struct ht_pm_hist *h, unsigned pages)
{
    uint64_t t = 0;
    for (unsigned o = 0; o < HT_PM_ORDERS; o++)
        if ((1u << o) >= pages)
            t += h->thp_bytes[o];
    return t;
}

static long pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        long r = HT_SYSCALL(SYS_pread64, fd, (char *)buf + got, n - got, off + got);
        if (r == -EINTR)
            continue;
        if (r <= 0)
            return got ? (long)got : r;
        got += (size_t)r;
    }
    return (long)got;
}

#define BATCH 512

int ht_pm_scan(uintptr_t start, uintptr_t end, struct ht_pm_hist *h)
{
    uint64_t pm[BATCH], fl[BATCH];
    long pfd = ht_sys_open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
    if (pfd < 0)
        return (int)pfd;
    long kfd = ht_sys_open("/proc/kpageflags", O_RDONLY | O_CLOEXEC, 0);
    start &= ~(uintptr_t)4095;
    for (uintptr_t a = start; a < end;) {
        size_t n = (end - a + 4095) / 4096;
        if (n > BATCH)
            n = BATCH;
        long r = pread_all((int)pfd, pm, n * 8, (uint64_t)(a / 4096) * 8);
        if (r < (long)(n * 8)) {
            ht_sys_close((int)pfd);
            if (kfd >= 0)
                ht_sys_close((int)kfd);
            return r < 0 ? (int)r : -EIO;
        }
        memset(fl, 0, n * 8);
        if (kfd >= 0) {
            /* One read per run of consecutive PFNs. */
            for (size_t i = 0; i < n;) {
                uint64_t pfn = pm[i] & HT_PM_PFN_MASK;
                if (!(pm[i] & HT_PM_PRESENT) || pfn == 0) {
                    i++;
                    continue;
                }
                size_t j = i + 1;
                while (j < n && (pm[j] & HT_PM_PRESENT) && (pm[j] & HT_PM_PFN_MASK) == pfn + (j - i))
                    j++;
                if (pread_all((int)kfd, fl + i, (j - i) * 8, pfn * 8) < 0)
                    memset(fl + i, 0, (j - i) * 8);
                i = j;
            }
        } else {
            /* No kpageflags: hide the PFNs, the pages count as unknown. */
            for (size_t i = 0; i < n; i++)
                pm[i] &= ~HT_PM_PFN_MASK;
        }
        ht_pm_feed(h, pm, fl, n);
        a += n * 4096;
    }
    ht_pm_finish(h);
    ht_sys_close((int)pfd);
    if (kfd >= 0)
        ht_sys_close((int)kfd);
    return 0;
}
