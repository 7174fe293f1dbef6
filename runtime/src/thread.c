/* thread.c - per-thread state: cached tid, and a slot in a global table that
 * holds the thread's log buffer and allocation counters.
 *
 * Why a slot table instead of plain TLS: the exit path has to flush every live
 * thread's buffer and sum every live thread's counters, which TLS of other
 * threads does not allow. Slots live in one mmap'd table; a thread takes one
 * with a CAS on its first event and gives it back from a pthread key destructor
 * at thread exit. Appends touch only the thread's own slot (no locks; the
 * slot's lock is taken once per written chunk, see record.c). */
#include "ht.h"

#include "sys.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

__thread struct ht_tls ht_tls __attribute__((tls_model("initial-exec")));

struct ht_slot *ht_slots;
size_t ht_slots_bytes;
_Atomic uint64_t ht_global_cnt[HT_TC_N];

extern pthread_key_t ht_thread_key; /* init.c */
extern int ht_thread_key_ok;

int ht_thread_setup(void)
{
    size_t bytes = sizeof(struct ht_slot) * HT_MAX_SLOTS;
    long r = ht_sys_mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ht_mmap_failed(r))
        return (int)r;
    ht_slots = (struct ht_slot *)r;
    ht_slots_bytes = bytes;
    return 0;
}

static struct ht_slot *slot_take(void)
{
    if (!ht_slots)
        return NULL;
    /* The lowest free slot: a program that keeps creating threads reuses the
     * same few buffers (already touched memory) instead of cycling through
     * all of them. */
    for (unsigned i = 0; i < HT_MAX_SLOTS; i++) {
        struct ht_slot *s = &ht_slots[i];
        int expect = 0;
        if (atomic_load_explicit(&s->in_use, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&s->in_use, &expect, 1))
            return s;
    }
    return NULL;
}

void ht_thread_attach(void)
{
    struct ht_tls *t = &ht_tls;
    sigset_t all, old;

    t->phase = HT_PH_ACQUIRING; /* a nested event goes direct meanwhile */
    /* No signal handler runs while this thread sets up: its calls would pass
     * through unrecorded during pthread_setspecific (guard). */
    sigfillset(&all);
    HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
    if (t->tid == 0)
        t->tid = ht_sys_gettid();
    struct ht_slot *s = slot_take();
    if (!s) {
        t->phase = HT_PH_NOSLOT;
        ht_verbose("slot table full: thread logs event by event", "");
        ht_rec_thread_start(NULL);
        HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
        return;
    }
    s->tid = t->tid;
    s->buf = NULL;
    s->flushed_ev = 0;
    atomic_store_explicit(&s->limit, 0, memory_order_relaxed);
    atomic_store_explicit(&s->fill, 0, memory_order_relaxed);
    memset(s->cnt, 0, sizeof s->cnt);
    atomic_store_explicit(&s->lock, 0, memory_order_relaxed);
    if (ht_thread_key_ok) {
        t->guard++; /* pthread_setspecific may calloc for high keys */
        pthread_setspecific(ht_thread_key, s);
        t->guard--;
    }
    t->slot = s;
    t->phase = HT_PH_ACTIVE;
    ht_rec_thread_start(s);
    HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
}

void ht_thread_exit(void *v)
{
    struct ht_slot *s = v;
    struct ht_tls *t = &ht_tls;
    if (!s || t->slot != s)
        return;
    t->guard++;
    ht_rec_thread_flush(s);
    for (int i = 0; i < HT_TC_N; i++)
        atomic_fetch_add_explicit(&ht_global_cnt[i], s->cnt[i], memory_order_relaxed);
    memset(s->cnt, 0, sizeof s->cnt);
    /* Later events of this thread (other TLS destructors) go direct. */
    t->slot = NULL;
    t->phase = HT_PH_EXITED;
    atomic_store_explicit(&s->limit, 0, memory_order_relaxed);
    s->buf = NULL;
    atomic_store_explicit(&s->in_use, 0, memory_order_release);
    t->guard--;
}

void ht_thread_atfork_child(void)
{
    /* Only the forking thread survives. Its slot and every other slot hold the
     * parent's state: the records belong to the parent's log and the counters
     * to the parent's summary. Start over. */
    ht_tls.tid = 0;
    ht_tls.slot = NULL;
    ht_tls.phase = HT_PH_NONE;
    ht_tls.depth = 0;
    if (ht_slots) {
        for (unsigned i = 0; i < HT_MAX_SLOTS; i++) {
            struct ht_slot *s = &ht_slots[i];
            s->tid = 0;
            s->buf = NULL;
            s->flushed_ev = 0;
            atomic_store_explicit(&s->limit, 0, memory_order_relaxed);
            atomic_store_explicit(&s->fill, 0, memory_order_relaxed);
            memset(s->cnt, 0, sizeof s->cnt);
            atomic_store_explicit(&s->lock, 0, memory_order_relaxed);
            atomic_store_explicit(&s->in_use, 0, memory_order_relaxed);
        }
    }
    for (int i = 0; i < HT_TC_N; i++)
        atomic_store_explicit(&ht_global_cnt[i], 0, memory_order_relaxed);
}

void ht_counters_sum(uint64_t out[HT_TC_N])
{
    for (int i = 0; i < HT_TC_N; i++)
        out[i] = atomic_load_explicit(&ht_global_cnt[i], memory_order_relaxed);
    if (!ht_slots)
        return;
    for (unsigned k = 0; k < HT_MAX_SLOTS; k++) {
        struct ht_slot *s = &ht_slots[k];
        if (!atomic_load_explicit(&s->in_use, memory_order_acquire))
            continue;
        for (int i = 0; i < HT_TC_N; i++)
            out[i] += __atomic_load_n(&s->cnt[i], __ATOMIC_RELAXED);
    }
}
