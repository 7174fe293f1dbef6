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
#include "rec.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dlfcn.h>

#include "fmt.h"
#include "sys.h"

/* The sanitizer build (sangate.c) reaches the malloc- and mmap-family hooks
 * through its gate: there they are named ht_san_<name>. */
#ifdef HT_SAN_GATE
#define HT_HOOK(name) ht_san_##name
#define HT_HOOK_STR(name) "ht_san_" #name
#else
#define HT_HOOK(name) name
#define HT_HOOK_STR(name) #name
#endif

#define RA() __builtin_return_address(0)
#define SLOW __attribute__((noinline))

static inline int inert(void)
{
    return atomic_load_explicit(&ht_state, memory_order_relaxed) == HT_INERT;
}

/* Mode to act in for a hooked call: HT_RECORD, HT_APPLY, HT_PREINIT (not
 * initialized yet: record into the pre-init buffer) or 0 (pass through). */
#define HT_PREINIT 100

static SLOW int preinit_mode(void)
{
    /* The allocator behind us must be known: calls made while resolving it
     * are dlsym's, i.e. the library's own. */
    if (ht_tls.guard || atomic_load_explicit(&ht_next_state, memory_order_acquire) != HT_NEXT_READY)
        return 0;
    return HT_PREINIT;
}

static inline int active_mode(void)
{
    int s = ht_state_get();
    if (HT_UNLIKELY(s == HT_UNINIT)) {
        ht_init_slow();
        s = ht_state_get();
    }
    if (HT_UNLIKELY(s < HT_INERT))
        return preinit_mode();
    if (s < HT_RECORD || ht_tls.guard)
        return 0;
    /* Initialized from inside dlsym's allocation (the constructor resolving
     * the allocator): those calls are the library's own. */
    if (HT_UNLIKELY(atomic_load_explicit(&ht_next_state, memory_order_relaxed) != HT_NEXT_READY))
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

/* ---- record branches ---- */

/* A call before initialization; if initialization finished meanwhile, it is
 * recorded normally. */
static SLOW void rec_preinit(unsigned kind, const void *res, uint64_t size, uint64_t arg,
                             uint64_t arg2, const void *ra)
{
    if (ht_preinit_event(kind, 0, (uint64_t)(uintptr_t)res, size, arg, arg2, ra))
        return;
    if (ht_state_get() != HT_RECORD || ht_tls.guard)
        return;
    ht_thread_ensure();
    uint64_t seq = 0;
    if (ht_marker_base) {
        seq = ht_seq_next();
        ht_marker(seq);
    }
    if (ht_rec_logging)
        ht_rec_put(kind, seq, HT_NOW, (uint64_t)(uintptr_t)res, size, arg, arg2, ra);
}

/* Allocation events: the marker load comes after the real call returned. */
static inline __attribute__((always_inline)) void
rec_after(int m, unsigned kind, const void *res, uint64_t size, uint64_t arg, uint64_t arg2,
          const void *ra)
{
    if (HT_UNLIKELY(m == HT_PREINIT)) {
        rec_preinit(kind, res, size, arg, arg2, ra);
        return;
    }
    uint64_t seq = 0;
    if (ht_marker_base) {
        seq = ht_seq_next();
        ht_marker(seq);
    }
    if (HT_LIKELY(ht_rec_logging))
        ht_rec_put(kind, seq, HT_NOW, (uint64_t)(uintptr_t)res, size, arg, arg2, ra);
}

/* Free events: seq and marker before the real call (the object is dead from
 * the marker on). The event itself is appended before the call too, so its
 * time precedes any reuse of the address by another thread. */
static inline __attribute__((always_inline)) uint64_t rec_seq_marker(void)
{
    uint64_t seq = 0;
    if (ht_marker_base) {
        seq = ht_seq_next();
        ht_marker(seq);
    }
    return seq;
}

static inline int bad_posix_align(size_t a)
{
    return a == 0 || (a % sizeof(void *)) != 0 || (a & (a - 1)) != 0;
}

/* ---------------- malloc ---------------- */

static SLOW void *malloc_slow(size_t n, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD || m == HT_PREINIT) {
        void *p = ht_fwd_malloc(n);
        rec_after(m, HT_K_MALLOC, p, n, 0, 0, ra);
        if (m == HT_RECORD)
            ht_count_alloc(cat_of(n), n);
        return p;
    }
    if (m == HT_APPLY)
        return ht_apply_malloc(n, ra);
    return ht_fwd_malloc(n);
}

static SLOW void *malloc_arena(size_t n) { return ht_apply_arena_malloc(&ht_atls, n); }

HT_API void *HT_HOOK(malloc)(size_t n)
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
        uint64_t seq = rec_seq_marker();
        if (HT_LIKELY(ht_rec_logging))
            ht_rec_put(HT_K_FREE, seq, HT_NOW, (uint64_t)(uintptr_t)p, 0, 0, 0, ra);
        ht_fwd_free(p);
        return;
    }
    if (m == HT_PREINIT) {
        rec_preinit(HT_K_FREE, p, 0, 0, 0, ra);
        ht_fwd_free(p);
        return;
    }
    if ((m == HT_APPLY || apply_state()) && ht_apply_free(p))
        return;
    ht_fwd_free(p);
}

HT_API void HT_HOOK(free)(void *p)
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
    if (m == HT_RECORD || m == HT_PREINIT) {
        size_t total;
        int ovf = __builtin_mul_overflow(nm, sz, &total);
        void *p = ht_fwd_calloc(nm, sz);
        rec_after(m, HT_K_CALLOC, p, ovf ? UINT64_MAX : total, nm, sz, ra);
        if (!ovf && m == HT_RECORD)
            ht_count_alloc(cat_of(total), total);
        return p;
    }
    if (m == HT_APPLY)
        return ht_apply_calloc(nm, sz, ra);
    return ht_fwd_calloc(nm, sz);
}

HT_API void *HT_HOOK(calloc)(size_t nm, size_t sz)
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
    if (m == HT_RECORD || m == HT_PREINIT) {
        void *r = ovf ? NULL : ht_fwd_realloc(p, n);
        if (ovf)
            errno = ENOMEM;
        int e = errno;
        rec_after(m, kind, r, ovf ? UINT64_MAX : n, (uint64_t)(uintptr_t)p, 0, ra);
        if (!ovf && (p == NULL || n != 0) && m == HT_RECORD)
            ht_count_alloc(cat_of(n), n);
        errno = e;
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

HT_API void *HT_HOOK(realloc)(void *p, size_t n)
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

HT_API void *HT_HOOK(reallocarray)(void *p, size_t nm, size_t sz)
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
    if (m == HT_RECORD || m == HT_PREINIT) {
        void *p = next_aligned(kind, align, n);
        rec_after(m, (unsigned)kind, p, n, align, 0, ra);
        if (m == HT_RECORD)
            ht_count_alloc(cat_of(n), n);
        return p;
    }
    if (m == HT_APPLY)
        return ht_apply_memalign(align, n, ra, kind);
    return next_aligned(kind, align, n);
}

HT_API void *HT_HOOK(memalign)(size_t align, size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.memalign(align, n);
    return aligned_slow(HT_K_MEMALIGN, align, n, RA());
}

/* glibc 2.36's aligned_alloc is memalign (same checks). */
HT_API void *HT_HOOK(aligned_alloc)(size_t align, size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.memalign(align, n);
    return aligned_slow(HT_K_ALIGNED_ALLOC, align, n, RA());
}

HT_API void *HT_HOOK(valloc)(size_t n)
{
    if (HT_LIKELY(inert()))
        return ht_next.valloc(n);
    return aligned_slow(HT_K_VALLOC, (size_t)getpagesize(), n, RA());
}

HT_API void *HT_HOOK(pvalloc)(size_t n)
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
    if (m == HT_RECORD || m == HT_PREINIT) {
        rec_after(m, HT_K_POSIX_MEMALIGN, p, n, align, (uint64_t)rc, ra);
        if (rc != EINVAL && m == HT_RECORD)
            ht_count_alloc(cat_of(n), n);
    }
    if (rc == 0)
        *out = p;
    errno = saved;
    return rc;
}

HT_API int HT_HOOK(posix_memalign)(void **out, size_t align, size_t n)
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

HT_API size_t HT_HOOK(malloc_usable_size)(void *p)
{
    size_t n;
    if (HT_UNLIKELY(!inert()) && apply_state() &&
        (ht_apply_usable_fast(p, &n) ||
         (((uintptr_t)p & (HT_HUGE_2M - 1)) == 0 && ht_apply_usable_size(p, &n))))
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
    if (m == HT_APPLY) {
        /* The program's own mapping (mapped.c): backed as planned, or
         * whatever of ours it replaces made replaceable first. */
        if (flags & MAP_FIXED) {
            int e = atomic_load_explicit(&ht_mapped_live, memory_order_relaxed)
                        ? ht_mapped_before((uintptr_t)a, len, 1, 1)
                        : 0;
            if (e != 0) {
                errno = -e;
                return MAP_FAILED;
            }
        } else if (ht_mapped_eligible(a, len, prot, flags, fd, off)) {
            int taken;
            void *p = ht_mapped_mmap(len, flags, ra, &taken);
            if (taken)
                return p;
        }
    }
    void *r = raw_mmap(a, len, prot, flags, fd, off);
    if (m == HT_RECORD || m == HT_PREINIT) {
        int e = errno;
        rec_after(m, HT_K_MMAP, r, len, ((uint64_t)(uint32_t)prot << 32) | (uint32_t)flags,
                  ((uint64_t)(uint32_t)fd << 32) | (((uint64_t)off >> 12) & 0xffffffffu), ra);
        errno = e;
    }
    return r;
}

HT_API void *HT_HOOK(mmap)(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (HT_LIKELY(inert()))
        return raw_mmap(a, len, prot, flags, fd, off);
    return mmap_slow(a, len, prot, flags, fd, off, RA());
}

HT_API void *HT_HOOK(mmap64)(void *a, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias(HT_HOOK_STR(mmap))));

static SLOW int munmap_slow(void *a, size_t len, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        /* dead from the marker on; the time is taken before the call (the
         * range may be mapped again by another thread as soon as it returns),
         * the event written after it (with the result). */
        uint64_t seq = rec_seq_marker();
        uint64_t t = ht_rec_logging ? ht_now() : 0;
        long r = syscall(SYS_munmap, a, len);
        int e = errno;
        if (HT_LIKELY(ht_rec_logging))
            ht_rec_put(HT_K_MUNMAP, seq, t, (uint64_t)(uintptr_t)a, len, (uint64_t)(int64_t)r, 0, ra);
        errno = e;
        return (int)r;
    }
    if (m == HT_PREINIT) {
        long r = syscall(SYS_munmap, a, len);
        int e = errno;
        rec_preinit(HT_K_MUNMAP, a, len, (uint64_t)(int64_t)r, 0, ra);
        errno = e;
        return (int)r;
    }
    if (m == HT_APPLY && atomic_load_explicit(&ht_mapped_live, memory_order_relaxed)) {
        int e = ht_mapped_before((uintptr_t)a, len, 1, 1);
        if (e != 0) {
            errno = -e;
            return -1;
        }
    }
    return (int)syscall(SYS_munmap, a, len);
}

HT_API int HT_HOOK(munmap)(void *a, size_t len)
{
    if (HT_LIKELY(inert()))
        return (int)syscall(SYS_munmap, a, len);
    return munmap_slow(a, len, RA());
}

static SLOW void *mremap_slow(void *old, size_t oldlen, size_t newlen, int flags, void *na,
                              const void *ra)
{
    int m = active_mode();
    if (m == HT_APPLY && atomic_load_explicit(&ht_mapped_live, memory_order_relaxed)) {
        /* mremap cannot span a hugetlb head and its tail, nor cut the head:
         * a backed mapping becomes plain memory first (mapped.c). */
        int e = ht_mapped_before((uintptr_t)old, oldlen ? oldlen : 1, 0, 1);
        if (e == 0 && (flags & MREMAP_FIXED))
            e = ht_mapped_before((uintptr_t)na, newlen, 1, 1);
        if (e != 0) {
            errno = -e;
            return MAP_FAILED;
        }
    }
    void *r = (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, na);
    if (m == HT_RECORD || m == HT_PREINIT) {
        int e = errno;
        rec_after(m, HT_K_MREMAP, r, newlen, (uint64_t)(uintptr_t)old, oldlen, ra);
        errno = e;
    }
    return r;
}

HT_API void *HT_HOOK(mremap)(void *old, size_t oldlen, size_t newlen, int flags, ...)
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

/* mprotect and madvise. Record mode: a RANGE_CALL event (addr, len, arg =
 * call << 32 | prot or advice with call 0 mprotect, 1 madvise; arg2 = the
 * result), so that the planner sees which program mappings get cut. Apply
 * mode: a call that would cut a hugetlb-backed mapping of the program's finds
 * it plain memory (mapped.c). Hints about access patterns need no cut: the
 * kernel's EINVAL for them on hugetlb memory becomes success (the memory is
 * already huge). */
static SLOW int range_call_slow(long nr, void *a, size_t len, int arg, const void *ra)
{
    int m = active_mode();
    if (m == HT_RECORD) {
        uint64_t seq = rec_seq_marker();
        uint64_t t = ht_rec_logging ? ht_now() : 0;
        long r = syscall(nr, a, len, arg);
        int e = errno;
        if (HT_LIKELY(ht_rec_logging))
            ht_rec_put(HT_K_RANGE_CALL, seq, t, (uint64_t)(uintptr_t)a, len,
                       (uint64_t)(nr == SYS_madvise) << 32 | (uint32_t)arg, (uint64_t)(int64_t)r, ra);
        errno = e;
        return (int)r;
    }
    if (m == HT_APPLY && atomic_load_explicit(&ht_mapped_live, memory_order_relaxed)) {
        int hint = nr == SYS_madvise && (arg == MADV_NORMAL || arg == MADV_RANDOM || arg == MADV_SEQUENTIAL ||
                                         arg == MADV_WILLNEED || arg == MADV_HUGEPAGE || arg == MADV_NOHUGEPAGE ||
                                         arg == 25 /* MADV_COLLAPSE */);
        /* MADV_FREE lets the kernel keep the pages as they are: on our
         * hugetlb memory nothing is done (no copy to get the program's
         * promise right). */
        if (nr == SYS_madvise && arg == MADV_FREE && ht_mapped_before((uintptr_t)a, len, 0, -1) == 1)
            return 0;
        if (!hint) {
            int e = ht_mapped_before((uintptr_t)a, len, 0, 0);
            if (e != 0) {
                errno = -e;
                return -1;
            }
        }
    }
    return (int)syscall(nr, a, len, arg);
}

HT_API int HT_HOOK(mprotect)(void *a, size_t len, int prot)
{
    if (HT_LIKELY(inert()))
        return (int)syscall(SYS_mprotect, a, len, prot);
    return range_call_slow(SYS_mprotect, a, len, prot, RA());
}

HT_API int HT_HOOK(madvise)(void *a, size_t len, int advice)
{
    if (HT_LIKELY(inert()))
        return (int)syscall(SYS_madvise, a, len, advice);
    return range_call_slow(SYS_madvise, a, len, advice, RA());
}

/* ---------------- fork and exec (record mode: FORK and EXEC events) ----------------
 *
 * glibc routes execv, execl, execvp, ... to its internal __execve/__execvpe,
 * not through the PLT, so each entry point is hooked. In every mode the call
 * goes to the next definition (dlsym RTLD_NEXT). In record mode, before an
 * exec the log gets what it would get at exit (an exec that succeeds runs no
 * destructors: snapshot, every thread's buffer, the summary) and an EXEC event;
 * the new image learns its exec generation from HUGETUNE_EXEC_GEN so that its
 * log does not overwrite this one (docs/formats.md §1). A vfork child shares
 * our memory and must not touch the log: it is recognised by its pid. */

static void *next_fn(void *_Atomic *cache, const char *name)
{
    void *f = atomic_load_explicit(cache, memory_order_acquire);
    if (!f) {
        ht_tls.guard++; /* dlsym's allocations are the library's own */
        f = dlsym(RTLD_NEXT, name);
        ht_tls.guard--;
        atomic_store_explicit(cache, f, memory_order_release);
    }
    return f;
}

#define NEXT(type, name)                                                       \
    static void *_Atomic next_##name;                                          \
    type f_##name = (type)next_fn(&next_##name, #name);                        \
    if (!f_##name) {                                                           \
        errno = ENOSYS;                                                        \
        return -1;                                                             \
    }

typedef pid_t (*fork_t)(void);
typedef int (*execve_t)(const char *, char *const[], char *const[]);
typedef int (*execv_t)(const char *, char *const[]);
typedef int (*fexecve_t)(int, char *const[], char *const[]);
typedef int (*execveat_t)(int, const char *, char *const[], char *const[], int);

/* Record mode's FORK event, in the parent of a fork-like call (-1: failed). */
static void rec_fork(pid_t pid, const void *ra)
{
    int e = errno;
    int m = active_mode();
    if (m == HT_RECORD || m == HT_PREINIT)
        rec_after(m, HT_K_FORK, NULL, 0, (uint64_t)(int64_t)pid, 0, ra);
    errno = e;
}

static SLOW pid_t fork_slow(fork_t f, const void *ra)
{
    pid_t pid = f();
    if (pid != 0)
        rec_fork(pid, ra);
    return pid;
}

HT_API pid_t fork(void)
{
    NEXT(fork_t, fork);
    if (HT_LIKELY(inert()))
        return f_fork();
    return fork_slow(f_fork, RA());
}

/* _Fork (glibc >= 2.34) and clone without CLONE_VM copy the address space
 * like fork but run no atfork handlers: the child would share the parent's
 * private hugetlb pages copy-on-write (SIGBUS when the pool cannot supply the
 * copy) and its log state. Program calls to them get our fork handlers, as
 * fork's do. glibc's own fork, pthread_create and posix_spawn reach the
 * kernel through internal aliases and never come here. A call made from a
 * signal handler that interrupted the library on this thread (guard set)
 * passes through: the handlers take the library's locks. Raw clone/fork
 * system calls cannot be seen (runtime/README.md, limits). */
typedef int (*clone_fn_t)(void *);
typedef int (*clone_t)(clone_fn_t, void *, int, void *, ...);

static int handlers_apply(void)
{
    int s = ht_state_get();
    return (s == HT_RECORD || s == HT_APPLY) && !ht_tls.guard;
}

HT_API pid_t _Fork(void)
{
    NEXT(fork_t, _Fork);
    if (HT_LIKELY(inert()) || !handlers_apply())
        return f__Fork();
    const void *ra = RA();
    ht_atfork_prepare();
    pid_t pid = f__Fork();
    int e = errno;
    if (pid == 0) {
        ht_atfork_child();
    } else {
        ht_atfork_parent();
        rec_fork(pid, ra);
    }
    errno = e;
    return pid;
}

struct clone_tramp {
    clone_fn_t fn;
    void *arg;
};

/* Runs in the child, on the caller's stack, in its own copy of the parent's
 * memory: the clone_tramp in the parent's frame was copied with it. */
static int clone_child(void *p)
{
    struct clone_tramp t = *(struct clone_tramp *)p;
    ht_atfork_child();
    return t.fn(t.arg);
}

HT_API int clone(clone_fn_t fn, void *stack, int flags, void *arg, ...)
{
    /* glibc's clone reads these from registers whatever the flags say. */
    va_list ap;
    va_start(ap, arg);
    pid_t *ptid = va_arg(ap, pid_t *);
    void *tls = va_arg(ap, void *);
    pid_t *ctid = va_arg(ap, pid_t *);
    va_end(ap);
    NEXT(clone_t, clone);
    if (HT_LIKELY(inert()) || (flags & CLONE_VM) || !fn || !handlers_apply())
        return f_clone(fn, stack, flags, arg, ptid, tls, ctid);
    const void *ra = RA();
    struct clone_tramp t = {fn, arg};
    ht_atfork_prepare();
    int pid = f_clone(clone_child, stack, flags, &t, ptid, tls, ctid);
    int e = errno;
    ht_atfork_parent();
    rec_fork(pid, ra);
    errno = e;
    return pid;
}

/* _exit and _Exit leave without destructors (dash, many daemons' children,
 * programs' signal handlers): the summary and the log's end are written
 * here first. Not in a vfork child or a child of a raw clone, which share or
 * inherited our state without being us (their pid is not ours), nor from a
 * signal handler that interrupted the library. exit() reaches the kernel
 * through glibc's internal alias, after our destructor. */
typedef void (*exit_t)(int);

static void finish_before_exit(void)
{
    if (ht_sys_getpid() == ht_cfg.pid && handlers_apply())
        ht_finish();
}

/* The summary first, then the next definition of `name` (the kernel's
 * exit_group if there is none). */
static __attribute__((noreturn)) void exit_via(void *_Atomic *cache, const char *name, int status)
{
    exit_t f = (exit_t)next_fn(cache, name);
    finish_before_exit();
    if (f)
        f(status);
    for (;;)
        syscall(SYS_exit_group, status);
}

HT_API __attribute__((noreturn)) void _exit(int status)
{
    static void *_Atomic next__exit;
    exit_via(&next__exit, "_exit", status);
}

HT_API __attribute__((noreturn)) void _Exit(int status)
{
    static void *_Atomic next__Exit;
    exit_via(&next__Exit, "_Exit", status);
}


/* Follow mode (follow.c): a launcher's exec is reported before it happens, with
 * the file searched in PATH as execvp does (the caller's PATH, as glibc's). */
static SLOW void follow_exec(const char *file, int search, char *const argv[], char *const envp[])
{
    if (!file)
        return;
    if (!search || strchr(file, '/') || !*file) {
        ht_follow_exec(file, argv, envp);
        return;
    }
    const char *path = ht_getenv("PATH");
    if (!path || !*path)
        path = "/bin:/usr/bin";
    char buf[HT_PATH_MAX];
    for (const char *d = path;;) {
        const char *e = strchr(d, ':');
        size_t n = e ? (size_t)(e - d) : strlen(d);
        struct ht_buf b;
        hb_init(&b, buf, sizeof buf);
        hb_putn(&b, n ? d : ".", n ? n : 1);
        hb_putc(&b, '/');
        hb_puts(&b, file);
        if (!b.trunc && access(buf, X_OK) == 0) {
            ht_follow_exec(buf, argv, envp);
            return;
        }
        if (!e)
            break;
        d = e + 1;
    }
    ht_follow_exec(file, argv, envp);
}

#define FOLLOW(file, search, argv, envp)                                       \
    do {                                                                       \
        if (HT_UNLIKELY(ht_follow))                                            \
            follow_exec(file, search, argv, envp);                             \
    } while (0)

struct exec_ctx {
    int active;
    unsigned gen;
    void *map;
    size_t maplen;
    const char *path;
    const void *ra;
};

/* Returns the environment to pass to the exec. */
static SLOW char *const *exec_begin(struct exec_ctx *c, const char *path, char *const envp[],
                                    const void *ra)
{
    c->active = 0;
    c->map = NULL;
    if (active_mode() != HT_RECORD || ht_sys_getpid() != ht_cfg.pid)
        return envp;
    c->active = 1;
    c->gen = ht_cfg.exec_gen + 1;
    c->path = path ? path : "";
    c->ra = ra;
    ht_rec_exec_before(c->path, c->gen, ra);
    return ht_rec_exec_env(envp, c->gen, &c->map, &c->maplen);
}

/* The exec returned, i.e. failed. */
static SLOW void exec_end(struct exec_ctx *c)
{
    int e = errno;
    if (c->active) {
        ht_rec_exec_failed(c->path, c->gen, e, c->ra);
        if (c->map)
            ht_sys_munmap(c->map, c->maplen);
    }
    errno = e;
}

static SLOW int execve_slow(execve_t f, const char *path, char *const argv[], char *const envp[],
                            const void *ra)
{
    struct exec_ctx c;
    char *const *env = exec_begin(&c, path, envp, ra);
    int r = f(path, argv, env);
    exec_end(&c);
    return r;
}

HT_API int execve(const char *path, char *const argv[], char *const envp[])
{
    NEXT(execve_t, execve);
    if (HT_LIKELY(inert())) {
        FOLLOW(path, 0, argv, envp);
        return f_execve(path, argv, envp);
    }
    return execve_slow(f_execve, path, argv, envp, RA());
}

HT_API int execv(const char *path, char *const argv[])
{
    if (HT_LIKELY(inert())) {
        NEXT(execv_t, execv);
        FOLLOW(path, 0, argv, environ);
        return f_execv(path, argv);
    }
    NEXT(execve_t, execve);
    return execve_slow(f_execve, path, argv, environ, RA());
}

/* execvp/execvpe search PATH: the next execvpe does that, with our envp. */
HT_API int execvpe(const char *file, char *const argv[], char *const envp[])
{
    NEXT(execve_t, execvpe);
    if (HT_LIKELY(inert())) {
        FOLLOW(file, 1, argv, envp);
        return f_execvpe(file, argv, envp);
    }
    return execve_slow(f_execvpe, file, argv, envp, RA());
}

HT_API int execvp(const char *file, char *const argv[])
{
    if (HT_LIKELY(inert())) {
        NEXT(execv_t, execvp);
        FOLLOW(file, 1, argv, environ);
        return f_execvp(file, argv);
    }
    NEXT(execve_t, execvpe);
    return execve_slow(f_execvpe, file, argv, environ, RA());
}

/* execl family: the argument list as an array (what glibc does too). */
#define ARGV_FROM_VA(arg0, ap, argv, n)                                        \
    size_t n = 1;                                                              \
    va_start(ap, arg0);                                                        \
    while (va_arg(ap, char *))                                                 \
        n++;                                                                   \
    va_end(ap);                                                                \
    char *argv[n + 1];                                                         \
    argv[0] = (char *)(arg0);                                                  \
    va_start(ap, arg0);                                                        \
    for (size_t i_ = 1; i_ <= n; i_++)                                         \
        argv[i_] = va_arg(ap, char *);

HT_API int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    ARGV_FROM_VA(arg, ap, argv, n)
    va_end(ap);
    NEXT(execve_t, execve);
    if (HT_LIKELY(inert())) {
        FOLLOW(path, 0, argv, environ);
        return f_execve(path, argv, environ);
    }
    return execve_slow(f_execve, path, argv, environ, RA());
}

HT_API int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    ARGV_FROM_VA(arg, ap, argv, n)
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    NEXT(execve_t, execve);
    if (HT_LIKELY(inert())) {
        FOLLOW(path, 0, argv, envp);
        return f_execve(path, argv, envp);
    }
    return execve_slow(f_execve, path, argv, envp, RA());
}

HT_API int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    ARGV_FROM_VA(arg, ap, argv, n)
    va_end(ap);
    NEXT(execve_t, execvpe);
    if (HT_LIKELY(inert())) {
        FOLLOW(file, 1, argv, environ);
        return f_execvpe(file, argv, environ);
    }
    return execve_slow(f_execvpe, file, argv, environ, RA());
}

HT_API int fexecve(int fd, char *const argv[], char *const envp[])
{
    NEXT(fexecve_t, fexecve);
    char path[32];
    struct ht_buf b;
    hb_init(&b, path, sizeof path);
    hb_puts(&b, "/proc/self/fd/");
    hb_i64(&b, fd);
    if (HT_LIKELY(inert())) {
        FOLLOW(path, 0, argv, envp);
        return f_fexecve(fd, argv, envp);
    }
    struct exec_ctx c;
    char *const *env = exec_begin(&c, path, envp, RA());
    int r = f_fexecve(fd, argv, env);
    exec_end(&c);
    return r;
}

HT_API int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    NEXT(execveat_t, execveat);
    if (HT_LIKELY(inert())) {
        FOLLOW(path, 0, argv, envp);
        return f_execveat(dirfd, path, argv, envp, flags);
    }
    struct exec_ctx c;
    char *const *env = exec_begin(&c, path, envp, RA());
    int r = f_execveat(dirfd, path, argv, env, flags);
    exec_end(&c);
    return r;
}
