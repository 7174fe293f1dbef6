//! The cost model (seed 001 eq. 2), in nanoseconds rather than cycles: this
//! machine class (VMs without a PMU) cannot count cycles, but it can time.
//!
//! MissTime(M) = Σ L1-miss/L2-hit × c_l2hit(size)
//!             + Σ walks × c_walk(size, page-table working set)
//!             + Σ faults × c_fault(backing)
//!
//! A page walk costs what fetching its page-table entries costs, and that depends
//! on where they are: in the caches while the leaf entries of the pages a mapping
//! touches (8 bytes per page) are few, in memory when they are many, and in a VM
//! the nested walk multiplies it. So the walk cost is a curve over that working
//! set, not a constant. The defaults were measured on the reference machine (AMD
//! EPYC Zen 5 KVM guest, kernel 6.18); `docs/model.md` gives the experiments.

use crate::page::{Backing, PageSize};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Extra time of an access that misses the first-level DTLB and hits a lower
    /// level, per leaf size (4k, 2m, 1g).
    pub l2_hit_ns: [f64; 3],
    /// Time of a page walk per leaf size (4k, 2m, 1g), as (page-table working set
    /// in bytes, ns) points sorted by working set; interpolated on a log scale,
    /// flat beyond.
    pub walk_curve: [Vec<(f64, f64)>; 3],
    /// Time of a fault per backing: its first touch and (calibrations since
    /// stop 41) the unmap of what it mapped, both within a run. Backings not listed are
    /// interpolated by folio size between the listed ones of the same mechanism
    /// (mTHP between 4 KB and THP 2 MB; hugetlb 1 GB scaled from 2 MB by size).
    pub fault_ns: Vec<(Backing, f64)>,
    /// Walk overlap (docs/model.md §4, "Overlap"), the two ends it is
    /// interpolated between. A dependent chase: a walk and the access it
    /// precedes in series, the access costing `memory_ns` (a chase's time per
    /// step on 2 MB pages, beyond the caches), one walk at a time. Independent
    /// random loads: `walk_concurrency` walks hidden behind each other (the
    /// chase's walk cost over those loads' saving per walk), at a native time
    /// of `independent_ns_per_walk` per walk.
    #[serde(default = "default_memory_ns")]
    pub memory_ns: f64,
    #[serde(default = "default_walk_concurrency")]
    pub walk_concurrency: f64,
    #[serde(default = "default_independent_ns_per_walk")]
    pub independent_ns_per_walk: f64,
    /// How much longer, as a share of a walk and its access in series, the
    /// access after a walk takes when it dirties its line (a read-modify-write)
    /// than when it loads: measured by `hugetune calibrate` as the share of its
    /// time independent loads save on 2 MB pages over the share the same loads
    /// writing each line back save, less one (docs/model.md §4, "Writes").
    /// 0: writes cost as loads (the defaults, and calibrations made before it
    /// was measured).
    #[serde(default)]
    pub dirty_ratio: f64,
    /// Where the constants come from.
    pub source: String,
    /// How far each calibrated figure ranged over its repetitions (`None`: the
    /// defaults, or a calibration without spreads): the prediction intervals'
    /// calibration part (`rank::prediction_intervals`, docs/model.md §4.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Box<CostSpread>>,
}

/// Each calibrated figure at its fastest (`[0]`) and slowest (`[1]`)
/// repetition; a figure measured once, or extrapolated, has both ends at its
/// value. The walk curves have the median curve's working sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostSpread {
    pub l2_hit_ns: [[f64; 3]; 2],
    pub walk_curve: [[Vec<(f64, f64)>; 3]; 2],
    pub fault_ns: [Vec<(Backing, f64)>; 2],
    /// The walks hidden behind each other at the two ends of the independent
    /// loads' saving per walk (the larger saving, the fewer hidden).
    pub walk_concurrency: [f64; 2],
}

/// The groups of figures whose ends `CostModel::corners` combines: one kind
/// of measurement each (a figure's repetitions come from one kind of run, and
/// figures of one group move together when the host's state does).
const SPREAD_GROUPS: usize = 6;

/// The reference machine's chase over 256 MiB on 2 MB pages: 161.9 ns per step
/// (docs/model.md §4, the walk-cost table).
fn default_memory_ns() -> f64 {
    162.0
}

/// Independent random loads in the ranking run of 2026-11-25 (randmem-80 less
/// randmem-0, heap-large, 256 MiB: its 12.8 M random accesses): 1.3 ns saved
/// per access on 2 MB pages, against the default curve's 22 ns per walk at that
/// page table (docs/model.md §4). `hugetune calibrate` measures it.
fn default_walk_concurrency() -> f64 {
    17.0
}

/// Same loads: 0.319 s for 12.8 M accesses on 4 KB pages, each a walk.
fn default_independent_ns_per_walk() -> f64 {
    25.0
}

const KIB: f64 = 1024.0;

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            // Pointer chase, one line per page: 1.1 ns (in L1 DTLB) vs 3.0 ns (L2 hit).
            l2_hit_ns: [2.0, 2.0, 2.0],
            walk_curve: [
                // Chase over 64 MiB .. 2 GiB, 4 KB pages against THP, per walk.
                vec![
                    (256.0 * KIB, 7.0),
                    (512.0 * KIB, 22.0),
                    (1024.0 * KIB, 25.0),
                    (2048.0 * KIB, 95.0),
                    (4096.0 * KIB, 121.0),
                ],
                // 2 MB pages: page-directory entries stay cached; 96..512 pages: ~15 ns.
                vec![(4.0 * KIB, 15.0)],
                // 1 GB pages: a handful of PUD entries, always cached; taken as the
                // 2 MB figure until `hugetune calibrate` measures it.
                vec![(8.0, 15.0)],
            ],
            // First touch of 1 GiB, memory already backed by the host: 2.0 us per
            // 4 KB fault, 201 us per THP fault (allocation + zeroing), 92 us per
            // hugetlb fault (zeroing); first touch alone, without the unmap a
            // calibration adds (docs/model.md §4). Memory the host took back
            // costs far more once.
            fault_ns: vec![
                (Backing::Base4k, 2_000.0),
                (Backing::Thp2m, 201_000.0),
                (Backing::Hugetlb2m, 92_000.0),
            ],
            memory_ns: default_memory_ns(),
            walk_concurrency: default_walk_concurrency(),
            independent_ns_per_walk: default_independent_ns_per_walk(),
            dirty_ratio: 0.0,
            source: "defaults measured on an AMD EPYC (Zen 5) KVM guest, see docs/model.md".into(),
            spread: None,
        }
    }
}

/// Log-scale interpolation over sorted points, flat outside them.
fn interpolate(points: &[(f64, f64)], x: f64) -> f64 {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return 0.0;
    };
    if x <= first.0 {
        return first.1;
    }
    if x >= last.0 {
        return last.1;
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x <= x1 {
            let t = (x.ln() - x0.ln()) / (x1.ln() - x0.ln());
            return y0 + t * (y1 - y0);
        }
    }
    last.1
}

impl CostModel {
    fn listed(&self, b: Backing) -> Option<f64> {
        self.fault_ns.iter().find(|(x, _)| *x == b).map(|&(_, v)| v)
    }

    /// Fault cost of one folio of backing `b`.
    pub fn fault(&self, b: Backing) -> f64 {
        if let Some(v) = self.listed(b) {
            return v;
        }
        let base = self.listed(Backing::Base4k).unwrap_or(2_000.0);
        match b {
            Backing::Thp(_) => {
                // Linear in the bytes zeroed between the nearest listed sizes.
                let mut pts: Vec<(f64, f64)> = vec![(4096.0, base)];
                pts.extend(
                    self.fault_ns
                        .iter()
                        .filter(|(x, _)| x.is_thp())
                        .map(|&(x, v)| (x.folio_bytes() as f64, v)),
                );
                pts.sort_by(|a, c| a.0.total_cmp(&c.0));
                let x = b.folio_bytes() as f64;
                let lo = pts
                    .iter()
                    .rev()
                    .find(|p| p.0 <= x)
                    .copied()
                    .unwrap_or(pts[0]);
                match pts.iter().find(|p| p.0 >= x).copied() {
                    Some(hi) if hi.0 > lo.0 => lo.1 + (x - lo.0) / (hi.0 - lo.0) * (hi.1 - lo.1),
                    Some(hi) => hi.1,
                    None => lo.1 * x / lo.0,
                }
            }
            Backing::Hugetlb1g => {
                let two = self
                    .listed(Backing::Hugetlb2m)
                    .unwrap_or_else(|| self.fault(Backing::Thp2m));
                two * 512.0
            }
            Backing::Hugetlb2m => self.fault(Backing::Thp2m),
            Backing::Base4k => base,
        }
    }
    pub fn l2_hit(&self, s: PageSize) -> f64 {
        self.l2_hit_ns[s.index()]
    }
    /// Time of one walk ending in a leaf of size `s` when the mapping touches
    /// `pages` distinct pages of that size (8 bytes of leaf page table each).
    pub fn walk(&self, s: PageSize, pages: u64) -> f64 {
        interpolate(&self.walk_curve[s.index()], (pages.max(1) * 8) as f64)
    }

    /// This model with each group of figures (L2 hits, 4 KB walks, 2 MB and
    /// 1 GB walks, 4 KB faults, huge faults, the overlap) at end `ends[g]` of
    /// its spread (0: the fastest repetitions, 1: the slowest), every figure
    /// of a group at the same end (a group is one kind of measurement, whose
    /// figures move together when the host's state does). The result has no
    /// spread of its own; without a spread, the model as it is.
    fn at_ends(&self, ends: [usize; SPREAD_GROUPS]) -> CostModel {
        let mut c = CostModel {
            spread: None,
            ..self.clone()
        };
        let Some(s) = &self.spread else {
            return c;
        };
        for leaf in 0..3 {
            c.l2_hit_ns[leaf] = s.l2_hit_ns[ends[0]][leaf];
            let end = ends[if leaf == 0 { 1 } else { 2 }];
            // The median curve's points, each at its end where the spread has it.
            c.walk_curve[leaf] = self.walk_curve[leaf]
                .iter()
                .map(|&(x, y)| {
                    let e = s.walk_curve[end][leaf].iter().find(|p| p.0 == x);
                    (x, e.map_or(y, |p| p.1))
                })
                .collect();
        }
        c.fault_ns = self
            .fault_ns
            .iter()
            .map(|&(b, v)| {
                let end = ends[if b == Backing::Base4k { 3 } else { 4 }];
                let e = s.fault_ns[end].iter().find(|x| x.0 == b);
                (b, e.map_or(v, |x| x.1))
            })
            .collect();
        c.walk_concurrency = s.walk_concurrency[ends[5]];
        c
    }

    /// The cost models at the corners of the spread: every group at either
    /// end, every combination (64 models, none with a spread of its own).
    /// Empty without a spread. A prediction's calibration interval is the
    /// range of its speedup over them: which end of which group lowers a
    /// saving depends on the mapping (slow 4 KB walks raise a huge mapping's
    /// saving, slow 2 MB walks lower it, more hidden walks lower both), so
    /// every corner is tried rather than two.
    pub fn corners(&self) -> Vec<CostModel> {
        if self.spread.is_none() {
            return vec![];
        }
        (0..1usize << SPREAD_GROUPS)
            .map(|bits| self.at_ends(std::array::from_fn(|g| (bits >> g) & 1)))
            .collect()
    }

    /// Checks that every constant is finite and non-negative and the curves sorted.
    pub fn validate(&self) -> Result<(), String> {
        let curves = self.walk_curve.iter().flatten().flat_map(|&(x, y)| [x, y]);
        let all = self
            .l2_hit_ns
            .iter()
            .copied()
            .chain(self.fault_ns.iter().map(|&(_, v)| v))
            .chain([self.memory_ns])
            .chain(curves);
        if all.clone().any(|v| !v.is_finite() || v < 0.0) {
            return Err("cost model constants must be finite and non-negative".into());
        }
        if !(self.walk_concurrency.is_finite() && self.walk_concurrency >= 1.0) {
            return Err("walk_concurrency must be a finite number of walks, at least 1".into());
        }
        if !(self.independent_ns_per_walk.is_finite() && self.independent_ns_per_walk > 0.0) {
            return Err("independent_ns_per_walk must be a positive time".into());
        }
        if !(self.dirty_ratio.is_finite() && (0.0..=10.0).contains(&self.dirty_ratio)) {
            return Err("dirty_ratio must be a share between 0 and 10".into());
        }
        for c in &self.walk_curve {
            if c.is_empty() || c.windows(2).any(|w| w[0].0 >= w[1].0) || c[0].0 <= 0.0 {
                return Err(
                    "a walk cost curve must be non-empty, with increasing positive working sets"
                        .into(),
                );
            }
        }
        for c in self.corners() {
            c.validate()
                .map_err(|e| format!("the calibration's spread: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_cost_follows_the_page_table_working_set() {
        let c = CostModel::default();
        c.validate().unwrap();
        // 64 MiB of 4 KB pages: 128 KiB of page table, cached: cheap.
        assert_eq!(c.walk(PageSize::P4k, 16 * 1024), 7.0);
        // 1 GiB: 2 MiB of page table.
        assert_eq!(c.walk(PageSize::P4k, 256 * 1024), 95.0);
        // Between points: log-linear.
        let mid = c.walk(PageSize::P4k, 64 * 1024 + 32 * 1024);
        assert!(mid > 22.0 && mid < 25.0, "{mid}");
        // Beyond the last point: flat.
        assert_eq!(c.walk(PageSize::P4k, 1 << 30), 121.0);
        assert_eq!(c.walk(PageSize::P2m, 512), 15.0);
    }

    #[test]
    fn unlisted_fault_costs_are_interpolated_by_folio_size() {
        let c = CostModel::default();
        assert_eq!(c.fault(Backing::Base4k), 2_000.0);
        let f64k = c.fault(Backing::Thp(16));
        let f1m = c.fault(Backing::Thp(20));
        assert!(
            f64k > 2_000.0 && f64k < f1m && f1m < 201_000.0,
            "{f64k} {f1m}"
        );
        assert_eq!(c.fault(Backing::Hugetlb1g), 92_000.0 * 512.0);
    }

    /// The defaults with every figure given both ends: 4 KB walks and faults
    /// `f` times cheaper and dearer, the rest likewise by their own factors.
    fn spread(c: &CostModel) -> CostSpread {
        let scale = |v: &[(f64, f64)], f: f64| v.iter().map(|&(x, y)| (x, y * f)).collect();
        let ends = |f: f64| c.walk_curve.clone().map(|v| scale(&v, f));
        CostSpread {
            l2_hit_ns: [c.l2_hit_ns.map(|v| v * 0.5), c.l2_hit_ns.map(|v| v * 2.0)],
            walk_curve: [ends(0.5), ends(2.0)],
            fault_ns: [0.8, 1.25].map(|f| c.fault_ns.iter().map(|&(b, v)| (b, v * f)).collect()),
            walk_concurrency: [c.walk_concurrency / 3.0, c.walk_concurrency * 3.0],
        }
    }

    #[test]
    fn the_corners_combine_every_group_at_either_end() {
        let mut c = CostModel::default();
        assert!(c.corners().is_empty(), "the defaults have no spread");
        c.spread = Some(Box::new(spread(&c)));
        c.validate().unwrap();
        let corners = c.corners();
        assert_eq!(corners.len(), 64);
        assert!(corners
            .iter()
            .all(|k| k.spread.is_none() && k.validate().is_ok()));
        let base = CostModel::default();
        // Each group takes both of its ends, independently of the others: the
        // 4 KB walk curve's ends appear with both ends of the 2 MB one, and
        // the 4 KB fault's with both of the THP fault's.
        let w = |k: &CostModel| (k.walk(PageSize::P4k, 1 << 18), k.walk(PageSize::P2m, 512));
        let mut seen: Vec<(f64, f64)> = corners.iter().map(w).collect();
        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
        seen.dedup();
        let (w4, w2) = w(&base);
        assert_eq!(
            seen,
            vec![
                (w4 * 0.5, w2 * 0.5),
                (w4 * 0.5, w2 * 2.0),
                (w4 * 2.0, w2 * 0.5),
                (w4 * 2.0, w2 * 2.0)
            ]
        );
        let f = |k: &CostModel| (k.fault(Backing::Base4k), k.fault(Backing::Thp2m));
        let mut seen: Vec<(f64, f64)> = corners.iter().map(f).collect();
        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
        seen.dedup();
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(corners
            .iter()
            .any(|k| k.walk_concurrency == base.walk_concurrency * 3.0 && k.l2_hit_ns[0] == 1.0));
        // A spread that is no number is an error of the whole model.
        let mut bad = c.clone();
        bad.spread.as_mut().unwrap().walk_concurrency[1] = f64::NAN;
        assert!(bad.validate().unwrap_err().contains("spread"));
    }

    #[test]
    fn bad_constants_are_rejected() {
        let mut c = CostModel::default();
        c.walk_curve[0] = vec![(2.0, 1.0), (1.0, 2.0)];
        assert!(c.validate().is_err());
        let mut c = CostModel::default();
        c.fault_ns[0].1 = f64::NAN;
        assert!(c.validate().is_err());
    }
}
