/* hooks.c - the exported entry points (the only symbols the library exports).
 *
 * Each hook first loads the state (one relaxed load): apply mode's fast path
 * (apply_fast.h) comes first, then the inert check (a second predictable
 * branch), then the call goes straight to the allocator behind us
 * (malloc family: glibc's or the program's own, resolved once, see next.c) or
 * to the kernel (mmap family, raw syscalls with errno set as libc would). Everything else lives in
 * a non-inlined slow path so the inert fast path stays small.
 *
 * The caller is taken with __builtin_return_address(0) in the exported
 * function itself: the return address in the program, as the log and the plan's
 * `site` lines define it. */
#include "ht.h"
#include "apply_fast.h"
#include "next.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RA() __builtin_return_address(0)
#define SLOW __attribute__((noinline))

static inline int inert(void)
{
    return atomic_load_explicit(&ht_state, memory_order_relaxed) == HT_INERT;
}

/* Mode to act in for a hooked call: HT_RECORD, HT_APPLY or 0 (pass through). */
static inline int active_mode(void)
{
    int s = ht_state_get();
    if (HT_UNLIKELY(s == HT_UNINIT)) {
        ht_init_slow();
        s = ht_state_get();
    }
    if (s < HT_RECORD || ht_tls.guard)
        return 0;
    ht_thread_ensure();
    return s;
}

/* Ownership must be checked even when the library is busy internally (a
 * signal handler freeing an owned block): glibc must never see one. */
static inline int apply_state(void) { return ht_state_get() == HT_APPLY; }

static inline int cat_of(uint64_t n)
{
    return n >= ht_cfg.threshold ? HT_CAT_HEAP_LARGE : HT_CAT_HEAP_SMALL;
}

/* Allocation events: the marker load comes after the real call returned. */
static inline void rec_after(uint16_t kind, const void *res, uint64_t size, uint64_t arg,
                             uint64_t arg2, const void *ra)
{
    uint64_t seq = ht_seq_next();
    ht_marker(seq);
    ht_rec_event(kind, seq, (uint64_t)(uintptr_t)res, size, arg, arg2, ra);
}

static inline int bad_posix_align(size_t a)
{
    return a == 0 || (a % sizeof(void *)) != 0 || (a & (a - 1)) != 0;
}

/* ---------------- malloc ---------------- */

static SLOW void *malloc_slow(size_t n, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        void *p = ht_fwd_malloc(n);
        rec_after(HT_K_MALLOC, p, n, 0, 0, ra);
        ht_count_alloc(cat_of(n), n);
        return p;
    }
    if (m == HT_APPLY)
        return ht_apply_malloc(n, ra);
    return ht_fwd_malloc(n);
}

static SLOW void *malloc_arena(size_t n) { return ht_apply_arena_malloc(&ht_atls, n); }

HT_API void *malloc(size_t n)
{
    int s = atomic_load_explicit(&ht_state, memory_order_relaxed);
    /* Apply first: it is the mode a production service runs in, and its fast
     * path then is straight-line code (the inert path pays one compare). */
    if (HT_LIKELY(s == HT_APPLY)) {
        /* apply_fast.h: small sizes no directive concerns are forwarded
         * (tail call), the arena serves its classes. */
        struct ht_apply_tls *t = &ht_atls;
        if (HT_LIKELY(n < t->fast_max)) {
            ht_apply_count_small(t, n);
            return ht_next.malloc(n);
        }
        if (n < t->arena_max)
            return malloc_arena(n); /* tail call: no frame here */
    } else if (HT_LIKELY(s == HT_INERT)) {
        return ht_next.malloc(n);
    }
    return malloc_slow(n, RA());
}

/* ---------------- free ---------------- */

static SLOW void free_slow(void *p, const void *ra)
{
    if (HT_LIKELY(ht_state_get() == HT_APPLY)) {
        /* Arena objects and owned blocks are ours; everything else is the
         * allocator's. */
        if (!ht_apply_free(p))
            ht_fwd_free(p);
        return;
    }
    int m = active_mode();
    if (m == HT_RECORD) {
        /* Free events: the marker load comes before the real call. */
        uint64_t seq = ht_seq_next();
        ht_marker(seq);
        ht_fwd_free(p);
        ht_rec_event(HT_K_FREE, seq, (uint64_t)(uintptr_t)p, 0, 0, 0, ra);
        return;
    }
    if ((m == HT_APPLY || apply_state()) && ht_apply_free(p))
        return;
    ht_fwd_free(p);
}

HT_API void free(void *p)
{
    int s = atomic_load_explicit(&ht_state, memory_order_relaxed);
    if (HT_LIKELY(s == HT_APPLY)) {
        if (HT_LIKELY(ht_apply_free_fast(p)))
            return;
    } else if (HT_LIKELY(s == HT_INERT)) {
        ht_fwd_free(p);
        return;
    }
    free_slow(p, RA());
}

/* ---------------- calloc ---------------- */

static SLOW void *calloc_slow(size_t nm, size_t sz, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        size_t total;
        int ovf = __builtin_mul_overflow(nm, sz, &total);
        void *p = ht_fwd_calloc(nm, sz);
        rec_after(HT_K_CALLOC, p, ovf ? UINT64_MAX : total, nm, sz, ra);
        if (!ovf)
            ht_count_alloc(cat_of(total), total);
        return p;
    }
    if (m == HT_APPLY)
        return ht_apply_calloc(nm, sz, ra);
    return ht_fwd_calloc(nm, sz);
}

HT_API void *calloc(size_t nm, size_t sz)
{
    int s = atomic_load_explicit(&ht_state, memory_order_relaxed);
    void *p;
    if (HT_LIKELY(s == HT_APPLY)) {
        if (HT_LIKELY(ht_apply_calloc_fast(nm, sz, &p)))
            return p;
    } else if (HT_LIKELY(s == HT_INERT)) {
        return ht_next.calloc(nm, sz);
    }
    return calloc_slow(nm, sz, RA());
}

/* ---------------- realloc / reallocarray ---------------- */

static SLOW void *realloc_slow(void *p, size_t n, const void *ra, uint16_t kind, int ovf)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        void *r = ovf ? NULL : ht_fwd_realloc(p, n);
        if (ovf)
            errno = ENOMEM;
        rec_after(kind, r, ovf ? UINT64_MAX : n, (uint64_t)(uintptr_t)p, 0, ra);
        if (!ovf && (p == NULL || n != 0))
            ht_count_alloc(cat_of(n), n);
        return r;
    }
    if (ovf) {
        errno = ENOMEM;
        return NULL;
    }
    if (m == HT_APPLY || apply_state())
        return ht_apply_realloc(p, n, ra);
    return ht_fwd_realloc(p, n);
}

HT_API void *realloc(void *p, size_t n)
{
    int s = atomic_load_explicit(&ht_state, memory_order_relaxed);
    void *q;
    if (HT_LIKELY(s == HT_APPLY)) {
        if (HT_LIKELY(ht_apply_realloc_fast(p, n, &q)))
            return q;
    } else if (HT_LIKELY(s == HT_INERT)) {
        return ht_fwd_realloc(p, n);
    }
    return realloc_slow(p, n, RA(), HT_K_REALLOC, 0);
}

HT_API void *reallocarray(void *p, size_t nm, size_t sz)
{
    size_t n;
    int ovf = __builtin_mul_overflow(nm, sz, &n);
    if (HT_LIKELY(inert())) {
        if (ovf) {
            errno = ENOMEM;
            return NULL;
        }
        return ht_fwd_realloc(p, n);
    }
    return realloc_slow(p, n, RA(), HT_K_REALLOCARRAY, ovf);
}

/* ---------------- aligned allocations ---------------- */

/* kind: HT_K_MEMALIGN / ALIGNED_ALLOC / VALLOC / PVALLOC, forwarded. */
static void *next_aligned(int kind, size_t align, size_t n)
{
    switch (kind) {
    case HT_K_VALLOC: return ht_fwd_valloc(n);
    case HT_K_PVALLOC: return ht_fwd_pvalloc(n);
    default: return ht_fwd_memalign(align, n);
    }
}

static SLOW void *aligned_slow(int kind, size_t align, size_t n, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        void *p = next_aligned(kind, align, n);
        rec_after((uint16_t)kind, p, n, align, 0, ra);
        ht_count_alloc(cat_of(n), n);
        return p;
    }
    if (m == HT_APPLY)
        return ht_apply_memalign(align, n, ra, kind);
    return next_aligned(kind, align, n);
}

HT_API void *memalign(size_t align, size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.memalign(align, n);
    return aligned_slow(HT_K_MEMALIGN, align, n, RA());
}

/* glibc 2.36's aligned_alloc is memalign (same checks). */
HT_API void *aligned_alloc(size_t align, size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.memalign(align, n);
    return aligned_slow(HT_K_ALIGNED_ALLOC, align, n, RA());
}

HT_API void *valloc(size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.valloc(n);
    return aligned_slow(HT_K_VALLOC, (size_t)getpagesize(), n, RA());
}

HT_API void *pvalloc(size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.pvalloc(n);
    return aligned_slow(HT_K_PVALLOC, (size_t)getpagesize(), n, RA());
}

static SLOW int posix_memalign_slow(void **out, size_t align, size_t n, const void *ra)
{
    int saved = errno; /* posix_memalign reports through its result only */
    int m = active_mode();
    void *p = NULL;
    int rc;
    if (bad_posix_align(align)) {
        rc = EINVAL;
    } else {
        if (m == HT_APPLY)
            p = ht_apply_memalign(align, n, ra, HT_K_POSIX_MEMALIGN);
        else
            p = ht_fwd_memalign(align, n);
        rc = p ? 0 : ENOMEM;
    }
    if (m == HT_RECORD) {
        rec_after(HT_K_POSIX_MEMALIGN, p, n, align, (uint64_t)rc, ra);
        if (rc != EINVAL)
            ht_count_alloc(cat_of(n), n);
    }
    if (rc == 0)
        *out = p;
    errno = saved;
    return rc;
}

HT_API int posix_memalign(void **out, size_t align, size_t n)
{
    if (HT_LIKELY(inert())) {
        if (bad_posix_align(align))
            return EINVAL;
        int saved = errno;
        void *p = ht_next.memalign(align, n);
        if (!p) {
            errno = saved;
            return ENOMEM;
        }
        *out = p;
        return 0;
    }
    return posix_memalign_slow(out, align, n, RA());
}

/* ---------------- malloc_usable_size ---------------- */

HT_API size_t malloc_usable_size(void *p)
{
    size_t n;
    if (HT_UNLIKELY(!inert()) && apply_state() &&
        (((uintptr_t)p & (HT_HUGE_2M - 1)) == 0 || ht_arena_owns(p)) &&
        ht_apply_usable_size(p, &n))
        return n;
    return ht_fwd_usable_size(p);
}

/* ---------------- mmap family ---------------- */

static inline void *raw_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, a, len, prot, flags, fd, off);
}

static SLOW void *mmap_slow(void *a, size_t len, int prot, int flags, int fd, off_t off,
                            const void *ra)
{
    int m = active_mode();
    void *r = raw_mmap(a, len, prot, flags, fd, off);
    if (m == HT_RECORD) {
        int e = errno;
        rec_after(HT_K_MMAP, r, len, ((uint64_t)(uint32_t)prot << 32) | (uint32_t)flags,
                  ((uint64_t)(uint32_t)fd << 32) | (((uint64_t)off >> 12) & 0xffffffffu), ra);
        errno = e;
    }
    return r;
}

HT_API void *mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (HT_LIKELY(inert()))
        return raw_mmap(a, len, prot, flags, fd, off);
    return mmap_slow(a, len, prot, flags, fd, off, RA());
}

HT_API void *mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

static SLOW int munmap_slow(void *a, size_t len, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        uint64_t seq = ht_seq_next();
        ht_marker(seq); /* before the real call: dead from here on */
        long r = syscall(SYS_munmap, a, len);
        int e = errno;
        ht_rec_event(HT_K_MUNMAP, seq, (uint64_t)(uintptr_t)a, len, (uint64_t)(int64_t)r, 0, ra);
        errno = e;
        return (int)r;
    }
    return (int)syscall(SYS_munmap, a, len);
}

HT_API int munmap(void *a, size_t len)
{
    if (HT_LIKELY(inert()))
        return (int)syscall(SYS_munmap, a, len);
    return munmap_slow(a, len, RA());
}

static SLOW void *mremap_slow(void *old, size_t oldlen, size_t newlen, int flags, void *na,
                              const void *ra)
{
    int m = active_mode();
    void *r = (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, na);
    if (m == HT_RECORD) {
        int e = errno;
        rec_after(HT_K_MREMAP, r, newlen, (uint64_t)(uintptr_t)old, oldlen, ra);
        errno = e;
    }
    return r;
}

HT_API void *mremap(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
    void *na = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        na = va_arg(ap, void *);
        va_end(ap);
    }
    if (HT_LIKELY(inert()))
        return (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, na);
    return mremap_slow(old, oldlen, newlen, flags, na, RA());
}
