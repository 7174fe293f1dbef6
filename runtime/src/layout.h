/* layout.h - the page layout of an owned block (docs/formats.md section 3,
 * "Layout of owned blocks").
 *
 * Why a pure module: the layout is a contract with the model's page
 * resolution (which must predict exactly which bytes sit on which page size),
 * and every corner of it (sizes around page multiples, 1 GB heads, fallbacks,
 * shrinking and growing in place) is unit-tested without mapping anything.
 *
 * A layout is a list of segments in address order, each a whole number of
 * pages of one backing, starting at the block's (aligned) pointer:
 *
 *   head-tail: [floor(size/huge) huge pages][rest on 4 KB pages]
 *              hugetlb-1g: [1 GB pages][2 MB pages][4 KB pages]
 *   round-up:  [ceil(size/huge) huge pages]  (hugetlb-1g: [1 GB][ceil 2 MB])
 *
 * A segment's offset from the block start is a multiple of its page size. */
#ifndef HT_LAYOUT_H
#define HT_LAYOUT_H

#include <stdint.h>

#define HT_LAYOUT_MAX_SEGS 4

struct ht_seg {
    uint64_t len;
    int backing; /* HT_B_* (4k for the tail) */
};

struct ht_layout {
    uint64_t size;  /* requested bytes (0 is treated as 1) */
    uint64_t align; /* alignment of the block start: >= 2 MB, power of two */
    int nseg;
    struct ht_seg seg[HT_LAYOUT_MAX_SEGS];
};

/* Largest request the library owns (bigger ones go to the allocator). */
#define HT_LAYOUT_MAX_SIZE (1ull << 46)

/* Plans the layout of `size` bytes for `backing` (HT_B_*, not NONE) in mode
 * HT_LAYOUT_HEAD_TAIL / HT_LAYOUT_ROUND_UP, start aligned to at least
 * `align` (0 or a power of two). Returns 0, or -1 for a size above
 * HT_LAYOUT_MAX_SIZE, an alignment that is not a power of two or above 1 GB
 * times 2^10, or an unknown backing. */
int ht_layout_plan(struct ht_layout *l, uint64_t size, int backing, int mode, uint64_t align);

uint64_t ht_layout_total(const struct ht_layout *l);
/* Offset where the trailing 4 KB segment starts (= total when there is none). */
uint64_t ht_layout_head_end(const struct ht_layout *l);
/* Bytes of segments with this backing. */
uint64_t ht_layout_bytes(const struct ht_layout *l, int backing);
/* Offset of segment i. */
uint64_t ht_layout_seg_off(const struct ht_layout *l, int i);

/* Segment i got backing `to` instead (a fallback): sets it and merges
 * neighbours with equal backings. hugetlb-1g -> hugetlb-2m keeps the range
 * (2 MB divides 1 GB). */
void ht_layout_set_backing(struct ht_layout *l, int i, int to);
/* Appends len bytes of backing b (merged into the last segment when equal).
 * -1 when the layout already has HT_LAYOUT_MAX_SEGS segments. */
int ht_layout_append(struct ht_layout *l, uint64_t len, int b);
/* Merges adjacent segments of the same backing and drops empty ones. */
void ht_layout_normalize(struct ht_layout *l);

/* Shrinking in place to n bytes: every segment keeps the pages that still
 * hold part of [0, n); whole pages beyond are released. Returns the new total
 * (the bytes from there to the old total are to be unmapped). */
uint64_t ht_layout_shrink(struct ht_layout *l, uint64_t n);

/* Growing in place: `old` is the block now, `want` the layout planned for the
 * new size (same start). On success fills `out` with old's head segments,
 * then the pieces of want's head beyond old's head end, then want's 4 KB
 * tail, sets [*from, *to) to the new head range (from == to: only the tail
 * changes) and returns 0. Returns -1 when that is not an extension: want's
 * head ends before old's, a new piece would not start on a multiple of its
 * page size, or more than HT_LAYOUT_MAX_SEGS segments would result. */
int ht_layout_extend(const struct ht_layout *old, const struct ht_layout *want,
                     struct ht_layout *out, uint64_t *from, uint64_t *to);

#endif
