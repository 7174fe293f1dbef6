/* hugetune-qemu.c - QEMU user-mode TCG plugin: the memory references of a program,
 * spatially sampled, written as a reference stream version 2 (docs/formats.md §6,
 * docs/model.md §3.1). See qemu-plugin/README.md for the arguments.
 *
 * Every guest memory access reaches vcpu_mem(). It is kept iff
 *   - its 4 KB page p = addr >> 12 is in the page sample: fmix64(p ^ seed ^ SALT) % P < T
 *     (SHARDS on pages: 4 KB translations and folios), or
 *   - its 2 MB region g = addr >> 21, or the region before, is in the region sample:
 *     fmix64(g ^ seed) % P < T (translations and folios above 4 KB; the runtime
 *     library's huge pages of an object straddle two captured regions, so the one
 *     after a sampled region is kept too), or
 *   - it is in the runtime library's marker area (always kept).
 * The decision is made once per page and T (mem_slow) and cached per thread:
 * vcpu_mem() skips a reference it need not keep on one lookup, since the
 * callback runs on every access (1.9 G of them for cg over 1 GiB).
 * Kept references go to the guest thread's own buffer, encoded against that thread's
 * own state; a full buffer is appended to the file as one chunk (THREAD record first)
 * under a lock. seq counts all the thread's references, sampled or not, so the gaps
 * carry reuse time. Every 2 MB region referenced (sampled or not) is counted in a
 * lock-free bitmap; END carries the count, from which the analysis takes the
 * realized rate of the region sample.
 *
 * Fixed-size mode keeps at most S_max pages in the page sample: when one more would
 * be added, T falls to the largest hash in the set and the pages at or above it leave
 * (the region sample follows the same T). The THRESHOLD record must come after every
 * REF written under the old T and before any REF of the new one, so lowering T (under
 * the global lock) publishes the new T, then drains every thread's buffer (each under
 * its own lock, which appends also take and under which they test the hashes against
 * T again), then writes the record. Lock order: global, then a thread's.
 *
 * A reference budget (`max_refs`, fixed-size mode) bounds the references the analysis
 * will keep: each drained buffer adds its REFs to an estimate of those kept under the
 * current T; when it passes the budget, T falls until half the page sample is left
 * (or halves, when the sample holds under two pages) and the estimate scales by the
 * ratio of the thresholds. T only falls, so the final sample is a fixed-rate sample at
 * the final T, as with max_pages (docs/model.md §3.1); the stream keeps the REFs
 * written before each fall (the analysis drops those above the final T), at most
 * about max_refs per halving.
 *
 * The allocation record (`alloc=PATH`, for programs the runtime library cannot
 * enter: static and Go binaries) is an allocation log version 2 (docs/formats.md
 * §2, §2.10) written from the guest's own system calls: mmap, munmap, mremap,
 * mprotect and brk, each with its arguments, result, and the guest address of its
 * syscall instruction as caller. Each event takes a global sequence number and the
 * plugin puts a marker reference for it into the calling thread's reference
 * stream at that point (after the call for mmap, mremap and brk, before it for
 * munmap and mprotect, as the runtime library's markers: §2.4), in a marker area
 * no guest access can reach (ALLOC_MARKERS: the non-canonical half of the address
 * space), so the analysis applies every event exactly where it happened in the
 * thread's references. Events go to one buffer under their own lock (system calls
 * are rare), a chunk per run of one thread's events; the marker is put before that
 * lock is taken (lock order: the stream's locks never wait for it). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <elf.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../include/hugetune/refstream.h"
#include "../../runtime/src/enc.h"
#include "qemu_api.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define PAGE_SHIFT 12
#define REGION_SHIFT 21
/* Mixed into the seed of the page sample (the model's sampled::PAGE_SALT). */
#define PAGE_SALT ((uint64_t)0x9e3779b97f4a7c15ULL)
/* Regions counted in the bitmap: user addresses below 2^47. */
#define REGION_BITS (1ull << (47 - REGION_SHIFT))
#define BUF_CAP (1u << 20)
#define MAX_VCPUS 4096
#define CACHE_SLOTS 4096 /* per thread: pages known to be in the sample */
#define DEC_SLOTS 256    /* per thread: recent pages' decisions (vcpu_mem's fast path) */
#define FD_MIN 900       /* the output's descriptor, out of the guest's usual way */

enum mode { M_COMPLETE, M_RATE, M_SIZE };

/* The allocation record's marker area: non-canonical x86-64 addresses, which no
 * guest access can have (formats.md §2.10). */
#define ALLOC_MARKERS ((uint64_t)0x8000000000000000ULL)
#define ALLOC_MARKER_SPAN ((uint64_t)1 << 20)
/* glibc's default mmap threshold: the log header's heap-large threshold. */
#define ALLOC_THRESHOLD 131072u
#define ALLOC_BUF (1u << 16)
#define ALLOC_HDR 128u
#define ALLOC_F_SEQ 1u
#define ALLOC_F_SYSCALLS 4u
/* x86-64 system call numbers recorded. */
#define NR_MMAP 9
#define NR_MPROTECT 10
#define NR_MUNMAP 11
#define NR_BRK 12
#define NR_MREMAP 25

struct vthread {
    struct htrs_thread st;
    uint64_t tid;                /* the guest thread's number: 0, 1, ... in creation order */
    _Atomic uint64_t seen;       /* references of this thread (its next seq) */
    uint64_t written;            /* REF records */
    uint64_t undrained;          /* REF records in buf (the budget's count) */
    /* Fixed-size mode: the buffer, against a thread lowering T (which drains it).
     * A spin lock (buf_lock): its own thread takes it for every kept reference. */
    atomic_int busy;
    size_t len;
    uint64_t cache[CACHE_SLOTS]; /* page + 1, 0 = empty */
    /* Recent pages' decisions, direct-mapped by page: key ((page + 1) << 1 |
     * kept), valid while T is still t. Most references skip on one lookup:
     * the interleaved streams of an SpMV (cg) changed the previous page and
     * region on almost every reference, and each change cost three hashes. */
    struct dec {
        uint64_t key, t;
    } dec[DEC_SLOTS];
    /* The region of the previous slow-path reference, its decision under
     * last_t, and that it was counted. */
    uint64_t last_region; /* region + 1, 0 = none */
    uint64_t last_t;
    int last_keep; /* the region (or the one before) is sampled */
    /* alloc=: the guest address of the syscall instruction executing, and the
     * call between its entry and return callbacks. */
    uint64_t sys_pc;
    int64_t p_num; /* -1: none */
    uint64_t p_args[6];
    uint64_t p_pc;
    uint64_t p_seq; /* munmap, mprotect: taken (and marked) before the call */
    unsigned char buf[BUF_CAP];
};

/* The allocation record (alloc=). */
static struct {
    int on;
    int fd;
    int broken;
    pthread_mutex_t lock; /* the buffer and the file; never held while taking g.lock */
    _Atomic uint64_t seq; /* the last sequence number given out */
    int have_exe;
    char *exe;      /* the guest program's path */
    uint64_t start_code; /* the lowest address of its executable segments, as loaded */
    /* The chunk being filled: one thread's events. */
    uint32_t tid;
    uint32_t n;
    size_t len;
    struct ht_enc enc;
    unsigned char buf[ALLOC_BUF + HT_EV_MAX];
} A = {
    .fd = -1,
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The set of sampled pages: open addressing (linear probing, backward-shift
 * deletion) for membership, and a max-heap on the hash for fixed-size eviction. */
struct set {
    uint64_t *keys; /* page + 1; 0 = empty */
    uint64_t cap;   /* power of two */
    uint64_t n;
    uint64_t *heap_h, *heap_p; /* fixed-size only */
};

static struct {
    enum mode mode;
    uint64_t seed, modulus, max_pages;
    uint64_t max_refs; /* fixed-size: the reference budget, 0 = none */
    double kept;       /* REFs written that the current T keeps (expected) */
    uint64_t modmask; /* modulus - 1 when a power of two, else 0 */
    _Atomic uint64_t threshold;
    uint64_t mbase, mspan;
    int fd;
    pid_t owner; /* a forked child writes nothing (its parent's stream) */
    int broken;  /* a write failed: no END, so the reader says the stream is cut */
    pthread_mutex_t lock; /* the file, the set, the threads */
    struct vthread *by_vcpu[MAX_VCPUS];
    struct vthread **all;
    size_t n_all, cap_all;
    struct set set;
    /* Every region referenced: one bit each, and their number. */
    _Atomic uint64_t *regions;
    _Atomic uint64_t n_regions;
    char *progress;
    struct timespec last_progress;
} g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof msg - 2)
        n = sizeof msg - 2;
    msg[n] = '\n';
    msg[n + 1] = 0;
    /* qemu_plugin_outs() only prints with `-d plugin`: errors go to stderr. */
    ssize_t w = write(2, msg, (size_t)n + 1);
    (void)w;
}

static inline uint64_t hash_mod(uint64_t h)
{
    return g.modmask ? h & g.modmask : h % g.modulus;
}

/* The page sample's hash of a 4 KB page. */
static inline uint64_t hash_of(uint64_t page)
{
    return hash_mod(htrs_fmix64(page ^ g.seed ^ PAGE_SALT));
}

/* Whether region r's references are kept at threshold t: r or the region before
 * it is in the region sample. */
static inline int region_keep(uint64_t r, uint64_t t)
{
    return hash_mod(htrs_fmix64(r ^ g.seed)) < t || hash_mod(htrs_fmix64((r - 1) ^ g.seed)) < t;
}

/* Counts region r once (lock-free: the bit's first setter counts it). */
static inline void count_region(uint64_t r)
{
    if (!g.regions || r >= REGION_BITS)
        return;
    _Atomic uint64_t *w = &g.regions[r / 64];
    uint64_t bit = 1ull << (r % 64);
    if (atomic_load_explicit(w, memory_order_relaxed) & bit)
        return;
    if (!(atomic_fetch_or_explicit(w, bit, memory_order_relaxed) & bit))
        atomic_fetch_add_explicit(&g.n_regions, 1, memory_order_relaxed);
}

/* A thread's buffer lock. Its own thread takes it for every reference it keeps
 * and others only to drain it when T falls, so it is almost never contended: one
 * atomic exchange, where pthread_mutex_lock and _unlock took 15 % of the time of
 * a 1 GiB random walk under qemu. A drainer holds it across a write(2), so the
 * waiter yields. */
static inline void buf_lock(struct vthread *t)
{
    while (atomic_exchange_explicit(&t->busy, 1, memory_order_acquire))
        while (atomic_load_explicit(&t->busy, memory_order_relaxed))
            sched_yield();
}

static inline void buf_unlock(struct vthread *t)
{
    atomic_store_explicit(&t->busy, 0, memory_order_release);
}

/* ------------------------------------------------------------------ output */

static void write_all(const unsigned char *p, size_t n)
{
    if (g.broken || getpid() != g.owner)
        return;
    while (n > 0) {
        ssize_t w = write(g.fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            say("hugetune-qemu: writing the reference stream failed: %s", strerror(errno));
            g.broken = 1;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void progress_locked(int force)
{
    if (!g.progress || getpid() != g.owner)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double dt = (double)(now.tv_sec - g.last_progress.tv_sec) +
                (double)(now.tv_nsec - g.last_progress.tv_nsec) / 1e9;
    if (!force && dt < 0.25)
        return;
    g.last_progress = now;
    uint64_t seen = 0, written = 0;
    for (size_t i = 0; i < g.n_all; i++) {
        seen += atomic_load_explicit(&g.all[i]->seen, memory_order_relaxed);
        written += g.all[i]->written;
    }
    char line[128];
    int n = snprintf(line, sizeof line, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                     seen, written, g.set.n, atomic_load(&g.threshold));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", g.progress);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    close(fd);
    if (w == n)
        rename(tmp, g.progress);
}

/* Appends thread t's buffer as one chunk; global lock and t's lock held. */
static void drain_locked(struct vthread *t)
{
    if (t->len == 0)
        return;
    write_all(t->buf, t->len);
    t->len = 0;
    g.kept += (double)t->undrained;
    t->undrained = 0;
    progress_locked(0);
}

/* ------------------------------------------------------------------ the set */

static int set_init(struct set *s, uint64_t cap, int heap)
{
    s->cap = cap;
    s->n = 0;
    s->keys = calloc(cap, sizeof *s->keys);
    s->heap_h = heap ? malloc(cap / 2 * sizeof *s->heap_h) : NULL;
    s->heap_p = heap ? malloc(cap / 2 * sizeof *s->heap_p) : NULL;
    return s->keys && (!heap || (s->heap_h && s->heap_p)) ? 0 : -1;
}

static inline uint64_t slot_of(uint64_t key, uint64_t cap)
{
    return htrs_fmix64(key * 0x9e3779b97f4a7c15ULL) & (cap - 1);
}

/* 1 if page is in the set. */
static int set_has(const struct set *s, uint64_t page)
{
    uint64_t k = page + 1;
    for (uint64_t i = slot_of(k, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (s->keys[i] == k)
            return 1;
        if (s->keys[i] == 0)
            return 0;
    }
}

static void set_put_key(struct set *s, uint64_t k)
{
    uint64_t i = slot_of(k, s->cap);
    while (s->keys[i] != 0)
        i = (i + 1) & (s->cap - 1);
    s->keys[i] = k;
}

/* Grows the table (fixed-rate mode: no bound). -1 when memory runs out. */
static int set_grow(struct set *s)
{
    uint64_t *old = s->keys, oldcap = s->cap;
    uint64_t *nk = calloc(oldcap * 2, sizeof *nk);
    if (!nk)
        return -1;
    s->keys = nk;
    s->cap = oldcap * 2;
    for (uint64_t i = 0; i < oldcap; i++)
        if (old[i])
            set_put_key(s, old[i]);
    free(old);
    return 0;
}

static void set_remove(struct set *s, uint64_t page)
{
    uint64_t k = page + 1, m = s->cap - 1;
    uint64_t i = slot_of(k, s->cap);
    while (s->keys[i] != k) {
        if (s->keys[i] == 0)
            return;
        i = (i + 1) & m;
    }
    /* Backward-shift deletion keeps every probe chain unbroken. */
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & m;
        if (s->keys[j] == 0)
            break;
        uint64_t home = slot_of(s->keys[j], s->cap);
        /* Move keys[j] into the hole at i unless its home lies in (i, j]. */
        int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            s->keys[i] = s->keys[j];
            i = j;
        }
    }
    s->keys[i] = 0;
    s->n--;
}

static void heap_push(struct set *s, uint64_t h, uint64_t page, uint64_t at)
{
    while (at > 0) {
        uint64_t up = (at - 1) / 2;
        if (s->heap_h[up] >= h)
            break;
        s->heap_h[at] = s->heap_h[up];
        s->heap_p[at] = s->heap_p[up];
        at = up;
    }
    s->heap_h[at] = h;
    s->heap_p[at] = page;
}

/* Removes the top of a heap of n + 1 entries (n after). */
static void heap_pop(struct set *s, uint64_t n)
{
    uint64_t h = s->heap_h[n], p = s->heap_p[n], at = 0;
    for (;;) {
        uint64_t c = 2 * at + 1;
        if (c >= n)
            break;
        if (c + 1 < n && s->heap_h[c + 1] > s->heap_h[c])
            c++;
        if (s->heap_h[c] <= h)
            break;
        s->heap_h[at] = s->heap_h[c];
        s->heap_p[at] = s->heap_p[c];
        at = c;
    }
    s->heap_h[at] = h;
    s->heap_p[at] = p;
}

/* T falls to t (< T): the pages at or above it leave the set, the threads' buffers
 * (written under the old T) go out, then the THRESHOLD record. Global lock held. */
static void lower_to_locked(uint64_t t)
{
    struct set *s = &g.set;
    uint64_t old = atomic_load(&g.threshold);
    while (s->n > 0 && s->heap_h[0] >= t) {
        set_remove(s, s->heap_p[0]);
        heap_pop(s, s->n);
    }
    atomic_store(&g.threshold, t);
    for (size_t i = 0; i < g.n_all; i++) {
        struct vthread *o = g.all[i];
        buf_lock(o);
        drain_locked(o);
        buf_unlock(o);
    }
    /* The REFs of the pages and regions that left are dropped by the analysis. */
    g.kept *= (double)t / (double)old;
    unsigned char rec[HTRS_MAX_REC];
    write_all(rec, htrs_threshold(rec, t));
}

/* Fixed-size: T falls to the largest hash in the set; the pages at or above it
 * leave. Global lock held. */
static void lower_threshold_locked(void)
{
    lower_to_locked(g.set.heap_h[0]);
}

/* Over the reference budget: T falls until at most half the page sample is left
 * (the largest hashes leave first, as one by one), or halves when fewer than two
 * pages are sampled. Global lock held. */
static void over_budget_locked(void)
{
    struct set *s = &g.set;
    uint64_t t = atomic_load(&g.threshold);
    if (s->n < 2) {
        lower_to_locked(t > 1 ? t / 2 : 1);
        return;
    }
    /* The heap's top is the largest hash: the hash of the page at position n/2 of
     * the hashes in decreasing order, found without sorting by popping copies. */
    uint64_t target = s->n / 2, n = s->n;
    uint64_t *h = malloc(n * sizeof *h);
    if (!h) {
        lower_to_locked(t > 1 ? t / 2 : 1);
        return;
    }
    memcpy(h, s->heap_h, n * sizeof *h);
    /* Partial heap sort of the copy: pop until target pages would remain. */
    uint64_t cut = t, m = n;
    while (m > target) {
        cut = h[0];
        while (m > 0 && h[0] >= cut) {
            h[0] = h[--m];
            for (uint64_t at = 0;;) {
                uint64_t l = 2 * at + 1, r = l + 1, big = at;
                if (l < m && h[l] > h[big])
                    big = l;
                if (r < m && h[r] > h[big])
                    big = r;
                if (big == at)
                    break;
                uint64_t x = h[at];
                h[at] = h[big];
                h[big] = x;
                at = big;
            }
        }
    }
    free(h);
    lower_to_locked(cut > 1 ? cut : 1);
}

/* The page (hash h < T when tested) enters the sample unless it is in it already.
 * Returns 0 when it was evicted again at once (fixed-size: its own hash was the
 * largest). Global lock held. */
static int add_page_locked(uint64_t page, uint64_t h)
{
    struct set *s = &g.set;
    if (h >= atomic_load(&g.threshold))
        return 0;
    if (set_has(s, page))
        return 1;
    if (g.mode == M_SIZE) {
        set_put_key(s, page + 1);
        heap_push(s, h, page, s->n);
        s->n++;
        if (s->n > g.max_pages)
            lower_threshold_locked();
        return h < atomic_load(&g.threshold);
    }
    if ((s->n + 1) * 2 > s->cap && set_grow(s) != 0) {
        say("hugetune-qemu: out of memory for the set of sampled pages");
        return 1; /* the reference is still written; only the count suffers */
    }
    set_put_key(s, page + 1);
    s->n++;
    return 1;
}

/* END with the count of regions referenced (formats.md §6: END's flag 1 adds it). */
static size_t end_record(unsigned char *out, uint64_t seen, uint64_t written, uint64_t regions)
{
    size_t n = htrs_varint(out, HTRS_K_END | 1u << 2);
    n += htrs_varint(out + n, seen);
    n += htrs_varint(out + n, written);
    return n + htrs_varint(out + n, regions);
}

/* ------------------------------------------------------------------ callbacks */

static void put_ref(struct vthread *t, uint64_t addr, int write, uint64_t seq)
{
    if (t->len == 0)
        t->len = htrs_thread_rec(t->buf, t->tid);
    t->len += htrs_ref(t->buf + t->len, &t->st, addr, write, seq);
    t->written++;
    t->undrained++;
}

static void full_buffer(struct vthread *t, int locked_own)
{
    /* Lock order: global first. */
    if (locked_own)
        buf_unlock(t);
    pthread_mutex_lock(&g.lock);
    buf_lock(t);
    drain_locked(t);
    buf_unlock(t);
    while (g.max_refs && g.kept > (double)g.max_refs && atomic_load(&g.threshold) > 1)
        over_budget_locked();
    pthread_mutex_unlock(&g.lock);
    if (locked_own)
        buf_lock(t);
}

/* A reference that the decision cache did not skip (vcpu_mem): decides, fills
 * the cache, writes it if kept. Out of line, so that the fast path saves no
 * registers. */
static __attribute__((noinline)) void mem_slow(struct vthread *t, qemu_plugin_meminfo_t info,
                                               uint64_t vaddr, uint64_t seq)
{
    int marker = vaddr - g.mbase < g.mspan;
    uint64_t page = vaddr >> PAGE_SHIFT, region = vaddr >> REGION_SHIFT, t_now = 0;
    if (!marker && g.mode != M_COMPLETE) {
        t_now = atomic_load_explicit(&g.threshold, memory_order_relaxed);
        struct dec *e = &t->dec[page & (DEC_SLOTS - 1)];
        if (e->key != ((page + 1) << 1 | 1) || e->t != t_now) {
            if (t->last_region != region + 1 || t->last_t != t_now) {
                if (t->last_region != region + 1)
                    count_region(region);
                t->last_region = region + 1;
                t->last_keep = region_keep(region, t_now);
                t->last_t = t_now;
            }
            uint64_t h = hash_of(page);
            int in_page = h < t_now;
            if (in_page) {
                uint64_t *c = &t->cache[page & (CACHE_SLOTS - 1)];
                if (*c != page + 1) {
                    pthread_mutex_lock(&g.lock);
                    in_page = add_page_locked(page, h);
                    pthread_mutex_unlock(&g.lock);
                    if (in_page)
                        *c = page + 1;
                }
            }
            /* Valid while T stays t_now (adding the page may have lowered it:
             * the entry is then stale at once). */
            int keep = in_page || t->last_keep;
            e->key = (page + 1) << 1 | (uint64_t)keep;
            e->t = t_now;
            if (!keep)
                return;
        }
    }
    int w = qemu_plugin_mem_is_store(info);
    if (g.mode == M_SIZE) {
        buf_lock(t);
        /* T may have fallen since the decision (adding this page, or another
         * thread): every REF written satisfies the T in force. */
        uint64_t t_lock = atomic_load_explicit(&g.threshold, memory_order_relaxed);
        if (marker || t_lock == t_now || hash_of(page) < t_lock || region_keep(region, t_lock)) {
            put_ref(t, vaddr, w, seq);
            if (t->len > BUF_CAP - 2 * HTRS_MAX_REC)
                full_buffer(t, 1);
        }
        buf_unlock(t);
    } else {
        put_ref(t, vaddr, w, seq);
        if (t->len > BUF_CAP - 2 * HTRS_MAX_REC)
            full_buffer(t, 0);
    }
}

static void vcpu_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *ud)
{
    (void)ud;
    if (vcpu >= MAX_VCPUS)
        return;
    struct vthread *t = g.by_vcpu[vcpu];
    if (!t)
        return;
    uint64_t seq = atomic_load_explicit(&t->seen, memory_order_relaxed);
    atomic_store_explicit(&t->seen, seq + 1, memory_order_relaxed);
    /* Markers and the guest's own pages never share a key: no entry is made
     * for a marker. */
    uint64_t page = vaddr >> PAGE_SHIFT;
    const struct dec *e = &t->dec[page & (DEC_SLOTS - 1)];
    if (e->key == (page + 1) << 1 && e->t == atomic_load_explicit(&g.threshold, memory_order_relaxed))
        return;
    mem_slow(t, info, vaddr, seq);
}

/* ------------------------------------------------------------------ allocation record */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put_le32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_le64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static void alloc_write(const unsigned char *p, size_t n)
{
    if (A.broken || getpid() != g.owner)
        return;
    while (n > 0) {
        ssize_t w = write(A.fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            say("hugetune-qemu: writing the allocation record failed: %s", strerror(errno));
            A.broken = 1;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Writes the chunk being filled (formats.md §2.2); A.lock held. */
static void alloc_flush_locked(void)
{
    if (A.n == 0)
        return;
    unsigned char h[HT_CHUNK_HDR] = {0};
    uint64_t now = mono_ns();
    put_le32(h, HT_CHUNK_TAG);
    put_le32(h + 4, A.tid);
    put_le32(h + 8, (uint32_t)A.len);
    put_le32(h + 12, A.n);
    put_le64(h + 24, now); /* times are CLOCK_MONOTONIC ns: the pair is (t, t) */
    put_le64(h + 32, now);
    alloc_write(h, sizeof h);
    alloc_write(A.buf, A.len);
    static const unsigned char zeros[8];
    if (A.len % 8)
        alloc_write(zeros, 8 - A.len % 8);
    A.n = 0;
    A.len = 0;
}

/* Appends one event of thread tid (payload: MODULE's blob). */
static void alloc_event(uint32_t tid, unsigned kind, uint64_t seq, uint64_t addr, uint64_t size,
                        uint64_t arg, uint64_t arg2, uint64_t caller, const void *payload,
                        size_t plen)
{
    if (plen > ALLOC_BUF / 2) {
        say("hugetune-qemu: an allocation record event of %zu bytes is too large; dropped", plen);
        return;
    }
    pthread_mutex_lock(&A.lock);
    if (A.n > 0 && (A.tid != tid || A.len + HT_EV_MAX + plen > ALLOC_BUF))
        alloc_flush_locked();
    if (A.n == 0) {
        A.tid = tid;
        memset(&A.enc, 0, sizeof A.enc);
    }
    /* The clock is read under the lock: times never go backwards in a chunk. */
    unsigned char *end = ht_enc_event(A.buf + A.len, &A.enc, kind, 0, 1, seq, mono_ns(), addr,
                                      size, arg, arg2, caller);
    if (plen) {
        memcpy(end, payload, plen);
        end += plen;
    }
    A.len = (size_t)(end - A.buf);
    A.n++;
    pthread_mutex_unlock(&A.lock);
}

/* A marker reference for event seq, in thread t's stream at this point: counted
 * in the thread's references (seq) like the runtime library's marker loads,
 * and always written. The thread's buffer goes out with it, so that in the file
 * the marker comes before every chunk another thread writes later: another
 * thread's references to memory this call mapped are not read before the
 * mapping (system calls are rare; a write each costs nothing that matters). */
static void put_marker(struct vthread *t, uint64_t aseq)
{
    uint64_t addr = ALLOC_MARKERS + (aseq & (ALLOC_MARKER_SPAN - 1));
    uint64_t seq = atomic_load_explicit(&t->seen, memory_order_relaxed);
    atomic_store_explicit(&t->seen, seq + 1, memory_order_relaxed);
    if (g.mode == M_SIZE) {
        buf_lock(t);
        put_ref(t, addr, 0, seq);
        full_buffer(t, 1);
        buf_unlock(t);
    } else {
        put_ref(t, addr, 0, seq);
        full_buffer(t, 0);
    }
}

static uint64_t next_seq(void) { return atomic_fetch_add(&A.seq, 1) + 1; }

static uint32_t host_tid(void) { return (uint32_t)syscall(SYS_gettid); }

/* The syscall instruction about to execute (registered on every `syscall`). */
static void vcpu_syscall_insn(unsigned int vcpu, void *ud)
{
    if (vcpu < MAX_VCPUS && g.by_vcpu[vcpu])
        g.by_vcpu[vcpu]->sys_pc = (uint64_t)(uintptr_t)ud;
}

static void vcpu_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                         uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                         uint64_t a7, uint64_t a8)
{
    (void)id;
    (void)a7;
    (void)a8;
    if (!A.have_exe) {
        /* The loader's facts need a vCPU context: the first system call has one. */
        pthread_mutex_lock(&A.lock);
        if (!A.have_exe) {
            A.exe = qemu_plugin_path_to_binary();
            A.start_code = qemu_plugin_start_code();
            A.have_exe = 1;
        }
        pthread_mutex_unlock(&A.lock);
    }
    if (vcpu >= MAX_VCPUS || !g.by_vcpu[vcpu])
        return;
    struct vthread *t = g.by_vcpu[vcpu];
    t->p_num = -1;
    if (num != NR_MMAP && num != NR_MUNMAP && num != NR_MREMAP && num != NR_MPROTECT &&
        num != NR_BRK)
        return;
    t->p_num = num;
    t->p_args[0] = a1;
    t->p_args[1] = a2;
    t->p_args[2] = a3;
    t->p_args[3] = a4;
    t->p_args[4] = a5;
    t->p_args[5] = a6;
    t->p_pc = t->sys_pc;
    if (num == NR_MUNMAP || num == NR_MPROTECT) {
        /* The range may change under the call: the marker goes before it. */
        t->p_seq = next_seq();
        put_marker(t, t->p_seq);
    }
}

static void vcpu_syscall_ret(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, int64_t ret)
{
    (void)id;
    if (vcpu >= MAX_VCPUS || !g.by_vcpu[vcpu])
        return;
    struct vthread *t = g.by_vcpu[vcpu];
    if (t->p_num != num)
        return;
    t->p_num = -1;
    const uint64_t *a = t->p_args;
    uint32_t tid = host_tid();
    /* A failed mmap or mremap returns -errno: MAP_FAILED in the log. */
    uint64_t res = ret < 0 && ret >= -4095 ? UINT64_MAX : (uint64_t)ret;
    if (num == NR_MUNMAP) {
        alloc_event(tid, HT_K_MUNMAP, t->p_seq, a[0], a[1], (uint64_t)ret, 0, t->p_pc, NULL, 0);
        return;
    }
    if (num == NR_MPROTECT) {
        alloc_event(tid, HT_K_RANGE_CALL, t->p_seq, a[0], a[1], a[2] & 0xffffffffu,
                    (uint64_t)ret, t->p_pc, NULL, 0);
        return;
    }
    uint64_t seq = next_seq();
    put_marker(t, seq);
    if (num == NR_MMAP)
        alloc_event(tid, HT_K_MMAP, seq, res, a[1], (a[2] & 0xffffffffu) << 32 | (a[3] & 0xffffffffu),
                    (a[4] & 0xffffffffu) << 32 | ((a[5] >> 12) & 0xffffffffu), t->p_pc, NULL, 0);
    else if (num == NR_MREMAP)
        alloc_event(tid, HT_K_MREMAP, seq, res, a[2], a[0], a[1], t->p_pc, NULL, 0);
    else
        alloc_event(tid, HT_K_BRK, seq, (uint64_t)ret, 0, a[0], 0, t->p_pc, NULL, 0);
}

/* The MODULE event of the guest executable (formats.md §2.8): its PT_LOAD
 * segments from its program headers, its load bias from where qemu put its
 * lowest executable segment. Nothing (and a line on stderr) when it cannot be
 * read. */
static void alloc_module(void)
{
    if (!A.have_exe || !A.exe)
        return;
    int fd = open(A.exe, O_RDONLY | O_CLOEXEC);
    Elf64_Ehdr eh;
    if (fd < 0 || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 256) {
        say("hugetune-qemu: cannot read the program headers of %s: its static data is not "
            "in the allocation record",
            A.exe);
        if (fd >= 0)
            close(fd);
        return;
    }
    Elf64_Phdr ph[256];
    size_t want = (size_t)eh.e_phnum * sizeof(Elf64_Phdr);
    ssize_t got = pread(fd, ph, want, (off_t)eh.e_phoff);
    close(fd);
    if (got != (ssize_t)want) {
        say("hugetune-qemu: cannot read the program headers of %s", A.exe);
        return;
    }
    size_t pl = strlen(A.exe) + 1;
    size_t padded = (pl + 7) / 8 * 8;
    unsigned char payload[4096 + 256 * 32];
    if (padded > 4096) {
        say("hugetune-qemu: the program's path is too long for the allocation record");
        return;
    }
    memset(payload, 0, padded);
    memcpy(payload, A.exe, pl);
    size_t o = padded;
    uint64_t nseg = 0, min_x = UINT64_MAX;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD)
            continue;
        if ((ph[i].p_flags & PF_X) && ph[i].p_vaddr < min_x)
            min_x = ph[i].p_vaddr;
        put_le64(payload + o, ph[i].p_vaddr);
        put_le64(payload + o + 8, ph[i].p_memsz);
        put_le64(payload + o + 16, ph[i].p_filesz);
        put_le32(payload + o + 24, ph[i].p_flags);
        put_le32(payload + o + 28, 0);
        o += 32;
        nseg++;
    }
    if (min_x == UINT64_MAX || A.start_code == 0) {
        say("hugetune-qemu: %s has no executable segment qemu reports: its static data is "
            "not in the allocation record",
            A.exe);
        return;
    }
    uint64_t bias = A.start_code - min_x;
    alloc_event(host_tid(), HT_K_MODULE, next_seq(), bias, o, nseg, 0, 0, payload, o);
}

/* The log's header (formats.md §2.1). */
static int alloc_open(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("hugetune-qemu: cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    A.fd = fcntl(fd, F_DUPFD_CLOEXEC, FD_MIN);
    if (A.fd < 0)
        A.fd = fd;
    else
        close(fd);
    unsigned char h[ALLOC_HDR] = {0};
    uint64_t now = mono_ns();
    memcpy(h, "HTALLOC", 8);
    put_le32(h + 8, 2);
    put_le32(h + 12, ALLOC_HDR);
    put_le32(h + 16, (uint32_t)getpid());
    put_le32(h + 20, (uint32_t)getppid());
    put_le64(h + 24, now);
    put_le64(h + 32, ALLOC_MARKERS);
    put_le64(h + 40, ALLOC_MARKER_SPAN);
    put_le64(h + 48, ALLOC_THRESHOLD);
    put_le32(h + 56, ALLOC_F_SEQ | ALLOC_F_SYSCALLS);
    put_le64(h + 64, now);
    put_le64(h + 72, now);
    A.on = 1;
    alloc_write(h, sizeof h);
    return A.broken ? -1 : 0;
}

/* At exit: the executable, the last chunk, the exit calibration pair. */
static void alloc_close(void)
{
    if (!A.on || getpid() != g.owner)
        return;
    alloc_module();
    pthread_mutex_lock(&A.lock);
    alloc_flush_locked();
    unsigned char pair[16];
    uint64_t now = mono_ns();
    put_le64(pair, now);
    put_le64(pair + 8, now);
    if (!A.broken && pwrite(A.fd, pair, sizeof pair, 96) != (ssize_t)sizeof pair) {
        say("hugetune-qemu: writing the allocation record failed: %s", strerror(errno));
        A.broken = 1;
    }
    if (close(A.fd) != 0)
        say("hugetune-qemu: closing the allocation record failed: %s", strerror(errno));
    A.fd = -1;
    A.on = 0;
    pthread_mutex_unlock(&A.lock);
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        qemu_plugin_register_vcpu_mem_cb(insn, vcpu_mem, QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, NULL);
        /* alloc=: every `syscall` (0f 05) tells its address before it runs. */
        if (A.on && qemu_plugin_insn_size(insn) == 2) {
            const unsigned char *b = qemu_plugin_insn_data(insn);
            if (b[0] == 0x0f && b[1] == 0x05)
                qemu_plugin_register_vcpu_insn_exec_cb(
                    insn, vcpu_syscall_insn, QEMU_PLUGIN_CB_NO_REGS,
                    (void *)(uintptr_t)qemu_plugin_insn_vaddr(insn));
        }
    }
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
    (void)id;
    if (vcpu >= MAX_VCPUS) {
        say("hugetune-qemu: guest thread on vCPU %u not traced (at most %d at once); the "
            "stream is marked incomplete",
            vcpu, MAX_VCPUS);
        pthread_mutex_lock(&g.lock);
        g.broken = 1;
        pthread_mutex_unlock(&g.lock);
        return;
    }
    struct vthread *t = calloc(1, sizeof *t);
    pthread_mutex_lock(&g.lock);
    if (!t || (g.n_all == g.cap_all &&
               !(g.all = reallocarray(g.all, g.cap_all = g.cap_all ? 2 * g.cap_all : 16,
                                      sizeof *g.all)))) {
        say("hugetune-qemu: out of memory for a guest thread; the stream is marked incomplete");
        g.broken = 1;
        pthread_mutex_unlock(&g.lock);
        free(t);
        return;
    }
    t->p_num = -1;
    t->tid = g.n_all;
    g.all[g.n_all++] = t;
    g.by_vcpu[vcpu] = t;
    pthread_mutex_unlock(&g.lock);
}

/* A guest thread ended: its buffer goes out now; its counts stay for END (a later
 * thread may get the same vCPU index, and gets a new thread number). */
static void vcpu_exit(qemu_plugin_id_t id, unsigned int vcpu)
{
    (void)id;
    if (vcpu >= MAX_VCPUS)
        return;
    pthread_mutex_lock(&g.lock);
    struct vthread *t = g.by_vcpu[vcpu];
    if (t) {
        buf_lock(t);
        drain_locked(t);
        buf_unlock(t);
        g.by_vcpu[vcpu] = NULL;
    }
    pthread_mutex_unlock(&g.lock);
}

static void at_exit(qemu_plugin_id_t id, void *ud)
{
    (void)id;
    (void)ud;
    alloc_close();
    pthread_mutex_lock(&g.lock);
    uint64_t seen = 0, written = 0;
    for (size_t i = 0; i < g.n_all; i++) {
        struct vthread *t = g.all[i];
        buf_lock(t);
        drain_locked(t);
        buf_unlock(t);
        seen += atomic_load(&t->seen);
        written += t->written;
    }
    if (!g.broken) {
        unsigned char rec[4 * HTRS_MAX_REC];
        write_all(rec, end_record(rec, seen, written,
                                  g.mode == M_COMPLETE ? 0 : atomic_load(&g.n_regions)));
    }
    progress_locked(1);
    if (getpid() == g.owner && close(g.fd) != 0)
        say("hugetune-qemu: closing the reference stream failed: %s", strerror(errno));
    g.fd = -1;
    pthread_mutex_unlock(&g.lock);
}

/* ------------------------------------------------------------------ arguments */

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int usage(const char *what, const char *val)
{
    say("hugetune-qemu: bad argument %s%s%s (arguments: out=FILE "
        "[sampling=rate|size|complete] [rate=R | threshold=T] [modulus=P] [max_pages=S] "
        "[max_refs=N] [seed=N] [markers=BASE:SPAN] [progress=FILE] [alloc=FILE]; see "
        "qemu-plugin/README.md)",
        what, val ? "=" : "", val ? val : "");
    return -1;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv)
{
    const char *out = NULL, *alloc = NULL;
    double rate = -1;
    uint64_t threshold = 0;
    int have_threshold = 0;
    g.mode = M_RATE;
    g.modulus = 1u << 24;
    g.max_pages = 16384;
    g.seed = 0;
    if (info && info->system_emulation) {
        say("hugetune-qemu: this plugin is for user-mode emulation (qemu-x86_64), not a system");
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq)
            return usage(argv[i], NULL);
        size_t kl = (size_t)(eq - argv[i]);
        const char *v = eq + 1;
#define KEY(k) (kl == strlen(k) && strncmp(argv[i], k, kl) == 0)
        if (KEY("out")) {
            out = v;
        } else if (KEY("sampling")) {
            if (strcmp(v, "rate") == 0)
                g.mode = M_RATE;
            else if (strcmp(v, "size") == 0)
                g.mode = M_SIZE;
            else if (strcmp(v, "complete") == 0)
                g.mode = M_COMPLETE;
            else
                return usage("sampling", v);
        } else if (KEY("rate")) {
            char *end;
            rate = strtod(v, &end);
            if (*v == 0 || *end || !(rate > 0 && rate <= 1))
                return usage("rate", v);
        } else if (KEY("threshold")) {
            if (parse_u64(v, &threshold) != 0)
                return usage("threshold", v);
            have_threshold = 1;
        } else if (KEY("modulus")) {
            if (parse_u64(v, &g.modulus) != 0 || g.modulus == 0)
                return usage("modulus", v);
        } else if (KEY("max_pages")) {
            if (parse_u64(v, &g.max_pages) != 0 || g.max_pages == 0 ||
                g.max_pages > (1ull << 30))
                return usage("max_pages", v);
        } else if (KEY("max_refs")) {
            if (parse_u64(v, &g.max_refs) != 0 || g.max_refs == 0)
                return usage("max_refs", v);
        } else if (KEY("seed")) {
            if (parse_u64(v, &g.seed) != 0)
                return usage("seed", v);
        } else if (KEY("markers")) {
            const char *c = strchr(v, ':');
            char base[32];
            if (!c || (size_t)(c - v) >= sizeof base)
                return usage("markers", v);
            memcpy(base, v, (size_t)(c - v));
            base[c - v] = 0;
            if (parse_u64(base, &g.mbase) != 0 || parse_u64(c + 1, &g.mspan) != 0 ||
                g.mbase + g.mspan < g.mbase)
                return usage("markers", v);
        } else if (KEY("alloc")) {
            if (strlen(v) == 0)
                return usage("alloc", v);
            alloc = v;
        } else if (KEY("progress")) {
            if (strlen(v) == 0 || strlen(v) > 4000)
                return usage("progress", v);
            g.progress = strdup(v);
        } else {
            return usage(argv[i], NULL);
        }
#undef KEY
    }
    if (!out || !*out)
        return usage("out", NULL);
    if (g.max_refs && g.mode != M_SIZE)
        return usage("max_refs without sampling=size", NULL);
    if (rate > 0 && have_threshold)
        return usage("rate and threshold", NULL);
    /* With the runtime library in the guest (markers=) its log is the record. */
    if (alloc && g.mspan)
        return usage("alloc and markers", NULL);
    if (alloc) {
        g.mbase = ALLOC_MARKERS;
        g.mspan = ALLOC_MARKER_SPAN;
    }
    if (g.mode == M_COMPLETE) {
        threshold = g.modulus;
    } else if (rate > 0) {
        double t = rate * (double)g.modulus + 0.5;
        threshold = t < 1 ? 1 : (uint64_t)t;
        if (threshold > g.modulus)
            threshold = g.modulus;
    } else if (!have_threshold) {
        /* Fixed-rate: R = 1/1024 by default; fixed-size starts with every page. */
        threshold = g.mode == M_SIZE ? g.modulus : (g.modulus >> 10 ? g.modulus >> 10 : 1);
    }
    if (threshold == 0 || threshold > g.modulus)
        return usage("threshold", "out of (0, modulus]");
    atomic_store(&g.threshold, threshold);
    g.modmask = (g.modulus & (g.modulus - 1)) == 0 ? g.modulus - 1 : 0;

    if (g.mode != M_COMPLETE) {
        uint64_t cap = 1024;
        if (g.mode == M_SIZE)
            while (cap < 2 * (g.max_pages + 1))
                cap *= 2;
        if (set_init(&g.set, cap, g.mode == M_SIZE) != 0) {
            say("hugetune-qemu: out of memory for the set of sampled pages");
            return -1;
        }
        /* 8 MiB of address space; only the words of referenced regions become
         * resident. */
        g.regions = calloc(REGION_BITS / 64, sizeof *g.regions);
        if (!g.regions) {
            say("hugetune-qemu: out of memory for the set of referenced regions");
            return -1;
        }
    }

    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        say("hugetune-qemu: cannot create %s: %s", out, strerror(errno));
        return -1;
    }
    /* Out of the guest's usual descriptors, so that its own opens and dups leave it be. */
    g.fd = fcntl(fd, F_DUPFD_CLOEXEC, FD_MIN);
    if (g.fd < 0)
        g.fd = fd;
    else
        close(fd);
    g.owner = getpid();
    clock_gettime(CLOCK_MONOTONIC, &g.last_progress);
    if (alloc && alloc_open(alloc) != 0)
        return -1;

    char json[1024];
    const char *samp = g.mode == M_COMPLETE ? "complete"
                       : g.mode == M_RATE   ? "spatial-rate"
                                            : "spatial-size";
    int n = snprintf(json, sizeof json, "{\"source\":\"qemu\",\"sampling\":\"%s\"", samp);
    if (g.mode != M_COMPLETE)
        n += snprintf(json + n, sizeof json - (size_t)n,
                      ",\"page_shift\":%d,\"region_shift\":%d,\"hash\":\"fmix64\",\"seed\":%" PRIu64
                      ",\"page_seed\":%" PRIu64 ",\"modulus\":%" PRIu64 ",\"threshold\":%" PRIu64,
                      PAGE_SHIFT, REGION_SHIFT, g.seed, g.seed ^ PAGE_SALT, g.modulus, threshold);
    if (g.mode == M_SIZE)
        n += snprintf(json + n, sizeof json - (size_t)n, ",\"max_pages\":%" PRIu64, g.max_pages);
    if (g.max_refs)
        n += snprintf(json + n, sizeof json - (size_t)n, ",\"max_refs\":%" PRIu64, g.max_refs);
    if (g.mspan)
        n += snprintf(json + n, sizeof json - (size_t)n,
                      ",\"marker_base\":%" PRIu64 ",\"marker_span\":%" PRIu64, g.mbase, g.mspan);
    if (alloc)
        n += snprintf(json + n, sizeof json - (size_t)n, ",\"alloc\":\"syscalls\"");
    snprintf(json + n, sizeof json - (size_t)n, "}");
    unsigned char head[2048];
    size_t hl = htrs_header(head, sizeof head, json);
    write_all(head, hl);
    if (g.broken)
        return -1;

    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    if (alloc) {
        qemu_plugin_register_vcpu_syscall_cb(id, vcpu_syscall);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, vcpu_syscall_ret);
    }
    return 0;
}
