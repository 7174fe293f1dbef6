/* plan.h - the apply-mode plan file (docs/formats.md section 3).
 *
 * Why a separate, pure module: the parser runs at library init where malloc is
 * off limits, so it works on a caller-provided text buffer and a fixed-size
 * result struct; being pure it is unit-tested with malformed inputs. */
#ifndef HT_PLAN_H
#define HT_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* Page backings. The first five keep their values from version 1 of the
 * summary/plan code; the mTHP sizes follow. */
enum ht_backing {
    HT_B_NONE = 0, /* not planned: the allocator behind us keeps it */
    HT_B_4K,
    HT_B_THP2M,
    HT_B_HUGETLB2M,
    HT_B_HUGETLB1G,
    HT_B_THP16K,
    HT_B_THP32K,
    HT_B_THP64K,
    HT_B_THP128K,
    HT_B_THP256K,
    HT_B_THP512K,
    HT_B_THP1M,
    HT_B_COUNT
};

const char *ht_backing_name(int b); /* "4k", "thp-2m", ..., "none" */
int ht_backing_parse(const char *s, size_t n); /* HT_B_* or -1 */
/* Page size of a backing in bytes (4k: 4096, thp-64k: 65536, ...; none: 0). */
uint64_t ht_backing_page(int b);
static inline int ht_backing_is_hugetlb(int b) { return b == HT_B_HUGETLB2M || b == HT_B_HUGETLB1G; }
/* THP of any size (PMD-sized thp-2m or an mTHP size). */
static inline int ht_backing_is_thp(int b) { return b == HT_B_THP2M || (b >= HT_B_THP16K && b <= HT_B_THP1M); }
static inline int ht_backing_is_mthp(int b) { return b >= HT_B_THP16K && b <= HT_B_THP1M; }

enum ht_layout_mode { HT_LAYOUT_HEAD_TAIL = 0, HT_LAYOUT_ROUND_UP = 1 };
enum ht_fork_safe { HT_FORK_COPY = 0, HT_FORK_THP = 1, HT_FORK_OFF = 2 };
enum ht_pool_idx { HT_POOL_2M = 0, HT_POOL_1G = 1, HT_POOL_N = 2 };

#define HT_PLAN_MAX_SITES 256
#define HT_PLAN_MAX_STATICS 16
#define HT_PLAN_POOL 32768 /* bytes for site/static module paths */
#define HT_PLAN_MAX_BYTES (1u << 20)
#define HT_PLAN_MAX_POOL_PAGES (1u << 20)
#define HT_ARENA_DEFAULT_BYTES (64ull << 30)
#define HT_ARENA_MAX_BYTES (1ull << 46)

struct ht_plan_site {
    uint32_t mod_off; /* into pool, NUL-terminated */
    uint32_t mod_len;
    uint64_t offset; /* caller - load bias */
    int backing;
};

/* `static B [MODULE]`: mod_len 0 means the main program. */
struct ht_plan_static {
    uint32_t mod_off;
    uint32_t mod_len;
    int backing;
};

struct ht_plan {
    int valid;
    int has_threshold;
    uint64_t threshold;
    int heap_large; /* HT_B_* (HT_B_NONE: directive absent) */
    int heap_small; /* HT_B_NONE, HT_B_4K, or a THP size (glibc tunable: thp-2m or mTHP) */
    int arena;      /* heap-small arena: HT_B_HUGETLB2M or a THP size, HT_B_NONE = none */
    uint64_t arena_bytes; /* reserved address space of the arena */
    int static_;    /* the main program's static backing (HT_B_NONE: none) */
    int nstatics;   /* all `static` directives, main program included */
    struct ht_plan_static statics[HT_PLAN_MAX_STATICS];
    int layout;     /* HT_LAYOUT_* (default head-tail) */
    int fork_safe;  /* HT_FORK_* (default copy) */
    int mapped_thp; /* `mapped thp`: the program's own mappings never on hugetlb (mapped.c) */
    int jvm;        /* `jvm B`: HT_B_THP2M or HT_B_HUGETLB2M, HT_B_NONE = absent. The
                     * JVM backs its own heap (the launcher's JAVA_TOOL_OPTIONS);
                     * the library leaves the program's mappings alone and reports
                     * their huge bytes (mapped.c) */
    uint64_t pool_pages[HT_POOL_N]; /* `pool hugetlb-2m N`, `pool hugetlb-1g N` */
    int nsites;
    struct ht_plan_site sites[HT_PLAN_MAX_SITES];
    size_t pool_len;
    char pool[HT_PLAN_POOL];
    int err_line;   /* 1-based line of the first error, 0: none / not line-related */
    char error[256];
};

/* Parses text[0..len). On success returns 0 and sets valid = 1. On any error
 * returns -1, valid = 0, every directive cleared (the whole plan is ignored)
 * and error holds "plan line N: reason: <line>". */
int ht_plan_parse(struct ht_plan *p, const char *text, size_t len);

static inline const char *ht_plan_site_module(const struct ht_plan *p, int i)
{
    return p->pool + p->sites[i].mod_off;
}

/* "" for the main program. */
static inline const char *ht_plan_static_module(const struct ht_plan *p, int i)
{
    return p->pool + p->statics[i].mod_off;
}

#endif
