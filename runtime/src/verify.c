/* verify.c - what really backed the plan (docs/formats.md section 4,
 * "verify"), and summaries on demand (SIGUSR2, request file).
 *
 * hugetlb bytes are certain once mapped (reserved at mmap, never
 * MAP_NORESERVE); smaps' Private_Hugetlb shows the touched part of them and
 * the system's hugetlb counters show the pool. THP bytes are only advised:
 * smaps' AnonHugePages over an owned range shows what the kernel gave (checked
 * when a block is freed, for the first 256 frees, and for live blocks when the
 * summary is written). mTHP sizes are invisible in smaps: pagemap +
 * kpageflags (pagemap.c) classify the folios of what was planned on one
 * (owned blocks, static interiors, the arena, glibc's [heap]), root only.
 *
 * Everything here reads /proc and /sys with raw syscalls into fixed buffers,
 * so the summary can be written from a signal handler: the writer takes the
 * registry lock with trylock there (if the interrupted thread holds it, the
 * live-block verification is skipped and marked so). */
#include "apply_int.h"

#include "fmt.h"
#include "next.h"
#include "pagemap.h"
#include "proc.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define VERIFY_BUDGET 256

static _Atomic int g_budget = VERIFY_BUDGET;
static _Atomic uint64_t g_pm_thp[HT_PM_ORDERS], g_pm_base, g_pm_unknown, g_pm_absent, g_pm_hugetlb;
static _Atomic uint64_t g_pm_scans;

static void pm_add(const struct ht_pm_hist *h)
{
    for (int o = 0; o < HT_PM_ORDERS; o++)
        atomic_fetch_add(&g_pm_thp[o], h->thp_bytes[o]);
    atomic_fetch_add(&g_pm_base, h->base_bytes);
    atomic_fetch_add(&g_pm_unknown, h->unknown_bytes);
    atomic_fetch_add(&g_pm_absent, h->absent_bytes);
    atomic_fetch_add(&g_pm_hugetlb, h->hugetlb_bytes);
    atomic_fetch_add(&g_pm_scans, 1);
}

static void pm_scan_mthp(const struct ht_reg_entry *e, struct ht_pm_hist *h)
{
    uint64_t off = 0;
    for (int i = 0; i < e->l.nseg; i++) {
        if (ht_backing_is_mthp(e->l.seg[i].backing))
            ht_pm_scan(e->ptr + off, e->ptr + off + e->l.seg[i].len, h);
        off += e->l.seg[i].len;
    }
}

void ht_verify_thp_block(const struct ht_reg_entry *e)
{
    uint64_t thp = ht_layout_bytes(&e->l, HT_B_THP2M);
    uint64_t mthp = 0;
    for (int b = HT_B_THP16K; b <= HT_B_THP1M; b++)
        mthp += ht_layout_bytes(&e->l, b);
    if (!thp && !mthp)
        return;
    if (atomic_fetch_sub(&g_budget, 1) <= 0) {
        atomic_fetch_add(&ht_stats.thp_unverified, thp + mthp);
        return;
    }
    uint64_t off = 0;
    for (int i = 0; i < e->l.nseg; i++) {
        if (e->l.seg[i].backing == HT_B_THP2M) {
            long long v = ht_smaps_anon_huge_in(e->ptr + off, e->ptr + off + e->l.seg[i].len);
            if (v >= 0)
                atomic_fetch_add(&ht_stats.thp_verified, (uint64_t)v);
            else
                atomic_fetch_add(&ht_stats.thp_unverified, e->l.seg[i].len);
        }
        off += e->l.seg[i].len;
    }
    if (mthp) {
        struct ht_pm_hist h;
        ht_pm_hist_init(&h);
        pm_scan_mthp(e, &h);
        pm_add(&h);
    }
}

/* ---- the verify section ---- */

struct vctx {
    int locked;
    uint64_t blk_hugetlb[2]; /* smaps Private_Hugetlb in owned hugetlb-2m / -1g segments */
    uint64_t blk_thp;        /* AnonHugePages in owned thp-2m segments */
    uint64_t pool_hugetlb;
    uint64_t static_ah, static_hp;
    uint64_t arena_ah, arena_hp;
    uint64_t heap_ah;
    uint64_t heap_lo, heap_hi; /* the [heap] VMA (glibc's brk heap) */
};

static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    uint64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static int vcb(const struct ht_vma *v, void *p)
{
    struct vctx *c = p;
    uint64_t ah = v->anon_huge_kb * 1024, hp = (v->private_hugetlb_kb + v->shared_hugetlb_kb) * 1024;
    if (strcmp(v->name, "[heap]") == 0) {
        c->heap_ah += ah;
        c->heap_lo = v->start;
        c->heap_hi = v->end;
    }
    if (!ah && !hp)
        return 0;
    for (int i = 0; i < ht_nstatic_ranges; i++) {
        uint64_t o = overlap(v->start, v->end, ht_static_ranges[i].lo, ht_static_ranges[i].hi);
        c->static_ah += min64(ah, o);
        c->static_hp += min64(hp, o);
    }
    if (ht_arena_on) {
        uint64_t o = overlap(v->start, v->end, ht_arena.base, ht_arena.committed);
        c->arena_ah += min64(ah, o);
        c->arena_hp += min64(hp, o);
    }
    for (int k = 0; k < HT_POOL_N; k++) {
        const struct ht_pool *pl = &ht_ap.pool[k];
        if (pl->base)
            c->pool_hugetlb += min64(hp, overlap(v->start, v->end, pl->base, pl->base + pl->npages * pl->page));
    }
    if (!c->locked || !ht_ap.reg.tab)
        return 0;
    uint64_t o2 = 0, o1 = 0, ot = 0;
    for (size_t i = 0; i < ht_ap.reg.cap; i++) {
        const struct ht_reg_entry *e = &ht_ap.reg.tab[i];
        if (!e->ptr || (e->flags & HT_REG_POOL))
            continue;
        uint64_t off = 0;
        for (int k = 0; k < e->l.nseg; k++) {
            uint64_t a = e->ptr + off, b = a + e->l.seg[k].len;
            off += e->l.seg[k].len;
            int bk = e->l.seg[k].backing;
            if (bk == HT_B_HUGETLB2M)
                o2 += overlap(v->start, v->end, a, b);
            else if (bk == HT_B_HUGETLB1G)
                o1 += overlap(v->start, v->end, a, b);
            else if (bk == HT_B_THP2M)
                ot += overlap(v->start, v->end, a, b);
        }
    }
    c->blk_hugetlb[0] += min64(hp, o2);
    c->blk_hugetlb[1] += min64(hp, o1);
    c->blk_thp += min64(ah, ot);
    return 0;
}

static void counters(struct ht_json *j, const char *key, uint64_t kb)
{
    static const char *const f[] = {"nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages"};
    hj_obj_begin(j, key);
    for (unsigned i = 0; i < 4; i++) {
        uint64_t v;
        if (ht_hugepages_counter(kb, f[i], &v) == 0)
            hj_u64(j, f[i], v);
    }
    hj_obj_end(j);
}

static const char *order_name(int o)
{
    static const char *const n[HT_PM_ORDERS] = {"4k", "8k", "16k", "32k", "64k", "128k",
                                                 "256k", "512k", "1m", "2m", "4m"};
    return n[o];
}

uint64_t ht_verify_heap_small_thp; /* [heap] AnonHugePages at the last summary */
uint64_t ht_verify_live_thp;       /* AnonHugePages of live THP memory of ours then */

void ht_verify_summary(struct ht_json *j, int in_signal)
{
    struct vctx c;
    memset(&c, 0, sizeof c);
    if (in_signal)
        c.locked = pthread_mutex_trylock(&ht_ap.lock) == 0;
    else
        c.locked = pthread_mutex_lock(&ht_ap.lock) == 0;
    int r = ht_smaps_scan_self(vcb, &c);
    /* mTHP: pagemap of live blocks with mTHP segments (bounded). */
    struct ht_pm_hist h;
    ht_pm_hist_init(&h);
    uint64_t scanned = 0;
    if (c.locked) {
        for (size_t i = 0; ht_ap.reg.tab && i < ht_ap.reg.cap && scanned < (4ull << 30); i++) {
            const struct ht_reg_entry *e = &ht_ap.reg.tab[i];
            if (!e->ptr)
                continue;
            uint64_t m = 0;
            for (int b = HT_B_THP16K; b <= HT_B_THP1M; b++)
                m += ht_layout_bytes(&e->l, b);
            if (!m)
                continue;
            pm_scan_mthp(e, &h);
            scanned += m;
        }
        pthread_mutex_unlock(&ht_ap.lock);
    }
    /* Static interiors, the arena and glibc's advised [heap] planned on an
     * mTHP size: their folios, counted the same way (issue 23). */
    for (int i = 0; i < ht_nstatic_ranges && scanned < (4ull << 30); i++) {
        const struct ht_static_range *sr = &ht_static_ranges[i];
        if (ht_backing_is_mthp(sr->backing)) {
            ht_pm_scan(sr->lo, sr->hi, &h);
            scanned += sr->hi - sr->lo;
        }
    }
    if (ht_arena_on && ht_backing_is_mthp(ht_ap.plan.arena) && ht_arena.committed > ht_arena.base &&
        scanned < (4ull << 30)) {
        ht_pm_scan(ht_arena.base, min64(ht_arena.committed, ht_arena.base + (4ull << 30)), &h);
        scanned += ht_arena.committed - ht_arena.base;
    }
    if (ht_backing_is_mthp(ht_ap.heap_small_b) && c.heap_hi > c.heap_lo && scanned < (4ull << 30)) {
        ht_pm_scan(c.heap_lo, min64(c.heap_hi, c.heap_lo + (4ull << 30)), &h);
        scanned += c.heap_hi - c.heap_lo;
    }
    ht_pm_finish(&h);
    ht_verify_heap_small_thp = c.heap_ah;
    ht_verify_live_thp = c.blk_thp + c.static_ah + c.arena_ah;

    hj_obj_begin(j, "verify");
    if (r < 0) {
        char eb[24];
        hj_str(j, "error", ht_errno_name(-r, eb));
    }
    hj_bool(j, "live_blocks_checked", c.locked);
    hj_obj_begin(j, "smaps");
    hj_u64(j, "owned_hugetlb-2m_bytes", c.blk_hugetlb[0]);
    hj_u64(j, "owned_hugetlb-1g_bytes", c.blk_hugetlb[1]);
    hj_u64(j, "owned_thp-2m_anon_huge_bytes", c.blk_thp);
    hj_u64(j, "pool_hugetlb_bytes", c.pool_hugetlb);
    hj_u64(j, "static_anon_huge_bytes", c.static_ah);
    hj_u64(j, "static_hugetlb_bytes", c.static_hp);
    hj_u64(j, "arena_anon_huge_bytes", c.arena_ah);
    hj_u64(j, "arena_hugetlb_bytes", c.arena_hp);
    hj_u64(j, "heap_anon_huge_bytes", c.heap_ah);
    hj_obj_end(j);
    hj_obj_begin(j, "hugetlb_counters");
    counters(j, "2m", 2048);
    counters(j, "1g", 1048576);
    hj_obj_end(j);
    /* mTHP: freed blocks (at free) + live ones (now). */
    hj_obj_begin(j, "thp_sizes");
    uint64_t unknown = atomic_load(&g_pm_unknown) + h.unknown_bytes;
    uint64_t any = unknown + atomic_load(&g_pm_base) + h.base_bytes;
    for (int o = 0; o < HT_PM_ORDERS; o++)
        any += atomic_load(&g_pm_thp[o]) + h.thp_bytes[o];
    hj_u64(j, "scans", atomic_load(&g_pm_scans) + (scanned ? 1 : 0));
    hj_bool(j, "verified", any > 0 && unknown == 0);
    hj_obj_begin(j, "bytes");
    uint64_t base = atomic_load(&g_pm_base) + h.base_bytes;
    if (base)
        hj_u64(j, "4k", base);
    for (int o = 1; o < HT_PM_ORDERS; o++) {
        uint64_t v = atomic_load(&g_pm_thp[o]) + h.thp_bytes[o];
        if (v)
            hj_u64(j, order_name(o), v);
    }
    hj_obj_end(j);
    hj_u64(j, "unknown_bytes", unknown);
    hj_u64(j, "absent_bytes", atomic_load(&g_pm_absent) + h.absent_bytes);
    hj_obj_end(j);
    hj_obj_end(j);
}

/* ---- on demand ---- */

void ht_apply_poll_slow(void)
{
    if (!ht_ap.request_path[0])
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    int64_t now = (int64_t)ts.tv_sec, last = atomic_load_explicit(&ht_ap.request_last, memory_order_relaxed);
    if (now - last < 1 || !atomic_compare_exchange_strong(&ht_ap.request_last, &last, now))
        return;
    if (HT_SYSCALL(SYS_faccessat, -100, ht_ap.request_path, F_OK, 0) != 0)
        return;
    HT_SYSCALL(SYS_unlinkat, -100, ht_ap.request_path, 0);
    ht_tls.guard++;
    ht_summary_snapshot(0);
    ht_tls.guard--;
}

static void on_sigusr2(int sig)
{
    int e = errno;
    (void)sig;
    ht_tls.guard++;
    ht_summary_snapshot(1);
    ht_tls.guard--;
    errno = e;
}

void ht_sigusr2_install(void)
{
    struct sigaction old, sa;
    if (!ht_cfg.has_summary || sigaction(SIGUSR2, NULL, &old) != 0)
        return;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
        return; /* the program has its own (or ignores it): leave it alone */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr2;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR2, &sa, NULL) == 0)
        ht_ap.sigusr2_installed = 1;
}
