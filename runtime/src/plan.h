/* plan.h - the apply-mode plan file (docs/formats.md section 3).
 *
 * Why a separate, pure module: the parser runs at library init where malloc is
 * off limits, so it works on a caller-provided text buffer and a fixed-size
 * result struct; being pure it is unit-tested with malformed inputs. */
#ifndef HT_PLAN_H
#define HT_PLAN_H

#include <stddef.h>
#include <stdint.h>

enum ht_backing {
    HT_B_NONE = 0, /* not planned: glibc keeps it */
    HT_B_4K,
    HT_B_THP2M,
    HT_B_HUGETLB2M,
    HT_B_HUGETLB1G,
    HT_B_COUNT
};

const char *ht_backing_name(int b); /* "4k", "thp-2m", ..., "none" */
int ht_backing_parse(const char *s, size_t n); /* HT_B_* or -1 */

#define HT_PLAN_MAX_SITES 256
#define HT_PLAN_POOL 32768 /* bytes for site module paths */
#define HT_PLAN_MAX_BYTES (1u << 20)

struct ht_plan_site {
    uint32_t mod_off; /* into pool, NUL-terminated */
    uint32_t mod_len;
    uint64_t offset; /* caller - load bias */
    int backing;
};

struct ht_plan {
    int valid;
    int has_threshold;
    uint64_t threshold;
    int heap_large; /* HT_B_* (HT_B_NONE: directive absent) */
    int heap_small; /* HT_B_NONE, HT_B_4K or HT_B_THP2M */
    int static_;    /* HT_B_NONE, HT_B_4K or HT_B_THP2M */
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

#endif
