/* unit_pool.c - page-run allocator of the huge-page pool: first fit, runs
 * across bitmap words, extension in place, dirty pages, exhaustion. */
#include "pool.h"
#include "unit.h"

#include <stdlib.h>

#define M2 (2ull << 20)

static void test_runs(void)
{
    struct ht_pool p;
    uint32_t n = 150;
    void *meta = calloc(1, ht_pool_meta_bytes(n));
    ht_pool_init(&p, 0x40000000, M2, n, meta);
    CHECK(ht_pool_take(&p, 0) == -1);
    CHECK(ht_pool_take(&p, 151) == -1);
    CHECK(ht_pool_take(&p, 10) == 0);
    CHECK(ht_pool_take(&p, 60) == 10); /* crosses a 64-bit word */
    CHECK(ht_pool_take(&p, 5) == 70);
    CHECK(p.used == 75 && p.peak == 75);
    CHECK(!ht_pool_dirty(&p, 0, 10));
    ht_pool_give(&p, 10, 60);
    CHECK(p.used == 15 && ht_pool_dirty(&p, 10, 60) && !ht_pool_dirty(&p, 0, 10));
    CHECK(ht_pool_take(&p, 30) == 10); /* first fit reuses the hole */
    CHECK(ht_pool_take(&p, 31) == 75); /* 40..69 is too short */
    CHECK(ht_pool_take(&p, 45) == -1); /* 74 free, the longest run 44 */
    CHECK(ht_pool_take(&p, 44) == 106 && ht_pool_take(&p, 30) == 40);
    CHECK(p.used == 150 && p.peak == 150);
    CHECK(ht_pool_take(&p, 1) == -1);
    CHECK(ht_pool_index(&p, 0x40000000 + 3 * M2 + 5) == 3);
    CHECK(ht_pool_index(&p, 0x40000000 - 1) == -1 && ht_pool_index(&p, 0x40000000 + 150 * M2) == -1);
    free(meta);
}

static void test_extend(void)
{
    struct ht_pool p;
    void *meta = calloc(1, ht_pool_meta_bytes(130));
    ht_pool_init(&p, 0x40000000, M2, 130, meta);
    CHECK(ht_pool_take(&p, 4) == 0);
    CHECK(ht_pool_take(&p, 2) == 4);
    CHECK(ht_pool_extend(&p, 0, 4, 5) == -1); /* page 4 is taken */
    ht_pool_give(&p, 4, 2);
    CHECK(ht_pool_extend(&p, 0, 4, 70) == 0 && p.used == 70);
    CHECK(ht_pool_extend(&p, 0, 70, 70) == 0);
    CHECK(ht_pool_extend(&p, 0, 70, 131) == -1);
    CHECK(ht_pool_extend(&p, 0, 70, 60) == -1);
    ht_pool_mark_dirty(&p, 100, 2);
    CHECK(ht_pool_dirty(&p, 99, 2) && !ht_pool_dirty(&p, 102, 20));
    free(meta);
}

/* Random takes/gives against a reference map. */
static void test_random(void)
{
    enum { N = 300 };
    struct ht_pool p;
    void *meta = calloc(1, ht_pool_meta_bytes(N));
    ht_pool_init(&p, 0x40000000, M2, N, meta);
    static int owner[N];
    struct run { long idx; uint32_t k; } runs[400];
    int nr = 0, bad = 0;
    unsigned s = 7;
    for (int it = 0; it < 20000; it++) {
        s = s * 1103515245u + 12345u;
        if (nr > 0 && ((s >> 9) & 1)) {
            int r = (int)((s >> 12) % (unsigned)nr);
            for (uint32_t j = 0; j < runs[r].k; j++)
                owner[runs[r].idx + j] = 0;
            ht_pool_give(&p, (uint32_t)runs[r].idx, runs[r].k);
            runs[r] = runs[--nr];
        } else if (nr < 400) {
            uint32_t k = 1 + (s >> 16) % 20;
            long idx = ht_pool_take(&p, k);
            if (idx < 0)
                continue;
            for (uint32_t j = 0; j < k; j++) {
                if (owner[idx + j])
                    bad++;
                owner[idx + j] = 1;
            }
            runs[nr].idx = idx;
            runs[nr].k = k;
            nr++;
        }
        uint32_t used = 0;
        for (int i = 0; i < N; i++)
            used += (uint32_t)owner[i];
        if (used != p.used)
            bad++;
    }
    CHECK(bad == 0);
    free(meta);
}

int main(void)
{
    test_runs();
    test_extend();
    test_random();
    return unit_done("unit_pool");
}
