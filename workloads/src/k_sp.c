/* sp: one ADI step per pass on an n x n x n grid of 5-component vectors, shaped like
 * NAS SP (a Beam-Warming approximate factorization whose systems are scalar
 * pentadiagonal along each axis, solved line by line along x, then y, then z).
 *
 * Arrays (doubles; point p = (k * n + j) * n + i, x fastest; 5-component arrays hold
 * the components of a point together, as NAS's u(5, i, j, k)):
 *   u[5]        the solution            rhs[5]    right-hand side, then the update
 *   forcing[5]  the forcing term        rho_i     1 / u0 (from compute_rhs)
 *   speed       a sound-speed-like scalar (from compute_rhs)
 * 17 doubles, 136 bytes per point; n is the largest with 136 n^3 (+ the alignment) in
 * --size, at least 8 (sp_shape in kernels.h).
 *
 * A pass (in NAS SP's order, without its 5 x 5 block transforms txinvr/ninvr/pinvr/
 * tzetar between the directions):
 *   compute_rhs  per point: rho_i = 1/u0, speed = sqrt(u4 rho_i) / 2, and for every
 *                component rhs = forcing + DE * (sum of the 6 neighbours - 6 u) - SIG u
 *                (a 7-point stencil over the 5 components; at the faces of the grid a
 *                missing neighbour counts as the point itself);
 *   x_solve, y_solve, z_solve
 *                per line: the pentadiagonal coefficients from rho_i, speed and the
 *                velocity along the line (u1, u2 or u3 times rho_i), as NAS SP's lhs
 *                (second-order terms rhon and cv, fourth-order dissipation EPS), one
 *                matrix for components 0..2 and one each for 3 (lhsp: + speed) and 4
 *                (lhsm: - speed); forward elimination and back substitution in place
 *                on rhs along the line.  The z lines stride n^2 points (n^2 * 40 bytes
 *                in rhs and u) from one point to the next: every point of a z line is
 *                in another page, the TLB-hostile direction;
 *   add          u += rhs.
 * The forcing is SIG * (the initial u), so the iteration relaxes towards a smooth
 * steady state and the values stay near the initial ones for any number of passes
 * (no growth, no denormals).  The systems are strictly diagonally dominant (the
 * diagonal exceeds the sum of the off-diagonals by more than 0.7): no pivoting.
 *
 * Threads: OpenMP over the planes k (compute_rhs, add) and over the lines (the
 * solves), static schedule; a line's coefficients are per-thread scratch (NPB 3's
 * lhs line arrays), not traced.  Every point and line is computed by one thread with
 * a fixed sequence of operations, so u and the checksum (a hash of u) are the same
 * for every --threads, --place and --page. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "kernels.h"
#include "memory.h"
#include "rng.h"
#include "trace.h"
#include "util.h"

/* Explicit diffusion and relaxation in compute_rhs; the implicit operator's
 * second-order (T1 (NU0 + NU1 rho_i)), advection (T2 * velocity, T2 * speed) and
 * fourth-order dissipation (EPS) coefficients. */
static const double DE = 0.05, SIG = 0.01;
static const double T1 = 0.05, NU0 = 1.0, NU1 = 1.0, T2 = 0.05, EPS = 0.02;

enum { A_U, A_RHS, A_FORCING, A_RHO, A_SPEED, SP_ARRAYS };
enum { B_A, B_B, B_C, B_D, B_E, SP_BANDS };

struct sp {
    uint64_t n;
    double *u, *rhs, *forcing, *rho_i, *speed;
    double *scratch;          /* per thread: 3 line arrays + 3 matrices x 5 bands */
    uint64_t sline;           /* doubles of one thread's scratch */
};

static inline double lrhs(const double *rhs, uint64_t p, unsigned m) { return ref_load_f64(&rhs[5 * p + m]); }
static inline void srhs(double *rhs, uint64_t p, unsigned m, double v) { ref_store_f64(&rhs[5 * p + m], v); }

static void compute_rhs(const struct sp *s)
{
    const uint64_t n = s->n, plane = n * n;
    double *const u = s->u, *const rhs = s->rhs;
#pragma omp for schedule(static)
    for (uint64_t k = 0; k < n; k++) {
        for (uint64_t j = 0; j < n; j++) {
            for (uint64_t i = 0; i < n; i++) {
                const uint64_t p = (k * n + j) * n + i;
                /* The six neighbours (the point itself beyond a face). */
                const uint64_t nb[6] = { i ? p - 1 : p, i + 1 < n ? p + 1 : p, j ? p - n : p,
                                         j + 1 < n ? p + n : p, k ? p - plane : p, k + 1 < n ? p + plane : p };
                const double u0 = ref_load_f64(&u[5 * p]), u4 = ref_load_f64(&u[5 * p + 4]);
                const double rho = 1.0 / u0;
                ref_store_f64(&s->rho_i[p], rho);
                ref_store_f64(&s->speed[p], 0.5 * sqrt(u4 * rho));
                for (unsigned m = 0; m < 5; m++) {
                    const double c = m == 0 ? u0 : m == 4 ? u4 : ref_load_f64(&u[5 * p + m]);
                    double lap = 0.0;
                    for (unsigned q = 0; q < 6; q++)
                        lap += ref_load_f64(&u[5 * nb[q] + m]);
                    lap -= 6.0 * c;
                    srhs(rhs, p, m, ref_load_f64(&s->forcing[5 * p + m]) + DE * lap - SIG * c);
                }
            }
        }
    }
}

/* Forward elimination and back substitution of one pentadiagonal system (bands
 * b[B_A..B_E], modified in place) for components m0..m1 of rhs at the line's
 * points base + i * stride. */
static void penta(double *const *b, double *rhs, uint64_t n, uint64_t base, uint64_t stride, unsigned m0, unsigned m1)
{
    double *const la = b[B_A], *const lb = b[B_B], *const lc = b[B_C], *const ld = b[B_D], *const le = b[B_E];
    for (uint64_t i = 0; i + 2 < n; i++) {
        const uint64_t p = base + i * stride, p1 = p + stride, p2 = p1 + stride;
        const double fac1 = 1.0 / lc[i];
        ld[i] *= fac1;
        le[i] *= fac1;
        lc[i + 1] -= lb[i + 1] * ld[i];
        ld[i + 1] -= lb[i + 1] * le[i];
        lb[i + 2] -= la[i + 2] * ld[i];
        lc[i + 2] -= la[i + 2] * le[i];
        for (unsigned m = m0; m <= m1; m++) {
            const double r = fac1 * lrhs(rhs, p, m);
            srhs(rhs, p, m, r);
            srhs(rhs, p1, m, lrhs(rhs, p1, m) - lb[i + 1] * r);
            srhs(rhs, p2, m, lrhs(rhs, p2, m) - la[i + 2] * r);
        }
    }
    {
        const uint64_t i = n - 2, p = base + i * stride, p1 = p + stride;
        const double fac1 = 1.0 / lc[i];
        ld[i] *= fac1;
        le[i] *= fac1;
        lc[i + 1] -= lb[i + 1] * ld[i];
        ld[i + 1] -= lb[i + 1] * le[i];
        const double fac2 = 1.0 / lc[i + 1];
        for (unsigned m = m0; m <= m1; m++) {
            const double r = fac1 * lrhs(rhs, p, m);
            srhs(rhs, p, m, r);
            srhs(rhs, p1, m, fac2 * (lrhs(rhs, p1, m) - lb[i + 1] * r));
        }
    }
    for (unsigned m = m0; m <= m1; m++) {
        const uint64_t p = base + (n - 2) * stride;
        srhs(rhs, p, m, lrhs(rhs, p, m) - ld[n - 2] * lrhs(rhs, p + stride, m));
    }
    for (uint64_t i = n - 2; i-- > 0;) {
        const uint64_t p = base + i * stride;
        for (unsigned m = m0; m <= m1; m++)
            srhs(rhs, p, m, lrhs(rhs, p, m) - ld[i] * lrhs(rhs, p + stride, m) - le[i] * lrhs(rhs, p + 2 * stride, m));
    }
}

/* The solves along one axis (dir 1: x, 2: y, 3: z): line l = (k, j), (k, i) or
 * (j, i), its points base + i * stride. */
static void solve(const struct sp *s, unsigned dir)
{
    const uint64_t n = s->n, lines = n * n;
    double *const w = s->scratch + (uint64_t)omp_get_thread_num() * s->sline;
    double *const rhon = w, *const cv = w + n, *const spd = w + 2 * n;
    double *bands[3][SP_BANDS];
    for (unsigned q = 0; q < 3; q++)
        for (unsigned b = 0; b < SP_BANDS; b++)
            bands[q][b] = w + (3 + q * SP_BANDS + b) * n;
    const uint64_t stride = dir == 1 ? 1 : dir == 2 ? n : n * n;
#pragma omp for schedule(static)
    for (uint64_t l = 0; l < lines; l++) {
        const uint64_t hi = l / n, lo = l % n;
        const uint64_t base = dir == 1 ? l * n : dir == 2 ? hi * n * n + lo : l;
        for (uint64_t i = 0; i < n; i++) {
            const uint64_t p = base + i * stride;
            const double ru = ref_load_f64(&s->rho_i[p]);
            rhon[i] = T1 * (NU0 + NU1 * ru);
            cv[i] = T2 * ref_load_f64(&s->u[5 * p + dir]) * ru;
            spd[i] = T2 * ref_load_f64(&s->speed[p]);
        }
        double *const *const l0 = bands[0], *const *const lp = bands[1], *const *const lm = bands[2];
        for (uint64_t i = 0; i < n; i++) {
            const double b = i >= 1 ? -cv[i - 1] - rhon[i - 1] - 4.0 * EPS : 0.0;
            const double d = i + 1 < n ? cv[i + 1] - rhon[i + 1] - 4.0 * EPS : 0.0;
            const double sm = i >= 1 ? spd[i - 1] : 0.0, sp = i + 1 < n ? spd[i + 1] : 0.0;
            const double a = i >= 2 ? EPS : 0.0, e = i + 2 < n ? EPS : 0.0;
            const double c = 1.0 + 2.0 * rhon[i] + 6.0 * EPS;
            l0[B_A][i] = a; l0[B_B][i] = b; l0[B_C][i] = c; l0[B_D][i] = d; l0[B_E][i] = e;
            lp[B_A][i] = a; lp[B_B][i] = b - sm; lp[B_C][i] = c; lp[B_D][i] = d + sp; lp[B_E][i] = e;
            lm[B_A][i] = a; lm[B_B][i] = b + sm; lm[B_C][i] = c; lm[B_D][i] = d - sp; lm[B_E][i] = e;
        }
        penta(l0, s->rhs, n, base, stride, 0, 2);
        penta(lp, s->rhs, n, base, stride, 3, 3);
        penta(lm, s->rhs, n, base, stride, 4, 4);
    }
}

static void add(const struct sp *s)
{
    const uint64_t n = s->n, plane5 = 5 * n * n;
#pragma omp for schedule(static)
    for (uint64_t k = 0; k < n; k++)
        for (uint64_t q = k * plane5; q < (k + 1) * plane5; q++)
            ref_store_f64(&s->u[q], ref_load_f64(&s->u[q]) + ref_load_f64(&s->rhs[q]));
}

static inline uint64_t f64_bits(double d)
{
    uint64_t x;
    memcpy(&x, &d, sizeof x);
    return x;
}

void kernel_sp(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct sp s;
    s.n = sp_side(cfg->size);
    const uint64_t n = s.n, pts = n * n * n;
    size_t bytes[SP_ARRAYS];
    for (unsigned a = 0; a < SP_ARRAYS; a++)
        bytes[a] = round_up((a <= A_FORCING ? 5 : 1) * pts * sizeof(double), LINE_BYTES) + LINE_BYTES;
    struct bigbuf bb[SP_ARRAYS];
    bigbufs_get_sizes(cfg, SP_ARRAYS, bytes, bb);
    s.u = (double *)bb[A_U].base;
    s.rhs = (double *)bb[A_RHS].base;
    s.forcing = (double *)bb[A_FORCING].base;
    s.rho_i = (double *)bb[A_RHO].base;
    s.speed = (double *)bb[A_SPEED].base;
    s.sline = (3 + 3 * SP_BANDS) * n;
    s.scratch = xmalloc(s.sline * cfg->threads * sizeof(double));

    /* u = g, forcing = SIG g: g0 in [1, 1.5), g1..g3 in [-0.5, 0.5), g4 in [1, 2),
     * multiples of 1/512 from the seed. */
    uint64_t st = stream_seed(cfg->seed, RNG_SP, 0);
    const uint64_t key = splitmix64(&st);
#pragma omp parallel for schedule(static)
    for (uint64_t p = 0; p < pts; p++) {
        const uint64_t h = mix64(key ^ p);
        for (unsigned m = 0; m < 5; m++) {
            const double k = (double)((h >> (8 * m)) & 255);
            const double g = m == 0 ? 1.0 + k / 512.0 : m == 4 ? 1.0 + k / 256.0 : (k - 128.0) / 256.0;
            s.u[5 * p + m] = g;
            s.forcing[5 * p + m] = SIG * g;
            s.rhs[5 * p + m] = 0.0;
        }
        s.rho_i[p] = 0.0;
        s.speed[p] = 0.0;
    }
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    for (uint64_t it = 0; it < iters; it++) {
        compute_rhs(&s);
        solve(&s, 1);
        solve(&s, 2);
        solve(&s, 3);
        add(&s);
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t q = 0; q < 5 * pts; q++)
        sum += checksum_word(q, f64_bits(s.u[q]));
    free(s.scratch);
    res->accesses = pts;
    res->checksum = sum;
    res->buffer = (uintptr_t)bb[A_U].alloc;
    bigbufs_put(SP_ARRAYS, bb);
}
