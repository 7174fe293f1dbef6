/* hugetune-work: built-in workloads for hugetune.  Parses the options, runs one
 * kernel and prints exactly one JSON line on stdout (docs/formats.md, section 5). */
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <unistd.h>

#include "config.h"
#include "kernels.h"
#include "trace.h"

static void print_result(const struct config *cfg, const struct kresult *r)
{
    const double secs = r->seconds;
    /* The rate's units over all passes: accesses x passes, or what the kernel counted. */
    const double total = r->work > 0.0 ? r->work : (double)r->accesses * (double)cfg->iters;
    double rate = 0.0;
    const char *unit = "M accesses/s";
    switch (cfg->kernel) {
    case K_RANDMEM:
    case K_CHASE: rate = total / 1e6; break;
    case K_GUPS: rate = total / 1e6; unit = "M updates/s"; break;
    case K_STREAM: rate = total * 24.0 / 1e9; unit = "GB/s"; break;
    case K_PRIMES: rate = total; unit = "events/s"; break;
    case K_MALLOC: rate = total / 1e6; unit = "M ops/s"; break;
    case K_CG: rate = total / 1e6; unit = "M nonzeros/s"; break;
    case K_MG:
    case K_SP: rate = total / 1e6; unit = "M points/s"; break;
    case K_BIGBUF:
    case K_PANELS:
    case K_IOCOPY: rate = total / 1e6; unit = "MB/s"; break;
    case K_PTREES: rate = total / 1e6; unit = "M objects/s"; break;
    }
    rate = secs > 0.0 ? rate / secs : 0.0;

    printf("{\"kernel\":\"%s\",\"size\":%" PRIu64 ",\"iters\":%" PRIu64 ",\"threads\":%u,"
           "\"place\":\"%s\",\"page\":\"%s\",",
           kernel_name(cfg->kernel), cfg->size, cfg->iters, cfg->threads,
           place_name(cfg->place), page_name(cfg->page));
    if (cfg->kernel == K_RANDMEM)
        printf("\"random_pct\":%.10g,", cfg->random_pct);
    else
        printf("\"random_pct\":null,");
    printf("\"accesses\":%" PRIu64 ",\"seconds\":%.9f,\"rate\":%.6g,\"rate_unit\":\"%s\","
           "\"checksum\":\"0x%016" PRIx64 "\",",
           r->accesses, secs, rate, unit, r->checksum);
    /* %.17g: the exact double, so equal residuals print equal. */
    if ((cfg->kernel == K_CG || cfg->kernel == K_MG) && isfinite(r->residual))
        printf("\"residual\":%.17g,", r->residual);
    else
        printf("\"residual\":null,");
    printf("\"init_seconds\":%.9f,"
           "\"minor_faults\":%" PRIu64 ",\"init_minor_faults\":%" PRIu64 ","
           "\"buffer\":\"0x%" PRIxPTR "\",\"pid\":%ld}\n",
           r->init_seconds, r->minor_faults, r->init_minor_faults, r->buffer, (long)getpid());
}

int main(int argc, char **argv)
{
    struct config cfg;
    parse_options(argc, argv, &cfg);
    if (cfg.trace)
        trace_open(cfg.trace, argc, argv);

    /* Exactly cfg.threads threads in every parallel region. */
    omp_set_dynamic(0);
    omp_set_num_threads((int)cfg.threads);

    struct kresult res = { 0 };
    switch (cfg.kernel) {
    case K_RANDMEM: (cfg.trace ? kernel_randmem_traced : kernel_randmem)(&cfg, &res); break;
    case K_CHASE: (cfg.trace ? kernel_chase_traced : kernel_chase)(&cfg, &res); break;
    case K_GUPS: (cfg.trace ? kernel_gups_traced : kernel_gups)(&cfg, &res); break;
    case K_STREAM: (cfg.trace ? kernel_stream_traced : kernel_stream)(&cfg, &res); break;
    case K_PRIMES: kernel_primes(&cfg, &res); break; /* no memory references */
    case K_MALLOC: (cfg.trace ? kernel_malloc_traced : kernel_malloc)(&cfg, &res); break;
    case K_CG: (cfg.trace ? kernel_cg_traced : kernel_cg)(&cfg, &res); break;
    case K_MG: (cfg.trace ? kernel_mg_traced : kernel_mg)(&cfg, &res); break;
    case K_SP: (cfg.trace ? kernel_sp_traced : kernel_sp)(&cfg, &res); break;
    case K_BIGBUF: (cfg.trace ? kernel_bigbuf_traced : kernel_bigbuf)(&cfg, &res); break;
    case K_PANELS: (cfg.trace ? kernel_panels_traced : kernel_panels)(&cfg, &res); break;
    case K_PTREES: (cfg.trace ? kernel_ptrees_traced : kernel_ptrees)(&cfg, &res); break;
    case K_IOCOPY: (cfg.trace ? kernel_iocopy_traced : kernel_iocopy)(&cfg, &res); break;
    }
    trace_close();
    print_result(&cfg, &res);
    return fflush(stdout) == 0 ? 0 : 1;
}
