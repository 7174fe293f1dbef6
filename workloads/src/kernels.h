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
};

void kernel_randmem(const struct config *cfg, struct kresult *res);
void kernel_chase(const struct config *cfg, struct kresult *res);
void kernel_gups(const struct config *cfg, struct kresult *res);
void kernel_stream(const struct config *cfg, struct kresult *res);
void kernel_primes(const struct config *cfg, struct kresult *res);
void kernel_malloc(const struct config *cfg, struct kresult *res);

/* The same kernels with --trace's hook compiled in (the Makefile builds them a
 * second time with HTW_TRACE and these names). */
void kernel_randmem_traced(const struct config *cfg, struct kresult *res);
void kernel_chase_traced(const struct config *cfg, struct kresult *res);
void kernel_gups_traced(const struct config *cfg, struct kresult *res);
void kernel_stream_traced(const struct config *cfg, struct kresult *res);
void kernel_malloc_traced(const struct config *cfg, struct kresult *res);

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

#endif
