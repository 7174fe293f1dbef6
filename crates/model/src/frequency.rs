//! Region access frequencies (DAMON) as a coarse page-size estimate: which
//! categories are hot beyond what the 4 KB TLB reaches, and lower bounds on the
//! page walks and faults that huge pages would save. Pure: no I/O.
//!
//! DAMON checks one random page per region every sample interval τ and reports,
//! per region, `nr_accesses / max_nr_accesses` = f: the share of intervals in
//! which the sampled page had been accessed, i.e. the probability that a page of
//! the region is touched within τ. So, per category and per τ window:
//!
//! - hot bytes `H = Σ bytes·f`, the working set of one window (Denning's W(τ));
//! - distinct 4 KB translations `D4 = Σ (bytes/4 KB)·f`;
//! - distinct 2 MB translations `D2 = Σ frames·(1 − (1 − f)^k)`, k the 4 KB
//!   pages per frame of the region (pages touched independently: for clustered
//!   accesses this counts too many frames, which understates the gain).
//!
//! A TLB array of E entries that must translate D distinct pages in a window
//! misses at least `max(0, D − E)` times in it, whatever the order: a lower bound
//! on the walks, counted per last-level array (the geometry says which sizes
//! share one) and split among the categories by their share of D. First-touch
//! faults are bounded below by the bytes DAMON ever saw accessed. Nothing here
//! knows reuse distances: this is a frequency estimate, not a TLB model, and the
//! counts it produces are lower bounds (docs/damon.md).
//!
//! Regions are split among the categories by [`Extent`]s: objects of the
//! allocation log (live at the snapshot's time) or ranges of /proc/PID/maps,
//! the lower `rank` winning where they overlap; bytes no extent claims are
//! `other`, bytes of an excluded extent (the measuring tools' own) are dropped.

use crate::analysis::{AnalysisResult, Cell, Mapping, MappingResult, SizeStats};
use crate::categorize::AllocStats;
use crate::category::{Category, PerCategory};
use crate::page::{Backing, PageSize, SHIFT_2M, SIZE_2M};
use crate::tlb::TlbGeometry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What every output built from DAMON says about itself.
pub const BASIS: &str = "frequency estimate, not a TLB model";

const PAGE: u64 = 4096;
const PAGES_PER_FRAME: u64 = SIZE_2M / PAGE;

/// One region of one snapshot, as DAMON reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionObs {
    pub start: u64,
    pub end: u64,
    pub nr_accesses: u64,
    pub age: u64,
}

/// The regions read at `t_ms` (milliseconds since monitoring began).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotObs {
    pub t_ms: u64,
    pub regions: Vec<RegionObs>,
}

/// An address range of one category, live from `live_from_ms` to `live_to_ms`
/// (ms since monitoring began; `u64::MAX` while live at the end). `category`
/// `None`: memory of the measuring tools, left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub start: u64,
    pub end: u64,
    pub category: Option<Category>,
    /// Where extents overlap, the lowest rank claims the bytes.
    pub rank: u8,
    pub live_from_ms: u64,
    pub live_to_ms: u64,
}

impl Extent {
    /// A range live for the whole monitoring.
    pub fn always(start: u64, end: u64, category: Option<Category>, rank: u8) -> Self {
        Extent {
            start,
            end,
            category,
            rank,
            live_from_ms: 0,
            live_to_ms: u64::MAX,
        }
    }
    fn live_at(&self, t_ms: u64) -> bool {
        self.live_from_ms <= t_ms && t_ms < self.live_to_ms
    }
}

/// What DAMON saw of one category (means over the snapshots, per τ window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryFrequency {
    pub category: Option<Category>,
    /// Bytes of the category DAMON monitored.
    pub monitored_bytes: u64,
    /// Σ bytes·f: the bytes touched within one sample interval.
    pub hot_bytes: u64,
    /// Distinct 4 KB pages and 2 MB frames touched within one sample interval.
    pub pages_4k: f64,
    pub frames_2m: f64,
    /// Bytes ever seen accessed (nr_accesses > 0 in some snapshot).
    pub touched_bytes: u64,
    /// First touches of 2 MB frames over `touched_bytes` (frames spanned).
    pub touched_frames: u64,
    /// Age (aggregation intervals) of the hot bytes, weighted by `hot_bytes`:
    /// how long their frequency had held when read.
    pub mean_age: f64,
}

/// A category's verdict, with the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryVerdict {
    pub category: Category,
    pub back: bool,
    pub why: String,
}

/// The reach of the last TLB level, in bytes, for 4 KB and 2 MB translations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Reach {
    pub entries_4k: u64,
    pub entries_2m: u64,
    pub bytes_4k: u64,
    pub bytes_2m: u64,
}

/// The estimate of one monitoring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrequencyResult {
    /// [`BASIS`].
    pub basis: String,
    pub snapshots: u64,
    /// The sample interval τ (µs) that f and the per-window figures refer to.
    pub sample_us: u64,
    /// Per category (index [`Category::index`]).
    pub categories: Vec<CategoryFrequency>,
    pub reach: Reach,
    pub verdicts: Vec<CategoryVerdict>,
}

/// The input of [`estimate`].
pub struct FrequencyInput<'a> {
    pub snapshots: &'a [SnapshotObs],
    /// `aggr_us / sample_us`: the full scale of `nr_accesses`.
    pub max_nr_accesses: u64,
    pub sample_us: u64,
    pub extents: &'a [Extent],
}

/// The non-overlapping partition of the address space the extents live at
/// `t_ms` give: start → (end, category), gaps are `other`.
fn partition(extents: &[Extent], t_ms: u64) -> BTreeMap<u64, (u64, Option<Category>)> {
    let mut live: Vec<&Extent> = extents
        .iter()
        .filter(|e| e.end > e.start && e.live_at(t_ms))
        .collect();
    // Paint the highest rank first, the lowest last (it wins).
    live.sort_by_key(|e| std::cmp::Reverse(e.rank));
    let mut map: BTreeMap<u64, (u64, Option<Category>)> = BTreeMap::new();
    for e in live {
        paint(&mut map, e.start, e.end, e.category);
    }
    map
}

fn paint(map: &mut BTreeMap<u64, (u64, Option<Category>)>, lo: u64, hi: u64, c: Option<Category>) {
    // The piece that starts before lo and reaches into [lo, hi): cut it at lo
    // (and keep its tail beyond hi).
    if let Some((&s, &(e, pc))) = map.range(..lo).next_back() {
        if e > lo {
            map.insert(s, (lo, pc));
            if e > hi {
                map.insert(hi, (e, pc));
            }
        }
    }
    let inside: Vec<u64> = map.range(lo..hi).map(|(&s, _)| s).collect();
    for s in inside {
        let (e, pc) = map.remove(&s).expect("listed");
        if e > hi {
            map.insert(hi, (e, pc));
        }
    }
    map.insert(lo, (hi, c));
}

/// `(bytes, category)` pieces of `[lo, hi)` under `map`; gaps are `other`.
fn split(
    map: &BTreeMap<u64, (u64, Option<Category>)>,
    lo: u64,
    hi: u64,
) -> Vec<(u64, u64, Option<Category>)> {
    let mut out = Vec::new();
    let mut at = lo;
    let first = map.range(..=lo).next_back().map(|(&s, _)| s).unwrap_or(lo);
    for (&s, &(e, c)) in map.range(first..hi) {
        if e <= at {
            continue;
        }
        let s = s.max(at);
        if s > at {
            out.push((at, s, Some(Category::Other)));
        }
        let e = e.min(hi);
        out.push((s, e, c));
        at = e;
        if at >= hi {
            break;
        }
    }
    if at < hi {
        out.push((at, hi, Some(Category::Other)));
    }
    out
}

/// Expected 2 MB frames of `[lo, hi)` touched in one window when each of its
/// pages is touched with probability `f`.
fn frames_touched(lo: u64, hi: u64, f: f64) -> f64 {
    if hi <= lo || f <= 0.0 {
        return 0.0;
    }
    let frames = (hi.div_ceil(SIZE_2M) - lo / SIZE_2M) as f64;
    let pages = (hi - lo).div_ceil(PAGE) as f64;
    let k = (pages / frames).min(PAGES_PER_FRAME as f64);
    frames * (1.0 - (1.0 - f.min(1.0)).powf(k))
}

fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in v {
        match out.last_mut() {
            Some(l) if lo <= l.1 => l.1 = l.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The last TLB level's array and entry shift for 4 KB and 2 MB leaves.
fn slots(g: &TlbGeometry) -> [(usize, u32, u64); 2] {
    let last = g.last();
    let one = |leaf: PageSize, shift: u32| match last.slot(leaf, shift) {
        Some(s) => (s.array, s.shift, last.arrays[s.array].entries),
        None => (usize::MAX, 12, 0),
    };
    [one(PageSize::P4k, 12), one(PageSize::P2m, SHIFT_2M)]
}

/// Per-category frequencies and verdicts from the snapshots.
pub fn estimate(input: &FrequencyInput<'_>, geometry: &TlbGeometry) -> FrequencyResult {
    let max = input.max_nr_accesses.max(1) as f64;
    let n = input.snapshots.len().max(1) as f64;
    // index 5: the measuring tools' own memory (left out of every figure).
    let mut acc = [(0f64, 0f64, 0f64, 0f64, 0f64); 5];
    let mut touched: [Vec<(u64, u64)>; 5] = Default::default();
    for snap in input.snapshots {
        let map = partition(input.extents, snap.t_ms);
        for r in &snap.regions {
            let f = (r.nr_accesses as f64 / max).min(1.0);
            for (lo, hi, c) in split(&map, r.start, r.end) {
                let Some(c) = c else { continue };
                let bytes = (hi - lo) as f64;
                let a = &mut acc[c.index()];
                a.0 += bytes;
                a.1 += bytes * f;
                a.2 += bytes / PAGE as f64 * f;
                a.3 += frames_touched(lo, hi, f);
                a.4 += bytes * f * r.age as f64;
                if r.nr_accesses > 0 {
                    touched[c.index()].push((lo, hi));
                }
            }
        }
    }
    let mut categories = Vec::new();
    for c in Category::ALL {
        let a = acc[c.index()];
        let t = merge(std::mem::take(&mut touched[c.index()]));
        categories.push(CategoryFrequency {
            category: Some(c),
            monitored_bytes: (a.0 / n) as u64,
            hot_bytes: (a.1 / n) as u64,
            pages_4k: a.2 / n,
            frames_2m: a.3 / n,
            touched_bytes: t.iter().map(|(l, h)| h - l).sum(),
            touched_frames: t
                .iter()
                .map(|&(l, h)| h.div_ceil(SIZE_2M) - l / SIZE_2M)
                .sum(),
            mean_age: if a.1 > 0.0 { a.4 / a.1 } else { 0.0 },
        });
    }
    let [s4, s2] = slots(geometry);
    let reach = Reach {
        entries_4k: s4.2,
        entries_2m: s2.2,
        bytes_4k: s4.2 << s4.1,
        bytes_2m: s2.2 << s2.1,
    };
    let verdicts = Category::MAPPABLE
        .iter()
        .map(|&c| verdict(&categories[c.index()], c, &reach))
        .collect();
    FrequencyResult {
        basis: BASIS.into(),
        snapshots: input.snapshots.len() as u64,
        sample_us: input.sample_us,
        categories,
        reach,
        verdicts,
    }
}

fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / (1u64 << 20) as f64)
}

/// A category gains when its hot footprint exceeds what the 4 KB TLB reaches;
/// huge pages then reach all of it or (beyond their own reach) more of it.
fn verdict(f: &CategoryFrequency, c: Category, reach: &Reach) -> CategoryVerdict {
    let hot = f.hot_bytes as f64;
    let (back, why) = if f.hot_bytes == 0 {
        (
            false,
            format!(
                "cold: no access seen in {} monitored",
                mib(f.monitored_bytes as f64)
            ),
        )
    } else if hot <= reach.bytes_4k as f64 {
        (
            false,
            format!(
                "hot footprint {} fits the 4 KB TLB's reach ({})",
                mib(hot),
                mib(reach.bytes_4k as f64)
            ),
        )
    } else if f.frames_2m * SIZE_2M as f64 <= reach.bytes_2m as f64 {
        (
            true,
            format!(
                "hot footprint {} exceeds the 4 KB TLB's reach ({}); 2 MB pages reach it ({})",
                mib(hot),
                mib(reach.bytes_4k as f64),
                mib(reach.bytes_2m as f64)
            ),
        )
    } else {
        (
            true,
            format!(
                "hot footprint {} exceeds the 4 KB TLB's reach ({}); 2 MB pages reach {} of its {:.0} hot frames",
                mib(hot),
                mib(reach.bytes_4k as f64),
                reach.entries_2m,
                f.frames_2m
            ),
        )
    };
    CategoryVerdict {
        category: c,
        back,
        why,
    }
}

/// Lower bounds on the walks of every category under `huge` (categories on 2 MB
/// pages), per window: per last-level array, `max(0, D − E)` shared out by D.
fn walks_per_window(r: &FrequencyResult, geometry: &TlbGeometry, huge: &[Category]) -> [f64; 5] {
    let [s4, s2] = slots(geometry);
    let last = geometry.last();
    let mut demand: Vec<[f64; 5]> = vec![[0.0; 5]; last.arrays.len()];
    for c in Category::ALL {
        let f = &r.categories[c.index()];
        let (array, shift, _) = if huge.contains(&c) { s2 } else { s4 };
        if array == usize::MAX {
            continue;
        }
        demand[array][c.index()] += if shift >= SHIFT_2M {
            f.frames_2m
        } else {
            f.pages_4k
        };
    }
    let mut out = [0.0; 5];
    for (a, d) in demand.iter().enumerate() {
        let total: f64 = d.iter().sum();
        let excess = (total - last.arrays[a].entries as f64).max(0.0);
        if excess > 0.0 {
            for c in 0..5 {
                out[c] += excess * d[c] / total;
            }
        }
    }
    out
}

/// The estimate as the analysis the planner reads: every subset of the mappable
/// categories seen at 2 MB, each with its lower-bound walks over `seconds` of
/// running and its lower-bound first-touch faults; no references (`refs` 0).
pub fn analysis_result(
    r: &FrequencyResult,
    geometry: &TlbGeometry,
    seconds: f64,
    heap_large_peak_pages: u64,
    alloc_stats: PerCategory<AllocStats>,
) -> AnalysisResult {
    let windows = seconds.max(0.0) / (r.sample_us.max(1) as f64 * 1e-6);
    let present: Vec<Category> = Category::MAPPABLE
        .iter()
        .copied()
        .filter(|c| {
            let f = &r.categories[c.index()];
            f.touched_bytes > 0 || f.hot_bytes > 0
        })
        .collect();
    let mappings = Mapping::all_subsets(&present)
        .into_iter()
        .map(|m| {
            let huge = m.categories();
            let walks = walks_per_window(r, geometry, &huge);
            let cells = Category::ALL
                .iter()
                .filter_map(|&c| {
                    let f = &r.categories[c.index()];
                    let on_huge = huge.contains(&c);
                    let faults = if on_huge {
                        f.touched_frames
                    } else {
                        f.touched_bytes.div_ceil(PAGE)
                    };
                    let w = (walks[c.index()] * windows).round() as u64;
                    (faults > 0 || w > 0).then_some(Cell {
                        category: c,
                        backing: if on_huge {
                            Backing::Thp2m
                        } else {
                            Backing::Base4k
                        },
                        stats: SizeStats {
                            refs: 0,
                            l1_misses: w,
                            walks: w,
                            // DAMON sees no stores: read as loads.
                            dirty_walks: 0,
                            faults,
                            sim_l1_misses: 0,
                            sim_walks: 0,
                        },
                    })
                })
                .collect();
            MappingResult {
                name: m.name(),
                base: m.is_base(),
                mapping: m,
                cells,
                simulated: false,
                buckets: vec![],
                per_core: vec![],
            }
        })
        .collect();
    AnalysisResult {
        mappings,
        refs: 0,
        heap_large_peak_pages,
        heap_large_peak_pages_1g: (0, 0),
        static_pages_1g: (0, 0),
        site_peak_pages: vec![],
        alloc_stats,
        geometry: geometry.clone(),
        sampling: None,
        cores: None,
        alongside: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlb::{TlbArray, TlbLevel};

    const MB: u64 = 1 << 20;

    /// One last level of 1536 entries shared by 4 KB and 2 MB (6 MiB of 4 KB reach).
    fn geometry() -> TlbGeometry {
        TlbGeometry {
            levels: vec![TlbLevel::new(
                "L2 DTLB",
                vec![TlbArray::new(&[PageSize::P4k, PageSize::P2m], 1536, 0)],
                None,
            )],
            source: "test".into(),
        }
    }

    fn region(start: u64, end: u64, nr: u64) -> RegionObs {
        RegionObs {
            start,
            end,
            nr_accesses: nr,
            age: 3,
        }
    }

    #[test]
    fn paint_and_split_give_the_lowest_rank_and_other_in_gaps() {
        let ex = [
            Extent::always(0x1000, 0x9000, Some(Category::HeapSmall), 2),
            Extent::always(0x3000, 0x5000, Some(Category::HeapLarge), 0),
            Extent::always(0x4000, 0x6000, None, 1),
            Extent {
                live_from_ms: 100,
                ..Extent::always(0xa000, 0xb000, Some(Category::Static), 0)
            },
        ];
        let m = partition(&ex, 50);
        let got = split(&m, 0, 0xc000);
        use Category::*;
        assert_eq!(
            got,
            vec![
                (0, 0x1000, Some(Other)),
                (0x1000, 0x3000, Some(HeapSmall)),
                (0x3000, 0x5000, Some(HeapLarge)),
                (0x5000, 0x6000, None),
                (0x6000, 0x9000, Some(HeapSmall)),
                (0x9000, 0xc000, Some(Other)),
            ]
        );
        // Later the static extent is live.
        let got = split(&partition(&ex, 100), 0x9800, 0xb800);
        assert_eq!(
            got,
            vec![
                (0x9800, 0xa000, Some(Other)),
                (0xa000, 0xb000, Some(Static)),
                (0xb000, 0xb800, Some(Other)),
            ]
        );
        // Bytes are conserved by every split.
        for lo in (0..0xc000).step_by(0x800) {
            let s = split(&partition(&ex, 0), lo, lo + 0x2800);
            assert_eq!(s.iter().map(|p| p.1 - p.0).sum::<u64>(), 0x2800);
        }
    }

    #[test]
    fn frames_touched_matches_brute_force_expectation() {
        // Every page touched: every frame.
        assert!((frames_touched(0, 8 * SIZE_2M, 1.0) - 8.0).abs() < 1e-9);
        // One page per frame at f: 1 - (1-f)^512 of the frames.
        let f = 0.001;
        let want = 4.0 * (1.0 - (1.0f64 - f).powi(512));
        assert!((frames_touched(0, 4 * SIZE_2M, f) - want).abs() < 1e-9);
        // A small range inside one frame: at most that frame.
        assert!(frames_touched(SIZE_2M + 4096, SIZE_2M + 3 * 4096, 1.0) <= 1.0 + 1e-12);
        assert_eq!(frames_touched(0, 4096, 0.0), 0.0);
    }

    /// A hot 256 MiB heap-large array and a cold 64 MiB heap-small range: the
    /// hot one exceeds the 4 KB reach and is backed, the cold one is not; the
    /// lower-bound walks fall with heap-large on 2 MB pages, and no mapping
    /// with heap-small saves anything over the same without it.
    #[test]
    fn hot_category_backed_cold_one_not() {
        let big = (0x7f00_0000_0000u64, 0x7f00_0000_0000 + 256 * MB);
        let small = (0x55_0000_0000u64, 0x55_0000_0000 + 64 * MB);
        let ex = [
            Extent::always(big.0, big.1, Some(Category::HeapLarge), 0),
            Extent::always(small.0, small.1, Some(Category::HeapSmall), 2),
        ];
        let snaps: Vec<SnapshotObs> = (0..4)
            .map(|i| SnapshotObs {
                t_ms: 500 * (i + 1),
                regions: vec![
                    region(small.0, small.1, 0),
                    region(big.0, big.0 + 128 * MB, 10),
                    region(big.0 + 128 * MB, big.1, 20),
                ],
            })
            .collect();
        let g = geometry();
        let r = estimate(
            &FrequencyInput {
                snapshots: &snaps,
                max_nr_accesses: 20,
                sample_us: 5000,
                extents: &ex,
            },
            &g,
        );
        let hl = &r.categories[Category::HeapLarge.index()];
        assert_eq!(hl.monitored_bytes, 256 * MB);
        assert_eq!(hl.hot_bytes, 192 * MB);
        assert_eq!(hl.touched_bytes, 256 * MB);
        assert_eq!(hl.touched_frames, 128);
        assert!((hl.pages_4k - (192 * MB / 4096) as f64).abs() < 1e-6);
        let hs = &r.categories[Category::HeapSmall.index()];
        assert_eq!((hs.hot_bytes, hs.touched_bytes), (0, 0));
        assert_eq!(hs.monitored_bytes, 64 * MB);
        let v = |c: Category| r.verdicts.iter().find(|v| v.category == c).unwrap();
        assert!(v(Category::HeapLarge).back, "{:?}", v(Category::HeapLarge));
        assert!(!v(Category::HeapSmall).back);
        assert!(v(Category::HeapSmall).why.contains("cold"));
        assert_eq!(r.reach.bytes_4k, 6 * MB);
        assert_eq!(r.basis, BASIS);

        let res = analysis_result(&r, &g, 2.0, 128, Default::default());
        // Only heap-large was seen: all-small and heap-large.
        let names: Vec<&str> = res.mappings.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, vec!["all-small", "heap-large"]);
        let base = res.all_small().total();
        let huge = res.mapping("heap-large").unwrap().total();
        // 49 152 pages per 5 ms window against 1536 entries, 400 windows.
        let want = ((192 * MB / 4096) as f64 - 1536.0) * 400.0;
        assert!((base.walks as f64 - want).abs() < 2.0, "{}", base.walks);
        assert_eq!(huge.walks, 0);
        assert_eq!(base.faults, 256 * MB / 4096);
        assert_eq!(huge.faults, 128);
    }

    /// A footprint within the 4 KB reach is left alone: no walks to save.
    #[test]
    fn a_footprint_within_reach_gains_no_walks() {
        let ex = [Extent::always(0, 4 * MB, Some(Category::Static), 1)];
        let snaps = vec![SnapshotObs {
            t_ms: 1,
            regions: vec![region(0, 4 * MB, 20)],
        }];
        let g = geometry();
        let r = estimate(
            &FrequencyInput {
                snapshots: &snaps,
                max_nr_accesses: 20,
                sample_us: 5000,
                extents: &ex,
            },
            &g,
        );
        assert!(!r.verdicts[0].back, "{:?}", r.verdicts[0]);
        assert!(r.verdicts[0].why.contains("fits"));
        let res = analysis_result(&r, &g, 1.0, 0, Default::default());
        assert_eq!(res.all_small().total().walks, 0);
        assert_eq!(res.mapping("static").unwrap().total().walks, 0);
    }

    /// Shared out by demand: two hot categories in one array each take their
    /// share of the excess, and moving one to 2 MB shrinks the excess.
    #[test]
    fn the_excess_is_shared_by_demand() {
        let ex = [
            Extent::always(0, 64 * MB, Some(Category::HeapLarge), 0),
            Extent::always(1 << 40, (1 << 40) + 64 * MB, Some(Category::Static), 1),
        ];
        let snaps = vec![SnapshotObs {
            t_ms: 1,
            regions: vec![
                region(0, 64 * MB, 20),
                region(1 << 40, (1 << 40) + 64 * MB, 20),
            ],
        }];
        let g = geometry();
        let r = estimate(
            &FrequencyInput {
                snapshots: &snaps,
                max_nr_accesses: 20,
                sample_us: 1_000_000,
                extents: &ex,
            },
            &g,
        );
        let w = walks_per_window(&r, &g, &[]);
        let d = 2.0 * 16384.0;
        assert!((w[Category::HeapLarge.index()] - (d - 1536.0) / 2.0).abs() < 1e-6);
        // One shared array: the 32 frames still take their (small) share.
        let w = walks_per_window(&r, &g, &[Category::HeapLarge]);
        let excess = 16384.0 + 32.0 - 1536.0;
        assert!((w[Category::HeapLarge.index()] - excess * 32.0 / 16416.0).abs() < 1e-6);
        assert!((w[Category::Static.index()] - excess * 16384.0 / 16416.0).abs() < 1e-6);
    }
}
