/* fuzz_parsers.c - fuzz target for the runtime library's parsers of outside
 * input: the plan file (plan.c ht_plan_parse), the numbers it and the
 * environment carry (fmt.c ht_parse_u64: `threshold`, site offsets,
 * HUGETUNE_THRESHOLD), output path templates (fmt.c ht_expand_path /
 * ht_path_has_pid: HUGETUNE_LOG, HUGETUNE_SUMMARY) and the JSON string writer
 * the summary quotes them with (hb_json_str).
 *
 * Every input goes through all of them, and each result is checked against an
 * independent reference (oracle): a violated property calls abort(), which
 * libFuzzer and the regression driver report as a crash. Memory errors are
 * caught by ASan/UBSan in both builds.
 *
 * Built two ways by run.sh: with clang -fsanitize=fuzzer (libFuzzer's main),
 * and with gcc + standalone.c (a main that feeds files), plain and with
 * -fsanitize=address,undefined, for the corpus regression in scripts/test.sh. */
#include "fmt.h"
#include "plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_parsers: property violated at %s:%d: %s\n",   \
                    __FILE__, __LINE__, #c);                                      \
            abort();                                                              \
        }                                                                         \
    } while (0)

/* Big (about 40 KB each): static, not on the stack. */
static struct ht_plan P1, P2;

static int is_plan_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* ---- plan parser ---- */

static void check_plan_result(const struct ht_plan *p, int rc, size_t len)
{
    CHECK(rc == 0 || rc == -1);
    CHECK(memchr(p->error, 0, sizeof p->error) != NULL);
    if (rc == -1) {
        CHECK(!p->valid);
        /* The whole plan is dropped. */
        CHECK(!p->has_threshold && p->threshold == 0);
        CHECK(p->heap_large == HT_B_NONE && p->heap_small == HT_B_NONE &&
              p->static_ == HT_B_NONE && p->arena == HT_B_NONE && p->arena_bytes == 0);
        CHECK(p->nsites == 0 && p->pool_len == 0 && p->nstatics == 0);
        CHECK(p->layout == HT_LAYOUT_HEAD_TAIL && p->fork_safe == HT_FORK_COPY);
        for (int i = 0; i < HT_POOL_N; i++)
            CHECK(p->pool_pages[i] == 0);
        CHECK(strncmp(p->error, "plan", 4) == 0);
        CHECK(p->err_line >= 0);
        /* The error quotes at most 80 bytes of the line, without control bytes. */
        for (const char *s = p->error; *s; s++)
            CHECK((unsigned char)*s >= 0x20);
        return;
    }
    CHECK(p->valid == 1);
    CHECK(p->error[0] == 0 && p->err_line == 0);
    CHECK(len <= HT_PLAN_MAX_BYTES);
    if (p->has_threshold)
        CHECK(p->threshold >= 1 && p->threshold <= (1ull << 48));
    else
        CHECK(p->threshold == 0);
    CHECK(p->heap_large >= HT_B_NONE && p->heap_large < HT_B_COUNT);
    CHECK(p->heap_small == HT_B_NONE || p->heap_small == HT_B_4K || p->heap_small == HT_B_THP2M);
    /* heap-small is either the glibc tunable form or the arena, never both. */
    CHECK(p->arena == HT_B_NONE || p->heap_small == HT_B_NONE);
    if (p->arena == HT_B_NONE) {
        CHECK(p->arena_bytes == 0);
    } else {
        CHECK(p->arena == HT_B_HUGETLB2M || p->arena == HT_B_THP2M);
        CHECK(p->arena_bytes >= (2ull << 20) && p->arena_bytes <= HT_ARENA_MAX_BYTES &&
              p->arena_bytes % (2ull << 20) == 0);
    }
    CHECK(p->layout == HT_LAYOUT_HEAD_TAIL || p->layout == HT_LAYOUT_ROUND_UP);
    CHECK(p->fork_safe == HT_FORK_COPY || p->fork_safe == HT_FORK_THP || p->fork_safe == HT_FORK_OFF);
    for (int i = 0; i < HT_POOL_N; i++)
        CHECK(p->pool_pages[i] <= HT_PLAN_MAX_POOL_PAGES);
#define STATIC_BACKING_OK(b) ((b) == HT_B_4K || (b) == HT_B_THP2M || (b) == HT_B_HUGETLB2M)
    CHECK(p->static_ == HT_B_NONE || STATIC_BACKING_OK(p->static_));
    CHECK(p->nstatics >= 0 && p->nstatics <= HT_PLAN_MAX_STATICS);
    int main_statics = 0;
    for (int i = 0; i < p->nstatics; i++) {
        const struct ht_plan_static *st = &p->statics[i];
        CHECK(STATIC_BACKING_OK(st->backing));
        CHECK((size_t)st->mod_off + st->mod_len < p->pool_len || st->mod_len == 0);
        const char *m = ht_plan_static_module(p, i);
        CHECK(strlen(m) == st->mod_len);
        if (st->mod_len == 0) {
            main_statics++;
            CHECK(p->static_ == st->backing); /* the main program's entry is mirrored */
        }
        for (int j = 0; j < i; j++) /* one directive per module */
            CHECK(strcmp(ht_plan_static_module(p, j), m) != 0);
    }
    CHECK(main_statics <= 1 && (main_statics == 1) == (p->static_ != HT_B_NONE));
    CHECK(p->nsites >= 0 && p->nsites <= HT_PLAN_MAX_SITES);
    CHECK(p->pool_len <= HT_PLAN_POOL);
    for (int i = 0; i < p->nsites; i++) {
        const struct ht_plan_site *s = &p->sites[i];
        CHECK(s->backing > HT_B_NONE && s->backing < HT_B_COUNT);
        CHECK(s->mod_len > 0);
        CHECK((size_t)s->mod_off + s->mod_len < p->pool_len);
        const char *m = ht_plan_site_module(p, i);
        CHECK(strlen(m) == s->mod_len);
        for (uint32_t k = 0; k < s->mod_len; k++)
            CHECK(!is_plan_space(m[k]) && m[k] != '\n' && m[k] != '#');
        for (int j = 0; j < i; j++) /* no duplicate (module, offset) */
            CHECK(!(p->sites[j].offset == s->offset &&
                    strcmp(ht_plan_site_module(p, j), m) == 0));
    }
}

static int same_plan(const struct ht_plan *a, const struct ht_plan *b)
{
    if (a->valid != b->valid || a->has_threshold != b->has_threshold ||
        a->threshold != b->threshold || a->heap_large != b->heap_large ||
        a->heap_small != b->heap_small || a->static_ != b->static_ ||
        a->arena != b->arena || a->arena_bytes != b->arena_bytes || a->layout != b->layout ||
        a->fork_safe != b->fork_safe || a->nstatics != b->nstatics ||
        a->nsites != b->nsites || a->err_line != b->err_line ||
        strcmp(a->error, b->error) != 0)
        return 0;
    for (int i = 0; i < HT_POOL_N; i++)
        if (a->pool_pages[i] != b->pool_pages[i])
            return 0;
    for (int i = 0; i < a->nstatics; i++)
        if (a->statics[i].backing != b->statics[i].backing ||
            strcmp(ht_plan_static_module(a, i), ht_plan_static_module(b, i)) != 0)
            return 0;
    for (int i = 0; i < a->nsites; i++) {
        if (a->sites[i].offset != b->sites[i].offset ||
            a->sites[i].backing != b->sites[i].backing ||
            strcmp(ht_plan_site_module(a, i), ht_plan_site_module(b, i)) != 0)
            return 0;
    }
    return 1;
}

static void fuzz_plan(const uint8_t *data, size_t size)
{
    /* An exact-size heap copy, so ASan sees any read past the end. */
    char *text = malloc(size ? size : 1);
    CHECK(text);
    memcpy(text, data, size);
    int rc = ht_plan_parse(&P1, text, size);
    check_plan_result(&P1, rc, size);

    /* Deterministic, and independent of the state a previous parse left. */
    memset(&P2, 0xa5, sizeof P2);
    int rc2 = ht_plan_parse(&P2, text, size);
    CHECK(rc2 == rc && same_plan(&P1, &P2));

    /* A final newline changes nothing (unless it makes the file too large, or
     * the text has a NUL byte: a line's number depends on where it ends). */
    if (size + 1 <= HT_PLAN_MAX_BYTES && !memchr(text, 0, size)) {
        char *t2 = malloc(size + 1);
        CHECK(t2);
        memcpy(t2, text, size);
        t2[size] = '\n';
        rc2 = ht_plan_parse(&P2, t2, size + 1);
        CHECK(rc2 == rc && same_plan(&P1, &P2));
        free(t2);
    }
    free(text);
}

/* ---- numbers ---- */

/* Reference: strict unsigned parse with 128-bit accumulation. */
static int ref_parse_u64(const char *s, size_t n, int base, uint64_t *out)
{
    size_t i = 0;
    unsigned __int128 v = 0;
    if (base == 16 && n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        i = 2;
    if (i == n)
        return -1;
    for (; i < n; i++) {
        int d;
        if (s[i] >= '0' && s[i] <= '9')
            d = s[i] - '0';
        else if (base == 16 && s[i] >= 'a' && s[i] <= 'f')
            d = s[i] - 'a' + 10;
        else if (base == 16 && s[i] >= 'A' && s[i] <= 'F')
            d = s[i] - 'A' + 10;
        else
            return -1;
        v = v * (unsigned)base + (unsigned)d;
        if (v > UINT64_MAX)
            return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static void fuzz_numbers(const uint8_t *data, size_t size)
{
    /* The whole input, and every prefix of the first 24 bytes (numbers are short). */
    size_t lens[26];
    int nl = 0;
    lens[nl++] = size;
    for (size_t k = 0; k <= size && k <= 24; k++)
        lens[nl++] = k;
    for (int l = 0; l < nl && l < 26; l++) {
        for (int base = 10; base <= 16; base += 6) {
            uint64_t got = 0xdeadbeef, want = 0xfeedface;
            char *s = malloc(lens[l] ? lens[l] : 1);
            CHECK(s);
            memcpy(s, data, lens[l]);
            int r = ht_parse_u64(s, lens[l], base, &got);
            int rr = ref_parse_u64(s, lens[l], base, &want);
            CHECK(r == rr);
            if (r == 0) {
                CHECK(got == want);
                /* Round trip through the formatters. */
                char buf[32];
                uint64_t back;
                if (base == 10) {
                    size_t fl = ht_fmt_u64(buf, got);
                    CHECK(fl == strlen(buf) && ht_parse_u64(buf, fl, 10, &back) == 0 && back == got);
                } else {
                    size_t fl = ht_fmt_hex(buf, got);
                    CHECK(fl == strlen(buf) && ht_parse_u64(buf, fl, 16, &back) == 0 && back == got);
                }
            } else {
                CHECK(got == 0xdeadbeef); /* untouched on error */
            }
            free(s);
        }
    }
}

/* ---- path templates ---- */

static size_t ref_expand(const char *t, long pid, char *out)
{
    size_t n = 0;
    char num[32];
    for (const char *s = t; *s; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            int k = snprintf(num, sizeof num, "%ld", pid);
            memcpy(out + n, num, (size_t)k);
            n += (size_t)k;
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            out[n++] = '%';
            s++;
        } else {
            out[n++] = *s;
        }
    }
    out[n] = 0;
    return n;
}

static void fuzz_paths(const uint8_t *data, size_t size)
{
    static const long pids[] = {0, 1, 1234567, -42, 2147483647L, -9223372036854775807L - 1};
    char *tmpl = malloc(size + 1);
    CHECK(tmpl);
    memcpy(tmpl, data, size);
    tmpl[size] = 0;
    size_t tl = strlen(tmpl);
    /* Worst case: every 2 bytes become a 20-character pid. */
    char *want = malloc(tl * 11 + 32);
    CHECK(want);
    int differs = 0;
    for (unsigned k = 0; k < sizeof pids / sizeof pids[0]; k++) {
        size_t wl = ref_expand(tmpl, pids[k], want);
        size_t caps[] = {1, 2, wl, wl + 1, wl + 2, 4096};
        for (unsigned c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            size_t cap = caps[c];
            if (cap == 0)
                continue;
            char *out = malloc(cap); /* exact size: ASan catches overruns */
            CHECK(out);
            long r = ht_expand_path(tmpl, pids[k], out, cap);
            if (wl < cap) {
                CHECK(r == (long)wl && strcmp(out, want) == 0);
            } else {
                CHECK(r == -1);
                CHECK(strlen(out) == cap - 1 && memcmp(out, want, cap - 1) == 0);
            }
            free(out);
        }
        if (k > 0) {
            char *prev = malloc(tl * 11 + 32);
            CHECK(prev);
            ref_expand(tmpl, pids[k - 1], prev);
            differs |= strcmp(prev, want) != 0;
            free(prev);
        }
    }
    /* has_pid <=> the pid shows up in the expansion. */
    CHECK(ht_path_has_pid(tmpl) == differs);
    free(want);
    free(tmpl);
}

/* ---- JSON strings ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reference UTF-8 check, written from the code-point definition (independent of
 * fmt.c): the length of the well-formed sequence at j[i..n), 0 if none. */
static size_t ref_utf8(const unsigned char *j, size_t i, size_t n)
{
    unsigned c = j[i], len, cp;
    if (c >= 0xf0 && c < 0xf8) { len = 4; cp = c & 0x07; }
    else if (c >= 0xe0) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xc0) { len = 2; cp = c & 0x1f; }
    else return 0;
    if (c >= 0xf8 || i + len > n)
        return 0;
    for (unsigned k = 1; k < len; k++) {
        if ((j[i + k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (j[i + k] & 0x3f);
    }
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Decodes a JSON string literal as the summary writer produces it; returns the
 * decoded length or -1 when it is not a well-formed literal or not valid UTF-8.
 * \u0080..\u00ff stand for single bytes that were not UTF-8 (the writer's rule). */
static long json_decode(const char *j, size_t n, char *out)
{
    size_t o = 0;
    if (n < 2 || j[0] != '"' || j[n - 1] != '"')
        return -1;
    for (size_t i = 1; i < n - 1; i++) {
        unsigned char c = (unsigned char)j[i];
        if (c < 0x20 || c == 0x7f)
            return -1; /* must be escaped */
        if (c == '"')
            return -1; /* unescaped quote inside */
        if (c >= 0x80) {
            size_t len = ref_utf8((const unsigned char *)j, i, n - 1);
            if (len == 0)
                return -1; /* raw bytes must be well-formed UTF-8 */
            memcpy(out + o, j + i, len);
            o += len;
            i += len - 1;
            continue;
        }
        if (c != '\\') {
            out[o++] = (char)c;
            continue;
        }
        if (++i >= n - 1)
            return -1;
        switch (j[i]) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'u': {
            if (i + 4 >= n - 1)
                return -1;
            int v = 0;
            for (int k = 1; k <= 4; k++) {
                int h = hexval(j[i + k]);
                if (h < 0)
                    return -1;
                v = v * 16 + h;
            }
            if (v > 0xff)
                return -1; /* the writer escapes single bytes only */
            out[o++] = (char)v;
            i += 4;
            break;
        }
        default:
            return -1;
        }
    }
    return (long)o;
}

static void fuzz_json(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    CHECK(s);
    memcpy(s, data, size);
    s[size] = 0;
    size_t sl = strlen(s);
    size_t cap = sl * 6 + 3;
    char *mem = malloc(cap);
    char *dec = malloc(sl + 1);
    CHECK(mem && dec);
    struct ht_buf b;
    hb_init(&b, mem, cap);
    hb_json_str(&b, s);
    CHECK(!b.trunc && b.len == strlen(mem));
    long dl = json_decode(mem, b.len, dec);
    CHECK(dl == (long)sl && memcmp(dec, s, sl) == 0);

    /* Truncation: a small buffer never overflows and stays NUL-terminated. */
    size_t small = size % 17 + 1;
    char *sm = malloc(small);
    CHECK(sm);
    hb_init(&b, sm, small);
    hb_json_str(&b, s);
    CHECK(b.len <= small - 1 && sm[b.len] == 0);
    CHECK(b.trunc == (small - 1 < strlen(mem)));
    CHECK(memcmp(sm, mem, b.len) == 0);
    free(sm);
    free(mem);
    free(dec);
    free(s);
}

/* ---- errno names ---- */

static void fuzz_errno(const uint8_t *data, size_t size)
{
    int e = 0;
    char buf[24];
    if (size >= 4)
        memcpy(&e, data, 4);
    const char *n = ht_errno_name(e, buf);
    CHECK(n && n[0] != 0 && strlen(n) < sizeof buf);
    if (n == buf) {
        char want[32];
        snprintf(want, sizeof want, "errno-%d", e);
        CHECK(strcmp(n, want) == 0);
    } else {
        CHECK(n[0] == 'E');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_plan(data, size);
    fuzz_numbers(data, size);
    fuzz_paths(data, size);
    fuzz_json(data, size);
    fuzz_errno(data, size);
    return 0;
}
