/* mg: V-cycle multigrid for a 3-D Poisson problem, shaped like NAS MG.
 *
 * The grid is periodic, nx x ny x nz points (powers of two, nx >= ny >= nz >= nx/2,
 * the largest whose arrays fit --size: mg_shape in kernels.h), with the levels
 * obtained by halving every axis down to nz = 2.  Three arrays, as in NAS MG: u (the
 * approximation) and r (the residual) hold every level back to back, finest first;
 * v (the right-hand side) the finest level only.  Every level is stored as NAS
 * stores it, with one ghost layer on each side: (nx + 2) x (ny + 2) x (nz + 2), the
 * interior at 1..n, element (i3 * (ny + 2) + i2) * (nx + 2) + i1 (x fastest).  The
 * ghosts hold the periodic copies (NAS's comm3, after every operator that writes a
 * level), so the stencils read their neighbours directly; and the padded extents
 * keep rows and planes from being powers of two apart (with exactly 2^k-strided
 * arrays, memory that is physically contiguous in 2 MB pages put a point's stencil
 * rows and planes into the same cache sets: THP ran 1.5x slower than 4 KB pages).
 *
 * The operators are NAS MG's:
 *   resid   r = v - A u, A the 27-point stencil with one coefficient per distance
 *           class a = (-8/3, 0, 1/6, 1/12) (centre, faces, edges, corners; a(1) = 0 is
 *           skipped as in NAS), computed with NAS's line sums u1 (the four face
 *           neighbours in the (y, z) plane) and u2 (the four edge neighbours there);
 *   psinv   u = u + C r, the smoother, c = (-3/8, 1/32, -1/64, 0), the same way;
 *   rprj3   27-point full weighting of the fine residual onto the coarse grid (coarse
 *           point j is fine point 2j; weights 1/2, 1/4, 1/8, 1/16 by distance class);
 *   interp  trilinear prolongation u_fine += P u_coarse.
 * A pass is one NAS MG iteration: the V-cycle mg3P (restrict the residual down to
 * the coarsest level; smooth there from zero; on the way up interpolate, form the
 * residual and smooth; at the finest level interpolate into u, r = v - A u, smooth)
 * followed by r = v - A u.
 *
 * v is zero except for +1 at 10 random points and -1 at 10 others (NAS MG's zran3
 * puts them at the largest and smallest of random numbers; here they are drawn
 * directly from the seed).  Start: u = 0, r = v - A u = v (computed).  The residual
 * ||r|| / ||v|| falls about 5x per pass down to the rounding level (about 3e-16,
 * after some 25 passes), where it stays.
 *
 * Threads: every operator is an OpenMP loop over the planes (i3) of its output
 * level (interp: over the coarse planes, each writing two fine planes), static
 * schedule.  Each output point is written by one thread with a fixed expression, so
 * u and r, and the checksum (a hash of the finest u) and residual (||r|| / ||v||,
 * summed per plane and then in plane order) do not depend on --threads, --place or
 * --page.  The line sums are per-thread scratch (like NAS's local u1, u2), not
 * traced. */
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

#define MG_MAX_LEVELS 40u
#define MG_CHARGES 10u

/* NAS MG's operator coefficients (classes S, W, A, B). */
static const double A0 = -8.0 / 3.0, A2 = 1.0 / 6.0, A3 = 1.0 / 12.0;
static const double C0 = -3.0 / 8.0, C1 = 1.0 / 32.0, C2 = -1.0 / 64.0;

struct level {
    uint64_t nx, ny, nz;    /* interior points */
    uint64_t n1, n2, n3;    /* with the ghost layers: nx + 2, ny + 2, nz + 2 */
    uint64_t off;           /* first element of this level in u and r */
};

struct mg {
    struct level lv[MG_MAX_LEVELS];
    unsigned nl;            /* levels; lv[0] is the finest, lv[nl - 1] the coarsest */
    double *u, *r, *v;
    double *scratch;        /* per thread: 3 line buffers of n1 */
    uint64_t sline;         /* doubles of one thread's scratch */
};

static inline uint64_t at(const struct level *L, uint64_t i1, uint64_t i2, uint64_t i3)
{
    return (i3 * L->n2 + i2) * L->n1 + i1;
}

/* NAS's line sums of line (i2, i3) (interior), for every i1 including the ghosts:
 * s1 the four face neighbours in the (y, z) plane, s2 the four edge neighbours. */
static void line_sums(const double *a, const struct level *L, uint64_t i2, uint64_t i3, double *s1, double *s2)
{
    const double *const ym = a + at(L, 0, i2 - 1, i3), *const yp = a + at(L, 0, i2 + 1, i3);
    const double *const zm = a + at(L, 0, i2, i3 - 1), *const zp = a + at(L, 0, i2, i3 + 1);
    const double *const mm = a + at(L, 0, i2 - 1, i3 - 1), *const mp = a + at(L, 0, i2 + 1, i3 - 1);
    const double *const pm = a + at(L, 0, i2 - 1, i3 + 1), *const pp = a + at(L, 0, i2 + 1, i3 + 1);
    for (uint64_t i1 = 0; i1 < L->n1; i1++) {
        s1[i1] = ref_load_f64(&ym[i1]) + ref_load_f64(&yp[i1]) + ref_load_f64(&zm[i1]) + ref_load_f64(&zp[i1]);
        s2[i1] = ref_load_f64(&mm[i1]) + ref_load_f64(&mp[i1]) + ref_load_f64(&pm[i1]) + ref_load_f64(&pp[i1]);
    }
}

/* NAS's comm3: the periodic copies into the ghost layers, x and y per interior
 * plane, then (after the barrier) z. */
static void comm3(const struct level *L, double *a)
{
    const uint64_t nx = L->nx, ny = L->ny, nz = L->nz, n1 = L->n1;
#pragma omp for schedule(static)
    for (uint64_t i3 = 1; i3 <= nz; i3++) {
        for (uint64_t i2 = 1; i2 <= ny; i2++) {
            double *const row = a + at(L, 0, i2, i3);
            ref_store_f64(&row[0], ref_load_f64(&row[nx]));
            ref_store_f64(&row[nx + 1], ref_load_f64(&row[1]));
        }
        double *const g0 = a + at(L, 0, 0, i3), *const g1 = a + at(L, 0, ny + 1, i3);
        const double *const last = a + at(L, 0, ny, i3), *const first = a + at(L, 0, 1, i3);
        for (uint64_t i1 = 0; i1 < n1; i1++) {
            ref_store_f64(&g0[i1], ref_load_f64(&last[i1]));
            ref_store_f64(&g1[i1], ref_load_f64(&first[i1]));
        }
    }
#pragma omp for schedule(static)
    for (uint64_t i2 = 0; i2 < L->n2; i2++) {
        double *const g0 = a + at(L, 0, i2, 0), *const g1 = a + at(L, 0, i2, nz + 1);
        const double *const last = a + at(L, 0, i2, nz), *const first = a + at(L, 0, i2, 1);
        for (uint64_t i1 = 0; i1 < n1; i1++) {
            ref_store_f64(&g0[i1], ref_load_f64(&last[i1]));
            ref_store_f64(&g1[i1], ref_load_f64(&first[i1]));
        }
    }
}

/* r = v - A u on level L (v may be r: r = r - A u), then comm3(r). */
static void resid(const struct mg *m, const struct level *L, const double *u, const double *v, double *r)
{
    double *const s1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline, *const s2 = s1 + L->n1;
#pragma omp for schedule(static)
    for (uint64_t i3 = 1; i3 <= L->nz; i3++) {
        for (uint64_t i2 = 1; i2 <= L->ny; i2++) {
            line_sums(u, L, i2, i3, s1, s2);
            const uint64_t row = at(L, 0, i2, i3);
            for (uint64_t i1 = 1; i1 <= L->nx; i1++) {
                const double val = ref_load_f64(&v[row + i1]) - A0 * ref_load_f64(&u[row + i1])
                                   - A2 * (s2[i1] + s1[i1 - 1] + s1[i1 + 1]) - A3 * (s2[i1 - 1] + s2[i1 + 1]);
                ref_store_f64(&r[row + i1], val);
            }
        }
    }
    comm3(L, r);
}

/* u = u + C r on level L, then comm3(u). */
static void psinv(const struct mg *m, const struct level *L, const double *r, double *u)
{
    double *const s1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline, *const s2 = s1 + L->n1;
#pragma omp for schedule(static)
    for (uint64_t i3 = 1; i3 <= L->nz; i3++) {
        for (uint64_t i2 = 1; i2 <= L->ny; i2++) {
            line_sums(r, L, i2, i3, s1, s2);
            const uint64_t row = at(L, 0, i2, i3);
            for (uint64_t i1 = 1; i1 <= L->nx; i1++) {
                const double rc = ref_load_f64(&r[row + i1]);
                const double rm = ref_load_f64(&r[row + i1 - 1]), rp = ref_load_f64(&r[row + i1 + 1]);
                const double val = ref_load_f64(&u[row + i1]) + C0 * rc + C1 * (rm + rp + s1[i1])
                                   + C2 * (s2[i1] + s1[i1 - 1] + s1[i1 + 1]);
                ref_store_f64(&u[row + i1], val);
            }
        }
    }
    comm3(L, u);
}

/* Coarse residual rc (level C) = full weighting of the fine residual rf (level F):
 * coarse point j is fine point 2j (interior points count from 1); then comm3. */
static void rprj3(const struct mg *m, const struct level *F, const struct level *C, const double *rf, double *rc)
{
    double *const s1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline, *const s2 = s1 + F->n1;
#pragma omp for schedule(static)
    for (uint64_t j3 = 1; j3 <= C->nz; j3++) {
        for (uint64_t j2 = 1; j2 <= C->ny; j2++) {
            line_sums(rf, F, 2 * j2, 2 * j3, s1, s2);
            const double *const row = rf + at(F, 0, 2 * j2, 2 * j3);
            double *const crow = rc + at(C, 0, j2, j3);
            for (uint64_t j1 = 1; j1 <= C->nx; j1++) {
                const uint64_t i1 = 2 * j1;
                const double rm = ref_load_f64(&row[i1 - 1]), rp = ref_load_f64(&row[i1 + 1]);
                const double val = 0.5 * ref_load_f64(&row[i1]) + 0.25 * (rm + rp + s1[i1])
                                   + 0.125 * (s1[i1 - 1] + s1[i1 + 1] + s2[i1]) + 0.0625 * (s2[i1 - 1] + s2[i1 + 1]);
                ref_store_f64(&crow[j1], val);
            }
        }
    }
    comm3(C, rc);
}

static inline void add_at(double *p, double x) { ref_store_f64(p, ref_load_f64(p) + x); }

/* Fine u (level F) += trilinear interpolation of the coarse z (level C), as NAS
 * MG's interp: coarse point c (ghosts included) feeds fine points 2c + (0 or 1 per
 * axis), which covers the fine level with its ghosts. */
static void interp(const struct mg *m, const struct level *C, const struct level *F, const double *z, double *u)
{
    double *const z1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline;
    double *const z2 = z1 + C->n1, *const z3 = z2 + C->n1;
#pragma omp for schedule(static)
    for (uint64_t c3 = 0; c3 <= C->nz; c3++) {
        for (uint64_t c2 = 0; c2 <= C->ny; c2++) {
            const double *const c00 = z + at(C, 0, c2, c3), *const c10 = z + at(C, 0, c2 + 1, c3);
            const double *const c01 = z + at(C, 0, c2, c3 + 1), *const c11 = z + at(C, 0, c2 + 1, c3 + 1);
            for (uint64_t c1 = 0; c1 < C->n1; c1++) {
                const double a = ref_load_f64(&c00[c1]), b = ref_load_f64(&c01[c1]);
                z1[c1] = ref_load_f64(&c10[c1]) + a;
                z2[c1] = b + a;
                z3[c1] = ref_load_f64(&c11[c1]) + b + z1[c1];
            }
            double *const f00 = u + at(F, 0, 2 * c2, 2 * c3), *const f10 = u + at(F, 0, 2 * c2 + 1, 2 * c3);
            double *const f01 = u + at(F, 0, 2 * c2, 2 * c3 + 1), *const f11 = u + at(F, 0, 2 * c2 + 1, 2 * c3 + 1);
            for (uint64_t c1 = 0; c1 <= C->nx; c1++) {
                const double zc = ref_load_f64(&c00[c1]), zn = ref_load_f64(&c00[c1 + 1]);
                add_at(&f00[2 * c1], zc);
                add_at(&f00[2 * c1 + 1], 0.5 * (zn + zc));
                add_at(&f10[2 * c1], 0.5 * z1[c1]);
                add_at(&f10[2 * c1 + 1], 0.25 * (z1[c1] + z1[c1 + 1]));
                add_at(&f01[2 * c1], 0.5 * z2[c1]);
                add_at(&f01[2 * c1 + 1], 0.25 * (z2[c1] + z2[c1 + 1]));
                add_at(&f11[2 * c1], 0.25 * z3[c1]);
                add_at(&f11[2 * c1 + 1], 0.125 * (z3[c1] + z3[c1 + 1]));
            }
        }
    }
}

static void zero(const struct level *L, double *u)
{
    const uint64_t plane = L->n1 * L->n2;
#pragma omp for schedule(static)
    for (uint64_t i3 = 0; i3 < L->n3; i3++)
        for (uint64_t k = 0; k < plane; k++)
            ref_store_f64(&u[i3 * plane + k], 0.0);
}

/* One NAS MG iteration: mg3P, then r = v - A u (inside a parallel region). */
static void iteration(const struct mg *m)
{
    const unsigned top = m->nl - 1;
    double *const u = m->u, *const r = m->r;
    const struct level *const lv = m->lv;
    for (unsigned l = 0; l < top; l++)
        rprj3(m, &lv[l], &lv[l + 1], r + lv[l].off, r + lv[l + 1].off);
    zero(&lv[top], u + lv[top].off);
    psinv(m, &lv[top], r + lv[top].off, u + lv[top].off);
    for (unsigned l = top - 1; l >= 1; l--) {
        zero(&lv[l], u + lv[l].off);
        interp(m, &lv[l + 1], &lv[l], u + lv[l + 1].off, u + lv[l].off);
        resid(m, &lv[l], u + lv[l].off, r + lv[l].off, r + lv[l].off);
        psinv(m, &lv[l], r + lv[l].off, u + lv[l].off);
    }
    interp(m, &lv[1], &lv[0], u + lv[1].off, u);
    resid(m, &lv[0], u, m->v, r);
    psinv(m, &lv[0], r, u);
    resid(m, &lv[0], u, m->v, r);
}

static inline uint64_t f64_bits(double d)
{
    uint64_t x;
    memcpy(&x, &d, sizeof x);
    return x;
}

/* ||r||^2 over the finest level's interior: per-plane sums (rows in order), then the
 * planes in order, so the same for any number of threads; and the checksum, a hash
 * of the interior of u numbered without the ghosts.  Not traced (outside the passes). */
static double norm2(const struct mg *m, double *part, uint64_t *checksum)
{
    const struct level *const L = &m->lv[0];
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t i3 = 1; i3 <= L->nz; i3++) {
        double s = 0.0;
        for (uint64_t i2 = 1; i2 <= L->ny; i2++) {
            for (uint64_t i1 = 1; i1 <= L->nx; i1++) {
                const uint64_t p = at(L, i1, i2, i3);
                s += m->r[p] * m->r[p];
                sum += checksum_word(((i3 - 1) * L->ny + i2 - 1) * L->nx + i1 - 1, f64_bits(m->u[p]));
            }
        }
        part[i3 - 1] = s;
    }
    double rr = 0.0;
    for (uint64_t i3 = 0; i3 < L->nz; i3++)
        rr += part[i3];
    *checksum = sum;
    return rr;
}

void kernel_mg(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    struct mgshape sh;
    mg_shape(cfg->size, &sh);
    struct mg m;
    m.nl = sh.levels;
    uint64_t off = 0;
    for (unsigned l = 0; l < m.nl; l++) {
        struct level *const L = &m.lv[l];
        L->nx = 1ULL << (sh.lx - l);
        L->ny = 1ULL << (sh.ly - l);
        L->nz = 1ULL << (sh.lz - l);
        L->n1 = L->nx + 2;
        L->n2 = L->ny + 2;
        L->n3 = L->nz + 2;
        L->off = off;
        off += L->n1 * L->n2 * L->n3;
    }
    const struct level *const F = &m.lv[0];
    const uint64_t all = off, fine = F->n1 * F->n2 * F->n3;
    const size_t bytes[3] = { round_up(all * 8, LINE_BYTES) + LINE_BYTES, round_up(all * 8, LINE_BYTES) + LINE_BYTES,
                              round_up(fine * 8, LINE_BYTES) + LINE_BYTES };
    struct bigbuf bb[3];
    bigbufs_get_sizes(cfg, 3, bytes, bb);
    m.u = (double *)bb[0].base;
    m.r = (double *)bb[1].base;
    m.v = (double *)bb[2].base;
    m.sline = 3 * F->n1;
    m.scratch = xmalloc(m.sline * cfg->threads * sizeof(double));

#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < all; i++) {
        m.u[i] = 0.0;
        m.r[i] = 0.0;
        if (i < fine)
            m.v[i] = 0.0;
    }
    /* The charges: 10 x +1 and 10 x -1 at distinct random interior points. */
    uint64_t st = stream_seed(cfg->seed, RNG_MG, 0);
    for (unsigned k = 0; k < 2 * MG_CHARGES; k++) {
        uint64_t p;
        do {
            const uint64_t i = below(splitmix64(&st), sh.points);
            p = at(F, 1 + i % F->nx, 1 + i / F->nx % F->ny, 1 + i / F->nx / F->ny);
        } while (m.v[p] != 0.0);
        m.v[p] = k < MG_CHARGES ? 1.0 : -1.0;
    }
#pragma omp parallel
    {
        comm3(F, m.v);
        resid(&m, F, m.u, m.v, m.r);
    }
    double *const part = xmalloc(F->nz * sizeof(double));
    uint64_t sum;
    const double rr0 = norm2(&m, part, &sum);
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel
    for (uint64_t it = 0; it < iters; it++)
        iteration(&m);
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    const double rr = norm2(&m, part, &sum);
    free(part);
    free(m.scratch);
    res->accesses = sh.points;
    res->checksum = sum;
    res->residual = rr0 > 0.0 ? sqrt(rr / rr0) : 0.0;
    res->buffer = (uintptr_t)bb[0].alloc;
    bigbufs_put(3, bb);
}
