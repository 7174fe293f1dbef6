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
    [HT_B_THP16K] = "thp-16k",
    [HT_B_THP32K] = "thp-32k",
    [HT_B_THP64K] = "thp-64k",
    [HT_B_THP128K] = "thp-128k",
    [HT_B_THP256K] = "thp-256k",
    [HT_B_THP512K] = "thp-512k",
    [HT_B_THP1M] = "thp-1m",
};

uint64_t ht_backing_page(int b)
{
    switch (b) {
    case HT_B_4K: return 4096;
    case HT_B_THP2M:
    case HT_B_HUGETLB2M: return 2ull << 20;
    case HT_B_HUGETLB1G: return 1ull << 30;
    case HT_B_THP16K: return 16ull << 10;
    case HT_B_THP32K: return 32ull << 10;
    case HT_B_THP64K: return 64ull << 10;
    case HT_B_THP128K: return 128ull << 10;
    case HT_B_THP256K: return 256ull << 10;
    case HT_B_THP512K: return 512ull << 10;
    case HT_B_THP1M: return 1ull << 20;
    default: return 0;
    }
}

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

static void clear(struct ht_plan *p)
{
    p->valid = 0;
    p->has_threshold = 0;
    p->threshold = 0;
    p->heap_large = p->heap_small = p->static_ = p->arena = HT_B_NONE;
    p->arena_bytes = 0;
    p->nstatics = 0;
    p->layout = HT_LAYOUT_HEAD_TAIL;
    p->fork_safe = HT_FORK_COPY;
    p->mapped_thp = 0;
    p->jvm = HT_B_NONE;
    for (int i = 0; i < HT_POOL_N; i++)
        p->pool_pages[i] = 0;
    p->nsites = 0;
    p->pool_len = 0;
}

/* Sets the error message and clears everything. */
static int fail(struct ht_plan *p, int line, const char *reason,
                const char *ls, size_t ln)
{
    struct ht_buf b;
    clear(p);
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

/* Copies a module path into the string pool. -1 when the pool is full. */
static int pool_add(struct ht_plan *p, const char *s, size_t n, uint32_t *off)
{
    if (p->pool_len + n + 1 > HT_PLAN_POOL)
        return -1;
    *off = (uint32_t)p->pool_len;
    memcpy(p->pool + p->pool_len, s, n);
    p->pool[p->pool_len + n] = 0;
    p->pool_len += n + 1;
    return 0;
}

int ht_plan_parse(struct ht_plan *p, const char *text, size_t len)
{
    int line = 0;
    int seen_header = 0;
    int seen_hl = 0, seen_hs = 0, seen_layout = 0, seen_fork = 0, seen_mapped = 0, seen_jvm = 0;
    size_t pos = 0;

    clear(p);
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
        } else if (tok_is(&t[0], "heap-large")) {
            if (nt != 2)
                return fail(p, line, "expected 'heap-large BACKING'", ls, ln);
            if (seen_hl)
                return fail(p, line, "duplicate directive", ls, ln);
            int b = ht_backing_parse(t[1].s, t[1].n);
            if (b < 0)
                return fail(p, line, "unknown backing", ls, ln);
            seen_hl = 1;
            p->heap_large = b;
        } else if (tok_is(&t[0], "heap-small")) {
            if (seen_hs)
                return fail(p, line, "duplicate directive", ls, ln);
            seen_hs = 1;
            if (nt >= 2 && tok_is(&t[1], "arena")) {
                if (nt != 3 && nt != 4)
                    return fail(p, line, "expected 'heap-small arena BACKING [BYTES]'", ls, ln);
                int b = ht_backing_parse(t[2].s, t[2].n);
                if (b != HT_B_HUGETLB2M && !ht_backing_is_thp(b))
                    return fail(p, line, "arena backing must be hugetlb-2m, thp-2m or an mTHP size", ls, ln);
                uint64_t bytes = HT_ARENA_DEFAULT_BYTES;
                if (nt == 4 && (ht_parse_u64(t[3].s, t[3].n, 10, &bytes) || bytes < (2ull << 20) ||
                                bytes > HT_ARENA_MAX_BYTES))
                    return fail(p, line, "bad arena size (decimal bytes, 2 MiB..2^46)", ls, ln);
                p->arena = b;
                p->arena_bytes = (bytes + (2ull << 20) - 1) & ~((2ull << 20) - 1);
                continue;
            }
            if (nt != 2)
                return fail(p, line, "expected 'heap-small BACKING' or 'heap-small arena BACKING [BYTES]'", ls, ln);
            int b = ht_backing_parse(t[1].s, t[1].n);
            if (b < 0)
                return fail(p, line, "unknown backing", ls, ln);
            if (!ht_backing_is_thp(b) && b != HT_B_4K)
                return fail(p, line, "backing not supported for this category (thp-2m, an mTHP size or 4k)", ls, ln);
            p->heap_small = b;
        } else if (tok_is(&t[0], "static")) {
            if (nt != 2 && nt != 3)
                return fail(p, line, "expected 'static BACKING [MODULE]'", ls, ln);
            int b = ht_backing_parse(t[1].s, t[1].n);
            if (b < 0)
                return fail(p, line, "unknown backing", ls, ln);
            if (!ht_backing_is_thp(b) && b != HT_B_4K && !ht_backing_is_hugetlb(b))
                return fail(p, line,
                            "backing not supported for static (thp-2m, an mTHP size, hugetlb-2m, hugetlb-1g or 4k)",
                            ls, ln);
            const char *ms = nt == 3 ? t[2].s : "";
            size_t mn = nt == 3 ? t[2].n : 0;
            for (int k = 0; k < p->nstatics; k++) {
                const struct ht_plan_static *s = &p->statics[k];
                if (s->mod_len == mn && memcmp(p->pool + s->mod_off, ms, mn) == 0)
                    return fail(p, line, "duplicate static directive for this module", ls, ln);
            }
            if (p->nstatics == HT_PLAN_MAX_STATICS)
                return fail(p, line, "too many static directives", ls, ln);
            struct ht_plan_static *s = &p->statics[p->nstatics];
            if (pool_add(p, ms, mn, &s->mod_off) != 0)
                return fail(p, line, "module paths too long in total", ls, ln);
            s->mod_len = (uint32_t)mn;
            s->backing = b;
            p->nstatics++;
            if (mn == 0)
                p->static_ = b;
        } else if (tok_is(&t[0], "layout")) {
            if (nt != 2)
                return fail(p, line, "expected 'layout head-tail|round-up'", ls, ln);
            if (seen_layout)
                return fail(p, line, "duplicate layout", ls, ln);
            if (tok_is(&t[1], "head-tail"))
                p->layout = HT_LAYOUT_HEAD_TAIL;
            else if (tok_is(&t[1], "round-up"))
                p->layout = HT_LAYOUT_ROUND_UP;
            else
                return fail(p, line, "unknown layout (head-tail or round-up)", ls, ln);
            seen_layout = 1;
        } else if (tok_is(&t[0], "fork-safe")) {
            if (nt != 2)
                return fail(p, line, "expected 'fork-safe copy|thp|off'", ls, ln);
            if (seen_fork)
                return fail(p, line, "duplicate fork-safe", ls, ln);
            if (tok_is(&t[1], "copy"))
                p->fork_safe = HT_FORK_COPY;
            else if (tok_is(&t[1], "thp"))
                p->fork_safe = HT_FORK_THP;
            else if (tok_is(&t[1], "off"))
                p->fork_safe = HT_FORK_OFF;
            else
                return fail(p, line, "unknown fork-safe mode (copy, thp or off)", ls, ln);
            seen_fork = 1;
        } else if (tok_is(&t[0], "mapped")) {
            if (nt != 2)
                return fail(p, line, "expected 'mapped hugetlb|thp'", ls, ln);
            if (seen_mapped)
                return fail(p, line, "duplicate mapped", ls, ln);
            if (tok_is(&t[1], "hugetlb"))
                p->mapped_thp = 0;
            else if (tok_is(&t[1], "thp"))
                p->mapped_thp = 1;
            else
                return fail(p, line, "unknown mapped mode (hugetlb or thp)", ls, ln);
            seen_mapped = 1;
        } else if (tok_is(&t[0], "jvm")) {
            if (nt != 2)
                return fail(p, line, "expected 'jvm thp-2m|hugetlb-2m'", ls, ln);
            if (seen_jvm)
                return fail(p, line, "duplicate jvm", ls, ln);
            int b = ht_backing_parse(t[1].s, t[1].n);
            if (b != HT_B_THP2M && b != HT_B_HUGETLB2M)
                return fail(p, line, "jvm backing must be thp-2m or hugetlb-2m", ls, ln);
            p->jvm = b;
            seen_jvm = 1;
        } else if (tok_is(&t[0], "pool")) {
            uint64_t n;
            if (nt != 3)
                return fail(p, line, "expected 'pool hugetlb-2m|hugetlb-1g N'", ls, ln);
            int b = ht_backing_parse(t[1].s, t[1].n);
            if (b != HT_B_HUGETLB2M && b != HT_B_HUGETLB1G)
                return fail(p, line, "pool backing must be hugetlb-2m or hugetlb-1g", ls, ln);
            int k = b == HT_B_HUGETLB2M ? HT_POOL_2M : HT_POOL_1G;
            if (p->pool_pages[k])
                return fail(p, line, "duplicate pool", ls, ln);
            if (ht_parse_u64(t[2].s, t[2].n, 10, &n) || n == 0 || n > HT_PLAN_MAX_POOL_PAGES)
                return fail(p, line, "bad pool size (decimal pages, 1..1048576)", ls, ln);
            p->pool_pages[k] = n;
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
            struct ht_plan_site *s = &p->sites[p->nsites];
            if (pool_add(p, t[1].s, t[1].n, &s->mod_off) != 0)
                return fail(p, line, "module paths too long in total", ls, ln);
            p->nsites++;
            s->mod_len = (uint32_t)t[1].n;
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
