/* mg: V-cycle multigrid for a 3-D Poisson problem, shaped like NAS MG.
 *
 * The grid is periodic, nx x ny x nz points (powers of two, nx >= ny >= nz >= nx/2,
 * the largest whose arrays fit --size: mg_shape in kernels.h), with the levels
 * obtained by halving every axis down to nz = 2.  Three arrays, as in NAS MG: u (the
 * approximation) and r (the residual) hold every level back to back, finest first;
 * v (the right-hand side) the finest level only.  Point (i1, i2, i3) of a level is
 * element (i3 * ny + i2) * nx + i1 of its part (x fastest).
 *
 * The operators are NAS MG's, on periodic neighbours (index wrap instead of NAS's
 * ghost planes and comm3):
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
    uint64_t nx, ny, nz;
    uint64_t off;           /* first element of this level in u and r */
};

struct mg {
    struct level lv[MG_MAX_LEVELS];
    unsigned nl;            /* levels; lv[0] is the finest, lv[nl - 1] the coarsest */
    double *u, *r, *v;
    double *scratch;        /* per thread: 3 line buffers of nx + 2 */
    uint64_t sline;         /* doubles of one thread's scratch */
};

static inline uint64_t wrap_dn(uint64_t i, uint64_t n) { return i ? i - 1 : n - 1; }
static inline uint64_t wrap_up(uint64_t i, uint64_t n) { return i + 1 < n ? i + 1 : 0; }

/* The four face neighbours (s1) and the four edge neighbours (s2) of line (i2, i3)
 * in the (y, z) plane, for every i1, into s1[1..nx] and s2[1..nx], with the periodic
 * copies s[0] = s[nx] and s[nx + 1] = s[1] so that s[i1 + 1 +- 1] needs no wrap. */
static void line_sums(const double *a, const struct level *L, uint64_t i2, uint64_t i3, double *s1, double *s2)
{
    const uint64_t nx = L->nx, ny = L->ny, nz = L->nz;
    const uint64_t i2m = wrap_dn(i2, ny), i2p = wrap_up(i2, ny), i3m = wrap_dn(i3, nz), i3p = wrap_up(i3, nz);
    const double *const ym = a + (i3 * ny + i2m) * nx, *const yp = a + (i3 * ny + i2p) * nx;
    const double *const zm = a + (i3m * ny + i2) * nx, *const zp = a + (i3p * ny + i2) * nx;
    const double *const mm = a + (i3m * ny + i2m) * nx, *const mp = a + (i3m * ny + i2p) * nx;
    const double *const pm = a + (i3p * ny + i2m) * nx, *const pp = a + (i3p * ny + i2p) * nx;
    for (uint64_t i1 = 0; i1 < nx; i1++) {
        s1[i1 + 1] = ref_load_f64(&ym[i1]) + ref_load_f64(&yp[i1]) + ref_load_f64(&zm[i1]) + ref_load_f64(&zp[i1]);
        s2[i1 + 1] = ref_load_f64(&mm[i1]) + ref_load_f64(&mp[i1]) + ref_load_f64(&pm[i1]) + ref_load_f64(&pp[i1]);
    }
    s1[0] = s1[nx];
    s1[nx + 1] = s1[1];
    s2[0] = s2[nx];
    s2[nx + 1] = s2[1];
}

/* r = v - A u on level L (v may be r: r = r - A u). */
static void resid(const struct mg *m, const struct level *L, const double *u, const double *v, double *r)
{
    double *const s1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline, *const s2 = s1 + L->nx + 2;
    const uint64_t nx = L->nx, ny = L->ny, nz = L->nz;
#pragma omp for schedule(static)
    for (uint64_t i3 = 0; i3 < nz; i3++) {
        for (uint64_t i2 = 0; i2 < ny; i2++) {
            line_sums(u, L, i2, i3, s1, s2);
            const uint64_t row = (i3 * ny + i2) * nx;
            for (uint64_t i1 = 0; i1 < nx; i1++) {
                const double val = ref_load_f64(&v[row + i1]) - A0 * ref_load_f64(&u[row + i1])
                                   - A2 * (s2[i1 + 1] + s1[i1] + s1[i1 + 2]) - A3 * (s2[i1] + s2[i1 + 2]);
                ref_store_f64(&r[row + i1], val);
            }
        }
    }
}

/* u = u + C r on level L. */
static void psinv(const struct mg *m, const struct level *L, const double *r, double *u)
{
    double *const s1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline, *const s2 = s1 + L->nx + 2;
    const uint64_t nx = L->nx, ny = L->ny, nz = L->nz;
#pragma omp for schedule(static)
    for (uint64_t i3 = 0; i3 < nz; i3++) {
        for (uint64_t i2 = 0; i2 < ny; i2++) {
            line_sums(r, L, i2, i3, s1, s2);
            const uint64_t row = (i3 * ny + i2) * nx;
            for (uint64_t i1 = 0; i1 < nx; i1++) {
                const double rc = ref_load_f64(&r[row + i1]);
                const double rm = ref_load_f64(&r[row + wrap_dn(i1, nx)]), rp = ref_load_f64(&r[row + wrap_up(i1, nx)]);
                const double val = ref_load_f64(&u[row + i1]) + C0 * rc + C1 * (rm + rp + s1[i1 + 1])
                                   + C2 * (s2[i1 + 1] + s1[i1] + s1[i1 + 2]);
                ref_store_f64(&u[row + i1], val);
            }
        }
    }
}

/* Coarse residual rc (level C) = full weighting of the fine residual rf (level F). */
static void rprj3(const struct mg *m, const struct level *F, const struct level *C, const double *rf, double *rc)
{
    double *const s1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline, *const s2 = s1 + F->nx + 2;
    const uint64_t nx = F->nx, ny = F->ny;
#pragma omp for schedule(static)
    for (uint64_t j3 = 0; j3 < C->nz; j3++) {
        for (uint64_t j2 = 0; j2 < C->ny; j2++) {
            const uint64_t i3 = 2 * j3, i2 = 2 * j2;
            line_sums(rf, F, i2, i3, s1, s2);
            const uint64_t row = (i3 * ny + i2) * nx, crow = (j3 * C->ny + j2) * C->nx;
            for (uint64_t j1 = 0; j1 < C->nx; j1++) {
                const uint64_t i1 = 2 * j1;
                const double rm = ref_load_f64(&rf[row + wrap_dn(i1, nx)]), rp = ref_load_f64(&rf[row + i1 + 1]);
                const double val = 0.5 * ref_load_f64(&rf[row + i1]) + 0.25 * (rm + rp + s1[i1 + 1])
                                   + 0.125 * (s1[i1] + s1[i1 + 2] + s2[i1 + 1]) + 0.0625 * (s2[i1] + s2[i1 + 2]);
                ref_store_f64(&rc[crow + j1], val);
            }
        }
    }
}

static inline void add_at(double *p, double x) { ref_store_f64(p, ref_load_f64(p) + x); }

/* Fine u (level F) += trilinear interpolation of the coarse z (level C), as NAS
 * MG's interp: coarse point j feeds fine points 2j + (0 or 1 per axis). */
static void interp(const struct mg *m, const struct level *C, const struct level *F, const double *z, double *u)
{
    const uint64_t cx = C->nx, cy = C->ny, cz = C->nz, fx = F->nx, fy = F->ny;
    double *const z1 = m->scratch + (uint64_t)omp_get_thread_num() * m->sline;
    double *const z2 = z1 + cx + 1, *const z3 = z2 + cx + 1;
#pragma omp for schedule(static)
    for (uint64_t i3 = 0; i3 < cz; i3++) {
        const uint64_t i3p = wrap_up(i3, cz);
        for (uint64_t i2 = 0; i2 < cy; i2++) {
            const uint64_t i2p = wrap_up(i2, cy);
            const double *const c00 = z + (i3 * cy + i2) * cx, *const c10 = z + (i3 * cy + i2p) * cx;
            const double *const c01 = z + (i3p * cy + i2) * cx, *const c11 = z + (i3p * cy + i2p) * cx;
            for (uint64_t i1 = 0; i1 < cx; i1++) {
                const double a = ref_load_f64(&c00[i1]), b = ref_load_f64(&c01[i1]);
                z1[i1] = ref_load_f64(&c10[i1]) + a;
                z2[i1] = b + a;
                z3[i1] = ref_load_f64(&c11[i1]) + b + z1[i1];
            }
            z1[cx] = z1[0];
            z2[cx] = z2[0];
            z3[cx] = z3[0];
            double *const f00 = u + (2 * i3 * fy + 2 * i2) * fx, *const f10 = u + (2 * i3 * fy + 2 * i2 + 1) * fx;
            double *const f01 = u + ((2 * i3 + 1) * fy + 2 * i2) * fx, *const f11 = u + ((2 * i3 + 1) * fy + 2 * i2 + 1) * fx;
            for (uint64_t i1 = 0; i1 < cx; i1++) {
                const double zc = ref_load_f64(&c00[i1]), zn = ref_load_f64(&c00[wrap_up(i1, cx)]);
                add_at(&f00[2 * i1], zc);
                add_at(&f00[2 * i1 + 1], 0.5 * (zn + zc));
                add_at(&f10[2 * i1], 0.5 * z1[i1]);
                add_at(&f10[2 * i1 + 1], 0.25 * (z1[i1] + z1[i1 + 1]));
                add_at(&f01[2 * i1], 0.5 * z2[i1]);
                add_at(&f01[2 * i1 + 1], 0.25 * (z2[i1] + z2[i1 + 1]));
                add_at(&f11[2 * i1], 0.25 * z3[i1]);
                add_at(&f11[2 * i1 + 1], 0.125 * (z3[i1] + z3[i1 + 1]));
            }
        }
    }
}

static void zero(const struct level *L, double *u)
{
    const uint64_t plane = L->nx * L->ny;
#pragma omp for schedule(static)
    for (uint64_t i3 = 0; i3 < L->nz; i3++)
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

/* ||r||^2 of the finest level: per-plane sums (rows in order), then the planes in
 * order, so the same for any number of threads.  Not traced (outside the passes). */
static double norm2(const struct mg *m, double *part)
{
    const uint64_t nz = m->lv[0].nz, plane = m->lv[0].nx * m->lv[0].ny;
#pragma omp parallel for schedule(static)
    for (uint64_t i3 = 0; i3 < nz; i3++) {
        double s = 0.0;
        for (uint64_t k = i3 * plane; k < (i3 + 1) * plane; k++)
            s += m->r[k] * m->r[k];
        part[i3] = s;
    }
    double rr = 0.0;
    for (uint64_t i3 = 0; i3 < nz; i3++)
        rr += part[i3];
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
        m.lv[l] = (struct level){ .nx = 1ULL << (sh.lx - l), .ny = 1ULL << (sh.ly - l),
                                  .nz = 1ULL << (sh.lz - l), .off = off };
        off += m.lv[l].nx * m.lv[l].ny * m.lv[l].nz;
    }
    const uint64_t n = sh.points, all = sh.level_points;
    const size_t bytes[3] = { round_up(all * 8, LINE_BYTES) + LINE_BYTES, round_up(all * 8, LINE_BYTES) + LINE_BYTES,
                              round_up(n * 8, LINE_BYTES) + LINE_BYTES };
    struct bigbuf bb[3];
    bigbufs_get_sizes(cfg, 3, bytes, bb);
    uint64_t st = stream_seed(cfg->seed, RNG_MG, 0);
    m.u = (double *)bb[0].base;
    m.r = (double *)bb[1].base;
    m.v = (double *)bb[2].base;
    m.sline = 3 * (m.lv[0].nx + 2);
    m.scratch = xmalloc(m.sline * cfg->threads * sizeof(double));

#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < all; i++) {
        m.u[i] = 0.0;
        m.r[i] = 0.0;
        if (i < n)
            m.v[i] = 0.0;
    }
    /* The charges: 10 x +1 and 10 x -1 at distinct random points. */
    for (unsigned k = 0; k < 2 * MG_CHARGES; k++) {
        uint64_t i;
        do
            i = below(splitmix64(&st), n);
        while (m.v[i] != 0.0);
        m.v[i] = k < MG_CHARGES ? 1.0 : -1.0;
    }
#pragma omp parallel
    resid(&m, &m.lv[0], m.u, m.v, m.r);
    double *const part = xmalloc(m.lv[0].nz * sizeof(double));
    const double rr0 = norm2(&m, part);
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

    const double rr = norm2(&m, part);
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t i = 0; i < n; i++)
        sum += checksum_word(i, f64_bits(m.u[i]));
    free(part);
    free(m.scratch);
    res->accesses = n;
    res->checksum = sum;
    res->residual = rr0 > 0.0 ? sqrt(rr / rr0) : 0.0;
    res->buffer = (uintptr_t)bb[0].alloc;
    bigbufs_put(3, bb);
}
