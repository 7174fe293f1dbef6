/* Every data reference a kernel makes during its kernel phase (and the index
 * walks of heap-small) goes through these helpers.  In the normal build they are
 * the plain load or store; in the traced build (HTW_TRACE, used for --trace) the
 * kernel phase's references are also written to the trace (trace.h). */
#ifndef HTW_ACCESS_H
#define HTW_ACCESS_H

#include <stdint.h>

#include "trace.h"

#ifdef HTW_TRACE
#define TRACED(p, w) \
    do { \
        if (htw_tracing) \
            trace_ref((p), (w)); \
    } while (0)
#else
#define TRACED(p, w) ((void)(p), (void)(w))
#endif

static inline uint64_t ref_load_u64(const uint64_t *p) { TRACED(p, 0); return *p; }
static inline void ref_store_u64(uint64_t *p, uint64_t v) { TRACED(p, 1); *p = v; }

/* Read-modify-write of one word: one reference that both reads and writes. */
static inline void ref_xor_u64(uint64_t *p, uint64_t v) { TRACED(p, 1); *p ^= v; }
/* Same, for several threads on one table: relaxed is enough because only the final
 * contents matter, and xor commutes, so they are deterministic. */
static inline void ref_xor_u64_atomic(uint64_t *p, uint64_t v)
{
    TRACED(p, 1);
    __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
}

/* cg's column indices. */
static inline uint32_t ref_load_u32(const uint32_t *p) { TRACED(p, 0); return *p; }

static inline double ref_load_f64(const double *p) { TRACED(p, 0); return *p; }
static inline void ref_store_f64(double *p, double v) { TRACED(p, 1); *p = v; }

/* Pointer loads: chase's next pointers and the heap-small index. */
static inline void *ref_load_ptr(void *const *p) { TRACED(p, 0); return *p; }

/* Bytes: the malloc kernel's blocks. */
static inline unsigned char ref_load_u8(const unsigned char *p) { TRACED(p, 0); return *p; }
static inline void ref_store_u8(unsigned char *p, unsigned char v) { TRACED(p, 1); *p = v; }

#endif
