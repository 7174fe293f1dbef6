/* Errors, allocation and phase measurement helpers. */
#include "util.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static __attribute__((noreturn)) void vdie(int status, const char *fmt, va_list ap)
{
    fflush(stdout);
    fputs("hugetune-work: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    exit(status);
}

void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(EXIT_USAGE, fmt, ap);
}

void die_resource(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(EXIT_RESOURCE, fmt, ap);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        die_resource("malloc(%zu) failed: out of memory", n);
    return p;
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_minflt;
}

void phase_begin(struct phase *ph)
{
    ph->f0 = minor_faults();
    ph->t0 = now_seconds();
}

void phase_end(const struct phase *ph, double *seconds, uint64_t *faults)
{
    *seconds = now_seconds() - ph->t0;
    *faults = minor_faults() - ph->f0;
}

void warm_threads(const struct config *cfg)
{
    unsigned got = 0;
#pragma omp parallel
    {
#pragma omp single
        got = (unsigned)omp_get_num_threads();
    }
    if (got != cfg->threads)
        die_resource("OpenMP gave %u threads instead of %u (check OMP_THREAD_LIMIT)", got, cfg->threads);
}
