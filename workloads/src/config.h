/* Run configuration shared by all parts of hugetune-work. */
#ifndef HTW_CONFIG_H
#define HTW_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum kernel_id { K_RANDMEM, K_CHASE, K_GUPS, K_STREAM, K_PRIMES, K_MALLOC, K_CG, K_MG, K_SP, K_BIGBUF, K_PANELS, K_PTREES, K_IOCOPY };
enum place_id { PLACE_HEAP_LARGE, PLACE_HEAP_SMALL, PLACE_STATIC, PLACE_MMAP };
enum page_id { PAGE_DEFAULT, PAGE_4K, PAGE_THP, PAGE_HUGETLB_2M, PAGE_HUGETLB_1G };

struct config {
    enum kernel_id kernel;
    uint64_t size;        /* --size, bytes */
    uint64_t iters;       /* --iters: passes */
    uint64_t accesses;    /* --accesses per pass; 0 = the kernel's default */
    unsigned threads;     /* --threads */
    uint64_t seed;        /* --seed */
    enum place_id place;  /* --place */
    enum page_id page;    /* --page */
    double random_pct;    /* --random-pct (randmem only) */
    uint64_t limit;       /* --limit (primes only) */
    uint64_t forks;       /* --fork: children that write the buffers after the passes */
    const char *trace;    /* --trace FILE, or NULL */
    const char *file;     /* --file PATH (iocopy only), or NULL */
};

/* Exit statuses: 0 ok, 2 bad usage, 3 a resource could not be had (hugetlb pool,
 * memory).  Callers (the Rust tool, scripts) rely on these. */
#define EXIT_USAGE 2
#define EXIT_RESOURCE 3
#define EXIT_CHILD 4            /* a --fork child did not exit 0 */
#define MAX_FORKS 64u

#define LINE_BYTES 64u          /* cache line: the unit of randmem and chase */
#define MAX_THREADS 256u
#define MIN_SIZE_PER_THREAD 4096u
#define STATIC_CAPACITY (1UL << 30)

const char *kernel_name(enum kernel_id k);
const char *place_name(enum place_id p);
const char *page_name(enum page_id p);

/* Parses argv into *cfg; prints --help and exits 0, or exits EXIT_USAGE on bad usage. */
void parse_options(int argc, char **argv, struct config *cfg);

#endif
