/* rec.h - record mode's hot path: clock, event encoding, per-thread append.
 *
 * Included by hooks.c (where it is inlined into each hook's record branch with
 * the kind known at compile time) and record.c. The format is version 2 of the
 * allocation log (docs/formats.md §2); record.c has the cold parts.
 *
 * Cost model, measured on the reference machine (docs in runtime/README.md):
 * what a recorded call must pay is one clock read (rdtsc, ~10 ns here; the
 * CLOCK_MONOTONIC read of version 1 was ~27 ns), a few stores into the
 * thread's buffer, and its share of the file write (about 0.35 ns per byte:
 * hence the small, delta-encoded events instead of 64-byte records). No atomic
 * read-modify-write is on this path: the global sequence number is only kept
 * when markers are on (a reference trace needs the global order), the
 * re-entrancy guard is a plain thread-local counter (a signal handler runs on
 * the same thread), and the buffer is published with a release store. */
#ifndef HT_REC_H
#define HT_REC_H

#include "ht.h"
#include "enc.h"

#include <string.h>
#include <time.h>

#pragma GCC visibility push(hidden)

/* ---- clock ---- */

/* 1: event times are TSC ticks (invariant TSC); 0: CLOCK_MONOTONIC ns. Fixed
 * once, before the first event (ht_clock_setup). */
extern int ht_clock_tsc;
void ht_clock_setup(void);

static inline uint64_t ht_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ht_rdtsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
#else
    return 0;
#endif
}

static inline uint64_t ht_now(void)
{
    if (HT_LIKELY(ht_clock_tsc))
        return ht_rdtsc();
    return ht_mono_ns();
}

/* ---- append ---- */

extern int ht_rec_logging;  /* a log is open */
extern int ht_rec_with_seq; /* events carry the global seq (markers on) */

/* Out of line: no slot, re-entered, buffer full, after the exit flush. */
void ht_rec_put_slow(unsigned kind, unsigned flags, uint64_t seq, uint64_t t, uint64_t addr,
                     uint64_t size, uint64_t arg, uint64_t arg2, uint64_t caller);

/* Appends an event to the thread's buffer. t == HT_NOW: the clock is read
 * here, after the re-entrancy guard is set, so that a signal handler's events
 * are either entirely before this one in the buffer or written elsewhere:
 * times stay in order within a chunk (a time read earlier, as for munmap,
 * may be overtaken by a handler's events; the reader copes). */
#define HT_NOW 0
static inline __attribute__((always_inline)) void
ht_rec_put(unsigned kind, uint64_t seq, uint64_t t, uint64_t addr, uint64_t size, uint64_t arg,
           uint64_t arg2, const void *caller)
{
    struct ht_slot *s = ht_tls.slot;
    uint64_t c = (uint64_t)(uintptr_t)caller;
    if (HT_UNLIKELY(s == NULL || ht_tls.depth != 0)) {
        ht_rec_put_slow(kind, 0, seq, t, addr, size, arg, arg2, c);
        return;
    }
    ht_tls.depth = 1;
    atomic_signal_fence(memory_order_seq_cst);
    uint64_t fill = atomic_load_explicit(&s->fill, memory_order_relaxed);
    uint32_t pos = (uint32_t)fill;
    if (HT_UNLIKELY(pos + HT_EV_MAX > atomic_load_explicit(&s->limit, memory_order_relaxed))) {
        atomic_signal_fence(memory_order_seq_cst);
        ht_tls.depth = 0;
        ht_rec_put_slow(kind, 0, seq, t, addr, size, arg, arg2, c);
        return;
    }
    if (t == HT_NOW)
        t = ht_now();
    unsigned char *p = s->buf + pos, *end;
    if (ht_rec_with_seq)
        end = ht_enc_event(p, &s->enc, kind, 0, 1, seq, t, addr, size, arg, arg2, c);
    else
        end = ht_enc_event(p, &s->enc, kind, 0, 0, 0, t, addr, size, arg, arg2, c);
    atomic_store_explicit(&s->fill, fill + (1ull << 32) + (uint64_t)(end - p), memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    ht_tls.depth = 0;
}

/* Hooked calls that happen before the library is initialized (mode not known
 * yet) go to a static buffer, copied into the log when it opens. Returns 0 if
 * that buffer is closed already (initialization just finished: record the
 * call normally). */
int ht_preinit_event(unsigned kind, uint64_t t, uint64_t addr, uint64_t size, uint64_t arg,
                     uint64_t arg2, const void *caller);

#pragma GCC visibility pop

#endif
