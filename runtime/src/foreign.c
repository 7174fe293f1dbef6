/* foreign.c - the pointer-taking extended API of foreign allocators.
 *
 * Why: a program that links jemalloc (redis-server on Debian) or tcmalloc may
 * hand a pointer it got from malloc -- possibly an owned block or an arena
 * object of ours -- to sdallocx/dallocx/rallocx/xallocx/sallocx (jemalloc) or
 * tc_free/tc_free_sized/tc_realloc/tc_malloc_size (tcmalloc). Those calls
 * would reach the allocator with a pointer it never made. The library
 * therefore exports them too: our pointers are handled here, every other one
 * goes to the next definition in the lookup order (dlsym(RTLD_NEXT), resolved
 * once, like next.c). When no library after us defines the function (only a
 * weak reference in the program), the standard-API equivalent is used, which
 * has the same meaning for the pointer. Allocation-only entry points
 * (mallocx, nallocx, tc_malloc, ...) are not interposed: they never see our
 * pointers. In record mode these calls are forwarded without a log record. */
#include "apply_int.h"
#include "next.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#define RA() __builtin_return_address(0)

static struct {
    void (*sdallocx)(void *, size_t, int);
    void (*dallocx)(void *, int);
    void *(*rallocx)(void *, size_t, int);
    size_t (*xallocx)(void *, size_t, size_t, int);
    size_t (*sallocx)(const void *, int);
    void *(*mallocx)(size_t, int);
    void (*tc_free)(void *);
    void (*tc_free_sized)(void *, size_t);
    void *(*tc_realloc)(void *, size_t);
    size_t (*tc_malloc_size)(void *);
} g_fx;
static _Atomic int g_state; /* 0 unresolved, 1 resolving, 2 ready */
static __thread int t_resolving __attribute__((tls_model("initial-exec")));

static void *sym(const char *n)
{
    dlerror();
    return dlsym(RTLD_NEXT, n);
}

void ht_foreign_resolve(void)
{
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_state, &expect, 1)) {
        while (!t_resolving && atomic_load(&g_state) != 2)
            sched_yield();
        return;
    }
    t_resolving = 1;
    ht_tls.guard++;
    g_fx.sdallocx = (void (*)(void *, size_t, int))sym("sdallocx");
    g_fx.dallocx = (void (*)(void *, int))sym("dallocx");
    g_fx.rallocx = (void *(*)(void *, size_t, int))sym("rallocx");
    g_fx.xallocx = (size_t(*)(void *, size_t, size_t, int))sym("xallocx");
    g_fx.sallocx = (size_t(*)(const void *, int))sym("sallocx");
    g_fx.mallocx = (void *(*)(size_t, int))sym("mallocx");
    g_fx.tc_free = (void (*)(void *))sym("tc_free");
    g_fx.tc_free_sized = (void (*)(void *, size_t))sym("tc_free_sized");
    g_fx.tc_realloc = (void *(*)(void *, size_t))sym("tc_realloc");
    g_fx.tc_malloc_size = (size_t(*)(void *))sym("tc_malloc_size");
    ht_tls.guard--;
    t_resolving = 0;
    atomic_store(&g_state, 2);
}

static inline void ready(void)
{
    if (HT_UNLIKELY(ht_state_get() == HT_UNINIT))
        ht_init_slow();
    if (HT_UNLIKELY(atomic_load_explicit(&g_state, memory_order_acquire) != 2))
        ht_foreign_resolve();
}

/* Is p ours (an owned block or an arena object)? Only in apply mode. */
static inline int ours(const void *p)
{
    if (ht_state_get() != HT_APPLY || p == NULL)
        return 0;
    if (ht_arena_owns(p))
        return 1;
    struct ht_reg_entry e;
    return ((uintptr_t)p & (HT_HUGE_2M - 1)) == 0 && ht_owned_lookup((void *)p, &e);
}

static size_t our_usable(void *p)
{
    size_t n = 0;
    ht_apply_usable_size(p, &n);
    return n;
}

HT_API void sdallocx(void *p, size_t size, int flags)
{
    ready();
    if (ours(p)) {
        ht_apply_free(p);
        return;
    }
    if (g_fx.sdallocx)
        g_fx.sdallocx(p, size, flags);
    else
        ht_fwd_free(p);
}

HT_API void dallocx(void *p, int flags)
{
    ready();
    if (ours(p)) {
        ht_apply_free(p);
        return;
    }
    if (g_fx.dallocx)
        g_fx.dallocx(p, flags);
    else
        ht_fwd_free(p);
}

#define MALLOCX_LG_ALIGN_MASK 0x3f
#define MALLOCX_ZERO 0x40

HT_API void *rallocx(void *p, size_t size, int flags)
{
    ready();
    if (!ours(p)) {
        if (g_fx.rallocx)
            return g_fx.rallocx(p, size, flags);
        return ht_fwd_realloc(p, size ? size : 1);
    }
    size_t old = our_usable(p);
    size_t align = (flags & MALLOCX_LG_ALIGN_MASK) ? (size_t)1 << (flags & MALLOCX_LG_ALIGN_MASK) : 0;
    void *q;
    if (size == 0)
        size = 1; /* rallocx never frees */
    if (align > HT_HUGE_2M) {
        q = ht_apply_memalign(align, size, RA(), HT_K_MEMALIGN);
        if (q) {
            memcpy(q, p, old < size ? old : size);
            ht_apply_free(p);
        }
    } else {
        q = ht_apply_realloc(p, size, RA());
        if (q && align > 16 && ((uintptr_t)q & (align - 1))) {
            /* Served by the allocator below the threshold: realign there. */
            void *r = g_fx.mallocx ? g_fx.mallocx(size, flags & ~MALLOCX_ZERO) : ht_fwd_memalign(align, size);
            if (r) {
                memcpy(r, q, size);
                if (!ht_apply_free(q))
                    ht_fwd_free(q);
            }
            q = r;
        }
    }
    if (q && (flags & MALLOCX_ZERO) && size > old)
        memset((char *)q + old, 0, size - old);
    return q;
}

HT_API size_t xallocx(void *p, size_t size, size_t extra, int flags)
{
    ready();
    if (ours(p))
        return our_usable(p); /* no in-place resize: the real size stays */
    if (g_fx.xallocx)
        return g_fx.xallocx(p, size, extra, flags);
    return ht_fwd_usable_size(p);
}

HT_API size_t sallocx(const void *p, int flags)
{
    ready();
    if (ours(p))
        return our_usable((void *)p);
    if (g_fx.sallocx)
        return g_fx.sallocx(p, flags);
    return ht_fwd_usable_size((void *)p);
}

HT_API void tc_free(void *p)
{
    ready();
    if (ours(p)) {
        ht_apply_free(p);
        return;
    }
    if (g_fx.tc_free)
        g_fx.tc_free(p);
    else
        ht_fwd_free(p);
}

HT_API void tc_free_sized(void *p, size_t size)
{
    ready();
    if (ours(p)) {
        ht_apply_free(p);
        return;
    }
    if (g_fx.tc_free_sized)
        g_fx.tc_free_sized(p, size);
    else
        ht_fwd_free(p);
}

HT_API void *tc_realloc(void *p, size_t size)
{
    ready();
    if (ours(p))
        return ht_apply_realloc(p, size, RA());
    if (g_fx.tc_realloc)
        return g_fx.tc_realloc(p, size);
    return ht_fwd_realloc(p, size);
}

HT_API size_t tc_malloc_size(void *p)
{
    ready();
    if (ours(p))
        return our_usable(p);
    if (g_fx.tc_malloc_size)
        return g_fx.tc_malloc_size(p);
    return p ? ht_fwd_usable_size(p) : 0;
}
