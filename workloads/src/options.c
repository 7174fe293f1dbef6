/* Command line: hugetune-work KERNEL [options].  Every problem is one line on
 * stderr and exit status 2 (EXIT_USAGE); nothing is allocated before the options
 * are known to be good. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "kernels.h"
#include "util.h"

#define MAX_SIZE (1ULL << 40)        /* 1 TiB: keeps all size arithmetic far from overflow */
#define MAX_COUNT (1ULL << 48)       /* --iters, --accesses */
#define MAX_LIMIT 4294967295ULL      /* --limit */

static const char *const kernel_names[] = { "randmem", "chase", "gups", "stream", "primes", "malloc", "cg", "mg", "sp", "bigbuf", "panels", "ptrees", "iocopy" };
static const char *const place_names[] = { "heap-large", "heap-small", "static", "mmap" };
static const char *const page_names[] = { "default", "4k", "thp", "hugetlb-2m", "hugetlb-1g" };

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

const char *kernel_name(enum kernel_id k) { return kernel_names[k]; }
const char *place_name(enum place_id p) { return place_names[p]; }
const char *page_name(enum page_id p) { return page_names[p]; }

static const char usage_text[] =
    "usage: hugetune-work KERNEL [options]\n"
    "\n"
    "Built-in workloads of hugetune.  Prints one JSON line with the results on stdout.\n"
    "\n"
    "kernels:\n"
    "  randmem   read+write one word per access; --random-pct of the accesses go to a\n"
    "            random cache line, the rest to a sequential cursor (default: size/64 per pass)\n"
    "  chase     dependent random pointer walk through one random cycle of 64-byte nodes\n"
    "            (latency bound; one step per node per pass)\n"
    "  gups      random read-modify-write (xor) updates of a table of 8-byte words\n"
    "            (throughput bound; one update per word per pass)\n"
    "  stream    STREAM triad a[i] = b[i] + s*c[i] over three arrays of size/3 bytes (GB/s)\n"
    "  primes    CPU-bound control: count primes up to --limit by trial division, one\n"
    "            event per pass; ignores --size, --place and --page\n"
    "  malloc    allocator-bound: each thread frees and reallocates random blocks of a\n"
    "            ring of live 16..1024-byte blocks (--size in all); --accesses operations\n"
    "            per pass (default 10 M); ignores --place and --page\n"
    "  cg        conjugate gradient (like NAS CG) on a random sparse symmetric positive\n"
    "            definite matrix, 16 random off-diagonal entries per row: one CG\n"
    "            iteration per pass (q = A p streams the CSR arrays and gathers p at\n"
    "            random columns); restarts every 25 passes; M nonzeros/s\n"
    "\n"
    "options:\n"
    "  --size BYTES       memory size; suffixes K, M, G, T are powers of 1024 (default 64M;\n"
    "                     at least 4K per thread)\n"
    "  --iters N          passes (default 1)\n"
    "  --accesses N       accesses/steps/updates/operations/blocks/panels/predicates per pass\n"
    "                     (randmem, chase, gups, malloc, bigbuf, panels, ptrees; default\n"
    "                     above; not stream, primes, cg, mg, sp, iocopy)\n"
    "  --threads N        OpenMP threads, 1..256 (default 1)\n"
    "  --seed N           random seed; runs are deterministic (default 42)\n"
    "  --place P          heap-large: one big malloc (stream, mg: 3, sp: 5, cg: 7)  [default]\n"
    "                     heap-small: many malloc'd nodes of 64..512 bytes + a small-piece index\n"
    "                                 (cg: one block per row, vectors in 16 KiB chunks)\n"
    "                     static:     a 1 GiB .bss array (--size at most 1G)\n"
    "                     mmap:       the program's own allocator: one anonymous private mmap\n"
    "                                 per buffer (as a JVM or Go heap, numpy, a static jemalloc)\n"
    "  --page B           the workload's own page backing, for direct experiments:\n"
    "                     default (malloc/.bss as they are), 4k, thp, hugetlb-2m, hugetlb-1g;\n"
    "                     a hugetlb mapping that fails exits with status 3, no fallback\n"
    "  --random-pct P     randmem: percent (0..100) of random accesses (default 100)\n"
    "  --limit N          primes: upper bound (default 20000)\n"
    "  --file PATH        iocopy (required there): the file to write and copy; it and\n"
    "                     PATH.copy must not exist\n"
    "  --fork N           after the passes, fork N children one after another; each writes\n"
    "                     one word in every 4 KB page of the buffers (copy-on-write, as a\n"
    "                     snapshotting child would) and exits; the parent waits for each.\n"
    "                     Exit status 4 if a child dies (0..64; heap-large or static only;\n"
    "                     randmem, chase, gups, stream, cg, mg, sp)\n"
    "  --trace FILE       write the exact reference stream of the kernel phase (every\n"
    "                     reference the kernel makes to its data) to FILE, in hugetune's\n"
    "                     reference stream format; timings of a traced run are meaningless\n"
    "  --help             this text\n"
    "\n"
    "exit status: 0 ok, 2 bad usage, 3 memory or huge pages not available, 4 a --fork\n"
    "child failed.\n";

static int lookup(const char *s, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

/* Decimal digits only: no sign, no spaces, no hex.  Too many digits for 64 bits
 * give UINT64_MAX, which every caller rejects as too big. */
static int parse_digits(const char *s, const char **end, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return 0;
    errno = 0;
    char *e;
    unsigned long long v = strtoull(s, &e, 10);
    *out = errno == ERANGE ? UINT64_MAX : v;
    *end = e;
    return 1;
}

static uint64_t parse_count(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    uint64_t v;
    const char *end;
    if (!parse_digits(s, &end, &v) || *end != '\0')
        die_usage("%s: '%s' is not a number (expected an integer from %llu to %llu)", opt, s,
                  (unsigned long long)min, (unsigned long long)max);
    if (v < min || v > max || (v == UINT64_MAX && errno == ERANGE))
        die_usage("%s: %s is out of range (expected %llu to %llu)", opt, s,
                  (unsigned long long)min, (unsigned long long)max);
    return v;
}

/* BYTES with an optional K/M/G/T suffix (powers of 1024, either case, optionally
 * followed by "B" or "iB", any case). */
static uint64_t parse_size(const char *s)
{
    uint64_t v;
    const char *end;
    if (!parse_digits(s, &end, &v))
        die_usage("--size: '%s' is not a size (examples: 4096, 512K, 64M, 1G)", s);
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: end = "?"; break;
    }
    if (shift && (strcasecmp(end, "B") == 0 || strcasecmp(end, "iB") == 0))
        end += strlen(end);
    if (*end != '\0')
        die_usage("--size: '%s' is not a size (examples: 4096, 512K, 64M, 1G)", s);
    if (v > (MAX_SIZE >> shift))
        die_usage("--size: %s is too big (at most 1T)", s);
    return v << shift;
}

static double parse_pct(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v) || s[0] == ' ')
        die_usage("--random-pct: '%s' is not a number (expected 0 to 100)", s);
    if (v < 0.0 || v > 100.0)
        die_usage("--random-pct: %s is out of range (expected 0 to 100)", s);
    return v;
}

enum opt_id {
    O_SIZE, O_ITERS, O_ACCESSES, O_THREADS, O_SEED, O_PLACE, O_PAGE, O_PCT, O_LIMIT, O_FORK, O_TRACE, O_FILE,
};
static const char *const opt_names[] = {
    "--size", "--iters", "--accesses", "--threads", "--seed", "--place", "--page", "--random-pct", "--limit",
    "--fork", "--trace", "--file",
};

void parse_options(int argc, char **argv, struct config *cfg)
{
    *cfg = (struct config){ .size = 64ULL << 20, .iters = 1, .threads = 1, .seed = 42,
                            .place = PLACE_HEAP_LARGE, .page = PAGE_DEFAULT,
                            .random_pct = 100.0, .limit = 20000 };
    int have_kernel = 0, seen[COUNT_OF(opt_names)] = { 0 };

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
        if (arg[0] != '-') {
            if (have_kernel)
                die_usage("unexpected argument '%s' (only one KERNEL; see --help)", arg);
            int k = lookup(arg, kernel_names, COUNT_OF(kernel_names));
            if (k < 0)
                die_usage("unknown kernel '%s' (expected randmem, chase, gups, stream, primes, malloc, cg, mg, sp, bigbuf, panels, ptrees or iocopy)", arg);
            cfg->kernel = (enum kernel_id)k;
            have_kernel = 1;
            continue;
        }
        /* --name VALUE or --name=VALUE */
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        int o = -1;
        for (size_t j = 0; j < COUNT_OF(opt_names); j++)
            if (strlen(opt_names[j]) == nlen && strncmp(arg, opt_names[j], nlen) == 0)
                o = (int)j;
        if (o < 0)
            die_usage("unknown option '%.*s' (see --help)", (int)nlen, arg);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val)
            die_usage("%s needs a value", opt_names[o]);
        seen[o] = 1;
        switch ((enum opt_id)o) {
        case O_SIZE: cfg->size = parse_size(val); break;
        case O_ITERS: cfg->iters = parse_count("--iters", val, 1, MAX_COUNT); break;
        case O_ACCESSES: cfg->accesses = parse_count("--accesses", val, 1, MAX_COUNT); break;
        case O_THREADS: cfg->threads = (unsigned)parse_count("--threads", val, 1, MAX_THREADS); break;
        case O_SEED: cfg->seed = parse_count("--seed", val, 0, UINT64_MAX); break;
        case O_LIMIT: cfg->limit = parse_count("--limit", val, 2, MAX_LIMIT); break;
        case O_FORK: cfg->forks = parse_count("--fork", val, 0, MAX_FORKS); break;
        case O_TRACE:
            if (!*val)
                die_usage("--trace needs a file name");
            cfg->trace = val;
            break;
        case O_FILE:
            if (!*val)
                die_usage("--file needs a path");
            cfg->file = val;
            break;
        case O_PCT: cfg->random_pct = parse_pct(val); break;
        case O_PLACE: {
            int p = lookup(val, place_names, COUNT_OF(place_names));
            if (p < 0)
                die_usage("--place: unknown placement '%s' (expected heap-large, heap-small or static)", val);
            cfg->place = (enum place_id)p;
            break;
        }
        case O_PAGE: {
            int p = lookup(val, page_names, COUNT_OF(page_names));
            if (p < 0)
                die_usage("--page: unknown page backing '%s' (expected default, 4k, thp, hugetlb-2m or hugetlb-1g)", val);
            cfg->page = (enum page_id)p;
            break;
        }
        }
    }

    if (!have_kernel)
        die_usage("missing KERNEL (randmem, chase, gups, stream, primes, malloc, cg, mg, sp, bigbuf, panels, ptrees or iocopy; see --help)");
    if (seen[O_PCT] && cfg->kernel != K_RANDMEM)
        die_usage("--random-pct applies to randmem only");
    if (seen[O_LIMIT] && cfg->kernel != K_PRIMES)
        die_usage("--limit applies to primes only");
    if (seen[O_FILE] && cfg->kernel != K_IOCOPY)
        die_usage("--file applies to iocopy only");
    if (cfg->kernel == K_IOCOPY && !cfg->file)
        die_usage("iocopy needs --file PATH (the file it writes, copies to PATH.copy and removes)");
    if (seen[O_ACCESSES] && (cfg->kernel == K_STREAM || cfg->kernel == K_PRIMES || cfg->kernel == K_CG
                             || cfg->kernel == K_MG || cfg->kernel == K_SP || cfg->kernel == K_IOCOPY))
        die_usage("--accesses does not apply to %s (a pass is %s)", kernel_name(cfg->kernel),
                  cfg->kernel == K_STREAM ? "one triad over the arrays"
                  : cfg->kernel == K_CG   ? "one CG iteration over the whole matrix"
                  : cfg->kernel == K_MG   ? "one V-cycle over the whole grid"
                  : cfg->kernel == K_SP   ? "one ADI step over the whole grid"
                  : cfg->kernel == K_IOCOPY ? "one copy of the whole file"
                                          : "one count up to --limit");
    if ((cfg->kernel == K_MG || cfg->kernel == K_SP) && cfg->place == PLACE_HEAP_SMALL)
        die_usage("--place heap-small does not apply to %s (its arrays are big buffers: heap-large or static)",
                  kernel_name(cfg->kernel));
    const int own_memory = cfg->kernel == K_MALLOC || cfg->kernel == K_BIGBUF || cfg->kernel == K_PANELS
                           || cfg->kernel == K_PTREES || cfg->kernel == K_IOCOPY;   /* ignore --place, --page */
    if (cfg->forks && (cfg->kernel == K_PRIMES || own_memory || cfg->place == PLACE_HEAP_SMALL))
        die_usage("--fork needs big buffers: randmem, chase, gups, stream, cg, mg or sp with --place heap-large or static");
    if (cfg->kernel == K_PRIMES)
        return;     /* no memory: --size, --place and --page are ignored */

    const uint64_t min = (uint64_t)MIN_SIZE_PER_THREAD * cfg->threads;
    if (cfg->size < min)
        die_usage("--size %llu is too small (at least %llu bytes: 4K per thread)",
                  (unsigned long long)cfg->size, (unsigned long long)min);
    if (cfg->place == PLACE_STATIC && cfg->size > STATIC_CAPACITY && !own_memory)
        die_usage("--size %llu is too big for --place static (the static buffer holds %lu bytes)",
                  (unsigned long long)cfg->size, (unsigned long)STATIC_CAPACITY);
    if (cfg->kernel == K_CG && cg_rows(cfg->size) > CG_MAX_ROWS)
        die_usage("--size %llu is too big for cg (its column indices are 32-bit: at most %llu rows, "
                  "about %lluG)", (unsigned long long)cfg->size, CG_MAX_ROWS,
                  (unsigned long long)((CG_MAX_ROWS * CG_ROW_BYTES) >> 30));
    if (cfg->kernel == K_MG) {
        struct mgshape sh;
        mg_shape(cfg->size, &sh);
        if (sh.e == 0) {
            mg_shape_exp(MG_MIN_EXP, &sh);
            die_usage("--size %llu is too small for mg (at least %llu bytes: an 8 x 8 x 8 grid's levels)",
                      (unsigned long long)cfg->size, (unsigned long long)sh.bytes);
        }
    }
    if (cfg->kernel == K_BIGBUF && cfg->size < BB_MIN_SIZE)
        die_usage("--size %llu is too small for bigbuf (at least 1M: %u slices of 16 KiB)",
                  (unsigned long long)cfg->size, BB_SLICES);
    if (cfg->kernel == K_PANELS && cfg->size < PANELS_MIN_SIZE)
        die_usage("--size %llu is too small for panels (at least 12M: the largest panel)",
                  (unsigned long long)cfg->size);
    if (cfg->kernel == K_PTREES && cfg->size < PT_MIN_SIZE)
        die_usage("--size %llu is too small for ptrees (at least 64K: a tree of a few dozen objects)",
                  (unsigned long long)cfg->size);
    if (cfg->kernel == K_SP && sp_side(cfg->size) == 0)
        die_usage("--size %llu is too small for sp (at least %llu bytes: an 8 x 8 x 8 grid)",
                  (unsigned long long)cfg->size,
                  (unsigned long long)SP_MIN_SIDE * SP_MIN_SIDE * SP_MIN_SIDE * SP_POINT_BYTES + SP_SLACK);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0 && cfg->size > (uint64_t)pages * (uint64_t)psize && cfg->kernel != K_IOCOPY)
        die_usage("--size %llu is more than the machine's memory (%llu bytes)",
                  (unsigned long long)cfg->size, (unsigned long long)pages * (unsigned long long)psize);
}
