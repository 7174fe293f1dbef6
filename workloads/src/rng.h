/* Fast deterministic randomness.  splitmix64: one add + a finalizer, so consecutive
 * draws do not depend on each other's result (no serial chain that would limit
 * memory-level parallelism in the kernels). */
#ifndef HTW_RNG_H
#define HTW_RNG_H

#include <stdint.h>

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t splitmix64(uint64_t *state)
{
    return mix64(*state += 0x9E3779B97F4A7C15ULL);
}

/* Uniform value in [0, n) from a 64-bit random r: high half of r*n (Lemire's
 * reduction; same role as r % n but without a division). */
static inline uint64_t below(uint64_t r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

/* Independent streams: one per (seed, purpose, thread), so the node layout, the
 * cycle and each thread's accesses do not share random numbers. */
enum rng_purpose {
    RNG_LAYOUT = 1, RNG_CYCLE, RNG_RANDMEM, RNG_GUPS, RNG_MALLOC, RNG_CG,
    RNG_MG, RNG_SP, RNG_BIGBUF, RNG_PANELS, RNG_PTREES, RNG_IOCOPY,
};

static inline uint64_t stream_seed(uint64_t seed, enum rng_purpose purpose, unsigned thread)
{
    return mix64(seed ^ mix64(((uint64_t)purpose << 32) + thread + 1));
}

#endif
