/* forksafe.c - fork protection of private hugetlb memory (plan `fork-safe`,
 * docs/formats.md section 3).
 *
 * The hazard: after fork, parent and child share private hugetlb pages
 * copy-on-write. A write needs a fresh huge page; with the pool empty the
 * kernel gives the page to the reservation owner (the parent) and unmaps it
 * from the child, which gets SIGBUS at its next access; a child writing first
 * gets SIGBUS at once. (Reproduced here: pool shrunk to 0 after the parent
 * touched its pages, both write: the child dies with SIGBUS.)
 *
 * Modes:
 *   fork-safe thp   (plan time, for programs whose profile shows forks): no
 *                   private hugetlb memory at all; hugetlb plans are served
 *                   with THP (counted as fallbacks with reason fork-safe).
 *                   THP copy-on-write falls back to 4 KB pages: never SIGBUS.
 *   fork-safe copy  (default, the run-time protection): in the prepare handler
 *                   (in the forking thread, before the kernel copies the
 *                   address space) every private hugetlb range of ours gets a
 *                   snapshot: ordinary (THP-advised) memory holding a copy of
 *                   its resident pages, and the range is marked MADV_DONTFORK.
 *                   The child therefore never maps our hugetlb pages; its
 *                   handler moves each snapshot to the range's address with
 *                   mremap (no second copy) and the child's registry now says
 *                   thp-2m (or 4k). The parent's handler unmaps its snapshots
 *                   and clears MADV_DONTFORK. Nobody shares a hugetlb page, so
 *                   no copy-on-write of one can ever be needed: no SIGBUS in
 *                   either process, whatever the pool holds.
 *   fork-safe off   forks are only counted (the kernel hazard remains).
 *
 * What `copy` does not cover: a fork that bypasses the atfork handlers (raw
 * clone/fork system calls, glibc's _Fork) inherits the hugetlb pages as
 * before; and another thread of the parent that writes to hugetlb memory
 * between the snapshot and the kernel's copy makes the child see the value
 * from a moment earlier (a write racing with fork, visible only through a
 * second, ordinary memory location written later). vfork/posix_spawn share
 * the address space and need nothing. The cost is one copy of the resident
 * hugetlb bytes per fork, in the forking thread (the planner avoids it with
 * `fork-safe thp` for programs known to fork). */
#include "apply_int.h"

#include "sys.h"

#include <string.h>
#include <sys/mman.h>

enum { SNAP_BLOCK = 0, SNAP_ARENA, SNAP_STATIC };

struct snap {
    uintptr_t addr;
    size_t len;
    uintptr_t snap;  /* 0: no snapshot (unprotected) */
    uintptr_t owner; /* SNAP_BLOCK: the block's pointer; SNAP_STATIC: range index */
    int kind;
    int from_b;      /* hugetlb backing it had */
    int snap_b;      /* backing of the snapshot */
};

static struct snap *g_snaps;
static size_t g_nsnaps, g_cap, g_tab_bytes;

static void add_range(uintptr_t a, size_t len, int kind, uintptr_t owner, int from_b)
{
    if (g_nsnaps == g_cap)
        return;
    struct snap *s = &g_snaps[g_nsnaps++];
    s->addr = a;
    s->len = len;
    s->snap = 0;
    s->owner = owner;
    s->kind = kind;
    s->from_b = from_b;
    s->snap_b = HT_B_NONE;
}

static void arena_cb(uintptr_t a, size_t len, void *ctx)
{
    (void)ctx;
    add_range(a, len, SNAP_ARENA, 0, HT_B_HUGETLB2M);
}

static void make_snapshot(struct snap *s)
{
    size_t over = s->len + HT_HUGE_2M;
    long r = ht_sys_mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(r)) {
        atomic_fetch_add(&ht_ap.fork_unprotected, 1);
        return;
    }
    uintptr_t a = (uintptr_t)r, al = (a + HT_HUGE_2M - 1) & ~(uintptr_t)(HT_HUGE_2M - 1);
    if (al > a)
        ht_sys_munmap((void *)a, al - a);
    if (a + over > al + s->len)
        ht_sys_munmap((void *)(al + s->len), a + over - (al + s->len));
    int b = HT_B_4K;
    if (ht_ap.thp_ok[HT_B_THP2M] && ht_sys_madvise((void *)al, s->len, MADV_HUGEPAGE) == 0)
        b = HT_B_THP2M;
    /* Copy the resident huge pages only (untouched ones read as zero anyway). */
    uint64_t copied = 0;
    for (size_t off = 0; off < s->len; off += HT_HUGE_2M) {
        unsigned char v = 0;
        size_t n = s->len - off < HT_HUGE_2M ? s->len - off : HT_HUGE_2M;
        long mr = HT_SYSCALL(SYS_mincore, (void *)(s->addr + off), (size_t)4096, &v);
        if (mr == 0 && !(v & 1))
            continue;
        memcpy((void *)(al + off), (void *)(s->addr + off), n);
        copied += n;
    }
    if (ht_sys_madvise((void *)s->addr, s->len, MADV_DONTFORK) != 0) {
        ht_sys_munmap((void *)al, s->len);
        atomic_fetch_add(&ht_ap.fork_unprotected, 1);
        return;
    }
    s->snap = al;
    s->snap_b = b;
    atomic_fetch_add(&ht_ap.fork_protected, 1);
    atomic_fetch_add(&ht_ap.fork_copied_bytes, copied);
}

void ht_fork_prepare(void)
{
    ht_owned_lock();
    ht_arena_atfork_prepare();
    g_snaps = NULL;
    g_nsnaps = g_cap = 0;
    if (ht_ap.fork_safe != HT_FORK_COPY)
        return;
    size_t cap = ht_ap.reg.count * HT_LAYOUT_MAX_SEGS + (size_t)ht_nstatic_ranges;
    if (ht_arena_on)
        cap += (ht_arena.committed - ht_arena.base) / HT_MAG_CHUNK;
    if (cap == 0)
        return;
    g_tab_bytes = (cap * sizeof(struct snap) + 4095) & ~(size_t)4095;
    long t = ht_sys_mmap(NULL, g_tab_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(t)) {
        atomic_fetch_add(&ht_ap.fork_unprotected, 1);
        ht_stats_error("fork: cannot map the snapshot table: hugetlb memory unprotected", "");
        return;
    }
    g_snaps = (struct snap *)t;
    g_cap = cap;
    for (size_t i = 0; ht_ap.reg.tab && i < ht_ap.reg.cap; i++) {
        const struct ht_reg_entry *e = &ht_ap.reg.tab[i];
        if (!e->ptr)
            continue;
        uint64_t off = 0;
        for (int k = 0; k < e->l.nseg; k++) {
            if (ht_backing_is_hugetlb(e->l.seg[k].backing))
                add_range(e->ptr + off, e->l.seg[k].len, SNAP_BLOCK, e->ptr, e->l.seg[k].backing);
            off += e->l.seg[k].len;
        }
    }
    ht_arena_hugetlb_ranges(arena_cb, NULL);
    for (int i = 0; i < ht_nstatic_ranges; i++)
        if (ht_backing_is_hugetlb(ht_static_ranges[i].backing))
            add_range(ht_static_ranges[i].lo, ht_static_ranges[i].hi - ht_static_ranges[i].lo,
                      SNAP_STATIC, (uintptr_t)i, ht_static_ranges[i].backing);
    for (size_t i = 0; i < g_nsnaps; i++)
        make_snapshot(&g_snaps[i]);
}

static void drop_table(void)
{
    if (g_snaps)
        ht_sys_munmap(g_snaps, g_tab_bytes);
    g_snaps = NULL;
    g_nsnaps = g_cap = 0;
}

void ht_fork_parent(void)
{
    for (size_t i = 0; i < g_nsnaps; i++) {
        struct snap *s = &g_snaps[i];
        if (!s->snap)
            continue;
        ht_sys_madvise((void *)s->addr, s->len, MADV_DOFORK);
        ht_sys_munmap((void *)s->snap, s->len);
    }
    drop_table();
    ht_arena_atfork_parent();
    ht_owned_unlock();
}

/* The child's registry entry for block `owner`: segment at addr now has backing b. */
static void adopt_block(uintptr_t owner, uintptr_t addr, int b)
{
    struct ht_reg_entry *e = ht_reg_find(&ht_ap.reg, owner);
    if (!e)
        return;
    uint64_t off = 0;
    for (int k = 0; k < e->l.nseg; k++) {
        if (owner + off == addr) {
            e->l.seg[k].backing = b;
            break;
        }
        off += e->l.seg[k].len;
    }
    if (e->flags & HT_REG_POOL)
        e->flags &= (uint8_t)~HT_REG_POOL; /* the child's copy is its own mapping */
    e->flags |= HT_REG_FORKED;
    ht_layout_normalize(&e->l);
}

void ht_fork_child(void)
{
    for (size_t i = 0; i < g_nsnaps; i++) {
        struct snap *s = &g_snaps[i];
        if (!s->snap)
            continue;
        long m = ht_owned_move((void *)s->snap, s->len, (void *)s->addr);
        if (ht_mmap_failed(m)) {
            /* The range is a hole in the child (MADV_DONTFORK): fill it. The
             * child has one thread: MAP_FIXED hits nothing of another's. */
            long r = ht_sys_mmap((void *)s->addr, s->len, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (!ht_mmap_failed(r)) {
                memcpy((void *)s->addr, (void *)s->snap, s->len);
                ht_sys_munmap((void *)s->snap, s->len);
            } else {
                /* Nothing can be mapped: one more move, else the snapshot
                 * stays where it is and the range stays a hole. */
                ht_sys_mremap((void *)s->snap, s->len, s->len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)s->addr);
                ht_stats_error("fork: a protected range could not be restored in the child", "");
            }
            s->snap_b = HT_B_4K;
        }
        ht_stats_released(s->from_b, s->len);
        ht_stats_backed(HT_CAT_POOL, s->snap_b, s->len);
        atomic_fetch_add(&ht_ap.fork_adopted_bytes, s->len);
        switch (s->kind) {
        case SNAP_BLOCK: adopt_block(s->owner, s->addr, s->snap_b); break;
        case SNAP_ARENA: ht_arena_adopted(s->addr, s->len, s->snap_b); break;
        default: ht_static_ranges[s->owner].backing = s->snap_b; break;
        }
    }
    drop_table();
    /* The child's pool is gone where runs were copied and shared elsewhere:
     * it serves nothing (its blocks are the child's own mappings now). */
    for (int k = 0; k < HT_POOL_N; k++)
        if (ht_ap.fork_safe == HT_FORK_COPY)
            ht_ap.pool[k].base = 0;
    ht_arena_atfork_child();
    ht_owned_unlock();
}
