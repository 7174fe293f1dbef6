//! The shared pool against per-allocation hugetlb pages (seed 002, Noronha &
//! Panda: one preallocated huge-page pool shared by all threads), worked out
//! from the allocation log of the reference input.
//!
//! Per allocation, the runtime library maps each owned block's whole 2 MB pages
//! with hugetlb (a head) and the rest on 4 KB pages (a tail): every fresh block
//! faults its pages on first touch (zeroing them), its mapping calls take the
//! mm's lock for writing (the program's other threads wait), and a block freed
//! and allocated again faults again. With `pool hugetlb-2m N` the library maps
//! and populates N pages once at start-up (serially, on one thread, counted in
//! the run), blocks of at least one page take runs of ceil(S / P) pages (first
//! fit under one lock) and give them back when freed: reuse costs nothing
//! (calloc clears the bytes it asked for in reused pages), but the pool holds
//! its N pages for the whole run, and a block that finds no run long enough
//! falls back to per-allocation pages.
//!
//! Invariants: events are in program order (the log's sequence); a block is
//! known by its start address while live; `first_fit_pages` is exactly the
//! extent the runtime's first fit (runtime/src/pool.c) reaches on this order,
//! so a pool of that size serves every block of this order.

use crate::cost::CostModel;
use crate::page::{Backing, SIZE_2M};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Time of the mapping calls of one per-allocation block: the hugetlb head
/// and the ordinary mapping, the move of the head into it, and the unmap at
/// free. Measured here (2026-11-27, the reference KVM guest): 20 000 rounds of
/// mmap 8 MiB + mmap 4 MiB + mremap(MREMAP_FIXED) + munmap took 9.9 us each.
pub const MAP_CALLS_NS: f64 = 10_000.0;

const PAGE_4K: u64 = 4096;

/// One allocation event of memory the pool could hold (blocks of at least one
/// pool page, and the frees and reallocs of such blocks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PoolOp {
    Alloc { addr: u64, size: u64, zeroed: bool },
    Free { addr: u64 },
    Realloc { old: u64, addr: u64, size: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolEvent {
    pub tid: u32,
    pub op: PoolOp,
    /// The allocation's site (module path, offset), for plans by site.
    pub site: Option<(String, u64)>,
}

/// The pool-relevant part of one process's allocation log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolTrace {
    /// Distinct threads seen in the log (any record).
    pub threads: u32,
    pub events: Vec<PoolEvent>,
}

/// Which blocks a plan puts on `hugetlb-2m`: heap-large from the threshold on,
/// and the planned sites (a site's own backing wins over heap-large's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolScope {
    pub heap_large: bool,
    pub threshold: u64,
    /// Sites planned on `hugetlb-2m`.
    pub sites_in: Vec<(String, u64)>,
    /// Sites planned on another backing.
    pub sites_out: Vec<(String, u64)>,
}

impl PoolScope {
    fn covers(&self, size: u64, site: &Option<(String, u64)>) -> bool {
        if let Some(s) = site {
            if self.sites_in.contains(s) {
                return true;
            }
            if self.sites_out.contains(s) {
                return false;
            }
        }
        self.heap_large && size >= self.threshold
    }

    pub fn is_empty(&self) -> bool {
        !self.heap_large && self.sites_in.is_empty()
    }
}

/// What the log says about the blocks a pool would hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolProfile {
    /// Allocations (and reallocs that move) of at least one pool page.
    pub blocks: u64,
    /// Pool pages they take in all: sum of ceil(S / P).
    pub pages_taken: u64,
    /// Per allocation: fresh 2 MB pages faulted (the blocks' heads; a realloc
    /// counts its new pages only).
    pub head_faults: u64,
    /// Per allocation: 4 KB pages of the blocks' tails faulted.
    pub tail_faults: u64,
    /// Most pool pages live at once.
    pub peak_pages: u64,
    /// Per allocation: most head pages live at once (what the plan's
    /// prediction counts for these blocks), summed over the processes.
    pub peak_head_pages: u64,
    /// The pool first fit needs on this order of events (its highest page + 1).
    pub first_fit_pages: u64,
    /// The largest block, in pool pages.
    pub largest_block_pages: u64,
    /// calloc'd bytes handed out in pool pages used before (cleared by memset).
    pub reused_zeroed_bytes: u64,
    /// Threads the allocation log shows (those that called the allocator;
    /// the most in one process).
    pub threads: u32,
    /// Processes with blocks for the pool (each maps a pool of its own).
    pub processes: u32,
}

impl PoolProfile {
    /// Pool pages to plan: first fit's extent, plus the largest block when
    /// several threads allocate (their order changes from run to run, so a
    /// block may find the pages it had here still taken).
    pub fn pool_pages(&self) -> u64 {
        if self.blocks == 0 {
            return 0;
        }
        let slack = if self.threads > 1 {
            self.largest_block_pages
        } else {
            0
        };
        self.first_fit_pages.max(self.peak_pages) + slack
    }

    /// Pool pages of all the processes (each maps its own pool).
    pub fn all_pool_pages(&self) -> u64 {
        self.pool_pages() * u64::from(self.processes.max(1))
    }

    /// Pages the pool gives out more than once (its reason to exist).
    pub fn reused_pages(&self) -> u64 {
        self.pages_taken.saturating_sub(self.pool_pages())
    }
}

fn pages_of(size: u64) -> u64 {
    size.max(1).div_ceil(SIZE_2M)
}

/// The runtime's first-fit pool (runtime/src/pool.c) without a size limit:
/// live runs by start page.
#[derive(Default)]
struct FirstFit {
    runs: BTreeMap<u64, u64>,
    extent: u64,
    /// Pages below this were handed out before (dirty).
    high_water: u64,
}

impl FirstFit {
    fn take(&mut self, k: u64) -> u64 {
        let mut at = 0;
        for (&s, &l) in &self.runs {
            if s >= at + k {
                break;
            }
            at = s + l;
        }
        self.runs.insert(at, k);
        self.extent = self.extent.max(at + k);
        at
    }

    fn give(&mut self, start: u64) {
        self.runs.remove(&start);
    }

    /// Grows the run at `start` from `k` to `k2` pages in place when the pages
    /// after it are free (the runtime's `ht_pool_extend`), or shrinks it.
    fn resize_in_place(&mut self, start: u64, k: u64, k2: u64) -> bool {
        if k2 <= k {
            self.runs.insert(start, k2);
            return true;
        }
        let next = self.runs.range(start + 1..).next().map(|(&s, _)| s);
        if next.is_some_and(|n| n < start + k2) {
            return false;
        }
        self.runs.insert(start, k2);
        self.extent = self.extent.max(start + k2);
        true
    }

    fn dirty(&self, start: u64) -> bool {
        start < self.high_water
    }

    fn touch(&mut self, start: u64, k: u64) {
        self.high_water = self.high_water.max(start + k);
    }
}

struct Live {
    start: u64,
    pages: u64,
    size: u64,
}

/// The profile of the blocks `scope` puts on `hugetlb-2m`, over the logs of
/// all the program's processes (each has a pool of its own: the largest need
/// counts, and `processes` says how many).
pub fn profile(traces: &[PoolTrace], scope: &PoolScope) -> PoolProfile {
    let mut out = PoolProfile::default();
    for t in traces {
        let p = profile_one(t, scope);
        if p.blocks == 0 {
            continue;
        }
        out.processes += 1;
        out.blocks += p.blocks;
        out.pages_taken += p.pages_taken;
        out.head_faults += p.head_faults;
        out.tail_faults += p.tail_faults;
        out.reused_zeroed_bytes += p.reused_zeroed_bytes;
        out.peak_pages = out.peak_pages.max(p.peak_pages);
        out.peak_head_pages += p.peak_head_pages;
        out.first_fit_pages = out.first_fit_pages.max(p.first_fit_pages);
        out.largest_block_pages = out.largest_block_pages.max(p.largest_block_pages);
        out.threads = out.threads.max(p.threads);
    }
    out
}

fn profile_one(t: &PoolTrace, scope: &PoolScope) -> PoolProfile {
    let mut p = PoolProfile {
        threads: t.threads,
        ..PoolProfile::default()
    };
    let mut ff = FirstFit::default();
    let mut live: HashMap<u64, Live> = HashMap::new();
    let (mut live_pages, mut live_heads) = (0u64, 0u64);
    let alloc = |p: &mut PoolProfile,
                 ff: &mut FirstFit,
                 live: &mut HashMap<u64, Live>,
                 addr: u64,
                 size: u64,
                 zeroed: bool,
                 lp: &mut u64,
                 lh: &mut u64| {
        let k = pages_of(size);
        let start = ff.take(k);
        if zeroed && ff.dirty(start) {
            p.reused_zeroed_bytes += size;
        }
        ff.touch(start, k);
        p.blocks += 1;
        p.pages_taken += k;
        p.head_faults += size / SIZE_2M;
        p.tail_faults += (size % SIZE_2M).div_ceil(PAGE_4K);
        p.largest_block_pages = p.largest_block_pages.max(k);
        *lp += k;
        *lh += size / SIZE_2M;
        live.insert(
            addr,
            Live {
                start,
                pages: k,
                size,
            },
        );
    };
    for e in &t.events {
        match e.op {
            PoolOp::Alloc { addr, size, zeroed } => {
                // A block the library would not put in the pool: below one
                // page (head-tail layout) or outside the plan's hugetlb scope.
                if size < SIZE_2M || !scope.covers(size, &e.site) {
                    continue;
                }
                if let Some(old) = live.remove(&addr) {
                    // Its free was not seen: retire it.
                    ff.give(old.start);
                    live_pages -= old.pages;
                    live_heads -= old.size / SIZE_2M;
                }
                alloc(
                    &mut p,
                    &mut ff,
                    &mut live,
                    addr,
                    size,
                    zeroed,
                    &mut live_pages,
                    &mut live_heads,
                );
            }
            PoolOp::Free { addr } => {
                if let Some(old) = live.remove(&addr) {
                    ff.give(old.start);
                    live_pages -= old.pages;
                    live_heads -= old.size / SIZE_2M;
                }
            }
            PoolOp::Realloc { old, addr, size } => {
                let before = live.remove(&old);
                let keep = size >= SIZE_2M && scope.covers(size, &e.site);
                match before {
                    Some(b) if keep => {
                        let k2 = pages_of(size);
                        live_pages -= b.pages;
                        live_heads -= b.size / SIZE_2M;
                        // Per allocation: only the new head pages fault, and
                        // a grown tail.
                        p.head_faults += (size / SIZE_2M).saturating_sub(b.size / SIZE_2M);
                        if size > b.size {
                            p.tail_faults += (size % SIZE_2M).div_ceil(PAGE_4K);
                        }
                        let start = if ff.resize_in_place(b.start, b.pages, k2) {
                            b.start
                        } else {
                            // Copied to a new run, then the old one given back.
                            let s = ff.take(k2);
                            ff.give(b.start);
                            p.blocks += 1;
                            s
                        };
                        ff.touch(start, k2);
                        p.pages_taken += k2.saturating_sub(b.pages);
                        p.largest_block_pages = p.largest_block_pages.max(k2);
                        live_pages += k2;
                        live_heads += size / SIZE_2M;
                        live.insert(
                            addr,
                            Live {
                                start,
                                pages: k2,
                                size,
                            },
                        );
                    }
                    Some(b) => {
                        ff.give(b.start);
                        live_pages -= b.pages;
                        live_heads -= b.size / SIZE_2M;
                    }
                    None if keep => alloc(
                        &mut p,
                        &mut ff,
                        &mut live,
                        addr,
                        size,
                        false,
                        &mut live_pages,
                        &mut live_heads,
                    ),
                    None => {}
                }
            }
        }
        p.peak_pages = p.peak_pages.max(live_pages);
        p.peak_head_pages = p.peak_head_pages.max(live_heads);
    }
    p.first_fit_pages = ff.extent;
    p
}

/// The two ways weighed against each other, in nanoseconds of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolWeighing {
    pub profile: PoolProfile,
    /// `pool hugetlb-2m N`: the pages a pool would have.
    pub pages: u64,
    /// Per allocation: head faults + tail faults + mapping calls (times the
    /// threads that wait behind the mm's lock).
    pub per_allocation_ns: f64,
    /// Pool: populating its pages at start-up (serial) + clearing reused
    /// calloc'd bytes.
    pub pool_ns: f64,
    /// Whether the plan takes the pool.
    pub chosen: bool,
    /// Per-allocation hugetlb pages the pool replaces in the plan's needs.
    pub replaces: u64,
    /// Why, in words (a line of the plan's reasons).
    pub reason: String,
}

fn ms(ns: f64) -> String {
    format!("{:.1} ms", ns / 1e6)
}

/// Weighs the pool against per-allocation pages for `profile` with the
/// calibrated fault costs; the pool is chosen when it saves at least
/// `min_gain` of the run (`native_s`) and some of its pages are reused (a pool
/// whose every page is taken once only moves the faults to start-up and holds
/// the memory for the whole run).
pub fn weigh(
    profile: &PoolProfile,
    cost: &CostModel,
    native_s: f64,
    min_gain: f64,
) -> PoolWeighing {
    let n = profile.pool_pages();
    let f2m = cost.fault(Backing::Hugetlb2m);
    let f4k = cost.fault(Backing::Base4k);
    let threads = profile.threads.max(1) as f64;
    let per_allocation_ns = profile.head_faults as f64 * f2m
        + profile.tail_faults as f64 * f4k
        + profile.blocks as f64 * MAP_CALLS_NS * threads;
    // Clearing costs what zeroing costs in a fault, per byte.
    let pool_ns = n as f64 * f2m + profile.reused_zeroed_bytes as f64 * f2m / SIZE_2M as f64;
    let gain = per_allocation_ns - pool_ns;
    let bar = min_gain * native_s * 1e9;
    let held = crate::page::SIZE_2M * n;
    let pool_words = format!(
        "`pool hugetlb-2m {n}` (peak {} live pages{}{}) populates its pages once at start-up, \
         serially ({}), and serves {} block(s) taking {} pages, holding {} MiB for the whole run",
        profile.peak_pages,
        if profile.first_fit_pages > profile.peak_pages {
            format!(
                ", {} for first-fit fragmentation",
                profile.first_fit_pages - profile.peak_pages
            )
        } else {
            String::new()
        },
        if profile.threads > 1 && n > profile.first_fit_pages.max(profile.peak_pages) {
            format!(
                ", {} of slack for {} threads' changing order",
                n - profile.first_fit_pages.max(profile.peak_pages),
                profile.threads
            )
        } else {
            String::new()
        },
        ms(pool_ns),
        profile.blocks,
        profile.pages_taken,
        held >> 20
    );
    let per_words = format!(
        "per allocation {} x 2 MB + {} x 4 KB first-touch faults and {} blocks' mapping calls \
         with {} thread(s) waiting on the mm lock ({})",
        profile.head_faults,
        profile.tail_faults,
        profile.blocks,
        profile.threads.max(1),
        ms(per_allocation_ns)
    );
    let (chosen, reason) = if profile.blocks == 0 {
        (
            false,
            "pool vs per-allocation: per-allocation pages: no planned hugetlb block is a whole \
             2 MB page or more (the pool takes none)"
                .to_string(),
        )
    } else if profile.reused_pages() == 0 {
        (
            false,
            format!(
                "pool vs per-allocation: per-allocation pages: the program allocates its blocks \
                 once ({} block(s), {} pages, none freed and allocated again): a pool would only \
                 move their faults to start-up and hold {} MiB for the whole run",
                profile.blocks,
                profile.pages_taken,
                held >> 20
            ),
        )
    } else if gain < bar || gain <= 0.0 {
        (
            false,
            format!(
                "pool vs per-allocation: per-allocation pages: the pool would save {} ({}; {}), \
                 below {:.1}% of the run time",
                ms(gain.max(0.0)),
                per_words,
                pool_words,
                min_gain * 100.0
            ),
        )
    } else {
        (
            true,
            format!(
                "pool vs per-allocation: shared pool chosen, saving {} ({:.1}% of the run): {}; \
                 against {}",
                ms(gain),
                100.0 * gain / (native_s * 1e9).max(1.0),
                pool_words,
                per_words
            ),
        )
    };
    PoolWeighing {
        profile: profile.clone(),
        pages: n,
        per_allocation_ns,
        pool_ns,
        chosen,
        replaces: profile.peak_head_pages,
        reason,
    }
}

/// Builds a process's [`PoolTrace`] from its allocation calls in program
/// order, keeping only blocks of at least one pool page and what happens to
/// them.
#[derive(Default)]
pub struct TraceBuilder {
    trace: PoolTrace,
    tids: HashSet<u32>,
    tracked: HashSet<u64>,
}

impl TraceBuilder {
    /// Any record of the log (threads are counted from all of them).
    pub fn thread(&mut self, tid: u32) {
        self.tids.insert(tid);
    }

    pub fn alloc(
        &mut self,
        tid: u32,
        addr: u64,
        size: u64,
        zeroed: bool,
        site: Option<(String, u64)>,
    ) {
        self.thread(tid);
        if addr == 0 || size < SIZE_2M {
            return;
        }
        self.tracked.insert(addr);
        self.trace.events.push(PoolEvent {
            tid,
            op: PoolOp::Alloc { addr, size, zeroed },
            site,
        });
    }

    pub fn free(&mut self, tid: u32, addr: u64) {
        self.thread(tid);
        if self.tracked.remove(&addr) {
            self.trace.events.push(PoolEvent {
                tid,
                op: PoolOp::Free { addr },
                site: None,
            });
        }
    }

    pub fn realloc(
        &mut self,
        tid: u32,
        old: u64,
        addr: u64,
        size: u64,
        site: Option<(String, u64)>,
    ) {
        self.thread(tid);
        let had = old != 0 && self.tracked.remove(&old);
        if addr == 0 {
            // A failed realloc leaves the old block as it was.
            if had {
                self.tracked.insert(old);
            }
            return;
        }
        if !had && size < SIZE_2M {
            return;
        }
        if size >= SIZE_2M {
            self.tracked.insert(addr);
        }
        self.trace.events.push(PoolEvent {
            tid,
            op: PoolOp::Realloc { old, addr, size },
            site,
        });
    }

    pub fn finish(mut self) -> PoolTrace {
        self.trace.threads = self.tids.len() as u32;
        self.trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M2: u64 = SIZE_2M;

    fn heap_large() -> PoolScope {
        PoolScope {
            heap_large: true,
            threshold: 128 << 10,
            ..PoolScope::default()
        }
    }

    /// `n` rounds of: every thread allocates a block of `pages` x 2 MB + 1,
    /// then frees it.
    pub(crate) fn churn(threads: u32, rounds: u32, pages: u64) -> PoolTrace {
        let mut b = TraceBuilder::default();
        for r in 0..rounds {
            for t in 0..threads {
                b.alloc(
                    t,
                    0x1000_0000 * (t as u64 + 1) + r as u64 * 0x10_0000_0000,
                    pages * M2 + 1,
                    false,
                    None,
                );
            }
            for t in 0..threads {
                b.free(t, 0x1000_0000 * (t as u64 + 1) + r as u64 * 0x10_0000_0000);
            }
        }
        b.finish()
    }

    #[test]
    fn first_fit_extent_and_peak_follow_the_log() {
        // Two threads, 10 rounds of 3 x 2 MB + 1 (4 pool pages each).
        let p = profile(&[churn(2, 10, 3)], &heap_large());
        assert_eq!(p.blocks, 20);
        assert_eq!(p.pages_taken, 80);
        assert_eq!(p.peak_pages, 8);
        assert_eq!(p.first_fit_pages, 8);
        assert_eq!(p.head_faults, 60);
        assert_eq!(p.tail_faults, 20);
        assert_eq!(p.threads, 2);
        // Slack of the largest block for the second thread's order.
        assert_eq!(p.pool_pages(), 12);
        assert_eq!(p.reused_pages(), 68);
    }

    #[test]
    fn first_fit_fragmentation_needs_more_than_the_peak() {
        // a(2) b(2) live; free a; c(3) does not fit in a's hole: extent 7
        // although at most 5 pages are live.
        let mut t = TraceBuilder::default();
        t.alloc(1, 0xa000_0000, 2 * M2, false, None);
        t.alloc(1, 0xb000_0000, 2 * M2, false, None);
        t.free(1, 0xa000_0000);
        t.alloc(1, 0xc000_0000, 3 * M2, true, None);
        t.alloc(1, 0xd000_0000, 2 * M2, true, None);
        let p = profile(&[t.finish()], &heap_large());
        assert_eq!(p.peak_pages, 7);
        assert_eq!(p.first_fit_pages, 7);
        // d reused a's dirty pages: its calloc clears them.
        assert_eq!(p.reused_zeroed_bytes, 2 * M2);
        let mut t = TraceBuilder::default();
        t.alloc(1, 0xa000_0000, 2 * M2, false, None);
        t.alloc(1, 0xb000_0000, 2 * M2, false, None);
        t.free(1, 0xa000_0000);
        t.alloc(1, 0xc000_0000, 3 * M2, false, None);
        let p = profile(&[t.finish()], &heap_large());
        assert_eq!((p.peak_pages, p.first_fit_pages), (5, 7));
        assert_eq!(p.pool_pages(), 7);
    }

    #[test]
    fn blocks_below_a_page_or_out_of_scope_take_no_pool() {
        let mut t = TraceBuilder::default();
        t.alloc(1, 0xa000_0000, M2 - 1, false, None);
        t.alloc(1, 0xb000_0000, 4 * M2, false, Some(("/p".into(), 0x10)));
        let tr = t.finish();
        let mut scope = heap_large();
        assert_eq!(profile(std::slice::from_ref(&tr), &scope).blocks, 1);
        scope.sites_out.push(("/p".into(), 0x10));
        assert_eq!(profile(std::slice::from_ref(&tr), &scope).blocks, 0);
        let sites = PoolScope {
            sites_in: vec![("/p".into(), 0x10)],
            ..PoolScope::default()
        };
        assert_eq!(profile(&[tr], &sites).pages_taken, 4);
    }

    #[test]
    fn reallocs_grow_in_place_or_move() {
        let mut t = TraceBuilder::default();
        t.alloc(1, 0xa000_0000, 2 * M2, false, None);
        t.realloc(1, 0xa000_0000, 0xa000_0000, 4 * M2, None);
        let p = profile(&[t.finish()], &heap_large());
        assert_eq!((p.first_fit_pages, p.head_faults, p.blocks), (4, 4, 1));
        let mut t = TraceBuilder::default();
        t.alloc(1, 0xa000_0000, 2 * M2, false, None);
        t.alloc(1, 0xb000_0000, 2 * M2, false, None);
        t.realloc(1, 0xa000_0000, 0xc000_0000, 3 * M2, None);
        let p = profile(&[t.finish()], &heap_large());
        // Copied past b: pages 4..7, a's run given back after.
        assert_eq!((p.first_fit_pages, p.peak_pages, p.blocks), (7, 5, 3));
    }

    #[test]
    fn churn_chooses_the_pool_and_one_allocation_does_not() {
        let cost = CostModel::default();
        let w = weigh(
            &profile(&[churn(4, 50, 8)], &heap_large()),
            &cost,
            1.0,
            0.01,
        );
        assert!(w.chosen, "{}", w.reason);
        assert_eq!(w.pages, 4 * 9 + 9);
        assert!(w.pool_ns < w.per_allocation_ns);
        assert!(
            w.reason
                .starts_with("pool vs per-allocation: shared pool chosen"),
            "{}",
            w.reason
        );
        let w = weigh(
            &profile(&[churn(1, 1, 256)], &heap_large()),
            &cost,
            1.0,
            0.0,
        );
        assert!(!w.chosen);
        assert!(
            w.reason.contains("allocates its blocks once"),
            "{}",
            w.reason
        );
        // Churn too small for the bar.
        let w = weigh(
            &profile(&[churn(1, 3, 1)], &heap_large()),
            &cost,
            100.0,
            0.01,
        );
        assert!(!w.chosen);
        assert!(
            w.reason.contains("below 1.0% of the run time"),
            "{}",
            w.reason
        );
    }
}
