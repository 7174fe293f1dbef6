/* next.h - forwarding to the allocator behind us (see next.c).
 *
 * Every malloc-family call the library does not serve itself goes to the next
 * definition in the symbol lookup order: glibc's, or the allocator the program
 * brings (jemalloc, tcmalloc, mimalloc linked in). Never straight to glibc. */
#ifndef HT_NEXT_H
#define HT_NEXT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

struct ht_next {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*usable_size)(void *);
};
extern struct ht_next ht_next;

enum { HT_NEXT_UNRESOLVED = 0, HT_NEXT_RESOLVING, HT_NEXT_READY };
extern _Atomic int ht_next_state;

/* Resolves the next allocator (once), or waits for the thread resolving it.
 * Returns 1 if the calling thread is the one resolving (it must use the
 * bootstrap arena: dlsym allocates). */
int ht_next_resolve(void);
/* 1 when the allocator behind us is not glibc's. */
int ht_next_foreign(void);
/* The module that defines it (for the summary); "" until known. */
const char *ht_next_module(void);

/* The bootstrap arena: serves allocations made while resolving. */
void *ht_boot_alloc(size_t n, size_t align);
#define HT_BOOT_BYTES (256 * 1024)
extern unsigned char ht_boot_mem[HT_BOOT_BYTES];
/* Inline: free() checks it on every call. */
static inline int ht_boot_owns(const void *p)
{
    return (uintptr_t)p - (uintptr_t)ht_boot_mem < HT_BOOT_BYTES;
}
size_t ht_boot_size(const void *p);

/* 1: forward now; 0: the caller is resolving and must use the bootstrap arena. */
static inline int ht_next_usable(void)
{
    if (__builtin_expect(atomic_load_explicit(&ht_next_state, memory_order_acquire) == HT_NEXT_READY, 1))
        return 1;
    return !ht_next_resolve();
}

static inline void *ht_fwd_malloc(size_t n)
{
    return ht_next_usable() ? ht_next.malloc(n) : ht_boot_alloc(n, 16);
}

static inline void *ht_fwd_calloc(size_t nm, size_t sz)
{
    size_t n;
    if (__builtin_mul_overflow(nm, sz, &n))
        return ht_next_usable() ? ht_next.calloc(nm, sz) : NULL;
    /* The bootstrap arena is static memory, zero until handed out. */
    return ht_next_usable() ? ht_next.calloc(nm, sz) : ht_boot_alloc(n, 16);
}

static inline void *ht_fwd_memalign(size_t align, size_t n)
{
    return ht_next_usable() ? ht_next.memalign(align, n) : ht_boot_alloc(n, align);
}

static inline void *ht_fwd_valloc(size_t n)
{
    return ht_next_usable() ? ht_next.valloc(n) : ht_boot_alloc(n, 4096);
}

static inline void *ht_fwd_pvalloc(size_t n)
{
    return ht_next_usable() ? ht_next.pvalloc(n) : ht_boot_alloc((n + 4095) & ~(size_t)4095, 4096);
}

static inline void ht_fwd_free(void *p)
{
    if (__builtin_expect(ht_boot_owns(p), 0))
        return; /* bootstrap blocks live for the whole process */
    if (p)
        ht_next.free(p);
}

void *ht_fwd_realloc_slow(void *p, size_t n);
static inline void *ht_fwd_realloc(void *p, size_t n)
{
    if (__builtin_expect(ht_boot_owns(p), 0) || !ht_next_usable())
        return ht_fwd_realloc_slow(p, n);
    return ht_next.realloc(p, n);
}

static inline size_t ht_fwd_usable_size(void *p)
{
    if (!p)
        return 0;
    if (__builtin_expect(ht_boot_owns(p), 0))
        return ht_boot_size(p);
    return ht_next.usable_size(p);
}

#pragma GCC visibility pop

#endif
