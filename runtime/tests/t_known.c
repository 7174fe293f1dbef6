/* t_known - a fixed, known allocation sequence for the record-mode tests.
 *
 * Main thread, in this order (small_sequence, then large_sequence):
 *   a  = malloc(100)            ; memset
 *   b  = calloc(10, 20)
 *   a2 = realloc(a, 300)
 *   posix_memalign(&c, 64, 1000)
 *   d  = aligned_alloc(4096, 8192)
 *   e  = memalign(256, 500)
 *   f  = valloc(1000)
 *   free(a2) free(b) free(c) free(d) free(e) free(f)
 *   g  = malloc(1 MiB)          ; memset ; free(g)
 *   m  = mmap(NULL, 1 MiB, RW, PRIVATE|ANONYMOUS, -1, 0) ; touch ; munmap(m, 1 MiB)
 * Then a second thread runs small_sequence again; main joins it.
 *
 * All calls are made from functions placed in the section "ht_seq_text", so
 * every caller of this sequence lies in [seq_text_start, seq_text_end)
 * (printed absolute and as offsets from the executable's load bias).
 * Prints one JSON line; exit 0. */
#include "tcommon.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>

#define SEQ __attribute__((noinline, section("ht_seq_text")))
extern const char __start_ht_seq_text[], __stop_ht_seq_text[];

struct small {
    void *malloc100, *calloc, *realloc300, *posix_memalign, *aligned_alloc, *memalign, *valloc;
    long tid;
};
struct large {
    void *malloc1m, *mmap1m;
};

SEQ static void small_sequence(struct small *o)
{
    o->tid = tid_self();
    char *a = malloc(100);
    if (!a)
        die("malloc");
    memset(a, 1, 100);
    void *b = calloc(10, 20);
    char *a2 = realloc(a, 300);
    void *c = NULL;
    if (posix_memalign(&c, 64, 1000) != 0)
        die("posix_memalign");
    void *d = aligned_alloc(4096, 8192);
    void *e = memalign(256, 500);
    void *f = valloc(1000);
    if (!b || !a2 || !d || !e || !f)
        die("allocation failed");
    if (a2[99] != 1 || ((uintptr_t)c & 63) || ((uintptr_t)d & 4095) || ((uintptr_t)e & 255) ||
        ((uintptr_t)f & 4095))
        die("bad content or alignment");
    o->malloc100 = a;
    o->calloc = b;
    o->realloc300 = a2;
    o->posix_memalign = c;
    o->aligned_alloc = d;
    o->memalign = e;
    o->valloc = f;
    free(a2);
    free(b);
    free(c);
    free(d);
    free(e);
    free(f);
}

SEQ static void large_sequence(struct large *o)
{
    char *g = malloc(1u << 20);
    if (!g)
        die("malloc 1m");
    memset(g, 2, 1u << 20);
    o->malloc1m = g;
    free(g);
    char *m = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        die("mmap");
    m[0] = 1;
    o->mmap1m = m;
    if (munmap(m, 1u << 20) != 0)
        die("munmap");
}

static void *thread_main(void *p)
{
    small_sequence(p);
    return NULL;
}

static void print_small(const char *key, const struct small *s)
{
    printf("\"%s\":{\"malloc100\":\"%p\",\"calloc\":\"%p\",\"realloc300\":\"%p\","
           "\"posix_memalign\":\"%p\",\"aligned_alloc\":\"%p\",\"memalign\":\"%p\",\"valloc\":\"%p\"}",
           key, s->malloc100, s->calloc, s->realloc300, s->posix_memalign, s->aligned_alloc,
           s->memalign, s->valloc);
}

int main(void)
{
    static struct small ms, ts;
    static struct large ml;
    pthread_t th;

    small_sequence(&ms);
    large_sequence(&ml);
    if (pthread_create(&th, NULL, thread_main, &ts) != 0)
        die("pthread_create");
    pthread_join(th, NULL);

    uintptr_t bias = exe_bias();
    printf("{\"pid\":%ld,\"exe\":\"%s\",\"load_bias\":\"0x%lx\",\"main_tid\":%ld,\"thread_tid\":%ld,",
           (long)getpid(), exe_path(), (unsigned long)bias, ms.tid, ts.tid);
    printf("\"seq_text_start\":\"%p\",\"seq_text_end\":\"%p\",", (void *)__start_ht_seq_text,
           (void *)__stop_ht_seq_text);
    printf("\"seq_text_start_off\":\"0x%lx\",\"seq_text_end_off\":\"0x%lx\",",
           (unsigned long)((uintptr_t)__start_ht_seq_text - bias),
           (unsigned long)((uintptr_t)__stop_ht_seq_text - bias));
    printf("\"small_fn\":\"%p\",\"large_fn\":\"%p\",", (void *)small_sequence, (void *)large_sequence);
    print_small("main", &ms);
    printf(",");
    print_small("thread", &ts);
    printf(",\"large\":{\"malloc1m\":\"%p\",\"mmap1m\":\"%p\"}}\n", ml.malloc1m, ml.mmap1m);
    return 0;
}
