/* Every data reference a kernel makes during its kernel phase (and the index
 * walks of heap-small) goes through these helpers.  They compile to plain loads
 * and stores today; a later --trace can record the exact reference stream by
 * changing only this file (e.g. a thread-local trace buffer appended here). */
#ifndef HTW_ACCESS_H
#define HTW_ACCESS_H

#include <stdint.h>

static inline uint64_t ref_load_u64(const uint64_t *p) { return *p; }
static inline void ref_store_u64(uint64_t *p, uint64_t v) { *p = v; }

/* Read-modify-write of one word: one reference that both reads and writes. */
static inline void ref_xor_u64(uint64_t *p, uint64_t v) { *p ^= v; }
/* Same, for several threads on one table: relaxed is enough because only the final
 * contents matter, and xor commutes, so they are deterministic. */
static inline void ref_xor_u64_atomic(uint64_t *p, uint64_t v)
{
    __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
}

static inline double ref_load_f64(const double *p) { return *p; }
static inline void ref_store_f64(double *p, double v) { *p = v; }

/* Pointer loads: chase's next pointers and the heap-small index. */
static inline void *ref_load_ptr(void *const *p) { return *p; }

#endif
