//! The simulator: zones, allocation handles, the allocation path (fast path,
//! kswapd, direct compaction, direct reclaim, watermarks), frees, LRU
//! reclaim, compaction with the two scanners, and the counters.

use crate::policy::{AafWork, Policy, PolicyKind};
use crate::zone::{Entry, Zone, ZoneSpec, NIL, WMARK_HIGH, WMARK_LOW, WMARK_MIN};
use crate::{Mt, COSTLY_ORDER, PB_ORDER, PB_PAGES};
use std::collections::VecDeque;

/// Counters (vmstat-like) of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub allocs: u64,
    /// Failed requests, THP attempts that fell back included.
    pub alloc_fail: u64,
    /// THP-like attempts (`AllocMode::Thp`) and those that got their block.
    pub thp_attempts: u64,
    pub thp_success: u64,
    pub frees: u64,
    /// `mm_page_alloc_extfrag` events.
    pub fallbacks: u64,
    /// … with `fallback_order < pageblock_order` (Gorman's external fragmentation events).
    pub fragmenting_fallbacks: u64,
    /// … that changed the pageblock's owner.
    pub claims: u64,
    /// Unmovable or reclaimable pages placed in a MOVABLE block.
    pub kernel_in_movable: u64,
    /// Movable pages placed in a kernel block.
    pub movable_in_kernel: u64,
    /// Free-list entries looked at by OPBS/IPBS selections.
    pub fallback_scanned: u64,
    pub mixed_allocs: u64,
    pub compact_stall: u64,
    pub compact_success: u64,
    pub compact_fail: u64,
    pub compact_deferred: u64,
    pub migrate_scanned: u64,
    pub free_scanned: u64,
    pub isolated: u64,
    pub migrated: u64,
    pub migrate_failed: u64,
    pub kswapd_wakes: u64,
    pub reclaimed: u64,
    pub direct_reclaim: u64,
    pub aaf_queued: u64,
    pub aaf_dropped: u64,
    pub aaf_converted: u64,
    pub aaf_migrated: u64,
}

impl Stats {
    pub(crate) fn fallback(
        &mut self,
        _order: u8,
        fallback_order: u8,
        start: Mt,
        fmt: Mt,
        claimed: bool,
    ) {
        self.fallbacks += 1;
        if fallback_order < PB_ORDER {
            self.fragmenting_fallbacks += 1;
        }
        if claimed {
            self.claims += 1;
        }
        if start.is_kernel() && fmt == Mt::Movable {
            self.kernel_in_movable += 1;
        }
        if start == Mt::Movable && fmt.is_kernel() {
            self.movable_in_kernel += 1;
        }
    }

    /// mmtests' compaction cost model (millions), with the free-scanner term
    /// that mmtests drops by a typo restored (REF §8.5).
    pub fn compaction_cost(&self) -> f64 {
        (7.0 * self.migrate_scanned as f64
            + 7.0 * self.free_scanned as f64
            + 19.0 * self.isolated as f64
            + 1038.0 * self.migrated as f64
            + 14.0 * self.migrate_failed as f64)
            / 1e6
    }
}

/// How hard an allocation may try (the gfp flags that matter here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocMode {
    /// GFP_KERNEL / GFP_HIGHUSER_MOVABLE: kswapd, direct reclaim and, for
    /// costly orders, direct compaction (async, then sync light).
    Normal,
    /// GFP_ALLOC_LIKE_HUGETLB (`__GFP_REPEAT`): as Normal with sync compaction
    /// between reclaim rounds.
    Hugetlb,
    /// GFP_ALLOC_LIKE_THP: no kswapd, no reclaim, one async compaction.
    Thp,
    /// Fast path only.
    NoWait,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    pub order: u8,
    pub mt: Mt,
    /// On the LRU: reclaim may free it (page cache, reclaimable slab).
    pub lru: bool,
    pub mode: AllocMode,
}

impl Req {
    pub fn new(order: u8, mt: Mt) -> Req {
        Req {
            order,
            mt,
            lru: false,
            mode: AllocMode::Normal,
        }
    }
    pub fn lru(mut self) -> Req {
        self.lru = true;
        self
    }
    pub fn mode(mut self, m: AllocMode) -> Req {
        self.mode = m;
        self
    }
}

/// Compaction priority (REF §7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactMode {
    Async,
    SyncLight,
    /// `compact_memory` / kcompactd: whole zone, skip hints ignored.
    Full,
}

/// A live allocation. Stale once freed or reclaimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Handle {
    slot: u32,
    gen: u32,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    zone: u16,
    live: bool,
    pfn: u32,
    gen: u32,
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub policy: PolicyKind,
    pub seed: u64,
    /// Verify every invariant after every event (slow; tests).
    pub check: bool,
    /// `min_free_kbytes`; None: the kernel's sqrt(16 × lowmem KB) in [128, 65536].
    pub min_free_kbytes: Option<u64>,
}

impl SimConfig {
    pub fn new(policy: PolicyKind, seed: u64) -> SimConfig {
        SimConfig {
            policy,
            seed,
            check: false,
            min_free_kbytes: None,
        }
    }
}

/// Outcome of one compaction run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactResult {
    Skipped,
    Deferred,
    Success,
    Complete,
}

pub struct Sim {
    pub zones: Vec<Zone>,
    zonelist: Vec<usize>,
    multi_zone: bool,
    policy: Box<dyn Policy>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    lru: VecDeque<Handle>,
    lru_live: usize,
    pub stats: Stats,
    pub check: bool,
    live_pages: u64,
    kcompactd_backoff: u32,
}

impl Sim {
    /// Zones without managed pages (empty Movable, DMA on some machines) are left out.
    pub fn new(specs: &[ZoneSpec], cfg: &SimConfig) -> Sim {
        let specs: Vec<&ZoneSpec> = specs.iter().filter(|s| s.managed > 0).collect();
        let managed: u64 = specs.iter().map(|s| s.managed).sum();
        let min_kb = cfg
            .min_free_kbytes
            .unwrap_or_else(|| (((managed * 4 * 16) as f64).sqrt() as u64).clamp(128, 65536));
        let min_pages = min_kb / 4;
        let zones: Vec<Zone> = specs
            .iter()
            .enumerate()
            .map(|(zi, s)| {
                let share = (min_pages as u128 * s.managed as u128 / managed.max(1) as u128) as u64;
                let mut z = Zone::new(s, share);
                z.id = zi;
                z.mixed_to_movable_on_merge = cfg.policy == PolicyKind::Illuminator;
                z
            })
            .collect();
        // Zonelist: highest zone first (Normal, then DMA32, then DMA).
        let mut zonelist: Vec<usize> = (0..zones.len()).collect();
        zonelist.sort_by_key(|&i| std::cmp::Reverse(zones[i].start_pfn));
        let multi_zone =
            zones.iter().any(|z| z.name == "Normal") && zones.iter().any(|z| z.name == "DMA32");
        Sim {
            zones,
            zonelist,
            multi_zone,
            policy: cfg.policy.build(cfg.seed),
            slots: Vec::new(),
            free_slots: Vec::new(),
            lru: VecDeque::new(),
            lru_live: 0,
            stats: Stats::default(),
            check: cfg.check,
            live_pages: 0,
            kcompactd_backoff: 0,
        }
    }

    /// One Normal zone of `pages` pages.
    pub fn with_pages(pages: u64, cfg: &SimConfig) -> Sim {
        Sim::new(&[ZoneSpec::normal(pages)], cfg)
    }

    pub fn policy_kind(&self) -> PolicyKind {
        self.policy.kind()
    }

    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    pub fn managed_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.managed()).sum()
    }

    pub fn free_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.free_pages).sum()
    }

    /// Pages held by live allocations (reserved pages excluded).
    pub fn live_pages(&self) -> u64 {
        self.live_pages
    }

    pub fn is_live(&self, h: Handle) -> bool {
        let s = &self.slots[h.slot as usize];
        s.live && s.gen == h.gen
    }

    /// Where a live allocation sits: (zone index, pfn within the zone).
    pub fn location(&self, h: Handle) -> Option<(usize, u32)> {
        self.is_live(h).then(|| {
            let s = &self.slots[h.slot as usize];
            (s.zone as usize, s.pfn)
        })
    }

    // ---- allocation ----

    /// Allocates per `req`; None when the request fails (OOM for order 0).
    pub fn alloc(&mut self, req: Req) -> Option<Handle> {
        self.stats.allocs += 1;
        let r = self.alloc_inner(req);
        let h = r.map(|(zi, pfn)| {
            let slot = match self.free_slots.pop() {
                Some(s) => s,
                None => {
                    self.slots.push(Slot {
                        zone: 0,
                        live: false,
                        pfn: 0,
                        gen: 0,
                    });
                    (self.slots.len() - 1) as u32
                }
            };
            let s = &mut self.slots[slot as usize];
            s.zone = zi as u16;
            s.pfn = pfn;
            s.live = true;
            let h = Handle { slot, gen: s.gen };
            self.zones[zi].mark_alloc(pfn, req.order, req.mt, slot);
            self.live_pages += 1 << req.order;
            if req.lru {
                self.lru.push_back(h);
                self.lru_live += 1;
            }
            h
        });
        if h.is_none() {
            self.stats.alloc_fail += 1;
        }
        if req.mode == AllocMode::Thp {
            self.stats.thp_attempts += 1;
            self.stats.thp_success += h.is_some() as u64;
        }
        for w in self.policy.take_deferred() {
            self.aaf_work(w);
        }
        if req.mode != AllocMode::Thp && req.mode != AllocMode::NoWait {
            let need = self
                .zones
                .iter()
                .any(|z| z.boost > 0 || z.free_pages < z.wmark[WMARK_LOW]);
            if need {
                self.kswapd();
            }
        }
        if self.check {
            if let Err(e) = self.check_invariants() {
                panic!("after alloc {req:?}: {e}");
            }
        }
        h
    }

    fn try_zones(&mut self, req: Req, wm: usize, nf: bool) -> Option<(usize, u32)> {
        for i in 0..self.zonelist.len() {
            let zi = self.zonelist[i];
            let z = &mut self.zones[zi];
            if !z.watermark_ok(req.order, z.wmark[wm]) {
                continue;
            }
            if let Some(p) = self
                .policy
                .rmqueue(z, req.order, req.mt, nf, &mut self.stats)
            {
                return Some((zi, p));
            }
        }
        None
    }

    fn alloc_inner(&mut self, req: Req) -> Option<(usize, u32)> {
        let nf = self.policy.nofragment(self.multi_zone);
        let defrag = self.policy.defrag_mode();
        if let Some(r) = self.try_zones(req, WMARK_LOW, nf) {
            return Some(r);
        }
        // Gorman 2018: without defrag_mode NOFRAGMENT is only a first pass.
        let nf = nf && defrag;
        if !defrag && self.policy.nofragment(self.multi_zone) {
            if let Some(r) = self.try_zones(req, WMARK_LOW, false) {
                return Some(r);
            }
        }
        if req.mode == AllocMode::NoWait {
            return None;
        }
        if req.mode != AllocMode::Thp {
            self.kswapd();
        }
        if let Some(r) = self.try_zones(req, WMARK_MIN, nf) {
            return Some(r);
        }
        // defrag_mode compacts whole blocks for non-movable requests.
        let corder = if defrag && req.mt != Mt::Movable {
            req.order.max(PB_ORDER)
        } else {
            req.order
        };
        if req.order > COSTLY_ORDER || (defrag && req.mt != Mt::Movable) {
            if let Some(r) = self.direct_compact(req, corder, CompactMode::Async, nf) {
                return Some(r);
            }
        }
        if req.mode == AllocMode::Thp {
            return None;
        }
        // Costly orders retry only with __GFP_REPEAT (hugetlb-like).
        let rounds = match (req.order > COSTLY_ORDER, req.mode) {
            (false, _) => 16,
            (true, AllocMode::Hugetlb) => 4,
            (true, _) => 1,
        };
        for _ in 0..rounds {
            self.stats.direct_reclaim += 1;
            let freed = self.reclaim(32u64.max(2 << req.order));
            if let Some(r) = self.try_zones(req, WMARK_MIN, nf) {
                return Some(r);
            }
            if req.order > COSTLY_ORDER || (defrag && req.mt != Mt::Movable) {
                let mode = if req.mode == AllocMode::Hugetlb {
                    CompactMode::SyncLight
                } else {
                    CompactMode::Async
                };
                if let Some(r) = self.direct_compact(req, corder, mode, nf) {
                    return Some(r);
                }
            }
            if freed == 0 {
                break;
            }
        }
        if defrag {
            // Last resort before OOM: fallbacks are allowed again.
            return self.try_zones(req, WMARK_MIN, false);
        }
        None
    }

    fn direct_compact(
        &mut self,
        req: Req,
        corder: u8,
        mode: CompactMode,
        nf: bool,
    ) -> Option<(usize, u32)> {
        for i in 0..self.zonelist.len() {
            let zi = self.zonelist[i];
            let r = self.compact_zone(zi, corder, req.mt, mode, true);
            if matches!(r, CompactResult::Skipped | CompactResult::Deferred) {
                continue;
            }
            if let Some(x) = self.try_zones(req, WMARK_MIN, nf) {
                self.stats.compact_success += 1;
                self.defer_reset(zi, corder);
                return Some(x);
            }
            self.stats.compact_fail += 1;
            self.defer_compaction(zi, corder);
        }
        None
    }

    // ---- free and reclaim ----

    /// Frees a live allocation; false if the handle is stale.
    pub fn free(&mut self, h: Handle) -> bool {
        if !self.is_live(h) {
            return false;
        }
        self.release(h);
        self.stats.frees += 1;
        if self.check {
            if let Err(e) = self.check_invariants() {
                panic!("after free: {e}");
            }
        }
        true
    }

    fn release(&mut self, h: Handle) {
        let s = self.slots[h.slot as usize];
        let z = &mut self.zones[s.zone as usize];
        let (order, _, _) = z.unmark_alloc(s.pfn);
        z.free_one(s.pfn, order);
        self.policy.after_free(z, Zone::block_of(s.pfn));
        self.live_pages -= 1 << order;
        let sl = &mut self.slots[h.slot as usize];
        sl.live = false;
        sl.gen = sl.gen.wrapping_add(1);
        self.free_slots.push(h.slot);
    }

    /// Frees LRU allocations, oldest first, until `pages` pages are freed or
    /// the LRU is empty. Returns the pages freed.
    pub fn reclaim(&mut self, pages: u64) -> u64 {
        let mut freed = 0;
        while freed < pages {
            let Some(h) = self.lru.pop_front() else { break };
            if !self.is_live(h) {
                continue;
            }
            self.lru_live -= 1;
            let s = self.slots[h.slot as usize];
            let (order, _, _) = self.zones[s.zone as usize]
                .alloc_at(s.pfn)
                .expect("live handle");
            self.release(h);
            freed += 1 << order;
        }
        self.stats.reclaimed += freed;
        if self.lru.len() > 2 * self.lru_live + 4096 {
            let slots = &self.slots;
            self.lru.retain(|h| {
                let s = &slots[h.slot as usize];
                s.live && s.gen == h.gen
            });
        }
        freed
    }

    /// Reclaims every LRU page (drop_caches / the dd flush of stress-highalloc).
    pub fn drop_caches(&mut self) -> u64 {
        self.reclaim(u64::MAX)
    }

    /// kswapd: reclaim until every zone is above high (+ boost); under
    /// defrag_mode the target counts whole free pageblocks only, and kcompactd
    /// runs when reclaim alone does not produce them.
    fn kswapd(&mut self) {
        self.stats.kswapd_wakes += 1;
        let defrag = self.policy.defrag_mode();
        for zi in 0..self.zones.len() {
            let target = self.zones[zi].wmark[WMARK_HIGH] + self.zones[zi].boost;
            let mut budget = target.saturating_mul(2) + PB_PAGES as u64;
            while self.zones[zi].free_pages < target && budget > 0 {
                let n = self.reclaim(32);
                if n == 0 {
                    break;
                }
                budget = budget.saturating_sub(n);
            }
            if defrag && self.zones[zi].free_pages_blocks() < self.zones[zi].wmark[WMARK_HIGH] {
                // kcompactd: one whole-zone pass; when it gains nothing it
                // backs off (500 ms << 6 in the kernel; here 64 wake-ups).
                if self.kcompactd_backoff > 0 {
                    self.kcompactd_backoff -= 1;
                } else {
                    let before = self.zones[zi].free_pages_blocks();
                    self.compact_zone(zi, PB_ORDER, Mt::Movable, CompactMode::Full, false);
                    if self.zones[zi].free_pages_blocks() <= before {
                        self.kcompactd_backoff = 64;
                    }
                }
            }
            self.zones[zi].boost = 0;
        }
    }

    // ---- AAF ----

    fn aaf_work(&mut self, w: AafWork) {
        let zi = w.zone;
        let blk = self.zones[zi].blocks[w.block];
        let count = blk.movable();
        if count == 0 || w.moved + count < PB_PAGES / 2 {
            return;
        }
        self.zones[zi].blocks[w.block].mt = w.start;
        self.zones[zi].move_freepages_block(w.block, w.start);
        let mut sources = Vec::new();
        self.zones[zi].walk_block(w.block, |pfn, e| {
            if let Entry::Alloc(o, Mt::Movable, slot) = e {
                if slot != NIL && o < PB_ORDER {
                    sources.push((pfn, o));
                }
            }
        });
        for (pfn, o) in sources {
            let Some(to) = self.zones[zi].rmqueue_smallest(o, Mt::Movable) else {
                self.stats.migrate_failed += 1;
                break;
            };
            self.migrate(zi, pfn, to);
            self.stats.aaf_migrated += 1 << o;
        }
        self.zones[zi].move_freepages_block(w.block, w.start);
        self.stats.aaf_converted += 1;
    }

    /// Moves the allocation at `from` to the already-taken block at `to`.
    fn migrate(&mut self, zi: usize, from: u32, to: u32) {
        let z = &mut self.zones[zi];
        let (order, mt, slot) = z.unmark_alloc(from);
        z.mark_alloc(to, order, mt, slot);
        self.slots[slot as usize].pfn = to;
        z.free_one(from, order);
        self.policy.after_free(z, Zone::block_of(from));
    }

    // ---- compaction ----

    fn defer_compaction(&mut self, zi: usize, order: u8) {
        let c = &mut self.zones[zi].compact;
        c.considered = 0;
        c.defer_shift = (c.defer_shift + 1).min(6);
        c.order_failed = c.order_failed.min(order);
    }

    fn defer_reset(&mut self, zi: usize, order: u8) {
        let c = &mut self.zones[zi].compact;
        c.considered = 0;
        c.defer_shift = 0;
        if order >= c.order_failed {
            c.order_failed = order + 1;
        }
    }

    fn deferred(&mut self, zi: usize, order: u8) -> bool {
        let c = &mut self.zones[zi].compact;
        if order < c.order_failed {
            return false;
        }
        c.considered += 1;
        c.considered < (1 << c.defer_shift)
    }

    /// Kernel's `compact_memory`: full compaction of every zone.
    pub fn compact_all(&mut self) {
        for zi in 0..self.zones.len() {
            self.compact_zone(zi, PB_ORDER, Mt::Movable, CompactMode::Full, false);
        }
    }

    /// `compact_zone()`: the migrate scanner walks up from the zone start (or
    /// its cached position), the free scanner down from the end; movable
    /// allocations move from source blocks into free pages isolated from
    /// target blocks, until the scanners meet or (direct compaction) a free
    /// block of `order` exists.
    pub fn compact_zone(
        &mut self,
        zi: usize,
        order: u8,
        req_mt: Mt,
        mode: CompactMode,
        direct: bool,
    ) -> CompactResult {
        if direct {
            if self.deferred(zi, order) {
                self.stats.compact_deferred += 1;
                return CompactResult::Deferred;
            }
            // compaction_suitable(): enough free memory to migrate into, and
            // for costly orders a failure due to fragmentation, not shortage
            // (fragindex above extfrag_threshold 500).
            let z = &self.zones[zi];
            if z.free_pages < z.wmark[WMARK_LOW] + (2u64 << order) {
                return CompactResult::Skipped;
            }
            if order > COSTLY_ORDER {
                let fi = crate::metrics::fragmentation_index(&z.buddyinfo(), order);
                if (0..=500).contains(&fi) {
                    return CompactResult::Skipped;
                }
            }
            if z.has_free_ge(order) {
                return CompactResult::Success;
            }
            self.stats.compact_stall += 1;
        }
        let full = mode == CompactMode::Full;
        let (mut migrate_pfn, mut free_pfn) = if full {
            (0, self.zones[zi].last_block_start())
        } else {
            (
                self.zones[zi].compact.migrate_pfn,
                self.zones[zi].compact.free_pfn,
            )
        };
        let mut pool: Vec<(u32, u8)> = Vec::new();
        let mut result = CompactResult::Complete;
        'blocks: loop {
            if direct && self.zones[zi].has_free_ge(order) {
                result = CompactResult::Success;
                break;
            }
            if (free_pfn >> PB_ORDER) <= (migrate_pfn >> PB_ORDER) {
                break;
            }
            let b = Zone::block_of(migrate_pfn);
            migrate_pfn = (b as u32 + 1) << PB_ORDER;
            let blk = self.zones[zi].blocks[b];
            if (blk.skip && !full)
                || blk.movable() == 0
                || !self.policy.source_ok(&blk, order, req_mt, mode)
            {
                continue;
            }
            // Walk the block; async direct compaction gives up on a block at
            // its first page that cannot be migrated (skip_on_failure).
            let mut sources = Vec::new();
            let mut abandon = false;
            let mut scanned = 0u64;
            self.zones[zi].walk_block(b, |pfn, e| {
                if abandon {
                    return;
                }
                scanned += 1;
                match e {
                    Entry::Alloc(o, Mt::Movable, slot)
                        if slot != NIL && o < order.max(1) && o < PB_ORDER =>
                    {
                        sources.push((pfn, o))
                    }
                    Entry::Alloc(..) if mode == CompactMode::Async && direct => abandon = true,
                    _ => {}
                }
            });
            self.stats.migrate_scanned += scanned;
            if abandon {
                if mode == CompactMode::Async {
                    self.zones[zi].blocks[b].skip = true;
                }
                continue;
            }
            self.stats.isolated += sources.len() as u64;
            let mut moved_any = false;
            for (pfn, o) in sources {
                let target = loop {
                    if let Some(i) = pool.iter().rposition(|&(_, po)| po >= o) {
                        let (tp, mut po) = pool.swap_remove(i);
                        while po > o {
                            po -= 1;
                            pool.push((tp + (1 << po), po));
                        }
                        break Some(tp);
                    }
                    // isolate_freepages(): the next suitable target block down.
                    let mut got = false;
                    while free_pfn >= migrate_pfn {
                        let fb = Zone::block_of(free_pfn);
                        free_pfn = free_pfn.saturating_sub(PB_PAGES);
                        let tb = self.zones[zi].blocks[fb];
                        if (tb.skip && !full)
                            || tb.free == 0
                            || tb.free as u32 == PB_PAGES
                            || !self.policy.target_ok(&tb)
                        {
                            continue;
                        }
                        let mut heads = Vec::new();
                        let n = self.zones[zi].walk_block(fb, |p, e| {
                            if let Entry::Free(fo) = e {
                                heads.push((p, fo))
                            }
                        });
                        self.stats.free_scanned += n as u64;
                        for (p, fo) in heads {
                            self.zones[zi].del_free(p);
                            pool.push((p, fo));
                        }
                        got = true;
                        break;
                    }
                    if !got {
                        break None;
                    }
                };
                let Some(to) = target else {
                    self.stats.migrate_failed += 1;
                    break 'blocks;
                };
                let z = &mut self.zones[zi];
                let (so, mt, slot) = z.unmark_alloc(pfn);
                z.mark_alloc(to, so, mt, slot);
                self.slots[slot as usize].pfn = to;
                z.free_one(pfn, so);
                self.policy.after_free(z, b);
                self.stats.migrated += 1 << so;
                moved_any = true;
            }
            if !moved_any && mode == CompactMode::Async {
                self.zones[zi].blocks[b].skip = true;
            }
        }
        // Unused isolated free pages go back to the buddy lists.
        for (p, o) in pool {
            self.zones[zi].free_one(p, o);
        }
        let z = &mut self.zones[zi];
        if (free_pfn >> PB_ORDER) <= (migrate_pfn >> PB_ORDER) || full {
            // A full pass: reset the cached positions and the skip hints.
            z.compact.migrate_pfn = 0;
            z.compact.free_pfn = z.last_block_start();
            for blk in z.blocks.iter_mut() {
                blk.skip = false;
            }
        } else {
            z.compact.migrate_pfn = migrate_pfn;
            z.compact.free_pfn = free_pfn;
        }
        if direct && z.has_free_ge(order) {
            result = CompactResult::Success;
        }
        if self.check {
            if let Err(e) = self.check_invariants() {
                panic!("after compaction: {e}");
            }
        }
        result
    }

    // ---- invariants ----

    /// Every page is free in exactly one buddy or part of exactly one
    /// allocation; counters, lists and handles agree.
    pub fn check_invariants(&self) -> Result<(), String> {
        for z in &self.zones {
            z.check()?;
        }
        let mut live = 0u64;
        for (i, s) in self.slots.iter().enumerate() {
            if !s.live {
                continue;
            }
            let z = &self.zones[s.zone as usize];
            match z.alloc_at(s.pfn) {
                Some((o, _, slot)) if slot == i as u32 => live += 1 << o,
                _ => {
                    return Err(format!(
                        "handle {i} points at pfn {} which is not its allocation",
                        s.pfn
                    ))
                }
            }
        }
        if live != self.live_pages {
            return Err(format!(
                "live pages {} but handles hold {live}",
                self.live_pages
            ));
        }
        let reserved: u64 = self.zones.iter().map(|z| z.reserved as u64).sum();
        let total: u64 = self.zones.iter().map(|z| z.pages as u64).sum();
        if self.free_pages() + live + reserved != total {
            return Err(format!(
                "free {} + allocated {live} + reserved {reserved} != {total} pages",
                self.free_pages()
            ));
        }
        Ok(())
    }
}
