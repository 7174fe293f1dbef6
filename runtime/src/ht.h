/* ht.h - internal interfaces between the parts of libhugetune: global state,
 * configuration, per-thread state, the record and apply entry points, stats.
 * Which file owns which concern: the one file map, runtime/README.md
 * ("Source layout"). */
#ifndef HT_H
#define HT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "enc.h"
#include "plan.h"

/* ---- glibc's real allocator (exported by glibc 2.36 for exactly this) ---- */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

/* Everything declared below is internal to the library: hidden visibility
 * lets the compiler address it directly (no GOT load on the hook fast path). */
#pragma GCC visibility push(hidden)

#define HT_LIKELY(x) __builtin_expect(!!(x), 1)
#define HT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HT_API __attribute__((visibility("default")))

#define HT_HUGE_2M (2ul << 20)
#define HT_HUGE_1G (1ul << 30)
#define HT_DEFAULT_THRESHOLD 131072


/* ---- global state ---- */
enum ht_state {
    HT_UNINIT = 0,   /* nothing decided yet (environment not readable yet) */
    HT_INITIALIZING, /* one thread is initializing: everybody passes through */
    HT_INERT,        /* pass-through */
    HT_RECORD,
    HT_APPLY,
};
extern _Atomic int ht_state;

static inline int ht_state_get(void)
{
    return atomic_load_explicit(&ht_state, memory_order_acquire);
}

enum ht_category { HT_CAT_HEAP_SMALL = 0, HT_CAT_HEAP_LARGE, HT_CAT_STATIC, HT_CAT_SITES, HT_CAT_COUNT };
const char *ht_category_name(int cat);

#define HT_PATH_MAX 4096
struct ht_config {
    int mode; /* HT_INERT / HT_RECORD / HT_APPLY */
    int verbose;
    int markers;
    uint64_t threshold;
    int threshold_from_env;
    int has_log, has_summary;
    char log_tmpl[HT_PATH_MAX];
    char summary_tmpl[HT_PATH_MAX];
    char plan_path[HT_PATH_MAX];
    char exe_path[HT_PATH_MAX]; /* readlink /proc/self/exe */
    int pid;
    int is_fork_child; /* output paths without %p get ".<pid>" appended */
    unsigned exec_gen; /* record mode: execs this pid made before this image */
};
extern struct ht_config ht_cfg;

/* Lazy init: called by hooks while ht_state is HT_UNINIT. */
void ht_init_slow(void);
/* Looks up an environment variable without allocating (environ may be NULL
 * very early; returns NULL then). */
const char *ht_getenv(const char *name);
/* Writes "hugetune: <a><b>\n" on stderr when HUGETUNE_VERBOSE=1. */
void ht_verbose(const char *a, const char *b);
void ht_warn(const char *a, const char *b);         /* a setting is unusable: stderr unless HUGETUNE_QUIET=1 */
void ht_config_error(const char *a, const char *b); /* ht_stats_error + ht_warn */
/* Output path for a template: %p expansion, ".<pid>" in a forked child when
 * the template has no %p. Returns 0 or -1 (too long). */
int ht_output_path(const char *tmpl, char *out, size_t cap);
/* A new file that is to replace `path`: created next to it under a fresh name
 * (written to `tmp`) with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, so that no
 * planted file or symlink is ever written through; the caller renames `tmp`
 * over `path` (rename replaces a symlink, never follows it). Returns the fd
 * or -errno. Async-signal-safe. */
long ht_create_beside(const char *path, char *tmp, size_t cap);
/* The process was started securely (AT_SECURE: setuid/setgid, file
 * capabilities, an LSM transition): HUGETUNE_* may come from a less
 * privileged user, so the library stays inert, as glibc does for its
 * tunables. */
int ht_secure_exec(void);

/* ---- follow mode (follow.c; docs/launchers.md) ---- */
/* 1 in a process started with HUGETUNE_MODE=follow (a launcher): the state
 * stays HT_INERT, the exec hooks report what the launcher starts. */
extern int ht_follow;
void ht_follow_setup(void); /* init: HUGETUNE_FOLLOW read */
/* Constructor: a launcher stays; the real program re-executes itself in its
 * role (returns only if it cannot). real_execve: the next execve. */
void ht_follow_start(int argc, char **argv, char **envp, void *real_execve);
/* A launcher's exec of `path` (resolved): what cannot be followed is logged. */
void ht_follow_exec(const char *path, char *const argv[], char *const envp[]);
int ht_follow_is_launcher(const char *path);

/* ---- per-thread state (thread.c) ---- */
enum ht_phase { HT_PH_NONE = 0, HT_PH_ACQUIRING, HT_PH_ACTIVE, HT_PH_NOSLOT, HT_PH_EXITED };

/* Counter indices kept per thread (summed at exit). */
#define HT_TC_ALLOCS(cat) ((cat) * 2)
#define HT_TC_BYTES(cat) ((cat) * 2 + 1)
#define HT_TC_N 8

struct ht_slot {
    _Atomic int in_use;
    _Atomic int lock;  /* chunk writes: the owner's flush vs. exit/exec flushers */
    int tid;
    _Atomic uint32_t limit; /* owner appends while pos + HT_EV_MAX <= limit; 0: slow path */
    /* (events << 32) | bytes used in buf: published by the owner (release)
     * after each complete event, read by other flushers (acquire). */
    _Atomic uint64_t fill;
    uint32_t flushed_ev; /* leading events of this chunk already written (skip) */
    unsigned char *buf;  /* record mode with a log: HT_BUF_SIZE bytes */
    struct ht_enc enc;   /* owner only */
    uint64_t cnt[HT_TC_N];
} __attribute__((aligned(64)));

struct ht_tls {
    int guard; /* >0: inside the library; hooks pass straight through */
    int tid;   /* cached gettid, 0 = unknown */
    int phase;
    int depth; /* record mode: appending to the slot (a signal handler's event goes direct) */
    struct ht_slot *slot;
};
extern __thread struct ht_tls ht_tls __attribute__((tls_model("initial-exec")));

#define HT_MAX_SLOTS 1024
extern struct ht_slot *ht_slots; /* HT_MAX_SLOTS entries, mmap'd */
extern size_t ht_slots_bytes;

int ht_thread_setup(void);                 /* maps the slot table */
void ht_thread_attach(void);               /* first event of a thread */
static inline void ht_thread_ensure(void)
{
    if (HT_UNLIKELY(ht_tls.phase == HT_PH_NONE))
        ht_thread_attach();
}
static inline int ht_tid(void) { return ht_tls.tid; }
void ht_thread_exit(void *slot);           /* pthread key destructor */
void ht_thread_atfork_child(void);
/* Counters of threads that exited or have no slot. */
extern _Atomic uint64_t ht_global_cnt[HT_TC_N];
/* Adds one allocation of `bytes` in category cat to the thread's counters. */
static inline void ht_count_alloc(int cat, uint64_t bytes)
{
    struct ht_slot *s = ht_tls.slot;
    if (HT_LIKELY(s != NULL)) {
        /* Only the owning thread writes; the exit summary reads concurrently. */
        __atomic_store_n(&s->cnt[HT_TC_ALLOCS(cat)], s->cnt[HT_TC_ALLOCS(cat)] + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&s->cnt[HT_TC_BYTES(cat)], s->cnt[HT_TC_BYTES(cat)] + bytes, __ATOMIC_RELAXED);
    } else {
        atomic_fetch_add_explicit(&ht_global_cnt[HT_TC_ALLOCS(cat)], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&ht_global_cnt[HT_TC_BYTES(cat)], bytes, memory_order_relaxed);
    }
}
/* Sum of the global and all live threads' counters. */
void ht_counters_sum(uint64_t out[HT_TC_N]);

/* ---- record mode (record.c; inline fast path in rec.h) ---- */
#define HT_BUF_SIZE (64u << 10) /* ~8000 events per write; 64 MiB for 1024 live threads */
#define HT_MARKER_SPAN (1u << 20)

int ht_rec_setup(void);        /* core init: clock, log file, arena, markers, pre-init events */
void ht_rec_setup_done(void);  /* state is HT_RECORD now: last pre-init events */
void ht_rec_start(void);       /* constructor: MODULE + MAPS blobs */
void ht_rec_finish(void);      /* destructor: exit blobs, flush everything */
void ht_rec_atfork_prepare(void);
void ht_rec_atfork_parent(void);
void ht_rec_atfork_child(void);
void ht_rec_thread_start(struct ht_slot *s);
void ht_rec_thread_flush(struct ht_slot *s);
const char *ht_rec_log_path(void);
uint64_t ht_rec_records(void);
/* HUGETUNE_EXEC_GEN ("<pid>:<gen>", set by the exec hooks) if it names this
 * pid, else 0: how many execs this pid made before this image. */
unsigned ht_rec_parse_exec_gen(void);
/* exec hooks (hooks.c): before the call, after a failed call, new envp. */
void ht_rec_exec_before(const char *path, unsigned new_gen, const void *caller);
void ht_rec_exec_failed(const char *path, unsigned new_gen, int err, const void *caller);
char *const *ht_rec_exec_env(char *const envp[], unsigned gen, void **map, size_t *maplen);

extern _Atomic uint64_t ht_seq;
extern const volatile unsigned char *ht_marker_base; /* NULL: markers off */

static inline uint64_t ht_seq_next(void)
{
    return atomic_fetch_add_explicit(&ht_seq, 1, memory_order_relaxed) + 1;
}
/* Never called: the marker area is read-only zeros. */
void ht_marker_nonzero(void);
/* The marker load of section 2.4 of the contract. The loaded byte feeds a
 * (never taken) branch: a load whose result is dead may be dropped by binary
 * translators (Valgrind's VEX optimizer does), and then the trace would lack
 * the marker. */
static inline void ht_marker(uint64_t seq)
{
    const volatile unsigned char *m = ht_marker_base;
    if (m) {
        unsigned char v = m[seq & (HT_MARKER_SPAN - 1)];
        if (HT_UNLIKELY(v != 0))
            ht_marker_nonzero();
    }
}

/* ---- apply mode (apply.c) ---- */
int ht_apply_setup(void); /* core init: plan, registry */
void ht_apply_start(void); /* constructor: sites, static */
void ht_apply_finish(void); /* destructor: verification */
void ht_apply_atfork_prepare(void);
void ht_apply_atfork_parent(void);
void ht_apply_atfork_child(void);
uint64_t ht_apply_threshold(void);

void *ht_apply_malloc(size_t n, const void *caller);
void *ht_apply_calloc(size_t nmemb, size_t size, const void *caller);
void *ht_apply_realloc(void *p, size_t n, const void *caller);
void *ht_apply_memalign(size_t align, size_t n, const void *caller, int kind);
/* Returns 1 if p was owned (and is released now), 0 if it belongs to glibc. */
int ht_apply_free(void *p);
/* Returns 1 and *out if p is owned. */
int ht_apply_usable_size(void *p, size_t *out);

/* ---- statistics and summary (stats.c) ---- */
struct ht_stats {
    _Atomic uint64_t cat_backed[HT_CAT_COUNT][HT_B_COUNT];
    _Atomic uint64_t backed_bytes[HT_B_COUNT]; /* cumulative mapped bytes */
    _Atomic uint64_t held[HT_B_COUNT];         /* currently mapped bytes */
    _Atomic uint64_t peak[HT_B_COUNT];
    _Atomic uint64_t thp_verified;
    _Atomic uint64_t thp_unverified;
    _Atomic uint64_t static_requested;
    _Atomic uint64_t forks;
};
extern struct ht_stats ht_stats;

void ht_stats_backed(int cat, int backing, uint64_t bytes); /* new mapping */
void ht_stats_released(int backing, uint64_t bytes);        /* unmapped */
void ht_stats_fallback(int cat, int from, int to, const char *reason, uint64_t bytes);
void ht_stats_fallback_errno(int cat, int from, int to, int err, uint64_t bytes);
void ht_stats_error(const char *a, const char *b); /* joined "a" + "b" */
void ht_stats_reset_after_fork(void);
void ht_stats_atfork_prepare(void);
void ht_stats_atfork_parent(void);
void ht_stats_atfork_child(void);
void ht_summary_write(void);

/* init.c: the fork handlers (registered with pthread_atfork; run by the
 * _Fork and clone hooks too) and the end of the process (destructor, _exit). */
void ht_atfork_prepare(void);
void ht_atfork_parent(void);
void ht_atfork_child(void);
void ht_finish(void);

#pragma GCC visibility pop

#endif
