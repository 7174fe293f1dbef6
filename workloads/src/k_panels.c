/* panels: HPL-like "many 3-12 MB buffers" (seed 000: HPL's panels, hundreds to
 * thousands of malloc requests of three to twelve megabytes, not multiples of the
 * 2 MB page, and the "two megabyte plus one byte" requests whose last huge page holds
 * one byte but has to be zeroed whole).
 *
 * A pass allocates a sequence of --accesses panels (default: about 2 x --size of
 * them) with malloc, in order.  Panel i's size (the same in every pass) is uniform
 * in [3 MiB, 12 MiB] in 8-byte steps (the doubles of HPL's work arrays), never a
 * multiple of 2 MiB; every fourth one (i = 3, 7, 11, ...) is exactly k x 2 MiB + 1
 * byte, k in 2..5.  Panels are freed oldest first (FIFO), so that at most --size
 * bytes are live: before panel i is allocated, the oldest live panels are freed until
 * it fits.  The live panels carry over from one pass to the next; the last ones are
 * freed after the passes.
 *
 * A panel is a row-major matrix of PANEL_COLS doubles per row (8 KiB rows) and as
 * many rows as fit; the bytes after the last row (up to 8 KiB; the single byte of a
 * k x 2 MiB + 1 panel) are filled too.  Each panel is
 *   1. filled, row by row (values j/1024, j in 0..1023, from the panel's number);
 *   2. updated as HPL's trailing update: a(r, c) -= a(r, 0) * a(0, c) for r, c >= 1,
 *      walked by columns, down each column with a stride of one row (8 KiB).
 * Every product is exact (multiples of 2^-20), so the values, and their sum (the
 * checksum, with the bytes allocated), are exact.
 *
 * Threads: the fill shares out the rows, the update the columns (OpenMP, static);
 * the allocations and frees are made by one thread, between them.  The checksum does
 * not depend on --threads; --place and --page are ignored (reported as given). */
#include <omp.h>
#include <stdlib.h>

#include "access.h"
#include "kernels.h"
#include "rng.h"
#include "trace.h"
#include "util.h"

#define PANEL_COLS 1024u
#define ROW_BYTES (PANEL_COLS * 8u)

/* Size of panel i of the sequence with key `key`. */
static uint64_t panel_bytes(uint64_t key, uint64_t i)
{
    const uint64_t h = mix64(key ^ i);
    if (i % 4 == 3)
        return (2 + below(h, 4)) * PANEL_2M + 1;
    uint64_t b = PANEL_MIN + 8 * below(h, (PANEL_MAX - PANEL_MIN) / 8 + 1);
    if (b % PANEL_2M == 0)
        b -= 8;
    return b;
}

struct live {
    void *p;
    uint64_t bytes;
};

void kernel_panels(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    uint64_t st = stream_seed(cfg->seed, RNG_PANELS, 0);
    const uint64_t key = splitmix64(&st);
    const uint64_t npanels = cfg->accesses ? cfg->accesses : panels_default(cfg->size);
    /* At most size / PANEL_MIN + 1 panels are live at once. */
    const uint64_t cap = cfg->size / PANEL_MIN + 2;
    struct live *const q = calloc(cap, sizeof *q);
    if (!q)
        die_resource("cannot allocate the list of %llu live panels", (unsigned long long)cap);
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters, limit = cfg->size;
    uint64_t head = 0, count = 0, live = 0, allocated = 0, sum = 0;
    unsigned char *panel = NULL;
    uint64_t bytes = 0, rows = 0, salt = 0;
    uintptr_t first = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel reduction(+ : sum)
    for (uint64_t it = 0; it < iters; it++) {
        for (uint64_t i = 0; i < npanels; i++) {
#pragma omp single
            {
                bytes = panel_bytes(key, i);
                while (live + bytes > limit) {
                    free(q[head].p);
                    live -= q[head].bytes;
                    head = head + 1 < cap ? head + 1 : 0;
                    count--;
                }
                panel = malloc(bytes);
                if (!panel)
                    die_resource("malloc(%llu) failed: out of memory", (unsigned long long)bytes);
                if (!first)
                    first = (uintptr_t)panel;
                const uint64_t tail = head + count < cap ? head + count : head + count - cap;
                q[tail] = (struct live){ panel, bytes };
                count++;
                live += bytes;
                allocated += bytes;
                rows = bytes / ROW_BYTES;
                salt = mix64(key + i) & 1023;
            }
            double *const a = (double *)panel;
            /* 1. Fill: rows shared out, then the bytes after the last row. */
#pragma omp for schedule(static)
            for (uint64_t r = 0; r < rows; r++)
                for (uint64_t c = 0; c < PANEL_COLS; c++)
                    ref_store_f64(&a[r * PANEL_COLS + c], (double)((r * 7 + c * 13 + salt) & 1023) / 1024.0);
#pragma omp single
            for (uint64_t b = rows * ROW_BYTES; b < bytes; b++)
                ref_store_u8(&panel[b], (unsigned char)(b + salt));
            /* 2. Update, column by column (the implicit barriers above: filled). */
#pragma omp for schedule(static)
            for (uint64_t c = 1; c < PANEL_COLS; c++) {
                const double u = ref_load_f64(&a[c]);
                uint64_t s = 0;
                for (uint64_t r = 1; r < rows; r++) {
                    double *const x = &a[r * PANEL_COLS + c];
                    const double v = ref_load_f64(x) - ref_load_f64(&a[r * PANEL_COLS]) * u;
                    ref_store_f64(x, v);
                    s += (uint64_t)(int64_t)(v * 1048576.0);   /* exact: a multiple of 2^-20 */
                }
                sum += s;
            }
        }
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    for (; count > 0; count--) {
        free(q[head].p);
        head = head + 1 < cap ? head + 1 : 0;
    }
    free(q);
    res->accesses = npanels;
    res->checksum = sum + allocated;
    res->work = (double)allocated;
    res->buffer = first;
}
