/* plan.c - strict plan parser (format: docs/formats.md section 3).
 *
 * Any malformed or unknown line invalidates the whole plan: a half-applied plan
 * would produce measurements nobody asked for. */
#include "plan.h"

#include "fmt.h"

#include <string.h>

static const char *const backing_names[HT_B_COUNT] = {
    [HT_B_NONE] = "none",
    [HT_B_4K] = "4k",
    [HT_B_THP2M] = "thp-2m",
    [HT_B_HUGETLB2M] = "hugetlb-2m",
    [HT_B_HUGETLB1G] = "hugetlb-1g",
};

const char *ht_backing_name(int b)
{
    if (b < 0 || b >= HT_B_COUNT)
        return "?";
    return backing_names[b];
}

int ht_backing_parse(const char *s, size_t n)
{
    for (int b = HT_B_4K; b < HT_B_COUNT; b++) {
        if (strlen(backing_names[b]) == n && memcmp(backing_names[b], s, n) == 0)
            return b;
    }
    return -1;
}

#define MAX_TOK 5

struct tok {
    const char *s;
    size_t n;
};

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

static int tok_is(const struct tok *t, const char *lit)
{
    size_t n = strlen(lit);
    return t->n == n && memcmp(t->s, lit, n) == 0;
}

/* Sets the error message and clears everything. */
static int fail(struct ht_plan *p, int line, const char *reason,
                const char *ls, size_t ln)
{
    struct ht_buf b;
    p->valid = 0;
    p->has_threshold = 0;
    p->threshold = 0;
    p->heap_large = p->heap_small = p->static_ = HT_B_NONE;
    p->nsites = 0;
    p->pool_len = 0;
    p->err_line = line;
    hb_init(&b, p->error, sizeof p->error);
    hb_puts(&b, "plan");
    if (line > 0) {
        hb_puts(&b, " line ");
        hb_u64(&b, (uint64_t)line);
    }
    hb_puts(&b, ": ");
    hb_puts(&b, reason);
    if (ls) {
        /* Quote the offending line, shortened and without control chars. */
        char q[81];
        size_t k = 0;
        for (size_t i = 0; i < ln && k < 80; i++)
            q[k++] = ((unsigned char)ls[i] < 0x20) ? ' ' : ls[i];
        q[k] = 0;
        hb_puts(&b, ": ");
        hb_puts(&b, q);
    }
    return -1;
}

int ht_plan_parse(struct ht_plan *p, const char *text, size_t len)
{
    int line = 0;
    int seen_header = 0;
    int seen_hl = 0, seen_hs = 0, seen_st = 0;
    size_t pos = 0;

    p->valid = 0;
    p->has_threshold = 0;
    p->threshold = 0;
    p->heap_large = p->heap_small = p->static_ = HT_B_NONE;
    p->nsites = 0;
    p->pool_len = 0;
    p->err_line = 0;
    p->error[0] = 0;

    if (len > HT_PLAN_MAX_BYTES)
        return fail(p, 0, "file too large", NULL, 0);

    while (pos < len) {
        const char *ls = text + pos;
        size_t ln = 0;
        while (pos + ln < len && ls[ln] != '\n')
            ln++;
        pos += ln + 1;
        line++;

        if (memchr(ls, 0, ln))
            return fail(p, line, "NUL byte", NULL, 0);

        /* Strip the comment, then tokenize. */
        size_t end = ln;
        const char *hash = memchr(ls, '#', ln);
        if (hash)
            end = (size_t)(hash - ls);
        struct tok t[MAX_TOK + 1];
        int nt = 0;
        size_t i = 0;
        while (i < end) {
            while (i < end && is_space(ls[i]))
                i++;
            if (i >= end)
                break;
            size_t st = i;
            while (i < end && !is_space(ls[i]))
                i++;
            if (nt == MAX_TOK + 1)
                return fail(p, line, "too many fields", ls, ln);
            t[nt].s = ls + st;
            t[nt].n = i - st;
            nt++;
        }
        if (nt == 0)
            continue;

        if (!seen_header) {
            if (!tok_is(&t[0], "hugetune-plan"))
                return fail(p, line, "first directive must be 'hugetune-plan 1'", ls, ln);
            if (nt != 2)
                return fail(p, line, "expected 'hugetune-plan 1'", ls, ln);
            if (!tok_is(&t[1], "1"))
                return fail(p, line, "unsupported plan version", ls, ln);
            seen_header = 1;
            continue;
        }

        if (tok_is(&t[0], "hugetune-plan")) {
            return fail(p, line, "duplicate header", ls, ln);
        } else if (tok_is(&t[0], "threshold")) {
            uint64_t v;
            if (nt != 2)
                return fail(p, line, "expected 'threshold N'", ls, ln);
            if (p->has_threshold)
                return fail(p, line, "duplicate threshold", ls, ln);
            if (ht_parse_u64(t[1].s, t[1].n, 10, &v) || v == 0 || v > (1ull << 48))
                return fail(p, line, "bad threshold (decimal bytes, 1..2^48)", ls, ln);
            p->has_threshold = 1;
            p->threshold = v;
        } else if (tok_is(&t[0], "heap-large") || tok_is(&t[0], "heap-small") ||
                   tok_is(&t[0], "static")) {
            int *dst, *seen;
            int small_or_static = !tok_is(&t[0], "heap-large");
            if (tok_is(&t[0], "heap-large")) {
                dst = &p->heap_large;
                seen = &seen_hl;
            } else if (tok_is(&t[0], "heap-small")) {
                dst = &p->heap_small;
                seen = &seen_hs;
            } else {
                dst = &p->static_;
                seen = &seen_st;
            }
            if (nt != 2)
                return fail(p, line, "expected 'CATEGORY BACKING'", ls, ln);
            if (*seen)
                return fail(p, line, "duplicate directive", ls, ln);
            int b = ht_backing_parse(t[1].s, t[1].n);
            if (b < 0)
                return fail(p, line, "unknown backing", ls, ln);
            if (small_or_static && b != HT_B_THP2M && b != HT_B_4K)
                return fail(p, line, "backing not supported for this category (thp-2m or 4k)", ls, ln);
            *seen = 1;
            *dst = b;
        } else if (tok_is(&t[0], "site")) {
            uint64_t off;
            if (nt != 4)
                return fail(p, line, "expected 'site MODULE OFFSET BACKING'", ls, ln);
            if (ht_parse_u64(t[2].s, t[2].n, 16, &off))
                return fail(p, line, "bad site offset (hex)", ls, ln);
            int b = ht_backing_parse(t[3].s, t[3].n);
            if (b < 0)
                return fail(p, line, "unknown backing", ls, ln);
            if (p->nsites == HT_PLAN_MAX_SITES)
                return fail(p, line, "too many sites", ls, ln);
            for (int k = 0; k < p->nsites; k++) {
                const struct ht_plan_site *s = &p->sites[k];
                if (s->offset == off && s->mod_len == t[1].n &&
                    memcmp(p->pool + s->mod_off, t[1].s, t[1].n) == 0)
                    return fail(p, line, "duplicate site", ls, ln);
            }
            if (p->pool_len + t[1].n + 1 > HT_PLAN_POOL)
                return fail(p, line, "site module paths too long in total", ls, ln);
            struct ht_plan_site *s = &p->sites[p->nsites++];
            s->mod_off = (uint32_t)p->pool_len;
            s->mod_len = (uint32_t)t[1].n;
            memcpy(p->pool + p->pool_len, t[1].s, t[1].n);
            p->pool[p->pool_len + t[1].n] = 0;
            p->pool_len += t[1].n + 1;
            s->offset = off;
            s->backing = b;
        } else {
            return fail(p, line, "unknown directive", ls, ln);
        }
    }
    if (!seen_header)
        return fail(p, 0, "missing 'hugetune-plan 1' header", NULL, 0);
    p->valid = 1;
    return 0;
}
