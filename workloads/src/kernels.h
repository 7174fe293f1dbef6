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
    double residual;            /* cg: ||r|| / ||b||, mg: ||r|| / ||v|| after the last pass */
    double work;                /* if > 0: the rate's units over all passes (in place of
                                 * accesses x iters), for kernels whose passes differ */
};

void kernel_randmem(const struct config *cfg, struct kresult *res);
void kernel_chase(const struct config *cfg, struct kresult *res);
void kernel_gups(const struct config *cfg, struct kresult *res);
void kernel_stream(const struct config *cfg, struct kresult *res);
void kernel_primes(const struct config *cfg, struct kresult *res);
void kernel_malloc(const struct config *cfg, struct kresult *res);
void kernel_cg(const struct config *cfg, struct kresult *res);
void kernel_mg(const struct config *cfg, struct kresult *res);
void kernel_sp(const struct config *cfg, struct kresult *res);
void kernel_bigbuf(const struct config *cfg, struct kresult *res);
void kernel_panels(const struct config *cfg, struct kresult *res);
void kernel_ptrees(const struct config *cfg, struct kresult *res);
void kernel_iocopy(const struct config *cfg, struct kresult *res);

/* The same kernels with --trace's hook compiled in (the Makefile builds them a
 * second time with HTW_TRACE and these names). */
void kernel_randmem_traced(const struct config *cfg, struct kresult *res);
void kernel_chase_traced(const struct config *cfg, struct kresult *res);
void kernel_gups_traced(const struct config *cfg, struct kresult *res);
void kernel_stream_traced(const struct config *cfg, struct kresult *res);
void kernel_malloc_traced(const struct config *cfg, struct kresult *res);
void kernel_cg_traced(const struct config *cfg, struct kresult *res);
void kernel_mg_traced(const struct config *cfg, struct kresult *res);
void kernel_sp_traced(const struct config *cfg, struct kresult *res);
void kernel_bigbuf_traced(const struct config *cfg, struct kresult *res);
void kernel_panels_traced(const struct config *cfg, struct kresult *res);
void kernel_ptrees_traced(const struct config *cfg, struct kresult *res);
void kernel_iocopy_traced(const struct config *cfg, struct kresult *res);

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

/* mg's grid: nx x ny x nz points, each a power of two, nx >= ny >= nz >= nx / 2
 * (2^e points: (2^q)^3, 2^(q+1) x 2^q x 2^q or 2^(q+1) x 2^(q+1) x 2^q for e = 3q,
 * 3q + 1, 3q + 2), coarsened by halving every axis down to nz = 2: q levels.  Every
 * level is stored as NAS MG stores it, with a ghost layer on each side:
 * (nx + 2) x (ny + 2) x (nz + 2) doubles.  Memory: u and r hold every level, v the
 * finest only; MG_SLACK is the three arrays' 64-byte alignment.  The grid is the
 * largest whose arrays fit --size; at least 8 x 8 x 8 (e = 9). */
#define MG_MIN_EXP 9u
#define MG_SLACK (3u * 2u * 64u)

struct mgshape {
    unsigned e;                 /* log2 of the finest grid's points; 0: --size too small */
    unsigned lx, ly, lz;        /* log2 of nx, ny, nz */
    unsigned levels;            /* lz: the coarsest level has nz = 2 */
    uint64_t points;            /* finest level, interior */
    uint64_t level_points;      /* all levels with their ghosts (u and r each) */
    uint64_t bytes;             /* u + r + v, with MG_SLACK */
};

static inline void mg_shape_exp(unsigned e, struct mgshape *s)
{
    const unsigned q = e / 3, rem = e % 3;
    s->e = e;
    s->lz = q;
    s->ly = q + (rem == 2);
    s->lx = q + (rem >= 1);
    s->levels = q;
    s->points = 1ULL << e;
    s->level_points = 0;
    uint64_t fine = 0;
    for (unsigned l = 0; l < q; l++) {
        const uint64_t pts = ((1ULL << (s->lx - l)) + 2) * ((1ULL << (s->ly - l)) + 2) * ((1ULL << (s->lz - l)) + 2);
        if (l == 0)
            fine = pts;
        s->level_points += pts;
    }
    s->bytes = 8 * (2 * s->level_points + fine) + MG_SLACK;
}

static inline void mg_shape(uint64_t size, struct mgshape *s)
{
    struct mgshape t;
    mg_shape_exp(MG_MIN_EXP, s);
    if (s->bytes > size) {
        s->e = 0;
        return;
    }
    for (unsigned e = MG_MIN_EXP + 1; e < 60; e++) {
        mg_shape_exp(e, &t);
        if (t.bytes > size)
            break;
        *s = t;
    }
}

/* sp's grid: n x n x n points of SP_POINT_BYTES (u, rhs and forcing of 5 doubles,
 * rho_i and speed), the largest n whose five arrays (with SP_SLACK of alignment)
 * fit --size; 0 below SP_MIN_SIDE. */
#define SP_POINT_BYTES (17u * 8u)
#define SP_SLACK (5u * 2u * 64u)
#define SP_MIN_SIDE 8u

static inline uint64_t sp_side(uint64_t size)
{
    if (size <= SP_SLACK)
        return 0;
    const uint64_t most = (size - SP_SLACK) / SP_POINT_BYTES;
    uint64_t n = 1;
    while ((n + 1) * (n + 1) * (n + 1) <= most)
        n++;
    return n < SP_MIN_SIDE ? 0 : n;
}

/* bigbuf: BB_SLICES slices of the buffer, blocks of BB_MIN_BLOCK..BB_MAX_BLOCK bytes
 * (mean 544 KiB); by default as many blocks per pass as fill --size on average,
 * rounded up to whole waves (one block per slice). */
#define BB_SLICES 64u
#define BB_MIN_BLOCK (64u << 10)
#define BB_MAX_BLOCK (1u << 20)
#define BB_MIN_SIZE (1ULL << 20)

static inline uint64_t bigbuf_default_blocks(uint64_t size)
{
    const uint64_t b = size / ((BB_MIN_BLOCK + BB_MAX_BLOCK) / 2);
    return b <= BB_SLICES ? BB_SLICES : (b + BB_SLICES - 1) / BB_SLICES * BB_SLICES;
}

/* panels: sizes in [PANEL_MIN, PANEL_MAX] (mean 7.5 MiB; every fourth k x 2 MiB + 1,
 * k in 2..5); at most --size live, so --size must hold the largest; by default a pass
 * allocates about twice --size. */
#define PANEL_2M (2ULL << 20)
#define PANEL_MIN (3ULL << 20)
#define PANEL_MAX (12ULL << 20)
#define PANELS_MIN_SIZE PANEL_MAX

static inline uint64_t panels_default(uint64_t size)
{
    const uint64_t mean = (PANEL_MIN + PANEL_MAX) / 2, n = (2 * size + mean - 1) / mean;
    return n < 4 ? 4 : n;
}

/* ptrees: objects of PT_MIN_BYTES..PT_MAX_BYTES (16-byte steps), each an
 * PT_HEADER_BYTES header and 64-bit words; by default one predicate per two objects. */
#define PT_HEADER_BYTES 80u
#define PT_MIN_BYTES 1536u
#define PT_MAX_BYTES 2560u
#define PT_MIN_SIZE (64u << 10)

static inline uint64_t ptrees_default(uint64_t objects) { return objects < 2 ? 1 : objects / 2; }

#endif
