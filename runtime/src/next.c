/* next.c - the allocator behind us.
 *
 * Forwarding to glibc's __libc_* entry points would bypass an allocator the
 * program brings: redis-server on Debian links jemalloc, so its malloc would
 * never run while jemalloc-only calls (mallctl, nallocx, its
 * malloc_usable_size) still would, and pointers would cross allocators: a
 * crash at start-up. So the library forwards to the next definition of each
 * function in the symbol lookup order, found with dlsym(RTLD_NEXT) at the very
 * first hooked call, before anything is forwarded.
 *
 * dlsym may allocate. Those calls (made by the resolving thread) are served
 * from a static bootstrap arena whose blocks are never freed; other threads
 * wait until resolution is done. If resolution fails, glibc's entry points are
 * used, which is what a program without its own allocator gets anyway. */
#include "next.h"

#include "ht.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static size_t libc_usable_size(void *p);

struct ht_next ht_next = {
    .malloc = __libc_malloc,
    .free = __libc_free,
    .calloc = __libc_calloc,
    .realloc = __libc_realloc,
    .memalign = __libc_memalign,
    .valloc = __libc_valloc,
    .pvalloc = __libc_pvalloc,
    .usable_size = libc_usable_size,
};

_Atomic int ht_next_state;
static __thread int t_resolving __attribute__((tls_model("initial-exec")));
static int g_foreign;
static char g_module[256];

/* Until dlsym found glibc's malloc_usable_size (it has no __libc_ name): read
 * the chunk header (size field before the user pointer; bit 1 = mmapped). */
static size_t libc_usable_size(void *p)
{
    size_t sz = ((size_t *)p)[-1];
    return (sz & ~(size_t)7) - ((sz & 2) ? 16 : 8);
}

/* ---- bootstrap arena ---- */

#define BOOT_BYTES HT_BOOT_BYTES
_Alignas(4096) unsigned char ht_boot_mem[HT_BOOT_BYTES];
#define g_boot ht_boot_mem
static _Atomic size_t g_boot_used;

/* Each block is preceded by its size (16 bytes, keeps 16-byte alignment). */
void *ht_boot_alloc(size_t n, size_t align)
{
    if (align < 16)
        align = 16;
    if (align > 4096 || (align & (align - 1)) || n > BOOT_BYTES) {
        errno = ENOMEM;
        return NULL;
    }
    size_t cur = atomic_load(&g_boot_used);
    for (;;) {
        size_t start = ((cur + 16 + align - 1) & ~(align - 1));
        size_t end = start + ((n + 15) & ~(size_t)15);
        if (end > BOOT_BYTES) {
            errno = ENOMEM;
            return NULL;
        }
        if (atomic_compare_exchange_weak(&g_boot_used, &cur, end)) {
            *(size_t *)(g_boot + start - 16) = n;
            return g_boot + start;
        }
    }
}

size_t ht_boot_size(const void *p)
{
    return *(const size_t *)((const unsigned char *)p - 16);
}

void *ht_fwd_realloc_slow(void *p, size_t n)
{
    if (!ht_boot_owns(p))
        return ht_next_usable() ? ht_next.realloc(p, n) : NULL;
    /* A bootstrap block moves to the real allocator (or another block). */
    void *q = ht_fwd_malloc(n ? n : 1);
    if (q) {
        size_t old = ht_boot_size(p);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}

/* ---- resolution ---- */

static void *next_sym(const char *name)
{
    dlerror();
    return dlsym(RTLD_NEXT, name);
}

/* For allocators without some entry points: build them on memalign. */
static void *(*g_memalign)(size_t, size_t);
static void *valloc_on_memalign(size_t n) { return g_memalign((size_t)getpagesize(), n); }
static void *pvalloc_on_memalign(size_t n)
{
    size_t pg = (size_t)getpagesize();
    if (n > SIZE_MAX - pg) {
        errno = ENOMEM;
        return NULL;
    }
    return g_memalign(pg, n ? (n + pg - 1) & ~(pg - 1) : pg);
}

static void resolve(void)
{
    struct ht_next n = ht_next;
    void *f;
    if ((f = next_sym("malloc")))
        n.malloc = (void *(*)(size_t))f;
    if ((f = next_sym("free")))
        n.free = (void (*)(void *))f;
    if ((f = next_sym("calloc")))
        n.calloc = (void *(*)(size_t, size_t))f;
    if ((f = next_sym("realloc")))
        n.realloc = (void *(*)(void *, size_t))f;
    if ((f = next_sym("malloc_usable_size")))
        n.usable_size = (size_t(*)(void *))f;
    g_foreign = n.malloc != __libc_malloc;
    if (g_foreign) {
        /* The program's allocator must serve every entry point: never mix. */
        f = next_sym("memalign");
        if (!f)
            f = next_sym("aligned_alloc");
        if (f) {
            n.memalign = g_memalign = (void *(*)(size_t, size_t))f;
            f = next_sym("valloc");
            n.valloc = f ? (void *(*)(size_t))f : valloc_on_memalign;
            f = next_sym("pvalloc");
            n.pvalloc = f ? (void *(*)(size_t))f : pvalloc_on_memalign;
        } else {
            /* An allocator with malloc but no aligned entry point: keep the
             * whole family consistent with what we found... except alignment,
             * which only glibc offers then; mark it. */
            ht_stats_error("the program's allocator has no memalign/aligned_alloc", "");
        }
        Dl_info info;
        if (dladdr((void *)n.malloc, &info) && info.dli_fname) {
            size_t len = strlen(info.dli_fname);
            if (len >= sizeof g_module)
                len = sizeof g_module - 1;
            memcpy(g_module, info.dli_fname, len);
            g_module[len] = 0;
        }
    }
    ht_next = n;
}

int ht_next_resolve(void)
{
    int expect = HT_NEXT_UNRESOLVED;
    if (atomic_compare_exchange_strong(&ht_next_state, &expect, HT_NEXT_RESOLVING)) {
        t_resolving = 1;
        resolve();
        t_resolving = 0;
        atomic_store_explicit(&ht_next_state, HT_NEXT_READY, memory_order_release);
        return 0;
    }
    if (expect == HT_NEXT_READY)
        return 0;
    if (t_resolving)
        return 1; /* dlsym allocating inside resolution */
    while (atomic_load_explicit(&ht_next_state, memory_order_acquire) != HT_NEXT_READY)
        sched_yield();
    return 0;
}

int ht_next_foreign(void) { return g_foreign; }
const char *ht_next_module(void) { return g_module; }
