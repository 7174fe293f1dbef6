/* unit_plan.c - plan parser: the contract example, every directive, and
 * malformed inputs (each must invalidate the whole plan). */
#include "plan.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static struct ht_plan P; /* large: keep it off the stack */

static int parse(const char *s) { return ht_plan_parse(&P, s, strlen(s)); }

static void test_example(void)
{
    const char *txt = "hugetune-plan 1\n"
                      "threshold 131072\n"
                      "heap-large hugetlb-2m\n"
                      "static thp-2m\n"
                      "heap-small thp-2m\n"
                      "site /usr/bin/prog 0x1a2b3 hugetlb-2m\n";
    CHECK(parse(txt) == 0);
    CHECK(P.valid);
    CHECK(P.has_threshold && P.threshold == 131072);
    CHECK(P.heap_large == HT_B_HUGETLB2M);
    CHECK(P.static_ == HT_B_THP2M);
    CHECK(P.heap_small == HT_B_THP2M);
    CHECK(P.nsites == 1);
    CHECK_STR(ht_plan_site_module(&P, 0), "/usr/bin/prog");
    CHECK(P.sites[0].offset == 0x1a2b3);
    CHECK(P.sites[0].backing == HT_B_HUGETLB2M);
    CHECK(P.error[0] == 0);
}

static void test_comments_whitespace(void)
{
    const char *txt = "# leading comment\n"
                      "\n"
                      "   hugetune-plan\t1   # trailing\r\n"
                      "\t\n"
                      "heap-large 4k\r\n"
                      "site   lib.so   1f   thp-2m  \n"
                      "site /a/b 0X10 hugetlb-1g\n"
                      "site /a/b 0x11 4k"; /* no final newline */
    CHECK(parse(txt) == 0);
    CHECK(P.valid && !P.has_threshold);
    CHECK(P.heap_large == HT_B_4K);
    CHECK(P.heap_small == HT_B_NONE && P.static_ == HT_B_NONE);
    CHECK(P.nsites == 3);
    CHECK_STR(ht_plan_site_module(&P, 0), "lib.so");
    CHECK(P.sites[0].offset == 0x1f && P.sites[0].backing == HT_B_THP2M);
    CHECK_STR(ht_plan_site_module(&P, 1), "/a/b");
    CHECK(P.sites[1].offset == 0x10 && P.sites[1].backing == HT_B_HUGETLB1G);
    CHECK(P.sites[2].offset == 0x11 && P.sites[2].backing == HT_B_4K);
}

static void test_minimal(void)
{
    CHECK(parse("hugetune-plan 1") == 0 && P.valid);
    CHECK(P.heap_large == HT_B_NONE && P.nsites == 0);
    CHECK(parse("hugetune-plan 1\nstatic 4k\nheap-small 4k\n") == 0 && P.valid);
    CHECK(P.static_ == HT_B_4K && P.heap_small == HT_B_4K);
}

struct bad {
    const char *text;
    int line;
    const char *reason; /* substring of the error */
};

static void test_malformed(void)
{
    static const struct bad cases[] = {
        {"", 0, "missing"},
        {"# only a comment\n\n", 0, "missing"},
        {"heap-large 4k\nhugetune-plan 1\n", 1, "first directive"},
        {"hugetune-plan 2\n", 1, "version"},
        {"hugetune-plan\n", 1, "expected"},
        {"hugetune-plan 1 x\n", 1, "expected"},
        {"hugetune-plan 1\nhugetune-plan 1\n", 2, "duplicate"},
        {"hugetune-plan 1\nthreshold\n", 2, "expected"},
        {"hugetune-plan 1\nthreshold 0\n", 2, "bad threshold"},
        {"hugetune-plan 1\nthreshold 12k\n", 2, "bad threshold"},
        {"hugetune-plan 1\nthreshold 0x100\n", 2, "bad threshold"},
        {"hugetune-plan 1\nthreshold 1\nthreshold 2\n", 3, "duplicate"},
        {"hugetune-plan 1\nheap-large\n", 2, "expected"},
        {"hugetune-plan 1\nheap-large huge\n", 2, "unknown backing"},
        {"hugetune-plan 1\nheap-large 4k 4k\n", 2, "expected"},
        {"hugetune-plan 1\nheap-large 4k\nheap-large thp-2m\n", 3, "duplicate"},
        {"hugetune-plan 1\nstatic none\n", 2, "unknown backing"},
        {"hugetune-plan 1\nstatic hugetlb-1g /lib\nstatic hugetlb-2m /lib\n", 3, "duplicate static"},
        {"hugetune-plan 1\nstatic thp-2m\nstatic 4k\n", 3, "duplicate static"},
        {"hugetune-plan 1\nstatic thp-2m /a\nstatic 4k /a\n", 3, "duplicate static"},
        {"hugetune-plan 1\nstatic thp-2m /a b\n", 2, "expected"},
        {"hugetune-plan 1\nheap-small arena\n", 2, "expected"},
        {"hugetune-plan 1\nheap-small arena 4k\n", 2, "arena backing"},
        {"hugetune-plan 1\nheap-small arena thp-2m 1000\n", 2, "bad arena size"},
        {"hugetune-plan 1\nheap-small arena thp-2m 2M\n", 2, "bad arena size"},
        {"hugetune-plan 1\nheap-small thp-2m\nheap-small arena thp-2m\n", 3, "duplicate"},
        {"hugetune-plan 1\nheap-small hugetlb-2m\n", 2, "not supported"},
        {"hugetune-plan 1\nheap-small arena hugetlb-1g\n", 2, "arena backing"},
        {"hugetune-plan 1\nlayout\n", 2, "expected"},
        {"hugetune-plan 1\nlayout round-down\n", 2, "unknown layout"},
        {"hugetune-plan 1\nlayout head-tail\nlayout round-up\n", 3, "duplicate"},
        {"hugetune-plan 1\nfork-safe yes\n", 2, "unknown fork-safe"},
        {"hugetune-plan 1\nfork-safe copy\nfork-safe off\n", 3, "duplicate"},
        {"hugetune-plan 1\nmapped 4k\n", 2, "unknown mapped mode"},
        {"hugetune-plan 1\nmapped thp\nmapped hugetlb\n", 3, "duplicate mapped"},
        {"hugetune-plan 1\njvm\n", 2, "expected 'jvm"},
        {"hugetune-plan 1\njvm 4k\n", 2, "jvm backing"},
        {"hugetune-plan 1\njvm hugetlb-1g\n", 2, "jvm backing"},
        {"hugetune-plan 1\njvm thp\n", 2, "jvm backing"},
        {"hugetune-plan 1\njvm thp-2m\njvm hugetlb-2m\n", 3, "duplicate jvm"},
        {"hugetune-plan 1\npool hugetlb-2m\n", 2, "expected"},
        {"hugetune-plan 1\npool thp-2m 4\n", 2, "pool backing"},
        {"hugetune-plan 1\npool hugetlb-2m 0\n", 2, "bad pool size"},
        {"hugetune-plan 1\npool hugetlb-2m 1048577\n", 2, "bad pool size"},
        {"hugetune-plan 1\npool hugetlb-1g 1\npool hugetlb-1g 2\n", 3, "duplicate pool"},
        {"hugetune-plan 1\nheap-large thp-3m\n", 2, "unknown backing"},
        {"hugetune-plan 1\nheap-small hugetlb-1g\n", 2, "not supported"},
        {"hugetune-plan 1\nstack thp-2m\n", 2, "unknown directive"},
        {"hugetune-plan 1\nsite /x 0x10\n", 2, "expected"},
        {"hugetune-plan 1\nsite /x zz 4k\n", 2, "bad site offset"},
        {"hugetune-plan 1\nsite /x 0x10 2m\n", 2, "unknown backing"},
        {"hugetune-plan 1\nsite /x 0x10 4k\nsite /x 0x10 thp-2m\n", 3, "duplicate site"},
        {"hugetune-plan 1\nHEAP-LARGE 4k\n", 2, "unknown directive"},
        {"hugetune-plan 1\nheap-large 4k extra fields here and more\n", 2, "too many"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse(cases[i].text);
        CHECK(rc == -1);
        CHECK(!P.valid);
        /* the whole plan is dropped */
        CHECK(P.heap_large == HT_B_NONE && P.nsites == 0 && !P.has_threshold);
        CHECK(P.nstatics == 0 && P.arena == HT_B_NONE && P.pool_pages[0] == 0 && P.pool_pages[1] == 0);
        CHECK(P.layout == HT_LAYOUT_HEAD_TAIL && P.fork_safe == HT_FORK_COPY && P.jvm == HT_B_NONE);
        CHECK(P.err_line == cases[i].line);
        if (!strstr(P.error, cases[i].reason)) {
            fprintf(stderr, "case %u: error [%s] lacks [%s]\n", i, P.error, cases[i].reason);
            CHECK(0);
        }
    }
    /* a NUL byte inside the text */
    const char nul[] = "hugetune-plan 1\nheap-large 4k\0x\n";
    CHECK(ht_plan_parse(&P, nul, sizeof nul - 1) == -1 && P.err_line == 2);
    /* error quotes the line */
    CHECK(parse("hugetune-plan 1\n\nbogus line\n") == -1);
    CHECK(strstr(P.error, "plan line 3") != NULL);
    CHECK(strstr(P.error, "bogus line") != NULL);
}

static void test_limits(void)
{
    /* HT_PLAN_MAX_SITES sites are fine, one more is not */
    size_t cap = 64 * (HT_PLAN_MAX_SITES + 2) + 32;
    char *t = malloc(cap);
    size_t n = (size_t)sprintf(t, "hugetune-plan 1\n");
    for (int i = 0; i < HT_PLAN_MAX_SITES; i++)
        n += (size_t)sprintf(t + n, "site /m 0x%x 4k\n", i);
    CHECK(ht_plan_parse(&P, t, n) == 0 && P.nsites == HT_PLAN_MAX_SITES);
    n += (size_t)sprintf(t + n, "site /m 0xffff 4k\n");
    CHECK(ht_plan_parse(&P, t, n) == -1 && strstr(P.error, "too many sites"));
    free(t);

    /* module path pool exhaustion */
    size_t big = 40000;
    t = malloc(big + 64);
    n = (size_t)sprintf(t, "hugetune-plan 1\nsite /");
    memset(t + n, 'a', HT_PLAN_POOL);
    n += HT_PLAN_POOL;
    n += (size_t)sprintf(t + n, " 0x1 4k\n");
    CHECK(ht_plan_parse(&P, t, n) == -1 && strstr(P.error, "too long"));
    free(t);

    /* size limit */
    CHECK(ht_plan_parse(&P, "x", HT_PLAN_MAX_BYTES + 1) == -1);
    CHECK(strstr(P.error, "too large") != NULL);
}

static void test_new_directives(void)
{
    const char *txt = "hugetune-plan 1\n"
                      "layout round-up\n"
                      "fork-safe thp\n"
                      "mapped thp\n"
                      "pool hugetlb-2m 64\n"
                      "pool hugetlb-1g 2\n"
                      "heap-large thp-64k\n"
                      "heap-small arena hugetlb-2m 1073741825\n"
                      "static hugetlb-2m\n"
                      "static thp-2m /usr/lib/libfoo.so\n"
                      "site /p 0x10 thp-1m\n";
    CHECK(parse(txt) == 0 && P.valid);
    CHECK(P.layout == HT_LAYOUT_ROUND_UP && P.fork_safe == HT_FORK_THP && P.mapped_thp == 1);
    CHECK(P.pool_pages[HT_POOL_2M] == 64 && P.pool_pages[HT_POOL_1G] == 2);
    CHECK(P.heap_large == HT_B_THP64K);
    CHECK(P.arena == HT_B_HUGETLB2M && P.heap_small == HT_B_NONE);
    CHECK(P.arena_bytes == (1ull << 30) + (2ull << 20)); /* rounded up to 2 MB */
    CHECK(P.nstatics == 2 && P.static_ == HT_B_HUGETLB2M);
    CHECK_STR(ht_plan_static_module(&P, 0), "");
    CHECK_STR(ht_plan_static_module(&P, 1), "/usr/lib/libfoo.so");
    CHECK(P.statics[1].backing == HT_B_THP2M);
    CHECK(P.nsites == 1 && P.sites[0].backing == HT_B_THP1M);
    CHECK_STR(ht_plan_site_module(&P, 0), "/p");
    CHECK(parse("hugetune-plan 1\nheap-small arena thp-2m\nfork-safe off\nlayout head-tail\n") == 0);
    CHECK(P.arena == HT_B_THP2M && P.arena_bytes == HT_ARENA_DEFAULT_BYTES);
    CHECK(P.fork_safe == HT_FORK_OFF && P.layout == HT_LAYOUT_HEAD_TAIL);
    /* defaults */
    CHECK(parse("hugetune-plan 1\n") == 0);
    CHECK(P.layout == HT_LAYOUT_HEAD_TAIL && P.fork_safe == HT_FORK_COPY && P.arena == HT_B_NONE);
    CHECK(P.mapped_thp == 0 && P.jvm == HT_B_NONE);
    /* `jvm B`: the launcher's JAVA_TOOL_OPTIONS back the heap (docs/formats.md section 3) */
    CHECK(parse("hugetune-plan 1\nthreshold 131072\njvm thp-2m\n") == 0 && P.jvm == HT_B_THP2M);
    CHECK(parse("hugetune-plan 1\njvm hugetlb-2m # pool grown by the launcher\n") == 0 && P.jvm == HT_B_HUGETLB2M);
}

/* mTHP sizes for static data and heap-small (issue 23): the run's per-size
 * controls decide the folios, the plan names the size. */
static void test_mthp_categories(void)
{
    CHECK(parse("hugetune-plan 1\nstatic thp-64k\nstatic thp-16k /usr/lib/libfoo.so\nheap-small thp-64k\n") == 0);
    CHECK(P.valid && P.static_ == HT_B_THP64K && P.nstatics == 2);
    CHECK(P.statics[1].backing == HT_B_THP16K);
    CHECK(P.heap_small == HT_B_THP64K && P.arena == HT_B_NONE);
    CHECK(parse("hugetune-plan 1\nheap-small arena thp-1m 4194304\n") == 0);
    CHECK(P.arena == HT_B_THP1M && P.arena_bytes == (4u << 20) && P.heap_small == HT_B_NONE);
    CHECK(parse("hugetune-plan 1\nheap-small thp-128k\nheap-small arena thp-128k\n") == -1);
    CHECK(!P.valid && strstr(P.error, "duplicate"));
}

/* `static hugetlb-1g [MODULE]` (issue 23): the 1 GB layout for static data. */
static void test_static_1g(void)
{
    CHECK(parse("hugetune-plan 1\nstatic hugetlb-1g\nstatic hugetlb-1g /usr/lib/libbig.so\n") == 0);
    CHECK(P.valid && P.static_ == HT_B_HUGETLB1G && P.nstatics == 2);
    CHECK(P.statics[1].backing == HT_B_HUGETLB1G);
    CHECK_STR(ht_plan_static_module(&P, 1), "/usr/lib/libbig.so");
}

static void test_backing_names(void)
{
    static const char *const mthp[] = {"thp-16k", "thp-32k", "thp-64k", "thp-128k",
                                       "thp-256k", "thp-512k", "thp-1m"};
    for (int i = 0; i < 7; i++) {
        int b = ht_backing_parse(mthp[i], strlen(mthp[i]));
        CHECK(b == HT_B_THP16K + i);
        CHECK(ht_backing_is_thp(b) && ht_backing_is_mthp(b) && !ht_backing_is_hugetlb(b));
        CHECK(ht_backing_page(b) == (16ull << 10) << i);
        CHECK_STR(ht_backing_name(b), mthp[i]);
    }
    CHECK(ht_backing_page(HT_B_4K) == 4096 && ht_backing_page(HT_B_THP2M) == (2u << 20));
    CHECK(ht_backing_page(HT_B_HUGETLB2M) == (2u << 20) && ht_backing_page(HT_B_HUGETLB1G) == (1u << 30));
    CHECK(ht_backing_page(HT_B_NONE) == 0);
    CHECK(ht_backing_is_thp(HT_B_THP2M) && !ht_backing_is_mthp(HT_B_THP2M));
    CHECK(ht_backing_is_hugetlb(HT_B_HUGETLB1G) && !ht_backing_is_thp(HT_B_HUGETLB2M));
    CHECK_STR(ht_backing_name(HT_B_4K), "4k");
    CHECK_STR(ht_backing_name(HT_B_THP2M), "thp-2m");
    CHECK_STR(ht_backing_name(HT_B_HUGETLB2M), "hugetlb-2m");
    CHECK_STR(ht_backing_name(HT_B_HUGETLB1G), "hugetlb-1g");
    CHECK(ht_backing_parse("thp-2m", 6) == HT_B_THP2M);
    CHECK(ht_backing_parse("thp-2", 5) == -1);
    CHECK(ht_backing_parse("none", 4) == -1);
}

int main(void)
{
    test_example();
    test_comments_whitespace();
    test_minimal();
    test_malformed();
    test_limits();
    test_new_directives();
    test_mthp_categories();
    test_static_1g();
    test_backing_names();
    return unit_done("unit_plan");
}
