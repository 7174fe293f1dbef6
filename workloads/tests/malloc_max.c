/* Test helper (LD_PRELOAD): reports the largest malloc-family request of a process
 * and how many requests were >= 64 KiB, on stderr at exit.  Used to check that
 * --place heap-small never makes a large allocation. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static _Atomic size_t max_req, n_req, n_big;

static void note(size_t n)
{
    size_t m = atomic_load(&max_req);
    while (n > m && !atomic_compare_exchange_weak(&max_req, &m, n))
        ;
    atomic_fetch_add(&n_req, 1);
    if (n >= 65536)
        atomic_fetch_add(&n_big, 1);
}

void *malloc(size_t n) { note(n); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { note(a * b); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { note(n); return __libc_realloc(p, n); }
void *memalign(size_t al, size_t n) { note(n); return __libc_memalign(al, n); }
void *aligned_alloc(size_t al, size_t n) { note(n); return __libc_memalign(al, n); }
int posix_memalign(void **pp, size_t al, size_t n)
{
    note(n);
    void *p = __libc_memalign(al, n);
    if (!p)
        return 12;
    *pp = p;
    return 0;
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "malloc_max: largest=%zu requests=%zu big(>=64KiB)=%zu\n",
            (size_t)max_req, (size_t)n_req, (size_t)n_big);
}
