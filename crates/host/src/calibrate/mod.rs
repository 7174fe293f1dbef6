//! `hugetune calibrate`: measures on this machine what the page size benefit
//! model charges for TLB misses and page faults (docs/calibrate.md):
//!
//! - **L2-hit cost** per leaf size: a dependent pointer chase touching one line per
//!   page, over more pages than the L1 DTLB holds (but fewer than the L2) against
//!   fewer than the L1 holds; the difference per step divided by the share of steps
//!   that miss the L1.
//! - **Walk cost** per leaf size, as a curve over the page-table working set
//!   (8 bytes per distinct page): a chase over 64-byte nodes filling a footprint
//!   beyond TLB reach, with pages of that size against the next larger size; the
//!   difference per step, less the L2-hit difference, divided by the share of steps
//!   that miss the last-level TLB. Under a hypervisor these are nested (2-D) walks.
//! - **Fault cost** per backing: first touch and unmap of a fresh mapping, ns per
//!   fault (a program pays both within its run), after a cold pass (memory the
//!   host took back is slow once).
//! - **Walk overlap** (docs/model.md §4, "Overlap"): over one footprint on 4 KB and
//!   on 2 MB pages, the chase (one walk at a time) and independent random loads
//!   (as many at once as the core allows); their savings per walk give how many
//!   walks the loads hide behind each other, the chase's time per walk less its
//!   walk the latency of the access a walk precedes.
//!
//! Every figure is the median of interleaved repetitions; differences are taken
//! between configurations of the same repetition. Kernel state (hugetlb pools) is
//! changed only through `kernel_state`, under its lock, and restored.
//!
//! Two parts: this file holds the result types with their checks and the pure
//! arithmetic and planning (what to measure, how differences become costs),
//! tested without measuring; `measure` maps buffers, chases pointers, changes
//! pools and times things.

use crate::kernel_state::{self, KernelStateLock, PoolChange};
use crate::machine::{self, Machine};
use anyhow::{bail, Context, Result};
use hugetune_model::plan::ThpMode;
use hugetune_model::tlb::TlbGeometry;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Leaf page sizes, in the order of every `[_; 3]` array.
pub const LEAF: [&str; 3] = ["4k", "2m", "1g"];
const LEAF_BYTES: [u64; 3] = [4 << 10, 2 << 20, 1 << 30];
const LEAF_TEXT: [&str; 3] = ["4 KB", "2 MB", "1 GB"];
const NODE: u64 = 64;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

// ---------------------------------------------------------------- result types

/// A machine's measured costs: what `hugetune calibrate` stores per machine and the
/// cost model is built from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Extra time of an access that misses the L1 DTLB and hits the L2, per leaf
    /// size (4k, 2m, 1g), ns.
    pub l2_hit_ns: [f64; 3],
    /// Time of a page walk per leaf size, as (page-table working set in bytes =
    /// 8 × distinct pages, ns per walk) points sorted by working set.
    pub walk_curve: [Vec<(f64, f64)>; 3],
    /// First-touch fault cost per backing (`4k`, `thp-16k` … `thp-1m`, `thp-2m`,
    /// `hugetlb-2m`, `hugetlb-1g`), ns per fault, warm memory; only those measured.
    pub fault_ns: Vec<(String, f64)>,
    /// One line per figure: how it was measured, or why it is extrapolated or
    /// missing.
    pub sources: Vec<String>,
    /// CPU model, kernel, hypervisor.
    pub machine: String,
    /// When it was measured (UTC, `YYYY-MM-DDTHH:MM:SSZ`).
    pub created: String,
    /// The TLB sizes the miss fractions were computed with.
    #[serde(default)]
    pub tlb: Option<TlbParams>,
    /// Measured with `--quick` (fewer points and steps).
    #[serde(default)]
    pub quick: bool,
    /// Every figure with its spread over the repetitions.
    #[serde(default)]
    pub figures: Vec<Figure>,
    /// The timings the figures were derived from, one per configuration.
    #[serde(default)]
    pub raw: Vec<Measurement>,
    /// The walk overlap's ends (docs/model.md §4, "Overlap"); `None` where not
    /// measured (and in calibrations made before it was).
    #[serde(default)]
    pub overlap: Option<OverlapEnds>,
    /// Seconds the walk curves' repetitions were spread over (`--spread`; 0:
    /// one round, as in calibrations made before it existed).
    #[serde(default)]
    pub spread_s: f64,
    /// Whether the 4 KB walks and the overlap were measured on fresh memory,
    /// one child process per repetition (`Options::fresh_memory`; false in
    /// calibrations made before it existed, and with `--same-process`).
    #[serde(default)]
    pub fresh_memory: bool,
}

/// The two ends the walk overlap is interpolated between, measured over one
/// footprint (the cost model's `memory_ns`, `walk_concurrency` and
/// `independent_ns_per_walk`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OverlapEnds {
    /// The dependent chase's time per walk less its walk: the access a walk
    /// precedes, ns.
    pub memory_ns: f64,
    /// Translations (walks and L2 hits) the independent loads hide behind each
    /// other: what the chase's figures charge for the loads' translations, over
    /// what the loads saved on 2 MB pages.
    pub walk_concurrency: f64,
    /// The independent loads' time per walk on 4 KB pages, ns.
    pub independent_ns_per_walk: f64,
    /// The two savings per walk (ns), with their spreads.
    pub dependent_walk: Repeated,
    pub independent_walk: Repeated,
    /// Page-table bytes of the footprint (8 per 4 KB page).
    pub pt_bytes: f64,
    /// The same independent loads writing each line back (read-modify-write):
    /// their saving per walk on 2 MB pages (None in calibrations made before
    /// it was measured).
    #[serde(default)]
    pub rmw_walk: Option<Repeated>,
    /// How much less of its time a read-modify-write saves per walk than a
    /// load: the median over repetitions of (loads' saving / loads' time) over
    /// (RMW's saving / RMW's time), less one. The cost model's `dirty_ratio`
    /// (docs/model.md §4, "Writes"); 0 when not measured.
    #[serde(default)]
    pub dirty_ratio: f64,
}

/// The overlap's ends from per-repetition timings (ns per step) of the chase and
/// of the independent loads, each on A (4 KB pages, which walk on a share of
/// their steps) and B (2 MB pages, which never walk), over the same footprint.
/// The chase's walks are in series with everything: its saving per walk, L2
/// hits charged in series at `l2_hit_ns` (A's size, B's), is the walk cost. The
/// loads overlap their translations (walks and L2 hits alike): what the chase's
/// figures charge for them, over what the loads saved, is how many hide behind
/// each other; the cost model divides the same translation time by it.
///
/// `rmw`: the same loads writing each line back, on A and B. The share of its
/// time a walking access saves is taken for the loads and for them in every
/// repetition; how much smaller it is for the writes is `dirty_ratio`.
pub fn overlap_ends(
    chase: (&[f64], &[f64]),
    loads: (&[f64], &[f64]),
    rmw: Option<(&[f64], &[f64])>,
    a: Fractions,
    b: Fractions,
    l2_hit_ns: [f64; 2],
    pt_bytes: f64,
) -> Result<OverlapEnds> {
    let n = chase.0.len();
    if n == 0
        || [chase.1.len(), loads.0.len(), loads.1.len()] != [n; 3]
        || rmw.is_some_and(|w| [w.0.len(), w.1.len()] != [n; 2])
    {
        bail!("the overlap needs as many timings of each configuration");
    }
    if a.walk <= 0.0 || b.walk > 0.0 {
        bail!("the overlap needs 4 KB pages that walk and 2 MB pages that do not");
    }
    let diffs = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p - q).collect::<Vec<_>>();
    let dependent = per_walk(&diffs(chase.0, chase.1), a, b, l2_hit_ns)?;
    // The loads' saving per walk, translations overlapped as they ran.
    let independent = repeated(
        &diffs(loads.0, loads.1)
            .iter()
            .map(|d| d / a.walk)
            .collect::<Vec<_>>(),
    )?;
    if dependent.median <= 0.0 {
        bail!(
            "the chase saved {:.1} ns per walk on 2 MB pages: within the noise",
            dependent.median
        );
    }
    let serial = dependent.median * a.walk + a.l2_hit * l2_hit_ns[0] - b.l2_hit * l2_hit_ns[1];
    if independent.median <= 0.0 || serial <= 0.0 {
        bail!(
            "the independent loads saved {:.2} ns per walk on 2 MB pages: their walks hid entirely, or the machine is busy",
            independent.median
        );
    }
    let own = a.l2_hit * l2_hit_ns[0];
    let chase_per_walk = repeated(
        &chase
            .0
            .iter()
            .map(|t| (t - own) / a.walk)
            .collect::<Vec<_>>(),
    )?
    .median;
    let loads_per_walk = repeated(&loads.0.iter().map(|t| t / a.walk).collect::<Vec<_>>())?.median;
    let (rmw_walk, dirty_ratio) = match rmw {
        None => (None, 0.0),
        Some(w) => {
            let saved = repeated(
                &diffs(w.0, w.1)
                    .iter()
                    .map(|d| d / a.walk)
                    .collect::<Vec<_>>(),
            )?;
            // Per repetition: the loads' share saved over the writes'. A
            // repetition where either saved nothing says nothing.
            let ratios: Vec<f64> = (0..n)
                .filter_map(|i| {
                    let (l, r) = (
                        (loads.0[i] - loads.1[i]) / loads.0[i],
                        (w.0[i] - w.1[i]) / w.0[i],
                    );
                    (l > 0.0 && r > 0.0 && l.is_finite() && r.is_finite()).then_some(l / r)
                })
                .collect();
            let ratio = if ratios.is_empty() {
                0.0
            } else {
                // Writes that save a larger share than loads: no extra cost.
                (repeated(&ratios)?.median - 1.0).max(0.0)
            };
            (Some(saved), ratio)
        }
    };
    Ok(OverlapEnds {
        memory_ns: (chase_per_walk - dependent.median).max(0.0),
        walk_concurrency: (serial / (independent.median * a.walk)).max(1.0),
        independent_ns_per_walk: loads_per_walk,
        dependent_walk: dependent,
        independent_walk: independent,
        pt_bytes,
        rmw_walk,
        dirty_ratio,
    })
}

/// The footprint the overlap is measured over: the smallest power of two from
/// 256 MiB up where 4 KB pages walk on nine steps in ten and 2 MB pages never,
/// within the budget.
pub fn plan_overlap(o: &Options) -> Result<Pair, String> {
    let Some(big) = o.two_m() else {
        return Err("no 2 MB pages to compare with: THP is off and hugetlb pools need root".into());
    };
    let walks = |f: u64| {
        fractions(0, f / LEAF_BYTES[0], &o.tlb).walk >= 0.9
            && fractions(1, f / LEAF_BYTES[1], &o.tlb).walk == 0.0
    };
    let Some(f) = (8..=16).map(|k| MIB << k).find(|&f| walks(f)) else {
        return Err("no footprint up to 64 GiB where 4 KB pages walk on nine steps in ten and 2 MB pages never".into());
    };
    if 2 * f > o.budget_bytes {
        return Err(format!(
            "needs {} at once, over the budget of {} (half the available memory)",
            bytes_text(2 * f),
            bytes_text(o.budget_bytes)
        ));
    }
    let nodes = |leaf: usize, backing: BufferBacking| Chase {
        leaf,
        backing,
        pages: f / LEAF_BYTES[leaf],
        layout: ChaseLayout::Nodes,
    };
    Ok(Pair {
        a: nodes(0, BufferBacking::Base4k),
        b: nodes(1, big),
        fallback: None,
    })
}

/// Median and range of one calibration figure over its repetitions (stored with the
/// calibration; `hugetune_model::stats::Spread` is the general spread of a sample).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Repeated {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub reps: usize,
}

/// One derived figure (an L2-hit cost, a point of a walk curve, a fault cost).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// `l2-hit`, `walk` or `fault`.
    pub kind: String,
    /// Leaf size (`4k`, `2m`, `1g`) or backing (`thp-2m`, …).
    pub what: String,
    /// Walk points: the page-table working set, bytes.
    pub pt_bytes: Option<f64>,
    /// The figure per repetition, ns; `None` when extrapolated or not measured.
    pub ns: Option<Repeated>,
    /// Faults: the first, cold pass (host memory possibly taken back), ns per fault.
    pub cold_ns: Option<f64>,
    /// How it was measured, or why it was not.
    pub source: String,
}

/// One timed configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// What was timed, e.g. `chase 256.0 MiB nodes on 4k` or `touch 256.0 MiB thp-2m`.
    pub config: String,
    /// `ns/step` or `ns/fault`.
    pub unit: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub reps: usize,
    /// The values, in the order they were taken.
    pub samples: Vec<f64>,
}

/// TLB entries per leaf size (4k, 2m, 1g) the miss fractions are computed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlbParams {
    pub l1: [u64; 3],
    pub l2: [u64; 3],
    pub source: String,
}

impl TlbParams {
    /// The one place that reads the model's TLB geometry: per leaf size, the
    /// pages of that size the first and the last level hold. A level without 1 GB
    /// entries holds 1 GB pages smashed into 2 MB entries (AMD's L2): its reach in
    /// 1 GB pages is its 2 MB entries / 512.
    pub fn from_geometry(g: &TlbGeometry) -> TlbParams {
        use hugetune_model::page::PageSize;
        let pages = |l: &hugetune_model::tlb::TlbLevel| -> [u64; 3] {
            let e4 = l.entries(PageSize::P4k);
            let e2 = l.entries(PageSize::P2m);
            let e1 = match l.entries(PageSize::P1g) {
                0 => (e2 / 512).max(1),
                n => n,
            };
            [e4, if e2 == 0 { e4 / 512 } else { e2 }, e1]
        };
        let l1 = g.levels.first().map(pages).unwrap_or([64, 32, 4]);
        let last = g.levels.last().map(pages).unwrap_or(l1);
        let l2 = [last[0].max(l1[0]), last[1].max(l1[1]), last[2].max(l1[2])];
        TlbParams {
            l1,
            l2,
            source: g.source.clone(),
        }
    }
}

impl Calibration {
    /// Checks what the cost model relies on: positive finite costs, non-empty walk
    /// curves sorted by strictly increasing positive working sets, named backings.
    pub fn validate(&self) -> Result<()> {
        for (i, v) in self.l2_hit_ns.iter().enumerate() {
            if !v.is_finite() || *v <= 0.0 {
                bail!(
                    "L2-hit cost of {} pages is {v}, not a positive number",
                    LEAF[i]
                );
            }
        }
        for (i, c) in self.walk_curve.iter().enumerate() {
            if c.is_empty() {
                bail!("the walk curve of {} pages is empty", LEAF[i]);
            }
            for &(x, y) in c {
                if !x.is_finite() || x <= 0.0 || !y.is_finite() || y <= 0.0 {
                    bail!(
                        "the walk curve of {} pages has a bad point ({x}, {y})",
                        LEAF[i]
                    );
                }
            }
            if c.windows(2).any(|w| w[0].0 >= w[1].0) {
                bail!(
                    "the walk curve of {} pages is not sorted by page-table bytes",
                    LEAF[i]
                );
            }
        }
        if !self.spread_s.is_finite() || self.spread_s < 0.0 {
            bail!(
                "the walk curves' spread is {} s, not a duration",
                self.spread_s
            );
        }
        if let Some(o) = &self.overlap {
            let ok = |v: f64| v.is_finite() && v > 0.0;
            if !(ok(o.memory_ns) || o.memory_ns == 0.0)
                || !(o.walk_concurrency.is_finite() && o.walk_concurrency >= 1.0)
                || !ok(o.independent_ns_per_walk)
                || !(o.dirty_ratio.is_finite() && (0.0..=10.0).contains(&o.dirty_ratio))
            {
                bail!(
                    "the walk overlap's figures are unusable (memory {} ns, {} walks at once, {} ns per independent walk, writes {} more)",
                    o.memory_ns,
                    o.walk_concurrency,
                    o.independent_ns_per_walk,
                    o.dirty_ratio
                );
            }
        }
        for (i, (name, v)) in self.fault_ns.iter().enumerate() {
            if name.is_empty() || self.fault_ns[..i].iter().any(|(n, _)| n == name) {
                bail!("fault costs name the backing {name:?} twice or not at all");
            }
            if !v.is_finite() || *v <= 0.0 {
                bail!("fault cost of {name} is {v}, not a positive number");
            }
        }
        Ok(())
    }

    /// Reads a stored calibration, refusing one the model could not use.
    pub fn from_json(v: serde_json::Value) -> Result<Calibration> {
        let c: Calibration = serde_json::from_value(v)
            .context("not a calibration this hugetune can read (rerun `hugetune calibrate`)")?;
        c.validate()
            .context("the calibration is unusable (rerun `hugetune calibrate`)")?;
        Ok(c)
    }

    /// Fault cost of a backing (`4k`, `thp-2m`, …), if it was measured.
    pub fn fault(&self, backing: &str) -> Option<f64> {
        self.fault_ns
            .iter()
            .find(|(n, _)| n == backing)
            .map(|&(_, v)| v)
    }
}

// ---------------------------------------------------------------- pure parts

/// Median and range; refuses no values and non-finite ones.
pub fn repeated(samples: &[f64]) -> Result<Repeated> {
    if samples.is_empty() {
        bail!("no measurements");
    }
    if let Some(v) = samples.iter().find(|v| !v.is_finite()) {
        bail!("a measurement is {v}");
    }
    let (min, max) = samples
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    Ok(Repeated {
        median: hugetune_model::stats::median(samples),
        min,
        max,
        reps: samples.len(),
    })
}

/// Shares of the steps of a uniformly random chase over `pages` pages of leaf size
/// `leaf` that miss the L1 DTLB but hit the L2, and that miss both (walk), for
/// fully associative LRU TLBs of the given sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fractions {
    pub l2_hit: f64,
    pub walk: f64,
}

pub fn fractions(leaf: usize, pages: u64, tlb: &TlbParams) -> Fractions {
    let p = pages.max(1) as f64;
    let miss = |entries: u64| (1.0 - entries as f64 / p).max(0.0);
    let l1_miss = miss(tlb.l1[leaf]);
    let walk = miss(tlb.l2[leaf]).min(l1_miss);
    Fractions {
        l2_hit: l1_miss - walk,
        walk,
    }
}

/// L2-hit cost per repetition from paired differences (A − B, ns per step) of two
/// chases that never walk: the difference over the difference in L1-miss shares.
pub fn per_l2_hit(diffs: &[f64], a: Fractions, b: Fractions) -> Result<Repeated> {
    if a.walk > 0.0 || b.walk > 0.0 {
        bail!("an L2-hit comparison must not walk");
    }
    let share = a.l2_hit - b.l2_hit;
    if share <= 0.0 {
        bail!("configuration A misses the L1 DTLB no more often than B");
    }
    repeated(&diffs.iter().map(|d| d / share).collect::<Vec<_>>())
}

/// Walk cost per repetition from paired differences (A − B, ns per step): A walks
/// on a share of its steps, B never does; the L2 hits of both are charged at
/// `l2_hit_ns` (A's size, B's size) first.
pub fn per_walk(
    diffs: &[f64],
    a: Fractions,
    b: Fractions,
    l2_hit_ns: [f64; 2],
) -> Result<Repeated> {
    if b.walk > 0.0 {
        bail!("the comparison configuration walks too");
    }
    if a.walk <= 0.0 {
        bail!("the configuration never walks");
    }
    let l2 = a.l2_hit * l2_hit_ns[0] - b.l2_hit * l2_hit_ns[1];
    repeated(&diffs.iter().map(|d| (d - l2) / a.walk).collect::<Vec<_>>())
}

/// A walk curve from measured points (page-table bytes, per-walk spread): sorted by
/// working set; points with a non-finite or non-positive working set or median are
/// left out with the reason (a negative walk cost is noise, not a cost).
pub fn curve(points: &[(f64, Repeated)]) -> (Vec<(f64, f64)>, Vec<String>) {
    let mut rejected = Vec::new();
    let mut good: Vec<(f64, f64)> = Vec::new();
    for &(x, s) in points {
        if !x.is_finite() || x <= 0.0 {
            rejected.push(format!("working set {x} is not a positive size"));
        } else if !s.median.is_finite() || s.median <= 0.0 {
            rejected.push(format!(
                "{}: {:.1} ns per walk is within the noise",
                bytes_text(x as u64),
                s.median
            ));
        } else if good.iter().any(|&(gx, _)| gx == x) {
            rejected.push(format!("{}: measured twice", bytes_text(x as u64)));
        } else {
            good.push((x, s.median));
        }
    }
    good.sort_by(|a, b| a.0.total_cmp(&b.0));
    (good, rejected)
}

/// A bijection of `[0, 2^bits)` that scatters consecutive numbers (odd multipliers
/// and xor-shifts, each invertible modulo 2^bits): the visiting order of a chase.
pub fn scatter(x: u64, bits: u32, seed: u64) -> u64 {
    if bits == 0 {
        return 0;
    }
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let shift = bits.div_ceil(2);
    let mut x = (x ^ seed) & mask;
    for k in [
        0x9E37_79B9_7F4A_7C15u64,
        0xBF58_476D_1CE4_E5B9,
        0x94D0_49BB_1331_11EB,
    ] {
        x = x.wrapping_mul(k) & mask;
        x ^= x >> shift;
        x = x.wrapping_add(seed.rotate_left(17)) & mask;
    }
    x
}

/// The nodes `0..n` in chase order: `scatter` over the next power of two, skipping
/// the numbers not below `n` (at most half of them).
pub fn chase_order(n: u64, seed: u64) -> impl Iterator<Item = u64> {
    let bits = 64 - n.saturating_sub(1).leading_zeros();
    let top = if bits >= 64 { u64::MAX } else { 1u64 << bits };
    (0..top)
        .map(move |k| scatter(k, bits, seed))
        .filter(move |&x| x < n)
}

/// Where a chase's nodes lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChaseLayout {
    /// 64-byte nodes filling the whole buffer (one step per node).
    Nodes,
    /// One node per page, at line `i mod 64` of page `i` (the lines spread over the
    /// L1 data cache's sets, so they all stay in it).
    LinePerPage,
}

/// How a calibration buffer is backed (mTHP sizes included, which the model's
/// `Backing` names per size; serialized with the calibration as before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BufferBacking {
    /// Anonymous memory with `MADV_NOHUGEPAGE`.
    Base4k,
    /// Anonymous memory with `MADV_HUGEPAGE`, faulted in folios of `kb` (2048:
    /// PMD THP; smaller: multi-size THP).
    Thp { kb: u64 },
    /// `MAP_HUGETLB | MAP_HUGE_2MB`.
    Hugetlb2m,
    /// `MAP_HUGETLB | MAP_HUGE_1GB`.
    Hugetlb1g,
}

impl BufferBacking {
    pub fn name(self) -> String {
        match self {
            BufferBacking::Base4k => "4k".into(),
            BufferBacking::Thp { kb } => format!("thp-{}", kb_text(kb)),
            BufferBacking::Hugetlb2m => "hugetlb-2m".into(),
            BufferBacking::Hugetlb1g => "hugetlb-1g".into(),
        }
    }
    /// Bytes one fault maps.
    pub fn fault_bytes(self) -> u64 {
        match self {
            BufferBacking::Base4k => 4 << 10,
            BufferBacking::Thp { kb } => kb << 10,
            BufferBacking::Hugetlb2m => 2 * MIB,
            BufferBacking::Hugetlb1g => GIB,
        }
    }
    /// The hugetlb pool it draws from, in kB.
    fn pool_kb(self) -> Option<u64> {
        match self {
            BufferBacking::Hugetlb2m => Some(2048),
            BufferBacking::Hugetlb1g => Some(1 << 20),
            _ => None,
        }
    }
}

/// `16` → `16k`, `1024` → `1m`, `2048` → `2m`.
pub fn kb_text(kb: u64) -> String {
    if kb >= 1024 && kb.is_multiple_of(1024) {
        format!("{}m", kb / 1024)
    } else {
        format!("{kb}k")
    }
}

fn bytes_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// One pointer chase: `pages` pages of leaf size `leaf`, backed by `backing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chase {
    pub leaf: usize,
    pub backing: BufferBacking,
    pub pages: u64,
    pub layout: ChaseLayout,
}

impl Chase {
    pub fn bytes(&self) -> u64 {
        self.pages * LEAF_BYTES[self.leaf]
    }
    fn nodes(&self) -> u64 {
        match self.layout {
            ChaseLayout::Nodes => self.bytes() / NODE,
            ChaseLayout::LinePerPage => self.pages,
        }
    }
    fn node_offset(&self, i: u64) -> u64 {
        match self.layout {
            ChaseLayout::Nodes => i * NODE,
            ChaseLayout::LinePerPage => i * LEAF_BYTES[self.leaf] + (i % 64) * NODE,
        }
    }
    pub fn label(&self) -> String {
        match self.layout {
            ChaseLayout::Nodes => format!(
                "chase {} nodes on {}",
                bytes_text(self.bytes()),
                self.backing.name()
            ),
            ChaseLayout::LinePerPage => format!(
                "chase 1 line/page, {} pages on {}",
                self.pages,
                self.backing.name()
            ),
        }
    }
    /// Pool pages it needs: (pool kB, pages).
    fn pool_need(&self) -> Option<(u64, u64)> {
        let kb = self.backing.pool_kb()?;
        Some((kb, self.bytes().div_ceil(kb << 10)))
    }
}

/// Two chases compared within each repetition: A − B isolates one figure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    pub a: Chase,
    pub b: Chase,
    /// Used instead of `b` when `b`'s pages cannot be had (a smaller footprint of
    /// `a`'s size, both far beyond the caches).
    pub fallback: Option<Chase>,
}

impl Pair {
    fn peak_bytes(&self) -> u64 {
        self.a.bytes() + self.b.bytes()
    }
}

/// Availability of THP folio sizes, from the sysfs settings (never changed here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThpSizes {
    /// Folio sizes (kB) a `MADV_HUGEPAGE` mapping can get now.
    pub enabled: Vec<u64>,
    /// The others, with their setting.
    pub disabled: Vec<(u64, String)>,
}

impl ThpSizes {
    /// From the top-level mode and the per-size settings (`hugepages-<kB>/enabled`;
    /// `inherit` follows the top level). Without per-size files, PMD THP follows
    /// the top level.
    pub fn from_settings(top: Option<ThpMode>, sizes: &[(u64, String)]) -> ThpSizes {
        let top_on = matches!(top, Some(ThpMode::Always | ThpMode::Madvise));
        let mut sizes = sizes.to_vec();
        if !sizes.iter().any(|(kb, _)| *kb == 2048) {
            sizes.push((2048, "inherit".into()));
        }
        let mut out = ThpSizes {
            enabled: Vec::new(),
            disabled: Vec::new(),
        };
        for (kb, s) in sizes {
            let on = match s.as_str() {
                "always" | "madvise" => top.is_some(),
                "inherit" => top_on,
                _ => false,
            };
            if on {
                out.enabled.push(kb);
            } else {
                let why = if s == "inherit" {
                    format!(
                        "inherit, and THP is {}",
                        top.map_or("unavailable".into(), |t| format!("{t:?}").to_lowercase())
                    )
                } else {
                    s
                };
                out.disabled.push((kb, why));
            }
        }
        out.enabled.sort();
        out.disabled.sort();
        out
    }
    fn pmd(&self) -> bool {
        self.enabled.contains(&2048)
    }
}

/// What a calibration measures and within which limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    pub quick: bool,
    /// Repetitions of every timed configuration (at least 5).
    pub reps: usize,
    pub tlb: TlbParams,
    /// Bytes calibrate may hold at once: half the memory available at its start.
    pub budget_bytes: u64,
    /// Footprints of the 4 KB walk curve.
    pub walk_footprints: Vec<u64>,
    /// Timed steps per repetition of a node chase (a quarter more run untimed first).
    pub steps: u64,
    /// Timed steps per repetition of a line-per-page chase.
    pub l2_steps: u64,
    /// Memory first-touched per pass of a fault measurement.
    pub fault_bytes: u64,
    /// 1 GB pages first-touched per pass.
    pub fault_gb_pages: u64,
    pub thp: ThpSizes,
    /// Whether hugetlb pools can be changed (root).
    pub root: bool,
    /// Whether the machine runs under a hypervisor (walks are 2-D).
    pub hypervisor: Option<String>,
    /// Seconds the walk curves' repetitions are spread over (`--spread`): every
    /// footprint of every page size is measured round after round until that
    /// much time has passed (two rounds at least), and each figure is the
    /// median of all rounds' repetitions. 0: one round. A host whose walk cost
    /// wanders (two states minutes apart under KVM here, docs/calibrate.md) is
    /// then met in each of them.
    pub spread_s: f64,
    /// Measure the 4 KB walk curve's pairs and the walk overlap on memory like
    /// a measured program's: every repetition of either side in a child
    /// process of its own, which maps its buffer first, after the footprint was
    /// touched and freed as the measured runs' rounds do (docs/calibrate.md,
    /// "Fresh memory"). Where a 4 KB buffer lands decides its walk cost on a
    /// KVM guest (50-200 ns at 256 MiB here); one buffer per pair is one draw
    /// of it, each repetition on a fresh buffer samples it as the runs do.
    pub fresh_memory: bool,
}

impl Options {
    /// The defaults for this machine: the TLB sizes from its geometry, THP sizes
    /// from its settings, half of `mem_available` as the budget.
    pub fn new(quick: bool, m: &Machine, mem_available: u64) -> Options {
        let walk_footprints = if quick {
            vec![64 * MIB, GIB]
        } else {
            vec![
                32 * MIB,
                64 * MIB,
                128 * MIB,
                256 * MIB,
                512 * MIB,
                GIB,
                2 * GIB,
                4 * GIB,
            ]
        };
        Options {
            quick,
            reps: if quick { 5 } else { 9 },
            tlb: TlbParams::from_geometry(&m.tlb.geometry),
            budget_bytes: mem_available / 2,
            walk_footprints,
            steps: if quick { 1_000_000 } else { 1_500_000 },
            l2_steps: if quick { 5_000_000 } else { 20_000_000 },
            fault_bytes: if quick { 64 * MIB } else { 256 * MIB },
            fault_gb_pages: if quick { 1 } else { 2 },
            thp: ThpSizes::from_settings(m.thp, &m.mthp),
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
            hypervisor: m.cpu.hypervisor.clone(),
            spread_s: 0.0,
            fresh_memory: true,
        }
    }

    /// The backing of 2 MB chases: THP when it is on, else the hugetlb pool.
    fn two_m(&self) -> Option<BufferBacking> {
        if self.thp.pmd() {
            Some(BufferBacking::Thp { kb: 2048 })
        } else if self.root {
            Some(BufferBacking::Hugetlb2m)
        } else {
            None
        }
    }

    fn backing(&self, leaf: usize) -> Option<BufferBacking> {
        match leaf {
            0 => Some(BufferBacking::Base4k),
            1 => self.two_m(),
            _ => self.root.then_some(BufferBacking::Hugetlb1g),
        }
    }
}

/// The L2-hit comparison of a leaf size: one line per page, over more pages than
/// the L1 DTLB holds (at most 512, so the lines stay in a 32 KiB L1 data cache,
/// and at most half the L2, so nothing walks) against a third of the L1.
pub fn plan_l2_hit(leaf: usize, o: &Options) -> Result<Pair, String> {
    let (l1, l2) = (o.tlb.l1[leaf], o.tlb.l2[leaf]);
    let small = (l1 / 3).clamp(1, 32);
    let fit = (o.budget_bytes / LEAF_BYTES[leaf]).saturating_sub(small);
    let big = 512u64.min(l2 / 2).min(fit);
    if big < 2 * l1 {
        return Err(format!(
            "needs {} {} pages or more (twice the L1 DTLB's {l1} entries, within half the L2's {l2}){}",
            2 * l1,
            LEAF_TEXT[leaf],
            if fit < 2 * l1 {
                format!(
                    ", over the budget of {} (half the available memory)",
                    bytes_text(o.budget_bytes)
                )
            } else {
                String::new()
            }
        ));
    }
    let Some(backing) = o.backing(leaf) else {
        return Err(format!(
            "no {} pages: {}",
            LEAF_TEXT[leaf],
            if leaf == 1 {
                "THP is off and hugetlb pools need root"
            } else {
                "hugetlb pools need root"
            }
        ));
    };
    let chase = |pages| Chase {
        leaf,
        backing,
        pages,
        layout: ChaseLayout::LinePerPage,
    };
    Ok(Pair {
        a: chase(big),
        b: chase(small),
        fallback: None,
    })
}

/// The walk comparisons of a leaf size, and notes on footprints left out; `Err`
/// when none is possible here (the caller extrapolates).
pub fn plan_walks(leaf: usize, o: &Options) -> Result<(Vec<Pair>, Vec<String>), String> {
    let budget = |need: u64| {
        if need > o.budget_bytes {
            Err(format!(
                "needs {} at once, over the budget of {} (half the available memory)",
                bytes_text(need),
                bytes_text(o.budget_bytes)
            ))
        } else {
            Ok(())
        }
    };
    let nodes = |leaf: usize, backing: BufferBacking, bytes: u64| Chase {
        leaf,
        backing,
        pages: bytes / LEAF_BYTES[leaf],
        layout: ChaseLayout::Nodes,
    };
    match leaf {
        0 => {
            let Some(big) = o.two_m() else {
                return Err(
                    "no 2 MB pages to compare with: THP is off and hugetlb pools need root".into(),
                );
            };
            let mut pairs = Vec::new();
            let mut notes = Vec::new();
            for &f in &o.walk_footprints {
                let a = nodes(0, BufferBacking::Base4k, f);
                let b = nodes(1, big, f);
                let fa = fractions(0, a.pages, &o.tlb);
                if fa.walk < 0.5 {
                    notes.push(format!(
                        "{}: only {:.0}% of the steps would walk",
                        bytes_text(f),
                        fa.walk * 100.0
                    ));
                } else if fractions(1, b.pages, &o.tlb).walk > 0.0 {
                    notes.push(format!(
                        "{}: beyond the 2 MB TLB reach as well",
                        bytes_text(f)
                    ));
                } else if let Err(e) = budget(2 * f) {
                    notes.push(format!("{}: {e}", bytes_text(f)));
                } else {
                    pairs.push(Pair {
                        a,
                        b,
                        fallback: None,
                    });
                }
            }
            if pairs.is_empty() {
                return Err(format!(
                    "no footprint can be measured: {}",
                    notes.join("; ")
                ));
            }
            Ok((pairs, notes))
        }
        1 => {
            let Some(two) = o.two_m() else {
                return Err("no 2 MB pages: THP is off and hugetlb pools need root".into());
            };
            // Half the steps walk at twice the reach; compared with 1 GB pages over
            // the same footprint, or else with 2 MB pages over half the reach.
            let reach = o.tlb.l2[1] * LEAF_BYTES[1];
            let f = (2 * reach).div_ceil(GIB) * GIB;
            let a = nodes(1, two, f);
            let smaller = nodes(1, two, (reach / 2).max(GIB));
            let pair = if o.root && budget(2 * f).is_ok() {
                Pair {
                    a,
                    b: nodes(2, BufferBacking::Hugetlb1g, f),
                    fallback: Some(smaller),
                }
            } else {
                let pair = Pair {
                    a,
                    b: smaller,
                    fallback: None,
                };
                budget(pair.peak_bytes()).map_err(|e| {
                    format!(
                        "the 2 MB TLB reach is {} ({} entries): a chase where half the steps walk covers {}, and it {e}",
                        bytes_text(reach),
                        o.tlb.l2[1],
                        bytes_text(f)
                    )
                })?;
                pair
            };
            Ok((vec![pair], Vec::new()))
        }
        _ => {
            if !o.root {
                return Err("needs 1 GB pages from a hugetlb pool (root)".into());
            }
            let pa = 2 * o.tlb.l2[2];
            let pb = (o.tlb.l2[2] / 2).max(1);
            budget((pa + pb) * GIB).map_err(|e| {
                format!(
                    "the 1 GB TLB holds {} pages: a chase where half the steps walk covers {} GiB; it {e}",
                    o.tlb.l2[2], pa
                )
            })?;
            Ok((
                vec![Pair {
                    a: nodes(2, BufferBacking::Hugetlb1g, pa * GIB),
                    b: nodes(2, BufferBacking::Hugetlb1g, pb * GIB),
                    fallback: None,
                }],
                Vec::new(),
            ))
        }
    }
}

/// One fault configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPlan {
    pub backing: BufferBacking,
    /// Bytes first-touched per pass (for multi-size THP, in separate mappings of
    /// one folio each).
    pub bytes: u64,
}

/// Fault configurations, in the order of `Calibration::fault_ns`, and the backings
/// left out with the reason.
pub fn plan_faults(o: &Options) -> (Vec<FaultPlan>, Vec<(String, String)>) {
    let mut plans = vec![FaultPlan {
        backing: BufferBacking::Base4k,
        bytes: o.fault_bytes,
    }];
    let mut left = Vec::new();
    let mut thp: Vec<(u64, Option<String>)> = o.thp.enabled.iter().map(|&k| (k, None)).collect();
    thp.extend(o.thp.disabled.iter().map(|(k, s)| (*k, Some(s.clone()))));
    thp.sort();
    for (kb, off) in thp {
        let backing = BufferBacking::Thp { kb };
        match off {
            Some(setting) => left.push((
                backing.name(),
                format!("hugepages-{kb}kB/enabled is {setting} (calibrate does not change it)"),
            )),
            // Small folios get a mapping each: keep the mappings few.
            None => plans.push(FaultPlan {
                backing,
                bytes: o.fault_bytes.min(4096 * (kb << 10)),
            }),
        }
    }
    for (backing, bytes) in [
        (BufferBacking::Hugetlb2m, o.fault_bytes),
        (BufferBacking::Hugetlb1g, o.fault_gb_pages * GIB),
    ] {
        if !o.root {
            left.push((backing.name(), "reserving a hugetlb pool needs root".into()));
        } else if 2 * bytes > o.budget_bytes {
            left.push((
                backing.name(),
                format!(
                    "{} is over half the budget of {}",
                    bytes_text(bytes),
                    bytes_text(o.budget_bytes)
                ),
            ));
        } else {
            plans.push(FaultPlan { backing, bytes });
        }
    }
    (plans, left)
}

/// `SystemTime` as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_text(t: std::time::SystemTime) -> String {
    let s = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (s / 86400, s % 86400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// CPU model, size, kernel and hypervisor, in one line.
pub fn describe(m: &Machine) -> String {
    format!(
        "{} ({} family {:#x} model {:#x}), {} cores, {:.1} GiB, kernel {}, {}",
        m.cpu.brand,
        m.cpu.vendor,
        m.cpu.family,
        m.cpu.model,
        m.cores,
        m.mem_total_kb as f64 / (1 << 20) as f64,
        m.kernel,
        match &m.cpu.hypervisor {
            Some(h) => format!("under a hypervisor ({h}): walks are nested (2-D)"),
            None => "no hypervisor".into(),
        }
    )
}

/// Huge-page figures of the mappings overlapping `[start, end)` in smaps text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeUsage {
    pub rss: u64,
    pub anon_huge: u64,
    pub hugetlb: u64,
}

pub fn smaps_range(text: &str, start: u64, end: u64) -> RangeUsage {
    let mut u = RangeUsage::default();
    let mut inside = false;
    for l in text.lines() {
        let first = l.split_whitespace().next().unwrap_or("");
        if let Some((s, e)) = first.split_once('-') {
            if let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) {
                inside = s < end && e > start;
                continue;
            }
        }
        if !inside {
            continue;
        }
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
        match k {
            "Rss" => u.rss += kb << 10,
            "AnonHugePages" => u.anon_huge += kb << 10,
            "Private_Hugetlb" | "Shared_Hugetlb" => u.hugetlb += kb << 10,
            _ => {}
        }
    }
    u
}

mod measure;
pub use measure::{calibrate, options, others_share};

#[cfg(test)]
mod tests {
    use super::*;

    fn zen5() -> TlbParams {
        TlbParams {
            l1: [96, 96, 96],
            l2: [4096, 4096, 4096],
            source: "test".into(),
        }
    }

    fn opts(budget: u64) -> Options {
        Options {
            quick: false,
            reps: 5,
            tlb: zen5(),
            budget_bytes: budget,
            walk_footprints: vec![16 * MIB, 32 * MIB, 64 * MIB, 4 * GIB, 8 * GIB, 16 * GIB],
            steps: 1000,
            l2_steps: 1000,
            fault_bytes: 64 * MIB,
            fault_gb_pages: 2,
            thp: ThpSizes::from_settings(
                Some(ThpMode::Madvise),
                &[
                    (16, "never".into()),
                    (64, "always".into()),
                    (2048, "inherit".into()),
                ],
            ),
            root: true,
            hypervisor: Some("KVM".into()),
            spread_s: 0.0,
            fresh_memory: true,
        }
    }

    #[test]
    fn medians_and_spreads() {
        let s = repeated(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.reps), (2.0, 1.0, 3.0, 3));
        assert_eq!(repeated(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(repeated(&[]).is_err());
        assert!(repeated(&[1.0, f64::NAN]).is_err());
        assert!(repeated(&[1.0, f64::INFINITY]).is_err());
    }

    #[test]
    fn miss_fractions_follow_the_tlb_sizes() {
        let t = zen5();
        assert_eq!(
            fractions(0, 32, &t),
            Fractions {
                l2_hit: 0.0,
                walk: 0.0
            }
        );
        let f = fractions(0, 512, &t);
        assert!((f.l2_hit - (1.0 - 96.0 / 512.0)).abs() < 1e-12 && f.walk == 0.0);
        let f = fractions(0, 16384, &t);
        assert!((f.walk - 0.75).abs() < 1e-12);
        assert!((f.l2_hit - (4096.0 - 96.0) / 16384.0).abs() < 1e-12);
    }

    #[test]
    fn l2_hit_divides_by_the_miss_share() {
        let t = zen5();
        let (a, b) = (fractions(0, 512, &t), fractions(0, 32, &t));
        let s = per_l2_hit(&[1.625, 1.625 * 2.0, 1.625 * 3.0], a, b).unwrap();
        assert!((s.median - 4.0).abs() < 1e-9, "{s:?}");
        assert!((s.min - 2.0).abs() < 1e-9 && (s.max - 6.0).abs() < 1e-9);
        // Swapped, or walking: refused.
        assert!(per_l2_hit(&[1.0], b, a).is_err());
        assert!(per_l2_hit(&[1.0], fractions(0, 1 << 20, &t), b).is_err());
    }

    #[test]
    fn walk_cost_takes_out_the_l2_hits_then_divides() {
        let t = zen5();
        // 64 MiB: 16384 4 KB pages vs 32 2 MB pages (all in the L1).
        let a = fractions(0, 16384, &t);
        let b = fractions(1, 32, &t);
        assert_eq!(
            b,
            Fractions {
                l2_hit: 0.0,
                walk: 0.0
            }
        );
        let l2 = 2.0;
        let walk = 10.0;
        let diff = a.walk * walk + a.l2_hit * l2;
        let s = per_walk(&[diff, diff, diff], a, b, [l2, l2]).unwrap();
        assert!((s.median - walk).abs() < 1e-9, "{s:?}");
        // B with L2 hits of its own (1024 2 MB pages, beyond the L1): charged back.
        let b = fractions(1, 1024, &t);
        let a = fractions(0, 1024 * 512, &t);
        let diff = a.walk * walk + a.l2_hit * l2 - b.l2_hit * 3.0;
        let s = per_walk(&[diff], a, b, [l2, 3.0]).unwrap();
        assert!((s.median - walk).abs() < 1e-9, "{s:?}");
        // Nothing walks, or both walk: refused.
        assert!(per_walk(&[1.0], b, b, [l2, l2]).is_err());
        assert!(per_walk(&[1.0], a, a, [l2, l2]).is_err());
        assert!(per_walk(&[f64::NAN], fractions(0, 16384, &t), b, [l2, l2]).is_err());
    }

    #[test]
    fn curves_are_sorted_and_reject_noise() {
        let s = |m: f64| Repeated {
            median: m,
            min: m,
            max: m,
            reps: 5,
        };
        let (c, rejected) = curve(&[
            (4.0 * MIB as f64, s(120.0)),
            (256.0 * 1024.0, s(7.0)),
            (128.0 * 1024.0, s(-1.0)),
            (512.0 * 1024.0, s(f64::NAN)),
            (f64::NAN, s(3.0)),
            (0.0, s(3.0)),
            (1.0 * MIB as f64, s(25.0)),
            (1.0 * MIB as f64, s(26.0)),
        ]);
        assert_eq!(
            c,
            vec![
                (256.0 * 1024.0, 7.0),
                (1.0 * MIB as f64, 25.0),
                (4.0 * MIB as f64, 120.0)
            ]
        );
        assert_eq!(rejected.len(), 5, "{rejected:?}");
        assert!(rejected
            .iter()
            .any(|r| r.contains("128 KiB") && r.contains("noise")));
    }

    #[test]
    fn chase_order_visits_every_node_once_and_scatters() {
        for n in [1u64, 2, 3, 32, 100, 4096, 5000] {
            let mut seen = vec![false; n as usize];
            let mut count = 0;
            for x in chase_order(n, 7) {
                assert!(!seen[x as usize], "n={n}: {x} twice");
                seen[x as usize] = true;
                count += 1;
            }
            assert_eq!(count, n);
        }
        // Consecutive steps rarely stay in one 4 KB page (64 nodes) or go to the
        // next node: about as rarely as random.
        let n = 1u64 << 20;
        let order: Vec<u64> = chase_order(n, 42).collect();
        // (Random: n / pages = 64 and 1.)
        let same_page = order.windows(2).filter(|w| w[0] / 64 == w[1] / 64).count();
        let next = order.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(same_page < 150, "{same_page} steps stay in their page");
        assert!(next < 20, "{next} steps go to the next node");
        // Pages are visited evenly: no page twice within a short window much more
        // often than chance.
        let pages = n / 64;
        let mut last = vec![u64::MAX; pages as usize];
        let mut close = 0;
        for (i, x) in order.iter().enumerate() {
            let p = (x / 64) as usize;
            if last[p] != u64::MAX && i as u64 - last[p] < 64 {
                close += 1;
            }
            last[p] = i as u64;
        }
        // Random: about 64 / pages = 0.4 % of the steps.
        assert!(close < n as usize / 100, "{close}");
    }

    #[test]
    fn scatter_is_a_bijection_for_every_width() {
        for bits in 0..=12u32 {
            let n = 1u64 << bits;
            let mut v: Vec<u64> = (0..n).map(|x| scatter(x, bits, 99)).collect();
            v.sort();
            assert_eq!(v, (0..n).collect::<Vec<_>>(), "bits {bits}");
        }
    }

    #[test]
    fn plans_fit_the_tlbs_and_the_budget() {
        let o = opts(11 * GIB);
        let p = plan_l2_hit(0, &o).unwrap();
        assert_eq!((p.a.pages, p.b.pages), (512, 32));
        assert_eq!(p.a.layout, ChaseLayout::LinePerPage);
        let p = plan_l2_hit(1, &o).unwrap();
        assert_eq!(p.a.backing, BufferBacking::Thp { kb: 2048 });
        assert_eq!(p.peak_bytes(), (512 + 32) * 2 * MIB);
        // 96 1 GB pages fit the L1: an L2-hit chase needs 192 of them.
        let e = plan_l2_hit(2, &o).unwrap_err();
        assert!(e.contains("192") && e.contains("budget"), "{e}");
        // A small L1 (Intel: 4 1 GB entries) within the budget: as many as fit.
        let mut o1 = opts(11 * GIB);
        o1.tlb.l1[2] = 4;
        o1.tlb.l2[2] = 16;
        let p = plan_l2_hit(2, &o1).unwrap();
        assert_eq!((p.a.pages, p.b.pages), (8, 1));
        assert!(p.peak_bytes() <= o1.budget_bytes);

        let (pairs, notes) = plan_walks(0, &o).unwrap();
        let sizes: Vec<u64> = pairs.iter().map(|p| p.a.bytes()).collect();
        // 16 MiB walks on fewer than half its steps; 8 GiB and 16 GiB are over budget.
        assert_eq!(sizes, vec![32 * MIB, 64 * MIB, 4 * GIB]);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(pairs.iter().all(|p| p.b.leaf == 1 && p.a.leaf == 0));
        // 2 MB reach is 8 GiB: measuring needs 16 GiB twice.
        let e = plan_walks(1, &o).unwrap_err();
        assert!(e.contains("8 GiB") && e.contains("budget"), "{e}");
        assert!(plan_walks(2, &o).is_err());
        // A big machine measures 2 MB walks against 1 GB pages, with a fallback.
        let (pairs, _) = plan_walks(1, &opts(64 * GIB)).unwrap();
        assert_eq!(pairs[0].a.bytes(), 16 * GIB);
        assert_eq!(pairs[0].b.backing, BufferBacking::Hugetlb1g);
        assert_eq!(pairs[0].fallback.as_ref().unwrap().leaf, 1);
        assert!(fractions(1, pairs[0].fallback.as_ref().unwrap().pages, &zen5()).walk == 0.0);
        // Without root or THP there are no 2 MB pages to compare with.
        let mut o = opts(11 * GIB);
        o.root = false;
        o.thp = ThpSizes::from_settings(Some(ThpMode::Never), &[]);
        assert!(plan_walks(0, &o).is_err());
        assert!(plan_l2_hit(1, &o).is_err());
    }

    #[test]
    fn faults_cover_the_enabled_sizes_only() {
        let o = opts(11 * GIB);
        let (plans, left) = plan_faults(&o);
        let names: Vec<String> = plans.iter().map(|p| p.backing.name()).collect();
        assert_eq!(
            names,
            ["4k", "thp-64k", "thp-2m", "hugetlb-2m", "hugetlb-1g"]
        );
        assert_eq!(plans[1].bytes, 64 * MIB);
        assert_eq!(left.len(), 1);
        assert!(left[0].0 == "thp-16k" && left[0].1.contains("never"));
        let mut o = opts(11 * GIB);
        o.root = false;
        let (plans, left) = plan_faults(&o);
        assert!(plans.iter().all(|p| p.backing.pool_kb().is_none()));
        assert_eq!(left.len(), 3);
        // THP never: inherit sizes are off, explicit ones still follow their setting.
        let t = ThpSizes::from_settings(
            Some(ThpMode::Never),
            &[(64, "always".into()), (2048, "inherit".into())],
        );
        assert_eq!(t.enabled, vec![64]);
        assert!(t.disabled[0].1.contains("never"));
        assert_eq!(kb_text(1024), "1m");
        assert_eq!(kb_text(16), "16k");
    }

    #[test]
    fn timestamps() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(0);
        assert_eq!(utc_text(t), "1970-01-01T00:00:00Z");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_709_210_096);
        assert_eq!(utc_text(t), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn smaps_ranges() {
        let t = "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\nRss:  4096 kB\nAnonHugePages:  4096 kB\nVmFlags: rd wr hg\n\
                 7f0000400000-7f0000600000 rw-p 00000000 00:00 0\nRss:  8 kB\nAnonHugePages:  0 kB\n\
                 7f1000000000-7f1040000000 rw-s 00000000 00:0f 1 /anon_hugepage (deleted)\nRss: 0 kB\nPrivate_Hugetlb: 1048576 kB\n";
        let u = smaps_range(t, 0x7f0000000000, 0x7f0000400000);
        assert_eq!(
            u,
            RangeUsage {
                rss: 4 << 20,
                anon_huge: 4 << 20,
                hugetlb: 0
            }
        );
        let u = smaps_range(t, 0x7f0000200000, 0x7f0000500000);
        assert_eq!(u.rss, (4 << 20) + (8 << 10));
        assert_eq!(smaps_range(t, 0x7f1000000000, 0x7f1000001000).hugetlb, GIB);
        assert_eq!(smaps_range("garbage\n", 0, u64::MAX), RangeUsage::default());
    }

    #[test]
    fn overlap_ends_from_the_chase_and_the_loads() {
        let tlb = zen5();
        // 256 MiB: 65 536 4 KB pages (walk share 1 − 4096/65536), 128 2 MB pages
        // (96 in the L1, the rest L2 hits).
        let a = fractions(0, 65_536, &tlb);
        let b = fractions(1, 128, &tlb);
        let l2 = [2.0, 20.0];
        let serial_l2 = a.l2_hit * l2[0] - b.l2_hit * l2[1];
        // The machine: memory 160 ns, a walk 40 ns in a chase; the loads spend
        // 25 ns per walk and hide ten translations behind each other.
        let chase_a = 160.0 + a.walk * 40.0 + a.l2_hit * l2[0];
        let chase_b = chase_a - a.walk * 40.0 - serial_l2;
        let loads_a = 25.0 * a.walk;
        let loads_b = loads_a - (a.walk * 40.0 + serial_l2) / 10.0;
        let five = |v: f64| vec![v; 5];
        let e = overlap_ends(
            (&five(chase_a), &five(chase_b)),
            (&five(loads_a), &five(loads_b)),
            None,
            a,
            b,
            l2,
            524_288.0,
        )
        .unwrap();
        assert!((e.dependent_walk.median - 40.0).abs() < 1e-9, "{e:?}");
        assert!(
            (e.independent_walk.median - (40.0 + serial_l2 / a.walk) / 10.0).abs() < 1e-9,
            "{e:?}"
        );
        assert!((e.walk_concurrency - 10.0).abs() < 1e-9, "{e:?}");
        assert!((e.independent_ns_per_walk - 25.0).abs() < 1e-9, "{e:?}");
        assert!((e.memory_ns - 160.0 / a.walk).abs() < 1e-9, "{e:?}");
        assert_eq!((e.rmw_walk, e.dirty_ratio), (None, 0.0));
        // The same loads writing back: 4 KB as fast, 2 MB slower, so a smaller
        // share saved; dirty_ratio is the loads' share over theirs, less one.
        let rmw_b = loads_a - 0.8 * (loads_a - loads_b);
        let w = overlap_ends(
            (&five(chase_a), &five(chase_b)),
            (&five(loads_a), &five(loads_b)),
            Some((&five(loads_a), &five(rmw_b))),
            a,
            b,
            l2,
            524_288.0,
        )
        .unwrap();
        assert!((w.dirty_ratio - 0.25).abs() < 1e-9, "{w:?}");
        let saved = w.rmw_walk.unwrap().median;
        assert!(
            (saved - 0.8 * e.independent_walk.median).abs() < 1e-9,
            "{w:?}"
        );
        assert_eq!(
            (w.walk_concurrency, w.memory_ns),
            (e.walk_concurrency, e.memory_ns)
        );
        // Writes that save a larger share than loads cost nothing more; uneven
        // timings of them are refused.
        let more = loads_a - 1.2 * (loads_a - loads_b);
        let w = overlap_ends(
            (&five(chase_a), &five(chase_b)),
            (&five(loads_a), &five(loads_b)),
            Some((&five(loads_a), &five(more))),
            a,
            b,
            l2,
            524_288.0,
        )
        .unwrap();
        assert_eq!(w.dirty_ratio, 0.0);
        assert!(overlap_ends(
            (&five(chase_a), &five(chase_b)),
            (&five(loads_a), &five(loads_b)),
            Some((&five(loads_a), &[more])),
            a,
            b,
            l2,
            524_288.0,
        )
        .is_err());
        // Loads that save nothing (or a chase within the noise): no figure.
        let err = overlap_ends(
            (&five(chase_a), &five(chase_b)),
            (&five(loads_a), &five(loads_a)),
            None,
            a,
            b,
            l2,
            524_288.0,
        )
        .unwrap_err();
        assert!(err.to_string().contains("hid entirely"), "{err}");
        assert!(overlap_ends(
            (&five(chase_b), &five(chase_b)),
            (&five(loads_a), &five(loads_b)),
            None,
            a,
            b,
            l2,
            1.0
        )
        .is_err());
        // Uneven timings are refused.
        assert!(overlap_ends(
            (&five(1.0), &[1.0]),
            (&five(1.0), &five(1.0)),
            None,
            a,
            b,
            l2,
            1.0
        )
        .is_err());
        // Stored, they are checked.
        let mut c = sample();
        c.overlap = Some(e);
        c.validate().unwrap();
        c.overlap = Some(OverlapEnds {
            walk_concurrency: 0.5,
            ..e
        });
        assert!(c.validate().is_err());
        c.overlap = Some(OverlapEnds {
            dirty_ratio: -0.2,
            ..e
        });
        assert!(c.validate().is_err());
        // A calibration from before the writes were measured reads as writes
        // costing what loads do.
        let mut v = serde_json::to_value(e).unwrap();
        v.as_object_mut().unwrap().remove("rmw_walk");
        v.as_object_mut().unwrap().remove("dirty_ratio");
        let old: OverlapEnds = serde_json::from_value(v).unwrap();
        assert_eq!((old.rmw_walk, old.dirty_ratio), (None, 0.0));
    }

    #[test]
    fn overlap_footprint_walks_on_4k_and_never_on_2m() {
        // 4 096 L2 entries: 256 MiB (65 536 pages) walks on 94 % of the steps.
        let p = plan_overlap(&opts(64 * GIB)).unwrap();
        assert_eq!(p.a.bytes(), 256 * MIB);
        assert_eq!(p.a.backing, BufferBacking::Base4k);
        assert_eq!(p.b.leaf, 1);
        assert_eq!(p.b.bytes(), 256 * MIB);
        // A larger L2 TLB needs a larger footprint.
        let mut o = opts(64 * GIB);
        o.tlb.l2[0] = 16_384;
        assert_eq!(plan_overlap(&o).unwrap().a.bytes(), GIB);
        // Over the budget: said.
        let err = plan_overlap(&opts(256 * MIB)).unwrap_err();
        assert!(err.contains("budget"), "{err}");
    }

    fn sample() -> Calibration {
        Calibration {
            l2_hit_ns: [2.0, 2.0, 2.0],
            walk_curve: [
                vec![(131072.0, 7.0), (4194304.0, 120.0)],
                vec![(4096.0, 15.0)],
                vec![(4096.0, 15.0)],
            ],
            fault_ns: vec![("4k".into(), 2000.0), ("thp-2m".into(), 200_000.0)],
            sources: vec!["test".into()],
            machine: "test".into(),
            created: "2025-01-01T00:00:00Z".into(),
            tlb: None,
            quick: true,
            figures: Vec::new(),
            raw: Vec::new(),
            overlap: None,
            spread_s: 0.0,
            fresh_memory: false,
        }
    }

    #[test]
    fn stored_calibrations_are_checked() {
        let c = sample();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(Calibration::from_json(v.clone()).unwrap(), c);
        assert_eq!(c.fault("thp-2m"), Some(200_000.0));
        assert_eq!(c.fault("hugetlb-1g"), None);
        // Older or partial records without the optional parts still read.
        let mut min = v.clone();
        for k in ["tlb", "quick", "figures", "raw", "spread_s"] {
            min.as_object_mut().unwrap().remove(k);
        }
        assert!(Calibration::from_json(min).is_ok());
        let bad = |f: &dyn Fn(&mut Calibration)| {
            let mut c = sample();
            f(&mut c);
            Calibration::from_json(serde_json::to_value(&c).unwrap()).unwrap_err()
        };
        assert!(format!("{:#}", bad(&|c| c.l2_hit_ns[1] = -1.0)).contains("L2-hit"));
        assert!(format!("{:#}", bad(&|c| c.walk_curve[0].reverse())).contains("sorted"));
        assert!(format!("{:#}", bad(&|c| c.walk_curve[2].clear())).contains("empty"));
        assert!(format!("{:#}", bad(&|c| c.fault_ns[0].1 = 0.0)).contains("4k"));
        assert!(format!("{:#}", bad(&|c| c.spread_s = -60.0)).contains("spread"));
        // (JSON has no NaN: a NaN stored as null does not read at all.)
        let mut c = sample();
        c.fault_ns[0].1 = f64::NAN;
        assert!(c.validate().is_err());
        assert!(Calibration::from_json(serde_json::to_value(&c).unwrap()).is_err());
        assert!(format!("{:#}", bad(&|c| c.fault_ns[1].0 = "4k".into())).contains("twice"));
        let e = Calibration::from_json(serde_json::json!({"l2_hit_ns": "x"})).unwrap_err();
        assert!(format!("{e:#}").contains("not a calibration"), "{e:#}");
    }
}
