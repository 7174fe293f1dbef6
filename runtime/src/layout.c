/* layout.c - page layout of owned blocks (see layout.h). Pure. */
#include "layout.h"

#include "plan.h"

#include <string.h>

#define K4 4096ull
#define M2 (2ull << 20)
#define G1 (1ull << 30)

static uint64_t up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
static uint64_t down(uint64_t v, uint64_t a) { return v & ~(a - 1); }

static void add(struct ht_layout *l, uint64_t len, int b)
{
    if (len == 0)
        return;
    if (l->nseg > 0 && l->seg[l->nseg - 1].backing == b) {
        l->seg[l->nseg - 1].len += len;
        return;
    }
    l->seg[l->nseg].len = len;
    l->seg[l->nseg].backing = b;
    l->nseg++;
}

int ht_layout_append(struct ht_layout *l, uint64_t len, int b)
{
    if (len && l->nseg == HT_LAYOUT_MAX_SEGS && l->seg[l->nseg - 1].backing != b)
        return -1;
    add(l, len, b);
    return 0;
}

int ht_layout_plan(struct ht_layout *l, uint64_t size, int backing, int mode, uint64_t align)
{
    memset(l, 0, sizeof *l);
    if (size > HT_LAYOUT_MAX_SIZE || backing <= HT_B_NONE || backing >= HT_B_COUNT)
        return -1;
    if (align & (align - 1))
        return -1;
    if (align > (G1 << 10))
        return -1;
    if (size == 0)
        size = 1;
    l->size = size;
    l->align = align > M2 ? align : M2;
    if (backing == HT_B_4K) {
        add(l, up(size, K4), HT_B_4K);
        return 0;
    }
    uint64_t rest = size;
    if (backing == HT_B_HUGETLB1G) {
        uint64_t g = down(rest, G1);
        add(l, g, HT_B_HUGETLB1G);
        rest -= g;
        if (g && l->align < G1)
            l->align = G1;
        backing = HT_B_HUGETLB2M; /* the rest on 2 MB pages */
    }
    uint64_t pg = ht_backing_page(backing);
    uint64_t h = down(rest, pg);
    rest -= h;
    if (mode == HT_LAYOUT_ROUND_UP && rest) {
        h += pg;
        rest = 0;
    }
    add(l, h, backing);
    add(l, up(rest, K4), HT_B_4K);
    return 0;
}

uint64_t ht_layout_total(const struct ht_layout *l)
{
    uint64_t t = 0;
    for (int i = 0; i < l->nseg; i++)
        t += l->seg[i].len;
    return t;
}

uint64_t ht_layout_head_end(const struct ht_layout *l)
{
    uint64_t t = ht_layout_total(l);
    if (l->nseg > 0 && l->seg[l->nseg - 1].backing == HT_B_4K)
        t -= l->seg[l->nseg - 1].len;
    return t;
}

uint64_t ht_layout_bytes(const struct ht_layout *l, int backing)
{
    uint64_t t = 0;
    for (int i = 0; i < l->nseg; i++)
        if (l->seg[i].backing == backing)
            t += l->seg[i].len;
    return t;
}

uint64_t ht_layout_seg_off(const struct ht_layout *l, int i)
{
    uint64_t o = 0;
    for (int k = 0; k < i && k < l->nseg; k++)
        o += l->seg[k].len;
    return o;
}

void ht_layout_normalize(struct ht_layout *l)
{
    struct ht_layout n = *l;
    n.nseg = 0;
    for (int i = 0; i < l->nseg; i++)
        add(&n, l->seg[i].len, l->seg[i].backing);
    *l = n;
}

void ht_layout_set_backing(struct ht_layout *l, int i, int to)
{
    if (i < 0 || i >= l->nseg)
        return;
    l->seg[i].backing = to;
    ht_layout_normalize(l);
}

uint64_t ht_layout_shrink(struct ht_layout *l, uint64_t n)
{
    uint64_t off = 0;
    if (n == 0)
        n = 1;
    struct ht_layout r = *l;
    r.nseg = 0;
    for (int i = 0; i < l->nseg; i++) {
        const struct ht_seg *s = &l->seg[i];
        if (n <= off)
            break;
        uint64_t keep = s->len;
        if (n < off + s->len) {
            uint64_t pg = ht_backing_page(s->backing);
            keep = up(n - off, pg);
            if (keep > s->len)
                keep = s->len;
        }
        add(&r, keep, s->backing);
        off += s->len;
    }
    r.size = n;
    *l = r;
    return ht_layout_total(l);
}

int ht_layout_extend(const struct ht_layout *old, const struct ht_layout *want,
                     struct ht_layout *out, uint64_t *from, uint64_t *to)
{
    uint64_t oh = ht_layout_head_end(old);
    uint64_t wh = ht_layout_head_end(want);
    if (wh < oh)
        return -1;
    struct ht_layout r;
    memset(&r, 0, sizeof r);
    r.size = want->size;
    r.align = old->align;
    /* Old head, unchanged. */
    uint64_t off = 0;
    for (int i = 0; i < old->nseg && off < oh; i++) {
        add(&r, old->seg[i].len, old->seg[i].backing);
        off += old->seg[i].len;
    }
    /* Pieces of want's head in [oh, wh). */
    off = 0;
    for (int i = 0; i < want->nseg; i++) {
        const struct ht_seg *s = &want->seg[i];
        uint64_t a = off, b = off + s->len;
        off = b;
        if (s->backing == HT_B_4K && b == ht_layout_total(want))
            break; /* the tail */
        if (b <= oh)
            continue;
        if (a < oh)
            a = oh;
        uint64_t pg = ht_backing_page(s->backing);
        if (a % pg || (b - a) % pg)
            return -1;
        if (r.nseg == HT_LAYOUT_MAX_SEGS &&
            r.seg[r.nseg - 1].backing != s->backing)
            return -1;
        add(&r, b - a, s->backing);
    }
    /* want's tail. */
    uint64_t tail = ht_layout_total(want) - wh;
    if (tail) {
        if (r.nseg == HT_LAYOUT_MAX_SEGS && r.seg[r.nseg - 1].backing != HT_B_4K)
            return -1;
        add(&r, tail, HT_B_4K);
    }
    if (r.align < want->align)
        return -1; /* a new 1 GB page needs a 1 GB aligned start */
    *out = r;
    *from = oh;
    *to = wh;
    return 0;
}
