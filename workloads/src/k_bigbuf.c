/* bigbuf: GAMESS-like "one big buffer" (seed 000: GAMESS allocates its whole working
 * memory, several GB, in one request at start and works in blocks of it).
 *
 * One malloc(--size) at initialization, filled (word i = i); --place and --page are
 * ignored (reported as given), as for malloc.  The data start at the first 64-byte
 * boundary and are split into BB_SLICES equal slices.  A block of work lies in one
 * slice: a random length of 64 KiB..1 MiB (4 KiB steps; the slice's length if that is
 * shorter) at a random 64-byte aligned offset in it, and is
 *   1. a dense read-modify-write sweep over its words: w = (w ^ key) + 1, key from
 *      the block's random numbers;
 *   2. strided reads, one per 64 bytes of the block, with a page-sized stride: the
 *      slice seen as rows of 4 KiB (512 words) is read down a column (row 0, 1, 2,
 *      ... of a random column, then the next column), as an integral transformation
 *      reads a matrix across its rows; the words read are summed.
 * A pass runs --accesses blocks (default: --size / 544 KiB, the mean block, rounded
 * up to a multiple of BB_SLICES) in waves: wave w gives slice j its block number w
 * (slices 0, 1, 2, ... in order), so successive blocks jump across the whole buffer.
 * Each slice draws its blocks from its own random stream (continued over the waves
 * and passes).
 *
 * Threads: the blocks of a wave are shared out dynamically (an OpenMP loop over the
 * slices, one barrier per wave); two blocks of a wave never overlap (different
 * slices), and a slice's blocks run in order, so the buffer, the sums and the
 * checksum (the sums plus a hash of the buffer) are the same for every --threads. */
#include <omp.h>
#include <stdlib.h>

#include "access.h"
#include "kernels.h"
#include "rng.h"
#include "trace.h"
#include "util.h"

#define ROW_WORDS 512u              /* 4 KiB */

void kernel_bigbuf(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    char *const alloc = malloc(cfg->size);
    if (!alloc)
        die_resource("malloc(%llu) failed: out of memory", (unsigned long long)cfg->size);
    uint64_t *const buf = (uint64_t *)round_up((uintptr_t)alloc, LINE_BYTES);
    const uint64_t slice_bytes = ((cfg->size - (LINE_BYTES - 1)) / BB_SLICES) & ~(uint64_t)(LINE_BYTES - 1);
    const uint64_t slice_words = slice_bytes / 8, words = slice_words * BB_SLICES;
    const uint64_t rows = slice_words / ROW_WORDS;      /* >= 3: --size >= BB_MIN_SIZE */
#pragma omp parallel for schedule(static)
    for (uint64_t i = 0; i < words; i++)
        buf[i] = i;
    uint64_t st[BB_SLICES];
    for (unsigned j = 0; j < BB_SLICES; j++)
        st[j] = stream_seed(cfg->seed, RNG_BIGBUF, j);
    warm_threads(cfg);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    const uint64_t blocks = cfg->accesses ? cfg->accesses : bigbuf_default_blocks(cfg->size);
    const uint64_t waves = ceil_div(blocks, BB_SLICES), iters = cfg->iters;
    uint64_t sum = 0, swept = 0;
    phase_begin(&ph);
    trace_begin();
#pragma omp parallel reduction(+ : sum, swept)
    for (uint64_t it = 0; it < iters; it++) {
        for (uint64_t w = 0; w < waves; w++) {
            const uint64_t in_wave = w + 1 < waves ? BB_SLICES : blocks - w * BB_SLICES;
#pragma omp for schedule(dynamic, 1)
            for (uint64_t j = 0; j < in_wave; j++) {
                const uint64_t r1 = splitmix64(&st[j]), r2 = splitmix64(&st[j]), r3 = splitmix64(&st[j]);
                uint64_t len = BB_MIN_BLOCK + 4096 * below(r1, (BB_MAX_BLOCK - BB_MIN_BLOCK) / 4096 + 1);
                if (len > slice_bytes)
                    len = slice_bytes;
                const uint64_t off = LINE_BYTES * below(r2, (slice_bytes - len) / LINE_BYTES + 1);
                uint64_t *const slice = buf + j * slice_words;
                uint64_t *const blk = slice + off / 8;
                const uint64_t key = r3;
                for (uint64_t i = 0; i < len / 8; i++)
                    ref_store_u64(&blk[i], (ref_load_u64(&blk[i]) ^ key) + 1);
                const uint64_t col0 = below(r3 >> 1 | r3 << 63, ROW_WORDS), reads = len / LINE_BYTES;
                uint64_t s = 0, row = 0, col = col0;
                for (uint64_t k = 0; k < reads; k++) {
                    s += ref_load_u64(&slice[row * ROW_WORDS + col]);
                    if (++row == rows) {
                        row = 0;
                        col = col + 1 < ROW_WORDS ? col + 1 : 0;
                    }
                }
                sum += s;
                swept += len;
            }
        }
    }
    trace_end();
    phase_end(&ph, &res->seconds, &res->minor_faults);

#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (uint64_t i = 0; i < words; i++)
        sum += checksum_word(i, buf[i]);
    res->accesses = blocks;
    res->checksum = sum;
    res->work = (double)swept;
    res->buffer = (uintptr_t)alloc;
    free(alloc);
}
