/* The kernels.  Each one sets up its memory (timed as initialization), runs
 * cfg->iters passes (timed as the kernel phase), then computes its checksum and
 * frees everything (not timed). */
#ifndef HTW_KERNELS_H
#define HTW_KERNELS_H

#include <stdint.h>

#include "config.h"

struct kresult {
    uint64_t accesses;          /* per pass: accesses, steps, updates, elements or events */
    uint64_t checksum;
    double seconds;             /* kernel phase, all passes */
    double init_seconds;
    uint64_t minor_faults;      /* during the kernel phase */
    uint64_t init_minor_faults;
    uintptr_t buffer;           /* address of the main buffer (first node for heap-small) */
    double residual;            /* cg: ||r|| / ||b|| after the last pass */
};

void kernel_randmem(const struct config *cfg, struct kresult *res);
void kernel_chase(const struct config *cfg, struct kresult *res);
void kernel_gups(const struct config *cfg, struct kresult *res);
void kernel_stream(const struct config *cfg, struct kresult *res);
void kernel_primes(const struct config *cfg, struct kresult *res);
void kernel_malloc(const struct config *cfg, struct kresult *res);
void kernel_cg(const struct config *cfg, struct kresult *res);

/* The same kernels with --trace's hook compiled in (the Makefile builds them a
 * second time with HTW_TRACE and these names). */
void kernel_randmem_traced(const struct config *cfg, struct kresult *res);
void kernel_chase_traced(const struct config *cfg, struct kresult *res);
void kernel_gups_traced(const struct config *cfg, struct kresult *res);
void kernel_stream_traced(const struct config *cfg, struct kresult *res);
void kernel_malloc_traced(const struct config *cfg, struct kresult *res);
void kernel_cg_traced(const struct config *cfg, struct kresult *res);

/* Deterministic order-independent checksum contribution of word v at position i. */
static inline uint64_t checksum_word(uint64_t i, uint64_t v)
{
    uint64_t z = v ^ (i * 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ULL;
    return z ^ (z >> 29);
}

/* Threshold on 16 random bits for randmem's random-vs-sequential decision. */
static inline uint32_t pct_threshold(double pct)
{
    return (uint32_t)(pct / 100.0 * 65536.0 + 0.5);
}

/* cg's matrix: CG_OFFDIAG off-diagonal entries and the diagonal in every row.  Per
 * row, heap-large and static hold CG_ROW_BYTES: the values (8 bytes each) and column
 * indices (4 bytes each) of its entries, its row pointer (8) and its element of the
 * four vectors x, r, p, q (8 each); the seven arrays' 64-byte alignment takes up to
 * CG_SLACK bytes.  The rows n = A * B (B even, both about sqrt(n): the matrix is built
 * by a Feistel network over [0, A) x [0, B)) are the most that fit, less at most B;
 * n must fit the 32-bit column indices. */
#define CG_OFFDIAG 16u
#define CG_ROW_NNZ (CG_OFFDIAG + 1u)
#define CG_ROW_BYTES (CG_ROW_NNZ * 12u + 8u + 4u * 8u)     /* 244 */
#define CG_SLACK (7u * 2u * 64u + 8u)
#define CG_MAX_ROWS 4294967296ULL

static inline void cg_shape(uint64_t size, uint64_t *a, uint64_t *b)
{
    const uint64_t most = size <= CG_SLACK ? 0 : (size - CG_SLACK) / CG_ROW_BYTES;
    uint64_t r = most, y = (most + 1) / 2;   /* r = floor(sqrt(most)), Newton from above */
    while (y < r) {
        r = y;
        y = (r + most / r) / 2;
    }
    *b = r < 2 ? 2 : r & ~1ULL;
    *a = most / *b;
}

static inline uint64_t cg_rows(uint64_t size)
{
    uint64_t a, b;
    cg_shape(size, &a, &b);
    return a * b;
}

#endif
