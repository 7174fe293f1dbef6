//! One zone: the page array, free lists per order × migratetype (intrusive,
//! doubly linked, head = LIFO end), pageblocks with content counters, and the
//! buddy split and merge. Policies build on these primitives.

use crate::{Mt, MAX_ORDER, NR_MT, NR_ORDERS, PB_ORDER, PB_PAGES};

pub(crate) const NIL: u32 = u32::MAX;
const NONE: u8 = 0xff;

/// A zone as the recording's `# zone` lines (or the CLI) describe it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ZoneSpec {
    pub node: u32,
    pub name: String,
    pub start_pfn: u64,
    pub spanned: u64,
    pub present: u64,
    pub managed: u64,
}

impl ZoneSpec {
    /// An x86-64 layout of `pages` pages: DMA32 below 4 GiB (from 16 MiB up
    /// to 3 GiB, leaving the PCI hole) and Normal above, where that memory
    /// reaches beyond 3 GiB. DMA (first 16 MiB) is left out.
    pub fn x86(pages: u64) -> Vec<ZoneSpec> {
        let (dma32_start, dma32_end) = (4096u64, 3u64 << 18);
        let dma32 = pages.min(dma32_end - dma32_start);
        let mut v = vec![ZoneSpec {
            name: "DMA32".into(),
            start_pfn: dma32_start,
            spanned: dma32,
            present: dma32,
            managed: dma32,
            node: 0,
        }];
        if pages > dma32 {
            let n = pages - dma32;
            v.push(ZoneSpec {
                name: "Normal".into(),
                start_pfn: 1 << 20,
                spanned: n,
                present: n,
                managed: n,
                node: 0,
            });
        }
        v
    }

    /// A single Normal zone of `pages` pages, all managed.
    pub fn normal(pages: u64) -> ZoneSpec {
        ZoneSpec {
            node: 0,
            name: "Normal".into(),
            start_pfn: 0,
            spanned: pages,
            present: pages,
            managed: pages,
        }
    }
}

/// Pageblock metadata: the migratetype bits, the compaction skip bit, and
/// counters of free pages and of allocated pages per actual allocation type
/// (Illuminator's `page_block`). Tainting is derived from the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub mt: Mt,
    pub free: u16,
    /// Allocated pages by the allocation's own type: Unmovable, Movable, Reclaimable.
    pub used: [u16; 3],
    pub skip: bool,
}

impl Block {
    pub fn kernel(&self) -> u32 {
        self.used[0] as u32 + self.used[2] as u32
    }
    pub fn movable(&self) -> u32 {
        self.used[1] as u32
    }
    /// Holds both kernel (unmovable/reclaimable) and user (movable) pages:
    /// the thesis's tainted (composite) pageblock.
    pub fn tainted(&self) -> bool {
        self.kernel() > 0 && self.movable() > 0
    }
    /// pagetypeinfo's "mixed" block: some allocated page's type differs from
    /// the block's type (MIXED blocks count when they hold any page).
    pub fn mixed(&self) -> bool {
        (0..3).any(|t| self.used[t] > 0 && self.mt as usize != t)
    }
}

/// Direct compaction state: cached scanner positions and deferral.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompactState {
    pub migrate_pfn: u32,
    pub free_pfn: u32,
    pub defer_shift: u32,
    pub considered: u32,
    pub order_failed: u8,
}

pub struct Zone {
    /// Index in the simulator's zone array.
    pub id: usize,
    pub name: String,
    pub node: u32,
    pub start_pfn: u64,
    /// Simulated pages (a whole number of pageblocks).
    pub pages: u32,
    /// Pages held back from the start of the zone (spanned/present but not
    /// managed): allocated Unmovable once, never freed.
    pub reserved: u32,
    free_order: Vec<u8>,
    free_mt: Vec<u8>,
    next: Vec<u32>,
    prev: Vec<u32>,
    alloc_order: Vec<u8>,
    alloc_mt: Vec<u8>,
    alloc_slot: Vec<u32>,
    heads: [[u32; NR_MT]; NR_ORDERS],
    tails: [[u32; NR_MT]; NR_ORDERS],
    nr_free: [[u32; NR_MT]; NR_ORDERS],
    pub blocks: Vec<Block>,
    pub free_pages: u64,
    /// min, low, high (pages).
    pub wmark: [u64; 3],
    pub boost: u64,
    pub compact: CompactState,
    /// Illuminator: a merged free buddy of order ≥ pageblock_order that was
    /// MIXED goes back to MOVABLE.
    pub mixed_to_movable_on_merge: bool,
}

pub const WMARK_MIN: usize = 0;
pub const WMARK_LOW: usize = 1;
pub const WMARK_HIGH: usize = 2;

impl Zone {
    /// Builds the zone with every managed page free on the MOVABLE lists in
    /// maximal aligned blocks, as boot does (all pageblocks start MOVABLE).
    /// `min_free_pages` is this zone's share of `min_free_kbytes`.
    pub fn new(spec: &ZoneSpec, min_free_pages: u64) -> Zone {
        let span = spec
            .present
            .max(spec.managed)
            .min(u32::MAX as u64 - PB_PAGES as u64);
        let pages = (span.div_ceil(PB_PAGES as u64) * PB_PAGES as u64) as u32;
        let reserved = pages - spec.managed.min(pages as u64) as u32;
        let n = pages as usize;
        let nb = (pages / PB_PAGES) as usize;
        let mut z = Zone {
            id: 0,
            name: spec.name.clone(),
            node: spec.node,
            start_pfn: spec.start_pfn,
            pages,
            reserved,
            free_order: vec![NONE; n],
            free_mt: vec![NONE; n],
            next: vec![NIL; n],
            prev: vec![NIL; n],
            alloc_order: vec![NONE; n],
            alloc_mt: vec![NONE; n],
            alloc_slot: vec![NIL; n],
            heads: [[NIL; NR_MT]; NR_ORDERS],
            tails: [[NIL; NR_MT]; NR_ORDERS],
            nr_free: [[0; NR_MT]; NR_ORDERS],
            blocks: vec![
                Block {
                    mt: Mt::Movable,
                    free: 0,
                    used: [0; 3],
                    skip: false,
                };
                nb
            ],
            free_pages: 0,
            wmark: [0; 3],
            boost: 0,
            compact: CompactState::default(),
            mixed_to_movable_on_merge: false,
        };
        // Reserved pages: the kernel image, memmap and holes sit low in a zone.
        let mut pfn = 0u32;
        while pfn < reserved {
            let mut o = MAX_ORDER;
            while o > 0 && (!pfn.is_multiple_of(1 << o) || pfn + (1 << o) > reserved) {
                o -= 1;
            }
            z.mark_alloc(pfn, o, Mt::Unmovable, NIL);
            pfn += 1 << o;
        }
        for b in 0..(reserved / PB_PAGES) as usize {
            z.blocks[b].mt = Mt::Unmovable;
        }
        while pfn < pages {
            let mut o = MAX_ORDER;
            while o > 0 && (!pfn.is_multiple_of(1 << o) || pfn + (1 << o) > pages) {
                o -= 1;
            }
            z.add_free(pfn, o, Mt::Movable, true);
            pfn += 1 << o;
        }
        z.set_watermarks(min_free_pages);
        z.compact.free_pfn = z.last_block_start();
        z.compact.order_failed = MAX_ORDER + 1;
        z
    }

    /// min from `min_free_kbytes`; low and high add
    /// max(min/4, managed × watermark_scale_factor(10)/10000) each.
    pub fn set_watermarks(&mut self, min: u64) {
        let managed = (self.pages - self.reserved) as u64;
        let step = (min / 4).max(managed * 10 / 10000);
        self.wmark = [min, min + step, min + 2 * step];
    }

    pub fn managed(&self) -> u64 {
        (self.pages - self.reserved) as u64
    }

    pub fn nr_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub(crate) fn last_block_start(&self) -> u32 {
        self.pages - PB_PAGES
    }

    pub fn block_of(pfn: u32) -> usize {
        (pfn >> PB_ORDER) as usize
    }

    pub fn block_mt(&self, pfn: u32) -> Mt {
        self.blocks[Self::block_of(pfn)].mt
    }

    pub fn nr_free(&self, order: u8, mt: Mt) -> u32 {
        self.nr_free[order as usize][mt as usize]
    }

    pub fn list_head(&self, order: u8, mt: Mt) -> Option<u32> {
        let h = self.heads[order as usize][mt as usize];
        (h != NIL).then_some(h)
    }

    /// The list entry after `pfn` (same order and type), for bounded list scans.
    pub fn list_next(&self, pfn: u32) -> Option<u32> {
        let n = self.next[pfn as usize];
        (n != NIL).then_some(n)
    }

    /// Free blocks per order over all types (a buddyinfo line).
    pub fn buddyinfo(&self) -> [u64; NR_ORDERS] {
        let mut b = [0u64; NR_ORDERS];
        for (o, row) in self.nr_free.iter().enumerate() {
            b[o] = row.iter().map(|&c| c as u64).sum();
        }
        b
    }

    pub fn has_free_ge(&self, order: u8) -> bool {
        (order as usize..NR_ORDERS).any(|o| self.nr_free[o].iter().any(|&c| c > 0))
    }

    /// Free pages in buddies of order ≥ pageblock_order (`NR_FREE_PAGES_BLOCKS`).
    pub fn free_pages_blocks(&self) -> u64 {
        let b = self.buddyinfo();
        (PB_ORDER as usize..NR_ORDERS).map(|o| b[o] << o).sum()
    }

    /// `__zone_watermark_ok` without reserves: free pages after the request
    /// stay above the mark, and for order > 0 a free block of order ≥ order exists.
    pub fn watermark_ok(&self, order: u8, mark: u64) -> bool {
        let free = self.free_pages as i64 - (1i64 << order) + 1;
        if free <= mark as i64 {
            return false;
        }
        order == 0 || self.has_free_ge(order)
    }

    // ---- free lists ----

    fn link(&mut self, pfn: u32, order: u8, mt: Mt, tail: bool) {
        let (o, t) = (order as usize, mt as usize);
        let p = pfn as usize;
        if tail {
            let old = self.tails[o][t];
            self.prev[p] = old;
            self.next[p] = NIL;
            if old == NIL {
                self.heads[o][t] = pfn;
            } else {
                self.next[old as usize] = pfn;
            }
            self.tails[o][t] = pfn;
        } else {
            let old = self.heads[o][t];
            self.next[p] = old;
            self.prev[p] = NIL;
            if old == NIL {
                self.tails[o][t] = pfn;
            } else {
                self.prev[old as usize] = pfn;
            }
            self.heads[o][t] = pfn;
        }
        self.nr_free[o][t] += 1;
    }

    fn unlink(&mut self, pfn: u32, order: u8, mt: Mt) {
        let (o, t) = (order as usize, mt as usize);
        let p = pfn as usize;
        let (pr, nx) = (self.prev[p], self.next[p]);
        if pr == NIL {
            self.heads[o][t] = nx;
        } else {
            self.next[pr as usize] = nx;
        }
        if nx == NIL {
            self.tails[o][t] = pr;
        } else {
            self.prev[nx as usize] = pr;
        }
        self.nr_free[o][t] -= 1;
    }

    fn count_block_pages(
        &mut self,
        pfn: u32,
        order: u8,
        free: Option<bool>,
        used: Option<(usize, bool)>,
    ) {
        let mut left = 1u32 << order;
        let mut b = Self::block_of(pfn);
        let per = left.min(PB_PAGES) as u16;
        while left > 0 {
            let blk = &mut self.blocks[b];
            if let Some(add) = free {
                if add {
                    blk.free += per;
                } else {
                    blk.free -= per;
                }
            }
            if let Some((t, add)) = used {
                if add {
                    blk.used[t] += per;
                } else {
                    blk.used[t] -= per;
                }
            }
            left -= per as u32;
            b += 1;
        }
    }

    /// Puts a free buddy on the `mt` list (head unless `tail`).
    pub(crate) fn add_free(&mut self, pfn: u32, order: u8, mt: Mt, tail: bool) {
        debug_assert!(
            self.free_order[pfn as usize] == NONE && self.alloc_order[pfn as usize] == NONE
        );
        self.free_order[pfn as usize] = order;
        self.free_mt[pfn as usize] = mt as u8;
        self.link(pfn, order, mt, tail);
        self.free_pages += 1 << order;
        self.count_block_pages(pfn, order, Some(true), None);
    }

    /// Takes a free buddy off its list; returns its order and list type.
    pub(crate) fn del_free(&mut self, pfn: u32) -> (u8, Mt) {
        let order = self.free_order[pfn as usize];
        let mt = Mt::from_u8(self.free_mt[pfn as usize]);
        self.unlink(pfn, order, mt);
        self.free_order[pfn as usize] = NONE;
        self.free_mt[pfn as usize] = NONE;
        self.free_pages -= 1 << order;
        self.count_block_pages(pfn, order, Some(false), None);
        (order, mt)
    }

    /// Moves a free buddy to another type's list (head).
    pub(crate) fn move_free(&mut self, pfn: u32, mt: Mt) {
        let order = self.free_order[pfn as usize];
        let old = Mt::from_u8(self.free_mt[pfn as usize]);
        if old != mt {
            self.unlink(pfn, order, old);
            self.link(pfn, order, mt, false);
            self.free_mt[pfn as usize] = mt as u8;
        }
    }

    pub fn free_order_at(&self, pfn: u32) -> Option<u8> {
        let o = self.free_order[pfn as usize];
        (o != NONE).then_some(o)
    }

    pub fn free_mt_at(&self, pfn: u32) -> Option<Mt> {
        let o = self.free_mt[pfn as usize];
        (o != NONE).then(|| Mt::from_u8(o))
    }

    /// An allocated block's head: (order, actual type, slot).
    pub fn alloc_at(&self, pfn: u32) -> Option<(u8, Mt, u32)> {
        let o = self.alloc_order[pfn as usize];
        (o != NONE).then(|| {
            (
                o,
                Mt::from_u8(self.alloc_mt[pfn as usize]),
                self.alloc_slot[pfn as usize],
            )
        })
    }

    pub(crate) fn mark_alloc(&mut self, pfn: u32, order: u8, mt: Mt, slot: u32) {
        debug_assert!(mt != Mt::Mixed);
        let p = pfn as usize;
        self.alloc_order[p] = order;
        self.alloc_mt[p] = mt as u8;
        self.alloc_slot[p] = slot;
        self.count_block_pages(pfn, order, None, Some((mt as usize, true)));
    }

    pub(crate) fn unmark_alloc(&mut self, pfn: u32) -> (u8, Mt, u32) {
        let p = pfn as usize;
        let r = (
            self.alloc_order[p],
            Mt::from_u8(self.alloc_mt[p]),
            self.alloc_slot[p],
        );
        self.alloc_order[p] = NONE;
        self.alloc_mt[p] = NONE;
        self.alloc_slot[p] = NIL;
        self.count_block_pages(pfn, r.0, None, Some((r.1 as usize, false)));
        r
    }

    /// `expand()`: splits a block of order `high` at `pfn` down to `low`,
    /// putting the upper halves on the `mt` lists (head).
    pub(crate) fn expand(&mut self, pfn: u32, low: u8, mut high: u8, mt: Mt) {
        while high > low {
            high -= 1;
            self.add_free(pfn + (1 << high), high, mt, false);
        }
    }

    /// Takes the free buddy at `pfn` and splits it down to `order`, with the
    /// remainder on the `expand_mt` lists. Returns `pfn`.
    pub(crate) fn take(&mut self, pfn: u32, order: u8, expand_mt: Mt) -> u32 {
        let (cur, _) = self.del_free(pfn);
        self.expand(pfn, order, cur, expand_mt);
        pfn
    }

    /// `__rmqueue_smallest`: the smallest buddy ≥ order on `mt`'s own lists.
    pub fn rmqueue_smallest(&mut self, order: u8, mt: Mt) -> Option<u32> {
        for o in order..=MAX_ORDER {
            let h = self.heads[o as usize][mt as usize];
            if h != NIL {
                return Some(self.take(h, order, mt));
            }
        }
        None
    }

    /// The free buddies inside pageblock `b`: (pfn, order). A block inside a
    /// larger free buddy reports that buddy's head only if it lies in `b`.
    pub fn block_free_heads(&self, b: usize) -> Vec<(u32, u8)> {
        let mut v = Vec::new();
        self.walk_block(b, |pfn, e| {
            if let Entry::Free(o) = e {
                v.push((pfn, o))
            }
        });
        v
    }

    /// Visits every head (free buddy or allocated block) that starts in block `b`.
    pub(crate) fn walk_block(&self, b: usize, mut f: impl FnMut(u32, Entry)) -> u32 {
        let start = (b as u32) << PB_ORDER;
        let end = start + PB_PAGES;
        let mut pfn = start;
        let mut heads = 0;
        while pfn < end {
            let p = pfn as usize;
            heads += 1;
            if self.free_order[p] != NONE {
                let o = self.free_order[p];
                f(pfn, Entry::Free(o));
                pfn += 1 << o;
            } else if self.alloc_order[p] != NONE {
                let o = self.alloc_order[p];
                f(
                    pfn,
                    Entry::Alloc(o, Mt::from_u8(self.alloc_mt[p]), self.alloc_slot[p]),
                );
                pfn += 1 << o;
            } else {
                // Inside a block that started earlier (an order > 9 buddy or
                // allocation): the whole pageblock is covered by it.
                let mut q = pfn;
                let mut found = false;
                for o in (PB_ORDER + 1)..=MAX_ORDER {
                    q &= !((1u32 << o) - 1);
                    if self.free_order[q as usize] == o {
                        f(q, Entry::Covered);
                        found = true;
                        break;
                    }
                    if self.alloc_order[q as usize] == o {
                        f(q, Entry::Covered);
                        found = true;
                        break;
                    }
                }
                debug_assert!(found, "pfn {pfn} belongs to nothing");
                break;
            }
        }
        heads
    }

    /// `move_freepages_block`: every free buddy of block `b` to `mt`'s lists;
    /// returns the number of free pages moved.
    pub(crate) fn move_freepages_block(&mut self, b: usize, mt: Mt) -> u32 {
        let heads = self.block_free_heads(b);
        let mut moved = 0;
        for (pfn, o) in heads {
            self.move_free(pfn, mt);
            moved += 1u32 << o;
        }
        moved
    }

    /// Sets the type of every pageblock covered by a block of `order` at `pfn`.
    pub(crate) fn set_range_mt(&mut self, pfn: u32, order: u8, mt: Mt) {
        let first = Self::block_of(pfn);
        let n = (1usize << order.saturating_sub(PB_ORDER)).max(1);
        for b in first..first + n {
            self.blocks[b].mt = mt;
        }
    }

    /// `__free_one_page`: merges with free buddies and puts the result on the
    /// list of the freed page's pageblock type; across pageblocks the buddy's
    /// blocks are re-typed. Tail placement when a merge is likely later
    /// (`buddy_merge_likely`). Returns the final (pfn, order).
    pub(crate) fn free_one(&mut self, mut pfn: u32, mut order: u8) -> (u32, u8) {
        let mut mt = self.block_mt(pfn);
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            if buddy + (1 << order) > self.pages || self.free_order[buddy as usize] != order {
                break;
            }
            self.del_free(buddy);
            pfn &= buddy;
            order += 1;
        }
        if order >= PB_ORDER {
            if mt == Mt::Mixed && self.mixed_to_movable_on_merge {
                mt = Mt::Movable;
            }
            self.set_range_mt(pfn, order, mt);
        }
        let tail = order < MAX_ORDER - 1 && {
            let higher = (pfn & !(1u32 << order)) ^ (1u32 << (order + 1));
            higher + (1 << (order + 1)) <= self.pages
                && self.free_order[higher as usize] == order + 1
        };
        self.add_free(pfn, order, mt, tail);
        (pfn, order)
    }

    /// Checks the zone's internal consistency (for tests and `--check`).
    pub fn check(&self) -> Result<(), String> {
        let mut nb = vec![(0u32, [0u32; 3]); self.blocks.len()];
        let mut free_total = 0u64;
        let mut pfn = 0u32;
        while pfn < self.pages {
            let p = pfn as usize;
            let (o, free, t) = if self.free_order[p] != NONE {
                if self.alloc_order[p] != NONE {
                    return Err(format!("{}: pfn {pfn} is free and allocated", self.name));
                }
                (self.free_order[p], true, 0)
            } else if self.alloc_order[p] != NONE {
                (self.alloc_order[p], false, self.alloc_mt[p] as usize)
            } else {
                return Err(format!(
                    "{}: pfn {pfn} is neither free nor allocated (lost)",
                    self.name
                ));
            };
            if o > MAX_ORDER || !pfn.is_multiple_of(1 << o) || pfn + (1 << o) > self.pages {
                return Err(format!(
                    "{}: block at {pfn} of order {o} misaligned",
                    self.name
                ));
            }
            for q in pfn + 1..pfn + (1 << o) {
                if self.free_order[q as usize] != NONE || self.alloc_order[q as usize] != NONE {
                    return Err(format!(
                        "{}: pfn {q} inside block {pfn}/{o} is a head too (double use)",
                        self.name
                    ));
                }
            }
            if free {
                free_total += 1 << o;
                let buddy = pfn ^ (1 << o);
                if o < MAX_ORDER
                    && buddy + (1 << o) <= self.pages
                    && self.free_order[buddy as usize] == o
                {
                    return Err(format!(
                        "{}: free buddies {pfn} and {buddy} of order {o} not merged",
                        self.name
                    ));
                }
            }
            let per = (1u32 << o).min(PB_PAGES);
            let mut left = 1u32 << o;
            let mut b = Self::block_of(pfn);
            while left > 0 {
                if free {
                    nb[b].0 += per;
                } else {
                    nb[b].1[t] += per;
                }
                left -= per;
                b += 1;
            }
            pfn += 1 << o;
        }
        if free_total != self.free_pages {
            return Err(format!(
                "{}: free_pages {} but buddies hold {free_total}",
                self.name, self.free_pages
            ));
        }
        for (b, (f, u)) in nb.iter().enumerate() {
            let blk = &self.blocks[b];
            if blk.free as u32 != *f || (0..3).any(|t| blk.used[t] as u32 != u[t]) {
                return Err(format!(
                    "{}: block {b} counters free {} used {:?}, pages say free {f} used {u:?}",
                    self.name, blk.free, blk.used
                ));
            }
        }
        for o in 0..NR_ORDERS {
            for t in 0..NR_MT {
                let mut n = 0u32;
                let mut prev = NIL;
                let mut cur = self.heads[o][t];
                while cur != NIL {
                    let c = cur as usize;
                    if self.free_order[c] as usize != o
                        || self.free_mt[c] as usize != t
                        || self.prev[c] != prev
                    {
                        return Err(format!(
                            "{}: list {o}/{t} entry {cur} is inconsistent",
                            self.name
                        ));
                    }
                    n += 1;
                    if n > self.pages {
                        return Err(format!("{}: list {o}/{t} loops", self.name));
                    }
                    prev = cur;
                    cur = self.next[c];
                }
                if self.tails[o][t] != prev || n != self.nr_free[o][t] {
                    return Err(format!(
                        "{}: list {o}/{t} counts {} but holds {n}",
                        self.name, self.nr_free[o][t]
                    ));
                }
            }
        }
        let listed: u64 = (0..NR_ORDERS)
            .map(|o| {
                (0..NR_MT)
                    .map(|t| (self.nr_free[o][t] as u64) << o)
                    .sum::<u64>()
            })
            .sum();
        if listed != free_total {
            return Err(format!(
                "{}: lists hold {listed} pages, buddies {free_total}",
                self.name
            ));
        }
        Ok(())
    }
}

/// What a walk over a pageblock finds at a head.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Entry {
    Free(u8),
    Alloc(u8, Mt, u32),
    /// The pageblock lies inside a larger buddy or allocation.
    Covered,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_layout_splits_at_3_gib() {
        let z = ZoneSpec::x86(1 << 20);
        assert_eq!(
            (z[0].name.as_str(), z[0].managed),
            ("DMA32", (3 << 18) - 4096)
        );
        assert_eq!(
            (z[1].name.as_str(), z[1].start_pfn, z[1].managed),
            ("Normal", 1 << 20, (1 << 20) - (3 << 18) + 4096)
        );
        assert_eq!(ZoneSpec::x86(1 << 18).len(), 1);
    }

    #[test]
    fn unmanaged_pages_are_reserved_at_the_start() {
        let spec = ZoneSpec {
            managed: 1000,
            ..ZoneSpec::normal(2048)
        };
        let z = Zone::new(&spec, 0);
        assert_eq!((z.pages, z.reserved, z.free_pages), (2048, 1048, 1000));
        assert_eq!(z.blocks[0].mt, Mt::Unmovable);
        z.check().unwrap();
    }
}
