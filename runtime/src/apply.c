/* apply.c - apply mode (docs/formats.md section 3).
 *
 * The library *owns* allocations the plan gives a backing to (heap-large above
 * the threshold, planned sites): each one is a private mapping of its own,
 * 2 MB aligned and a whole number of huge pages, backed along the chain
 * hugetlb-1g -> hugetlb-2m -> thp-2m -> 4k, every step counted with its reason.
 * Everything else stays with glibc.
 *
 * Owned pointers are always 2 MB aligned, so free/realloc/malloc_usable_size
 * only consult the registry (a mutex-protected hash table: owned allocations
 * are large and rare, their mmap costs far more than the lock) for 2 MB
 * aligned pointers; a glibc pointer that happens to be aligned is simply not
 * found and goes back to glibc. */
#include "ht.h"
#include "next.h"

#include "fmt.h"
#include "proc.h"
#include "registry.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#define HT_MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#define HT_MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define VERIFY_BUDGET 256 /* smaps reads at free time; the rest is "unverified" */

static struct ht_plan g_plan;
static int g_heap_large_b; /* HT_B_NONE unless the plan is valid and says so */
static int g_heap_small_b;
static int g_static_b;
static int g_thp_disabled;

struct site_res {
    uintptr_t addr;
    int backing;
};
static struct site_res g_sites[HT_PLAN_MAX_SITES];
static _Atomic int g_nsites; /* published after resolution (constructor) */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* registry */
static struct ht_registry g_reg;
static _Atomic size_t g_owned; /* entries in g_reg: 0 = skip the lock */
static _Atomic int g_verify_budget = VERIFY_BUDGET;

static uintptr_t g_static_lo, g_static_hi; /* advised .bss interior */

static uintptr_t align_up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }
static uintptr_t align_down(uintptr_t v, uintptr_t a) { return v & ~(a - 1); }

uint64_t ht_apply_threshold(void) { return ht_cfg.threshold; }

/* ---- set-up ---- */

static void read_plan(void)
{
    char eb[24];
    if (!ht_cfg.plan_path[0]) {
        ht_stats_error("HUGETUNE_PLAN not set: nothing applied", "");
        return;
    }
    long fd = ht_sys_open(ht_cfg.plan_path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        ht_stats_error("cannot open plan: ", ht_errno_name((int)-fd, eb));
        return;
    }
    size_t cap = HT_PLAN_MAX_BYTES + 1;
    long m = ht_sys_mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(m)) {
        ht_sys_close((int)fd);
        ht_stats_error("cannot map plan buffer", "");
        return;
    }
    char *buf = (char *)m;
    size_t n = 0;
    while (n < cap) {
        long r = ht_sys_read((int)fd, buf + n, cap - n);
        if (r == -EINTR)
            continue;
        if (r < 0) {
            ht_stats_error("cannot read plan: ", ht_errno_name((int)-r, eb));
            n = 0;
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (ht_plan_parse(&g_plan, buf, n) != 0) {
        ht_stats_error(g_plan.error, " (whole plan ignored)");
        ht_verbose(g_plan.error, "");
    }
out:
    ht_sys_munmap(buf, cap);
    ht_sys_close((int)fd);
}

static int tunables_have_hugetlb(void)
{
    const char *t = ht_getenv("GLIBC_TUNABLES");
    static const char want[] = "glibc.malloc.hugetlb=1";
    size_t wl = sizeof want - 1;
    if (!t)
        return 0;
    for (const char *s = t; *s;) {
        const char *e = s;
        while (*e && *e != ':')
            e++;
        if ((size_t)(e - s) == wl && memcmp(s, want, wl) == 0)
            return 1;
        s = *e ? e + 1 : e;
    }
    return 0;
}

int ht_apply_setup(void)
{
    char thp[256];
    read_plan();
    if (g_plan.valid) {
        g_heap_large_b = g_plan.heap_large;
        g_heap_small_b = g_plan.heap_small;
        g_static_b = g_plan.static_;
        if (g_plan.has_threshold && !ht_cfg.threshold_from_env)
            ht_cfg.threshold = g_plan.threshold;
    }
    long n = ht_read_file("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
    g_thp_disabled = n <= 0 || strstr(thp, "[never]") != NULL;
    if (g_heap_small_b == HT_B_THP2M && !tunables_have_hugetlb())
        ht_stats_error("heap-small thp-2m planned but GLIBC_TUNABLES lacks glibc.malloc.hugetlb=1", "");
    return 0;
}

/* ---- sites and static: need the loader (constructor time) ---- */

struct start_ctx {
    int idx;
    int resolved[HT_PLAN_MAX_SITES];
    int nres;
    uintptr_t bss_lo, bss_hi;
};

static int start_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    struct start_ctx *c = p;
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int main_prog = c->idx++ == 0;
    if (main_prog && name[0] == 0)
        name = ht_cfg.exe_path;
    for (int i = 0; i < g_plan.nsites && c->nres < HT_PLAN_MAX_SITES; i++) {
        if (strcmp(ht_plan_site_module(&g_plan, i), name) == 0) {
            g_sites[c->nres].addr = (uintptr_t)info->dlpi_addr + (uintptr_t)g_plan.sites[i].offset;
            g_sites[c->nres].backing = g_plan.sites[i].backing;
            c->nres++;
            c->resolved[i] = 1;
        }
    }
    if (main_prog) {
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz <= ph->p_filesz)
                continue;
            uintptr_t base = (uintptr_t)info->dlpi_addr + (uintptr_t)ph->p_vaddr;
            c->bss_lo = align_up(base + ph->p_filesz, 4096);
            c->bss_hi = base + ph->p_memsz;
        }
    }
    return 0;
}

static void apply_static(uintptr_t bss_lo, uintptr_t bss_hi)
{
    uintptr_t lo = align_up(bss_lo, HT_HUGE_2M), hi = align_down(bss_hi, HT_HUGE_2M);
    char eb[24];
    if (g_static_b == HT_B_NONE || hi <= lo)
        return;
    uint64_t len = hi - lo;
    atomic_fetch_add(&ht_stats.static_requested, len);
    if (g_static_b == HT_B_4K) {
        ht_sys_madvise((void *)lo, len, MADV_NOHUGEPAGE);
        ht_stats_backed(HT_CAT_STATIC, HT_B_4K, len);
        return;
    }
    if (g_thp_disabled) {
        ht_stats_fallback(HT_CAT_STATIC, HT_B_THP2M, HT_B_4K, "thp-disabled", len);
        ht_stats_backed(HT_CAT_STATIC, HT_B_4K, len);
        return;
    }
    long r = ht_sys_madvise((void *)lo, len, MADV_HUGEPAGE);
    if (r < 0) {
        ht_stats_fallback_errno(HT_CAT_STATIC, HT_B_THP2M, HT_B_4K, (int)-r, len);
        ht_stats_backed(HT_CAT_STATIC, HT_B_4K, len);
        return;
    }
    g_static_lo = lo;
    g_static_hi = hi;
    ht_stats_backed(HT_CAT_STATIC, HT_B_THP2M, len);
    /* Collapse what is already resident (initialized-at-startup data). The
     * result is informational: the exit verification tells what stuck. */
    r = ht_sys_madvise((void *)lo, len, MADV_COLLAPSE);
    if (r < 0 && r != -EINVAL)
        ht_verbose("static: MADV_COLLAPSE: ", ht_errno_name((int)-r, eb));
}

void ht_apply_start(void)
{
    static struct start_ctx c; /* big; constructor runs once */
    memset(&c, 0, sizeof c);
    dl_iterate_phdr(start_cb, &c);
    for (int i = 0; i < g_plan.nsites; i++) {
        if (!c.resolved[i])
            ht_stats_error("site module not loaded at start-up: ", ht_plan_site_module(&g_plan, i));
    }
    /* Sort by address for the binary search in the hot path. */
    for (int i = 1; i < c.nres; i++) {
        struct site_res k = g_sites[i];
        int j = i - 1;
        while (j >= 0 && g_sites[j].addr > k.addr) {
            g_sites[j + 1] = g_sites[j];
            j--;
        }
        g_sites[j + 1] = k;
    }
    atomic_store_explicit(&g_nsites, c.nres, memory_order_release);
    apply_static(c.bss_lo, c.bss_hi);
}

/* ---- decisions ---- */

static int site_lookup(uintptr_t ra, int n)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (g_sites[mid].addr == ra)
            return g_sites[mid].backing;
        if (g_sites[mid].addr < ra)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return HT_B_NONE;
}

/* Backing for an allocation of n bytes from caller (HT_B_NONE: glibc). */
static inline int decide(size_t n, const void *caller, int *cat)
{
    int ns = atomic_load_explicit(&g_nsites, memory_order_acquire);
    if (ns > 0) {
        int b = site_lookup((uintptr_t)caller, ns);
        if (b != HT_B_NONE) {
            *cat = HT_CAT_SITES;
            return b;
        }
    }
    if (n >= ht_cfg.threshold) {
        *cat = HT_CAT_HEAP_LARGE;
        return g_heap_large_b;
    }
    *cat = HT_CAT_HEAP_SMALL;
    return HT_B_NONE;
}

/* ---- owned mappings ---- */

/* Anonymous mapping of len bytes at a 2 MB boundary (over-map and trim). */
static long map_aligned(size_t len, int prot, int extra_flags)
{
    size_t over = len + HT_HUGE_2M;
    long r = ht_sys_mmap(NULL, over, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
    if (ht_mmap_failed(r))
        return r;
    uintptr_t a = (uintptr_t)r, al = align_up(a, HT_HUGE_2M);
    if (al > a)
        ht_sys_munmap((void *)a, al - a);
    if (a + over > al + len)
        ht_sys_munmap((void *)(al + len), a + over - (al + len));
    return (long)al;
}

static int reg_grow_locked(void)
{
    size_t ncap = g_reg.cap ? g_reg.cap * 2 : 1024;
    long m = ht_sys_mmap(NULL, ht_reg_bytes(ncap), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(m))
        return -1;
    struct ht_registry nr;
    ht_reg_init(&nr, (void *)m, ncap);
    if (g_reg.tab) {
        if (ht_reg_rehash(&g_reg, &nr) != 0) {
            ht_sys_munmap((void *)m, ht_reg_bytes(ncap));
            return -1;
        }
        ht_sys_munmap(g_reg.tab, ht_reg_bytes(g_reg.cap));
    }
    g_reg = nr;
    return 0;
}

/* Caller holds g_lock. */
static int reg_insert_locked(uintptr_t p, size_t size, size_t maplen, int backing, int cat)
{
    struct ht_reg_entry e = {p, size, maplen, (uint8_t)backing, (uint8_t)cat, 0, 0};
    if ((!g_reg.tab || ht_reg_full(&g_reg)) && reg_grow_locked() != 0)
        return -1;
    if (ht_reg_insert(&g_reg, &e) != 0)
        return -1;
    atomic_store_explicit(&g_owned, g_reg.count, memory_order_release);
    return 0;
}

/* Maps size bytes along the fallback chain starting at `want`.
 * Returns the pointer (NULL: even 4k failed) and sets *maplen, *got. */
static void *map_chain(size_t size, int want, int cat, size_t *maplen, int *got)
{
    int step = want;
    for (;;) {
        long r;
        size_t len;
        switch (step) {
        case HT_B_HUGETLB1G:
            len = align_up(size ? size : 1, HT_HUGE_1G);
            r = ht_sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | HT_MAP_HUGE_1GB, -1, 0);
            if (!ht_mmap_failed(r))
                goto done;
            ht_stats_fallback_errno(cat, HT_B_HUGETLB1G, HT_B_HUGETLB2M, (int)-r, size);
            step = HT_B_HUGETLB2M;
            continue;
        case HT_B_HUGETLB2M:
            /* Never MAP_NORESERVE: a short pool must fail here, not SIGBUS later. */
            len = align_up(size ? size : 1, HT_HUGE_2M);
            r = ht_sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | HT_MAP_HUGE_2MB, -1, 0);
            if (!ht_mmap_failed(r))
                goto done;
            ht_stats_fallback_errno(cat, HT_B_HUGETLB2M, HT_B_THP2M, (int)-r, size);
            step = HT_B_THP2M;
            continue;
        case HT_B_THP2M:
            if (g_thp_disabled) {
                ht_stats_fallback(cat, HT_B_THP2M, HT_B_4K, "thp-disabled", size);
                step = HT_B_4K;
                continue;
            }
            len = align_up(size ? size : 1, HT_HUGE_2M);
            r = map_aligned(len, PROT_READ | PROT_WRITE, 0);
            if (ht_mmap_failed(r)) {
                ht_stats_fallback_errno(cat, HT_B_THP2M, HT_B_4K, (int)-r, size);
                step = HT_B_4K;
                continue;
            }
            {
                long m = ht_sys_madvise((void *)r, len, MADV_HUGEPAGE);
                if (m < 0) {
                    ht_sys_munmap((void *)r, len);
                    ht_stats_fallback_errno(cat, HT_B_THP2M, HT_B_4K, (int)-m, size);
                    step = HT_B_4K;
                    continue;
                }
            }
            goto done;
        default: /* HT_B_4K */
            len = align_up(size ? size : 1, HT_HUGE_2M);
            r = map_aligned(len, PROT_READ | PROT_WRITE, 0);
            if (ht_mmap_failed(r))
                return NULL;
            /* Keep THP (e.g. glibc.malloc.hugetlb=1 aimed at heap-small) off. */
            ht_sys_madvise((void *)r, len, MADV_NOHUGEPAGE);
            step = HT_B_4K;
            goto done;
        }
    done:
        *maplen = len;
        *got = step;
        return (void *)r;
    }
}

static void *owned_alloc(size_t size, int want, int cat)
{
    size_t maplen;
    int got;
    if (size > (SIZE_MAX >> 2))
        return NULL;
    void *p = map_chain(size, want, cat, &maplen, &got);
    if (!p)
        return NULL;
    pthread_mutex_lock(&g_lock);
    int r = reg_insert_locked((uintptr_t)p, size, maplen, got, cat);
    if (r == 0)
        ht_stats_backed(cat, got, maplen);
    pthread_mutex_unlock(&g_lock);
    if (r != 0) {
        ht_sys_munmap(p, maplen);
        ht_stats_error("owned-allocation registry cannot grow", "");
        return NULL;
    }
    return p;
}

static void verify_thp(uintptr_t p, size_t len)
{
    if (atomic_fetch_sub(&g_verify_budget, 1) > 0) {
        long long v = ht_smaps_anon_huge_in(p, p + len);
        if (v >= 0) {
            atomic_fetch_add(&ht_stats.thp_verified, (uint64_t)v);
            return;
        }
    }
    atomic_fetch_add(&ht_stats.thp_unverified, len);
}

/* Takes e out of the registry. 1: found. */
static int owned_take(void *p, struct ht_reg_entry *e)
{
    if (((uintptr_t)p & (HT_HUGE_2M - 1)) != 0 || p == NULL ||
        atomic_load_explicit(&g_owned, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    int r = ht_reg_remove(&g_reg, (uintptr_t)p, e);
    if (r == 0) {
        atomic_store_explicit(&g_owned, g_reg.count, memory_order_release);
        ht_stats_released(e->backing, e->maplen);
    }
    pthread_mutex_unlock(&g_lock);
    return r == 0;
}

static void owned_release(const struct ht_reg_entry *e)
{
    if (e->backing == HT_B_THP2M)
        verify_thp(e->ptr, e->maplen);
    ht_sys_munmap((void *)e->ptr, e->maplen);
}

/* Copy of the entry for p, if owned. */
static int owned_lookup(void *p, struct ht_reg_entry *out)
{
    if (((uintptr_t)p & (HT_HUGE_2M - 1)) != 0 || p == NULL ||
        atomic_load_explicit(&g_owned, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    struct ht_reg_entry *e = ht_reg_find(&g_reg, (uintptr_t)p);
    if (e)
        *out = *e;
    pthread_mutex_unlock(&g_lock);
    return e != NULL;
}

/* ---- entry points (called by hooks.c in apply mode) ---- */

void *ht_apply_malloc(size_t n, const void *caller)
{
    int cat;
    int b = decide(n, caller, &cat);
    ht_count_alloc(cat, n);
    if (b == HT_B_NONE)
        return ht_fwd_malloc(n);
    void *p = owned_alloc(n, b, cat);
    /* Never fail where glibc might still succeed. */
    return p ? p : ht_fwd_malloc(n);
}

void *ht_apply_calloc(size_t nmemb, size_t size, const void *caller)
{
    size_t n;
    int cat;
    if (__builtin_mul_overflow(nmemb, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    int b = decide(n, caller, &cat);
    ht_count_alloc(cat, n);
    if (b == HT_B_NONE)
        return ht_fwd_calloc(nmemb, size);
    void *p = owned_alloc(n, b, cat); /* fresh mapping: already zero */
    return p ? p : ht_fwd_calloc(nmemb, size);
}

void *ht_apply_memalign(size_t align, size_t n, const void *caller, int kind)
{
    int cat;
    size_t dn = n;
    if (kind == HT_K_PVALLOC) {
        size_t pg = (size_t)getpagesize();
        if (n > SIZE_MAX - pg) {
            errno = ENOMEM;
            return NULL;
        }
        dn = n ? align_up(n, pg) : pg;
    }
    int b = decide(dn, caller, &cat);
    ht_count_alloc(cat, dn);
    /* A 2 MB-aligned pointer satisfies any alignment up to 2 MB. */
    if (b != HT_B_NONE && align <= HT_HUGE_2M) {
        void *p = owned_alloc(dn, b, cat);
        if (p)
            return p;
        /* fall through: glibc may still succeed */
    }
    switch (kind) {
    case HT_K_VALLOC: return ht_fwd_valloc(n);
    case HT_K_PVALLOC: return ht_fwd_pvalloc(n);
    default: return ht_fwd_memalign(align, n);
    }
}

int ht_apply_free(void *p)
{
    struct ht_reg_entry e;
    if (!owned_take(p, &e))
        return 0;
    owned_release(&e);
    return 1;
}

int ht_apply_usable_size(void *p, size_t *out)
{
    struct ht_reg_entry e;
    if (!owned_lookup(p, &e))
        return 0;
    *out = e.size;
    return 1;
}

/* Owned -> owned growth beyond the mapping. THP/4k mappings are moved with
 * mremap into a fresh 2 MB-aligned range (no copy; the tail is new zero
 * memory with the same advice). Otherwise a new mapping + memcpy. */
static void *owned_grow(const struct ht_reg_entry *e, size_t n, int b, int cat)
{
    if (n > (SIZE_MAX >> 2))
        return NULL;
    if ((e->backing == HT_B_THP2M || e->backing == HT_B_4K) && b == e->backing) {
        size_t newlen = align_up(n, HT_HUGE_2M);
        long t = map_aligned(newlen, PROT_NONE, MAP_NORESERVE);
        if (!ht_mmap_failed(t)) {
            long m = ht_sys_mremap((void *)e->ptr, e->maplen, newlen,
                                   MREMAP_MAYMOVE | MREMAP_FIXED, (void *)t);
            if (!ht_mmap_failed(m)) {
                ht_sys_madvise((void *)m, newlen,
                               e->backing == HT_B_THP2M ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
                pthread_mutex_lock(&g_lock);
                struct ht_reg_entry old;
                ht_reg_remove(&g_reg, e->ptr, &old);
                ht_stats_released(e->backing, e->maplen);
                int r = reg_insert_locked((uintptr_t)m, n, newlen, e->backing, cat);
                if (r == 0)
                    ht_stats_backed(cat, e->backing, newlen);
                atomic_store_explicit(&g_owned, g_reg.count, memory_order_release);
                pthread_mutex_unlock(&g_lock);
                if (r != 0) {
                    /* Cannot track it: hand the data to glibc instead. */
                    void *q = ht_fwd_malloc(n);
                    if (q)
                        memcpy(q, (void *)m, e->size < n ? e->size : n);
                    ht_sys_munmap((void *)m, newlen);
                    return q;
                }
                return (void *)m;
            }
            ht_sys_munmap((void *)t, newlen);
        }
    }
    void *q = owned_alloc(n, b, cat);
    if (!q)
        return NULL;
    memcpy(q, (void *)e->ptr, e->size < n ? e->size : n);
    struct ht_reg_entry old;
    if (owned_take((void *)e->ptr, &old))
        owned_release(&old);
    return q;
}

void *ht_apply_realloc(void *p, size_t n, const void *caller)
{
    struct ht_reg_entry e;
    int cat;
    if (p == NULL)
        return ht_apply_malloc(n, caller);
    int owned = owned_lookup(p, &e);
    if (n == 0) {
        /* glibc semantics (REALLOC_ZERO_BYTES_FREES): free, return NULL. */
        if (owned) {
            if (owned_take(p, &e))
                owned_release(&e);
        } else {
            ht_fwd_free(p);
        }
        return NULL;
    }
    int b = decide(n, caller, &cat);
    ht_count_alloc(cat, n);
    if (owned) {
        if (b != HT_B_NONE) {
            if (n <= e.maplen) {
                pthread_mutex_lock(&g_lock);
                struct ht_reg_entry *pe = ht_reg_find(&g_reg, (uintptr_t)p);
                if (pe)
                    pe->size = n;
                pthread_mutex_unlock(&g_lock);
                return p;
            }
            void *q = owned_grow(&e, n, b, cat);
            if (q)
                return q;
            /* Every owned backing failed: let glibc hold the grown block. */
            q = ht_fwd_malloc(n);
            if (!q)
                return NULL;
            memcpy(q, p, e.size);
            if (owned_take(p, &e))
                owned_release(&e);
            return q;
        }
        /* Dropped below the threshold: back to glibc. */
        void *q = ht_fwd_malloc(n);
        if (!q)
            return NULL;
        memcpy(q, p, e.size < n ? e.size : n);
        if (owned_take(p, &e))
            owned_release(&e);
        return q;
    }
    if (b != HT_B_NONE) {
        /* glibc -> owned: grew past the threshold (or a planned site). */
        void *q = owned_alloc(n, b, cat);
        if (!q)
            return ht_fwd_realloc(p, n);
        size_t old = ht_fwd_usable_size(p);
        memcpy(q, p, old < n ? old : n);
        ht_fwd_free(p);
        return q;
    }
    return ht_fwd_realloc(p, n);
}

/* ---- exit: verify what THP actually delivered ---- */

struct fin_ctx {
    uint64_t live_thp;
    uint64_t heap_ah;
    uint64_t static_ah;
};

static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    uint64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

static int fin_cb(const struct ht_vma *v, void *p)
{
    struct fin_ctx *c = p;
    uint64_t ah = v->anon_huge_kb * 1024;
    if (strcmp(v->name, "[heap]") == 0)
        c->heap_ah += ah;
    if (g_static_hi > g_static_lo) {
        uint64_t o = overlap(v->start, v->end, g_static_lo, g_static_hi);
        c->static_ah += ah < o ? ah : o;
    }
    if (ah && g_reg.tab && v->name[0] == 0) {
        uint64_t o = 0;
        for (size_t i = 0; i < g_reg.cap; i++) {
            const struct ht_reg_entry *e = &g_reg.tab[i];
            if (e->ptr && e->backing == HT_B_THP2M)
                o += overlap(v->start, v->end, e->ptr, e->ptr + e->maplen);
        }
        c->live_thp += ah < o ? ah : o;
    }
    return 0;
}

void ht_apply_finish(void)
{
    struct fin_ctx c = {0, 0, 0};
    int need = g_heap_small_b == HT_B_THP2M || g_static_hi > g_static_lo ||
               atomic_load(&g_owned) > 0;
    if (!need)
        return;
    pthread_mutex_lock(&g_lock);
    int r = ht_smaps_scan_self(fin_cb, &c);
    pthread_mutex_unlock(&g_lock);
    if (r < 0) {
        char eb[24];
        ht_stats_error("cannot read /proc/self/smaps: ", ht_errno_name(-r, eb));
        return;
    }
    atomic_fetch_add(&ht_stats.thp_verified, c.live_thp + c.static_ah);
    if (g_heap_small_b == HT_B_THP2M) {
        /* glibc advised the heap; report what the [heap] VMA got. */
        atomic_fetch_add(&ht_stats.cat_backed[HT_CAT_HEAP_SMALL][HT_B_THP2M], c.heap_ah);
        atomic_fetch_add(&ht_stats.backed_bytes[HT_B_THP2M], c.heap_ah);
        atomic_fetch_add(&ht_stats.thp_verified, c.heap_ah);
    }
}

/* ---- fork ---- */

void ht_apply_atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
void ht_apply_atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
void ht_apply_atfork_child(void)
{
    /* The registry stays valid: the child has private copies of every owned
     * mapping at the same addresses. (Known gap: copy-on-write of hugetlb
     * pages in the child can SIGBUS when the pool is exhausted.) */
    atomic_store(&g_verify_budget, VERIFY_BUDGET);
    pthread_mutex_unlock(&g_lock);
}
