/* sangate.c - the entry points of the sanitizer build of the library (ASan +
 * UBSan; `make stress-asan`), compiled WITHOUT instrumentation.
 *
 * Preloaded, the library comes before libasan in the lookup order, so the
 * sanitizer runtime's own initialization (dlsym, dlerror buffers) calls our
 * malloc before ASan's shadow memory exists; instrumented code run then
 * crashes on its first shadow check. In that build hooks.c is compiled with
 * HT_SAN_GATE, which renames its malloc-family and mmap-family hooks to
 * ht_san_*; the functions here take the real names and, until ASan is up
 * (our first constructor, which runs after libasan's), serve allocations from
 * a static bump arena (never freed; at most a few kB at start-up) and mmap
 * calls with raw system calls. Invariant: no pointer from this arena reaches
 * the instrumented code; free/realloc/malloc_usable_size recognise it first.
 * Not part of the production library. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

void *ht_san_malloc(size_t);
void ht_san_free(void *);
void *ht_san_calloc(size_t, size_t);
void *ht_san_realloc(void *, size_t);
void *ht_san_reallocarray(void *, size_t, size_t);
void *ht_san_memalign(size_t, size_t);
void *ht_san_aligned_alloc(size_t, size_t);
void *ht_san_valloc(size_t);
void *ht_san_pvalloc(size_t);
int ht_san_posix_memalign(void **, size_t, size_t);
size_t ht_san_malloc_usable_size(void *);
void *ht_san_mmap(void *, size_t, int, int, int, off_t);
int ht_san_munmap(void *, size_t);
void *ht_san_mremap(void *, size_t, size_t, int, ...);
void __asan_init(void);

static _Atomic int g_ready;
#define EARLY_BYTES (1u << 20)
static _Alignas(4096) unsigned char g_early[EARLY_BYTES];
static _Atomic size_t g_used;

__attribute__((constructor(101))) static void gate_open(void)
{
    __asan_init(); /* idempotent: done by libasan's own initializer already */
    atomic_store(&g_ready, 1);
}

static int ready(void) { return atomic_load_explicit(&g_ready, memory_order_acquire); }

static int early_owns(const void *p) { return (uintptr_t)p - (uintptr_t)g_early < EARLY_BYTES; }

static void *early_alloc(size_t n, size_t align)
{
    if (align < 16)
        align = 16;
    if (align > 4096 || (align & (align - 1)) || n > EARLY_BYTES) {
        errno = ENOMEM;
        return NULL;
    }
    size_t cur = atomic_load(&g_used);
    for (;;) {
        size_t start = (cur + 16 + align - 1) & ~(align - 1);
        size_t end = start + ((n + 15) & ~(size_t)15);
        if (end > EARLY_BYTES) {
            errno = ENOMEM;
            return NULL;
        }
        if (atomic_compare_exchange_weak(&g_used, &cur, end)) {
            *(size_t *)(g_early + start - 16) = n;
            return g_early + start; /* static storage: already zero */
        }
    }
}

static size_t early_size(const void *p) { return ((const size_t *)p)[-2]; }

API void *malloc(size_t n) { return ready() ? ht_san_malloc(n) : early_alloc(n, 16); }

API void free(void *p)
{
    if (!p || early_owns(p))
        return;
    ht_san_free(p);
}

API void *calloc(size_t nm, size_t sz)
{
    if (ready())
        return ht_san_calloc(nm, sz);
    size_t n;
    if (__builtin_mul_overflow(nm, sz, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return early_alloc(n, 16);
}

API void *realloc(void *p, size_t n)
{
    if (p && early_owns(p)) {
        void *q = malloc(n ? n : 1);
        if (q) {
            size_t old = early_size(p);
            memcpy(q, p, old < n ? old : n);
        }
        return q;
    }
    if (!ready())
        return p ? NULL : early_alloc(n, 16);
    return ht_san_realloc(p, n);
}

API void *reallocarray(void *p, size_t nm, size_t sz)
{
    size_t n;
    if (__builtin_mul_overflow(nm, sz, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return (p && early_owns(p)) || !ready() ? realloc(p, n) : ht_san_reallocarray(p, nm, sz);
}

API void *memalign(size_t a, size_t n) { return ready() ? ht_san_memalign(a, n) : early_alloc(n, a); }
API void *aligned_alloc(size_t a, size_t n) { return ready() ? ht_san_aligned_alloc(a, n) : early_alloc(n, a); }
API void *valloc(size_t n) { return ready() ? ht_san_valloc(n) : early_alloc(n, 4096); }
API void *pvalloc(size_t n) { return ready() ? ht_san_pvalloc(n) : early_alloc((n + 4095) & ~(size_t)4095, 4096); }

API int posix_memalign(void **out, size_t a, size_t n)
{
    if (ready())
        return ht_san_posix_memalign(out, a, n);
    void *p = early_alloc(n, a);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

API size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    return early_owns(p) ? early_size(p) : ht_san_malloc_usable_size(p);
}

API void *mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (ready())
        return ht_san_mmap(a, len, prot, flags, fd, off);
    return (void *)syscall(SYS_mmap, a, len, prot, flags, fd, off);
}

API void *mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off) { return mmap(a, len, prot, flags, fd, off); }

API int munmap(void *a, size_t len)
{
    return ready() ? ht_san_munmap(a, len) : (int)syscall(SYS_munmap, a, len);
}

API void *mremap(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
    void *na = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        na = va_arg(ap, void *);
        va_end(ap);
    }
    if (ready())
        return ht_san_mremap(old, oldlen, newlen, flags, na);
    return (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, na);
}
