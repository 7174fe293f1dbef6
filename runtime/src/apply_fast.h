/* apply_fast.h - apply mode's fast paths, inlined into the exported hooks.
 *
 * Why: an operator preloads the library into a service whose plan touches a
 * few large allocations; the millions of small ones must cost (almost)
 * nothing. A small allocation that no directive concerns (no sites, heap-small
 * not in the arena, size below the threshold) is forwarded right here: one
 * TLS load, two compares, two increments of this thread's own counters (its
 * slot, aggregated at exit: no shared cache line), then the call. The arena
 * serves its classes from a per-thread cache without locks. Anything else
 * goes to the slow path (hooks.c -> apply.c). */
#ifndef HT_APPLY_FAST_H
#define HT_APPLY_FAST_H

#include "ht.h"
#include "magazine.h"
#include "next.h"

#pragma GCC visibility push(hidden)

/* Sizes below this are forwarded by the fast path (0: none; set once at init). */
extern uint64_t ht_apply_fast_max;
/* The heap-small arena (ht_arena.end == ht_arena.base when there is none). */
extern struct ht_mag ht_arena;
extern int ht_arena_on;
extern __thread struct ht_mag_tcache ht_mag_tc __attribute__((tls_model("initial-exec")));

void *ht_arena_alloc_slow(size_t n, int c);
void ht_apply_poll_slow(void);

/* Counts one heap-small allocation on this thread's slot (s != NULL); checks
 * for a summary request every 65536 allocations of the thread. */
static inline void ht_apply_count_small(struct ht_slot *s, size_t n)
{
    uint64_t k = s->cnt[HT_TC_ALLOCS(HT_CAT_HEAP_SMALL)] + 1;
    __atomic_store_n(&s->cnt[HT_TC_ALLOCS(HT_CAT_HEAP_SMALL)], k, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cnt[HT_TC_BYTES(HT_CAT_HEAP_SMALL)],
                     s->cnt[HT_TC_BYTES(HT_CAT_HEAP_SMALL)] + n, __ATOMIC_RELAXED);
    if (HT_UNLIKELY((k & 0xffff) == 0))
        ht_apply_poll_slow();
}

/* 1 and *out when handled here. */
static inline int ht_apply_malloc_fast(size_t n, void **out)
{
    struct ht_slot *s = ht_tls.slot;
    if (HT_UNLIKELY(s == NULL))
        return 0;
    if (HT_LIKELY(n < ht_apply_fast_max)) {
        ht_apply_count_small(s, n);
        *out = ht_next.malloc(n);
        return 1;
    }
    if (ht_arena_on && n <= HT_MAG_MAX && !ht_tls.guard) {
        ht_apply_count_small(s, n);
        int c = ht_mag_class(n);
        void *p = ht_mag_tc.head[c];
        if (HT_LIKELY(p != NULL)) {
            ht_mag_tc.head[c] = *(void **)p;
            ht_mag_tc.n[c]--;
            *out = p;
            return 1;
        }
        *out = ht_arena_alloc_slow(n, c);
        return 1;
    }
    return 0;
}

static inline int ht_apply_calloc_fast(size_t nm, size_t sz, void **out)
{
    struct ht_slot *s = ht_tls.slot;
    size_t n;
    if (HT_UNLIKELY(s == NULL) || __builtin_mul_overflow(nm, sz, &n) || n >= ht_apply_fast_max)
        return 0;
    ht_apply_count_small(s, n);
    *out = ht_next.calloc(nm, sz);
    return 1;
}

/* free: owned blocks start on a 2 MB boundary, arena objects lie in one
 * range; everything else belongs to the allocator behind us. */
static inline int ht_apply_free_fast(void *p)
{
    if (((uintptr_t)p & (HT_HUGE_2M - 1)) == 0)
        return p == NULL; /* NULL: nothing to do; aligned: maybe owned */
    if (ht_mag_owns(&ht_arena, p)) {
        ht_mag_free(&ht_arena, &ht_mag_tc, p);
        return 1;
    }
    ht_fwd_free(p);
    return 1;
}

static inline int ht_apply_realloc_fast(void *p, size_t n, void **out)
{
    struct ht_slot *s = ht_tls.slot;
    if (HT_UNLIKELY(s == NULL) || n >= ht_apply_fast_max || n == 0 ||
        ((uintptr_t)p & (HT_HUGE_2M - 1)) == 0 || ht_mag_owns(&ht_arena, p))
        return 0;
    ht_apply_count_small(s, n);
    *out = ht_fwd_realloc(p, n);
    return 1;
}

#pragma GCC visibility pop

#endif
