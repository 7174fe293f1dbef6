/* stats.c - counters, fallbacks, errors, and the exit summary
 * (docs/formats.md section 4).
 *
 * Why here: both modes report through the same JSON object, and everything a
 * hook may need to note (a fallback, an error) must be recordable without
 * allocating. Fallbacks go to a small fixed table under a mutex (they happen on
 * the owned-allocation slow path only); errors to a fixed lock-free array. */
#include "ht.h"
#include "apply_int.h"
#include "next.h"

#include "fmt.h"
#include "sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

struct ht_stats ht_stats;

#define MAX_FALLBACKS 32
struct fallback {
    int cat, from, to;
    char reason[24];
    uint64_t count, bytes;
};
static struct fallback g_fb[MAX_FALLBACKS];
static int g_nfb;
static uint64_t g_fb_dropped;
static pthread_mutex_t g_fb_lock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_ERRORS 16
#define ERROR_LEN 256
static char g_err[MAX_ERRORS][ERROR_LEN];
static _Atomic int g_err_ready[MAX_ERRORS];
static _Atomic int g_err_n;

static const char *const cat_names[HT_CAT_COUNT] = {
    [HT_CAT_HEAP_SMALL] = "heap-small",
    [HT_CAT_HEAP_LARGE] = "heap-large",
    [HT_CAT_STATIC] = "static",
    [HT_CAT_SITES] = "sites",
};

const char *ht_category_name(int cat)
{
    if (cat == HT_CAT_COUNT)
        return "pool"; /* fallbacks of the pool itself (apply_int.h: HT_CAT_POOL) */
    return cat >= 0 && cat < HT_CAT_COUNT ? cat_names[cat] : "other";
}

static void max_update(_Atomic uint64_t *peak, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak(peak, &cur, v))
        ;
}

void ht_stats_cat_backed(int cat, int backing, uint64_t bytes);
void ht_stats_cat_backed(int cat, int backing, uint64_t bytes)
{
    if (cat >= 0 && cat < HT_CAT_COUNT && backing > 0 && backing < HT_B_COUNT)
        atomic_fetch_add(&ht_stats.cat_backed[cat][backing], bytes);
}

void ht_stats_backed(int cat, int backing, uint64_t bytes)
{
    if (backing <= 0 || backing >= HT_B_COUNT)
        return;
    ht_stats_cat_backed(cat, backing, bytes);
    atomic_fetch_add(&ht_stats.backed_bytes[backing], bytes);
    uint64_t h = atomic_fetch_add(&ht_stats.held[backing], bytes) + bytes;
    max_update(&ht_stats.peak[backing], h);
}

void ht_stats_released(int backing, uint64_t bytes)
{
    if (backing > 0 && backing < HT_B_COUNT)
        atomic_fetch_sub(&ht_stats.held[backing], bytes);
}

void ht_stats_fallback(int cat, int from, int to, const char *reason, uint64_t bytes)
{
    pthread_mutex_lock(&g_fb_lock);
    int i;
    for (i = 0; i < g_nfb; i++) {
        struct fallback *f = &g_fb[i];
        if (f->cat == cat && f->from == from && f->to == to && strcmp(f->reason, reason) == 0)
            break;
    }
    if (i == g_nfb) {
        if (g_nfb == MAX_FALLBACKS) {
            g_fb_dropped++;
            pthread_mutex_unlock(&g_fb_lock);
            return;
        }
        struct fallback *f = &g_fb[g_nfb++];
        f->cat = cat;
        f->from = from;
        f->to = to;
        size_t n = strlen(reason);
        if (n >= sizeof f->reason)
            n = sizeof f->reason - 1;
        memcpy(f->reason, reason, n);
        f->reason[n] = 0;
        f->count = 0;
        f->bytes = 0;
    }
    g_fb[i].count++;
    g_fb[i].bytes += bytes;
    pthread_mutex_unlock(&g_fb_lock);
}

void ht_stats_fallback_errno(int cat, int from, int to, int err, uint64_t bytes)
{
    char eb[24];
    ht_stats_fallback(cat, from, to, ht_errno_name(err, eb), bytes);
}

void ht_stats_error(const char *a, const char *b)
{
    int i = atomic_fetch_add(&g_err_n, 1);
    ht_verbose(a, b);
    if (i >= MAX_ERRORS)
        return;
    struct ht_buf hb;
    hb_init(&hb, g_err[i], ERROR_LEN);
    hb_puts(&hb, a);
    hb_puts(&hb, b);
    atomic_store_explicit(&g_err_ready[i], 1, memory_order_release);
}

void ht_stats_atfork_prepare(void) { pthread_mutex_lock(&g_fb_lock); }
void ht_stats_atfork_parent(void)
{
    pthread_mutex_unlock(&g_fb_lock);
    atomic_fetch_add(&ht_stats.forks, 1);
}

void ht_stats_atfork_child(void)
{
    /* The child's summary describes the child. Cumulative counters restart;
     * what the child still maps (copies of owned mappings) stays held. */
    for (int c = 0; c < HT_CAT_COUNT; c++)
        for (int b = 0; b < HT_B_COUNT; b++)
            atomic_store(&ht_stats.cat_backed[c][b], 0);
    for (int b = 0; b < HT_B_COUNT; b++) {
        atomic_store(&ht_stats.backed_bytes[b], 0);
        atomic_store(&ht_stats.peak[b], atomic_load(&ht_stats.held[b]));
    }
    atomic_store(&ht_stats.thp_verified, 0);
    atomic_store(&ht_stats.thp_unverified, 0);
    atomic_store(&ht_stats.static_requested, 0);
    atomic_store(&ht_stats.forks, 0);
    g_nfb = 0;
    g_fb_dropped = 0;
    /* Errors are kept: most describe the configuration, which the child
     * shares (e.g. an ignored plan). */
    pthread_mutex_unlock(&g_fb_lock);
}

/* ---- summary ---- */

static const int g_order[] = {HT_B_HUGETLB1G, HT_B_HUGETLB2M, HT_B_THP2M, HT_B_THP1M,
                              HT_B_THP512K, HT_B_THP256K, HT_B_THP128K, HT_B_THP64K,
                              HT_B_THP32K, HT_B_THP16K, HT_B_4K};
#define NORDER (sizeof g_order / sizeof g_order[0])

static void backed_map(struct ht_json *j, int cat, uint64_t extra_thp)
{
    hj_obj_begin(j, "backed");
    for (unsigned k = 0; k < NORDER; k++) {
        uint64_t v = atomic_load(&ht_stats.cat_backed[cat][g_order[k]]);
        if (g_order[k] == HT_B_THP2M)
            v += extra_thp;
        if (v)
            hj_u64(j, ht_backing_name(g_order[k]), v);
    }
    hj_obj_end(j);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        long r = ht_sys_write(fd, p, n);
        if (r == -EINTR)
            continue;
        if (r <= 0)
            return;
        p += r;
        n -= (size_t)r;
    }
}

static _Atomic int g_writing;
static _Atomic uint64_t g_snapshots;

/* Writes the summary. final: at exit; in_signal: from a signal handler (no
 * blocking: every lock is tried, a busy writer means "skip"). */
static void summary_write(int final, int in_signal)
{
    static char out[128 << 10];
    char path[HT_PATH_MAX], tmp[HT_PATH_MAX + 48];
    struct ht_buf b;
    struct ht_json j;
    uint64_t cnt[HT_TC_N];
    int mode = ht_state_get();

    if (!ht_cfg.has_summary || (mode != HT_RECORD && mode != HT_APPLY))
        return;
    if (ht_output_path(ht_cfg.summary_tmpl, path, sizeof path) != 0)
        return;
    int expect = 0;
    while (!atomic_compare_exchange_strong(&g_writing, &expect, 1)) {
        if (in_signal || !final)
            return; /* a summary is being written right now */
        expect = 0;
        sched_yield();
    }
    uint64_t seq = atomic_fetch_add(&g_snapshots, 1) + 1;
    ht_counters_sum(cnt);
    if (mode == HT_APPLY) {
        /* heap-small allocations the fast paths counted per thread */
        uint64_t fa, fb;
        ht_apply_fast_counts(&fa, &fb, in_signal);
        cnt[HT_TC_ALLOCS(HT_CAT_HEAP_SMALL)] += fa;
        cnt[HT_TC_BYTES(HT_CAT_HEAP_SMALL)] += fb;
    }
    hb_init(&b, out, sizeof out);
    hj_init(&j, &b);
    hj_obj_begin(&j, NULL);
    hj_u64(&j, "version", 1);
    hj_i64(&j, "pid", ht_cfg.pid);
    hj_str(&j, "mode", mode == HT_RECORD ? "record" : "apply");
    hj_bool(&j, "final", final);
    hj_u64(&j, "sequence", seq);
    hj_u64(&j, "threshold", ht_cfg.threshold);

    /* Apply mode verifies first (its smaps scan also yields heap-small's THP). */
    struct ht_buf ab;
    struct ht_json aj;
    static char abuf[32 << 10];
    if (mode == HT_APPLY) {
        hb_init(&ab, abuf, sizeof abuf);
        hj_init(&aj, &ab);
        aj.depth = 1;
        aj.first[1] = 1;
        ht_apply_summary(&aj, in_signal);
    }

    hj_obj_begin(&j, "categories");
    static const int cats[] = {HT_CAT_HEAP_LARGE, HT_CAT_HEAP_SMALL, HT_CAT_STATIC, HT_CAT_SITES};
    for (unsigned k = 0; k < 4; k++) {
        int c = cats[k];
        hj_obj_begin(&j, ht_category_name(c));
        if (c == HT_CAT_STATIC) {
            hj_u64(&j, "requested_bytes", atomic_load(&ht_stats.static_requested));
        } else {
            hj_u64(&j, "allocations", cnt[HT_TC_ALLOCS(c)]);
            hj_u64(&j, "requested_bytes", cnt[HT_TC_BYTES(c)]);
        }
        /* heap-small with glibc's tunable: what the [heap] VMA got. */
        uint64_t extra = 0;
        if (mode == HT_APPLY && c == HT_CAT_HEAP_SMALL && ht_apply_heap_small_tunable())
            extra = ht_verify_heap_small_thp;
        backed_map(&j, c, extra);
        hj_obj_end(&j);
    }
    hj_obj_end(&j);

    hj_obj_begin(&j, "backed");
    for (unsigned k = 0; k < NORDER; k++) {
        int bk = g_order[k];
        uint64_t bytes = atomic_load(&ht_stats.backed_bytes[bk]);
        int always = bk == HT_B_HUGETLB2M || bk == HT_B_HUGETLB1G || bk == HT_B_THP2M || bk == HT_B_4K;
        if (!bytes && !always)
            continue;
        /* THP: what smaps showed for freed blocks, plus our live THP memory
         * (and, with glibc's tunable, the [heap] it advised) now. */
        uint64_t live = 0, heap = 0;
        if (bk == HT_B_THP2M && mode == HT_APPLY) {
            live = ht_verify_live_thp;
            heap = ht_apply_heap_small_tunable() ? ht_verify_heap_small_thp : 0;
        }
        hj_obj_begin(&j, ht_backing_name(bk));
        hj_u64(&j, "bytes", bytes + heap);
        hj_u64(&j, "held_bytes", atomic_load(&ht_stats.held[bk]));
        hj_u64(&j, "peak_bytes", atomic_load(&ht_stats.peak[bk]));
        if (bk == HT_B_THP2M) {
            hj_u64(&j, "verified_bytes", atomic_load(&ht_stats.thp_verified) + live + heap);
            hj_u64(&j, "unverified_bytes", atomic_load(&ht_stats.thp_unverified));
        }
        hj_obj_end(&j);
    }
    hj_obj_end(&j);

    hj_arr_begin(&j, "fallbacks");
    int fb_locked = in_signal ? pthread_mutex_trylock(&g_fb_lock) == 0 : pthread_mutex_lock(&g_fb_lock) == 0;
    uint64_t fb_dropped = 0;
    if (fb_locked) {
        for (int i = 0; i < g_nfb; i++) {
            struct fallback *f = &g_fb[i];
            hj_obj_begin(&j, NULL);
            hj_str(&j, "category", ht_category_name(f->cat));
            hj_str(&j, "from", ht_backing_name(f->from));
            hj_str(&j, "to", f->to == HT_B_NONE ? "allocator" : ht_backing_name(f->to));
            hj_str(&j, "reason", f->reason);
            hj_u64(&j, "count", f->count);
            hj_u64(&j, "bytes", f->bytes);
            hj_obj_end(&j);
        }
        fb_dropped = g_fb_dropped;
        pthread_mutex_unlock(&g_fb_lock);
    }
    hj_arr_end(&j);

    hj_obj_begin(&j, "peak_huge_pages");
    for (unsigned k = 0; k < NORDER; k++) {
        int bk = g_order[k];
        uint64_t pk = atomic_load(&ht_stats.peak[bk]);
        if (bk == HT_B_4K || (!pk && bk != HT_B_HUGETLB2M && bk != HT_B_HUGETLB1G))
            continue;
        hj_u64(&j, ht_backing_name(bk), pk / ht_backing_page(bk));
    }
    hj_obj_end(&j);
    hj_u64(&j, "forks", atomic_load(&ht_stats.forks));
    /* Whose allocator serves what the library does not own. */
    hj_str(&j, "allocator", ht_next_foreign() ? ht_next_module() : "glibc");
    if (mode == HT_RECORD) {
        const char *lp = ht_rec_log_path();
        if (lp)
            hj_str(&j, "log", lp);
        hj_u64(&j, "records", ht_rec_records());
    }
    if (mode == HT_APPLY) {
        /* The apply sections, already rendered (a sequence of members). */
        if (ab.len) {
            hb_putc(&b, ',');
            hb_putn(&b, ab.p, ab.len);
        }
        if (ab.trunc)
            ht_stats_error("summary: apply sections truncated", "");
    }

    hj_arr_begin(&j, "errors");
    int ne = atomic_load(&g_err_n);
    for (int i = 0; i < ne && i < MAX_ERRORS; i++) {
        if (atomic_load_explicit(&g_err_ready[i], memory_order_acquire))
            hj_str(&j, NULL, g_err[i]);
    }
    if (ne > MAX_ERRORS || fb_dropped || !fb_locked) {
        char m[96];
        struct ht_buf mb;
        hb_init(&mb, m, sizeof m);
        if (ne > MAX_ERRORS) {
            hb_u64(&mb, (uint64_t)(ne - MAX_ERRORS));
            hb_puts(&mb, " more errors not shown");
        } else if (fb_dropped) {
            hb_u64(&mb, fb_dropped);
            hb_puts(&mb, " fallbacks not shown (table full)");
        } else {
            hb_puts(&mb, "fallbacks not shown (table busy at the signal)");
        }
        hj_str(&j, NULL, m);
    }
    hj_arr_end(&j);
    hj_obj_end(&j);
    hb_putc(&b, '\n');

    /* Written next to the target and renamed over it: a reader never sees
     * half a summary (snapshots replace each other, the final one last), and
     * nothing planted at either name is written through. */
    long fd = ht_create_beside(path, tmp, sizeof tmp);
    if (fd >= 0) {
        write_all((int)fd, b.p, b.len);
        ht_sys_close((int)fd);
        if (HT_SYSCALL(SYS_renameat, -100, tmp, -100, path) != 0)
            HT_SYSCALL(SYS_unlinkat, -100, tmp, 0);
    } else {
        ht_verbose("cannot write summary ", path);
    }
    atomic_store(&g_writing, 0);
}

void ht_summary_write(void) { summary_write(1, 0); }
void ht_summary_snapshot(int in_signal) { summary_write(0, in_signal); }
