/* refstream.h - encoder of hugetune reference streams, version 2 (docs/formats.md §6).
 *
 * Header only, no allocation, no I/O: each function encodes one item into a caller's
 * buffer and returns its length, so that the QEMU plugin and hugetune-work's trace
 * mode can keep per-thread buffers and append whole chunks to one file. Every
 * thread's REF records are relative to that thread's own state (struct htrs_thread),
 * and a chunk of a thread must start with a THREAD record. */
#ifndef HUGETUNE_REFSTREAM_H
#define HUGETUNE_REFSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HTRS_MAGIC "HTREFS\0\2"
#define HTRS_MAGIC_LEN 8
#define HTRS_MAX_REF 20     /* bytes of one REF record at most */
#define HTRS_MAX_REC 22     /* of any record (END: 1 + 10 + 10) */

enum { HTRS_K_REF = 0, HTRS_K_THREAD = 1, HTRS_K_THRESHOLD = 2, HTRS_K_END = 3 };

/* Per-thread encoder state. Zero-initialized: no reference yet. */
struct htrs_thread {
    uint64_t prev_addr;
    uint64_t next_seq; /* seq + 1 of the previous REF */
};

static inline size_t htrs_varint(unsigned char *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

/* The header: magic, JSON length, JSON. Returns 0 if it does not fit in cap. */
static inline size_t htrs_header(unsigned char *out, size_t cap, const char *json)
{
    size_t n = strlen(json);
    if (n > 65536 || HTRS_MAGIC_LEN + 4 + n > cap)
        return 0;
    memcpy(out, HTRS_MAGIC, HTRS_MAGIC_LEN);
    out[8] = (unsigned char)n;
    out[9] = (unsigned char)(n >> 8);
    out[10] = (unsigned char)(n >> 16);
    out[11] = (unsigned char)(n >> 24);
    memcpy(out + 12, json, n);
    return HTRS_MAGIC_LEN + 4 + n;
}

/* One reference of thread t; seq must be at least t->next_seq (the next index). */
static inline size_t htrs_ref(unsigned char *out, struct htrs_thread *t, uint64_t addr, int write,
                              uint64_t seq)
{
    int64_t d = (int64_t)(addr - t->prev_addr);
    uint64_t zz = ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);
    /* h = zz << 3 | write << 2 | REF: up to 67 bits. */
    unsigned __int128 h = ((unsigned __int128)zz << 3) | ((unsigned)(write != 0) << 2) | HTRS_K_REF;
    size_t n = 0;
    while (h >= 0x80) {
        out[n++] = (unsigned char)(h | 0x80);
        h >>= 7;
    }
    out[n++] = (unsigned char)h;
    n += htrs_varint(out + n, seq - t->next_seq);
    t->prev_addr = addr;
    t->next_seq = seq + 1;
    return n;
}

/* The next reference of thread t, right after its previous one. */
static inline size_t htrs_ref_next(unsigned char *out, struct htrs_thread *t, uint64_t addr,
                                   int write)
{
    return htrs_ref(out, t, addr, write, t->next_seq);
}

/* Thread ids are below 2^62. */
static inline size_t htrs_thread_rec(unsigned char *out, uint64_t tid)
{
    return htrs_varint(out, tid << 2 | HTRS_K_THREAD);
}

static inline size_t htrs_threshold(unsigned char *out, uint64_t threshold)
{
    return htrs_varint(out, threshold << 2 | HTRS_K_THRESHOLD);
}

static inline size_t htrs_end(unsigned char *out, uint64_t refs_seen, uint64_t refs_written)
{
    size_t n = htrs_varint(out, HTRS_K_END);
    n += htrs_varint(out + n, refs_seen);
    return n + htrs_varint(out + n, refs_written);
}

/* MurmurHash3's 64-bit finalizer: spatial sampling keeps page p iff
 * htrs_fmix64(p ^ seed) % modulus < threshold. */
static inline uint64_t htrs_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

#endif
