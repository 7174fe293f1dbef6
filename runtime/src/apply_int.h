/* apply_int.h - state shared by the apply-mode files:
 *
 *   apply.c     set-up, decisions, the malloc-family entry points
 *   owned.c     owned blocks: layouts mapped along the fallback chain, pool
 *               runs, registry, free/realloc (grow in place, mremap, shrink)
 *   arena_chunks.c  the heap-small arena (arena.c) wired to the chain
 *   forksafe.c  fork protection of private hugetlb memory
 *   static.c    .data/.bss interiors moved onto huge pages at start-up
 *   verify.c    smaps/pagemap/hugetlb-counter verification, on-demand summary
 *   foreign.c   the extended API of a foreign allocator (jemalloc/tcmalloc)
 *
 * The hot-path pieces (fast-path limit, arena, thread lists) are declared in
 * apply_fast.h, which hooks.c includes. */
#ifndef HT_APPLY_INT_H
#define HT_APPLY_INT_H

#include "ht.h"
#include "apply_fast.h"
#include "inject.h"
#include "layout.h"
#include "plan.h"
#include "pool.h"
#include "registry.h"

#include "fmt.h"

#include <pthread.h>

#pragma GCC visibility push(hidden)

/* Internal errno value of an injected failure (reported as "injected"). */
#define HT_EINJECTED 4000
/* Internal errno value of a block given up because a hole in it could not be
 * refilled (reported as "hole-lost"). */
#define HT_EHOLE 4001
/* madvise(MADV_POPULATE_WRITE) (Linux 5.14): faults pages in, failing with an
 * error where a touch would be SIGBUS; older kernels refuse it (EINVAL). */
#define HT_MADV_POPULATE_WRITE 23

/* Pseudo-category of fallbacks that concern the pool itself. */
#define HT_CAT_POOL HT_CAT_COUNT
/* Adds bytes to a category's backed map only (pool blocks: the pages are
 * held since start-up). */
void ht_stats_cat_backed(int cat, int backing, uint64_t bytes);

struct ht_apply {
    struct ht_plan plan;
    int heap_large_b; /* HT_B_NONE unless the plan is valid and says so */
    int heap_small_b; /* glibc tunable (thp-2m or an mTHP size), HT_B_4K or HT_B_NONE */
    int layout;       /* HT_LAYOUT_* */
    int fork_safe;    /* HT_FORK_* */
    int thp_top;      /* 0 never, 1 madvise, 2 always */
    int thp_ok[HT_B_COUNT]; /* 1: MADV_HUGEPAGE can give this THP size */
    pthread_mutex_t lock; /* registry and pools */
    struct ht_registry reg;
    _Atomic size_t owned; /* entries in reg: 0 = skip the lock */
    struct ht_pool pool[HT_POOL_N];
    uint64_t pool_planned[HT_POOL_N];
    struct ht_inject inj;
    _Atomic uint64_t inj_attempts[HT_INJ_N];
    _Atomic uint64_t inj_fired[HT_INJ_N];
    char request_path[HT_PATH_MAX]; /* HUGETUNE_SUMMARY_REQUEST */
    _Atomic int64_t request_last;   /* last check, seconds (coarse clock) */
    _Atomic uint64_t sub_huge_allocs, sub_huge_bytes; /* owned, no huge page by layout */
    _Atomic uint64_t round_up_waste;    /* bytes mapped beyond the request by round-up / pool */
    _Atomic uint64_t pool_allocs[HT_POOL_N], pool_misses[HT_POOL_N];
    _Atomic uint64_t realloc_in_place, realloc_moved, realloc_copied, realloc_shrunk;
    _Atomic uint64_t realloc_salvaged; /* a broken move: the data went to the allocator */
    _Atomic uint64_t moves_refused;    /* hugetlb placed by MAP_FIXED after a refused move */
    _Atomic uint64_t arena_forwarded, arena_forwarded_bytes;
    _Atomic uint64_t fork_protected, fork_copied_bytes, fork_unprotected, fork_adopted_bytes;
    int sigusr2_installed;
};
extern struct ht_apply ht_ap;

/* ---- owned.c ---- */
/* An owned block of `size` bytes for backing `want` (HT_B_*), aligned to at
 * least `align` (0: 2 MB). zero: the memory must read as zero (calloc).
 * NULL when every step failed (the caller forwards). */
void *ht_owned_alloc(size_t size, int want, int cat, size_t align, int zero);
/* Copy of the registry entry for p (1) or 0 when p is not an owned block. */
int ht_owned_lookup(void *p, struct ht_reg_entry *out);
/* Releases an owned block (1), or 0 when p is not one. */
int ht_owned_free(void *p);
/* Resizes owned block e (looked up) to n bytes with backing `want` in
 * category cat: in place, by mremap, or new block + copy. NULL: the caller
 * keeps p and forwards. HT_REALLOC_GONE: a failed step broke the block and no
 * memory was left to save its data: p is gone, realloc fails (ENOMEM). */
#define HT_REALLOC_GONE ((void *)1)
void *ht_owned_realloc(const struct ht_reg_entry *e, size_t n, int want, int cat);
static inline size_t ht_owned_usable(const struct ht_reg_entry *e) { return (size_t)ht_layout_total(&e->l); }
void ht_owned_setup_pools(void);
/* Locks for fork (registry + pools). */
void ht_owned_lock(void);
void ht_owned_unlock(void);

/* Chain steps: place `len` bytes at addr (inside a mapping of ours) with
 * backing b, falling back along the chain; returns the backing it got, with
 * the range mapped. copy_from_old: the first old_bytes bytes of the range are
 * data to keep. HT_B_NONE: a failed step left the range unmapped and it could
 * not be refilled - it is not ours any more (never touch or unmap it); the
 * kept bytes are then in *rescue (a mapping of len bytes, the caller's to
 * unmap) when rescue is given, else lost. */
int ht_place(uintptr_t addr, size_t len, int b, int cat, uint64_t req_bytes, int copy_from_old, size_t old_bytes,
             uintptr_t *rescue);
/* Fallback substitutions that apply before mapping (fork-safe thp). */
int ht_effective_want(int want, int cat, uint64_t bytes);

/* Injection points: 1 = this attempt fails. */
int ht_inj(int kind);
/* Raw mmap of owned memory, through the injection point. */
long ht_owned_mmap(void *addr, size_t len, int prot, int flags);
long ht_hugetlb_mmap(size_t len, int backing);
long ht_madvise_huge(void *addr, size_t len);
/* Any other madvise of owned memory (injection kind madvise). */
long ht_owned_madvise(void *addr, size_t len, int advice);
/* mremap(MREMAP_MAYMOVE | MREMAP_FIXED) of a whole mapping. On failure the
 * destination is unmapped (the kernel unmaps it before moving). */
long ht_owned_move(void *from, size_t len, void *to);
long ht_owned_munmap(void *addr, size_t len);
/* Maps ordinary memory into a hole of ours (MAP_FIXED_NOREPLACE: never over
 * what another thread mapped there meanwhile). 0 or -errno. */
long ht_refill(uintptr_t addr, size_t len, int prot, int flags);
/* 1 when every page of [addr, addr + len) is mapped (mincore). */
int ht_range_mapped(uintptr_t addr, size_t len);

/* Sizes below: forwarded by the fast path (copied into each thread's TLS). */
extern uint64_t ht_apply_fast_max;
/* A thread's first slow-path call registers it for the fast paths. */
void ht_apply_thread_register(void);
/* Heap-small allocations the fast paths counted (live threads + exited). */
void ht_apply_fast_counts(uint64_t *allocs, uint64_t *bytes, int in_signal);

/* ---- arena.c ---- */
int ht_arena_setup(void);
void ht_arena_atfork_prepare(void);
void ht_arena_atfork_parent(void);
void ht_arena_atfork_child(void);
/* Hugetlb ranges of the arena (for fork protection): calls cb per range. */
void ht_arena_hugetlb_ranges(void (*cb)(uintptr_t a, size_t len, void *ctx), void *ctx);
void ht_arena_adopted(uintptr_t a, size_t len, int backing);
void ht_arena_thread_flush(struct ht_mag_tcache *t);
/* An arena object aligned to align (16 < align <= HT_MAG_ALIGN_MAX, a power of
 * two); NULL (counted as forwarded) when the arena cannot serve it. */
void *ht_arena_alloc_aligned(size_t n, size_t align);
void ht_arena_summary(struct ht_json *j);

/* ---- forksafe.c ---- */
void ht_fork_prepare(void);
void ht_fork_parent(void);
void ht_fork_child(void);

/* ---- static.c ---- */
struct ht_static_range {
    uintptr_t lo, hi;
    int backing;
};
/* 16 `static` directives, two writable segments each, up to three pieces per
 * segment (`static hugetlb-1g`): every placed range is known to fork-safe. */
#define HT_MAX_STATIC_RANGES 96
extern struct ht_static_range ht_static_ranges[HT_MAX_STATIC_RANGES];
extern int ht_nstatic_ranges;
/* Applies every `static` directive (constructor, before threads). */
void ht_static_apply(void);

/* ---- verify.c ---- */
void ht_verify_thp_block(const struct ht_reg_entry *e); /* at free */
void ht_verify_summary(struct ht_json *j, int in_signal);
void ht_apply_poll_slow(void);
void ht_sigusr2_install(void);

/* The summary (stats.c): a snapshot now (SIGUSR2 / request file). */
void ht_summary_snapshot(int in_signal);
/* Apply mode's sections of the summary (apply side, stats.c calls it). */
void ht_apply_summary(struct ht_json *j, int in_signal);
extern uint64_t ht_verify_heap_small_thp;
extern uint64_t ht_verify_live_thp;
int ht_apply_heap_small_tunable(void);

/* ---- mapped.c: the program's own anonymous mappings ---- */
int ht_thread_count(void); /* static.c */
void ht_mapped_atfork_prepare(void);
void ht_mapped_summary(struct ht_json *j, int in_signal);

/* ---- foreign.c ---- */
void ht_foreign_resolve(void);

#pragma GCC visibility pop

#endif
