/* mapped.c - memory the program maps itself (docs/formats.md section 3,
 * "Mapped memory"): its own anonymous private mappings, backed at mmap time
 * by the plan's `site` or `heap-large` directive, and the program's
 * munmap/mremap/mprotect/madvise/MAP_FIXED semantics kept on them.
 *
 * Which mappings (the same predicate as the Rust reader's
 * `Record::is_backable_mapping`, crates/format/src/alloclog.rs): no address
 * wanted (no MAP_FIXED / MAP_FIXED_NOREPLACE; a hint is a hint and is
 * dropped), MAP_PRIVATE | MAP_ANONYMOUS with at most MAP_POPULATE besides,
 * PROT_READ | PROT_WRITE, offset 0. Everything else (files, shared memory,
 * PROT_NONE reservations committed later, stacks, MAP_NORESERVE, the
 * program's own MAP_HUGETLB) passes through untouched.
 *
 * Layouts (what the model places, crates/model categorize.rs):
 *   hugetlb  a range reserved 2 MB (1 GB) aligned, its head of whole huge
 *            pages mapped MAP_HUGETLB over it, the rest (< one huge page) on
 *            4 KB pages right after: no partial huge page is zeroed, and the
 *            program's munmap(p, len) of the whole mapping works as the
 *            kernel's own would (both VMAs end where the program's does).
 *            ENOMEM (pool empty) or an injected failure: the THP layout.
 *   thp      one ordinary mapping, 2 MB aligned, MADV_HUGEPAGE over all of
 *            it: a single VMA, so every later call of the program behaves as
 *            on any anonymous mapping. MAP_POPULATE: populated after the
 *            advice (huge pages at once), then MADV_COLLAPSE for what the
 *            fault path left on 4 KB pages.
 *
 * Invariant: a hugetlb-backed mapping is listed in g_ent until it is
 * unmapped or "disowned". The kernel refuses to cut a hugetlb VMA at a
 * non-aligned address (munmap, mprotect, madvise, MAP_FIXED, mremap: EINVAL)
 * and mremap cannot span our two VMAs (EFAULT), so before any such call that
 * touches a listed mapping other than a munmap/MAP_FIXED covering all of it,
 * the mapping is disowned: its bytes are copied into one fresh ordinary
 * (THP-advised) mapping that mremap moves over it in one step, and the
 * program's call then runs on plain memory, as it would have without us.
 * Before a fork every listed mapping is disowned (private hugetlb pages
 * shared copy-on-write SIGBUS when the pool is short), unless the plan says
 * `fork-safe off`.
 *
 * A disown never loses a write. The copying thread blocks its signals (its
 * own handlers cannot write behind the copy). When the process has other
 * threads, the mapping is write-protected through userfaultfd (WP mode; the
 * unpopulated parts too: pte markers) before the copy: a write by another
 * thread, or by the kernel for it (read(2) into the buffer), waits in the
 * fault until the new memory has replaced the old and the userfaultfd is
 * closed, then retries there. Hence hugetlb is used for program mappings
 * only where this protection works (probed once: userfaultfd with
 * UFFD_FEATURE_WP_HUGETLBFS_SHMEM and UFFD_FEATURE_WP_UNPOPULATED, kernel
 * 6.4+, not refused by seccomp or vm.unprivileged_userfaultfd); elsewhere THP,
 * which the kernel itself splits safely. Should the userfaultfd fail at a
 * later cut (no descriptor left), the copy runs unprotected and the summary
 * counts it (`disown_unprotected`). The planner keeps hugetlb off program
 * mappings that the profile saw cut or a program that forks (plan `mapped
 * thp`), so disowns are the exception.
 *
 * A JVM (plan `jvm B`) backs its own heap: the launcher passed it
 * -XX:+UseTransparentHugePages or -XX:+UseLargePages. Its mappings are then
 * left alone (never taken here, so nothing of the JVM's is ever disowned or
 * re-placed), and the summary's `jvm` object reports what smaps shows of
 * them: AnonHugePages and Private_Hugetlb of the anonymous mappings, with the
 * ranges that hold any (the launcher picks the Java heap out of them). */
#include "apply_int.h"

#include "fmt.h"
#include "proc.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define MADV_COLLAPSE_ 25
/* Older uapi headers lack these (values from linux/userfaultfd.h, 6.4). */
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1 << 12)
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#define UFFD_WANTED (UFFD_FEATURE_WP_HUGETLBFS_SHMEM | UFFD_FEATURE_WP_UNPOPULATED)

struct mapped_ent {
    uintptr_t start;
    size_t len;  /* page-rounded program length */
    size_t head; /* bytes on hugetlb pages from start */
    int backing;
    int cat;
};

#define MAPPED_MAX 1024
static struct mapped_ent g_ent[MAPPED_MAX];
static int g_n;
_Atomic int ht_mapped_live; /* g_n + g_nthp, read without the lock by the hooks */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* THP-backed mappings are not needed for semantics; the largest are kept for
 * the summary's proof (AnonHugePages over each). */
#define THP_SHOWN 64
static struct mapped_ent g_thp[THP_SHOWN];
static int g_nthp;

static _Atomic uint64_t g_maps, g_hugetlb_maps, g_thp_maps, g_fallbacks, g_disowned, g_disowned_bytes,
    g_disown_failed, g_collapsed, g_sub_huge, g_thp_verified_gone, g_disown_protected, g_disown_unprotected,
    g_planned_thp, g_jvm_left;
/* userfaultfd write protection of hugetlb and anonymous memory: 0 not probed
 * yet, 1 works, -1 not here (program mappings then get THP). */
static _Atomic int g_uffd_state;
static _Atomic int g_verify_budget = 256; /* smaps reads at munmap */

int ht_mapped_eligible(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    (void)addr; /* a hint is only a hint */
    (void)fd;   /* ignored by the kernel for MAP_ANONYMOUS */
    const int allowed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
    return len > 0 && (flags & MAP_ANONYMOUS) && (flags & 0x0f) == MAP_PRIVATE && (flags & ~allowed) == 0 &&
           prot == (PROT_READ | PROT_WRITE) && off == 0;
}

static void thp_remember(uintptr_t start, size_t len, int cat)
{
    pthread_mutex_lock(&g_lock);
    int at = g_nthp < THP_SHOWN ? g_nthp++ : -1;
    if (at < 0) { /* replace the smallest */
        at = 0;
        for (int i = 1; i < THP_SHOWN; i++)
            if (g_thp[i].len < g_thp[at].len)
                at = i;
        if (g_thp[at].len >= len)
            at = -1;
    }
    if (at >= 0)
        g_thp[at] = (struct mapped_ent){start, len, 0, HT_B_THP2M, cat};
    atomic_store(&ht_mapped_live, g_n + g_nthp);
    pthread_mutex_unlock(&g_lock);
}

/* A userfaultfd with write protection of hugetlb and of unpopulated memory,
 * or -errno. */
static int uffd_open(void)
{
    if (ht_inj(HT_INJ_UFFD))
        return -HT_EINJECTED;
    long fd = HT_SYSCALL(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return (int)fd;
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_WANTED};
    if (ioctl((int)fd, UFFDIO_API, &api) != 0 || (api.features & UFFD_WANTED) != UFFD_WANTED ||
        !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        ht_sys_close((int)fd);
        return -EOPNOTSUPP;
    }
    return (int)fd;
}

/* Whether a disown can be protected against other threads' writes (probed
 * once; a failed probe is final). */
static int uffd_usable(void)
{
    int st = atomic_load(&g_uffd_state);
    if (st == 0) {
        int fd = uffd_open();
        st = fd >= 0 ? 1 : -1;
        if (fd >= 0)
            ht_sys_close(fd);
        atomic_store(&g_uffd_state, st);
    }
    return st > 0;
}

/* Write-protects e (both VMAs of the hugetlb layout) so that every writer
 * waits until the returned userfaultfd is closed. -errno: not protected. The
 * kernel wants a hugetlb VMA's range whole-page sized, even where the range
 * goes on into the next VMA: head and tail are protected one by one. */
static int uffd_protect(uintptr_t start, size_t head, size_t len)
{
    int fd = uffd_open();
    if (fd < 0)
        return fd;
    struct uffdio_register reg = {.range = {start, len}, .mode = UFFDIO_REGISTER_MODE_WP};
    struct uffdio_writeprotect wh = {.range = {start, head}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    struct uffdio_writeprotect wt = {.range = {start + head, len - head}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0 || (head && ioctl(fd, UFFDIO_WRITEPROTECT, &wh) != 0) ||
        (len > head && ioctl(fd, UFFDIO_WRITEPROTECT, &wt) != 0)) {
        int e = errno;
        ht_sys_close(fd); /* unregisters and lifts what was protected; nothing waits yet */
        return -e;
    }
    return fd;
}

/* Lifts the protection where the mapping stays (a failed disown) and closes
 * fd: waiting writers retry on the memory now at the address. */
static void uffd_release(int fd, uintptr_t start, size_t head, size_t len, int still_mapped)
{
    if (still_mapped) {
        struct uffdio_writeprotect wh = {.range = {start, head}, .mode = 0};
        struct uffdio_writeprotect wt = {.range = {start + head, len - head}, .mode = 0};
        if (head)
            ioctl(fd, UFFDIO_WRITEPROTECT, &wh);
        if (len > head)
            ioctl(fd, UFFDIO_WRITEPROTECT, &wt);
    }
    ht_sys_close(fd);
}

/* Ordinary memory at a 2 MB boundary, advised huge: the THP layout. */
static long map_thp(size_t len, int populate, int cat, int want)
{
    size_t span = len + HT_HUGE_2M;
    long r = ht_sys_mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(r))
        return r;
    uintptr_t raw = (uintptr_t)r, s = (raw + HT_HUGE_2M - 1) & ~(HT_HUGE_2M - 1);
    if (s > raw)
        ht_sys_munmap((void *)raw, s - raw);
    if (raw + span > s + len)
        ht_sys_munmap((void *)(s + len), raw + span - (s + len));
    long m = ht_madvise_huge((void *)s, len);
    if (m != 0) {
        if (m == -HT_EINJECTED)
            ht_stats_fallback(cat, want, HT_B_4K, "injected", len);
        else
            ht_stats_fallback_errno(cat, want, HT_B_4K, (int)-m, len);
    } else {
        atomic_fetch_add(&g_thp_maps, 1);
        thp_remember(s, len, cat);
    }
    if (populate) {
        ht_sys_madvise((void *)s, len, HT_MADV_POPULATE_WRITE);
        if (m == 0 && len >= HT_HUGE_2M && ht_owned_madvise((void *)s, len & ~(HT_HUGE_2M - 1), MADV_COLLAPSE_) == 0)
            atomic_fetch_add(&g_collapsed, 1);
    }
    return (long)s;
}

/* The hugetlb layout, or -errno with nothing left mapped. */
static long map_hugetlb(size_t len, int b, int populate)
{
    size_t page = b == HT_B_HUGETLB1G ? (1ul << 30) : HT_HUGE_2M;
    size_t head = len & ~(page - 1);
    size_t span = len + page;
    long r = ht_sys_mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ht_mmap_failed(r))
        return r;
    uintptr_t raw = (uintptr_t)r, s = (raw + page - 1) & ~(page - 1);
    long h = -HT_EINJECTED;
    if (!ht_inj(HT_INJ_HUGETLB)) {
        int f = MAP_HUGETLB | (b == HT_B_HUGETLB1G ? (30 << 26) : (21 << 26));
        h = ht_sys_mmap((void *)s, head, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | f, -1, 0);
        if (!ht_mmap_failed(h) && (populate || ht_hugetlb_cgroup_limited(page >> 10)) &&
            ht_sys_madvise((void *)s, head, HT_MADV_POPULATE_WRITE) != 0)
            h = -EDQUOT; /* a cgroup limit: the first touch would SIGBUS */
    }
    if (ht_mmap_failed(h)) {
        ht_sys_munmap((void *)raw, span);
        return h;
    }
    long t = 0;
    if (len > head)
        t = ht_sys_mmap((void *)(s + head), len - head, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (populate ? MAP_POPULATE : 0), -1, 0);
    if (ht_mmap_failed(t)) {
        ht_sys_munmap((void *)raw, span);
        return t;
    }
    if (s > raw)
        ht_sys_munmap((void *)raw, s - raw);
    if (raw + span > s + len)
        ht_sys_munmap((void *)(s + len), raw + span - (s + len));
    return (long)s;
}

void *ht_mapped_mmap(size_t len, int flags, const void *caller, int *taken)
{
    int cat;
    *taken = 0;
    if (ht_ap.plan.jvm != HT_B_NONE) { /* the JVM's own switch backs them */
        atomic_fetch_add(&g_jvm_left, 1);
        return NULL;
    }
    size_t plen = (len + 4095) & ~(size_t)4095;
    if (plen < len)
        return NULL;
    int want = ht_apply_decide(plen, caller, &cat);
    if (want == HT_B_NONE || want == HT_B_4K)
        return NULL;
    ht_count_alloc(cat, plen);
    atomic_fetch_add(&g_maps, 1);
    if (plen < HT_HUGE_2M) { /* nothing huge fits: leave it to the kernel */
        atomic_fetch_add(&g_sub_huge, 1);
        return NULL;
    }
    int populate = (flags & MAP_POPULATE) != 0;
    int b = ht_effective_want(want, cat, plen);
    if (ht_backing_is_hugetlb(b) && ht_ap.plan.mapped_thp) {
        /* `mapped thp`: the profile saw the program cut its mappings, or
         * fork; the kernel splits THP where it must. */
        atomic_fetch_add(&g_planned_thp, 1);
        b = HT_B_THP2M;
    } else if (ht_backing_is_hugetlb(b) && !uffd_usable()) {
        /* A cut could not be made safe for other threads' writes. */
        ht_stats_fallback(cat, b, HT_B_THP2M, "no-uffd", plen);
        b = HT_B_THP2M;
    }
    if (ht_backing_is_hugetlb(b)) {
        size_t page = b == HT_B_HUGETLB1G ? (1ul << 30) : HT_HUGE_2M;
        if (plen < page)
            b = HT_B_HUGETLB2M, page = HT_HUGE_2M;
        pthread_mutex_lock(&g_lock);
        int room = g_n < MAPPED_MAX;
        pthread_mutex_unlock(&g_lock);
        long r = room ? map_hugetlb(plen, b, populate) : -ENOSPC;
        if (!ht_mmap_failed(r)) {
            size_t head = plen & ~(page - 1);
            pthread_mutex_lock(&g_lock);
            g_ent[g_n++] = (struct mapped_ent){(uintptr_t)r, plen, head, b, cat};
            atomic_store(&ht_mapped_live, g_n + g_nthp);
            pthread_mutex_unlock(&g_lock);
            ht_stats_backed(cat, b, head);
            if (plen > head)
                ht_stats_backed(cat, HT_B_4K, plen - head);
            atomic_fetch_add(&g_hugetlb_maps, 1);
            *taken = 1;
            return (void *)r;
        }
        /* Never fail the program's mmap for want of huge pages. */
        if (r == -HT_EINJECTED)
            ht_stats_fallback(cat, b, HT_B_THP2M, "injected", plen);
        else
            ht_stats_fallback_errno(cat, b, HT_B_THP2M, (int)-r, plen);
        atomic_fetch_add(&g_fallbacks, 1);
    }
    long r = map_thp(plen, populate, cat, b);
    if (ht_mmap_failed(r))
        return NULL; /* the kernel's own mmap decides */
    *taken = 1;
    return (void *)r;
}

/* Copies what is resident of e into one ordinary mapping moved over it.
 * Called with g_lock held; removes e on success. No write is lost: see the
 * header (signals blocked here, other threads held off by userfaultfd). */
static int disown(int i)
{
    struct mapped_ent e = g_ent[i];
    long t = ht_sys_mmap(NULL, e.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(t)) {
        atomic_fetch_add(&g_disown_failed, 1);
        return (int)t;
    }
    ht_sys_madvise((void *)t, e.len, MADV_HUGEPAGE);
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int uffd = -1;
    if (ht_thread_count() != 1) { /* -1 (unreadable) counts as threaded */
        uffd = uffd_protect(e.start, e.head, e.len);
        atomic_fetch_add(uffd >= 0 ? &g_disown_protected : &g_disown_unprotected, 1);
    }
    size_t page = e.backing == HT_B_HUGETLB1G ? (1ul << 30) : HT_HUGE_2M;
    for (size_t off = 0; off < e.head; off += page) {
        unsigned char v = 0;
        /* A huge page is resident whole or not at all: untouched ones stay
         * untouched (no copy, no memory; a write to one now waits). */
        if (syscall(SYS_mincore, (void *)(e.start + off), 4096, &v) == 0 && (v & 1))
            memcpy((char *)t + off, (const char *)e.start + off, page);
    }
    if (e.len > e.head)
        memcpy((char *)t + e.head, (const char *)e.start + e.head, e.len - e.head);
    long m = ht_sys_mremap((void *)t, e.len, e.len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)e.start);
    if (uffd >= 0)
        uffd_release(uffd, e.start, e.head, e.len, ht_mmap_failed(m));
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (ht_mmap_failed(m)) {
        ht_sys_munmap((void *)t, e.len);
        atomic_fetch_add(&g_disown_failed, 1);
        return (int)m;
    }
    ht_stats_released(e.backing, e.head);
    ht_stats_fallback(e.cat, e.backing, HT_B_THP2M, "cut-by-program", e.head);
    atomic_fetch_add(&g_disowned, 1);
    atomic_fetch_add(&g_disowned_bytes, e.len);
    g_ent[i] = g_ent[--g_n];
    atomic_store(&ht_mapped_live, g_n + g_nthp);
    return 0;
}

int ht_mapped_before(uintptr_t lo, size_t len, int whole_ok, int moves)
{
    if (len == 0)
        return 0;
    uintptr_t hi = lo + ((len + 4095) & ~(size_t)4095);
    if (hi < lo)
        hi = UINTPTR_MAX;
    int rc = 0;
    ht_tls.guard++;
    pthread_mutex_lock(&g_lock);
    if (moves < 0) { /* only asks: does [lo, hi) touch a hugetlb mapping? */
        for (int i = 0; i < g_n && !rc; i++)
            rc = hi > g_ent[i].start && lo < g_ent[i].start + g_ent[i].len;
        pthread_mutex_unlock(&g_lock);
        ht_tls.guard--;
        return rc;
    }
    /* THP mappings need nothing; one unmapped or moved leaves the list. */
    for (int i = 0; moves && i < g_nthp;) {
        if (hi > g_thp[i].start && lo < g_thp[i].start + g_thp[i].len) {
            /* What the kernel gave, before the program's call takes it. */
            if (atomic_fetch_sub(&g_verify_budget, 1) > 0) {
                long long ah = ht_smaps_anon_huge_in(g_thp[i].start, g_thp[i].start + g_thp[i].len);
                if (ah > 0)
                    atomic_fetch_add(&g_thp_verified_gone, (uint64_t)ah);
            }
            g_thp[i] = g_thp[--g_nthp];
            atomic_store(&ht_mapped_live, g_n + g_nthp);
        } else {
            i++;
        }
    }
    for (int i = 0; i < g_n;) {
        struct mapped_ent *e = &g_ent[i];
        uintptr_t end = e->start + e->len;
        if (hi <= e->start || lo >= end) {
            i++;
            continue;
        }
        if (whole_ok && lo <= e->start && hi >= end) {
            /* The program's call removes all of it (munmap, MAP_FIXED). */
            ht_stats_released(e->backing, e->head);
            g_ent[i] = g_ent[--g_n];
            atomic_store(&ht_mapped_live, g_n + g_nthp);
            continue;
        }
        int r = disown(i);
        if (r != 0) {
            rc = r;
            i++;
        }
    }
    pthread_mutex_unlock(&g_lock);
    ht_tls.guard--;
    return rc;
}

void ht_mapped_atfork_prepare(void)
{
    if (atomic_load(&ht_mapped_live) == 0 || ht_ap.fork_safe == HT_FORK_OFF)
        return;
    ht_tls.guard++;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_n;)
        if (disown(i) != 0)
            i++;
    pthread_mutex_unlock(&g_lock);
    ht_tls.guard--;
}

/* The JVM's anonymous mappings with huge pages (plan `jvm`): adjacent VMAs
 * merged into one range (the heap's commits split it into many). */
#define JVM_SHOWN 64
struct jvm_range {
    uint64_t start, end, anon_huge, hugetlb;
};
struct jvm_ctx {
    struct jvm_range r[JVM_SHOWN];
    int n;
    uint64_t anon_huge, hugetlb, more;
};

static int jvm_cb(const struct ht_vma *v, void *ctx)
{
    struct jvm_ctx *c = ctx;
    /* Anonymous: no name, or the kernel's name for MAP_HUGETLB memory. */
    if (v->name[0] && strncmp(v->name, "/anon_hugepage", 14) != 0)
        return 0;
    /* Shared_Hugetlb too: Linux 6.18 counts some private 1 GB pages there. */
    uint64_t ah = v->anon_huge_kb << 10, hp = (v->private_hugetlb_kb + v->shared_hugetlb_kb) << 10;
    if (ah + hp == 0)
        return 0;
    c->anon_huge += ah;
    c->hugetlb += hp;
    struct jvm_range *last = c->n ? &c->r[c->n - 1] : NULL;
    if (last && last->end == v->start) {
        last->end = v->end;
        last->anon_huge += ah;
        last->hugetlb += hp;
    } else if (c->n < JVM_SHOWN) {
        c->r[c->n++] = (struct jvm_range){v->start, v->end, ah, hp};
    } else {
        c->more += ah + hp;
    }
    return 0;
}

static void jvm_summary(struct ht_json *j)
{
    static struct jvm_ctx c; /* one writer: the summary's flag */
    memset(&c, 0, sizeof c);
    int r = ht_smaps_scan_self(jvm_cb, &c);
    hj_obj_begin(j, "jvm");
    hj_str(j, "backing", ht_backing_name(ht_ap.plan.jvm));
    hj_u64(j, "mappings_left", atomic_load(&g_jvm_left));
    if (r < 0) {
        char eb[24];
        hj_str(j, "error", ht_errno_name(-r, eb));
    }
    hj_u64(j, "anon_huge_bytes", c.anon_huge);
    hj_u64(j, "hugetlb_bytes", c.hugetlb);
    hj_u64(j, "unlisted_huge_bytes", c.more);
    hj_arr_begin(j, "ranges");
    for (int i = 0; i < c.n; i++) {
        char hx[24];
        hj_obj_begin(j, NULL);
        ht_fmt_hex(hx, c.r[i].start);
        hj_str(j, "start", hx);
        hj_u64(j, "bytes", c.r[i].end - c.r[i].start);
        hj_u64(j, "anon_huge_bytes", c.r[i].anon_huge);
        hj_u64(j, "hugetlb_bytes", c.r[i].hugetlb);
        hj_obj_end(j);
    }
    hj_arr_end(j);
    hj_obj_end(j);
}

void ht_mapped_summary(struct ht_json *j, int in_signal)
{
    if (ht_ap.plan.jvm != HT_B_NONE)
        jvm_summary(j);
    static struct mapped_ent shown[MAPPED_MAX + THP_SHOWN]; /* one writer: the summary's flag */
    int n = 0;
    int locked = in_signal ? pthread_mutex_trylock(&g_lock) == 0 : pthread_mutex_lock(&g_lock) == 0;
    hj_obj_begin(j, "mapped");
    hj_u64(j, "mappings", atomic_load(&g_maps));
    hj_u64(j, "hugetlb_mappings", atomic_load(&g_hugetlb_maps));
    hj_u64(j, "thp_mappings", atomic_load(&g_thp_maps));
    hj_u64(j, "sub_huge_mappings", atomic_load(&g_sub_huge));
    hj_u64(j, "hugetlb_fallbacks", atomic_load(&g_fallbacks));
    hj_u64(j, "collapsed", atomic_load(&g_collapsed));
    hj_u64(j, "disowned", atomic_load(&g_disowned));
    hj_u64(j, "disowned_bytes", atomic_load(&g_disowned_bytes));
    hj_u64(j, "disown_failed", atomic_load(&g_disown_failed));
    hj_u64(j, "disown_protected", atomic_load(&g_disown_protected));
    hj_u64(j, "disown_unprotected", atomic_load(&g_disown_unprotected));
    hj_u64(j, "planned_thp", atomic_load(&g_planned_thp));
    {
        int st = atomic_load(&g_uffd_state);
        hj_str(j, "uffd", st > 0 ? "ok" : st < 0 ? "unavailable" : "not-probed");
    }
    if (!locked) {
        hj_bool(j, "busy", 1);
        hj_obj_end(j);
        return;
    }
    for (int i = 0; i < g_n && n < MAPPED_MAX; i++)
        shown[n++] = g_ent[i];
    for (int i = 0; i < g_nthp; i++)
        shown[n++] = g_thp[i];
    pthread_mutex_unlock(&g_lock);
    uint64_t verified = 0;
    hj_arr_begin(j, "ranges");
    for (int i = 0; i < n; i++) {
        char hx[24];
        uint64_t huge = shown[i].head;
        if (!ht_backing_is_hugetlb(shown[i].backing)) {
            /* Unmapped or remapped since: smaps shows what is there now. */
            long long ah = ht_smaps_anon_huge_in(shown[i].start, shown[i].start + shown[i].len);
            huge = ah > 0 ? (uint64_t)ah : 0;
            verified += huge;
        }
        hj_obj_begin(j, NULL);
        ht_fmt_hex(hx, shown[i].start);
        hj_str(j, "start", hx);
        hj_u64(j, "bytes", shown[i].len);
        hj_str(j, "category", ht_category_name(shown[i].cat));
        hj_str(j, "backing", ht_backing_name(shown[i].backing));
        hj_u64(j, "huge_bytes", huge);
        hj_obj_end(j);
    }
    hj_arr_end(j);
    /* Live THP mappings now, plus those unmapped before, seen at munmap. */
    hj_u64(j, "thp_verified_bytes", verified + atomic_load(&g_thp_verified_gone));
    hj_obj_end(j);
}
