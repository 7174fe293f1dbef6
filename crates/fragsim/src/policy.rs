//! Fallback and anti-fragmentation policies as plug-ins (REF §5-§6).
//!
//! A policy decides where a request is placed when its own free lists are
//! consulted and, above all, when they are empty (the fallback): which buddy
//! to take, whether the pageblock changes owner, and which lists the remainder
//! and the block's other free pages go to. It also tells compaction which
//! blocks are sources and targets.

use crate::rng::Rng;
use crate::sim::{CompactMode, Stats};
use crate::zone::{Block, Zone};
use crate::{fallbacks, Mt, COSTLY_ORDER, MAX_ORDER, PB_ORDER, PB_PAGES};

/// The policies, by name (`--policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PolicyKind {
    /// Linux 4.5 `__rmqueue_fallback` (the thesis's "Default").
    Linux45,
    /// Linux 6.15+ claim/steal split with `ALLOC_NOFRAGMENT` across zones.
    Linux615,
    /// Linux 6.15+ with `vm.defrag_mode = 1`.
    Linux615Defrag,
    /// Optimal Page Block Selection (thesis §4.1).
    Opbs,
    /// Incremental Page Block Selection (thesis §4.3).
    Ipbs,
    /// Active Anti-Fragmentation (Joonsoo Kim 2015, thesis §4.2).
    Aaf,
    /// Illuminator with the MIXED region (thesis §4.4, ASPLOS'18).
    Illuminator,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Linux45,
        PolicyKind::Linux615,
        PolicyKind::Linux615Defrag,
        PolicyKind::Aaf,
        PolicyKind::Opbs,
        PolicyKind::Ipbs,
        PolicyKind::Illuminator,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Linux45 => "linux-4.5",
            PolicyKind::Linux615 => "linux-6.15",
            PolicyKind::Linux615Defrag => "linux-6.15-defrag",
            PolicyKind::Opbs => "opbs",
            PolicyKind::Ipbs => "ipbs",
            PolicyKind::Aaf => "aaf",
            PolicyKind::Illuminator => "illuminator",
        }
    }

    pub fn parse(s: &str) -> Option<PolicyKind> {
        let s = s.to_ascii_lowercase();
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .or(match s.as_str() {
                "default" | "linux45" | "4.5" => Some(PolicyKind::Linux45),
                "linux" | "linux615" | "6.15" => Some(PolicyKind::Linux615),
                "defrag" | "defrag_mode" | "defrag-mode" => Some(PolicyKind::Linux615Defrag),
                _ => None,
            })
    }

    pub fn build(self, seed: u64) -> Box<dyn Policy> {
        match self {
            PolicyKind::Linux45 => Box::new(Linux45),
            PolicyKind::Linux615 => Box::new(Linux615 { defrag_mode: false }),
            PolicyKind::Linux615Defrag => Box::new(Linux615 { defrag_mode: true }),
            PolicyKind::Opbs => Box::new(Opbs { limit: None }),
            PolicyKind::Ipbs => Box::new(Ipbs::new(seed)),
            PolicyKind::Aaf => Box::new(Aaf::default()),
            PolicyKind::Illuminator => Box::new(Illuminator),
        }
    }
}

/// AAF's deferred work: empty pageblock `block` for `start` (REF §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AafWork {
    pub zone: usize,
    pub block: usize,
    pub start: Mt,
    pub moved: u32,
}

pub trait Policy {
    fn kind(&self) -> PolicyKind;

    /// Takes a block of `order` for a `mt` request from zone `z`, own lists
    /// first, then the policy's fallback. `nofragment`: `ALLOC_NOFRAGMENT`.
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        nofragment: bool,
        st: &mut Stats,
    ) -> Option<u32>;

    /// Whether the first pass over the zones runs with `ALLOC_NOFRAGMENT`.
    fn nofragment(&self, _multi_zone: bool) -> bool {
        false
    }

    fn defrag_mode(&self) -> bool {
        false
    }

    /// Called after an allocation in pageblock `b` was freed.
    fn after_free(&mut self, _z: &mut Zone, _b: usize) {}

    /// Whether compaction may take pages out of block `blk` (REF §7.1
    /// `suitable_migration_source`).
    fn source_ok(&self, blk: &Block, order: u8, req_mt: Mt, mode: CompactMode) -> bool {
        match mode {
            CompactMode::Async => {
                if req_mt == Mt::Movable || order >= PB_ORDER {
                    blk.mt == Mt::Movable
                } else {
                    blk.mt == req_mt
                }
            }
            _ => true,
        }
    }

    /// Whether compaction may place migrated pages in block `blk`.
    fn target_ok(&self, blk: &Block) -> bool {
        blk.mt == Mt::Movable
    }

    /// Deferred work (AAF's queue), taken by the simulator after each allocation.
    fn take_deferred(&mut self) -> Vec<AafWork> {
        Vec::new()
    }
}

// ---------------------------------------------------------------------------
// Linux 4.5
// ---------------------------------------------------------------------------

/// v4.5 `find_suitable_fallback` over orders MAX..=order, largest first:
/// (pfn at the list head, its order, the fallback type).
pub(crate) fn v45_find(z: &Zone, order: u8, start: Mt) -> Option<(u32, u8, Mt)> {
    for cur in (order..=MAX_ORDER).rev() {
        for f in fallbacks(start) {
            if let Some(h) = z.list_head(cur, f) {
                return Some((h, cur, f));
            }
        }
    }
    None
}

/// v4.5 `can_steal_fallback`, on the REQUEST order.
pub(crate) fn v45_can_steal(order: u8, start: Mt) -> bool {
    order >= PB_ORDER || order >= PB_ORDER / 2 || start.is_kernel()
}

/// v4.5 `steal_suitable_fallback` (when allowed) then the removal of the
/// buddy and `expand()` onto the STEALER's lists (the pre-2024 behaviour).
/// Returns the pfn and the pages moved to the stealer's lists.
pub(crate) fn v45_steal_take(
    z: &mut Zone,
    pfn: u32,
    cur: u8,
    order: u8,
    start: Mt,
    fmt: Mt,
    st: &mut Stats,
) -> (u32, u32) {
    let mut claimed = false;
    let mut moved = 0;
    if v45_can_steal(order, start) {
        if cur >= PB_ORDER {
            z.set_range_mt(pfn, cur, start);
            claimed = true;
        } else {
            let b = Zone::block_of(pfn);
            moved = z.move_freepages_block(b, start);
            if moved >= PB_PAGES / 2 {
                z.blocks[b].mt = start;
                claimed = true;
            }
        }
    }
    let p = z.take(pfn, order, start);
    st.fallback(order, cur, start, fmt, claimed);
    (p, moved)
}

/// The stock v4.5 `__rmqueue`.
pub struct Linux45;

impl Policy for Linux45 {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Linux45
    }
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        _nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        if let Some(p) = z.rmqueue_smallest(order, mt) {
            return Some(p);
        }
        let (pfn, cur, fmt) = v45_find(z, order, mt)?;
        Some(v45_steal_take(z, pfn, cur, order, mt, fmt, st).0)
    }
}

// ---------------------------------------------------------------------------
// Linux 6.15+
// ---------------------------------------------------------------------------

/// Current mainline (REF §5.3): `__rmqueue_smallest`, `__rmqueue_claim`
/// (largest first, whole block or ≥ half with alike pages), `__rmqueue_steal`
/// (smallest first, block type untouched, remainder on the block's type).
pub struct Linux615 {
    pub defrag_mode: bool,
}

fn should_try_claim_block(cur: u8, start: Mt) -> bool {
    cur >= PB_ORDER || cur >= PB_ORDER / 2 || start.is_kernel()
}

impl Linux615 {
    fn claim(
        &mut self,
        z: &mut Zone,
        order: u8,
        start: Mt,
        nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        let min_order = if nf && order < PB_ORDER {
            PB_ORDER
        } else {
            order
        };
        for cur in (min_order..=MAX_ORDER).rev() {
            if !should_try_claim_block(cur, start) {
                break;
            }
            let Some((pfn, fmt)) = fallbacks(start)
                .into_iter()
                .find_map(|f| z.list_head(cur, f).map(|h| (h, f)))
            else {
                continue;
            };
            if let Some(p) = try_to_claim_block(z, pfn, cur, order, start, fmt) {
                st.fallback(order, cur, start, fmt, true);
                return Some(p);
            }
        }
        None
    }

    fn steal(&mut self, z: &mut Zone, order: u8, start: Mt, st: &mut Stats) -> Option<u32> {
        for cur in order..=MAX_ORDER {
            if let Some((pfn, fmt)) = fallbacks(start)
                .into_iter()
                .find_map(|f| z.list_head(cur, f).map(|h| (h, f)))
            {
                let p = z.take(pfn, order, fmt);
                st.fallback(order, cur, start, fmt, false);
                return Some(p);
            }
        }
        None
    }
}

/// `try_to_claim_block` (REF §5.3).
fn try_to_claim_block(
    z: &mut Zone,
    pfn: u32,
    cur: u8,
    order: u8,
    start: Mt,
    block_type: Mt,
) -> Option<u32> {
    if cur >= PB_ORDER {
        z.del_free(pfn);
        z.set_range_mt(pfn, cur, start);
        z.expand(pfn, order, cur, start);
        return Some(pfn);
    }
    // boost_watermark: factor 15000 = 150 % of high, only for zones of more than 4 blocks.
    if z.nr_blocks() > 4 {
        let max_boost = (PB_PAGES as u64).max(z.wmark[2] * 15000 / 10000);
        z.boost = (z.boost + PB_PAGES as u64).min(max_boost);
    }
    let b = Zone::block_of(pfn);
    let blk = z.blocks[b];
    let free = blk.free as u32;
    let movable = blk.movable();
    let alike = if start == Mt::Movable {
        movable
    } else if block_type == Mt::Movable {
        PB_PAGES - free - movable
    } else {
        0
    };
    if free + alike >= PB_PAGES / 2 {
        z.move_freepages_block(b, start);
        z.blocks[b].mt = start;
        return z.rmqueue_smallest(order, start);
    }
    None
}

impl Policy for Linux615 {
    fn kind(&self) -> PolicyKind {
        if self.defrag_mode {
            PolicyKind::Linux615Defrag
        } else {
            PolicyKind::Linux615
        }
    }
    fn nofragment(&self, multi_zone: bool) -> bool {
        self.defrag_mode || multi_zone
    }
    fn defrag_mode(&self) -> bool {
        self.defrag_mode
    }
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        if let Some(p) = z.rmqueue_smallest(order, mt) {
            return Some(p);
        }
        if let Some(p) = self.claim(z, order, mt, nf, st) {
            return Some(p);
        }
        if nf {
            return None;
        }
        self.steal(z, order, mt, st)
    }
}

// ---------------------------------------------------------------------------
// OPBS
// ---------------------------------------------------------------------------

/// Scans the fallback lists of `start` at orders `hi..=lo` (descending), at
/// most `limit` entries per list, and returns the entry whose pageblock has
/// the most free pages (the first one on ties): (pfn, order, type).
pub(crate) fn best_block(
    z: &Zone,
    lo: u8,
    hi: u8,
    start: Mt,
    limit: Option<usize>,
    st: &mut Stats,
) -> Option<(u32, u8, Mt)> {
    let mut best: Option<(u32, u8, Mt, u16)> = None;
    for cur in (lo..=hi).rev() {
        for f in fallbacks(start) {
            let mut e = z.list_head(cur, f);
            let mut n = 0usize;
            while let Some(pfn) = e {
                if limit.is_some_and(|l| n >= l) {
                    break;
                }
                n += 1;
                st.fallback_scanned += 1;
                let free = z.blocks[Zone::block_of(pfn)].free;
                if best.is_none_or(|b| free > b.3) {
                    best = Some((pfn, cur, f, free));
                }
                e = z.list_next(pfn);
            }
        }
    }
    best.map(|(p, o, f, _)| (p, o, f))
}

/// Largest order ≥ `order` that has a fallback entry for `start`.
pub(crate) fn largest_fallback_order(z: &Zone, order: u8, start: Mt) -> Option<u8> {
    (order..=MAX_ORDER)
        .rev()
        .find(|&o| fallbacks(start).iter().any(|&f| z.nr_free(o, f) > 0))
}

fn other_kernel(mt: Mt) -> Mt {
    if mt == Mt::Unmovable {
        Mt::Reclaimable
    } else {
        Mt::Unmovable
    }
}

/// Kernel request from the other kernel type's own lists (UNMOVABLE ↔
/// RECLAIMABLE), smallest first: no kernel page lands in a user block.
fn kernel_to_kernel(z: &mut Zone, order: u8, mt: Mt, st: &mut Stats) -> Option<u32> {
    let other = other_kernel(mt);
    let cur = (order..=MAX_ORDER).find(|&o| z.nr_free(o, other) > 0)?;
    let p = z.rmqueue_smallest(order, other)?;
    st.fallback(order, cur, mt, other, false);
    Some(p)
}

/// Optimal Page Block Selection: a kernel fallback takes the candidate whose
/// pageblock has the most free pages, scanning every order list (thesis §4.1:
/// "all order lists are linearly scanned"); `limit` bounds the entries per
/// list (64 gives the thesis's RPBS). Steal rule as Algorithm 1 (v4.5).
pub struct Opbs {
    pub limit: Option<usize>,
}

impl Policy for Opbs {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Opbs
    }
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        _nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        if let Some(p) = z.rmqueue_smallest(order, mt) {
            return Some(p);
        }
        if !mt.is_kernel() {
            let (pfn, cur, fmt) = v45_find(z, order, mt)?;
            return Some(v45_steal_take(z, pfn, cur, order, mt, fmt, st).0);
        }
        if let Some(p) = kernel_to_kernel(z, order, mt, st) {
            return Some(p);
        }
        let hi = largest_fallback_order(z, order, mt)?;
        let (pfn, cur, fmt) = best_block(z, order, hi, mt, self.limit, st)?;
        Some(v45_steal_take(z, pfn, cur, order, mt, fmt, st).0)
    }
}

// ---------------------------------------------------------------------------
// IPBS
// ---------------------------------------------------------------------------

/// IPBS fragmentation levels (thesis §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Level {
    Low,
    Medium,
    High,
    Critical,
}

impl Level {
    /// `adjust_level()`: from the order of the buddy the last kernel fallback
    /// took. Pageblock-size buddies → LOW; smaller (7-8) → MEDIUM; below 7 →
    /// HIGH; at or below `PAGE_ALLOC_COSTLY_ORDER` → CRITICAL (our choice of
    /// "intense fragmentation": even a costly-order buddy is gone).
    pub fn from_fallback_order(cur: u8) -> Level {
        if cur >= PB_ORDER {
            Level::Low
        } else if cur >= 7 {
            Level::Medium
        } else if cur > COSTLY_ORDER {
            Level::High
        } else {
            Level::Critical
        }
    }
}

/// Incremental Page Block Selection: the kernel fallback's search effort
/// grows with the fragmentation level (thesis Algorithm 2).
pub struct Ipbs {
    pub level: Level,
    pub transitions: Vec<(Level, Level)>,
    rng: Rng,
}

/// Entries looked at by HIGH and by CRITICAL (RPBS) per list.
pub const IPBS_SCAN: usize = 64;

impl Ipbs {
    pub fn new(seed: u64) -> Ipbs {
        Ipbs {
            level: Level::Low,
            transitions: Vec::new(),
            rng: Rng::new(seed ^ 0x1b25),
        }
    }

    fn select(&mut self, z: &Zone, order: u8, mt: Mt, st: &mut Stats) -> Option<(u32, u8, Mt)> {
        let hi = largest_fallback_order(z, order, mt)?;
        match self.level {
            // Default behaviour: the head of the largest fallback list.
            Level::Low => v45_find(z, order, mt),
            // Two random blocks from the largest order's fallback lists (among
            // their first 64 entries); the one with more free pages wins.
            Level::Medium => {
                let mut cands = Vec::new();
                for f in fallbacks(mt) {
                    let mut e = z.list_head(hi, f);
                    while let Some(p) = e {
                        if cands.len() >= IPBS_SCAN {
                            break;
                        }
                        cands.push((p, hi, f));
                        e = z.list_next(p);
                    }
                }
                let a = cands[self.rng.below(cands.len() as u64) as usize];
                let b = cands[self.rng.below(cands.len() as u64) as usize];
                st.fallback_scanned += 2;
                let free = |c: (u32, u8, Mt)| z.blocks[Zone::block_of(c.0)].free;
                Some(if free(b) > free(a) { b } else { a })
            }
            // Only the requested order's lists (or the nearest non-empty order
            // above), up to 64 entries.
            Level::High => {
                let o = (order..=MAX_ORDER)
                    .find(|&o| fallbacks(mt).iter().any(|&f| z.nr_free(o, f) > 0))?;
                best_block(z, o, o, mt, Some(IPBS_SCAN), st)
            }
            // RPBS: OPBS over every order with a 64-entry limit per list.
            Level::Critical => best_block(z, order, hi, mt, Some(IPBS_SCAN), st),
        }
    }
}

impl Policy for Ipbs {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Ipbs
    }
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        _nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        if let Some(p) = z.rmqueue_smallest(order, mt) {
            return Some(p);
        }
        if !mt.is_kernel() {
            let (pfn, cur, fmt) = v45_find(z, order, mt)?;
            return Some(v45_steal_take(z, pfn, cur, order, mt, fmt, st).0);
        }
        let (pfn, cur, fmt) = self.select(z, order, mt, st)?;
        let p = v45_steal_take(z, pfn, cur, order, mt, fmt, st).0;
        let next = Level::from_fallback_order(cur);
        if next != self.level {
            self.transitions.push((self.level, next));
            self.level = next;
        }
        Some(p)
    }
}

// ---------------------------------------------------------------------------
// AAF
// ---------------------------------------------------------------------------

/// Active Anti-Fragmentation: v4.5 plus, after a kernel steal from a MOVABLE
/// block, queued work (at most 100 pending) that migrates the block's movable
/// pages out and converts it when `moved + movable ≥ 256` (REF §6.2).
#[derive(Default)]
pub struct Aaf {
    queue: Vec<AafWork>,
    pub dropped: u64,
}

pub const AAF_SLOTS: usize = 100;

impl Policy for Aaf {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Aaf
    }
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        _nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        if let Some(p) = z.rmqueue_smallest(order, mt) {
            return Some(p);
        }
        let (pfn, cur, fmt) = v45_find(z, order, mt)?;
        let (p, moved) = v45_steal_take(z, pfn, cur, order, mt, fmt, st);
        if mt != Mt::Movable && fmt == Mt::Movable && cur < PB_ORDER {
            if self.queue.len() < AAF_SLOTS {
                self.queue.push(AafWork {
                    zone: z.id,
                    block: Zone::block_of(p),
                    start: mt,
                    moved,
                });
                st.aaf_queued += 1;
            } else {
                self.dropped += 1;
                st.aaf_dropped += 1;
            }
        }
        Some(p)
    }
    fn take_deferred(&mut self) -> Vec<AafWork> {
        std::mem::take(&mut self.queue)
    }
}

// ---------------------------------------------------------------------------
// Illuminator
// ---------------------------------------------------------------------------

/// `fallbacks_full`: whole free pageblocks a type may claim (REF §6.5).
fn fallbacks_full(mt: Mt) -> [Mt; 3] {
    match mt {
        Mt::Unmovable => [Mt::Reclaimable, Mt::Mixed, Mt::Movable],
        Mt::Reclaimable => [Mt::Unmovable, Mt::Mixed, Mt::Movable],
        _ => [Mt::Mixed, Mt::Reclaimable, Mt::Unmovable],
    }
}

/// Illuminator: own lists; then a whole free pageblock from another type
/// (claimed, re-typed); then the MIXED lists; then a fallback that makes the
/// block MIXED unless the kernel claimed at least half of it (kernel requests
/// choose the block as OPBS does). Compaction skips MIXED blocks holding
/// kernel pages when it works for huge pages, and MIXED blocks are targets.
pub struct Illuminator;

impl Illuminator {
    fn full_block(z: &mut Zone, order: u8, mt: Mt, st: &mut Stats) -> Option<u32> {
        for cur in PB_ORDER.max(order)..=MAX_ORDER {
            for f in fallbacks_full(mt) {
                if let Some(pfn) = z.list_head(cur, f) {
                    z.del_free(pfn);
                    z.set_range_mt(pfn, cur, mt);
                    z.expand(pfn, order, cur, mt);
                    st.fallback(order, cur, mt, f, true);
                    return Some(pfn);
                }
            }
        }
        None
    }
}

impl Policy for Illuminator {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Illuminator
    }
    fn rmqueue(
        &mut self,
        z: &mut Zone,
        order: u8,
        mt: Mt,
        _nf: bool,
        st: &mut Stats,
    ) -> Option<u32> {
        if let Some(p) = z.rmqueue_smallest(order, mt) {
            return Some(p);
        }
        if let Some(p) = Self::full_block(z, order, mt, st) {
            return Some(p);
        }
        if let Some(p) = z.rmqueue_smallest(order, Mt::Mixed) {
            st.mixed_allocs += 1;
            return Some(p);
        }
        let (pfn, cur, fmt) = if mt.is_kernel() {
            if let Some(p) = kernel_to_kernel(z, order, mt, st) {
                return Some(p);
            }
            let hi = largest_fallback_order(z, order, mt)?;
            best_block(z, order, hi, mt, None, st)?
        } else {
            v45_find(z, order, mt)?
        };
        let b = Zone::block_of(pfn);
        let claimed = mt.is_kernel() && z.blocks[b].free as u32 >= PB_PAGES / 2;
        let new_mt = if claimed { mt } else { Mt::Mixed };
        z.move_freepages_block(b, new_mt);
        z.blocks[b].mt = new_mt;
        let p = z.take(pfn, order, new_mt);
        st.fallback(order, cur, mt, fmt, claimed);
        Some(p)
    }
    /// The thesis's recovery: a composite block whose last kernel page is
    /// freed goes back to the movable region, with its free pages.
    fn after_free(&mut self, z: &mut Zone, b: usize) {
        if z.blocks[b].mt == Mt::Mixed && z.blocks[b].kernel() == 0 {
            z.blocks[b].mt = Mt::Movable;
            z.move_freepages_block(b, Mt::Movable);
        }
    }
    fn source_ok(&self, blk: &Block, order: u8, req_mt: Mt, mode: CompactMode) -> bool {
        if blk.mt == Mt::Mixed && order >= PB_ORDER && blk.kernel() > 0 {
            return false;
        }
        match mode {
            CompactMode::Async if req_mt == Mt::Movable || order >= PB_ORDER => {
                matches!(blk.mt, Mt::Movable | Mt::Mixed)
            }
            CompactMode::Async => blk.mt == req_mt,
            _ => true,
        }
    }
    fn target_ok(&self, blk: &Block) -> bool {
        matches!(blk.mt, Mt::Movable | Mt::Mixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::ZoneSpec;

    /// A zone of `blocks` pageblocks with no watermarks.
    fn zone(blocks: u64) -> Zone {
        Zone::new(&ZoneSpec::normal(blocks * PB_PAGES as u64), 0)
    }

    /// Allocates `n` movable order-0 pages (lowest pfns first).
    fn fill(z: &mut Zone, n: u32) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let p = z.rmqueue_smallest(0, Mt::Movable).unwrap();
                z.mark_alloc(p, 0, Mt::Movable, NIL_SLOT);
                p
            })
            .collect()
    }

    const NIL_SLOT: u32 = u32::MAX;

    fn kernel_alloc(pol: &mut dyn Policy, z: &mut Zone, st: &mut Stats) -> u32 {
        let p = pol.rmqueue(z, 0, Mt::Unmovable, false, st).unwrap();
        z.mark_alloc(p, 0, Mt::Unmovable, NIL_SLOT);
        z.check().unwrap();
        p
    }

    #[test]
    fn v45_claims_the_block_when_half_is_free() {
        let mut z = zone(1);
        fill(&mut z, 200);
        let mut st = Stats::default();
        kernel_alloc(&mut Linux45, &mut z, &mut st);
        assert_eq!(z.blocks[0].mt, Mt::Unmovable);
        assert_eq!(
            (0..=MAX_ORDER)
                .map(|o| z.nr_free(o, Mt::Movable))
                .sum::<u32>(),
            0
        );
        assert_eq!((st.fallbacks, st.claims), (1, 1));
    }

    #[test]
    fn v45_moves_free_pages_but_keeps_the_type_below_half() {
        let mut z = zone(1);
        fill(&mut z, 300);
        let mut st = Stats::default();
        kernel_alloc(&mut Linux45, &mut z, &mut st);
        assert_eq!(z.blocks[0].mt, Mt::Movable);
        // The pre-2024 "hygiene" behaviour: the block's free pages sit on the stealer's lists.
        assert_eq!(
            (0..=MAX_ORDER)
                .map(|o| z.nr_free(o, Mt::Movable))
                .sum::<u32>(),
            0
        );
        assert!(z.blocks[0].tainted());
        assert_eq!((st.fallbacks, st.claims), (1, 0));
    }

    #[test]
    fn v615_steals_smallest_and_leaves_the_block() {
        let mut z = zone(1);
        let pages = fill(&mut z, 300);
        // Free one page so an order-0 buddy exists next to larger ones.
        z.unmark_alloc(pages[10]);
        z.free_one(pages[10], 0);
        let mut st = Stats::default();
        let p = kernel_alloc(&mut Linux615 { defrag_mode: false }, &mut z, &mut st);
        assert_eq!(p, pages[10], "smallest buddy first");
        assert_eq!(z.blocks[0].mt, Mt::Movable);
        assert_eq!(
            (0..=MAX_ORDER)
                .map(|o| z.nr_free(o, Mt::Unmovable))
                .sum::<u32>(),
            0
        );
        // With NOFRAGMENT the same request fails instead of polluting.
        let mut pol = Linux615 { defrag_mode: true };
        assert!(pol
            .rmqueue(&mut z, 0, Mt::Unmovable, true, &mut st)
            .is_none());
    }

    #[test]
    fn v615_claims_whole_free_blocks_and_alike_pages() {
        let mut z = zone(2);
        let mut st = Stats::default();
        kernel_alloc(&mut Linux615 { defrag_mode: false }, &mut z, &mut st);
        assert_eq!(
            (z.blocks[0].mt, z.blocks[1].mt),
            (Mt::Unmovable, Mt::Unmovable)
        );
        assert!(z.boost == 0, "whole-block claims do not boost");
    }

    /// Frees every page of block `b` whose index within the block is below `n`.
    fn free_in_block(z: &mut Zone, pages: &[u32], b: usize, n: u32) {
        for &p in pages
            .iter()
            .filter(|&&p| Zone::block_of(p) == b && p % PB_PAGES < n)
        {
            z.unmark_alloc(p);
            z.free_one(p, 0);
        }
    }

    #[test]
    fn opbs_picks_the_block_with_most_free_pages() {
        let mut z = zone(4);
        let pages = fill(&mut z, 4 * PB_PAGES);
        free_in_block(&mut z, &pages, 0, 16);
        free_in_block(&mut z, &pages, 1, 100);
        free_in_block(&mut z, &pages, 2, 64);
        free_in_block(&mut z, &pages, 3, 32);
        let mut st = Stats::default();
        let p = kernel_alloc(&mut Opbs { limit: None }, &mut z, &mut st);
        assert_eq!(Zone::block_of(p), 1);
        assert!(st.fallback_scanned > 0);
    }

    #[test]
    fn ipbs_levels_follow_the_fallback_order() {
        assert_eq!(Level::from_fallback_order(10), Level::Low);
        assert_eq!(Level::from_fallback_order(9), Level::Low);
        assert_eq!(Level::from_fallback_order(8), Level::Medium);
        assert_eq!(Level::from_fallback_order(7), Level::Medium);
        assert_eq!(Level::from_fallback_order(6), Level::High);
        assert_eq!(Level::from_fallback_order(4), Level::High);
        assert_eq!(Level::from_fallback_order(3), Level::Critical);
        assert_eq!(Level::from_fallback_order(0), Level::Critical);
        let mut z = zone(2);
        let mut pol = Ipbs::new(1);
        let mut st = Stats::default();
        // Fresh zone: an order-10 buddy is taken, the level stays LOW.
        kernel_alloc(&mut pol, &mut z, &mut st);
        assert_eq!(pol.level, Level::Low);
        // Fill the unmovable block, then leave only small movable buddies.
        let mut z = zone(2);
        let pages = fill(&mut z, 2 * PB_PAGES);
        free_in_block(&mut z, &pages, 1, 4);
        kernel_alloc(&mut pol, &mut z, &mut st);
        assert_eq!(pol.level, Level::Critical);
        free_in_block(&mut z, &pages, 0, 128);
        // The three pages left on the unmovable lists go first, then an
        // order-7 buddy: MEDIUM.
        for _ in 0..4 {
            kernel_alloc(&mut pol, &mut z, &mut st);
        }
        assert_eq!(
            pol.transitions,
            vec![
                (Level::Low, Level::Critical),
                (Level::Critical, Level::Medium)
            ]
        );
    }

    #[test]
    fn illuminator_keeps_kernel_pages_in_the_mixed_region() {
        let mut z = zone(2);
        z.mixed_to_movable_on_merge = true;
        let pages = fill(&mut z, 2 * PB_PAGES);
        free_in_block(&mut z, &pages, 0, 200);
        free_in_block(&mut z, &pages, 1, 100);
        let mut pol = Illuminator;
        let mut st = Stats::default();
        let k1 = kernel_alloc(&mut pol, &mut z, &mut st);
        assert_eq!(Zone::block_of(k1), 0, "most free pages");
        assert_eq!(z.blocks[0].mt, Mt::Mixed, "fewer than half free: composite");
        let k2 = kernel_alloc(&mut pol, &mut z, &mut st);
        assert_eq!(
            Zone::block_of(k2),
            0,
            "next kernel page from the mixed region"
        );
        assert_eq!(st.mixed_allocs, 1);
        assert_eq!(z.blocks[1].kernel(), 0);
        // When the kernel pages go, the block returns to the movable region.
        for k in [k1, k2] {
            z.unmark_alloc(k);
            z.free_one(k, 0);
            pol.after_free(&mut z, 0);
        }
        assert_eq!(z.blocks[0].mt, Mt::Movable);
        z.check().unwrap();
    }

    #[test]
    fn aaf_queues_work_for_kernel_steals_from_movable_blocks() {
        let mut z = zone(1);
        fill(&mut z, 300);
        let mut pol = Aaf::default();
        let mut st = Stats::default();
        kernel_alloc(&mut pol, &mut z, &mut st);
        let w = pol.take_deferred();
        assert_eq!(
            w,
            vec![AafWork {
                zone: 0,
                block: 0,
                start: Mt::Unmovable,
                moved: 212
            }]
        );
    }
}
