/* t_mapped - the program's own anonymous mappings under a plan (mapped.c):
 * backed at mmap time, and every later call of the program behaving as on
 * plain memory.
 *
 *   t_mapped [expect=hugetlb-2m|thp-2m|owned|glibc|any] [fork=1] [threads=1]
 *
 * Each case maps 8 MiB + 12 KiB (a head of four 2 MB pages and a 4 KB tail
 * when hugetlb-backed), fills it with a pattern, checks the first mapping's
 * backing against `expect`, then does one thing to it and checks the data
 * and the kernel's view (mincore: unmapped pages are ENOMEM):
 *   whole      munmap of the whole mapping
 *   cut        munmap of 1 MiB at a non-2 MB boundary inside the head
 *   grow       mremap to twice the size (MREMAP_MAYMOVE): data kept, new part zero
 *   shrink     mremap to 5 MiB + 4 KiB: same address, data kept, the rest gone
 *   fixed      mmap MAP_FIXED of 1 MiB over the middle: zero there, rest kept
 *   protect    mprotect PROT_READ of 4 KiB inside the head: still readable
 *   dontneed   madvise MADV_DONTNEED of 64 KiB inside the head: reads zero
 *   fork       (fork=1) a child writes every page and exits 0; the parent's data stays
 * threads=1: during every case but `whole`, two threads hammer the first MiB
 * of the mapping (which no case cuts): one stores a new value into every
 * word per pass, the other has the kernel write a new pattern into its half
 * per pass (pread from a memfd). After each pass each thread reads its half
 * back: a store that went to the old memory while the runtime library copied
 * it away (a lost write) shows as the previous pass's value. The main thread
 * does the case's call after both threads made two passes and stops them two
 * passes later.
 * Prints one JSON line; exit 0 when every check passed. */
#include "tcommon.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1ul << 20)
#define LEN (8 * MB + 12 * 1024)

static int g_fail;

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            g_fail = 1;                                                        \
        }                                                                      \
    } while (0)

static unsigned char pat(size_t i) { return (unsigned char)(i * 131 + 7); }

static unsigned char *new_map(void)
{
    unsigned char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    for (size_t i = 0; i < LEN; i += 512)
        p[i] = pat(i);
    return p;
}

/* Pattern intact over [lo, hi) (sampled every 512 bytes). */
static int intact(const unsigned char *p, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i += 512)
        if (p[i] != pat(i))
            return 0;
    return 1;
}

static int zero(const unsigned char *p, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i += 512)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* ---- threads=1: writers racing the case's call ---- */
#define HALF (512 * 1024)
static int g_threads;
static int g_memfd = -1;
static unsigned char *g_hp;
static _Atomic int g_stop;
static _Atomic unsigned g_passes[2];
static _Atomic unsigned g_lost[2];
static pthread_t g_wt[2];

static void *store_writer(void *arg)
{
    (void)arg;
    uint64_t *w = (uint64_t *)g_hp;
    for (uint64_t v = 1; !atomic_load(&g_stop) || atomic_load(&g_passes[0]) < 4; v++) {
        for (size_t i = 0; i < HALF / 8; i++)
            w[i] = v << 32 | i;
        for (size_t i = 0; i < HALF / 8; i++)
            if (w[i] != (v << 32 | i)) {
                atomic_fetch_add(&g_lost[0], 1);
                w[i] = v << 32 | i;
            }
        atomic_fetch_add(&g_passes[0], 1);
    }
    return NULL;
}

static void *kernel_writer(void *arg)
{
    (void)arg;
    static unsigned char buf[HALF];
    unsigned char *dst = g_hp + HALF;
    for (unsigned v = 1; !atomic_load(&g_stop) || atomic_load(&g_passes[1]) < 4; v++) {
        unsigned char b = (unsigned char)(v * 37 + 1);
        memset(buf, b, HALF);
        if (pwrite(g_memfd, buf, HALF, 0) != HALF || pread(g_memfd, dst, HALF, 0) != HALF) {
            atomic_fetch_add(&g_lost[1], 1000000); /* EFAULT: the kernel's write failed */
            break;
        }
        for (size_t i = 0; i < HALF; i += 64)
            if (dst[i] != b) {
                atomic_fetch_add(&g_lost[1], 1);
                break;
            }
        atomic_fetch_add(&g_passes[1], 1);
    }
    return NULL;
}

/* Starts the writers on p's first MiB and waits until both made two passes. */
static void hammer_start(unsigned char *p)
{
    if (!g_threads)
        return;
    g_hp = p;
    atomic_store(&g_stop, 0);
    atomic_store(&g_passes[0], 0);
    atomic_store(&g_passes[1], 0);
    if (pthread_create(&g_wt[0], NULL, store_writer, NULL) || pthread_create(&g_wt[1], NULL, kernel_writer, NULL))
        die("pthread_create");
    while (atomic_load(&g_passes[0]) < 2 || atomic_load(&g_passes[1]) < 2)
        sched_yield();
}

static void hammer_stop(const char *what)
{
    if (!g_threads)
        return;
    atomic_store(&g_stop, 1);
    pthread_join(g_wt[0], NULL);
    pthread_join(g_wt[1], NULL);
    CHECK(atomic_load(&g_lost[0]) == 0, "%s: %u stores lost while it ran", what, atomic_load(&g_lost[0]));
    CHECK(atomic_load(&g_lost[1]) == 0, "%s: kernel writes lost or failed (%u)", what, atomic_load(&g_lost[1]));
    atomic_store(&g_lost[0], 0);
    atomic_store(&g_lost[1], 0);
    /* The case's own checks read the pattern there. */
    for (size_t i = 0; i < MB; i += 512)
        g_hp[i] = pat(i);
}

static int unmapped(const void *p, size_t len)
{
    unsigned char v[4];
    return mincore((void *)p, len < 4 * 4096 ? len : 4 * 4096, v) != 0 && errno == ENOMEM;
}

int main(int argc, char **argv)
{
    const char *want = arg_value(argc, argv, "expect");
    const char *fk = arg_value(argc, argv, "fork");
    const char *th = arg_value(argc, argv, "threads");
    g_threads = th && strcmp(th, "1") == 0;
    if (g_threads && (g_memfd = memfd_create("t_mapped", 0)) < 0)
        die("memfd_create: %s", strerror(errno));

    unsigned char *p = new_map();
    struct smaps_info si = smaps_range((uintptr_t)p, (uintptr_t)p + LEN);
    printf("{");
    print_smaps("first", p, LEN, si);
    CHECK(backing_ok(want, p, LEN, si), "first mapping: not %s", want);
    CHECK(munmap(p, LEN) == 0, "whole: munmap: %s", strerror(errno));
    CHECK(unmapped(p, LEN), "whole: still mapped");

    size_t cut = 3 * MB + 4096;
    p = new_map();
    hammer_start(p);
    CHECK(munmap(p + cut, MB) == 0, "cut: munmap: %s", strerror(errno));
    hammer_stop("cut");
    CHECK(unmapped(p + cut, MB), "cut: still mapped");
    CHECK(intact(p, 0, cut) && intact(p, cut + MB, LEN), "cut: data lost");
    CHECK(munmap(p, LEN) == 0, "cut: munmap rest: %s", strerror(errno));

    p = new_map();
    unsigned char *q = mremap(p, LEN, 2 * LEN, MREMAP_MAYMOVE); /* moves: no writers */
    CHECK(q != MAP_FAILED, "grow: mremap: %s", strerror(errno));
    if (q != MAP_FAILED) {
        CHECK(intact(q, 0, LEN), "grow: data lost");
        CHECK(zero(q, LEN, 2 * LEN), "grow: new part not zero");
        CHECK(munmap(q, 2 * LEN) == 0, "grow: munmap: %s", strerror(errno));
    }

    size_t keep = 5 * MB + 4096;
    p = new_map();
    hammer_start(p);
    q = mremap(p, LEN, keep, 0);
    hammer_stop("shrink");
    CHECK(q == p, "shrink: mremap: %s", q == MAP_FAILED ? strerror(errno) : "moved");
    CHECK(intact(p, 0, keep), "shrink: data lost");
    CHECK(unmapped(p + keep, LEN - keep), "shrink: rest still mapped");
    CHECK(munmap(p, keep) == 0, "shrink: munmap: %s", strerror(errno));

    size_t at = 2 * MB + 8192;
    p = new_map();
    hammer_start(p);
    q = mmap(p + at, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    hammer_stop("fixed");
    CHECK(q == p + at, "fixed: mmap: %s", q == MAP_FAILED ? strerror(errno) : "elsewhere");
    CHECK(zero(p, at, at + MB), "fixed: new range not zero");
    CHECK(intact(p, 0, at) && intact(p, at + MB, LEN), "fixed: data lost");
    CHECK(munmap(p, LEN) == 0, "fixed: munmap: %s", strerror(errno));

    p = new_map();
    hammer_start(p);
    CHECK(mprotect(p + MB + 4096, 4096, PROT_READ) == 0, "protect: %s", strerror(errno));
    hammer_stop("protect");
    CHECK(intact(p, 0, LEN), "protect: data lost");
    CHECK(mprotect(p + MB + 4096, 4096, PROT_READ | PROT_WRITE) == 0, "protect back: %s", strerror(errno));
    CHECK(madvise(p + 3 * MB + 4096, 64 * 1024, MADV_DONTNEED) == 0, "dontneed: %s", strerror(errno));
    CHECK(zero(p, 3 * MB + 4096, 3 * MB + 4096 + 64 * 1024), "dontneed: not zero");
    CHECK(intact(p, 0, 3 * MB + 4096), "dontneed: data lost");
    CHECK(madvise(p, LEN, MADV_WILLNEED) == 0, "willneed: %s", strerror(errno));
    CHECK(munmap(p, LEN) == 0, "protect: munmap: %s", strerror(errno));

    if (fk && strcmp(fk, "1") == 0) {
        p = new_map();
        fflush(stdout);
        hammer_start(p);
        pid_t pid = fork();
        if (pid == 0) {
            if (!intact(p, g_threads ? MB : 0, LEN)) /* the writers own the first MiB */
                _exit(2);
            memset(p, 0x5a, LEN);
            _exit(0);
        }
        hammer_stop("fork");
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork: child status %d", st);
        memset(p, 0x33, MB);
        CHECK(intact(p, MB, LEN), "fork: parent data lost");
        CHECK(munmap(p, LEN) == 0, "fork: munmap: %s", strerror(errno));
    }
    printf(",\"ok\":%s}\n", g_fail ? "false" : "true");
    return g_fail;
}
