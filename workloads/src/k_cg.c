/* cg: conjugate gradient on a random sparse symmetric positive definite matrix, the
 * pattern of NAS CG: every pass streams through the CSR arrays (row pointers, column
 * indices, values) and gathers the vector p at random columns, then runs the vector
 * updates of one CG iteration.
 *
 * The matrix (n x n, CSR with uint64_t row pointers, uint32_t column indices and
 * double values; n = A * B, B even, see cg_shape) has in every row CG_OFFDIAG
 * off-diagonal entries and the diagonal.  Off-diagonal entry s of row i comes from the
 * s-th of CG_OFFDIAG random perfect matchings of the rows: sigma_s is a pseudo-random
 * permutation of [0, n) (a 4-round Feistel network on [0, A) x [0, B), below), and row
 * i is paired with j = sigma_s^-1(sigma_s(i) xor 1).  The pairing is an involution
 * without fixed points, so row j's entry s is i, and the value, a hash of the pair's
 * place sigma_s(i) / 2, is the same in both rows: A = A^T, built row by row without
 * any transposition or temporary array.  Off-diagonal values are -k/256, k in 1..256;
 * the diagonal is 1 + the sum of the row's |off-diagonals| (a weighted graph Laplacian
 * plus the identity: strictly diagonally dominant, hence SPD, eigenvalues in [1, 33]).
 * Every value is a multiple of 1/256, so the matrix is exact.  Each row's entries are
 * sorted by column (the diagonal among them); duplicate columns (two matchings pairing
 * the same rows, about 120 in the whole matrix) stay separate entries.
 *
 * A pass is one CG iteration as in NAS CG: q = A p; alpha = rho / (p.q);
 * x += alpha p; r -= alpha q; rho' = r.r; beta = rho' / rho; p = r + beta p.  The
 * system is A x = b with b_i = k/256, k in 1..256 from the seed; the start is x = 0,
 * r = p = b, rho = b.b.  Every CG_RESTART passes the iteration restarts from that
 * start (in place of the p update of the pass before; NAS CG also runs 25 iterations
 * per solve), so that any --iters keeps the numbers far from underflow (denormals
 * would slow the arithmetic down) and the passes alike.
 *
 * Threads: the rows are cut into nb = min(n, CG_MAX_BLOCKS) fixed blocks, and thread t
 * takes an equal share of consecutive blocks (static).  A dot product is summed row by
 * row within a block, then the blocks' partial sums are added in block order by every
 * thread: the same operations in the same order for any number of threads and any
 * placement, so x, the residual and the checksum do not depend on --threads, --place
 * or --page.  The partial sums (two static arrays of CG_MAX_BLOCKS doubles) are the
 * reductions' scratch, like a local: they are not traced.
 *
 * Placements:
 *   heap-large / static: seven arrays, each its own buffer (bigbufs_get_sizes): values,
 *     column indices, row pointers, x, r, p, q, in that order in static_buf.
 *   heap-small: one block per row (struct node: next row, number of entries, then the
 *     values and the column indices; 220 bytes), linked in order; the four vectors in
 *     chunks of CG_VCHUNK doubles (16 KiB), each vector's chunks reached through its
 *     own radix index (nodes.h).  A gather p[j] is an index walk to chunk j / 2048
 *     and a load in it.  No allocation reaches 64 KiB. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "access.h"
#include "kernels.h"
#include "memory.h"
#include "nodes.h"
#include "rng.h"
#include "trace.h"
#include "util.h"

#define CG_FEISTEL_ROUNDS 4
#define CG_MAX_BLOCKS 4096u
#define CG_RESTART 25u
#define CG_VCHUNK_SHIFT 11u
#define CG_VCHUNK (1u << CG_VCHUNK_SHIFT)
#define CG_VMASK (CG_VCHUNK - 1)
#define CG_ROWBLOCK_BYTES (NODE_HEADER_BYTES + CG_ROW_NNZ * (sizeof(double) + sizeof(uint32_t)))

enum { V_X, V_R, V_P, V_Q, CG_VECTORS };

/* Per-block partial sums of p.q and r.r (see the top of the file). */
static double pq_part[CG_MAX_BLOCKS], rr_part[CG_MAX_BLOCKS];

/* ---- the matrix ---------------------------------------------------------------- */

/* A pseudo-random permutation of the rows [0, n), n = A * B: row x is the pair
 * (x / B, x % B) in [0, A) x [0, B), and a round of a Feistel network with modular
 * addition maps (u, v) to (v, (u + F(v)) mod |u's range|), so the two ranges swap
 * places each round and are back after an even number of rounds.  A bijection of
 * [0, A) x [0, B) with no cycle walking and no division (F's value is reduced with
 * below()). */
struct cgperm {
    uint64_t key[CG_FEISTEL_ROUNDS];
    uint64_t vkey;          /* the values of this matching's pairs */
};

struct cggen {
    uint64_t a, b;          /* n = a * b, b even */
    uint64_t bkey;          /* the right-hand side */
    struct cgperm perm[CG_OFFDIAG];
};

/* Sums and differences mod m of values below m; the round function F, in [0, m). */
static inline uint64_t add_mod(uint64_t x, uint64_t y, uint64_t m) { x += y; return x >= m ? x - m : x; }
static inline uint64_t sub_mod(uint64_t x, uint64_t y, uint64_t m) { return x >= y ? x - y : x + m - y; }
static inline uint64_t round_f(uint64_t v, uint64_t key, uint64_t m) { return below(mix64(v ^ key), m); }

static inline void perm_fwd(const struct cggen *g, const struct cgperm *f, uint64_t *u, uint64_t *v)
{
    uint64_t x = *u, y = *v;    /* x in [0, a), y in [0, b) */
    for (int k = 0; k < CG_FEISTEL_ROUNDS; k += 2) {
        const uint64_t t = add_mod(x, round_f(y, f->key[k], g->a), g->a);
        x = y;                   /* now x in [0, b), y = t in [0, a) */
        y = add_mod(x, round_f(t, f->key[k + 1], g->b), g->b);
        x = t;                   /* x in [0, a), y in [0, b) again */
    }
    *u = x;
    *v = y;
}

static inline void perm_inv(const struct cggen *g, const struct cgperm *f, uint64_t *u, uint64_t *v)
{
    uint64_t x = *u, y = *v;
    for (int k = CG_FEISTEL_ROUNDS - 2; k >= 0; k -= 2) {
        /* Round k + 1 made (x, y) from (y0, x) with y = (y0 + F(x)) mod b. */
        const uint64_t y0 = sub_mod(y, round_f(x, f->key[k + 1], g->b), g->b);
        /* Round k made (y0, x) from (x0, y0) with x = (x0 + F(y0)) mod a. */
        const uint64_t x0 = sub_mod(x, round_f(y0, f->key[k], g->a), g->a);
        x = x0;
        y = y0;
    }
    *u = x;
    *v = y;
}

static void gen_init(struct cggen *g, const struct config *cfg)
{
    cg_shape(cfg->size, &g->a, &g->b);
    uint64_t st = stream_seed(cfg->seed, RNG_CG, 0);
    g->bkey = splitmix64(&st);
    for (unsigned s = 0; s < CG_OFFDIAG; s++) {
        for (int k = 0; k < CG_FEISTEL_ROUNDS; k++)
            g->perm[s].key[k] = splitmix64(&st);
        g->perm[s].vkey = splitmix64(&st);
    }
}

/* Batcher's odd-even merge sort of 16 keys: 63 compare-exchanges, written out so they
 * compile to branch-free min/max in registers. */
_Static_assert(CG_OFFDIAG == 16, "sort16 sorts 16 entries");
static inline void sort16(uint64_t *k)
{
#define CE(i, j) \
    do { \
        const uint64_t x_ = k[i], y_ = k[j]; \
        k[i] = x_ < y_ ? x_ : y_; \
        k[j] = x_ < y_ ? y_ : x_; \
    } while (0)
    CE(0, 1); CE(2, 3); CE(4, 5); CE(6, 7); CE(8, 9); CE(10, 11); CE(12, 13);
    CE(14, 15); CE(0, 2); CE(1, 3); CE(4, 6); CE(5, 7); CE(8, 10); CE(9, 11);
    CE(12, 14); CE(13, 15); CE(1, 2); CE(5, 6); CE(9, 10); CE(13, 14); CE(0, 4);
    CE(1, 5); CE(2, 6); CE(3, 7); CE(8, 12); CE(9, 13); CE(10, 14); CE(11, 15);
    CE(2, 4); CE(3, 5); CE(10, 12); CE(11, 13); CE(1, 2); CE(3, 4); CE(5, 6);
    CE(9, 10); CE(11, 12); CE(13, 14); CE(0, 8); CE(1, 9); CE(2, 10); CE(3, 11);
    CE(4, 12); CE(5, 13); CE(6, 14); CE(7, 15); CE(4, 8); CE(5, 9); CE(6, 10);
    CE(7, 11); CE(2, 4); CE(3, 5); CE(6, 8); CE(7, 9); CE(10, 12); CE(11, 13);
    CE(1, 2); CE(3, 4); CE(5, 6); CE(7, 8); CE(9, 10); CE(11, 12); CE(13, 14);
#undef CE
}

/* Row i: CG_ROW_NNZ (column, value) pairs, sorted by column.  Its partner in
 * matching s is sigma_s^-1(sigma_s(i) xor 1) (xor 1 on the [0, b) part: b is even),
 * and the value -(c + 1)/256 with c a byte of a hash of the pair's place, the same
 * seen from either row.  The 16 off-diagonal entries are sorted as keys column << 8 | c
 * by Batcher's odd-even merge sort (fixed compare-exchanges, no data-dependent
 * branches), then the diagonal goes in its place. */
static void gen_row(const struct cggen *g, uint64_t i, uint32_t *col, double *val)
{
    const uint64_t u0 = i / g->b, v0 = i % g->b;
    uint64_t key[CG_OFFDIAG], sum = 0;
    for (unsigned s = 0; s < CG_OFFDIAG; s++) {
        uint64_t u = u0, v = v0;
        perm_fwd(g, &g->perm[s], &u, &v);
        v ^= 1;
        const uint64_t c = mix64(g->perm[s].vkey ^ (u << 32 | v >> 1)) & 255;
        perm_inv(g, &g->perm[s], &u, &v);
        key[s] = (u * g->b + v) << 8 | c;
        sum += c + 1;
    }
    sort16(key);
    unsigned e = 0, s = 0;
    for (; s < CG_OFFDIAG && key[s] >> 8 < i; s++, e++) {
        col[e] = (uint32_t)(key[s] >> 8);
        val[e] = -(double)((key[s] & 255) + 1) / 256.0;
    }
    col[e] = (uint32_t)i;
    val[e++] = 1.0 + (double)sum / 256.0;    /* 1 + the sum of |off-diagonals|, exact */
    for (; s < CG_OFFDIAG; s++, e++) {
        col[e] = (uint32_t)(key[s] >> 8);
        val[e] = -(double)((key[s] & 255) + 1) / 256.0;
    }
}

/* The right-hand side: b_i = k/256, k in 1..256 from the seed.  (Not constant: the
 * rows sum to 1, so b = 1 would be an eigenvector, solved in one iteration.) */
static inline uint64_t rhs_k(const struct cggen *g, uint64_t i) { return 1 + (mix64(g->bkey ^ i) & 255); }
static inline double rhs(const struct cggen *g, uint64_t i) { return (double)rhs_k(g, i) / 256.0; }

/* b.b, exactly: sum of k^2 (below 2^49 for 2^32 rows) / 65536. */
static double rhs_dot(const struct cggen *g, uint64_t n)
{
    uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
    for (uint64_t i = 0; i < n; i++)
        s += rhs_k(g, i) * rhs_k(g, i);
    return (double)s / 65536.0;
}

/* ---- shared pieces ------------------------------------------------------------- */

/* First row of block b of nb. */
static inline uint64_t block_start(uint64_t n, uint64_t nb, uint64_t b)
{
    return (uint64_t)(((unsigned __int128)n * b) / nb);
}

/* Thread t's blocks [*b0, *b1) and rows [*lo, *hi). */
static void thread_share(uint64_t n, uint64_t nb, unsigned t, unsigned nt, uint64_t *b0, uint64_t *b1,
                         uint64_t *lo, uint64_t *hi)
{
    uint64_t cnt;
    split_range(nb, t, nt, b0, &cnt);
    *b1 = *b0 + cnt;
    *lo = block_start(n, nb, *b0);
    *hi = block_start(n, nb, *b1);
}

/* The blocks' partial sums in block order (not reassociated: no -ffast-math). */
static double sum_parts(const double *part, uint64_t nb)
{
    double s = 0.0;
    for (uint64_t b = 0; b < nb; b++)
        s += part[b];
    return s;
}

static inline uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static inline uint64_t nblocks(uint64_t n) { return n < CG_MAX_BLOCKS ? n : CG_MAX_BLOCKS; }

static inline int restart_after(uint64_t it, uint64_t iters)
{
    return (it + 1) % CG_RESTART == 0 && it + 1 < iters;
}

/* ---- heap-large and static: seven flat arrays ------------------------------------ */

enum { A_VAL, A_COL, A_ROWPTR, A_X, A_R, A_P, A_Q, CG_FLAT_ARRAYS };

static void cg_flat(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    const uint64_t n = cg_rows(cfg->size), nnz = n * CG_ROW_NNZ, nb = nblocks(n);
    const size_t need[CG_FLAT_ARRAYS] = {
        [A_VAL] = nnz * sizeof(double), [A_COL] = nnz * sizeof(uint32_t), [A_ROWPTR] = (n + 1) * sizeof(uint64_t),
        [A_X] = n * sizeof(double), [A_R] = n * sizeof(double), [A_P] = n * sizeof(double), [A_Q] = n * sizeof(double),
    };
    /* Whatever the 64-byte alignment of the data costs comes out of the extra line;
     * cg_rows() left room for it in --size. */
    size_t bytes[CG_FLAT_ARRAYS];
    for (unsigned a = 0; a < CG_FLAT_ARRAYS; a++)
        bytes[a] = round_up(need[a], LINE_BYTES) + LINE_BYTES;
    struct bigbuf bb[CG_FLAT_ARRAYS];
    bigbufs_get_sizes(cfg, CG_FLAT_ARRAYS, bytes, bb);
    double *const val = (double *)bb[A_VAL].base;
    uint32_t *const col = (uint32_t *)bb[A_COL].base;
    uint64_t *const rowptr = (uint64_t *)bb[A_ROWPTR].base;
    double *const x = (double *)bb[A_X].base, *const r = (double *)bb[A_R].base;
    double *const p = (double *)bb[A_P].base, *const q = (double *)bb[A_Q].base;

    struct cggen g;
    gen_init(&g, cfg);
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < n; i++) {
        rowptr[i] = i * CG_ROW_NNZ;
        gen_row(&g, i, &col[i * CG_ROW_NNZ], &val[i * CG_ROW_NNZ]);
        x[i] = 0.0;
        r[i] = rhs(&g, i);
        p[i] = rhs(&g, i);
        q[i] = 0.0;
    }
    rowptr[n] = nnz;
    const double rho0 = rhs_dot(&g, n);    /* b.b */
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters;
    double rho_end = rho0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t b0, b1, lo, hi;
        thread_share(n, nb, t, nt, &b0, &b1, &lo, &hi);
        double rho = rho0;
        for (uint64_t it = 0; it < iters; it++) {
            /* q = A p; p.q */
            uint64_t e = ref_load_u64(&rowptr[lo]);
            for (uint64_t b = b0; b < b1; b++) {
                const uint64_t end_row = block_start(n, nb, b + 1);
                double s = 0.0;
                for (uint64_t i = block_start(n, nb, b); i < end_row; i++) {
                    const uint64_t end = ref_load_u64(&rowptr[i + 1]);
                    double sum = 0.0;
                    for (; e < end; e++) {
                        const uint32_t j = ref_load_u32(&col[e]);
                        const double a = ref_load_f64(&val[e]);
                        sum += a * ref_load_f64(&p[j]);
                    }
                    ref_store_f64(&q[i], sum);
                    s += ref_load_f64(&p[i]) * sum;
                }
                pq_part[b] = s;
            }
#pragma omp barrier
            const double pq = sum_parts(pq_part, nb);
            const double alpha = pq != 0.0 ? rho / pq : 0.0;
            /* x += alpha p; r -= alpha q; r.r */
            for (uint64_t b = b0; b < b1; b++) {
                const uint64_t end_row = block_start(n, nb, b + 1);
                double s = 0.0;
                for (uint64_t i = block_start(n, nb, b); i < end_row; i++) {
                    const double xi = ref_load_f64(&x[i]);
                    const double pi = ref_load_f64(&p[i]);
                    ref_store_f64(&x[i], xi + alpha * pi);
                    const double ri = ref_load_f64(&r[i]);
                    const double qi = ref_load_f64(&q[i]);
                    const double rn = ri - alpha * qi;
                    ref_store_f64(&r[i], rn);
                    s += rn * rn;
                }
                rr_part[b] = s;
            }
#pragma omp barrier
            const double rr = sum_parts(rr_part, nb);
            const double beta = rho != 0.0 ? rr / rho : 0.0;
            rho = rr;
            if (restart_after(it, iters)) {
                /* x = 0, r = p = b */
                for (uint64_t i = lo; i < hi; i++) {
                    ref_store_f64(&x[i], 0.0);
                    ref_store_f64(&r[i], rhs(&g, i));
                    ref_store_f64(&p[i], rhs(&g, i));
                }
                rho = rho0;
            } else {
                /* p = r + beta p */
                for (uint64_t i = lo; i < hi; i++) {
                    const double ri = ref_load_f64(&r[i]);
                    const double pi = ref_load_f64(&p[i]);
                    ref_store_f64(&p[i], ri + beta * pi);
                }
            }
#pragma omp barrier
        }
        if (t == 0)
            rho_end = rho;
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t i = 0; i < n; i++)
        sum += checksum_word(i, f64_bits(x[i]));
    res->accesses = nnz;
    res->checksum = sum;
    res->residual = sqrt(rho_end / rho0);
    res->buffer = (uintptr_t)bb[A_VAL].alloc;
    bigbufs_put(CG_FLAT_ARRAYS, bb);
}

/* ---- heap-small: row blocks and vector chunks ---------------------------------- */

/* The chunks of the four vectors that hold row i, looked up when i enters a new one. */
struct vcursor {
    uint64_t chunk;
    double *v[CG_VECTORS];
};

static inline void vc_seek(struct vcursor *c, const struct nodeindex *vix, uint64_t i, unsigned mask)
{
    const uint64_t k = i >> CG_VCHUNK_SHIFT;
    if (k == c->chunk)
        return;
    c->chunk = k;
    for (unsigned v = 0; v < CG_VECTORS; v++)
        if (mask & (1u << v))
            c->v[v] = nx_at(&vix[v], k);
}

static inline double *row_values(struct node *row) { return &row->data[0].d; }
static inline uint32_t *row_columns(struct node *row, uint64_t nnz) { return (uint32_t *)&row->data[nnz]; }

static void cg_small(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    const unsigned threads = cfg->threads;
    const uint64_t n = cg_rows(cfg->size), nnz = n * CG_ROW_NNZ, nb = nblocks(n);
    const uint64_t nvc = ceil_div(n, CG_VCHUNK);
    struct arena ar;
    arena_init(&ar, cfg,
               n * round_up(CG_ROWBLOCK_BYTES, 16) + CG_VECTORS * (nvc * CG_VCHUNK * sizeof(double) + nx_plan_bytes(nvc)));

    /* The rows, in order, linked; each thread's first row. */
    struct node *start[MAX_THREADS] = { 0 }, *first = NULL, *prev = NULL;
    uint64_t first_row[MAX_THREADS];
    for (unsigned t = 0; t < threads; t++) {
        uint64_t b0, b1, hi;
        thread_share(n, nb, t, threads, &b0, &b1, &first_row[t], &hi);
    }
    unsigned ts = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct node *row = arena_alloc(&ar, CG_ROWBLOCK_BYTES);
        row->next.ptr = NULL;
        row->meta = CG_ROW_NNZ;
        if (prev)
            prev->next.ptr = row;
        else
            first = row;
        prev = row;
        for (; ts < threads && first_row[ts] == i; ts++)
            start[ts] = row;
    }
    /* The vectors' chunks, chunk by chunk (x, r, p, q), each vector with its index. */
    struct nodeindex vix[CG_VECTORS];
    for (unsigned v = 0; v < CG_VECTORS; v++)
        nx_init(&vix[v], &ar, nvc);
    for (uint64_t c = 0; c < nvc; c++)
        for (unsigned v = 0; v < CG_VECTORS; v++)
            nx_set(&vix[v], &ar, c, arena_alloc(&ar, CG_VCHUNK * sizeof(double)));

    struct cggen g;
    gen_init(&g, cfg);
#pragma omp parallel
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t b0, b1, lo, hi;
        thread_share(n, nb, t, nt, &b0, &b1, &lo, &hi);
        struct node *row = start[t];
        struct vcursor vc = { .chunk = UINT64_MAX };
        for (uint64_t i = lo; i < hi; i++) {
            gen_row(&g, i, row_columns(row, CG_ROW_NNZ), row_values(row));
            vc_seek(&vc, vix, i, 0xf);
            const uint64_t k = i & CG_VMASK;
            vc.v[V_X][k] = 0.0;
            vc.v[V_R][k] = rhs(&g, i);
            vc.v[V_P][k] = rhs(&g, i);
            vc.v[V_Q][k] = 0.0;
            row = row->next.ptr;
        }
    }
    const double rho0 = rhs_dot(&g, n);    /* b.b */
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters;
    double rho_end = rho0;
    const struct nodeindex *const pix = &vix[V_P];
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    {
        const unsigned t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t b0, b1, lo, hi;
        thread_share(n, nb, t, nt, &b0, &b1, &lo, &hi);
        double rho = rho0;
        for (uint64_t it = 0; it < iters; it++) {
            /* q = A p; p.q */
            struct node *row = start[t];
            struct vcursor vc = { .chunk = UINT64_MAX };
            for (uint64_t b = b0; b < b1; b++) {
                const uint64_t end_row = block_start(n, nb, b + 1);
                double s = 0.0;
                for (uint64_t i = block_start(n, nb, b); i < end_row; i++) {
                    vc_seek(&vc, vix, i, 1u << V_P | 1u << V_Q);
                    const uint64_t m = ref_load_u64(&row->meta);
                    const double *const rv = row_values(row);
                    const uint32_t *const rc = row_columns(row, m);
                    double sum = 0.0;
                    for (uint64_t e = 0; e < m; e++) {
                        const uint32_t j = ref_load_u32(&rc[e]);
                        const double a = ref_load_f64(&rv[e]);
                        const double *const pc = nx_at(pix, j >> CG_VCHUNK_SHIFT);
                        sum += a * ref_load_f64(&pc[j & CG_VMASK]);
                    }
                    const uint64_t k = i & CG_VMASK;
                    ref_store_f64(&vc.v[V_Q][k], sum);
                    s += ref_load_f64(&vc.v[V_P][k]) * sum;
                    row = ref_load_ptr(&row->next.ptr);
                }
                pq_part[b] = s;
            }
#pragma omp barrier
            const double pq = sum_parts(pq_part, nb);
            const double alpha = pq != 0.0 ? rho / pq : 0.0;
            /* x += alpha p; r -= alpha q; r.r */
            vc.chunk = UINT64_MAX;
            for (uint64_t b = b0; b < b1; b++) {
                const uint64_t end_row = block_start(n, nb, b + 1);
                double s = 0.0;
                for (uint64_t i = block_start(n, nb, b); i < end_row; i++) {
                    vc_seek(&vc, vix, i, 0xf);
                    const uint64_t k = i & CG_VMASK;
                    const double xi = ref_load_f64(&vc.v[V_X][k]);
                    const double pi = ref_load_f64(&vc.v[V_P][k]);
                    ref_store_f64(&vc.v[V_X][k], xi + alpha * pi);
                    const double ri = ref_load_f64(&vc.v[V_R][k]);
                    const double qi = ref_load_f64(&vc.v[V_Q][k]);
                    const double rn = ri - alpha * qi;
                    ref_store_f64(&vc.v[V_R][k], rn);
                    s += rn * rn;
                }
                rr_part[b] = s;
            }
#pragma omp barrier
            const double rr = sum_parts(rr_part, nb);
            const double beta = rho != 0.0 ? rr / rho : 0.0;
            rho = rr;
            vc.chunk = UINT64_MAX;
            if (restart_after(it, iters)) {
                for (uint64_t i = lo; i < hi; i++) {
                    vc_seek(&vc, vix, i, 1u << V_X | 1u << V_R | 1u << V_P);
                    const uint64_t k = i & CG_VMASK;
                    ref_store_f64(&vc.v[V_X][k], 0.0);
                    ref_store_f64(&vc.v[V_R][k], rhs(&g, i));
                    ref_store_f64(&vc.v[V_P][k], rhs(&g, i));
                }
                rho = rho0;
            } else {
                for (uint64_t i = lo; i < hi; i++) {
                    vc_seek(&vc, vix, i, 1u << V_R | 1u << V_P);
                    const uint64_t k = i & CG_VMASK;
                    const double ri = ref_load_f64(&vc.v[V_R][k]);
                    const double pi = ref_load_f64(&vc.v[V_P][k]);
                    ref_store_f64(&vc.v[V_P][k], ri + beta * pi);
                }
            }
#pragma omp barrier
        }
        if (t == 0)
            rho_end = rho;
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t c = 0; c < nvc; c++) {
        const double *const xc = nx_at(&vix[V_X], c);
        const uint64_t end = c + 1 < nvc ? CG_VCHUNK : n - c * CG_VCHUNK;
        for (uint64_t k = 0; k < end; k++)
            sum += checksum_word(c * CG_VCHUNK + k, f64_bits(xc[k]));
    }
    res->accesses = nnz;
    res->checksum = sum;
    res->residual = sqrt(rho_end / rho0);
    res->buffer = (uintptr_t)first;

    if (ar.use_malloc) {
        for (struct node *row = first, *next; row; row = next) {
            next = row->next.ptr;
            arena_free(&ar, row);
        }
    }
    for (unsigned v = 0; v < CG_VECTORS; v++)
        nx_free(&vix[v], &ar, 1);
    arena_destroy(&ar);
}

void kernel_cg(const struct config *cfg, struct kresult *res)
{
    if (cfg->place == PLACE_HEAP_SMALL)
        cg_small(cfg, res);
    else
        cg_flat(cfg, res);
}
