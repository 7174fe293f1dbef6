/* unit_inject.c - HUGETUNE_INJECT spec parser and the every-Nth rule. */
#include "inject.h"
#include "unit.h"

static struct ht_inject I;

int main(void)
{
    CHECK(ht_inject_parse(&I, NULL) == 0 && I.every[0] == 0 && I.every[1] == 0 && I.every[2] == 0);
    CHECK(ht_inject_parse(&I, "") == 0 && I.error[0] == 0);
    CHECK(ht_inject_parse(&I, "hugetlb:1") == 0 && I.every[HT_INJ_HUGETLB] == 1 && I.every[HT_INJ_THP] == 0);
    CHECK(ht_inject_parse(&I, "mmap:3,thp:2,hugetlb:7") == 0);
    CHECK(I.every[HT_INJ_MMAP] == 3 && I.every[HT_INJ_THP] == 2 && I.every[HT_INJ_HUGETLB] == 7);
    CHECK(ht_inject_parse(&I, "mremap:2,munmap:3,madvise:4") == 0);
    CHECK(I.every[HT_INJ_MREMAP] == 2 && I.every[HT_INJ_MUNMAP] == 3 && I.every[HT_INJ_MADVISE] == 4);
    CHECK(I.every[HT_INJ_MMAP] == 0 && I.every[HT_INJ_HUGETLB] == 0);
    static const char *const bad[] = {"hugetlb", "hugetlb:", "hugetlb:0", "hugetlb:x", "gpu:1",
                                      "hugetlb:1,hugetlb:2", "hugetlb:1,", ",thp:1", "thp:-1",
                                      "thp:99999999999", "mmap:1;thp:1", "mremap:1,mremap:1", "remap:1"};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ht_inject_parse(&I, bad[i]) == -1);
        for (int k = 0; k < HT_INJ_N; k++)
            CHECK(I.every[k] == 0); /* nothing injected */
        CHECK(strstr(I.error, "HUGETUNE_INJECT") != NULL);
    }
    CHECK(ht_inject_fires(1, 1) && ht_inject_fires(2, 1));
    CHECK(!ht_inject_fires(1, 2) && ht_inject_fires(2, 2) && !ht_inject_fires(3, 2));
    CHECK(!ht_inject_fires(5, 0));
    CHECK_STR(ht_inject_kind_name(HT_INJ_THP), "thp");
    CHECK_STR(ht_inject_kind_name(HT_INJ_MREMAP), "mremap");
    CHECK_STR(ht_inject_kind_name(HT_INJ_MADVISE), "madvise");
    CHECK(ht_inject_parse(&I, "uffd:1") == 0 && I.every[HT_INJ_UFFD] == 1);
    CHECK_STR(ht_inject_kind_name(HT_INJ_UFFD), "uffd");
    return unit_done("unit_inject");
}
