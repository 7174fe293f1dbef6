/* arena_chunks.c - the heap-small arena (arena.c) wired into apply mode: its
 * reserved range, 2 MB chunks committed along hugetlb-2m -> thp-2m -> 4k,
 * per-thread lists and regions handed back at thread exit.
 *
 * The reservation is PROT_NONE + MAP_NORESERVE (address space only). A chunk
 * is first made writable with mprotect (NORESERVE memory is not charged to
 * the commit limit), then placed like an owned block's segment (owned.c): a
 * hugetlb chunk is mapped elsewhere and moved over it with mremap, THP and
 * 4 KB chunks are advised. A chunk whose range a refused move lost (the hole
 * could not be refilled) ends the arena's growth: nothing past it is ever
 * committed or carved. Per-chunk backings are kept for the
 * summary and for fork protection (forksafe.c copies hugetlb chunks). */
#include "apply_int.h"
#include "next.h"

#include "fmt.h"
#include "sys.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

struct ht_mag ht_arena;
uintptr_t ht_arena_base, ht_arena_len;
int ht_arena_on;

static uint8_t *g_chunk_b; /* backing per 2 MB chunk */
static int g_want;
static _Atomic uint64_t g_chunk_bytes[HT_B_COUNT];

static uintptr_t page_down(uintptr_t x) { return x & ~(uintptr_t)4095; }
static uintptr_t page_up(uintptr_t x) { return (x + 4095) & ~(uintptr_t)4095; }

/* Opens the boundary bitmap's words for [addr, addr + len), and the word
 * after them (a chunk's size is read from the two words after its start). */
static int open_bitmap(uintptr_t addr, size_t len)
{
    uintptr_t bm = (uintptr_t)ht_arena.bnd;
    size_t u0 = (addr - ht_arena.base) >> HT_MAG_UNIT_SHIFT, u1 = (addr + len - ht_arena.base) >> HT_MAG_UNIT_SHIFT;
    uintptr_t lo = page_down(bm + (u0 >> 6) * 8), hi = page_up(bm + ((u1 >> 6) + 2) * 8);
    return HT_SYSCALL(SYS_mprotect, (void *)lo, hi - lo, PROT_READ | PROT_WRITE) < 0 ? -1 : 0;
}

static int commit(void *ctx, uintptr_t addr, size_t len)
{
    (void)ctx;
    if (open_bitmap(addr, len) != 0) {
        ht_stats_error("cannot open the arena's bitmap", "");
        return -1;
    }
    for (uintptr_t a = addr; a < addr + len; a += HT_MAG_CHUNK) {
        int b = ht_effective_want(g_want, HT_CAT_HEAP_SMALL, HT_MAG_CHUNK);
        /* Writable first, then placed along the chain (a hugetlb chunk is
         * moved over it; a refused move is refilled, see owned.c). */
        long r = ht_inj(HT_INJ_MMAP) ? -HT_EINJECTED
                                     : HT_SYSCALL(SYS_mprotect, (void *)a, HT_MAG_CHUNK, PROT_READ | PROT_WRITE);
        if (r < 0) {
            if (r == -HT_EINJECTED)
                ht_stats_fallback(HT_CAT_HEAP_SMALL, b, HT_B_NONE, "injected", HT_MAG_CHUNK);
            else
                ht_stats_fallback_errno(HT_CAT_HEAP_SMALL, b, HT_B_NONE, (int)-r, HT_MAG_CHUNK);
            return -1;
        }
        int got = ht_place(a, HT_MAG_CHUNK, b, HT_CAT_HEAP_SMALL, HT_MAG_CHUNK, 0, 0, NULL);
        if (got == HT_B_NONE) {
            /* The chunk's range is not ours any more: the arena must never
             * commit (mprotect) or carve past it. It stops growing here. */
            ht_arena.end = a;
            return -1;
        }
        g_chunk_b[(a - ht_arena.base) / HT_MAG_CHUNK] = (uint8_t)got;
        atomic_fetch_add(&g_chunk_bytes[got], HT_MAG_CHUNK);
        ht_stats_backed(HT_CAT_HEAP_SMALL, got, HT_MAG_CHUNK);
    }
    /* Only now are these chunks the arena's objects' (apply_fast.h). */
    __atomic_store_n(&ht_arena_len, addr + len - ht_arena_base, __ATOMIC_RELEASE);
    return 0;
}

void ht_arena_thread_flush(struct ht_mag_tcache *t)
{
    if (ht_arena_on)
        ht_mag_flush_all(&ht_arena, t);
}

/* The key that marks free chunks: random per process (the kernel's AT_RANDOM
 * bytes), so no program's data holds it by design. */
static uint64_t free_key(uintptr_t base)
{
    uint64_t k = 0;
    const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
    if (r)
        memcpy(&k, r + 8, sizeof k);
    k ^= (uint64_t)base * 0x9e3779b97f4a7c15ull;
    return k ? k : 1;
}

int ht_arena_setup(void)
{
    uint64_t bytes = ht_ap.plan.arena_bytes;
    g_want = ht_ap.plan.arena;
    long r = ht_sys_mmap(NULL, bytes + HT_MAG_CHUNK, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ht_mmap_failed(r)) {
        ht_stats_error("cannot reserve the heap-small arena", "");
        return -1;
    }
    uintptr_t a = (uintptr_t)r, base = (a + HT_MAG_CHUNK - 1) & ~(uintptr_t)(HT_MAG_CHUNK - 1);
    if (base > a)
        ht_sys_munmap((void *)a, base - a);
    if (a + bytes + HT_MAG_CHUNK > base + bytes)
        ht_sys_munmap((void *)(base + bytes), a + bytes + HT_MAG_CHUNK - (base + bytes));
    /* Metadata: granule bytes, boundary bitmap, chunk backings. The bitmap
     * (1/128 of the range: 512 MiB for the default 64 GiB) stays PROT_NONE,
     * which no overcommit policy charges, until commit() opens the part its
     * chunks need. */
    size_t meta = ht_mag_bytes_needed_meta(bytes) + bytes / HT_MAG_CHUNK;
    long m = ht_sys_mmap(NULL, meta, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uintptr_t gr_end = page_up((uintptr_t)m + ht_mag_meta_granules(bytes));
    uintptr_t cb = page_down((uintptr_t)m + ht_mag_bytes_needed_meta(bytes));
    if (ht_mmap_failed(m) ||
        HT_SYSCALL(SYS_mprotect, (void *)m, gr_end - (uintptr_t)m, PROT_READ | PROT_WRITE) < 0 ||
        HT_SYSCALL(SYS_mprotect, (void *)cb, (uintptr_t)m + meta - cb, PROT_READ | PROT_WRITE) < 0) {
        if (!ht_mmap_failed(m))
            ht_sys_munmap((void *)m, meta);
        ht_sys_munmap((void *)base, bytes);
        ht_stats_error("cannot map the arena's metadata", "");
        return -1;
    }
    g_chunk_b = (uint8_t *)m + ht_mag_bytes_needed_meta(bytes);
    ht_mag_init(&ht_arena, base, bytes, (uint8_t *)m, commit, NULL, free_key(base));
    ht_arena_base = base;
    ht_arena_len = 0; /* nothing committed yet */
    ht_arena_on = 1;
    return 0;
}

/* May this thread take memory (a batch, a region) for its lists now? Not from
 * inside the library, nor once it is exiting (its lists and region were
 * given back; what it still allocates goes to the allocator behind us). */
static int may_take(void)
{
    if (ht_tls.guard || ht_atls.rounds)
        return 0;
    if (!ht_atls.registered)
        ht_apply_thread_register();
    return 1;
}

static void forwarded(size_t n)
{
    atomic_fetch_add_explicit(&ht_ap.arena_forwarded, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ht_ap.arena_forwarded_bytes, n, memory_order_relaxed);
}

void *ht_arena_alloc_slow(size_t n, int *fresh)
{
    void *p = NULL;
    if (may_take()) {
        p = ht_mag_alloc_slow(&ht_arena, &ht_atls.tc, n, fresh);
        ht_apply_poll_slow();
    }
    if (p)
        return p;
    forwarded(n);
    if (fresh)
        *fresh = 0;
    return ht_fwd_malloc(n);
}

void *ht_arena_alloc_aligned(size_t n, size_t align)
{
    void *p = NULL;
    if (may_take()) {
        p = ht_mag_alloc_aligned(&ht_arena, &ht_atls.tc, n, align);
        ht_apply_poll_slow();
    }
    if (!p)
        forwarded(n);
    return p;
}

void ht_arena_atfork_prepare(void)
{
    if (ht_arena_on)
        ht_mag_lock_all(&ht_arena);
}

void ht_arena_atfork_parent(void)
{
    if (ht_arena_on)
        ht_mag_unlock_all(&ht_arena);
}

void ht_arena_atfork_child(void)
{
    if (!ht_arena_on)
        return;
    /* Only this thread exists: the other threads' lists and regions are lost
     * (leaked), the forking thread's stay valid. */
    ht_mag_reinit_locks(&ht_arena);
}

void ht_arena_hugetlb_ranges(void (*cb)(uintptr_t a, size_t len, void *ctx), void *ctx)
{
    if (!ht_arena_on)
        return;
    size_t nch = (ht_arena.committed - ht_arena.base) / HT_MAG_CHUNK;
    for (size_t i = 0; i < nch;) {
        if (g_chunk_b[i] != HT_B_HUGETLB2M) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < nch && g_chunk_b[j] == HT_B_HUGETLB2M)
            j++;
        cb(ht_arena.base + i * HT_MAG_CHUNK, (j - i) * HT_MAG_CHUNK, ctx);
        i = j;
    }
}

void ht_arena_adopted(uintptr_t a, size_t len, int backing)
{
    for (uintptr_t x = a; x < a + len; x += HT_MAG_CHUNK) {
        size_t i = (x - ht_arena.base) / HT_MAG_CHUNK;
        atomic_fetch_sub(&g_chunk_bytes[g_chunk_b[i]], HT_MAG_CHUNK);
        g_chunk_b[i] = (uint8_t)backing;
        atomic_fetch_add(&g_chunk_bytes[backing], HT_MAG_CHUNK);
    }
}

void ht_arena_summary(struct ht_json *j)
{
    hj_obj_begin(j, "arena");
    hj_bool(j, "enabled", ht_arena_on);
    if (ht_arena_on) {
        char hx[24];
        ht_fmt_hex(hx, ht_arena.base);
        hj_str(j, "backing", ht_backing_name(g_want));
        hj_str(j, "base", hx); /* committed from here up (`hugetune status`) */
        hj_u64(j, "reserved_bytes", ht_arena.end - ht_arena.base);
        hj_u64(j, "committed_bytes", ht_arena.committed - ht_arena.base);
        hj_obj_begin(j, "chunks_bytes");
        for (int b = HT_B_4K; b < HT_B_COUNT; b++) {
            uint64_t v = atomic_load(&g_chunk_bytes[b]);
            if (v)
                hj_u64(j, ht_backing_name(b), v);
        }
        hj_obj_end(j);
        hj_u64(j, "full", atomic_load(&ht_arena.full));
        hj_u64(j, "regions", atomic_load(&ht_arena.regions));
        hj_u64(j, "regions_adjacent", atomic_load(&ht_arena.adjacent));
        hj_u64(j, "lists_dropped", atomic_load(&ht_arena.dropped));
    }
    hj_u64(j, "forwarded", atomic_load(&ht_ap.arena_forwarded));
    hj_u64(j, "forwarded_bytes", atomic_load(&ht_ap.arena_forwarded_bytes));
    hj_obj_end(j);
}
