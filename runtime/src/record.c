/* record.c - record mode: the binary allocation log, version 2
 * (docs/formats.md §2). The hot path (clock, encoding, append) is in rec.h.
 *
 * Why this shape:
 *  - Each thread appends delta-encoded events (5-10 bytes for malloc/free) to
 *    its own buffer without locks or atomic read-modify-writes. A full buffer
 *    is written as one self-contained chunk (header + events) with pwrite at
 *    an offset reserved by a fetch-add on the file size, so chunks of
 *    different threads never interleave and need no lock.
 *  - Event times are TSC ticks when the TSC is invariant (rdtsc costs ~10 ns,
 *    clock_gettime ~27 ns here), converted to CLOCK_MONOTONIC by the reader
 *    from calibration pairs in the header and in every chunk. Without markers
 *    there is no global sequence number: a global atomic counter bounced
 *    between cores costs 13 ns per event with two threads; the reader orders
 *    events by time (per-thread order is the order in the chunk). With
 *    markers (reference traces) the global seq is kept, as the trace needs it.
 *  - A thread-local depth counter detects re-entry (a signal handler making a
 *    hooked call while its thread appends): that event is written directly as
 *    a one-event chunk. A per-slot lock (taken once per chunk, not per event)
 *    lets the exit and exec flushers write out live threads' buffers; what
 *    they wrote is marked so that the owner's next chunk says how many of its
 *    leading events are already in the file ("skip").
 *  - Calls made before the library is initialized go to a static buffer in
 *    .bss and are copied into the log when it opens (pre-init events).
 *  - All of the library's own memory is announced with OWN_REGION: the slot
 *    table, the arena (scratch + module cache + thread buffers), the marker
 *    area, the library's own loaded segments and each thread's TLS block. */
#include "ht.h"
#include "rec.h"

#include "fmt.h"
#include "proc.h"
#include "sys.h"

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

_Atomic uint64_t ht_seq;
const volatile unsigned char *ht_marker_base;
int ht_clock_tsc;
int ht_rec_logging;
int ht_rec_with_seq;

#define SCRATCH_CAP (4u << 20)    /* /proc/self/maps text, MODULE chunk */
#define MODCACHE_CAP (256u << 10) /* module list */
#define LOG_FD_MIN 512            /* keep the log fd out of the program's way */
#define HEADER_SIZE 128u
#define LOG_VERSION 2u
#define HF_SEQ 1u /* header flags */
#define HF_TSC 2u
#define HOFF_EXIT_CAL 96 /* offset of the exit calibration pair in the header */

static int g_fd = -1;
static _Atomic uint64_t g_off;     /* file size reserved so far */
static _Atomic int g_final;        /* exit flush done: appends go direct */
static _Atomic uint64_t g_records; /* events written (skipped duplicates not counted) */
static _Atomic int g_write_error;
static char g_log_path[HT_PATH_MAX];

static unsigned char *g_arena;
static size_t g_arena_len;
static char *g_scratch;
static unsigned char *g_modcache;
static size_t g_modcache_len;
static unsigned char *g_bufs;
static void *g_marker_map;
static pthread_mutex_t g_blob_lock = PTHREAD_MUTEX_INITIALIZER; /* scratch + modcache */

/* The library's own loaded segments (found while building the module list). */
#define OWN_SEGS_MAX 8
static uint64_t g_own_seg[OWN_SEGS_MAX][2];
static int g_own_segs;

static const unsigned char g_zeros[8];

__attribute__((noinline)) void ht_marker_nonzero(void) { __asm__ volatile("" ::: "memory"); }

static uint64_t round8(uint64_t n) { return (n + 7) & ~7ull; }

static int cur_tid(void)
{
    if (ht_tls.tid == 0)
        ht_tls.tid = ht_sys_gettid();
    return ht_tls.tid;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* ---- clock ---- */

static int tsc_invariant(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
    if (a < 0x80000007u)
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
    return (d >> 8) & 1; /* EDX bit 8: invariant TSC */
#else
    return 0;
#endif
}

void ht_clock_setup(void)
{
    const char *v = ht_getenv("HUGETUNE_CLOCK");
    if (v && strcmp(v, "monotonic") == 0)
        ht_clock_tsc = 0;
    else
        ht_clock_tsc = tsc_invariant();
}

/* A (clock, CLOCK_MONOTONIC ns) pair; the clock read is the midpoint of two
 * reads around the clock_gettime. */
static void cal_pair(uint64_t *t, uint64_t *ns)
{
    if (!ht_clock_tsc) {
        *ns = *t = ht_mono_ns();
        return;
    }
    uint64_t a = ht_rdtsc();
    *ns = ht_mono_ns();
    uint64_t b = ht_rdtsc();
    *t = a + (b - a) / 2;
}

/* ---- file writing ---- */

static void write_at(uint64_t off, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        long r = ht_sys_pwrite(g_fd, p, len, off);
        if (r == -EINTR)
            continue;
        if (r <= 0) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&g_write_error, &expect, 1)) {
                char eb[24];
                ht_stats_error("log write failed: ", r == 0 ? "short write" : ht_errno_name((int)-r, eb));
            }
            return;
        }
        p += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
}

static uint64_t reserve(uint64_t n) { return atomic_fetch_add_explicit(&g_off, n, memory_order_relaxed); }

/* Chunk header (formats.md §2.2) at h. */
static void chunk_header(unsigned char *h, int tid, uint32_t bytes, uint32_t events, uint32_t skip)
{
    uint64_t t, ns;
    cal_pair(&t, &ns);
    put32(h, HT_CHUNK_TAG);
    put32(h + 4, (uint32_t)tid);
    put32(h + 8, bytes);
    put32(h + 12, events);
    put32(h + 16, skip);
    put32(h + 20, 0);
    put64(h + 24, t);
    put64(h + 32, ns);
}

/* One event as its own chunk, with an optional payload (blobs). */
static void write_direct(int tid, unsigned kind, unsigned flags, uint64_t seq, uint64_t t,
                         uint64_t addr, uint64_t size, uint64_t arg, uint64_t arg2, uint64_t caller,
                         const void *payload, size_t n)
{
    unsigned char b[HT_CHUNK_HDR + HT_EV_MAX];
    struct ht_enc e;
    if (g_fd < 0)
        return;
    memset(&e, 0, sizeof e);
    unsigned char *end = ht_enc_event(b + HT_CHUNK_HDR, &e, kind, flags, ht_rec_with_seq, seq, t,
                                      addr, size, arg, arg2, caller);
    size_t evlen = (size_t)(end - (b + HT_CHUNK_HDR));
    uint64_t bytes = evlen + n;
    uint64_t total = HT_CHUNK_HDR + round8(bytes);
    chunk_header(b, tid, (uint32_t)bytes, 1, 0);
    uint64_t off = reserve(total);
    write_at(off, b, HT_CHUNK_HDR + evlen);
    if (n)
        write_at(off + HT_CHUNK_HDR + evlen, payload, n);
    if (round8(bytes) != bytes)
        write_at(off + HT_CHUNK_HDR + bytes, g_zeros, round8(bytes) - bytes);
    atomic_fetch_add_explicit(&g_records, 1, memory_order_relaxed);
}

/* ---- slots: chunk writing ---- */

static int slot_lock(struct ht_slot *s)
{
    int spins = 0;
    while (atomic_exchange_explicit(&s->lock, 1, memory_order_acquire) != 0) {
        /* Held by a flusher writing at most one buffer; a bounded wait so that
         * a flusher running in a signal handler on the owner thread (exit()
         * from a handler) cannot hang. */
        if (++spins > 20000)
            return 0;
        sched_yield();
    }
    return 1;
}

static void slot_unlock(struct ht_slot *s) { atomic_store_explicit(&s->lock, 0, memory_order_release); }

static void slot_reset(struct ht_slot *s)
{
    memset(&s->enc, 0, sizeof s->enc);
    s->flushed_ev = 0;
    atomic_store_explicit(&s->fill, HT_CHUNK_HDR, memory_order_release);
}

/* The owner writes its chunk and starts a new one. Caller: the owner thread,
 * with ht_tls.depth set (a signal handler's events go direct meanwhile). */
static int own_flush(struct ht_slot *s)
{
    if (!slot_lock(s))
        return 0;
    uint64_t fill = atomic_load_explicit(&s->fill, memory_order_relaxed);
    uint32_t pos = (uint32_t)fill, ev = (uint32_t)(fill >> 32);
    if (ev > s->flushed_ev && g_fd >= 0) {
        uint32_t bytes = pos - HT_CHUNK_HDR;
        chunk_header(s->buf, s->tid, bytes, ev, s->flushed_ev);
        uint32_t padded = (uint32_t)round8(pos);
        memset(s->buf + pos, 0, padded - pos);
        write_at(reserve(padded), s->buf, padded);
        atomic_fetch_add_explicit(&g_records, ev - s->flushed_ev, memory_order_relaxed);
    }
    slot_reset(s);
    slot_unlock(s);
    return 1;
}

/* Another thread (exit, exec) writes what a live slot holds so far, without
 * disturbing the owner, which may be appending concurrently. */
static void foreign_flush(struct ht_slot *s)
{
    if (!slot_lock(s))
        return;
    uint64_t fill = atomic_load_explicit(&s->fill, memory_order_acquire);
    uint32_t pos = (uint32_t)fill, ev = (uint32_t)(fill >> 32);
    if (ev > s->flushed_ev && g_fd >= 0) {
        uint32_t bytes = pos - HT_CHUNK_HDR;
        chunk_header(s->buf, s->tid, bytes, ev, s->flushed_ev);
        uint64_t padded = round8(pos);
        uint64_t off = reserve(padded);
        write_at(off, s->buf, pos);
        if (padded != pos) /* the owner may be writing past pos: pad from zeros */
            write_at(off + pos, g_zeros, padded - pos);
        atomic_fetch_add_explicit(&g_records, ev - s->flushed_ev, memory_order_relaxed);
        s->flushed_ev = ev;
    }
    slot_unlock(s);
}

static void flush_all_foreign(void)
{
    if (!ht_slots)
        return;
    for (unsigned i = 0; i < HT_MAX_SLOTS; i++) {
        struct ht_slot *s = &ht_slots[i];
        if (atomic_load_explicit(&s->in_use, memory_order_acquire) && s->buf)
            foreign_flush(s);
    }
}

void ht_rec_put_slow(unsigned kind, unsigned flags, uint64_t seq, uint64_t t, uint64_t addr,
                     uint64_t size, uint64_t arg, uint64_t arg2, uint64_t caller)
{
    if (g_fd < 0)
        return;
    if (t == HT_NOW)
        t = ht_now();
    struct ht_slot *s = ht_tls.slot;
    if (s && s->buf && ht_tls.depth == 0) {
        ht_tls.depth = 1;
        atomic_signal_fence(memory_order_seq_cst);
        if (own_flush(s) && !atomic_load_explicit(&g_final, memory_order_relaxed) &&
            atomic_load_explicit(&s->limit, memory_order_relaxed) != 0) {
            /* Buffer was full: append to the fresh chunk. */
            uint64_t fill = atomic_load_explicit(&s->fill, memory_order_relaxed);
            unsigned char *p = s->buf + (uint32_t)fill;
            unsigned char *end = ht_enc_event(p, &s->enc, kind, flags, ht_rec_with_seq, seq, t, addr,
                                              size, arg, arg2, caller);
            atomic_store_explicit(&s->fill, fill + (1ull << 32) + (uint64_t)(end - p),
                                  memory_order_release);
            atomic_signal_fence(memory_order_seq_cst);
            ht_tls.depth = 0;
            return;
        }
        atomic_signal_fence(memory_order_seq_cst);
        ht_tls.depth = 0;
    }
    write_direct(cur_tid(), kind, flags, seq, t, addr, size, arg, arg2, caller, NULL, 0);
}

/* ---- pre-init events ---- */

#define PRE_CAP 4096u
#define PRE_CLOSED 0x40000000u

struct pre_ev {
    _Atomic uint32_t ready;
    uint8_t kind;
    uint8_t pad[3];
    int tid;
    uint32_t pad2;
    uint64_t tsc, ns, addr, size, arg, arg2, caller;
};
static struct pre_ev g_pre[PRE_CAP];
static _Atomic uint32_t g_pre_next; /* >= PRE_CLOSED: closed */
static uint32_t g_pre_drained;
static _Atomic uint64_t g_pre_lost;

int ht_preinit_event(unsigned kind, uint64_t t, uint64_t addr, uint64_t size, uint64_t arg,
                     uint64_t arg2, const void *caller)
{
    (void)t; /* the clock may not be chosen yet: read both below */
    uint32_t i = atomic_fetch_add_explicit(&g_pre_next, 1, memory_order_acq_rel);
    if (i >= PRE_CLOSED)
        return 0;
    if (i >= PRE_CAP) {
        atomic_fetch_add_explicit(&g_pre_lost, 1, memory_order_relaxed);
        return 1;
    }
    struct pre_ev *e = &g_pre[i];
    e->kind = (uint8_t)kind;
    e->tid = cur_tid();
    e->tsc = ht_rdtsc();
    e->ns = ht_mono_ns();
    e->addr = addr;
    e->size = size;
    e->arg = arg;
    e->arg2 = arg2;
    e->caller = (uint64_t)(uintptr_t)caller;
    atomic_store_explicit(&e->ready, 1, memory_order_release);
    return 1;
}

static int cat_of(uint64_t n) { return n >= ht_cfg.threshold ? HT_CAT_HEAP_LARGE : HT_CAT_HEAP_SMALL; }

/* Summary counters for a pre-init call, as the hooks count them. */
static void pre_count(const struct pre_ev *e)
{
    switch (e->kind) {
    case HT_K_MALLOC:
    case HT_K_ALIGNED_ALLOC:
    case HT_K_MEMALIGN:
    case HT_K_VALLOC:
    case HT_K_PVALLOC:
        ht_count_alloc(cat_of(e->size), e->size);
        break;
    case HT_K_CALLOC:
        if (e->size != UINT64_MAX)
            ht_count_alloc(cat_of(e->size), e->size);
        break;
    case HT_K_POSIX_MEMALIGN:
        if (e->arg2 != 22)
            ht_count_alloc(cat_of(e->size), e->size);
        break;
    case HT_K_REALLOC:
    case HT_K_REALLOCARRAY:
        if (e->size != UINT64_MAX && (e->arg == 0 || e->size != 0))
            ht_count_alloc(cat_of(e->size), e->size);
        break;
    default:
        break;
    }
}

/* Copies pre-init events [g_pre_drained, upto) into the log. */
static void pre_drain(uint32_t upto)
{
    if (upto > PRE_CAP)
        upto = PRE_CAP;
    for (uint32_t i = g_pre_drained; i < upto; i++) {
        struct pre_ev *e = &g_pre[i];
        int spins = 0;
        /* A writer still filling its entry: another thread (a few
         * instructions away), or the thread we interrupted if this runs in a
         * signal handler (then it never completes: give up). */
        while (!atomic_load_explicit(&e->ready, memory_order_acquire) && ++spins < 100000)
            sched_yield();
        if (!atomic_load_explicit(&e->ready, memory_order_acquire)) {
            atomic_fetch_add_explicit(&g_pre_lost, 1, memory_order_relaxed);
            continue;
        }
        uint64_t seq = ht_rec_with_seq ? ht_seq_next() : 0;
        write_direct(e->tid, e->kind, HT_EVF_PREINIT, seq, ht_clock_tsc ? e->tsc : e->ns, e->addr,
                     e->size, e->arg, e->arg2, e->caller, NULL, 0);
        pre_count(e);
    }
    if (upto > g_pre_drained)
        g_pre_drained = upto;
}

/* Closes the pre-init buffer: a writer that arrives later records normally. */
static void pre_close(void)
{
    uint32_t n = atomic_exchange_explicit(&g_pre_next, PRE_CLOSED, memory_order_acq_rel);
    if (n >= PRE_CLOSED)
        return;
    if (ht_cfg.mode == HT_RECORD && g_fd >= 0)
        pre_drain(n);
    uint64_t lost = atomic_load(&g_pre_lost);
    if (lost && ht_cfg.mode == HT_RECORD) {
        char nb[24];
        ht_fmt_u64(nb, lost);
        ht_stats_error("calls before initialization not recorded: ", nb);
    }
}

/* ---- header, log file ---- */

static void write_header(void)
{
    unsigned char h[HEADER_SIZE];
    uint64_t t, ns;
    memset(h, 0, sizeof h);
    memcpy(h, "HTALLOC", 8);
    put32(h + 8, LOG_VERSION);
    put32(h + 12, HEADER_SIZE);
    put32(h + 16, (uint32_t)ht_cfg.pid);
    put32(h + 20, (uint32_t)ht_sys_getppid());
    cal_pair(&t, &ns);
    put64(h + 24, ns);
    put64(h + 32, (uint64_t)(uintptr_t)ht_marker_base);
    put64(h + 40, ht_marker_base ? HT_MARKER_SPAN : 0);
    put64(h + 48, ht_cfg.threshold);
    put32(h + 56, (ht_rec_with_seq ? HF_SEQ : 0) | (ht_clock_tsc ? HF_TSC : 0));
    put32(h + 60, ht_cfg.exec_gen);
    put64(h + 64, t);
    put64(h + 72, ns);
    write_at(0, h, sizeof h);
    atomic_store_explicit(&g_off, sizeof h, memory_order_relaxed);
}

/* The exit (or exec) calibration pair, rewritten in place. */
static void write_exit_cal(void)
{
    unsigned char b[16];
    uint64_t t, ns;
    if (g_fd < 0)
        return;
    cal_pair(&t, &ns);
    put64(b, t);
    put64(b + 8, ns);
    write_at(HOFF_EXIT_CAL, b, sizeof b);
}

static int open_log(void)
{
    char eb[24];
    if (ht_output_path(ht_cfg.log_tmpl, g_log_path, sizeof g_log_path) != 0) {
        ht_stats_error("HUGETUNE_LOG path too long", "");
        g_log_path[0] = 0;
        return -1;
    }
    /* A fresh file renamed into place at once: an old log is replaced, a
     * planted symlink at the name is replaced too, never written through. */
    char tmp[sizeof g_log_path + 48];
    long fd = ht_create_beside(g_log_path, tmp, sizeof tmp);
    if (fd >= 0 && HT_SYSCALL(SYS_renameat, -100, tmp, -100, g_log_path) != 0) {
        HT_SYSCALL(SYS_unlinkat, -100, tmp, 0);
        ht_sys_close((int)fd);
        fd = -EPERM;
    }
    if (fd < 0) {
        ht_stats_error("cannot open log: ", ht_errno_name((int)-fd, eb));
        ht_verbose("cannot open log ", g_log_path);
        return -1;
    }
    /* Programs close or dup2 over low fds; a high fd survives more of that. */
    long hi = ht_sys_fcntl((int)fd, F_DUPFD_CLOEXEC, LOG_FD_MIN);
    if (hi >= 0) {
        ht_sys_close((int)fd);
        fd = hi;
    }
    g_fd = (int)fd;
    atomic_store(&g_write_error, 0);
    write_header();
    ht_rec_logging = 1;
    return 0;
}

static void own_region(const void *p, uint64_t len)
{
    if (p && len)
        write_direct(cur_tid(), HT_K_OWN_REGION, 0, ht_rec_with_seq ? ht_seq_next() : 0, ht_now(),
                     (uint64_t)(uintptr_t)p, len, 0, 0, 0, NULL, 0);
}

static void own_regions(void)
{
    own_region(ht_slots, ht_slots_bytes);
    own_region(g_arena, g_arena_len);
    own_region(g_marker_map, g_marker_map ? HT_MARKER_SPAN : 0);
    for (int i = 0; i < g_own_segs; i++)
        own_region((const void *)(uintptr_t)g_own_seg[i][0], g_own_seg[i][1]);
}

/* "<pid>:<gen>" from the exec hook of the image that exec'd us (same pid). */
static unsigned parse_exec_gen(void)
{
    const char *v = ht_getenv("HUGETUNE_EXEC_GEN");
    if (!v)
        return 0;
    const char *c = strchr(v, ':');
    uint64_t pid, gen;
    if (!c || ht_parse_u64(v, (size_t)(c - v), 10, &pid) != 0 ||
        ht_parse_u64(c + 1, strlen(c + 1), 10, &gen) != 0)
        return 0;
    return pid == (uint64_t)ht_cfg.pid && gen < 1000000 ? (unsigned)gen : 0;
}

unsigned ht_rec_parse_exec_gen(void) { return parse_exec_gen(); }

int ht_rec_setup(void)
{
    ht_clock_setup();
    if (ht_cfg.markers) {
        /* HUGETUNE_MARKER_ADDR: the area at a fixed address, so that a reference
         * source that cannot read the log while the program runs (the QEMU plugin)
         * knows it in advance. MAP_FIXED_NOREPLACE never replaces a mapping; where it
         * is only a hint (qemu-user 7.2 passes it on as one) the result is checked. */
        uint64_t want = 0;
        const char *mv = ht_getenv("HUGETUNE_MARKER_ADDR");
        if (mv && *mv) {
            const char *d = mv;
            int base = 10;
            if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X')) {
                d += 2;
                base = 16;
            }
            if (ht_parse_u64(d, strlen(d), base, &want) != 0 || want == 0 ||
                (want & (HT_MARKER_SPAN - 1)) != 0) {
                ht_stats_error("bad HUGETUNE_MARKER_ADDR (markers off): ", mv);
                want = 0;
                ht_cfg.markers = 0;
            }
        }
        long m = !ht_cfg.markers ? -ENOMEM
                 : ht_sys_mmap((void *)(uintptr_t)want, HT_MARKER_SPAN, PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                                   (want ? MAP_FIXED_NOREPLACE : 0),
                               -1, 0);
        if (want && !ht_mmap_failed(m) && (uint64_t)m != want) {
            ht_sys_munmap((void *)m, HT_MARKER_SPAN);
            m = -EEXIST;
        }
        if (want && ht_mmap_failed(m)) {
            ht_stats_error("cannot map the marker area at HUGETUNE_MARKER_ADDR (markers off): ",
                           mv);
        } else if (!ht_mmap_failed(m)) {
            g_marker_map = (void *)m;
            ht_marker_base = (const volatile unsigned char *)m;
            ht_rec_with_seq = 1;
        } else if (ht_cfg.markers) {
            ht_stats_error("cannot map marker area", "");
        }
    }
    if (!ht_cfg.has_log)
        return 0;
    size_t len = SCRATCH_CAP + MODCACHE_CAP + (size_t)HT_MAX_SLOTS * HT_BUF_SIZE;
    long a = ht_sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ht_mmap_failed(a)) {
        ht_stats_error("cannot map record buffers", "");
        return -1;
    }
    g_arena = (unsigned char *)a;
    g_arena_len = len;
    g_scratch = (char *)g_arena;
    g_modcache = g_arena + SCRATCH_CAP;
    g_bufs = g_arena + SCRATCH_CAP + MODCACHE_CAP;
    if (open_log() != 0)
        return -1;
    /* Calls recorded before initialization happened first: lowest seqs. */
    pre_drain(atomic_load_explicit(&g_pre_next, memory_order_acquire));
    own_regions();
    return 0;
}

void ht_rec_setup_done(void) { pre_close(); }

/* ---- threads ---- */

/* The /proc/self/maps line containing sp: [*lo, *hi), and whether it is the
 * main thread's "[stack]". Returns 0 if found. No allocation, async-signal
 * safe (raw syscalls, a small stack buffer). */
static int stack_of(uint64_t sp, uint64_t *lo, uint64_t *hi, int *main_stack, char *scratch,
                    size_t cap)
{
    char small[512];
    struct ht_lines l;
    const char *line;
    size_t n;
    long fd = ht_sys_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    int found = -1;
    if (fd < 0)
        return -1;
    if (!scratch) {
        scratch = small;
        cap = sizeof small;
    }
    ht_lines_init(&l, (int)fd, scratch, cap);
    while (ht_lines_next(&l, &line, &n) == 1) {
        const char *dash = memchr(line, '-', n);
        const char *sp1 = memchr(line, ' ', n);
        uint64_t a, b;
        if (!dash || !sp1 || dash > sp1 || ht_parse_u64(line, (size_t)(dash - line), 16, &a) != 0 ||
            ht_parse_u64(dash + 1, (size_t)(sp1 - dash - 1), 16, &b) != 0)
            continue;
        if (sp < a || sp >= b)
            continue;
        *lo = a;
        *hi = b;
        *main_stack = n >= 7 && memcmp(line + n - 7, "[stack]", 7) == 0;
        found = 0;
        break;
    }
    ht_sys_close((int)fd);
    return found;
}

void ht_rec_thread_start(struct ht_slot *s)
{
    if (ht_cfg.mode != HT_RECORD || g_fd < 0)
        return;
    if (s) {
        s->buf = g_bufs + (size_t)(s - ht_slots) * HT_BUF_SIZE;
        slot_reset(s);
        atomic_store_explicit(&s->limit, HT_BUF_SIZE, memory_order_relaxed);
    }
    uint64_t sp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
    /* The stack first, while the thread's buffer is still empty: it serves as
     * the maps reader's buffer (fewer read calls than a small stack buffer,
     * and no large frame on what may be a small signal stack). */
    uint64_t lo, hi;
    int main_stack;
    size_t room = s ? 4096 - HT_CHUNK_HDR : 0; /* the page the first events go to anyway */
    int have_stack = stack_of(sp, &lo, &hi, &main_stack,
                              s ? (char *)s->buf + HT_CHUNK_HDR : NULL, room) == 0;
    uint64_t seq = ht_rec_with_seq ? ht_seq_next() : 0;
    ht_rec_put(HT_K_THREAD, seq, HT_NOW, sp, 0, 0, 0, NULL);
    /* The thread's TLS block holds the library's per-thread state. */
    seq = ht_rec_with_seq ? ht_seq_next() : 0;
    ht_rec_put(HT_K_OWN_REGION, seq, HT_NOW, (uint64_t)(uintptr_t)&ht_tls, sizeof ht_tls, 0, 0,
               NULL);
    if (have_stack) {
        seq = ht_rec_with_seq ? ht_seq_next() : 0;
        ht_rec_put(HT_K_STACK, seq, HT_NOW, lo, hi - lo, sp, (uint64_t)main_stack, NULL);
    }
}

void ht_rec_thread_flush(struct ht_slot *s)
{
    if (g_fd < 0 || !s->buf)
        return;
    ht_tls.depth++;
    atomic_signal_fence(memory_order_seq_cst);
    own_flush(s);
    atomic_signal_fence(memory_order_seq_cst);
    ht_tls.depth--;
}

/* ---- MODULE events ---- */

/* Module cache entries: u64 bias, u64 segments, u64 payload bytes, payload
 * (padded to 8). The payload is formats.md's MODULE payload. */
struct mod_ctx {
    size_t len;
    int idx;
    int overflow;
};

static int mod_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    struct mod_ctx *c = p;
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (c->idx++ == 0 && name[0] == 0)
        name = ht_cfg.exe_path;
    uint64_t nseg = 0;
    int own = 0;
    uint64_t me = (uint64_t)(uintptr_t)&ht_seq;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        nseg++;
        uint64_t lo = info->dlpi_addr + ph->p_vaddr;
        if (me >= lo && me < lo + ph->p_memsz)
            own = 1;
    }
    if (own) {
        g_own_segs = 0;
        for (int i = 0; i < info->dlpi_phnum && g_own_segs < OWN_SEGS_MAX; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            if (ph->p_type != PT_LOAD)
                continue;
            uint64_t lo = (info->dlpi_addr + ph->p_vaddr) & ~4095ull;
            uint64_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + 4095) & ~4095ull;
            g_own_seg[g_own_segs][0] = lo;
            g_own_seg[g_own_segs][1] = hi - lo;
            g_own_segs++;
        }
    }
    size_t plen = strlen(name) + 1;
    size_t payload = round8(plen) + nseg * 32;
    if (c->len + 24 + payload > MODCACHE_CAP) {
        c->overflow = 1;
        return 0;
    }
    unsigned char *o = g_modcache + c->len;
    put64(o, (uint64_t)info->dlpi_addr);
    put64(o + 8, nseg);
    put64(o + 16, payload);
    o += 24;
    memcpy(o, name, plen);
    memset(o + plen, 0, round8(plen) - plen);
    o += round8(plen);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        put64(o, ph->p_vaddr);
        put64(o + 8, ph->p_memsz);
        put64(o + 16, ph->p_filesz);
        put32(o + 24, ph->p_flags);
        put32(o + 28, 0);
        o += 32;
    }
    c->len += 24 + payload;
    return 0;
}

/* Caller holds g_blob_lock. */
static void modcache_build(void)
{
    struct mod_ctx c = {0, 0, 0};
    dl_iterate_phdr(mod_cb, &c);
    g_modcache_len = c.len;
    if (c.overflow)
        ht_stats_error("too many modules: MODULE events truncated", "");
}

/* Caller holds g_blob_lock: all MODULE events as one chunk, built in scratch. */
static void modcache_emit(void)
{
    size_t pos = 0, out = HT_CHUNK_HDR;
    struct ht_enc e;
    uint32_t n = 0;
    if (g_fd < 0 || g_modcache_len == 0)
        return;
    memset(&e, 0, sizeof e);
    uint64_t t = ht_now();
    unsigned char *b = (unsigned char *)g_scratch;
    while (pos < g_modcache_len && out + HT_EV_MAX + MODCACHE_CAP < SCRATCH_CAP) {
        uint64_t bias, nseg, plen;
        memcpy(&bias, g_modcache + pos, 8);
        memcpy(&nseg, g_modcache + pos + 8, 8);
        memcpy(&plen, g_modcache + pos + 16, 8);
        uint64_t seq = ht_rec_with_seq ? ht_seq_next() : 0;
        unsigned char *end = ht_enc_event(b + out, &e, HT_K_MODULE, 0, ht_rec_with_seq, seq, t, bias,
                                          plen, nseg, 0, 0);
        out = (size_t)(end - b);
        memcpy(b + out, g_modcache + pos + 24, plen);
        out += plen;
        pos += 24 + plen;
        n++;
    }
    size_t padded = round8(out);
    memset(b + out, 0, padded - out);
    chunk_header(b, cur_tid(), (uint32_t)(out - HT_CHUNK_HDR), n, 0);
    write_at(reserve(padded), b, padded);
    atomic_fetch_add_explicit(&g_records, n, memory_order_relaxed);
}

/* Caller holds g_blob_lock. which: 0 = at start, 1 = at exit or exec. */
static void maps_emit(uint64_t which)
{
    if (g_fd < 0)
        return;
    long n = ht_read_file("/proc/self/maps", g_scratch, SCRATCH_CAP);
    if (n < 0) {
        char eb[24];
        ht_stats_error("cannot read /proc/self/maps: ", ht_errno_name((int)-n, eb));
        return;
    }
    if ((size_t)n == SCRATCH_CAP - 1) {
        /* Keep whole lines only. */
        while (n > 0 && g_scratch[n - 1] != '\n')
            n--;
        ht_stats_error("/proc/self/maps larger than 4 MiB: MAPS event truncated", "");
    }
    uint64_t seq = ht_rec_with_seq ? ht_seq_next() : 0;
    write_direct(cur_tid(), HT_K_MAPS, 0, seq, ht_now(), 0, (uint64_t)n, which, 0, 0, g_scratch,
                 (size_t)n);
}

/* MODULE events of every loaded object and a MAPS event (which: 0 start, 1 exit). */
static void snapshot(int which)
{
    /* exec is async-signal-safe: its hook may run in a handler that
     * interrupted a snapshot. Skip rather than deadlock. */
    if (pthread_mutex_trylock(&g_blob_lock) != 0)
        return;
    modcache_build();
    modcache_emit();
    maps_emit((uint64_t)which);
    pthread_mutex_unlock(&g_blob_lock);
}

static void block_signals(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &all, old, 8);
}

static void restore_signals(const sigset_t *old)
{
    HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, 8);
}

void ht_rec_start(void)
{
    if (g_fd < 0)
        return;
    sigset_t old;
    block_signals(&old); /* a handler's calls would pass through (guard) meanwhile */
    snapshot(0);
    for (int i = 0; i < g_own_segs; i++)
        own_region((const void *)(uintptr_t)g_own_seg[i][0], g_own_seg[i][1]);
    restore_signals(&old);
}

void ht_rec_finish(void)
{
    if (g_fd < 0)
        return;
    sigset_t old;
    block_signals(&old);
    pre_close();
    snapshot(1);
    /* From now on appends go direct; then write out every live buffer. */
    atomic_store(&g_final, 1);
    if (ht_slots)
        for (unsigned i = 0; i < HT_MAX_SLOTS; i++)
            atomic_store_explicit(&ht_slots[i].limit, 0, memory_order_relaxed);
    flush_all_foreign();
    write_exit_cal();
    restore_signals(&old);
}

/* ---- fork ---- */

void ht_rec_atfork_prepare(void)
{
    /* Refresh the module list in the parent (normal context) so the child can
     * log it without calling into the loader from the fork handler. */
    pthread_mutex_lock(&g_blob_lock);
    if (g_fd >= 0)
        modcache_build();
}

void ht_rec_atfork_parent(void) { pthread_mutex_unlock(&g_blob_lock); }

void ht_rec_atfork_child(void)
{
    /* One log per process: the parent's unflushed events were dropped with
     * the slots (thread.c); start a fresh log for this pid. */
    atomic_store(&ht_seq, 0);
    atomic_store(&g_final, 0);
    atomic_store(&g_records, 0);
    atomic_store(&g_pre_next, PRE_CLOSED);
    ht_cfg.exec_gen = 0; /* a new pid: its first image */
    if (g_fd >= 0) {
        ht_sys_close(g_fd);
        g_fd = -1;
        ht_rec_logging = 0;
        if (open_log() == 0) {
            own_regions();
            modcache_emit();
            maps_emit(0);
        }
    }
    pthread_mutex_unlock(&g_blob_lock);
}

/* ---- exec (hooks.c) ---- */

/* Before an exec: everything the log and summary would get at exit (an exec
 * that succeeds runs no destructors), then the EXEC event. */
void ht_rec_exec_before(const char *path, unsigned new_gen, const void *caller)
{
    sigset_t old;
    block_signals(&old);
    ht_tls.guard++;
    if (g_fd >= 0) {
        snapshot(1);
        size_t n = strlen(path) + 1;
        uint64_t seq = 0;
        if (ht_rec_with_seq) {
            seq = ht_seq_next();
            ht_marker(seq);
        }
        write_direct(cur_tid(), HT_K_EXEC, 0, seq, ht_now(), 0, n, new_gen, 0,
                     (uint64_t)(uintptr_t)caller, path, n);
        flush_all_foreign();
        write_exit_cal();
    }
    ht_summary_write();
    ht_tls.guard--;
    restore_signals(&old);
}

/* The exec returned: it failed with err. */
void ht_rec_exec_failed(const char *path, unsigned new_gen, int err, const void *caller)
{
    if (g_fd < 0)
        return;
    size_t n = strlen(path) + 1;
    uint64_t seq = 0;
    if (ht_rec_with_seq) {
        seq = ht_seq_next();
        ht_marker(seq);
    }
    write_direct(cur_tid(), HT_K_EXEC, 0, seq, ht_now(), 0, n, new_gen, (uint64_t)err,
                 (uint64_t)(uintptr_t)caller, path, n);
}

/* An environment for the exec'd image: envp with HUGETUNE_EXEC_GEN=<pid>:<gen>
 * (replaced or added), in a fresh mapping (*map, *maplen; free with munmap).
 * Returns envp itself when it does not select record mode or on failure. */
char *const *ht_rec_exec_env(char *const envp[], unsigned gen, void **map, size_t *maplen)
{
    static const char key[] = "HUGETUNE_EXEC_GEN=";
    size_t n = 0;
    int record = 0;
    *map = NULL;
    *maplen = 0;
    if (!envp)
        return envp;
    for (; envp[n]; n++)
        if (strcmp(envp[n], "HUGETUNE_MODE=record") == 0)
            record = 1;
    if (!record)
        return envp;
    size_t len = (n + 2) * sizeof(char *) + 64;
    long m = ht_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ht_mmap_failed(m))
        return envp;
    char **out = (char **)m;
    char *var = (char *)m + (n + 2) * sizeof(char *);
    struct ht_buf b;
    hb_init(&b, var, 64);
    hb_puts(&b, key);
    hb_i64(&b, ht_cfg.pid);
    hb_putc(&b, ':');
    hb_u64(&b, gen);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], key, sizeof key - 1) != 0)
            out[k++] = envp[i];
    out[k++] = var;
    out[k] = NULL;
    *map = (void *)m;
    *maplen = len;
    return out;
}

const char *ht_rec_log_path(void) { return g_fd >= 0 ? g_log_path : NULL; }
uint64_t ht_rec_records(void) { return atomic_load(&g_records); }
