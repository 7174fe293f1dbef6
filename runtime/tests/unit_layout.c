/* unit_layout.c - page layouts of owned blocks: head + tail, round-up, 1 GB
 * heads, mTHP, alignment, fallbacks, shrinking and growing in place. */
#include "layout.h"
#include "plan.h"
#include "unit.h"

#define K4 4096ull
#define M2 (2ull << 20)
#define G1 (1ull << 30)

static struct ht_layout L;

static int seg_is(const struct ht_layout *l, int i, uint64_t len, int b)
{
    return i < l->nseg && l->seg[i].len == len && l->seg[i].backing == b;
}

static void test_head_tail(void)
{
    /* The "2 MB + 1 byte" trap: one huge page and one 4 KB page, nothing zeroed for nothing. */
    CHECK(ht_layout_plan(&L, M2 + 1, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(L.nseg == 2 && seg_is(&L, 0, M2, HT_B_HUGETLB2M) && seg_is(&L, 1, K4, HT_B_4K));
    CHECK(ht_layout_total(&L) == M2 + K4 && ht_layout_head_end(&L) == M2 && L.align == M2);
    CHECK(ht_layout_seg_off(&L, 1) == M2);
    CHECK(ht_layout_plan(&L, 8 * M2 / 2 + 1, HT_B_THP2M, HT_LAYOUT_HEAD_TAIL, 0) == 0); /* 8 MiB + 1 */
    CHECK(L.nseg == 2 && seg_is(&L, 0, 4 * M2, HT_B_THP2M) && seg_is(&L, 1, K4, HT_B_4K));
    CHECK(ht_layout_bytes(&L, HT_B_THP2M) == 4 * M2 && ht_layout_bytes(&L, HT_B_4K) == K4);
    /* exact multiple: no tail */
    CHECK(ht_layout_plan(&L, 3 * M2, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(L.nseg == 1 && seg_is(&L, 0, 3 * M2, HT_B_HUGETLB2M) && ht_layout_head_end(&L) == 3 * M2);
    /* below one huge page: owned, all on 4 KB pages */
    CHECK(ht_layout_plan(&L, 1 << 20, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(L.nseg == 1 && seg_is(&L, 0, 1 << 20, HT_B_4K) && ht_layout_head_end(&L) == 0);
    CHECK(ht_layout_plan(&L, 131073, HT_B_THP2M, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(seg_is(&L, 0, 135168, HT_B_4K));
    /* 4k and size 0 */
    CHECK(ht_layout_plan(&L, 5000, HT_B_4K, HT_LAYOUT_HEAD_TAIL, 0) == 0 && seg_is(&L, 0, 8192, HT_B_4K));
    CHECK(ht_layout_plan(&L, 0, HT_B_4K, HT_LAYOUT_ROUND_UP, 0) == 0 && seg_is(&L, 0, K4, HT_B_4K) && L.size == 1);
}

static void test_round_up(void)
{
    CHECK(ht_layout_plan(&L, M2 + 1, HT_B_HUGETLB2M, HT_LAYOUT_ROUND_UP, 0) == 0);
    CHECK(L.nseg == 1 && seg_is(&L, 0, 2 * M2, HT_B_HUGETLB2M));
    CHECK(ht_layout_plan(&L, 100, HT_B_THP2M, HT_LAYOUT_ROUND_UP, 0) == 0);
    CHECK(L.nseg == 1 && seg_is(&L, 0, M2, HT_B_THP2M));
    /* 1 GB: whole 1 GB pages, the rest rounded up to 2 MB pages */
    CHECK(ht_layout_plan(&L, G1 + 1, HT_B_HUGETLB1G, HT_LAYOUT_ROUND_UP, 0) == 0);
    CHECK(L.nseg == 2 && seg_is(&L, 0, G1, HT_B_HUGETLB1G) && seg_is(&L, 1, M2, HT_B_HUGETLB2M));
    CHECK(L.align == G1);
}

static void test_1g_and_mthp(void)
{
    CHECK(ht_layout_plan(&L, G1 + 3 * M2 + 5, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(L.nseg == 3 && seg_is(&L, 0, G1, HT_B_HUGETLB1G) && seg_is(&L, 1, 3 * M2, HT_B_HUGETLB2M) &&
          seg_is(&L, 2, K4, HT_B_4K));
    CHECK(L.align == G1 && ht_layout_head_end(&L) == G1 + 3 * M2);
    /* below 1 GB: 2 MB pages, 2 MB alignment is enough */
    CHECK(ht_layout_plan(&L, 500 * (1ull << 20), HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(L.nseg == 1 && seg_is(&L, 0, 250 * M2, HT_B_HUGETLB2M) && L.align == M2);
    /* mTHP 64 KB: head of 64 KB pages, 4 KB tail */
    CHECK(ht_layout_plan(&L, 200 << 10, HT_B_THP64K, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    CHECK(L.nseg == 2 && seg_is(&L, 0, 192 << 10, HT_B_THP64K) && seg_is(&L, 1, 8 << 10, HT_B_4K));
    CHECK(ht_layout_plan(&L, 200 << 10, HT_B_THP64K, HT_LAYOUT_ROUND_UP, 0) == 0);
    CHECK(L.nseg == 1 && seg_is(&L, 0, 256 << 10, HT_B_THP64K));
}

static void test_align_limits(void)
{
    CHECK(ht_layout_plan(&L, 10, HT_B_4K, HT_LAYOUT_HEAD_TAIL, 1ull << 30) == 0 && L.align == G1);
    CHECK(ht_layout_plan(&L, 10, HT_B_4K, HT_LAYOUT_HEAD_TAIL, 64) == 0 && L.align == M2);
    CHECK(ht_layout_plan(&L, 10, HT_B_4K, HT_LAYOUT_HEAD_TAIL, 3 << 21) == -1);
    CHECK(ht_layout_plan(&L, HT_LAYOUT_MAX_SIZE + 1, HT_B_4K, HT_LAYOUT_HEAD_TAIL, 0) == -1);
    CHECK(ht_layout_plan(&L, 10, HT_B_NONE, HT_LAYOUT_HEAD_TAIL, 0) == -1);
    CHECK(ht_layout_plan(&L, 10, HT_B_COUNT, HT_LAYOUT_HEAD_TAIL, 0) == -1);
}

static void test_fallback(void)
{
    CHECK(ht_layout_plan(&L, G1 + 3 * M2 + 5, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0) == 0);
    ht_layout_set_backing(&L, 0, HT_B_HUGETLB2M); /* 1 GB page refused: same bytes on 2 MB pages */
    CHECK(L.nseg == 2 && seg_is(&L, 0, G1 + 3 * M2, HT_B_HUGETLB2M) && seg_is(&L, 1, K4, HT_B_4K));
    ht_layout_set_backing(&L, 0, HT_B_4K); /* everything refused: one 4 KB range */
    CHECK(L.nseg == 1 && seg_is(&L, 0, G1 + 3 * M2 + K4, HT_B_4K) && ht_layout_head_end(&L) == 0);
    CHECK(ht_layout_total(&L) == G1 + 3 * M2 + K4);
    ht_layout_set_backing(&L, 5, HT_B_4K); /* out of range: ignored */
    CHECK(L.nseg == 1);
    struct ht_layout m = {0};
    CHECK(ht_layout_append(&m, M2, HT_B_HUGETLB2M) == 0 && ht_layout_append(&m, M2, HT_B_HUGETLB2M) == 0);
    CHECK(m.nseg == 1 && m.seg[0].len == 2 * M2);
    CHECK(ht_layout_append(&m, M2, HT_B_THP2M) == 0 && ht_layout_append(&m, M2, HT_B_4K) == 0 &&
          ht_layout_append(&m, M2, HT_B_HUGETLB2M) == 0 && m.nseg == 4);
    CHECK(ht_layout_append(&m, M2, HT_B_4K) == -1 && m.nseg == 4);
    CHECK(ht_layout_append(&m, M2, HT_B_HUGETLB2M) == 0 && m.seg[3].len == 2 * M2);
}

static void test_shrink(void)
{
    ht_layout_plan(&L, 8 * M2 / 2 + 1, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0); /* [8M][4K] */
    CHECK(ht_layout_shrink(&L, 8 * M2 / 2 + 100) == 4 * M2 + K4 && L.nseg == 2); /* still inside the tail */
    CHECK(ht_layout_shrink(&L, 3 * M2 / 2) == 2 * M2); /* 3 MiB: keeps the 2 huge pages holding it */
    CHECK(L.nseg == 1 && seg_is(&L, 0, 2 * M2, HT_B_HUGETLB2M) && L.size == 3 * M2 / 2);
    CHECK(ht_layout_shrink(&L, 10) == M2 && seg_is(&L, 0, M2, HT_B_HUGETLB2M));
    ht_layout_plan(&L, G1 + 3 * M2 + 5, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_shrink(&L, 100 << 20) == G1 && L.nseg == 1 && seg_is(&L, 0, G1, HT_B_HUGETLB1G));
    ht_layout_plan(&L, 1 << 20, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_shrink(&L, 5000) == 8192);
}

static void test_extend(void)
{
    struct ht_layout old, want, out;
    uint64_t from, to;
    /* 8 MiB + 1 -> 12 MiB: two more huge pages replace the tail */
    ht_layout_plan(&old, 4 * M2 + 1, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_plan(&want, 6 * M2, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == 0);
    CHECK(from == 4 * M2 && to == 6 * M2 && out.nseg == 1 && seg_is(&out, 0, 6 * M2, HT_B_HUGETLB2M));
    /* sub-huge -> head + tail */
    ht_layout_plan(&old, 1 << 20, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_plan(&want, 3 << 20, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == 0);
    CHECK(from == 0 && to == M2 && out.nseg == 2 && seg_is(&out, 0, M2, HT_B_HUGETLB2M) &&
          seg_is(&out, 1, 1 << 20, HT_B_4K));
    /* a head that fell back to THP keeps it; the new pages are planned hugetlb */
    ht_layout_plan(&old, 2 * M2 + 1, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_set_backing(&old, 0, HT_B_THP2M);
    ht_layout_plan(&want, 4 * M2, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == 0);
    CHECK(out.nseg == 2 && seg_is(&out, 0, 2 * M2, HT_B_THP2M) && seg_is(&out, 1, 2 * M2, HT_B_HUGETLB2M));
    /* only the tail grows */
    ht_layout_plan(&old, 2 * M2 + 1, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_plan(&want, 2 * M2 + 100000, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == 0);
    CHECK(from == to && to == 2 * M2 && seg_is(&out, 1, 102400, HT_B_4K));
    /* a new 1 GB page would start inside old 2 MB pages / need a 1 GB aligned start: no */
    ht_layout_plan(&old, 250 * M2, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_plan(&want, G1 + M2, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == -1);
    ht_layout_plan(&old, M2, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_plan(&want, G1, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == -1);
    /* shrinking is not an extension */
    ht_layout_plan(&old, 4 * M2, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    ht_layout_plan(&want, 2 * M2, HT_B_HUGETLB2M, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&old, &want, &out, &from, &to) == -1);
    /* too many segments */
    struct ht_layout four = {0};
    four.align = G1;
    ht_layout_append(&four, G1, HT_B_HUGETLB1G);
    ht_layout_append(&four, M2, HT_B_HUGETLB2M);
    ht_layout_append(&four, M2, HT_B_THP2M);
    ht_layout_append(&four, K4, HT_B_4K);
    ht_layout_plan(&want, G1 + 4 * M2, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&four, &want, &out, &from, &to) == 0 && out.nseg == 4);
    CHECK(seg_is(&out, 3, 2 * M2, HT_B_HUGETLB2M) && from == G1 + 2 * M2 && to == G1 + 4 * M2);
    ht_layout_plan(&want, G1 + 4 * M2 + 1, HT_B_HUGETLB1G, HT_LAYOUT_HEAD_TAIL, 0);
    CHECK(ht_layout_extend(&four, &want, &out, &from, &to) == -1);
}

int main(void)
{
    test_head_tail();
    test_round_up();
    test_1g_and_mthp();
    test_align_limits();
    test_fallback();
    test_shrink();
    test_extend();
    return unit_done("unit_layout");
}
