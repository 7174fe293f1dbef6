/* t_arena - the heap-small arena (plan `heap-small arena B`).
 *
 *   t_arena [expect=hugetlb-2m|thp-2m|glibc] [threads=4]
 *
 * Makes 32 MiB of small allocations (16..1024 bytes) in the main thread, then
 * N threads allocate, check and free objects of every class (32 KiB at most),
 * freeing some of each other's (cross-thread frees). Checks: arena objects
 * lie in one range and are 16-byte aligned; consecutive allocations are
 * adjacent, spaced by their size rounded up to 16 (the arena's headerless
 * chunks; glibc's heap would add its 8-byte size field); malloc_usable_size
 * >= request; calloc zeroes reused memory;
 * realloc within and across classes keeps the contents; posix_memalign,
 * aligned_alloc and memalign return aligned blocks (up to 4 KiB from the
 * arena, larger alignments from the allocator behind us); objects above
 * 32 KiB go to the allocator behind us. With expect=B the
 * range holding the main thread's objects must be backed by B in smaps
 * (hugetlb-2m: Private_Hugetlb, thp-2m: AnonHugePages), glibc: not in one
 * 2 MB-aligned range (no arena). Prints one JSON line; exit 0 when ok. */
#include "tcommon.h"

#include <malloc.h>
#include <pthread.h>

#define N_MAIN (32u << 20) / 512

static void *volatile g_shared[64];
static long g_nthreads = 4;

static void *worker(void *arg)
{
    long id = (long)arg, bad = 0;
    unsigned s = (unsigned)id * 2654435761u + 3;
    unsigned char *mine[128] = {0};
    for (int it = 0; it < 200000; it++) {
        s = s * 1103515245u + 12345u;
        unsigned k = (s >> 8) & 127;
        if (mine[k]) {
            size_t u = malloc_usable_size(mine[k]);
            if (mine[k][0] != (unsigned char)k || mine[k][u - 1] != (unsigned char)k)
                bad++;
            /* every 8th object goes to the shared slots, freed by another thread */
            if ((s >> 20) % 8 == 0) {
                void *old = __atomic_exchange_n(&g_shared[(s >> 12) & 63], mine[k], __ATOMIC_ACQ_REL);
                free(old);
            } else {
                free(mine[k]);
            }
            mine[k] = NULL;
        } else {
            size_t n = 1 + (s >> 14) % ((s & 0x30) ? 1024 : 32768);
            unsigned char *p = malloc(n);
            if (!p) {
                bad++;
                continue;
            }
            size_t u = malloc_usable_size(p);
            if (u < n)
                bad++;
            p[0] = p[u - 1] = (unsigned char)k;
            mine[k] = p;
        }
    }
    for (int k = 0; k < 128; k++)
        free(mine[k]);
    return (void *)bad;
}

int main(int argc, char **argv)
{
    const char *want = arg_value(argc, argv, "expect");
    const char *v = arg_value(argc, argv, "threads");
    if (v)
        g_nthreads = atol(v);
    int ok = 1;
    static unsigned char *objs[N_MAIN];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    unsigned adjacent = 0, pairs = 0;
    for (unsigned i = 0; i < N_MAIN; i++) {
        size_t n = 16 + (i * 37) % 1009;
        objs[i] = malloc(n);
        if (!objs[i])
            die("malloc");
        size_t pn = 16 + ((i - 1) * 37) % 1009, chunk = (pn + 15) & ~(size_t)15;
        if (i > 0) {
            pairs++;
            adjacent += (uintptr_t)objs[i] - (uintptr_t)objs[i - 1] == chunk;
        }
        memset(objs[i], (int)(i & 0xff), n);
        ok &= ((uintptr_t)objs[i] & 15) == 0;
        if ((uintptr_t)objs[i] < lo)
            lo = (uintptr_t)objs[i];
        if ((uintptr_t)objs[i] + n > hi)
            hi = (uintptr_t)objs[i] + n;
    }
    /* the span of the main thread's objects and its backing */
    struct smaps_info si = smaps_range(lo, hi);
    for (unsigned i = 0; i < N_MAIN; i += 101)
        ok &= objs[i][0] == (unsigned char)(i & 0xff);
    /* calloc after frees reuses memory: must read zero */
    for (unsigned i = 0; i < 1000; i++)
        free(objs[i]);
    int calloc_ok = 1;
    for (unsigned i = 0; i < 1000; i++) {
        unsigned char *c = calloc(1, 16 + (i * 37) % 1009);
        for (size_t k = 0; k < 16 + (i * 37) % 1009; k++)
            calloc_ok &= c[k] == 0;
        objs[i] = c;
    }
    /* realloc within the class and across classes */
    unsigned char *r = malloc(100);
    memset(r, 0x31, 100);
    unsigned char *r2 = realloc(r, 110); /* same class (112) */
    int arena = want && (strcmp(want, "hugetlb-2m") == 0 || strcmp(want, "thp-2m") == 0);
    int realloc_ok = r2 != NULL && (!arena || r2 == r); /* the arena keeps a block within its class */
    unsigned char *r3 = realloc(r2, 5000);
    realloc_ok &= r3 != NULL && r3[0] == 0x31 && r3[99] == 0x31;
    memset(r3 + 100, 0x32, 4900);
    unsigned char *r4 = realloc(r3, 40);
    realloc_ok &= r4 != NULL && r4[39] == 0x31;
    free(r4);
    /* aligned requests: every alignment honoured, usable, freed */
    int al_ok = 1;
    for (size_t a = 8; a <= 16384; a *= 2) {
        void *al = NULL;
        al_ok &= posix_memalign(&al, a, 200) == 0 && ((uintptr_t)al & (a - 1)) == 0 &&
                 malloc_usable_size(al) >= 200;
        memset(al, 0x41, 200);
        unsigned char *m = memalign(a, 3000), *aa = aligned_alloc(a, 4 * a);
        al_ok &= m && ((uintptr_t)m & (a - 1)) == 0 && malloc_usable_size(m) >= 3000;
        al_ok &= aa && ((uintptr_t)aa & (a - 1)) == 0 && malloc_usable_size(aa) >= 4 * a;
        if (m)
            memset(m, 0x42, 3000);
        if (aa)
            memset(aa, 0x43, 4 * a);
        al_ok &= ((unsigned char *)al)[199] == 0x41;
        free(al);
        free(m);
        free(aa);
    }
    unsigned char *big = malloc(40000); /* above the arena's largest class */
    int big_ok = big != NULL && malloc_usable_size(big) >= 40000;
    free(big);

    pthread_t th[64];
    long bad = 0;
    for (long t = 0; t < g_nthreads && t < 64; t++)
        pthread_create(&th[t], NULL, worker, (void *)t);
    for (long t = 0; t < g_nthreads && t < 64; t++) {
        void *rv;
        pthread_join(th[t], &rv);
        bad += (long)rv;
    }
    for (int k = 0; k < 64; k++)
        free(g_shared[k]);
    for (unsigned i = 0; i < N_MAIN; i++)
        free(objs[i]);

    int backing = 1;
    if (want && strcmp(want, "hugetlb-2m") == 0)
        backing = si.private_hugetlb_kb * 1024 >= (long)((hi - lo) * 9 / 10);
    else if (want && strcmp(want, "thp-2m") == 0)
        backing = si.anon_huge_kb * 1024 >= (long)((hi - lo) / 2);
    /* in allocation order, adjacent (the arena's regions of one thread
     * follow each other) */
    int adjacent_ok = !arena || adjacent >= pairs - pairs / 1000;
    ok = ok && calloc_ok && realloc_ok && al_ok && big_ok && bad == 0 && backing && adjacent_ok;
    printf("{\"pid\":%ld,\"span\":%lu,\"adjacent\":%u,\"pairs\":%u,", (long)getpid(),
           (unsigned long)(hi - lo), adjacent, pairs);
    print_smaps("objects", (void *)lo, hi - lo, si);
    printf(",\"calloc_ok\":%s,\"realloc_ok\":%s,\"align_ok\":%s,\"big_ok\":%s,\"thread_errors\":%ld,"
           "\"backing_ok\":%s,\"ok\":%s}\n",
           calloc_ok ? "true" : "false", realloc_ok ? "true" : "false", al_ok ? "true" : "false",
           big_ok ? "true" : "false", bad, backing ? "true" : "false", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: t_arena checks failed\n");
        return 1;
    }
    return 0;
}
