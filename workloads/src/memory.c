/* Placement (--place) and page backing (--page) of the workload's memory.
 *
 * --page default leaves the memory to malloc / the .bss as-is: that is what the
 * hugetune runtime library intercepts and backs.  The other --page values are the
 * workload's own mappings for direct experiments, and they never fall back
 * silently: a hugetlb mapping that fails ends the run with EXIT_RESOURCE. */
#include "memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif

#define SZ_4K (4096UL)
#define SZ_2M (2UL << 20)
#define SZ_1G (1UL << 30)

enum { BB_MALLOC = 1, BB_MMAP, BB_STATIC };

/* The static placement: 1 GiB of .bss (the largest Valgrind accepts here), 2 MB
 * aligned so that its interior can be THP- or hugetlb-2m-backed.  Untouched unless
 * --place static, and untouched .bss costs nothing. */
static char static_buf[STATIC_CAPACITY] __attribute__((aligned(2 * 1024 * 1024)));

static size_t page_bytes(enum page_id page)
{
    switch (page) {
    case PAGE_HUGETLB_1G: return SZ_1G;
    case PAGE_HUGETLB_2M:
    case PAGE_THP: return SZ_2M;
    default: return SZ_4K;
    }
}

static void die_hugetlb(enum page_id page, size_t len, int err)
{
    const char *path = page == PAGE_HUGETLB_1G
        ? "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages"
        : "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";
    char value[64] = "unreadable";
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(value, sizeof value, f))
            value[strcspn(value, "\n")] = '\0';
        fclose(f);
    }
    die_resource("cannot map %zu bytes as %s (%zu huge pages): %s; %s = %s",
                 len, page_name(page), len / page_bytes(page), strerror(err), path, value);
}

/* Anonymous mapping of at least len bytes with the page backing `page` (not
 * PAGE_DEFAULT); the length actually mapped goes to *map_len. */
static void *map_pages(enum page_id page, size_t len, size_t *map_len)
{
    const int prot = PROT_READ | PROT_WRITE;
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    void *p;

    switch (page) {
    case PAGE_4K:
        *map_len = round_up(len, SZ_4K);
        p = mmap(NULL, *map_len, prot, flags, -1, 0);
        if (p == MAP_FAILED)
            die_resource("cannot mmap %zu bytes: %s", *map_len, strerror(errno));
        if (madvise(p, *map_len, MADV_NOHUGEPAGE) != 0)
            die_resource("madvise(MADV_NOHUGEPAGE) failed: %s", strerror(errno));
        return p;
    case PAGE_THP: {
        /* Over-map by 2 MB and trim, so the region starts on a 2 MB boundary and is
         * whole huge pages. */
        *map_len = round_up(len, SZ_2M);
        char *raw = mmap(NULL, *map_len + SZ_2M, prot, flags, -1, 0);
        if (raw == MAP_FAILED)
            die_resource("cannot mmap %zu bytes: %s", *map_len + SZ_2M, strerror(errno));
        char *aligned = (char *)round_up((uintptr_t)raw, SZ_2M);
        size_t head = (size_t)(aligned - raw), tail = SZ_2M - head;
        if (head)
            munmap(raw, head);
        if (tail)
            munmap(aligned + *map_len, tail);
        if (madvise(aligned, *map_len, MADV_HUGEPAGE) != 0)
            die_resource("madvise(MADV_HUGEPAGE) failed: %s", strerror(errno));
        return aligned;
    }
    case PAGE_HUGETLB_2M:
    case PAGE_HUGETLB_1G: {
        /* No MAP_NORESERVE: a short pool fails here, not with SIGBUS later. */
        int huge = page == PAGE_HUGETLB_1G ? MAP_HUGE_1GB : MAP_HUGE_2MB;
        *map_len = round_up(len, page_bytes(page));
        p = mmap(NULL, *map_len, prot, flags | MAP_HUGETLB | huge, -1, 0);
        if (p == MAP_FAILED)
            die_hugetlb(page, *map_len, errno);
        return p;
    }
    case PAGE_DEFAULT:
        break;
    }
    die_resource("internal error: map_pages(default)");
}

/* Applies --page to the first `len` bytes of static_buf. */
static void static_back(enum page_id page, size_t len)
{
    size_t range = round_up(len, page_bytes(page));
    if (range > STATIC_CAPACITY)
        range = STATIC_CAPACITY;    /* only for 4k/thp: the buffer is 2 MB aligned */

    switch (page) {
    case PAGE_DEFAULT:
        return;
    case PAGE_4K:
    case PAGE_THP:
        if (madvise(static_buf, range, page == PAGE_THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0)
            die_resource("madvise(%s) on the static buffer failed: %s",
                         page == PAGE_THP ? "MADV_HUGEPAGE" : "MADV_NOHUGEPAGE", strerror(errno));
        return;
    case PAGE_HUGETLB_2M:
    case PAGE_HUGETLB_1G: {
        if ((uintptr_t)static_buf % page_bytes(page) != 0)
            die_usage("--place static --page %s needs a %s-aligned static buffer, but it is at %p "
                      "(only 2 MB alignment is guaranteed); use --place heap-large",
                      page_name(page), page == PAGE_HUGETLB_1G ? "1 GiB" : "2 MB", (void *)static_buf);
        /* Replace the (untouched) .bss range by a hugetlb mapping at the same address. */
        int huge = page == PAGE_HUGETLB_1G ? MAP_HUGE_1GB : MAP_HUGE_2MB;
        void *p = mmap(static_buf, range, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB | huge, -1, 0);
        if (p == MAP_FAILED)
            die_hugetlb(page, range, errno);
        return;
    }
    }
}

/* Usable bytes of a buffer of `bytes`: the data start on a 64-byte boundary, which
 * costs malloc'd buffers up to 48 bytes (glibc returns large blocks 16 bytes into a
 * page).  The same length is used for every placement and page backing, so that the
 * kernels see the same number of lines/words and give the same checksum. */
static size_t usable_bytes(size_t bytes)
{
    return (bytes - (LINE_BYTES - 1)) & ~(size_t)(LINE_BYTES - 1);
}

void bigbufs_get_sizes(const struct config *cfg, unsigned count, const size_t *bytes, struct bigbuf *out)
{
    if (cfg->place == PLACE_STATIC) {
        /* All buffers share static_buf, back to back, each a multiple of 64 bytes. */
        uint64_t total = 0;
        for (unsigned i = 0; i < count; i++)
            total += bytes[i] & ~(size_t)(LINE_BYTES - 1);
        if (total > STATIC_CAPACITY)
            die_usage("--size %llu does not fit the %lu-byte static buffer", (unsigned long long)total,
                      (unsigned long)STATIC_CAPACITY);
        static_back(cfg->page, (size_t)total);
        size_t off = 0;
        for (unsigned i = 0; i < count; i++) {
            out[i] = (struct bigbuf){ .alloc = static_buf + off, .kind = BB_STATIC,
                                      .base = static_buf + off, .len = usable_bytes(bytes[i]),
                                      .forks = (unsigned)cfg->forks };
            off += bytes[i] & ~(size_t)(LINE_BYTES - 1);
        }
        return;
    }

    for (unsigned i = 0; i < count; i++) {
        struct bigbuf *b = &out[i];
        memset(b, 0, sizeof *b);
        b->forks = (unsigned)cfg->forks;
        if (cfg->page == PAGE_DEFAULT && cfg->place == PLACE_MMAP) {
            /* The program's own mapping, as it would map it: the runtime library
             * sees this mmap (not a malloc) and backs it by its call site. */
            b->map_len = bytes[i];
            b->alloc = mmap(NULL, bytes[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (b->alloc == MAP_FAILED)
                die_resource("mmap(%zu) failed: %s", bytes[i], strerror(errno));
            b->kind = BB_MMAP;
        } else if (cfg->page == PAGE_DEFAULT) {
            /* Really malloc: this is the allocation the runtime library intercepts. */
            b->alloc = malloc(bytes[i]);
            if (!b->alloc)
                die_resource("malloc(%zu) failed", bytes[i]);
            b->kind = BB_MALLOC;
        } else {
            b->alloc = map_pages(cfg->page, bytes[i], &b->map_len);
            b->kind = BB_MMAP;
        }
        /* Start the data on a cache line so that "line i" of a kernel is one
         * hardware cache line. */
        b->base = (char *)round_up((uintptr_t)b->alloc, LINE_BYTES);
        b->len = usable_bytes(bytes[i]);
    }
}

void bigbufs_get(const struct config *cfg, unsigned count, size_t bytes, struct bigbuf *out)
{
    size_t sizes[BIGBUFS_MAX];
    if (count > BIGBUFS_MAX)
        die_resource("internal error: %u buffers (at most %u)", count, BIGBUFS_MAX);
    for (unsigned i = 0; i < count; i++)
        sizes[i] = bytes;
    bigbufs_get_sizes(cfg, count, sizes, out);
}

/* The child of a snapshotting service (redis BGSAVE, a checkpointer) shares the
 * parent's touched memory copy-on-write; writing it makes the kernel copy each page,
 * which for private hugetlb memory needs a free huge page (SIGBUS when the pool has
 * none).  Each child writes every 4 KB page of every buffer once. */
static void fork_writers(unsigned count, const struct bigbuf *bufs)
{
    fflush(stdout);
    for (unsigned k = 0; k < bufs[0].forks; k++) {
        pid_t pid = fork();
        if (pid < 0)
            die_resource("fork failed: %s", strerror(errno));
        if (pid == 0) {
            for (unsigned i = 0; i < count; i++) {
                volatile char *p = (volatile char *)bufs[i].base;
                for (size_t off = 0; off < bufs[i].len; off += 4096)
                    p[off] = (char)(p[off] + 1);
            }
            _exit(0);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0) {
            if (errno != EINTR)
                die_resource("waitpid: %s", strerror(errno));
        }
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "hugetune-work: forked child %ld died of signal %d (%s)\n",
                    (long)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
            exit(EXIT_CHILD);
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "hugetune-work: forked child %ld exited with status %d\n", (long)pid,
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            exit(EXIT_CHILD);
        }
    }
}

void bigbufs_put(unsigned count, struct bigbuf *bufs)
{
    if (count > 0 && bufs[0].forks > 0)
        fork_writers(count, bufs);
    for (unsigned i = 0; i < count; i++) {
        if (bufs[i].kind == BB_MALLOC)
            free(bufs[i].alloc);
        else if (bufs[i].kind == BB_MMAP)
            munmap(bufs[i].alloc, bufs[i].map_len);
        bufs[i].kind = 0;
    }
}

void arena_init(struct arena *a, const struct config *cfg, size_t cap)
{
    memset(a, 0, sizeof *a);
    if (cfg->page == PAGE_DEFAULT) {
        a->use_malloc = 1;
        return;
    }
    a->map = map_pages(cfg->page, cap, &a->map_len);
    a->cap = cap;
}

void *arena_alloc(struct arena *a, size_t n)
{
    if (a->use_malloc)
        return xmalloc(n);
    n = round_up(n, 16);    /* malloc's alignment */
    if (n > a->cap - a->used)
        die_resource("internal error: heap-small arena overflow (%zu + %zu > %zu)", a->used, n, a->cap);
    void *p = a->map + a->used;
    a->used += n;
    return p;
}

void arena_free(struct arena *a, void *p)
{
    if (a->use_malloc)
        free(p);
}

void arena_destroy(struct arena *a)
{
    if (a->map)
        munmap(a->map, a->map_len);
    a->map = NULL;
}
