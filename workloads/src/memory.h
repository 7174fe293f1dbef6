/* Placement and page backing of the workload's memory (--place, --page). */
#ifndef HTW_MEMORY_H
#define HTW_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* A big contiguous buffer: heap-large (malloc, or mmap for a non-default --page) or
 * a slice of the static .bss buffer. */
struct bigbuf {
    void *alloc;       /* what malloc/mmap returned, or the slice of static_buf */
    size_t map_len;    /* mmap length (for munmap); 0 if not mmap'd */
    int kind;
    char *base;        /* first 64-byte aligned byte of the buffer */
    size_t len;        /* usable bytes from base */
    unsigned forks;    /* --fork: children to fork before the buffer goes back */
};

#define BIGBUFS_MAX 8u   /* buffers of one kernel */

/* Gets `count` buffers of `bytes` bytes each, placed per cfg->place (heap-large or
 * static) and backed per cfg->page.  Exits EXIT_RESOURCE when memory or hugetlb
 * pages cannot be had, EXIT_USAGE when the placement cannot hold them. */
void bigbufs_get(const struct config *cfg, unsigned count, size_t bytes, struct bigbuf *out);
/* The same for buffers of different sizes: buffer i gets bytes[i] bytes (static: back
 * to back in static_buf, each starting on a 64-byte boundary). */
void bigbufs_get_sizes(const struct config *cfg, unsigned count, const size_t *bytes, struct bigbuf *out);
/* With --fork N, first forks N children one after another, each writing one word per
 * 4 KB page of every buffer (exits EXIT_CHILD if one does not exit 0). */
void bigbufs_put(unsigned count, struct bigbuf *bufs);

/* heap-small allocation source: malloc (--page default) or a bump allocator over one
 * mapping with the requested page backing. */
struct arena {
    int use_malloc;
    char *map;
    size_t map_len, used, cap;
};
/* `cap` = exact bytes that will be allocated (ignored for malloc). */
void arena_init(struct arena *a, const struct config *cfg, size_t cap);
void *arena_alloc(struct arena *a, size_t n);
void arena_free(struct arena *a, void *p);     /* free() with malloc, else nothing */
void arena_destroy(struct arena *a);           /* munmap the mapping, if any */
/* Start address of the arena's mapping, or NULL for malloc. */
static inline void *arena_base(const struct arena *a) { return a->map; }

#endif
