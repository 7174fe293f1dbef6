/* static.c - plan `static B [MODULE]`: the 2 MB-aligned interior of the
 * writable segments (.data + .bss) of the executable or of a named library
 * moved onto huge pages at start-up (docs/formats.md section 3); for an mTHP
 * backing (`static thp-64k`) the interior aligned to that size; for
 * `static hugetlb-1g` the 1 GB-aligned part of the interior on 1 GB pages and
 * the rest of the 2 MB interior on 2 MB pages, each piece on its own.
 *
 * How, and why this way: the interior of a writable PT_LOAD (after its RELRO
 * part, which the loader makes read-only) is partly file-backed (.data, a
 * private file mapping) and partly anonymous (.bss). MADV_HUGEPAGE alone does
 * nothing for file-backed private memory and only future faults of the .bss;
 * so the library builds a huge-page copy elsewhere (hugetlb pages, or an
 * aligned THP-advised anonymous mapping), copies the pages that hold data into
 * it (the file-backed part always; the anonymous part where pagemap says a
 * page is present or swapped: untouched .bss stays untouched), and moves the
 * copy over the original range with mremap(MREMAP_FIXED): one atomic
 * replacement, no moment where the range reads as zero. MADV_COLLAPSE then
 * collapses whatever THP did not give at fault time (2 MB only: MADV_COLLAPSE
 * ignores the per-size controls and always makes 2 MB folios, so an mTHP copy
 * gets its folios at the copy's faults and is never collapsed). This runs in
 * the constructor; if the process already has more than one thread, the copy
 * could lose a concurrent write, so the library only advises in place
 * (MADV_HUGEPAGE + MADV_COLLAPSE, THP only) and reports it. */
#include "apply_int.h"

#include "fmt.h"
#include "pagemap.h"
#include "proc.h"
#include "sys.h"

#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef PT_GNU_RELRO
#define PT_GNU_RELRO 0x6474e552
#endif

struct ht_static_range ht_static_ranges[HT_MAX_STATIC_RANGES];
int ht_nstatic_ranges;

static uintptr_t up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }
static uintptr_t down(uintptr_t v, uintptr_t a) { return v & ~(a - 1); }

/* Threads of this process (/proc/self/status), -1 when unreadable; also
 * used by mapped.c. */
int ht_thread_count(void)
{
    char buf[4096];
    long n = ht_read_file("/proc/self/status", buf, sizeof buf);
    if (n <= 0)
        return -1;
    const char *t = strstr(buf, "\nThreads:");
    if (!t)
        return -1;
    t += 9;
    while (*t == ' ' || *t == '\t')
        t++;
    int v = 0;
    while (*t >= '0' && *t <= '9')
        v = v * 10 + (*t++ - '0');
    return v;
}

/* Copies the pages of [lo, hi) that hold data into dst (same offsets):
 * every page below file_end, else those pagemap shows present or swapped. */
static void copy_data(uintptr_t lo, uintptr_t hi, uintptr_t file_end, uintptr_t dst)
{
    uint64_t pm[512];
    long fd = ht_sys_open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
    for (uintptr_t a = lo; a < hi;) {
        size_t n = (hi - a) / 4096;
        if (n > 512)
            n = 512;
        int have = 0;
        if (fd >= 0) {
            long r = HT_SYSCALL(SYS_pread64, (int)fd, pm, n * 8, (uint64_t)(a / 4096) * 8);
            have = r == (long)(n * 8);
        }
        for (size_t i = 0; i < n;) {
            uintptr_t pa = a + i * 4096;
            int need = !have || pa < file_end || (pm[i] & (HT_PM_PRESENT | HT_PM_SWAPPED));
            if (!need) {
                i++;
                continue;
            }
            size_t j = i + 1;
            while (j < n && (!have || a + j * 4096 < file_end || (pm[j] & (HT_PM_PRESENT | HT_PM_SWAPPED))))
                j++;
            memcpy((void *)(dst + (pa - lo)), (void *)pa, (j - i) * 4096);
            i = j;
        }
        a += n * 4096;
    }
    if (fd >= 0)
        ht_sys_close((int)fd);
}

static void record(uintptr_t lo, uintptr_t hi, int b)
{
    if (ht_nstatic_ranges < HT_MAX_STATIC_RANGES) {
        ht_static_ranges[ht_nstatic_ranges].lo = lo;
        ht_static_ranges[ht_nstatic_ranges].hi = hi;
        ht_static_ranges[ht_nstatic_ranges].backing = b;
        ht_nstatic_ranges++;
    }
    ht_stats_backed(HT_CAT_STATIC, b, hi - lo);
}

/* Copies the copy's pages that hold data back to [lo, lo + len): those
 * resident in it (mincore), which are the pages copy_data wrote. */
static void restore_data(uintptr_t lo, uintptr_t copy, size_t len)
{
    unsigned char vec[512];
    for (size_t off = 0; off < len; off += sizeof vec * 4096) {
        size_t n = len - off < sizeof vec * 4096 ? len - off : sizeof vec * 4096;
        if (HT_SYSCALL(SYS_mincore, (void *)(copy + off), n, vec) < 0) {
            memcpy((void *)(lo + off), (void *)(copy + off), n);
            continue;
        }
        for (size_t i = 0; i < (n + 4095) / 4096; i++)
            if (vec[i] & 1)
                memcpy((void *)(lo + off + i * 4096), (void *)(copy + off + i * 4096), 4096);
    }
}

/* In place: MADV_HUGEPAGE + MADV_COLLAPSE (THP only; an mTHP size is only
 * advised: its folios come with the faults still to come). */
static int advise_in_place(uintptr_t lo, uintptr_t hi, int b)
{
    int t = ht_backing_is_mthp(b) ? b : HT_B_THP2M;
    if (!ht_ap.thp_ok[t]) {
        ht_stats_fallback(HT_CAT_STATIC, b, HT_B_4K, t == HT_B_THP2M ? "thp-disabled" : "mthp-disabled",
                          hi - lo);
        return HT_B_4K;
    }
    long r = ht_madvise_huge((void *)lo, hi - lo);
    if (r < 0) {
        if (r == -HT_EINJECTED)
            ht_stats_fallback(HT_CAT_STATIC, b, HT_B_4K, "injected", hi - lo);
        else
            ht_stats_fallback_errno(HT_CAT_STATIC, b, HT_B_4K, (int)-r, hi - lo);
        return HT_B_4K;
    }
    if (t == HT_B_THP2M)
        ht_sys_madvise((void *)lo, hi - lo, MADV_COLLAPSE);
    return t;
}

static void apply_range(uintptr_t lo, uintptr_t hi, uintptr_t file_end, int b, int threads)
{
    size_t len = hi - lo;
    atomic_fetch_add(&ht_stats.static_requested, len);
    if (b == HT_B_4K) {
        ht_sys_madvise((void *)lo, len, MADV_NOHUGEPAGE);
        record(lo, hi, HT_B_4K);
        return;
    }
    b = ht_effective_want(b, HT_CAT_STATIC, len);
    if (threads != 1) {
        if (!ht_backing_is_thp(b))
            ht_stats_fallback(HT_CAT_STATIC, b, HT_B_THP2M, "threads", len);
        record(lo, hi, advise_in_place(lo, hi, b));
        return;
    }
    long nm = -1;
    while (ht_backing_is_hugetlb(b)) {
        /* hugetlb-1g -> hugetlb-2m -> thp-2m, each refusal counted. */
        nm = ht_hugetlb_mmap(len, b);
        if (!ht_mmap_failed(nm))
            break;
        int next = b == HT_B_HUGETLB1G ? HT_B_HUGETLB2M : HT_B_THP2M;
        if (nm == -HT_EINJECTED)
            ht_stats_fallback(HT_CAT_STATIC, b, next, "injected", len);
        else
            ht_stats_fallback_errno(HT_CAT_STATIC, b, next, (int)-nm, len);
        b = next;
    }
    if (ht_backing_is_thp(b)) {
        /* The copy is aligned to the folio size, so that its faults get
         * folios of it (2 MB, or the mTHP size). */
        uintptr_t pg = ht_backing_page(b);
        if (!ht_ap.thp_ok[b]) {
            ht_stats_fallback(HT_CAT_STATIC, b, HT_B_4K, b == HT_B_THP2M ? "thp-disabled" : "mthp-disabled",
                              len);
            record(lo, hi, HT_B_4K);
            return;
        }
        long r = ht_owned_mmap(NULL, len + pg, PROT_READ | PROT_WRITE, 0);
        if (ht_mmap_failed(r)) {
            /* No room for a copy: advise where it is. */
            record(lo, hi, advise_in_place(lo, hi, b));
            return;
        }
        uintptr_t a = (uintptr_t)r, al = up(a, pg);
        if (al > a)
            ht_sys_munmap((void *)a, al - a);
        if (a + len + pg > al + len)
            ht_sys_munmap((void *)(al + len), a + len + pg - (al + len));
        long m = ht_madvise_huge((void *)al, len);
        if (m < 0) {
            ht_sys_munmap((void *)al, len);
            if (m == -HT_EINJECTED)
                ht_stats_fallback(HT_CAT_STATIC, b, HT_B_4K, "injected", len);
            else
                ht_stats_fallback_errno(HT_CAT_STATIC, b, HT_B_4K, (int)-m, len);
            record(lo, hi, HT_B_4K);
            return;
        }
        nm = (long)al;
    }
    copy_data(lo, hi, file_end, (uintptr_t)nm);
    long mv = ht_owned_move((void *)nm, len, (void *)lo);
    if (ht_mmap_failed(mv)) {
        /* The kernel unmapped the segment's interior before it refused: put
         * ordinary memory back and the program's data from the copy. One
         * thread (checked above), so MAP_FIXED can hit nothing of another's. */
        char eb[24];
        ht_stats_error("static: mremap onto the segment failed: ",
                       mv == -HT_EINJECTED ? "injected" : ht_errno_name((int)-mv, eb));
        long f = ht_refill(lo, len, PROT_READ | PROT_WRITE, 0);
        if (ht_mmap_failed(f))
            f = ht_sys_mmap((void *)lo, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (ht_mmap_failed(f)) {
            /* Nothing can be mapped there: leave the copy in place rather
             * than a hole (its pages are the program's data). */
            ht_sys_mremap((void *)nm, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)lo);
            ht_stats_error("static: the segment could not be mapped again", "");
            record(lo, hi, b);
            return;
        }
        restore_data(lo, (uintptr_t)nm, len);
        ht_sys_munmap((void *)nm, len);
        record(lo, hi, advise_in_place(lo, hi, b));
        return;
    }
    if (b == HT_B_THP2M)
        ht_sys_madvise((void *)lo, len, MADV_COLLAPSE); /* what THP did not give at fault */
    record(lo, hi, b);
}

struct sctx {
    int idx;
    int done[HT_PLAN_MAX_STATICS];
    int threads;
};

static int static_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    struct sctx *c = p;
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int main_prog = c->idx++ == 0;
    for (int s = 0; s < ht_ap.plan.nstatics; s++) {
        const char *want = ht_plan_static_module(&ht_ap.plan, s);
        int match = want[0] == 0 ? main_prog
                                 : (strcmp(want, name) == 0 || (main_prog && strcmp(want, ht_cfg.exe_path) == 0));
        if (!match || c->done[s])
            continue;
        c->done[s] = 1;
        uintptr_t relro_end = 0;
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            if (ph->p_type == PT_GNU_RELRO)
                relro_end = up((uintptr_t)info->dlpi_addr + ph->p_vaddr + ph->p_memsz, 4096);
        }
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
                continue;
            uintptr_t base = (uintptr_t)info->dlpi_addr + (uintptr_t)ph->p_vaddr;
            uintptr_t start = base, end = base + ph->p_memsz;
            if (relro_end > start && relro_end <= end)
                start = relro_end;
            int b = ht_ap.plan.statics[s].backing;
            uintptr_t pg = ht_backing_is_mthp(b) ? ht_backing_page(b) : HT_HUGE_2M;
            uintptr_t lo = up(start, pg), hi = down(end, pg), fe = up(base + ph->p_filesz, 4096);
            if (hi <= lo)
                continue;
            if (b != HT_B_HUGETLB1G) {
                apply_range(lo, hi, fe, b, c->threads);
                continue;
            }
            /* The 1 GB layout: whole gigabytes on 1 GB pages, the 2 MB
             * interior around them on 2 MB pages; each piece is its own
             * atomic replacement and falls back on its own. */
            uintptr_t glo = up(lo, HT_HUGE_1G), ghi = down(hi, HT_HUGE_1G);
            if (ghi <= glo) {
                apply_range(lo, hi, fe, HT_B_HUGETLB2M, c->threads);
                continue;
            }
            if (glo > lo)
                apply_range(lo, glo, fe, HT_B_HUGETLB2M, c->threads);
            apply_range(glo, ghi, fe, HT_B_HUGETLB1G, c->threads);
            if (hi > ghi)
                apply_range(ghi, hi, fe, HT_B_HUGETLB2M, c->threads);
        }
    }
    return 0;
}

void ht_static_apply(void)
{
    if (ht_ap.plan.nstatics == 0)
        return;
    struct sctx c;
    memset(&c, 0, sizeof c);
    c.threads = ht_thread_count();
    dl_iterate_phdr(static_cb, &c);
    for (int s = 0; s < ht_ap.plan.nstatics; s++)
        if (!c.done[s])
            ht_stats_error("static: module not loaded at start-up: ", ht_plan_static_module(&ht_ap.plan, s));
}
