/* record.c - record mode: the binary allocation log (docs/formats.md section 2).
 *
 * Why this shape:
 *  - Hooked calls append 64-byte records to the calling thread's buffer without
 *    locks; a full buffer is written with pwrite at an offset reserved by an
 *    atomic fetch-add on the file size, so flushes of different threads never
 *    interleave and need no lock either.
 *  - A per-slot `busy` flag detects re-entry (a signal handler allocating while
 *    its thread is appending) and the exit flusher: the re-entrant record is
 *    written directly instead of corrupting the buffer.
 *  - Blobs (MODULE, MAPS) and OWN_REGION are written directly; they come from
 *    the constructor/destructor/fork handler, not from hot paths.
 *  - All of the library's own memory is in three mappings announced with
 *    OWN_REGION: the slot table, the arena (scratch + module cache + thread
 *    buffers) and the marker area. */
#include "ht.h"

#include "fmt.h"
#include "proc.h"
#include "sys.h"

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

_Atomic uint64_t ht_seq;
const volatile unsigned char *ht_marker_base;

#define SCRATCH_CAP (4u << 20)   /* /proc/self/maps text */
#define MODCACHE_CAP (256u << 10) /* serialized MODULE blobs */
#define LOG_FD_MIN 512           /* keep the log fd out of the program's way */

static int g_fd = -1;
static _Atomic uint64_t g_off;     /* file size reserved so far */
static _Atomic int g_final;        /* exit flush done: append goes direct */
static _Atomic uint64_t g_records; /* records written (incl. blobs) */
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

__attribute__((noinline)) void ht_marker_nonzero(void) { __asm__ volatile("" ::: "memory"); }

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t round8(uint64_t n) { return (n + 7) & ~7ull; }

static int cur_tid(void)
{
    if (ht_tls.tid == 0)
        ht_tls.tid = ht_sys_gettid();
    return ht_tls.tid;
}

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

static void write_direct(const struct ht_rec *r)
{
    if (g_fd < 0)
        return;
    uint64_t off = atomic_fetch_add_explicit(&g_off, sizeof *r, memory_order_relaxed);
    write_at(off, r, sizeof *r);
    atomic_fetch_add_explicit(&g_records, 1, memory_order_relaxed);
}

/* Caller holds s->busy. */
static void flush_locked(struct ht_slot *s)
{
    if (s->len == 0 || g_fd < 0)
        return;
    uint64_t off = atomic_fetch_add_explicit(&g_off, s->len, memory_order_relaxed);
    write_at(off, s->buf, s->len);
    atomic_fetch_add_explicit(&g_records, s->len / sizeof(struct ht_rec), memory_order_relaxed);
    s->len = 0;
}

static void put(const struct ht_rec *r)
{
    if (g_fd < 0)
        return;
    struct ht_slot *s = ht_tls.slot;
    if (!s || !s->buf) {
        write_direct(r);
        return;
    }
    if (atomic_exchange_explicit(&s->busy, 1, memory_order_acquire) != 0) {
        /* Re-entered (signal handler) or the exit flusher owns the buffer. */
        write_direct(r);
        return;
    }
    if (atomic_load_explicit(&g_final, memory_order_relaxed)) {
        atomic_store_explicit(&s->busy, 0, memory_order_release);
        write_direct(r);
        return;
    }
    memcpy(s->buf + s->len, r, sizeof *r);
    s->len += sizeof *r;
    if (s->len >= HT_BUF_SIZE)
        flush_locked(s);
    atomic_store_explicit(&s->busy, 0, memory_order_release);
}

void ht_rec_event(uint16_t kind, uint64_t seq, uint64_t addr, uint64_t size,
                  uint64_t arg, uint64_t arg2, const void *caller)
{
    struct ht_rec r;
    if (g_fd < 0)
        return;
    r.kind = kind;
    r.flags = 0;
    r.tid = (uint32_t)cur_tid();
    r.seq = seq;
    r.time = now_ns();
    r.addr = addr;
    r.size = size;
    r.arg = arg;
    r.arg2 = arg2;
    r.caller = (uint64_t)(uintptr_t)caller;
    put(&r);
}

/* Header record + payload + zero padding in one reserved range. */
static void write_blob(uint16_t kind, uint64_t addr, uint64_t size_field, uint64_t arg,
                       const void *payload, size_t n)
{
    static const char zeros[8];
    struct ht_rec r;
    if (g_fd < 0)
        return;
    r.kind = kind;
    r.flags = 0;
    r.tid = (uint32_t)cur_tid();
    r.seq = ht_seq_next();
    r.time = now_ns();
    r.addr = addr;
    r.size = size_field;
    r.arg = arg;
    r.arg2 = 0;
    r.caller = 0;
    uint64_t total = sizeof r + round8(n);
    uint64_t off = atomic_fetch_add_explicit(&g_off, total, memory_order_relaxed);
    write_at(off, &r, sizeof r);
    if (n) {
        write_at(off + sizeof r, payload, n);
        if (round8(n) != n)
            write_at(off + sizeof r + n, zeros, round8(n) - n);
    }
    atomic_fetch_add_explicit(&g_records, 1, memory_order_relaxed);
}

static void own_region(const void *p, size_t len)
{
    if (p)
        write_blob(HT_K_OWN_REGION, (uint64_t)(uintptr_t)p, len, 0, NULL, 0);
}

void ht_rec_own_regions(void)
{
    own_region(ht_slots, ht_slots_bytes);
    own_region(g_arena, g_arena_len);
    own_region(g_marker_map, g_marker_map ? HT_MARKER_SPAN : 0);
}

static void write_header(void)
{
    unsigned char h[64];
    memset(h, 0, sizeof h);
    memcpy(h, "HTALLOC", 8);
    uint32_t v32;
    uint64_t v64;
    v32 = 1;
    memcpy(h + 8, &v32, 4);
    v32 = 64;
    memcpy(h + 12, &v32, 4);
    v32 = (uint32_t)ht_cfg.pid;
    memcpy(h + 16, &v32, 4);
    v32 = (uint32_t)ht_sys_getppid();
    memcpy(h + 20, &v32, 4);
    v64 = now_ns();
    memcpy(h + 24, &v64, 8);
    v64 = (uint64_t)(uintptr_t)ht_marker_base;
    memcpy(h + 32, &v64, 8);
    v64 = ht_marker_base ? HT_MARKER_SPAN : 0;
    memcpy(h + 40, &v64, 8);
    v64 = ht_cfg.threshold;
    memcpy(h + 48, &v64, 8);
    write_at(0, h, sizeof h);
    atomic_store_explicit(&g_off, sizeof h, memory_order_relaxed);
}

static int open_log(void)
{
    char eb[24];
    if (ht_output_path(ht_cfg.log_tmpl, g_log_path, sizeof g_log_path) != 0) {
        ht_stats_error("HUGETUNE_LOG path too long", "");
        g_log_path[0] = 0;
        return -1;
    }
    long fd = ht_sys_open(g_log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
    return 0;
}

int ht_rec_setup(void)
{
    if (ht_cfg.markers) {
        long m = ht_sys_mmap(NULL, HT_MARKER_SPAN, PROT_READ,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (!ht_mmap_failed(m)) {
            g_marker_map = (void *)m;
            ht_marker_base = (const volatile unsigned char *)m;
        } else {
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
    ht_rec_own_regions();
    return 0;
}

void ht_rec_thread_start(struct ht_slot *s, void *stack_hint)
{
    if (ht_cfg.mode != HT_RECORD || g_fd < 0)
        return;
    if (s)
        s->buf = g_bufs + (size_t)(s - ht_slots) * HT_BUF_SIZE;
    uint64_t seq = ht_seq_next();
    ht_rec_event(HT_K_THREAD, seq, (uint64_t)(uintptr_t)stack_hint, 0, 0, 0, NULL);
}

void ht_rec_thread_flush(struct ht_slot *s)
{
    if (g_fd < 0 || !s->buf)
        return;
    int spins = 0;
    while (atomic_exchange_explicit(&s->busy, 1, memory_order_acquire) != 0) {
        if (++spins > 100000)
            return; /* cannot happen short of a bug; do not hang a thread exit */
        sched_yield();
    }
    flush_locked(s);
    atomic_store_explicit(&s->busy, 0, memory_order_release);
}

/* ---- MODULE blobs ---- */

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
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD)
            nseg++;
    size_t plen = strlen(name) + 1;
    size_t payload = round8(plen) + nseg * 32;
    if (c->len + sizeof(struct ht_rec) + payload > MODCACHE_CAP) {
        c->overflow = 1;
        return 0;
    }
    unsigned char *o = g_modcache + c->len;
    struct ht_rec r;
    memset(&r, 0, sizeof r);
    r.kind = HT_K_MODULE;
    r.addr = (uint64_t)info->dlpi_addr;
    r.size = payload;
    r.arg = nseg;
    memcpy(o, &r, sizeof r);
    o += sizeof r;
    memcpy(o, name, plen);
    memset(o + plen, 0, round8(plen) - plen);
    o += round8(plen);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uint64_t seg[3] = {ph->p_vaddr, ph->p_memsz, ph->p_filesz};
        uint32_t fl[2] = {ph->p_flags, 0};
        memcpy(o, seg, 24);
        memcpy(o + 24, fl, 8);
        o += 32;
    }
    c->len += sizeof r + payload;
    return 0;
}

/* Caller holds g_blob_lock. */
static void modcache_build(void)
{
    struct mod_ctx c = {0, 0, 0};
    dl_iterate_phdr(mod_cb, &c);
    g_modcache_len = c.len;
    if (c.overflow)
        ht_stats_error("too many modules: MODULE blobs truncated", "");
}

/* Caller holds g_blob_lock: stamps seq/tid/time and writes the cache. */
static void modcache_emit(void)
{
    size_t pos = 0;
    if (g_fd < 0 || g_modcache_len == 0)
        return;
    uint64_t t = now_ns();
    uint32_t tid = (uint32_t)cur_tid();
    uint64_t n = 0;
    while (pos < g_modcache_len) {
        struct ht_rec r;
        memcpy(&r, g_modcache + pos, sizeof r);
        r.seq = ht_seq_next();
        r.time = t;
        r.tid = tid;
        memcpy(g_modcache + pos, &r, sizeof r);
        pos += sizeof r + round8(r.size);
        n++;
    }
    uint64_t off = atomic_fetch_add_explicit(&g_off, g_modcache_len, memory_order_relaxed);
    write_at(off, g_modcache, g_modcache_len);
    atomic_fetch_add_explicit(&g_records, n, memory_order_relaxed);
}

/* Caller holds g_blob_lock. which: 0 = at start, 1 = at exit. */
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
        ht_stats_error("/proc/self/maps larger than 4 MiB: MAPS blob truncated", "");
    }
    write_blob(HT_K_MAPS, 0, (uint64_t)n, which, g_scratch, (size_t)n);
}

/* MODULE blobs of every loaded object and a MAPS blob (which: 0 start, 1 exit). */
static void snapshot(int which)
{
    pthread_mutex_lock(&g_blob_lock);
    modcache_build();
    modcache_emit();
    maps_emit(which);
    pthread_mutex_unlock(&g_blob_lock);
}

void ht_rec_start(void)
{
    if (g_fd < 0)
        return;
    snapshot(0);
}

void ht_rec_finish(void)
{
    if (g_fd < 0)
        return;
    snapshot(1);

    /* From now on appends go direct; then drain every live buffer. */
    atomic_store(&g_final, 1);
    for (unsigned i = 0; i < HT_MAX_SLOTS; i++) {
        struct ht_slot *s = &ht_slots[i];
        if (!atomic_load_explicit(&s->in_use, memory_order_acquire) || !s->buf)
            continue;
        ht_rec_thread_flush(s);
    }
}

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
    /* One log per process: the parent's unflushed records were dropped with
     * the slots (thread.c); start a fresh log for this pid. */
    atomic_store(&ht_seq, 0);
    atomic_store(&g_final, 0);
    atomic_store(&g_records, 0);
    if (g_fd >= 0) {
        ht_sys_close(g_fd);
        g_fd = -1;
        if (open_log() == 0) {
            ht_rec_own_regions();
            modcache_emit();
            maps_emit(0);
        }
    }
    pthread_mutex_unlock(&g_blob_lock);
}

const char *ht_rec_log_path(void) { return g_fd >= 0 ? g_log_path : NULL; }
uint64_t ht_rec_records(void) { return atomic_load(&g_records); }
