/* apply.c - apply mode (docs/formats.md section 3): set-up, decisions, and
 * the malloc-family entry points of the slow path (hooks.c handles the fast
 * path through apply_fast.h).
 *
 * The library *owns* allocations the plan gives a backing to (heap-large
 * above the threshold, planned sites): owned.c maps them with the planned
 * page layout. heap-small goes to glibc's THP tunable (set by the launcher)
 * or to the arena (arena.c). Everything else is forwarded to the allocator
 * behind us. */
#include "apply_int.h"
#include "next.h"

#include "fmt.h"
#include "proc.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

struct ht_apply ht_ap = {.lock = PTHREAD_MUTEX_INITIALIZER};
uint64_t ht_apply_fast_max;
__thread struct ht_apply_tls ht_atls __attribute__((tls_model("initial-exec")));

/* ---- threads of the fast paths ---- */

static pthread_mutex_t g_threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ht_apply_tls *g_threads; /* registered, live */
static uint64_t g_exited_allocs, g_exited_bytes;
static pthread_key_t g_thread_key;
static int g_thread_key_ok;

static void thread_exit(void *v)
{
    struct ht_apply_tls *t = v;
    ht_tls.guard++;
    pthread_mutex_lock(&g_threads_lock);
    if (t->registered) {
        g_exited_allocs += t->allocs;
        g_exited_bytes += t->bytes;
        t->allocs = t->bytes = 0;
        if (t->prev)
            t->prev->next = t->next;
        else
            g_threads = t->next;
        if (t->next)
            t->next->prev = t->prev;
        t->registered = 0;
    }
    pthread_mutex_unlock(&g_threads_lock);
    /* Later calls of this thread (other destructors) take the slow path. */
    t->fast_max = t->arena_max = 0;
    ht_arena_thread_flush(&t->tc);
    ht_tls.guard--;
    /* Other destructors may still free arena objects into the cache: come
     * back in the next destructor round to hand those over too. */
    if (g_thread_key_ok && t->rounds++ < 3)
        pthread_setspecific(g_thread_key, t);
}

void ht_apply_thread_register(void)
{
    struct ht_apply_tls *t = &ht_atls;
    if (t->registered || ht_tls.guard || t->rounds)
        return; /* t->rounds: the thread is exiting */
    ht_tls.guard++; /* pthread_setspecific may calloc for high keys */
    pthread_mutex_lock(&g_threads_lock);
    t->registered = 1;
    t->prev = NULL;
    t->next = g_threads;
    if (g_threads)
        g_threads->prev = t;
    g_threads = t;
    pthread_mutex_unlock(&g_threads_lock);
    if (g_thread_key_ok)
        pthread_setspecific(g_thread_key, t);
    t->fast_max = ht_apply_fast_max;
    t->arena_max = ht_arena_on ? HT_MAG_MAX + 1 : 0;
    ht_tls.guard--;
}

void ht_apply_fast_counts(uint64_t *allocs, uint64_t *bytes, int in_signal)
{
    if (in_signal ? pthread_mutex_trylock(&g_threads_lock) != 0 : pthread_mutex_lock(&g_threads_lock) != 0) {
        *allocs = *bytes = 0; /* a thread is (un)registering right now */
        return;
    }
    uint64_t a = g_exited_allocs, b = g_exited_bytes;
    for (struct ht_apply_tls *t = g_threads; t; t = t->next) {
        a += __atomic_load_n(&t->allocs, __ATOMIC_RELAXED);
        b += __atomic_load_n(&t->bytes, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&g_threads_lock);
    *allocs = a;
    *bytes = b;
}

/* fork: the child has one thread, and counts its own activity only. */
static void threads_atfork_prepare(void) { pthread_mutex_lock(&g_threads_lock); }
static void threads_atfork_parent(void) { pthread_mutex_unlock(&g_threads_lock); }
static void threads_atfork_child(void)
{
    struct ht_apply_tls *t = &ht_atls;
    g_exited_allocs = g_exited_bytes = 0;
    g_threads = NULL;
    if (t->registered) {
        t->allocs = t->bytes = 0;
        t->prev = t->next = NULL;
        g_threads = t;
    }
    pthread_mutex_init(&g_threads_lock, NULL);
}

struct site_res {
    uintptr_t addr;
    int backing;
};
static struct site_res g_sites[HT_PLAN_MAX_SITES];
static _Atomic int g_nsites; /* published after resolution (constructor) */

uint64_t ht_apply_threshold(void) { return ht_cfg.threshold; }

/* ---- set-up ---- */

/* pre PATH post detail, e.g. "cannot open the plan PATH: ENOENT". */
static void plan_error(const char *pre, const char *post, const char *detail)
{
    char line[400];
    struct ht_buf hb;
    hb_init(&hb, line, sizeof line);
    hb_puts(&hb, pre);
    hb_puts(&hb, ht_cfg.plan_path);
    hb_puts(&hb, post); /* the buffer stays NUL-terminated (truncated if need be) */
    ht_config_error(line, detail);
}

static void read_plan(void)
{
    char eb[24];
    if (!ht_cfg.plan_path[0]) {
        ht_config_error("HUGETUNE_PLAN not set: nothing applied", "");
        return;
    }
    long fd = ht_sys_open(ht_cfg.plan_path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        plan_error("cannot open the plan ", ": ", ht_errno_name((int)-fd, eb));
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
            plan_error("cannot read the plan ", ": ", ht_errno_name((int)-r, eb));
            n = 0;
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (ht_plan_parse(&ht_ap.plan, buf, n) != 0) {
        plan_error("the plan ", " is ignored: ", ht_ap.plan.error);
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

/* "[always]" -> 2, "[madvise]" -> 1, "[inherit]" -> 3, "[never]"/unreadable -> 0. */
static int thp_setting(const char *path)
{
    char buf[128];
    long n = ht_read_file(path, buf, sizeof buf);
    if (n <= 0)
        return -1;
    if (strstr(buf, "[always]"))
        return 2;
    if (strstr(buf, "[madvise]"))
        return 1;
    if (strstr(buf, "[inherit]"))
        return 3;
    return 0;
}

/* Which THP sizes MADV_HUGEPAGE can give (the library never changes them). */
static void read_thp_settings(void)
{
    int top = thp_setting("/sys/kernel/mm/transparent_hugepage/enabled");
    ht_ap.thp_top = top < 0 ? 0 : top;
    for (int b = HT_B_4K; b < HT_B_COUNT; b++) {
        if (!ht_backing_is_thp(b))
            continue;
        char path[96];
        struct ht_buf hb;
        hb_init(&hb, path, sizeof path);
        hb_puts(&hb, "/sys/kernel/mm/transparent_hugepage/hugepages-");
        hb_u64(&hb, ht_backing_page(b) >> 10);
        hb_puts(&hb, "kB/enabled");
        int s = thp_setting(path);
        if (s < 0) /* no per-size control: PMD THP follows the top level */
            ht_ap.thp_ok[b] = b == HT_B_THP2M && ht_ap.thp_top > 0;
        else
            ht_ap.thp_ok[b] = s == 1 || s == 2 || (s == 3 && ht_ap.thp_top > 0);
    }
}

int ht_apply_setup(void)
{
    ht_ap.heap_large_b = ht_ap.heap_small_b = HT_B_NONE;
    ht_ap.layout = HT_LAYOUT_HEAD_TAIL;
    ht_ap.fork_safe = HT_FORK_COPY;
    read_plan();
    const struct ht_plan *pl = &ht_ap.plan;
    if (pl->valid) {
        ht_ap.heap_large_b = pl->heap_large;
        ht_ap.heap_small_b = pl->heap_small;
        ht_ap.layout = pl->layout;
        ht_ap.fork_safe = pl->fork_safe;
        if (pl->has_threshold && !ht_cfg.threshold_from_env)
            ht_cfg.threshold = pl->threshold;
    }
    read_thp_settings();
    const char *inj = ht_getenv("HUGETUNE_INJECT");
    if (inj && ht_inject_parse(&ht_ap.inj, inj) != 0)
        ht_config_error(ht_ap.inj.error, "");
    const char *rq = ht_getenv("HUGETUNE_SUMMARY_REQUEST");
    if (rq && *rq) {
        size_t n = strlen(rq);
        if (n < sizeof ht_ap.request_path)
            memcpy(ht_ap.request_path, rq, n + 1);
        else
            ht_config_error("HUGETUNE_SUMMARY_REQUEST too long: ignored", "");
    }
    if (ht_backing_is_thp(ht_ap.heap_small_b) && !tunables_have_hugetlb())
        ht_stats_error("heap-small thp planned but GLIBC_TUNABLES lacks glibc.malloc.hugetlb=1", "");
    /* glibc advises its heap whatever the size; the kernel gives an mTHP size
     * only while its control allows (the run's per-size controls). */
    if (ht_backing_is_mthp(ht_ap.heap_small_b) && !ht_ap.thp_ok[ht_ap.heap_small_b])
        ht_stats_fallback(HT_CAT_HEAP_SMALL, ht_ap.heap_small_b, HT_B_4K, "mthp-disabled", 0);
    if (pl->valid) {
        ht_owned_setup_pools();
        if (pl->arena != HT_B_NONE)
            ht_arena_setup();
    }
    ht_tls.guard++;
    g_thread_key_ok = pthread_key_create(&g_thread_key, thread_exit) == 0;
    ht_tls.guard--;
    /* The fast path forwards small sizes that nothing in the plan concerns. */
    if (!pl->valid)
        ht_apply_fast_max = UINT64_MAX;
    else if (pl->nsites > 0 || ht_arena_on)
        ht_apply_fast_max = 0;
    else
        ht_apply_fast_max = ht_cfg.threshold;
    return 0;
}

/* ---- sites and static: need the loader (constructor time) ---- */

struct start_ctx {
    int idx;
    int resolved[HT_PLAN_MAX_SITES];
    int nres;
};

static int start_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    struct start_ctx *c = p;
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int main_prog = c->idx++ == 0;
    if (main_prog && name[0] == 0)
        name = ht_cfg.exe_path;
    for (int i = 0; i < ht_ap.plan.nsites && c->nres < HT_PLAN_MAX_SITES; i++) {
        if (strcmp(ht_plan_site_module(&ht_ap.plan, i), name) == 0) {
            g_sites[c->nres].addr = (uintptr_t)info->dlpi_addr + (uintptr_t)ht_ap.plan.sites[i].offset;
            g_sites[c->nres].backing = ht_ap.plan.sites[i].backing;
            c->nres++;
            c->resolved[i] = 1;
        }
    }
    return 0;
}

void ht_apply_start(void)
{
    static struct start_ctx c; /* big; constructor runs once */
    memset(&c, 0, sizeof c);
    if (ht_ap.plan.valid) {
        dl_iterate_phdr(start_cb, &c);
        for (int i = 0; i < ht_ap.plan.nsites; i++) {
            if (!c.resolved[i])
                ht_stats_error("site module not loaded at start-up: ", ht_plan_site_module(&ht_ap.plan, i));
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
        ht_static_apply();
    }
    ht_sigusr2_install();
    ht_foreign_resolve();
    /* Read once here, single-threaded, rather than on a first hugetlb mapping. */
    (void)ht_hugetlb_cgroup_limited(2048);
    (void)ht_hugetlb_cgroup_limited(1u << 20);
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

/* Backing for an owned allocation of n bytes from caller (HT_B_NONE: not owned). */
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
        return ht_ap.heap_large_b;
    }
    *cat = HT_CAT_HEAP_SMALL;
    return HT_B_NONE;
}

int ht_apply_decide(size_t n, const void *caller, int *cat) { return decide(n, caller, cat); }

/* A heap-small request the arena may serve (else the allocator behind us):
 * up to HT_MAG_MAX bytes, alignments that are powers of two up to
 * HT_MAG_ALIGN_MAX (or at most 16, which every object has). */
static inline int arena_takes(size_t n, size_t align)
{
    if (!ht_arena_on || ht_tls.guard)
        return 0;
    if (align > 16 && (align > HT_MAG_ALIGN_MAX || (align & (align - 1))))
        return 0;
    if (n <= HT_MAG_MAX)
        return 1;
    atomic_fetch_add_explicit(&ht_ap.arena_forwarded, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ht_ap.arena_forwarded_bytes, n, memory_order_relaxed);
    return 0;
}

/* An arena object (the allocator behind us when the arena is full). */
static void *arena_alloc(size_t n)
{
    void *p = ht_mag_alloc_fast(&ht_arena, &ht_atls.tc, n, NULL);
    return p ? p : ht_arena_alloc_slow(n, NULL);
}

/* ---- entry points (called by hooks.c in apply mode) ---- */

void *ht_apply_malloc(size_t n, const void *caller)
{
    int cat;
    if (HT_UNLIKELY(!ht_atls.registered))
        ht_apply_thread_register();
    int b = decide(n, caller, &cat);
    ht_count_alloc(cat, n);
    ht_apply_poll_slow();
    if (b != HT_B_NONE) {
        void *p = ht_owned_alloc(n, b, cat, 0, 0);
        /* Never fail where the allocator behind us might still succeed. */
        return p ? p : ht_fwd_malloc(n);
    }
    if (cat == HT_CAT_HEAP_SMALL && arena_takes(n, 0))
        return arena_alloc(n);
    return ht_fwd_malloc(n);
}

void *ht_apply_calloc(size_t nmemb, size_t size, const void *caller)
{
    size_t n;
    int cat;
    if (HT_UNLIKELY(!ht_atls.registered))
        ht_apply_thread_register();
    if (__builtin_mul_overflow(nmemb, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    int b = decide(n, caller, &cat);
    ht_count_alloc(cat, n);
    if (b != HT_B_NONE) {
        void *p = ht_owned_alloc(n, b, cat, 0, 1); /* fresh mappings are zero */
        return p ? p : ht_fwd_calloc(nmemb, size);
    }
    if (cat == HT_CAT_HEAP_SMALL && arena_takes(n, 0)) {
        /* Memory fresh from a commit is zero: clear recycled chunks only. */
        int fresh;
        void *p = ht_mag_alloc_fast(&ht_arena, &ht_atls.tc, n, &fresh);
        if (!p)
            p = ht_arena_alloc_slow(n, &fresh);
        if (p && !fresh)
            memset(p, 0, n);
        return p;
    }
    return ht_fwd_calloc(nmemb, size);
}

static void *next_aligned(int kind, size_t align, size_t n)
{
    switch (kind) {
    case HT_K_VALLOC: return ht_fwd_valloc(n);
    case HT_K_PVALLOC: return ht_fwd_pvalloc(n);
    default: return ht_fwd_memalign(align, n);
    }
}

void *ht_apply_memalign(size_t align, size_t n, const void *caller, int kind)
{
    int cat;
    size_t dn = n;
    size_t pg = (size_t)getpagesize();
    if (kind == HT_K_PVALLOC) {
        if (n > SIZE_MAX - pg) {
            errno = ENOMEM;
            return NULL;
        }
        dn = n ? (n + pg - 1) & ~(pg - 1) : pg;
    }
    if (kind == HT_K_VALLOC || kind == HT_K_PVALLOC)
        align = pg;
    int b = decide(dn, caller, &cat);
    ht_count_alloc(cat, dn);
    /* Any power-of-two alignment (memalign rounds others up, like glibc). */
    size_t a = align <= HT_HUGE_2M ? 0 : align;
    if (a && (a & (a - 1))) {
        if (a > (SIZE_MAX >> 1))
            a = 0, b = HT_B_NONE;
        else
            a = (size_t)1 << (64 - __builtin_clzll((unsigned long long)a));
    }
    if (b != HT_B_NONE) {
        void *p = ht_owned_alloc(dn, b, cat, a, 0);
        if (p)
            return p;
        /* fall through: the allocator behind us may still succeed */
    }
    if (cat == HT_CAT_HEAP_SMALL && b == HT_B_NONE && arena_takes(dn, align)) {
        void *p = align > 16 ? ht_arena_alloc_aligned(dn, align) : arena_alloc(dn);
        if (p)
            return p;
    }
    return next_aligned(kind, align, n);
}

int ht_apply_free(void *p)
{
    if (ht_arena_owns(p)) {
        ht_mag_free(&ht_arena, &ht_atls.tc, p);
        return 1;
    }
    return ht_owned_free(p);
}

int ht_apply_usable_size(void *p, size_t *out)
{
    struct ht_reg_entry e;
    if (ht_apply_usable_fast(p, out))
        return 1;
    if (!ht_owned_lookup(p, &e))
        return 0;
    *out = ht_owned_usable(&e);
    return 1;
}

/* A new block for n bytes as decided (owned, arena, or the allocator). */
static void *alloc_decided(size_t n, int b, int cat)
{
    if (b != HT_B_NONE) {
        void *q = ht_owned_alloc(n, b, cat, 0, 0);
        if (q)
            return q;
    } else if (cat == HT_CAT_HEAP_SMALL && arena_takes(n, 0)) {
        void *q = arena_alloc(n);
        if (q)
            return q;
    }
    return ht_fwd_malloc(n);
}

void *ht_apply_realloc(void *p, size_t n, const void *caller)
{
    struct ht_reg_entry e;
    int cat;
    if (HT_UNLIKELY(!ht_atls.registered))
        ht_apply_thread_register();
    if (p == NULL)
        return ht_apply_malloc(n, caller);
    if (ht_arena_owns(p)) {
        if (n == 0) {
            ht_mag_free(&ht_arena, &ht_atls.tc, p);
            return NULL;
        }
        int b = decide(n, caller, &cat);
        ht_count_alloc(cat, n);
        size_t have = ht_mag_live_size(&ht_arena, p); /* (0: already free) */
        if (b == HT_B_NONE && n <= have && n > have / 2)
            return p;
        /* The last object of this thread's region grows in place. */
        if (b == HT_B_NONE && cat == HT_CAT_HEAP_SMALL && n > have && have > 0 && n <= HT_MAG_MAX &&
            !ht_tls.guard && ht_mag_grow(&ht_arena, &ht_atls.tc, p, n))
            return p;
        void *q = alloc_decided(n, b, cat);
        if (!q)
            return NULL;
        memcpy(q, p, have < n ? have : n);
        if (have != 0) /* (0: not a live object, already free or never one) */
            ht_mag_free(&ht_arena, &ht_atls.tc, p);
        return q;
    }
    int owned = ht_owned_lookup(p, &e);
    if (n == 0) {
        /* glibc semantics (REALLOC_ZERO_BYTES_FREES): free, return NULL. */
        if (!owned || !ht_owned_free(p))
            ht_fwd_free(p);
        return NULL;
    }
    int b = decide(n, caller, &cat);
    ht_count_alloc(cat, n);
    if (owned) {
        if (b != HT_B_NONE) {
            void *q = ht_owned_realloc(&e, n, b, cat);
            if (q == HT_REALLOC_GONE) {
                errno = ENOMEM;
                return NULL;
            }
            if (q)
                return q;
        }
        /* Below the threshold now, or every owned backing failed: move the
         * data to the allocator (or the arena). */
        size_t have = ht_owned_usable(&e);
        void *q = b != HT_B_NONE ? ht_fwd_malloc(n) : alloc_decided(n, HT_B_NONE, cat);
        if (!q)
            return NULL;
        memcpy(q, p, have < n ? have : n);
        ht_owned_free(p);
        return q;
    }
    if (b != HT_B_NONE) {
        /* The allocator's block -> owned: grew past the threshold (or a site). */
        void *q = ht_owned_alloc(n, b, cat, 0, 0);
        if (!q)
            return ht_fwd_realloc(p, n);
        size_t old = ht_fwd_usable_size(p);
        memcpy(q, p, old < n ? old : n);
        ht_fwd_free(p);
        return q;
    }
    return ht_fwd_realloc(p, n);
}

/* ---- summary sections (stats.c writes the rest) ---- */

int ht_apply_heap_small_tunable(void) { return ht_ap.heap_small_b == HT_B_THP2M; }

static const char *const fork_names[] = {"copy", "thp", "off"};

static void owned_ranges(struct ht_json *j, int in_signal);

void ht_apply_summary(struct ht_json *j, int in_signal)
{
    /* Verification first: it also measures heap-small's [heap]. */
    ht_verify_summary(j, in_signal);

    hj_obj_begin(j, "plan");
    hj_bool(j, "valid", ht_ap.plan.valid);
    hj_str(j, "layout", ht_ap.layout == HT_LAYOUT_ROUND_UP ? "round-up" : "head-tail");
    hj_str(j, "fork_safe", fork_names[ht_ap.fork_safe]);
    hj_obj_begin(j, "thp_enabled");
    for (int b = HT_B_4K; b < HT_B_COUNT; b++)
        if (ht_backing_is_thp(b))
            hj_bool(j, ht_backing_name(b), ht_ap.thp_ok[b]);
    hj_obj_end(j);
    hj_obj_end(j);

    hj_obj_begin(j, "layout");
    hj_u64(j, "sub_huge_allocations", atomic_load(&ht_ap.sub_huge_allocs));
    hj_u64(j, "sub_huge_bytes", atomic_load(&ht_ap.sub_huge_bytes));
    hj_u64(j, "round_up_waste_bytes", atomic_load(&ht_ap.round_up_waste));
    hj_obj_end(j);

    hj_obj_begin(j, "realloc");
    hj_u64(j, "in_place", atomic_load(&ht_ap.realloc_in_place));
    hj_u64(j, "moved", atomic_load(&ht_ap.realloc_moved));
    hj_u64(j, "copied", atomic_load(&ht_ap.realloc_copied));
    hj_u64(j, "shrunk", atomic_load(&ht_ap.realloc_shrunk));
    hj_u64(j, "salvaged", atomic_load(&ht_ap.realloc_salvaged));
    hj_obj_end(j);
    hj_u64(j, "moves_refused", atomic_load(&ht_ap.moves_refused));

    hj_obj_begin(j, "pools");
    for (int k = 0; k < HT_POOL_N; k++) {
        if (!ht_ap.pool_planned[k])
            continue;
        const struct ht_pool *pl = &ht_ap.pool[k];
        hj_obj_begin(j, k == HT_POOL_2M ? "hugetlb-2m" : "hugetlb-1g");
        hj_u64(j, "planned_pages", ht_ap.pool_planned[k]);
        hj_u64(j, "pages", pl->base ? pl->npages : 0);
        hj_u64(j, "used_pages", pl->base ? pl->used : 0);
        hj_u64(j, "peak_used_pages", pl->peak);
        hj_u64(j, "allocations", atomic_load(&ht_ap.pool_allocs[k]));
        hj_u64(j, "misses", atomic_load(&ht_ap.pool_misses[k]));
        hj_obj_end(j);
    }
    hj_obj_end(j);

    ht_arena_summary(j);

    hj_obj_begin(j, "fork");
    hj_str(j, "mode", fork_names[ht_ap.fork_safe]);
    hj_u64(j, "protected_ranges", atomic_load(&ht_ap.fork_protected));
    hj_u64(j, "copied_bytes", atomic_load(&ht_ap.fork_copied_bytes));
    hj_u64(j, "unprotected_ranges", atomic_load(&ht_ap.fork_unprotected));
    hj_u64(j, "adopted_bytes", atomic_load(&ht_ap.fork_adopted_bytes));
    hj_obj_end(j);

    hj_obj_begin(j, "inject");
    for (int k = 0; k < HT_INJ_N; k++) {
        if (!ht_ap.inj.every[k])
            continue;
        hj_obj_begin(j, ht_inject_kind_name(k));
        hj_u64(j, "every", ht_ap.inj.every[k]);
        hj_u64(j, "attempts", atomic_load(&ht_ap.inj_attempts[k]));
        hj_u64(j, "fired", atomic_load(&ht_ap.inj_fired[k]));
        hj_obj_end(j);
    }
    hj_obj_end(j);

    hj_obj_begin(j, "static");
    hj_arr_begin(j, "ranges");
    for (int i = 0; i < ht_nstatic_ranges; i++) {
        char hx[24];
        hj_obj_begin(j, NULL);
        ht_fmt_hex(hx, ht_static_ranges[i].lo);
        hj_str(j, "start", hx);
        hj_u64(j, "bytes", ht_static_ranges[i].hi - ht_static_ranges[i].lo);
        hj_str(j, "backing", ht_backing_name(ht_static_ranges[i].backing));
        hj_obj_end(j);
    }
    hj_arr_end(j);
    hj_obj_end(j);
    owned_ranges(j, in_signal);
    ht_mapped_summary(j, in_signal);
    hj_bool(j, "sigusr2", ht_ap.sigusr2_installed);
}

/* The address ranges of live owned blocks, largest first (at most
 * OWNED_SHOWN; `hugetune status` maps them onto the process's mappings to say
 * what the library applied where): start, mapped bytes, category, the backing
 * of its first segment (what it got) and the planned one. From a signal the
 * registry lock is only tried ("busy" when taken). */
#define OWNED_SHOWN 64
static void owned_ranges(struct ht_json *j, int in_signal)
{
    struct shown {
        uintptr_t ptr;
        uint64_t bytes;
        uint8_t cat, got, want;
    };
    static struct shown top[OWNED_SHOWN]; /* (one writer: the summary's flag) */
    int n = 0;
    uint64_t blocks = 0;
    hj_obj_begin(j, "owned");
    int locked = in_signal ? pthread_mutex_trylock(&ht_ap.lock) == 0 : pthread_mutex_lock(&ht_ap.lock) == 0;
    if (!locked) {
        hj_bool(j, "busy", 1);
        hj_obj_end(j);
        return;
    }
    for (size_t i = 0; ht_ap.reg.tab && i < ht_ap.reg.cap; i++) {
        const struct ht_reg_entry *e = &ht_ap.reg.tab[i];
        if (e->ptr == 0)
            continue;
        blocks++;
        uint64_t bytes = 0;
        for (int k = 0; k < e->l.nseg && k < HT_LAYOUT_MAX_SEGS; k++)
            bytes += e->l.seg[k].len;
        if (n == OWNED_SHOWN && bytes <= top[n - 1].bytes)
            continue;
        int at = n < OWNED_SHOWN ? n++ : n - 1; /* replaces the smallest */
        while (at > 0 && top[at - 1].bytes < bytes) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = (struct shown){e->ptr, bytes, e->category,
                                 (uint8_t)(e->l.nseg > 0 ? e->l.seg[0].backing : e->want), e->want};
    }
    pthread_mutex_unlock(&ht_ap.lock);
    hj_u64(j, "blocks", blocks);
    hj_arr_begin(j, "ranges");
    for (int i = 0; i < n; i++) {
        char hx[24];
        hj_obj_begin(j, NULL);
        ht_fmt_hex(hx, top[i].ptr);
        hj_str(j, "start", hx);
        hj_u64(j, "bytes", top[i].bytes);
        hj_str(j, "category", ht_category_name(top[i].cat));
        hj_str(j, "backing", ht_backing_name(top[i].got));
        hj_str(j, "planned", ht_backing_name(top[i].want));
        hj_obj_end(j);
    }
    hj_arr_end(j);
    hj_obj_end(j);
}

/* ---- exit ---- */

void ht_apply_finish(void)
{
    /* Verification happens while the summary is written (verify.c). */
}

/* ---- fork (init.c's handlers call these) ---- */

void ht_apply_atfork_prepare(void)
{
    ht_mapped_atfork_prepare();
    ht_fork_prepare();
    threads_atfork_prepare();
}
void ht_apply_atfork_parent(void)
{
    threads_atfork_parent();
    ht_fork_parent();
}
void ht_apply_atfork_child(void)
{
    threads_atfork_child();
    ht_fork_child();
}
