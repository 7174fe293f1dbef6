/* apply_fast.h - apply mode's fast paths, inlined into the exported hooks.
 *
 * Why: an operator preloads the library into a service whose plan touches a
 * few large allocations; the millions of small ones must cost (almost)
 * nothing. Each thread has one TLS block (initial-exec: one GOT load, then
 * %fs-relative accesses) holding its limits, its heap-small counters and its
 * arena lists and region:
 *
 *   malloc(n), n < fast_max   count (two adds to this thread's own TLS, no
 *                             shared cache line), tail-call the allocator;
 *   malloc(n), n < arena_max  pop from this thread's arena list, else bump
 *                             through its arena region;
 *   free(p)                   one alignment test and two range compares tell
 *                             the allocator's pointers from ours.
 *
 * A thread's limits are 0 until its first call took the slow path, which
 * registers the thread (apply.c): its counters are summed into the summary
 * while it lives and folded into globals when it exits. Anything the fast
 * paths do not handle goes to the slow path (hooks.c -> apply.c). */
#ifndef HT_APPLY_FAST_H
#define HT_APPLY_FAST_H

#include "ht.h"
#include "arena.h"
#include "next.h"

#pragma GCC visibility push(hidden)

struct ht_apply_tls {
    /* (allocs and bytes are not adjacent: gcc would otherwise update them
     * with one 16-byte vector load/add/store, slower than two adds) */
    uint64_t fast_max;  /* sizes below: forwarded by the fast path */
    uint64_t allocs;    /* heap-small allocations counted here ... */
    uint64_t arena_max; /* sizes below: served by the arena */
    uint64_t bytes;     /* ... and their bytes */
    struct ht_apply_tls *next, *prev; /* registered threads (apply.c) */
    int registered;
    int rounds; /* key destructor rounds */
    struct ht_mag_tcache tc;
};
extern __thread struct ht_apply_tls ht_atls __attribute__((tls_model("initial-exec")));

/* The heap-small arena: its base and the length committed so far (0 when
 * there is none, or nothing is committed yet). */
extern struct ht_mag ht_arena;
extern uintptr_t ht_arena_base, ht_arena_len;
extern int ht_arena_on;

/* The arena's slow path (or the allocator behind us); *fresh as in
 * ht_mag_alloc_fast (0 when forwarded). */
void *ht_arena_alloc_slow(size_t n, int *fresh);
void ht_apply_poll_slow(void);

/* The arena's objects lie in its committed chunks: [base, base + len) grows
 * only once a commit has placed every chunk, so a chunk whose range a refused
 * move lost (and that another mapping may take) is never taken for ours. */
static inline int ht_arena_owns(const void *p)
{
    return (uintptr_t)p - ht_arena_base < __atomic_load_n(&ht_arena_len, __ATOMIC_RELAXED);
}

/* Counts one heap-small allocation (two adds to this thread's TLS). The
 * summary-request file is checked on the slow paths only. */
static inline void ht_apply_count_small(struct ht_apply_tls *t, size_t n)
{
    t->allocs++;
    t->bytes += n;
}

/* malloc from the arena (n < t->arena_max): a pop from this thread's list or
 * the next chunk of its region, else the slow path (or the allocator when the
 * arena is full). */
static inline void *ht_apply_arena_malloc(struct ht_apply_tls *t, size_t n)
{
    ht_apply_count_small(t, n);
    void *p = ht_mag_alloc_fast(&ht_arena, &t->tc, n, NULL);
    if (HT_LIKELY(p != NULL))
        return p;
    return ht_arena_alloc_slow(n, NULL);
}

static inline int ht_apply_calloc_fast(size_t nm, size_t sz, void **out)
{
    struct ht_apply_tls *t = &ht_atls;
    size_t n;
    if (__builtin_mul_overflow(nm, sz, &n) || n >= t->fast_max)
        return 0;
    ht_apply_count_small(t, n);
    *out = ht_next.calloc(nm, sz);
    return 1;
}

/* free: owned blocks start on a 2 MB boundary, arena objects lie in one
 * range; everything else belongs to the allocator behind us. */
static inline int ht_apply_free_fast(void *p)
{
    if (HT_UNLIKELY(((uintptr_t)p & (HT_HUGE_2M - 1)) == 0))
        return p == NULL; /* NULL: nothing to do; aligned: maybe owned */
    if (HT_UNLIKELY(ht_arena_owns(p))) {
        ht_mag_free(&ht_arena, &ht_atls.tc, p);
        return 1;
    }
    if (HT_UNLIKELY(ht_boot_owns(p)))
        return 1;
    ht_next.free(p);
    return 1;
}

/* malloc_usable_size of an arena object, inline: programs that count their
 * memory (Redis's zmalloc) ask it on every malloc and free. 1 when p is the
 * arena's (*n set), 0 for the slow path (owned blocks) or the allocator. */
static inline int ht_apply_usable_fast(const void *p, size_t *n)
{
    if (HT_LIKELY(ht_arena_owns(p))) {
        *n = ht_mag_usable(&ht_arena, p);
        return 1;
    }
    return 0;
}

static inline int ht_apply_realloc_fast(void *p, size_t n, void **out)
{
    struct ht_apply_tls *t = &ht_atls;
    if (n >= t->fast_max || n == 0 || ((uintptr_t)p & (HT_HUGE_2M - 1)) == 0 || ht_arena_owns(p))
        return 0;
    ht_apply_count_small(t, n);
    *out = ht_fwd_realloc(p, n);
    return 1;
}

/* ---- mapped.c: the program's own anonymous mappings (hooks.c's mmap family) ---- */
/* Backing decided for n bytes from caller (site, else heap-large by size). */
int ht_apply_decide(size_t n, const void *caller, int *cat);
/* A mapping the plan may back (the shared predicate, docs/formats.md s.3). */
int ht_mapped_eligible(void *addr, size_t len, int prot, int flags, int fd, off_t off);
/* The program's mmap of len bytes, backed as planned (*taken = 1), or NULL
 * with *taken = 0: the caller maps it as asked. */
void *ht_mapped_mmap(size_t len, int flags, const void *caller, int *taken);
/* Before the program's call on [lo, lo + len): whole_ok: the call removes
 * what it covers (munmap, MAP_FIXED); moves: it unmaps or moves memory.
 * 0, or -errno when a mapping that had to be disowned could not be.
 * moves < 0: changes nothing, 1 when the range touches a hugetlb mapping. */
int ht_mapped_before(uintptr_t lo, size_t len, int whole_ok, int moves);
/* Mappings listed by mapped.c (0: the hooks skip it). */
extern _Atomic int ht_mapped_live;

#pragma GCC visibility pop

#endif
