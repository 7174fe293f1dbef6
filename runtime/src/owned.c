/* owned.c - owned blocks (docs/formats.md section 3, "Layout of owned
 * blocks").
 *
 * A block is one contiguous range starting at the user pointer (aligned to
 * 2 MB, or more when asked): its huge head and its 4 KB tail as planned by
 * layout.c. How it is mapped, and why this way:
 *
 *   - the whole range is first mapped as ordinary private anonymous memory
 *     (over-mapped and trimmed to the alignment). Huge segments are then put
 *     in place inside it: hugetlb pages are mapped elsewhere (mmap(NULL),
 *     which fails cleanly on a short pool) and moved over the range with
 *     mremap(MREMAP_FIXED), which replaces the old pages atomically. A
 *     MAP_FIXED hugetlb mmap would be simpler, but on this kernel a failed one
 *     leaves a hole that another thread's mmap can take (checked: the
 *     reservation under it is gone); the mremap way opens none on a short
 *     pool, the common failure;
 *   - a failed move DOES open one: the kernel unmaps the destination before
 *     it moves anything (mremap_to), and Linux 6.18 refuses with ENOMEM most
 *     moves of an unpopulated hugetlb mapping of several GB (measured with
 *     experiments/hugetlb_move.c: none of 20 at 2.6 GB, 6 and 7 of 20 at 3.4 GB, 20
 *     of 20 at 4.2 GB; the runtime library once handed a program a 5.7 GB
 *     block with nothing mapped under it). So the hole is refilled at
 *     once with MAP_FIXED_NOREPLACE (never over another thread's mapping),
 *     the hugetlb pages go back, and a MAP_FIXED hugetlb mmap onto the refilled
 *     range is tried (it succeeds where the move did not; a failure again
 *     leaves a hole, refilled the same way); then the chain goes on;
 *   - a hole that cannot be refilled is not ours any more: ht_place says so
 *     (HT_B_NONE) and the caller unwinds - a new block is unmapped and the
 *     allocation goes to the allocator behind us, a realloc's data is copied
 *     out of its pieces into the allocator's memory. Nothing returned to the
 *     program ever has an unmapped page under it;
 *   - never move part of a hugetlb mapping with mremap: on 6.18 moving a
 *     1 GiB-aligned piece of one leaked the kernel's hugetlb reservations
 *     (HugePages_Rsvd stayed up after the process exited). Every move here
 *     takes a whole mapping;
 *   - THP and mTHP segments are MADV_HUGEPAGE on their part of the range, the
 *     4 KB tail MADV_NOHUGEPAGE (so THP settings aimed elsewhere, or THP
 *     `always`, do not reach it);
 *   - each huge segment falls back on its own along hugetlb-1g -> hugetlb-2m
 *     -> thp-2m -> 4k (mTHP -> 4k), each step counted with its reason; a block
 *     that cannot even get its ordinary mapping goes to the allocator behind
 *     us (counted as a fallback to "allocator").
 *
 * Pool blocks are runs of whole pool pages (pool.c), returned to the pool on
 * free. The registry (a hash table keyed by the 2 MB-aligned pointer) and the
 * pools share one mutex: owned blocks are large and rare, their mapping costs
 * far more than the lock. */
#include "apply_int.h"
#include "next.h"

#include "fmt.h"
#include "proc.h"
#include "sys.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#define HT_MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#define HT_MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

static uintptr_t up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }

/* ---- injection points and raw calls ---- */

int ht_inj(int kind)
{
    uint32_t every = ht_ap.inj.every[kind];
    if (HT_LIKELY(every == 0))
        return 0;
    uint64_t n = atomic_fetch_add(&ht_ap.inj_attempts[kind], 1) + 1;
    if (!ht_inject_fires(n, every))
        return 0;
    atomic_fetch_add(&ht_ap.inj_fired[kind], 1);
    return 1;
}

long ht_owned_mmap(void *addr, size_t len, int prot, int flags)
{
    if (ht_inj(HT_INJ_MMAP))
        return -HT_EINJECTED;
    return ht_sys_mmap(addr, len, prot, flags | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

long ht_hugetlb_mmap(size_t len, int backing)
{
    if (ht_inj(HT_INJ_HUGETLB))
        return -HT_EINJECTED;
    /* Never MAP_NORESERVE: a short pool must fail here, not SIGBUS later. */
    int f = MAP_HUGETLB | (backing == HT_B_HUGETLB1G ? HT_MAP_HUGE_1GB : HT_MAP_HUGE_2MB);
    long r = ht_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | f, -1, 0);
    if (!ht_mmap_failed(r) && ht_hugetlb_cgroup_limited(backing == HT_B_HUGETLB1G ? 1u << 20 : 2048)) {
        /* A hugetlb cgroup limit is charged when a page is faulted in, not
         * here: past it the program's first touch would be SIGBUS. Fault the
         * pages in now, where failing is an error (EDQUOT: fall back). */
        if (ht_sys_madvise((void *)r, len, HT_MADV_POPULATE_WRITE) != 0) {
            ht_sys_munmap((void *)r, len);
            return -EDQUOT;
        }
    }
    return r;
}

long ht_madvise_huge(void *addr, size_t len)
{
    if (ht_inj(HT_INJ_THP))
        return -HT_EINJECTED;
    return ht_sys_madvise(addr, len, MADV_HUGEPAGE);
}

long ht_owned_madvise(void *addr, size_t len, int advice)
{
    if (ht_inj(HT_INJ_MADVISE))
        return -HT_EINJECTED;
    return ht_sys_madvise(addr, len, advice);
}

long ht_owned_move(void *from, size_t len, void *to)
{
    if (ht_inj(HT_INJ_MREMAP)) {
        /* As the kernel fails: the destination is already unmapped. */
        ht_sys_munmap(to, len);
        return -HT_EINJECTED;
    }
    return ht_sys_mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
}

long ht_owned_munmap(void *addr, size_t len)
{
    if (ht_inj(HT_INJ_MUNMAP))
        return -HT_EINJECTED;
    return ht_sys_munmap(addr, len);
}

long ht_refill(uintptr_t addr, size_t len, int prot, int flags)
{
    long r = ht_owned_mmap((void *)addr, len, prot, MAP_FIXED_NOREPLACE | flags);
    if (ht_mmap_failed(r))
        return r;
    if ((uintptr_t)r != addr) {
        /* A kernel without NOREPLACE took it as a hint: the hole is taken. */
        ht_sys_munmap((void *)r, len);
        return -EEXIST;
    }
    return 0;
}

int ht_range_mapped(uintptr_t addr, size_t len)
{
    unsigned char vec[512];
    for (uintptr_t a = addr; a < addr + len; a += sizeof vec * 4096) {
        size_t n = addr + len - a < sizeof vec * 4096 ? addr + len - a : sizeof vec * 4096;
        if (HT_SYSCALL(SYS_mincore, (void *)a, n, vec) < 0)
            return 0;
    }
    return 1;
}

static void hole_error(const char *what, long err)
{
    char eb[24];
    ht_stats_error(what, err == -HT_EINJECTED ? "injected" : ht_errno_name((int)-err, eb));
}

/* The second way onto hugetlb pages after a refused move: a MAP_FIXED hugetlb
 * mmap over [addr, addr + len), ordinary memory of ours, whose first `keep`
 * bytes are saved and put back. 0: done; else the error, with the range
 * ordinary memory of ours again holding its bytes (1 in *lost: the range is
 * not ours any more, its bytes are in *saved, the caller's to free). */
static long fixed_hugetlb(uintptr_t addr, size_t len, int b, size_t keep, uintptr_t *saved, int *lost)
{
    uintptr_t sv = 0;
    if (keep) {
        /* len bytes (only `keep` touched): a rescue is always len long. */
        long t = ht_owned_mmap(NULL, len, PROT_READ | PROT_WRITE, 0);
        if (ht_mmap_failed(t))
            return t;
        sv = (uintptr_t)t;
        memcpy((void *)sv, (void *)addr, keep);
    }
    long r;
    if (ht_inj(HT_INJ_HUGETLB)) {
        ht_sys_munmap((void *)addr, len); /* as the kernel fails: a hole */
        r = -HT_EINJECTED;
    } else if (ht_hugetlb_cgroup_limited(b == HT_B_HUGETLB1G ? 1u << 20 : 2048)) {
        /* Pages it could not fault in would leave a hole: not tried. */
        r = -EDQUOT;
    } else {
        int f = MAP_HUGETLB | MAP_FIXED | (b == HT_B_HUGETLB1G ? HT_MAP_HUGE_1GB : HT_MAP_HUGE_2MB);
        r = ht_sys_mmap((void *)addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | f, -1, 0);
        if (!ht_mmap_failed(r) && (uintptr_t)r != addr) { /* cannot happen with MAP_FIXED */
            ht_sys_munmap((void *)r, len);
            r = -EINVAL;
        }
    }
    if (!ht_mmap_failed(r)) {
        if (keep) {
            memcpy((void *)addr, (void *)sv, keep);
            ht_sys_munmap((void *)sv, len);
        }
        return 0;
    }
    /* Failed before unmapping (the range is intact) or after (a hole). */
    if (!ht_range_mapped(addr, len)) {
        long f = ht_refill(addr, len, PROT_READ | PROT_WRITE, 0);
        if (ht_mmap_failed(f)) {
            hole_error("a refused hugetlb mmap left a hole that could not be refilled: ", f);
            *lost = 1;
            *saved = sv;
            return r;
        }
        if (keep)
            memcpy((void *)addr, (void *)sv, keep);
    }
    if (sv)
        ht_sys_munmap((void *)sv, len);
    return r;
}

static void fallback(int cat, int from, int to, long err, uint64_t bytes)
{
    if (err == -HT_EINJECTED)
        ht_stats_fallback(cat, from, to, "injected", bytes);
    else if (err == -HT_EHOLE)
        ht_stats_fallback(cat, from, to, "hole-lost", bytes);
    else
        ht_stats_fallback_errno(cat, from, to, (int)-err, bytes);
}

static int chain_next(int b)
{
    switch (b) {
    case HT_B_HUGETLB1G: return HT_B_HUGETLB2M;
    case HT_B_HUGETLB2M: return HT_B_THP2M;
    case HT_B_4K: return HT_B_NONE;
    default: return HT_B_4K; /* THP of any size */
    }
}

int ht_effective_want(int want, int cat, uint64_t bytes)
{
    if (ht_ap.fork_safe == HT_FORK_THP && ht_backing_is_hugetlb(want)) {
        ht_stats_fallback(cat, want, HT_B_THP2M, "fork-safe", bytes);
        return HT_B_THP2M;
    }
    return want;
}

int ht_place(uintptr_t addr, size_t len, int b, int cat, uint64_t req, int copy_old, size_t old_bytes,
             uintptr_t *rescue)
{
    size_t keep = copy_old ? (old_bytes < len ? old_bytes : len) : 0;
    if (rescue)
        *rescue = 0;
    for (;;) {
        if (ht_backing_is_hugetlb(b)) {
            long h = ht_hugetlb_mmap(len, b);
            long err = h;
            if (!ht_mmap_failed(h)) {
                if (keep)
                    memcpy((void *)h, (void *)addr, keep);
                long m = ht_owned_move((void *)h, len, (void *)addr);
                if (!ht_mmap_failed(m))
                    return b;
                err = m;
                /* [addr, addr + len) is a hole now: ours again, or lost. */
                long f = ht_refill(addr, len, PROT_READ | PROT_WRITE, 0);
                if (ht_mmap_failed(f)) {
                    hole_error("a refused move left a hole that could not be refilled: ", f);
                    fallback(cat, b, HT_B_NONE, err, req);
                    if (keep && rescue)
                        *rescue = (uintptr_t)h; /* the bytes: the caller's */
                    else
                        ht_owned_munmap((void *)h, len);
                    return HT_B_NONE;
                }
                if (keep)
                    memcpy((void *)addr, (void *)h, keep);
                ht_owned_munmap((void *)h, len); /* its pages back to the pool first */
                int lost = 0;
                uintptr_t saved = 0;
                long r = fixed_hugetlb(addr, len, b, keep, &saved, &lost);
                if (r == 0) {
                    atomic_fetch_add(&ht_ap.moves_refused, 1);
                    return b;
                }
                if (lost) {
                    fallback(cat, b, HT_B_NONE, r, req);
                    if (rescue && saved)
                        *rescue = saved;
                    else if (saved)
                        ht_sys_munmap((void *)saved, len);
                    return HT_B_NONE;
                }
                err = r;
            }
            fallback(cat, b, chain_next(b), err, req);
            b = chain_next(b);
            continue;
        }
        if (ht_backing_is_thp(b)) {
            if (!ht_ap.thp_ok[b]) {
                ht_stats_fallback(cat, b, HT_B_4K, b == HT_B_THP2M ? "thp-disabled" : "mthp-disabled", req);
                b = HT_B_4K;
                continue;
            }
            long r = ht_madvise_huge((void *)addr, len);
            if (r == 0) {
                if (keep && b == HT_B_THP2M)
                    ht_owned_madvise((void *)addr, HT_HUGE_2M < len ? HT_HUGE_2M : len, MADV_COLLAPSE);
                return b;
            }
            fallback(cat, b, HT_B_4K, r, req);
            b = HT_B_4K;
            continue;
        }
        /* Keep THP (e.g. glibc.malloc.hugetlb=1 aimed at heap-small, or THP
         * `always`) off memory planned for 4 KB pages. ENOMEM from madvise
         * means part of the range is not mapped: never hand that out. */
        long r = ht_owned_madvise((void *)addr, len, MADV_NOHUGEPAGE);
        if (r == -ENOMEM && !ht_range_mapped(addr, len)) {
            ht_stats_error("a range to back was not mapped", "");
            fallback(cat, HT_B_4K, HT_B_NONE, r, req);
            return HT_B_NONE;
        }
        return HT_B_4K;
    }
}

/* Ordinary anonymous mapping of len bytes aligned to align (>= 4096). */
static long map_aligned(size_t len, size_t align)
{
    size_t over = len + align - 4096;
    long r = ht_owned_mmap(NULL, over, PROT_READ | PROT_WRITE, 0);
    if (ht_mmap_failed(r))
        return r;
    uintptr_t a = (uintptr_t)r, al = up(a, align);
    if (al > a)
        ht_owned_munmap((void *)a, al - a);
    if (a + over > al + len)
        ht_owned_munmap((void *)(al + len), a + over - (al + len));
    return (long)al;
}

/* Maps layout l (backings may change along the chains). 0 and *err on failure. */
static uintptr_t map_block(struct ht_layout *l, int cat, long *err)
{
    size_t total = ht_layout_total(l);
    if (l->nseg == 1 && ht_backing_is_hugetlb(l->seg[0].backing) &&
        l->align == ht_backing_page(l->seg[0].backing)) {
        /* Whole hugetlb pages only: the kernel aligns hugetlb mappings. */
        int b = l->seg[0].backing;
        long r = ht_hugetlb_mmap(total, b);
        if (!ht_mmap_failed(r))
            return (uintptr_t)r;
        fallback(cat, b, chain_next(b), r, l->size);
        l->seg[0].backing = chain_next(b);
    }
    long r = map_aligned(total, l->align);
    if (ht_mmap_failed(r)) {
        *err = r;
        return 0;
    }
    uintptr_t p = (uintptr_t)r, off = 0;
    for (int i = 0; i < l->nseg; i++) {
        int got = ht_place(p + off, l->seg[i].len, l->seg[i].backing, cat, l->size, 0, 0, NULL);
        if (got == HT_B_NONE) {
            /* Segment i's range is not ours any more: unmap the rest. */
            if (off)
                ht_owned_munmap((void *)p, off);
            if (total > off + l->seg[i].len)
                ht_owned_munmap((void *)(p + off + l->seg[i].len), total - off - l->seg[i].len);
            *err = -HT_EHOLE;
            return 0;
        }
        l->seg[i].backing = got;
        off += l->seg[i].len;
    }
    ht_layout_normalize(l);
    return p;
}

/* ---- registry ---- */

static int reg_grow_locked(void)
{
    size_t ncap = ht_ap.reg.cap ? ht_ap.reg.cap * 2 : 1024;
    long m = ht_sys_mmap(NULL, ht_reg_bytes(ncap), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(m))
        return -1;
    struct ht_registry nr;
    ht_reg_init(&nr, (void *)m, ncap);
    if (ht_ap.reg.tab) {
        if (ht_reg_rehash(&ht_ap.reg, &nr) != 0) {
            ht_sys_munmap((void *)m, ht_reg_bytes(ncap));
            return -1;
        }
        ht_sys_munmap(ht_ap.reg.tab, ht_reg_bytes(ht_ap.reg.cap));
    }
    ht_ap.reg = nr;
    return 0;
}

static void publish_count(void) { atomic_store_explicit(&ht_ap.owned, ht_ap.reg.count, memory_order_release); }

/* Caller holds the lock. */
static int reg_insert_locked(const struct ht_reg_entry *e)
{
    if ((!ht_ap.reg.tab || ht_reg_full(&ht_ap.reg)) && reg_grow_locked() != 0)
        return -1;
    if (ht_reg_insert(&ht_ap.reg, e) != 0)
        return -1;
    publish_count();
    return 0;
}

void ht_owned_lock(void) { pthread_mutex_lock(&ht_ap.lock); }
void ht_owned_unlock(void) { pthread_mutex_unlock(&ht_ap.lock); }

int ht_owned_lookup(void *p, struct ht_reg_entry *out)
{
    if (((uintptr_t)p & (HT_HUGE_2M - 1)) != 0 || p == NULL ||
        atomic_load_explicit(&ht_ap.owned, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&ht_ap.lock);
    struct ht_reg_entry *e = ht_reg_find(&ht_ap.reg, (uintptr_t)p);
    if (e)
        *out = *e;
    pthread_mutex_unlock(&ht_ap.lock);
    return e != NULL;
}

/* Statistics of a block's segments: +1 mapped, -1 released. */
static void seg_stats(const struct ht_layout *l, int cat, int sign)
{
    for (int i = 0; i < l->nseg; i++) {
        if (sign > 0)
            ht_stats_backed(cat, l->seg[i].backing, l->seg[i].len);
        else
            ht_stats_released(l->seg[i].backing, l->seg[i].len);
    }
}

/* Per-backing difference between two layouts of the same block. */
static void diff_stats(const struct ht_layout *o, const struct ht_layout *n, int cat)
{
    for (int b = HT_B_4K; b < HT_B_COUNT; b++) {
        uint64_t a = ht_layout_bytes(o, b), c = ht_layout_bytes(n, b);
        if (c > a)
            ht_stats_backed(cat, b, c - a);
        else if (a > c)
            ht_stats_released(b, a - c);
    }
}

/* ---- pool ---- */

static int pool_of(int want)
{
    return want == HT_B_HUGETLB2M ? HT_POOL_2M : want == HT_B_HUGETLB1G ? HT_POOL_1G : -1;
}

/* A pool block: `pages` whole pool pages of backing b. */
static void pool_layout(struct ht_layout *l, uint64_t size, uint64_t pages, uint64_t page, int b)
{
    memset(l, 0, sizeof *l);
    l->size = size ? size : 1;
    l->align = page;
    l->nseg = 1;
    l->seg[0].len = pages * page;
    l->seg[0].backing = b;
}

static void *pool_alloc(size_t size, int want, int cat, size_t align, int zero)
{
    int k = pool_of(want);
    if (k < 0 || ht_ap.pool[k].base == 0)
        return NULL;
    struct ht_pool *pl = &ht_ap.pool[k];
    uint64_t page = pl->page;
    if (align > page || (ht_ap.layout == HT_LAYOUT_HEAD_TAIL && size < page))
        return NULL;
    uint64_t pages = (size + page - 1) / page;
    if (pages == 0)
        pages = 1;
    pthread_mutex_lock(&ht_ap.lock);
    long idx = pages <= pl->npages ? ht_pool_take(pl, (uint32_t)pages) : -1;
    if (idx < 0) {
        pthread_mutex_unlock(&ht_ap.lock);
        atomic_fetch_add(&ht_ap.pool_misses[k], 1);
        return NULL;
    }
    int dirty = ht_pool_dirty(pl, (uint32_t)idx, (uint32_t)pages);
    struct ht_reg_entry e;
    memset(&e, 0, sizeof e);
    e.ptr = pl->base + (uintptr_t)idx * page;
    pool_layout(&e.l, size, pages, page, want);
    e.category = (uint8_t)cat;
    e.want = (uint8_t)want;
    e.flags = HT_REG_POOL;
    e.pool = (uint8_t)k;
    e.pool_idx = (uint32_t)idx;
    if (reg_insert_locked(&e) != 0) {
        ht_pool_give(pl, (uint32_t)idx, (uint32_t)pages);
        pthread_mutex_unlock(&ht_ap.lock);
        ht_stats_error("owned-allocation registry cannot grow", "");
        return NULL;
    }
    ht_pool_mark_dirty(pl, (uint32_t)idx, (uint32_t)pages);
    pthread_mutex_unlock(&ht_ap.lock);
    if (zero && dirty)
        memset((void *)e.ptr, 0, size);
    /* The pool's pages are held since start-up: count them for the category only. */
    for (int i = 0; i < e.l.nseg; i++)
        ht_stats_cat_backed(cat, e.l.seg[i].backing, e.l.seg[i].len);
    atomic_fetch_add(&ht_ap.pool_allocs[k], 1);
    atomic_fetch_add(&ht_ap.round_up_waste, pages * page - size);
    return (void *)e.ptr;
}

static uint64_t sys_hugepages(uint64_t page_kb, const char *field)
{
    uint64_t v;
    return ht_hugepages_counter(page_kb, field, &v) == 0 ? v : 0;
}

void ht_owned_setup_pools(void)
{
    for (int k = 0; k < HT_POOL_N; k++) {
        uint64_t n = ht_ap.plan.pool_pages[k];
        int b = k == HT_POOL_2M ? HT_B_HUGETLB2M : HT_B_HUGETLB1G;
        uint64_t page = ht_backing_page(b);
        ht_ap.pool_planned[k] = n;
        if (n == 0)
            continue;
        if (ht_ap.fork_safe == HT_FORK_THP) {
            ht_stats_fallback(HT_CAT_POOL, b, HT_B_THP2M, "fork-safe", n * page);
            continue;
        }
        long r = -ENOMEM;
        uint64_t got = n;
        if (ht_inj(HT_INJ_HUGETLB))
            r = -HT_EINJECTED;
        else
            r = ht_sys_mmap(NULL, n * page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE |
                                (b == HT_B_HUGETLB1G ? HT_MAP_HUGE_1GB : HT_MAP_HUGE_2MB),
                            -1, 0);
        if (ht_mmap_failed(r) && r != -HT_EINJECTED) {
            /* Take what the kernel has free now, if anything. */
            uint64_t kb = page >> 10;
            uint64_t fr = sys_hugepages(kb, "free_hugepages"), rs = sys_hugepages(kb, "resv_hugepages");
            got = fr > rs ? fr - rs : 0;
            if (got > 0 && got < n)
                r = ht_sys_mmap(NULL, got * page, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE |
                                    (b == HT_B_HUGETLB1G ? HT_MAP_HUGE_1GB : HT_MAP_HUGE_2MB),
                                -1, 0);
        }
        if (!ht_mmap_failed(r) && ht_hugetlb_cgroup_limited(page >> 10) &&
            ht_sys_madvise((void *)r, got * page, HT_MADV_POPULATE_WRITE) != 0) {
            /* MAP_POPULATE ignores a hugetlb cgroup limit; a touch would not. */
            ht_sys_munmap((void *)r, got * page);
            r = -EDQUOT;
        }
        if (ht_mmap_failed(r)) {
            fallback(HT_CAT_POOL, b, HT_B_NONE, r, n * page);
            continue;
        }
        if (got < n)
            ht_stats_fallback(HT_CAT_POOL, b, HT_B_NONE, "pool-partial", (n - got) * page);
        long m = ht_sys_mmap(NULL, ht_pool_meta_bytes((uint32_t)got), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (ht_mmap_failed(m)) {
            ht_sys_munmap((void *)r, got * page);
            ht_stats_error("cannot map the pool's bitmap", "");
            continue;
        }
        ht_pool_init(&ht_ap.pool[k], (uintptr_t)r, page, (uint32_t)got, (void *)m);
        ht_stats_backed(HT_CAT_POOL, b, got * page); /* held, not a category's */
    }
}

/* ---- allocation ---- */

void *ht_owned_alloc(size_t size, int want, int cat, size_t align, int zero)
{
    if (size > HT_LAYOUT_MAX_SIZE)
        return NULL;
    want = ht_effective_want(want, cat, size);
    void *pp = pool_alloc(size, want, cat, align, zero);
    if (pp)
        return pp;
    struct ht_reg_entry e;
    memset(&e, 0, sizeof e);
    if (ht_layout_plan(&e.l, size, want, ht_ap.layout, align) != 0)
        return NULL;
    if (want != HT_B_4K && ht_layout_head_end(&e.l) == 0) {
        atomic_fetch_add(&ht_ap.sub_huge_allocs, 1);
        atomic_fetch_add(&ht_ap.sub_huge_bytes, e.l.size);
    }
    if (ht_ap.layout == HT_LAYOUT_ROUND_UP)
        atomic_fetch_add(&ht_ap.round_up_waste, ht_layout_total(&e.l) - e.l.size);
    long err = 0;
    uintptr_t p = map_block(&e.l, cat, &err);
    if (!p) {
        fallback(cat, HT_B_4K, HT_B_NONE, err, size);
        return NULL;
    }
    e.ptr = p;
    e.category = (uint8_t)cat;
    e.want = (uint8_t)want;
    pthread_mutex_lock(&ht_ap.lock);
    int r = reg_insert_locked(&e);
    pthread_mutex_unlock(&ht_ap.lock);
    if (r != 0) {
        ht_owned_munmap((void *)p, ht_layout_total(&e.l));
        ht_stats_error("owned-allocation registry cannot grow", "");
        return NULL;
    }
    seg_stats(&e.l, cat, +1);
    ht_apply_poll_slow();
    return (void *)p;
}

/* Takes p out of the registry (and its pool run back). 1: it was owned. */
static int owned_take(void *p, struct ht_reg_entry *e)
{
    if (((uintptr_t)p & (HT_HUGE_2M - 1)) != 0 || p == NULL ||
        atomic_load_explicit(&ht_ap.owned, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&ht_ap.lock);
    int r = ht_reg_remove(&ht_ap.reg, (uintptr_t)p, e);
    if (r == 0) {
        publish_count();
        if (e->flags & HT_REG_POOL) {
            struct ht_pool *pl = &ht_ap.pool[e->pool];
            ht_pool_give(pl, e->pool_idx, (uint32_t)(ht_layout_total(&e->l) / pl->page));
        }
    }
    pthread_mutex_unlock(&ht_ap.lock);
    return r == 0;
}

static void owned_release(const struct ht_reg_entry *e)
{
    if (e->flags & HT_REG_POOL)
        return;
    ht_verify_thp_block(e);
    /* Uncounted before the pages go back: once unmapped, another thread can
     * map them at once, and counting them twice would overstate the peak. */
    seg_stats(&e->l, e->category, -1);
    ht_owned_munmap((void *)e->ptr, ht_layout_total(&e->l));
}

int ht_owned_free(void *p)
{
    struct ht_reg_entry e;
    if (!owned_take(p, &e))
        return 0;
    owned_release(&e);
    ht_apply_poll_slow();
    return 1;
}

/* Moves the registry entry at key `old_ptr` to key `new_ptr`: the new key is
 * inserted before the old one goes, so a failure leaves the old entry as it was. */
static int reg_rekey(uintptr_t old_ptr, uintptr_t new_ptr)
{
    pthread_mutex_lock(&ht_ap.lock);
    int r = -1;
    struct ht_reg_entry *pe = ht_reg_find(&ht_ap.reg, old_ptr);
    if (pe) {
        struct ht_reg_entry e = *pe;
        e.ptr = new_ptr;
        r = reg_insert_locked(&e);
        if (r == 0) {
            ht_reg_remove(&ht_ap.reg, old_ptr, NULL);
            publish_count();
        }
    }
    pthread_mutex_unlock(&ht_ap.lock);
    return r;
}

/* Replaces the registry entry at key `old_ptr` by e. */
static int reg_update(uintptr_t old_ptr, const struct ht_reg_entry *e)
{
    pthread_mutex_lock(&ht_ap.lock);
    int r = 0;
    if (old_ptr == e->ptr) {
        struct ht_reg_entry *pe = ht_reg_find(&ht_ap.reg, old_ptr);
        if (pe)
            *pe = *e;
        else
            r = -1;
    } else {
        ht_reg_remove(&ht_ap.reg, old_ptr, NULL);
        r = reg_insert_locked(e);
        publish_count();
    }
    pthread_mutex_unlock(&ht_ap.lock);
    return r;
}

/* ---- realloc ---- */

/* Where a broken realloc's bytes are: up to 2 * HT_LAYOUT_MAX_SEGS + 2 pieces
 * in block order, and the ranges of ours to unmap afterwards. */
struct salvage {
    struct { uintptr_t at; size_t len; } data[2 * HT_LAYOUT_MAX_SEGS + 4], drop[2 * HT_LAYOUT_MAX_SEGS + 4];
    int nd, nx;
};

static void sv_data(struct salvage *v, uintptr_t at, size_t len)
{
    if (len && v->nd < (int)(sizeof v->data / sizeof v->data[0])) {
        v->data[v->nd].at = at;
        v->data[v->nd++].len = len;
    }
}

static void sv_drop(struct salvage *v, uintptr_t at, size_t len)
{
    if (len && v->nx < (int)(sizeof v->drop / sizeof v->drop[0])) {
        v->drop[v->nx].at = at;
        v->drop[v->nx++].len = len;
    }
}

/* A realloc whose block a failed step broke (part of it is not ours any
 * more): the first `copy` bytes of its data go into n bytes of the allocator's memory (an
 * owned 4 KB block if the allocator has none), everything of ours is
 * unmapped and the entry at `key` dropped. NULL: no memory anywhere; the
 * data is lost (the caller must not read the old pointer). */
static void *salvage(uintptr_t key, const struct ht_layout *orig, int orig_cat, struct salvage *v, size_t n,
                     size_t copy, int cat)
{
    void *g = ht_fwd_malloc(n);
    if (!g)
        g = ht_owned_alloc(n, HT_B_4K, cat, 0, 0);
    if (g) {
        size_t at = 0;
        for (int i = 0; i < v->nd && at < copy; i++) {
            size_t k = v->data[i].len < copy - at ? v->data[i].len : copy - at;
            memcpy((char *)g + at, (void *)v->data[i].at, k);
            at += k;
        }
    }
    struct ht_reg_entry e;
    pthread_mutex_lock(&ht_ap.lock);
    if (ht_reg_remove(&ht_ap.reg, key, &e) == 0)
        publish_count();
    pthread_mutex_unlock(&ht_ap.lock);
    seg_stats(orig, orig_cat, -1);
    for (int i = 0; i < v->nx; i++)
        ht_owned_munmap((void *)v->drop[i].at, v->drop[i].len);
    atomic_fetch_add(&ht_ap.realloc_salvaged, 1);
    ht_stats_error(g ? "realloc: a failed step broke an owned block; its data went to the allocator"
                     : "realloc: a failed step broke an owned block and no memory was left for its data",
                   "");
    return g;
}

/* The block's segments are at p, [p + old_total, p + total(out)) is ordinary
 * memory of ours: put the new head pieces [from, to) in place (copying the
 * old bytes that lie under a hugetlb piece) and advise the tail. Returns the
 * final layout in *fin, or -1 when a piece's range was lost: *v then says
 * where the old bytes are and what to unmap (salvage). */
static int grow_at(uintptr_t p, const struct ht_layout *old, const struct ht_layout *out,
                   uint64_t from, uint64_t to, int cat, struct ht_layout *fin, struct salvage *v)
{
    uint64_t old_total = ht_layout_total(old), new_total = ht_layout_total(out);
    struct ht_layout f = *out;
    f.nseg = 0;
    uint64_t off = 0;
    int ok = 1;
    for (int i = 0; i < out->nseg; i++) {
        uint64_t a = off, b = off + out->seg[i].len;
        off = b;
        int bk = out->seg[i].backing;
        /* Part before `from` (old head) and after `to` (tail) stay as they are. */
        uint64_t lo = a > from ? a : from, hi = b < to ? b : to;
        if (lo >= hi) {
            ok &= ht_layout_append(&f, b - a, bk) == 0;
            continue;
        }
        if (a < lo)
            ok &= ht_layout_append(&f, lo - a, bk) == 0;
        size_t old_bytes = lo < old_total ? (size_t)((hi < old_total ? hi : old_total) - lo) : 0;
        uintptr_t rescue = 0;
        int got = ht_place(p + lo, hi - lo, bk, cat, out->size, 1, old_bytes, &rescue);
        if (got == HT_B_NONE) {
            v->nd = v->nx = 0;
            sv_data(v, p, lo < old_total ? lo : old_total);
            if (old_bytes && rescue)
                sv_data(v, rescue, old_bytes);
            if (hi < old_total)
                sv_data(v, p + hi, old_total - hi);
            sv_drop(v, p, lo);
            sv_drop(v, p + hi, new_total - hi);
            if (rescue)
                sv_drop(v, rescue, hi - lo);
            return -1;
        }
        ok &= ht_layout_append(&f, hi - lo, got) == 0;
        if (hi < b)
            ok &= ht_layout_append(&f, b - hi, bk) == 0;
    }
    if (new_total > to)
        ht_owned_madvise((void *)(p + to), new_total - to, MADV_NOHUGEPAGE);
    if (!ok) {
        /* More distinct segments than an entry holds (fallbacks inside a
         * grown head): the range is correct, describe it coarsely. */
        f = *out;
        ht_layout_normalize(&f);
    }
    ht_layout_normalize(&f);
    *fin = f;
    return 0;
}

/* Moves the block's segments from p to q (a fresh mapping of ours of `qlen`
 * bytes): mremap keeps hugetlb pages and THP page tables without copying; a
 * segment that cannot move is placed anew and copied. -1 when a segment's
 * range at q was lost: *v then says where the bytes are (moved segments at q,
 * the rest still at p) and what to unmap. */
static int relocate(uintptr_t p, struct ht_layout *l, uintptr_t q, size_t qlen, int cat, struct salvage *v)
{
    uint64_t off = 0;
    for (int i = 0; i < l->nseg; i++) {
        size_t len = l->seg[i].len;
        long m = ht_owned_move((void *)(p + off), len, (void *)(q + off));
        if (ht_mmap_failed(m)) {
            /* q + off is a hole now (the source is intact): refill, place, copy. */
            long f = ht_refill(q + off, len, PROT_READ | PROT_WRITE, 0);
            int got = HT_B_NONE;
            if (ht_mmap_failed(f))
                hole_error("realloc: a refused move left a hole that could not be refilled: ", f);
            else
                got = ht_place(q + off, len, l->seg[i].backing, cat, l->size, 0, 0, NULL);
            if (got == HT_B_NONE) {
                v->nd = v->nx = 0;
                sv_data(v, q, off);
                sv_data(v, p + off, ht_layout_total(l) - off);
                sv_drop(v, q, off);
                sv_drop(v, q + off + len, qlen - off - len);
                sv_drop(v, p + off, ht_layout_total(l) - off);
                return -1;
            }
            l->seg[i].backing = got;
            memcpy((void *)(q + off), (void *)(p + off), len);
            ht_owned_munmap((void *)(p + off), len);
        }
        off += len;
    }
    ht_layout_normalize(l);
    return 0;
}

void *ht_owned_realloc(const struct ht_reg_entry *e0, size_t n, int want, int cat)
{
    struct ht_reg_entry e = *e0;
    const struct ht_layout orig = e0->l;
    uintptr_t p = e.ptr;
    size_t usable = ht_owned_usable(&e);
    if (n > HT_LAYOUT_MAX_SIZE)
        return NULL;
    want = ht_effective_want(want, cat, n);

    if (e.flags & HT_REG_POOL) {
        struct ht_pool *pl = &ht_ap.pool[e.pool];
        uint32_t k = (uint32_t)(usable / pl->page);
        uint64_t k2 = (n + pl->page - 1) / pl->page;
        if (k2 == 0)
            k2 = 1;
        pthread_mutex_lock(&ht_ap.lock);
        int ok = 0;
        if (k2 <= k) {
            if (k2 < k)
                ht_pool_give(pl, e.pool_idx + (uint32_t)k2, k - (uint32_t)k2);
            ok = 1;
        } else if (k2 <= pl->npages && ht_pool_extend(pl, e.pool_idx, k, (uint32_t)k2) == 0) {
            ht_pool_mark_dirty(pl, e.pool_idx, (uint32_t)k2);
            ok = 1;
        }
        if (ok) {
            pool_layout(&e.l, n, k2, pl->page, e.l.seg[0].backing);
            e.category = (uint8_t)cat;
            struct ht_reg_entry *pe = ht_reg_find(&ht_ap.reg, p);
            if (pe)
                *pe = e;
            pthread_mutex_unlock(&ht_ap.lock);
            if (k2 > k)
                ht_stats_cat_backed(cat, e.l.seg[0].backing, (k2 - k) * pl->page);
            atomic_fetch_add(k2 <= k ? &ht_ap.realloc_shrunk : &ht_ap.realloc_in_place, 1);
            return (void *)p;
        }
        pthread_mutex_unlock(&ht_ap.lock);
        goto copy;
    }

    if (n <= usable) {
        /* Shrink (or same): release whole pages beyond the new end. */
        struct ht_layout nl = e.l;
        uint64_t nt = ht_layout_shrink(&nl, n);
        diff_stats(&e.l, &nl, cat); /* before the pages go back (owned_release) */
        if (nt < usable)
            ht_owned_munmap((void *)(p + nt), usable - nt);
        e.l = nl;
        e.category = (uint8_t)cat;
        reg_update(p, &e);
        atomic_fetch_add(&ht_ap.realloc_shrunk, 1);
        return (void *)p;
    }

    {
        struct ht_layout w, out;
        uint64_t from, to;
        if (ht_layout_plan(&w, n, want, ht_ap.layout, e.l.align) != 0 ||
            ht_layout_extend(&e.l, &w, &out, &from, &to) != 0)
            goto copy;
        uint64_t nt = ht_layout_total(&out);
        /* In place: the address range after the block must be free. */
        long r = ht_owned_mmap((void *)(p + usable), nt - usable, PROT_READ | PROT_WRITE, MAP_FIXED_NOREPLACE);
        if (!ht_mmap_failed(r) && (uintptr_t)r != p + usable) {
            ht_sys_munmap((void *)r, nt - usable); /* a kernel without NOREPLACE */
            r = -EEXIST;
        }
        uintptr_t q = p;
        if (ht_mmap_failed(r)) {
            /* Move: a fresh range, the segments carried over by mremap. */
            long m = map_aligned(nt, e.l.align);
            if (ht_mmap_failed(m))
                goto copy;
            q = (uintptr_t)m;
            /* Re-key the entry to q before the move gives p's range back: another
             * thread's mmap may get that range at once, and its registry insert
             * must not meet a stale entry for p. */
            if (reg_rekey(p, q) != 0) {
                ht_owned_munmap((void *)q, nt);
                goto copy;
            }
            struct salvage v;
            if (relocate(p, &e.l, q, nt, cat, &v) != 0)
                return salvage(q, &orig, e0->category, &v, n, n < usable ? n : usable, cat) ?: HT_REALLOC_GONE;
            if (ht_layout_head_end(&e.l) != from) {
                /* A segment changed backing while moving: describe anew. */
                if (ht_layout_extend(&e.l, &w, &out, &from, &to) != 0) {
                    out = e.l;
                    ht_layout_append(&out, nt - ht_layout_total(&e.l), HT_B_4K);
                    from = to = ht_layout_head_end(&out);
                }
            }
        }
        struct ht_layout fin;
        struct salvage v;
        if (grow_at(q, &e.l, &out, from, to, cat, &fin, &v) != 0)
            return salvage(q, &orig, e0->category, &v, n, n < usable ? n : usable, cat) ?: HT_REALLOC_GONE;
        diff_stats(&orig, &fin, cat);
        e.l = fin;
        e.l.size = n;
        e.ptr = q;
        e.category = (uint8_t)cat;
        if (reg_update(q, &e) != 0) {
            /* Cannot track it any more: give the data to the allocator. */
            void *g = ht_fwd_malloc(n);
            if (g)
                memcpy(g, (void *)q, n);
            seg_stats(&e.l, cat, -1);
            ht_owned_munmap((void *)q, ht_layout_total(&e.l));
            ht_stats_error("owned-allocation registry cannot grow", "");
            return g;
        }
        atomic_fetch_add(q == p ? &ht_ap.realloc_in_place : &ht_ap.realloc_moved, 1);
        ht_apply_poll_slow();
        return (void *)q;
    }

copy:
    {
        void *q = ht_owned_alloc(n, want, cat, e.l.align > HT_HUGE_2M ? e.l.align : 0, 0);
        if (!q)
            return NULL;
        memcpy(q, (void *)p, usable < n ? usable : n);
        ht_owned_free((void *)p);
        atomic_fetch_add(&ht_ap.realloc_copied, 1);
        return q;
    }
}
