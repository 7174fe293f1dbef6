/* primes: CPU-bound control (like sysbench cpu).  A pass (one "event") counts the
 * primes up to --limit by trial division up to the square root; the candidates of a
 * pass are shared by the threads.  It touches no buffer, so --size, --place and
 * --page do not apply. */
#include <omp.h>

#include "kernels.h"
#include "trace.h"
#include "util.h"

static int is_prime(uint64_t c)
{
    if (c < 2)
        return 0;
    for (uint64_t t = 2; t * t <= c; t++)
        if (c % t == 0)
            return 0;
    return 1;
}

void kernel_primes(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t iters = cfg->iters, limit = cfg->limit;
    uint64_t count = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel reduction(+ : count)
    for (uint64_t it = 0; it < iters; it++) {
        /* Later candidates cost more: hand them out in small dynamic chunks. */
#pragma omp for schedule(dynamic, 256)
        for (uint64_t c = 2; c <= limit; c++)
            count += (uint64_t)is_prime(c);
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

    res->accesses = 1;      /* one event per pass */
    res->checksum = count;  /* primes found, summed over the passes */
    res->buffer = 0;
}
