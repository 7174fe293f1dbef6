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
        {"hugetune-plan 1\nstatic hugetlb-2m\n", 2, "not supported"},
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

static void test_backing_names(void)
{
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
    test_backing_names();
    return unit_done("unit_plan");
}
