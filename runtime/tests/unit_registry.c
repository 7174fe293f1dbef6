/* unit_registry.c - owned-allocation hash table: insert/find/remove, probe
 * chains across deletions, full behaviour, growth by rehash. */
#include "registry.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

#define MB2 (2ull << 20)

static struct ht_reg_entry mk(uintptr_t p, size_t sz)
{
    struct ht_reg_entry e;
    memset(&e, 0, sizeof e);
    e.ptr = p;
    e.l.size = sz;
    e.l.nseg = 1;
    e.l.seg[0].len = (sz + MB2 - 1) & ~(MB2 - 1);
    e.l.seg[0].backing = 3;
    e.category = 1;
    return e;
}

static void test_basic(void)
{
    size_t cap = 16;
    void *mem = calloc(1, ht_reg_bytes(cap));
    struct ht_registry r;
    ht_reg_init(&r, mem, cap);
    CHECK(ht_reg_find(&r, 0x200000) == NULL);
    struct ht_reg_entry e = mk(0x7f0000200000ull, 100);
    CHECK(ht_reg_insert(&r, &e) == 0);
    CHECK(ht_reg_insert(&r, &e) == -2); /* duplicate */
    struct ht_reg_entry z = mk(0, 1);
    CHECK(ht_reg_insert(&r, &z) == -2); /* NULL key refused */
    struct ht_reg_entry *f = ht_reg_find(&r, 0x7f0000200000ull);
    CHECK(f && f->l.size == 100 && f->l.seg[0].len == MB2);
    CHECK(ht_reg_find(&r, 0x7f0000400000ull) == NULL);
    struct ht_reg_entry out;
    CHECK(ht_reg_remove(&r, 0x7f0000400000ull, &out) == -1);
    CHECK(ht_reg_remove(&r, 0x7f0000200000ull, &out) == 0 && out.l.size == 100);
    CHECK(r.count == 0);
    CHECK(ht_reg_find(&r, 0x7f0000200000ull) == NULL);
    free(mem);
}

static void test_full(void)
{
    size_t cap = 8; /* load factor 3/4: 6 entries fit */
    void *mem = calloc(1, ht_reg_bytes(cap));
    struct ht_registry r;
    ht_reg_init(&r, mem, cap);
    int i;
    for (i = 0; i < 6; i++) {
        struct ht_reg_entry e = mk((uintptr_t)(i + 1) * MB2, (size_t)i);
        CHECK(!ht_reg_full(&r));
        CHECK(ht_reg_insert(&r, &e) == 0);
    }
    CHECK(ht_reg_full(&r));
    struct ht_reg_entry e = mk(100 * MB2, 1);
    CHECK(ht_reg_insert(&r, &e) == -1);
    /* grow */
    void *mem2 = calloc(1, ht_reg_bytes(cap * 2));
    struct ht_registry r2;
    ht_reg_init(&r2, mem2, cap * 2);
    CHECK(ht_reg_rehash(&r, &r2) == 0);
    CHECK(r2.count == 6);
    CHECK(ht_reg_insert(&r2, &e) == 0);
    for (i = 0; i < 6; i++) {
        struct ht_reg_entry *f = ht_reg_find(&r2, (uintptr_t)(i + 1) * MB2);
        CHECK(f && f->l.size == (size_t)i);
    }
    /* rehash into a table that is too small fails */
    void *mem3 = calloc(1, ht_reg_bytes(4));
    struct ht_registry r3;
    ht_reg_init(&r3, mem3, 4);
    CHECK(ht_reg_rehash(&r2, &r3) == -1);
    free(mem);
    free(mem2);
    free(mem3);
}

/* Random insert/remove against a reference array, small table => long probe
 * runs with wrap-around, exercising backward-shift deletion. */
static void test_random(void)
{
    enum { N = 200, CAP = 256 };
    void *mem = calloc(1, ht_reg_bytes(CAP));
    struct ht_registry r;
    ht_reg_init(&r, mem, CAP);
    static uintptr_t keys[N];
    static int present[N];
    unsigned seed = 12345;
    for (int i = 0; i < N; i++) {
        /* clustered keys: many collide in the low bits of the hash input */
        keys[i] = 0x7f0000000000ull + (uintptr_t)i * MB2 * ((i % 3) ? 1 : 512);
    }
    int mismatches = 0;
    for (int it = 0; it < 20000; it++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % N);
        if (present[k]) {
            struct ht_reg_entry o;
            if (ht_reg_remove(&r, keys[k], &o) != 0 || o.ptr != keys[k] || o.l.size != (size_t)k)
                mismatches++;
            present[k] = 0;
        } else {
            struct ht_reg_entry e = mk(keys[k], (size_t)k);
            int rc = ht_reg_insert(&r, &e);
            if (rc == 0)
                present[k] = 1;
            else if (rc != -1)
                mismatches++;
        }
        if (it % 97 == 0) {
            size_t cnt = 0;
            for (int i = 0; i < N; i++) {
                struct ht_reg_entry *f = ht_reg_find(&r, keys[i]);
                if ((f != NULL) != present[i] || (f && f->l.size != (size_t)i))
                    mismatches++;
                cnt += present[i];
            }
            if (cnt != r.count)
                mismatches++;
        }
    }
    CHECK(mismatches == 0);
    free(mem);
}

int main(void)
{
    test_basic();
    test_full();
    test_random();
    return unit_done("unit_registry");
}
