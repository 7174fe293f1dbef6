/* Errors, allocation and phase measurement helpers. */
#ifndef HTW_UTIL_H
#define HTW_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* One line "hugetune-work: error: ..." on stderr, then exit(EXIT_USAGE). */
void die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* One line on stderr, then exit(EXIT_RESOURCE). */
void die_resource(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

void *xmalloc(size_t n);      /* malloc or die_resource */

double now_seconds(void);     /* CLOCK_MONOTONIC */
uint64_t minor_faults(void);  /* getrusage(RUSAGE_SELF).ru_minflt: all threads */

/* A measured phase (initialization or kernel): wall time and minor faults. */
struct phase { double t0; uint64_t f0; };
void phase_begin(struct phase *ph);
void phase_end(const struct phase *ph, double *seconds, uint64_t *faults);

/* Starts the OpenMP team during initialization so that thread creation (stacks,
 * TLS: page faults) is not charged to the kernel phase; checks we got cfg->threads. */
void warm_threads(const struct config *cfg);

/* Thread t's share [*lo, *lo + *cnt) of total items split evenly over n threads. */
static inline void split_range(uint64_t total, unsigned t, unsigned n, uint64_t *lo, uint64_t *cnt)
{
    uint64_t a = (uint64_t)(((unsigned __int128)total * t) / n);
    uint64_t b = (uint64_t)(((unsigned __int128)total * (t + 1)) / n);
    *lo = a;
    *cnt = b - a;
}

static inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static inline uint64_t round_up(uint64_t a, uint64_t b) { return ceil_div(a, b) * b; }

#endif
