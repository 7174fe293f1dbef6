/* enc.h - the event encoding of the allocation log, version 2
 * (docs/formats.md §2.3). Pure: no library state, so the unit tests and the
 * floor benchmark use exactly the code the hooks run.
 *
 * An event is an opcode byte (kind | flags), the time delta in 2 bytes
 * (unless flagged long), one width nibble per field (low nibble first, 0..8
 * bytes), then each field in that many little-endian bytes. Fields are
 * [seq], [time if long], addr, then size/arg/arg2/caller as the kind stores
 * them; seq, time, addr and caller are deltas against the previous event of
 * the chunk (caller: of the same kind & 15), zigzag-coded. A malloc/free pair
 * takes about 20 bytes instead of the 128 of version 1, and the encoding has
 * no data-dependent branch (the long-time test is predictable). */
#ifndef HT_ENC_H
#define HT_ENC_H

#include <stdint.h>
#include <string.h>

enum ht_kind {
    HT_K_MALLOC = 1,
    HT_K_CALLOC = 2,
    HT_K_REALLOC = 3,
    HT_K_FREE = 4,
    HT_K_POSIX_MEMALIGN = 5,
    HT_K_ALIGNED_ALLOC = 6,
    HT_K_MEMALIGN = 7,
    HT_K_VALLOC = 8,
    HT_K_PVALLOC = 9,
    HT_K_MMAP = 10,
    HT_K_MUNMAP = 11,
    HT_K_MREMAP = 12,
    HT_K_REALLOCARRAY = 13,
    HT_K_RANGE_CALL = 14, /* mprotect / madvise of a range (formats.md §2.3) */
    HT_K_THREAD = 20,
    HT_K_MODULE = 21,
    HT_K_MAPS = 22,
    HT_K_OWN_REGION = 23,
    HT_K_STACK = 24,
    HT_K_FORK = 25,
    HT_K_EXEC = 26,
    HT_K_BRK = 27, /* written by the QEMU plugin only (formats.md §2.10) */
};

/* Delta encoder state of one chunk: every field is stored relative to the
 * previous event of the chunk. A new chunk starts from zeros. */
struct ht_enc {
    uint64_t prev_seq, prev_time, prev_addr;
    uint64_t last_caller[16]; /* by kind & 15 */
};

/* ---- event encoding (formats.md §2.3) ---- */

/* Fields besides [seq], time and addr that a kind stores. */
#define HT_F_SIZE 1u
#define HT_F_ARG 2u
#define HT_F_ARG2 4u
#define HT_F_CALLER 8u
#define HT_F_ALL (HT_F_SIZE | HT_F_ARG | HT_F_ARG2 | HT_F_CALLER)

/* Event flags (bits 6-7 of the opcode byte). */
#define HT_EVF_PREINIT 0x40u   /* recorded before initialization: no marker */
#define HT_EVF_LONG_TIME 0x80u /* the time delta is a field (else: 2 bytes after the opcode) */

/* Worst-case bytes an event may touch: opcode + 4 width bytes + 7 fields of 8
 * bytes, plus the 8-byte overhang of the last store. */
#define HT_EV_MAX 72u
/* Chunk header (formats.md §2.2). */
#define HT_CHUNK_HDR 40u
#define HT_CHUNK_TAG 0x4b435448u /* "HTCK" */

static inline unsigned ht_kind_fields(unsigned kind)
{
    switch (kind) {
    case HT_K_MALLOC: return HT_F_SIZE | HT_F_CALLER;
    case HT_K_CALLOC: return HT_F_ALL;
    case HT_K_REALLOC: return HT_F_SIZE | HT_F_ARG | HT_F_CALLER;
    case HT_K_FREE: return HT_F_CALLER;
    case HT_K_POSIX_MEMALIGN: return HT_F_ALL;
    case HT_K_ALIGNED_ALLOC:
    case HT_K_MEMALIGN:
    case HT_K_VALLOC:
    case HT_K_PVALLOC: return HT_F_SIZE | HT_F_ARG | HT_F_CALLER;
    case HT_K_MMAP: return HT_F_ALL;
    case HT_K_MUNMAP: return HT_F_SIZE | HT_F_ARG | HT_F_CALLER;
    case HT_K_MREMAP: return HT_F_ALL;
    case HT_K_REALLOCARRAY: return HT_F_SIZE | HT_F_ARG | HT_F_CALLER;
    case HT_K_RANGE_CALL: return HT_F_ALL;
    case HT_K_THREAD: return 0;
    case HT_K_MODULE: return HT_F_SIZE | HT_F_ARG;
    case HT_K_MAPS: return HT_F_SIZE | HT_F_ARG;
    case HT_K_OWN_REGION: return HT_F_SIZE;
    case HT_K_STACK: return HT_F_SIZE | HT_F_ARG | HT_F_ARG2;
    case HT_K_FORK: return HT_F_ARG | HT_F_CALLER;
    case HT_K_EXEC: return HT_F_ALL;
    case HT_K_BRK: return HT_F_ARG | HT_F_CALLER;
    default: return HT_F_ALL;
    }
}

static inline uint64_t ht_zz(uint64_t d) { return (d << 1) ^ (uint64_t)((int64_t)d >> 63); }

/* Bytes needed for v (0 for 0), without a branch: bsr, setne, lea, shr. */
static inline unsigned ht_width(uint64_t v)
{
    unsigned top = 63u ^ (unsigned)__builtin_clzll(v | 1); /* index of the highest set bit */
    return (top + 8u * (unsigned)(v != 0)) >> 3;
}

/* The fields after the time (and the time itself when long): width nibbles
 * at p, then the values. n_time is 1 when the time delta is one of them. */
static inline __attribute__((always_inline)) unsigned char *
ht_enc_fields(unsigned char *p, struct ht_enc *e, unsigned kind, int with_seq, int with_time,
              uint64_t seq, uint64_t dt, uint64_t addr, uint64_t size, uint64_t arg, uint64_t arg2,
              uint64_t caller)
{
    const unsigned m = ht_kind_fields(kind);
    /* Straight-line code: kind, with_seq and with_time are constants at every
     * call site, so the field list, its length and each nibble position fold. */
    uint64_t v0 = 0, v1 = 0, v2 = 0, v3 = 0, v4 = 0, v5 = 0, v6 = 0;
    unsigned n = 0;
#define HT_ENC_PUT(val)                                                        \
    do {                                                                       \
        uint64_t x_ = (val);                                                   \
        switch (n) {                                                           \
        case 0: v0 = x_; break;                                                \
        case 1: v1 = x_; break;                                                \
        case 2: v2 = x_; break;                                                \
        case 3: v3 = x_; break;                                                \
        case 4: v4 = x_; break;                                                \
        case 5: v5 = x_; break;                                                \
        default: v6 = x_; break;                                               \
        }                                                                      \
        n++;                                                                   \
    } while (0)
    if (with_seq) {
        HT_ENC_PUT(ht_zz(seq - e->prev_seq));
        e->prev_seq = seq;
    }
    if (with_time)
        HT_ENC_PUT(ht_zz(dt));
    HT_ENC_PUT(ht_zz(addr - e->prev_addr));
    e->prev_addr = addr;
    if (m & HT_F_SIZE)
        HT_ENC_PUT(size);
    if (m & HT_F_ARG)
        HT_ENC_PUT(arg);
    if (m & HT_F_ARG2)
        HT_ENC_PUT(arg2);
    if (m & HT_F_CALLER) {
        HT_ENC_PUT(ht_zz(caller - e->last_caller[kind & 15]));
        e->last_caller[kind & 15] = caller;
    }
#undef HT_ENC_PUT
    const unsigned w0 = ht_width(v0), w1 = ht_width(v1), w2 = ht_width(v2), w3 = ht_width(v3);
    const unsigned w4 = ht_width(v4), w5 = ht_width(v5), w6 = ht_width(v6);
    /* Unused fields are 0 and have width 0: their nibbles are 0. */
    uint32_t nib = w0 | (w1 << 4) | (w2 << 8) | (w3 << 12) | (w4 << 16) | (w5 << 20) | (w6 << 24);
    __builtin_memcpy(p, &nib, 4); /* the bytes past the width nibbles are overwritten below */
    unsigned char *q = p + ((n + 1) >> 1);
#define HT_ENC_STORE(i)                                                        \
    if ((i) < n) {                                                             \
        __builtin_memcpy(q, &v##i, 8);                                         \
        q += w##i;                                                             \
    }
    HT_ENC_STORE(0)
    HT_ENC_STORE(1)
    HT_ENC_STORE(2)
    HT_ENC_STORE(3)
    HT_ENC_STORE(4)
    HT_ENC_STORE(5)
    HT_ENC_STORE(6)
#undef HT_ENC_STORE
    return q;
}

/* A time delta of 2^16 ticks or more, or negative: the time is a field. */
static __attribute__((noinline, unused)) unsigned char *
ht_enc_event_long(unsigned char *p, struct ht_enc *e, unsigned kind, unsigned flags, int with_seq,
                  uint64_t seq, uint64_t dt, uint64_t addr, uint64_t size, uint64_t arg,
                  uint64_t arg2, uint64_t caller)
{
    p[0] = (unsigned char)(kind | flags | HT_EVF_LONG_TIME);
    if (with_seq)
        return ht_enc_fields(p + 1, e, kind, 1, 1, seq, dt, addr, size, arg, arg2, caller);
    return ht_enc_fields(p + 1, e, kind, 0, 1, seq, dt, addr, size, arg, arg2, caller);
}

/* Encodes one event at p (which has HT_EV_MAX bytes of room) and returns its
 * end. The common case stores the time delta in a fixed 2 bytes: the end of
 * the event (where the next one goes) must not depend on the clock read, or
 * the clock's latency (~40 cycles for rdtsc) is paid in series, event after
 * event. */
static inline __attribute__((always_inline)) unsigned char *
ht_enc_event(unsigned char *p, struct ht_enc *e, unsigned kind, unsigned flags, int with_seq,
             uint64_t seq, uint64_t t, uint64_t addr, uint64_t size, uint64_t arg, uint64_t arg2,
             uint64_t caller)
{
    uint64_t dt = t - e->prev_time;
    e->prev_time = t;
    if (__builtin_expect(dt >= 65536, 0))
        return ht_enc_event_long(p, e, kind, flags, with_seq, seq, dt, addr, size, arg, arg2, caller);
    p[0] = (unsigned char)(kind | flags);
    uint16_t d16 = (uint16_t)dt;
    __builtin_memcpy(p + 1, &d16, 2);
    return ht_enc_fields(p + 3, e, kind, with_seq, 0, seq, 0, addr, size, arg, arg2, caller);
}

#endif
