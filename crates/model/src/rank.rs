//! From page-level counts to decisions: the cost of each mapping (seed 001 eq. 2),
//! the significance test (§5.3.1), the percentage-of-maximal-benefit ranking and the
//! huge pages each mapping needs.

use crate::analysis::{AnalysisResult, MappingResult};
use crate::categorize::Site;
use crate::category::Category;
use crate::cost::CostModel;
use crate::page::{Backing, PageSize};
use crate::stats::median;
use serde::{Deserialize, Serialize};

/// Seed 001 §5.3.1: 100 K dTLB misses per second, 1 000 page faults per second.
pub const SIG_TLB_MISSES_PER_S: f64 = 100_000.0;
pub const SIG_FAULTS_PER_S: f64 = 1_000.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Significance {
    /// Page walks (L2 DTLB misses) per second with all data on 4 KB pages,
    /// estimated by the model (no PMU needed).
    pub tlb_misses_per_s: f64,
    pub faults_per_s: f64,
    pub passes: bool,
    /// "model" when the rates are model estimates, "pmu" when counted.
    pub source: String,
    /// The modelled page walks with all data on 4 KB pages, per category with
    /// any: where the misses are, which an empty plan explains
    /// (`plan::miss_shares_text`). Empty in profiles stored before it existed.
    #[serde(default)]
    pub walks_by_category: Vec<(Category, u64)>,
}

/// Significance test on the all-small mapping over the native run time.
pub fn significance(result: &AnalysisResult, native_seconds: f64) -> Significance {
    let t = result.all_small().total();
    let secs = native_seconds.max(1e-9);
    let tlb = t.walks as f64 / secs;
    let faults = t.faults as f64 / secs;
    Significance {
        tlb_misses_per_s: tlb,
        faults_per_s: faults,
        passes: tlb >= SIG_TLB_MISSES_PER_S || faults >= SIG_FAULTS_PER_S,
        source: "model".into(),
        walks_by_category: Category::ALL
            .iter()
            .map(|&c| (c, result.all_small().category_total(c).walks))
            .filter(|&(_, w)| w > 0)
            .collect(),
    }
}

/// The prediction for one mapping with a concrete backing per huge category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The mapping's name (`all-small`, `heap-large`, `heap-large:1g`, `all-large`, ...).
    pub mapping: String,
    /// The mapping with its backings, e.g. `heap-large:hugetlb static:thp`.
    pub label: String,
    pub base: bool,
    pub assignments: Vec<(Category, Backing)>,
    /// Time spent in TLB misses and faults (ns), eq. 2; with per-core TLBs,
    /// the wall-clock share: every core's, over the cores busy at once.
    pub miss_time_ns: f64,
    /// Saving against all-small (ns of wall-clock time).
    pub saving_ns: f64,
    /// Percentage of maximal benefit among all predictions (0..100).
    pub pmb: f64,
    pub predicted_seconds: f64,
    pub predicted_speedup: f64,
    /// 2 MB pages taken from the hugetlb pool (peak, whole pages per object).
    pub hugetlb_pages: u64,
    /// 1 GB pages taken from the hugetlb pool (peak).
    #[serde(default)]
    pub hugetlb_1g_pages: u64,
    /// The part of `hugetlb_1g_pages` and `hugetlb_pages` that static data on
    /// `hugetlb-1g` takes (1 GB pages, 2 MB pages): fixed at link time, so
    /// kept when a reference input rescales the heap's pages.
    #[serde(default)]
    pub static_pages_1g: (u64, u64),
    /// THP folios (2 MB and mTHP) expected to be faulted in.
    pub thp_pages: u64,
    /// Per-site mapping: the allocation sites whose heap-large objects go on
    /// huge pages (then `assignments` is empty).
    #[serde(default)]
    pub sites: Vec<PlannedSite>,
    pub walks: u64,
    pub faults: u64,
}

/// An allocation site planned on huge pages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedSite {
    pub site: Site,
    /// The module's path as the runtime library's log names it; filled in by the
    /// caller that knows the modules (the model only has their index).
    #[serde(default)]
    pub module: String,
    pub backing: Backing,
}

impl Prediction {
    /// Nothing on huge pages.
    pub fn is_all_small(&self) -> bool {
        self.assignments.is_empty() && self.sites.is_empty()
    }

    /// The JVM's heap through the JVM's own switch (category `other` on THP,
    /// [`crate::analysis::Mapping::is_jvm_heap`]): predicted, never a
    /// directive's mapping.
    pub fn is_jvm_heap(&self) -> bool {
        self.assignments.iter().any(|&(c, _)| c == Category::Other)
    }
}

/// The natural huge backing of a category: the runtime library owns heap-large
/// allocations (hugetlb first); static data and glibc's heap get THP.
pub fn default_backing(c: Category) -> Backing {
    match c {
        Category::HeapLarge => Backing::Hugetlb2m,
        _ => Backing::Thp2m,
    }
}

/// The backings a category on resolution `res` can really get: every 2 MB
/// mechanism the runtime library has for it (heap-large blocks and the
/// heap-small arena take pool pages or THP; static data and glibc's heap only
/// THP); other sizes have one mechanism.
fn backings_for(c: Category, res: Backing) -> Vec<Backing> {
    match (c, res) {
        (Category::HeapLarge, Backing::Thp(21)) => vec![Backing::Hugetlb2m, Backing::Thp2m],
        (Category::HeapSmall, Backing::Thp(21)) => vec![Backing::Thp2m, Backing::Hugetlb2m],
        (_, Backing::Thp(21)) => vec![default_backing(c)],
        (_, b) => vec![b],
    }
}

/// The backing that serves a cell: the assignment's choice for 2 MB cells of an
/// assigned category, the cell's own backing otherwise (1 GB layouts, mTHP, 4 KB).
fn actual_backing(c: Category, cell: Backing, v: &Variant) -> Backing {
    if cell == Backing::Thp2m {
        let chosen = v
            .assignments
            .iter()
            .find(|(ac, _)| *ac == c)
            .map(|&(_, b)| b)
            .or_else(|| {
                (c == Category::HeapLarge)
                    .then_some(v.site_backing)
                    .flatten()
            });
        if let Some(b) = chosen {
            if b.folio_shift() == cell.folio_shift() {
                return b;
            }
        }
    }
    cell
}

/// One concrete choice of backings for a mapping.
struct Variant {
    assignments: Vec<(Category, Backing)>,
    /// The backing of the sites of a per-site mapping.
    site_backing: Option<Backing>,
}

/// How much the program's page walks overlap (docs/model.md §4, "Overlap").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WalkOverlap {
    /// Walks hidden behind each other on average: 1 for a dependent chain, up
    /// to the cost model's `walk_concurrency` for independent random loads.
    /// Every walk's cost is divided by it.
    pub factor: f64,
    /// Native time per 4 KB walk, faults taken out (ns).
    pub ns_per_walk: f64,
    /// What one walk (with its share of L2 hits) and the access after it cost
    /// in series (ns), the access's share longer for walks whose line the
    /// program writes back (`dirty_share` × the cost model's `dirty_ratio`).
    pub serial_ns: f64,
    /// The share of the all-small mapping's walks whose page the program writes
    /// before its next walk (0 for a stream without write bits).
    #[serde(default)]
    pub dirty_share: f64,
}

/// The overlap of the all-small mapping's walks in the native run, from the
/// rate at which it walks. Two ends are measured (`hugetune calibrate`): a
/// dependent chase, which spends `serial_ns` per walk (the calibrated walk and
/// L2 hits plus the memory access it precedes) with no overlap, and independent
/// random loads, which spend `independent_ns_per_walk` per walk with
/// `walk_concurrency` walks hidden behind each other. The translation time
/// (walks and L2 hits: both lengthen the access they precede) is divided by it. Between them the overlap
/// is interpolated linearly in walks per nanosecond (1 / ns_per_walk), the
/// rate the walks proceed at: exact at both measured ends, 1 for anything
/// slower than a chase, `walk_concurrency` for anything faster than the
/// independent loads. With per-core TLBs the walks of every core are set
/// against the time of every core that ran: the native run's wall time times
/// the cores busy at once ([`AnalysisResult::concurrency`]).
///
/// Writes (docs/model.md §4, "Writes"): an access that dirties its line after
/// its walk takes longer than a load while the walk costs the same, so a
/// walking read-modify-write saves a smaller share of its time than a walking
/// load. `serial_ns` is longer by `dirty_share × dirty_ratio` of itself, which
/// lowers both the run's own bound below and the chase end of the
/// interpolation for a program that writes what it walks to.
///
/// Whatever the interpolation says, the overlap is at least what the native run
/// shows: spending `ns_per_walk` per walk where a walk and its access in series
/// take `serial_ns`, it had `serial_ns / ns_per_walk` of them in flight on
/// average. So the translation time never exceeds the native time less its
/// faults, nor a saving the whole run: a calibration whose two ends were
/// measured at a small page table (O = 2.9 on the Intel guest, where the
/// walks of a 1 GiB program cost 115 ns) predicted gups at 1 GiB to save 9.8 s
/// of an 8.7 s run.
pub fn walk_overlap(result: &AnalysisResult, cost: &CostModel, native_seconds: f64) -> WalkOverlap {
    let native_seconds = native_seconds * result.concurrency();
    let none = Variant {
        assignments: vec![],
        site_backing: None,
    };
    let t = miss_parts(result.all_small(), cost, &none, result.page_table_factor());
    let dirty_share = if t.walks > 0 {
        (t.dirty_walks as f64 / t.walks as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let serial = if t.walks > 0 {
        (t.translation_ns / t.walks as f64 + cost.memory_ns)
            * (1.0 + dirty_share * cost.dirty_ratio)
    } else {
        0.0
    };
    let per_walk = if t.walks > 0 {
        ((native_seconds * 1e9 - t.fault_ns) / t.walks as f64).max(0.0)
    } else {
        f64::INFINITY
    };
    let most = cost.walk_concurrency.max(1.0);
    // No walks, walking no faster than a chase, or overlap turned off
    // (a concurrency of 1): none.
    let factor = if t.walks == 0
        || !per_walk.is_finite()
        || !serial.is_finite()
        || per_walk >= serial
        || most <= 1.0
    {
        1.0
    } else if per_walk <= 0.0 {
        // The faults alone take the whole run (their cost is off): as fast as
        // the independent loads.
        most
    } else {
        let shown = serial / per_walk;
        let interpolated = if per_walk <= cost.independent_ns_per_walk {
            most
        } else {
            let (rate, dep, ind) = (
                1.0 / per_walk,
                1.0 / serial,
                1.0 / cost.independent_ns_per_walk,
            );
            // `ind > rate > dep` here.
            (1.0 + (most - 1.0) * (rate - dep) / (ind - dep)).clamp(1.0, most)
        };
        interpolated.max(shown)
    };
    WalkOverlap {
        factor,
        ns_per_walk: per_walk,
        serial_ns: serial,
        dirty_share,
    }
}

/// A mapping's miss time in its parts: walks, their and the L2 hits' time in
/// series (translation, what the overlap divides), faults.
struct MissParts {
    walks: u64,
    dirty_walks: u64,
    translation_ns: f64,
    fault_ns: f64,
}

/// `share`: what the mapping's page-table working set is multiplied by, the
/// page tables of processes that ran alongside ([`AnalysisResult::page_table_factor`]).
fn miss_parts(m: &MappingResult, cost: &CostModel, v: &Variant, share: f64) -> MissParts {
    let entries = leaf_entries(m);
    // Capped far beyond any page table (8 PB of entries) so that a hostile
    // factor cannot overflow the curve's byte count.
    let walk_ns = PageSize::ALL.map(|s| {
        cost.walk(
            s,
            (entries[s.index()] as f64 * share).min(1e15).round() as u64,
        )
    });
    let mut p = MissParts {
        walks: 0,
        dirty_walks: 0,
        translation_ns: 0.0,
        fault_ns: 0.0,
    };
    for x in &m.cells {
        let s = &x.stats;
        let leaf = x.backing.leaf();
        p.walks += s.walks;
        p.dirty_walks += s.dirty_walks;
        p.translation_ns += s.l1_misses.saturating_sub(s.walks) as f64 * cost.l2_hit(leaf)
            + s.walks as f64 * walk_ns[leaf.index()];
        p.fault_ns += s.faults as f64 * cost.fault(actual_backing(x.category, x.backing, v));
    }
    p
}

/// Leaf page-table entries the mapping populates, per leaf size: what the walks
/// fetch (an mTHP folio is mapped by one 4 KB entry per 4 KB).
fn leaf_entries(m: &MappingResult) -> [u64; 3] {
    let mut entries = [0u64; 3];
    for x in &m.cells {
        let per_folio = match x.backing.leaf() {
            PageSize::P4k => x.backing.folio_bytes() / 4096,
            _ => 1,
        };
        entries[x.backing.leaf().index()] += x.stats.faults * per_folio;
    }
    entries
}

/// Eq. 2 with the translation time (walks and L2 hits) divided by `overlap`
/// (docs/model.md §4, "Overlap"); faults are not.
fn miss_time(m: &MappingResult, cost: &CostModel, v: &Variant, overlap: f64, share: f64) -> f64 {
    let p = miss_parts(m, cost, v, share);
    p.translation_ns / overlap + p.fault_ns
}

/// Every combination of the backings each huge category of `m` can get.
fn variants(m: &MappingResult) -> Vec<Variant> {
    if !m.mapping.sites.is_empty() {
        return backings_for(Category::HeapLarge, Backing::Thp2m)
            .into_iter()
            .map(|b| Variant {
                assignments: vec![],
                site_backing: Some(b),
            })
            .collect();
    }
    let mut out: Vec<Vec<(Category, Backing)>> = vec![vec![]];
    for &(c, res) in &m.mapping.huge {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                backings_for(c, res).into_iter().map(move |b| {
                    let mut v = prefix.clone();
                    v.push((c, b));
                    v
                })
            })
            .collect();
    }
    out.into_iter()
        .map(|assignments| Variant {
            assignments,
            site_backing: None,
        })
        .collect()
}

/// Predictions for every analysed mapping and every backing its categories can
/// get (heap-large on 2 MB pages comes twice, hugetlb and THP). Sorted by
/// saving, best first.
pub fn predictions(
    result: &AnalysisResult,
    cost: &CostModel,
    native_seconds: f64,
) -> Vec<Prediction> {
    let none = Variant {
        assignments: vec![],
        site_backing: None,
    };
    let overlap = walk_overlap(result, cost, native_seconds).factor;
    // Per-core TLBs: the cores' miss times add up to CPU time; cores that ran
    // at once overlap theirs (docs/model.md §3, "Wall-clock time").
    let k = result.concurrency();
    let share = result.page_table_factor();
    let base_time = miss_time(result.all_small(), cost, &none, overlap, share) / k;
    let mut out = Vec::new();
    for m in &result.mappings {
        for v in variants(m) {
            let mt = miss_time(m, cost, &v, overlap, share) / k;
            let assignments = v.assignments.clone();
            let saving = base_time - mt;
            let (mut hugetlb, mut hugetlb_1g, mut thp) = (0, 0, 0);
            let mut static_1g = (0, 0);
            for &(c, b) in &assignments {
                match (c, b) {
                    (Category::HeapLarge, Backing::Hugetlb2m) => {
                        hugetlb += result.heap_large_peak_pages
                    }
                    (Category::HeapLarge, Backing::Hugetlb1g) => {
                        hugetlb_1g += result.heap_large_peak_pages_1g.0;
                        hugetlb += result.heap_large_peak_pages_1g.1;
                    }
                    (Category::Static, Backing::Hugetlb1g) => {
                        static_1g = result.static_pages_1g;
                        hugetlb_1g += static_1g.0;
                        hugetlb += static_1g.1;
                    }
                    // The arena's 2 MB chunks: one pool page per 2 MB frame
                    // of heap-small data the profile touched.
                    (Category::HeapSmall, Backing::Hugetlb2m) => {
                        hugetlb += m.cell(c, Backing::Thp2m).faults
                    }
                    (_, Backing::Thp(_)) => thp += m.cell(c, b).faults,
                    _ => {}
                }
            }
            let mut sites = Vec::new();
            if let Some(b) = v.site_backing {
                for &(site, _) in &m.mapping.sites {
                    if b == Backing::Hugetlb2m {
                        hugetlb += result
                            .site_peak_pages
                            .iter()
                            .find(|(s, _)| *s == site)
                            .map_or(0, |&(_, p)| p);
                    }
                    sites.push(PlannedSite {
                        site,
                        module: String::new(),
                        backing: b,
                    });
                }
                if b == Backing::Thp2m {
                    thp += m.cell(Category::HeapLarge, Backing::Thp2m).faults;
                }
            }
            let predicted_seconds = (native_seconds - saving / 1e9).max(native_seconds * 0.01);
            let total = m.total();
            out.push(Prediction {
                label: if sites.is_empty() {
                    label(&assignments)
                } else {
                    site_label(&sites)
                },
                sites,
                mapping: m.name.clone(),
                base: m.base,
                assignments,
                miss_time_ns: mt,
                saving_ns: saving,
                pmb: 0.0,
                predicted_seconds,
                predicted_speedup: if native_seconds > 0.0 {
                    native_seconds / predicted_seconds
                } else {
                    1.0
                },
                hugetlb_pages: hugetlb,
                hugetlb_1g_pages: hugetlb_1g,
                static_pages_1g: static_1g,
                thp_pages: thp,
                walks: total.walks,
                faults: total.faults,
            });
        }
    }
    let best = out.iter().map(|p| p.saving_ns).fold(0.0f64, f64::max);
    for p in &mut out {
        p.pmb = pmb(p.saving_ns, best);
    }
    out.sort_by(|a, b| {
        b.saving_ns
            .total_cmp(&a.saving_ns)
            .then(a.label.cmp(&b.label))
    });
    out
}

/// The sampling error of a prediction from a sampled stream (docs/model.md §3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionError {
    /// The prediction's label.
    pub label: String,
    /// Standard error of the saving (ns).
    pub saving_se_ns: f64,
    /// 90 % interval of the predicted speedup (saving ± 1.645 standard errors).
    pub speedup_low: f64,
    pub speedup_high: f64,
    /// Standard errors of the mapping's page walks and faults.
    pub walks_se: f64,
    pub faults_se: f64,
}

/// z of a two-sided 90 % normal interval.
const Z90: f64 = 1.645;

/// Standard errors of every prediction of a sampled analysis, by random groups:
/// the sampled pages and 2 MB groups fall into buckets by an independent hash,
/// each bucket's counts (times the number of buckets) predict the whole on their
/// own, and the spread of the buckets' predictions around their mean, over
/// sqrt(buckets × (buckets − 1)), is the standard error. It measures which pages
/// and regions fell in the sample; the distance estimates' own noise, common to
/// all buckets, is not in it (docs/model.md §3.1). Empty for a complete
/// analysis (exact counts).
pub fn sampling_errors(
    result: &AnalysisResult,
    cost: &CostModel,
    native_seconds: f64,
) -> Vec<PredictionError> {
    if result.sampling.is_none() {
        return vec![];
    }
    let k = result.mappings.first().map_or(0, |m| m.buckets.len());
    if k < 2 || result.mappings.iter().any(|m| m.buckets.len() != k) {
        return vec![];
    }
    // Each bucket's cells are already its own counts times k.
    let preds: Vec<Vec<Prediction>> = (0..k)
        .map(|j| {
            let mut r = result.clone();
            for m in &mut r.mappings {
                m.cells = std::mem::take(&mut m.buckets[j]);
                m.buckets.clear();
            }
            predictions(&r, cost, native_seconds)
        })
        .collect();
    let se = |xs: &[f64]| -> f64 {
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let ss: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
        (ss / (xs.len() as f64 * (xs.len() as f64 - 1.0))).sqrt()
    };
    predictions(result, cost, native_seconds)
        .into_iter()
        .map(|p| {
            let pick = |f: &dyn Fn(&Prediction) -> f64| -> Vec<f64> {
                preds
                    .iter()
                    .map(|ps| ps.iter().find(|x| x.label == p.label).map_or(0.0, f))
                    .collect()
            };
            let saving_se = se(&pick(&|x| x.saving_ns));
            let speedup = |saving: f64| speedup_of(native_seconds, saving);
            PredictionError {
                saving_se_ns: saving_se,
                speedup_low: speedup(p.saving_ns - Z90 * saving_se),
                speedup_high: speedup(p.saving_ns + Z90 * saving_se),
                walks_se: se(&pick(&|x| x.walks as f64)),
                faults_se: se(&pick(&|x| x.faults as f64)),
                label: p.label,
            }
        })
        .collect()
}

/// The speedup of a run of `native_seconds` that saves `saving_ns`, as
/// `predictions` computes it (a saving never takes more than 99 % of the run).
fn speedup_of(native_seconds: f64, saving_ns: f64) -> f64 {
    let t = (native_seconds - saving_ns / 1e9).max(native_seconds * 0.01);
    if native_seconds > 0.0 && t > 0.0 {
        native_seconds / t
    } else {
        1.0
    }
}

/// How far a prediction's speedup moves with the calibration's spread, and
/// with the sampling on top of it (docs/model.md §4.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionInterval {
    /// The prediction's label.
    pub label: String,
    /// The lowest and highest speedup over the cost models at the corners of
    /// the calibration's spread (`CostModel::corners`), the prediction's own
    /// speedup included.
    pub calibration_low: f64,
    pub calibration_high: f64,
    /// The same with each corner's saving moved down (up) by the sampling's
    /// 90 % margin (1.645 standard errors of the saving; 0 for exact counts).
    pub low: f64,
    pub high: f64,
}

/// The interval of every prediction from the calibration's spread (each
/// figure anywhere between its fastest and its slowest repetition, every
/// group of figures at either end) and the sampling errors `errors` (by
/// label, as `sampling_errors` gives them; empty for exact counts). Empty when
/// the cost model has no spread (the defaults).
///
/// On the KVM guests this was built on, the walk cost a calibration measures
/// moves by up to 1.8× between calibrations minutes apart, and a calibration's
/// own repetitions range as widely (docs/ranking.md, "A fifth window"): a
/// point prediction from its medians cannot be better than that. The whole
/// range is what held the measured speedups (40 of 42 in the sixth window),
/// where 90 % of draws from within it held 10 of 42 (docs/model.md §4.1).
pub fn prediction_intervals(
    result: &AnalysisResult,
    cost: &CostModel,
    native_seconds: f64,
    errors: &[PredictionError],
) -> Vec<PredictionInterval> {
    let corners = cost.corners();
    if corners.is_empty() {
        return vec![];
    }
    let at: Vec<Vec<Prediction>> = corners
        .iter()
        .map(|c| predictions(result, c, native_seconds))
        .collect();
    predictions(result, cost, native_seconds)
        .into_iter()
        .map(|p| {
            let margin = Z90
                * errors
                    .iter()
                    .find(|e| e.label == p.label)
                    .map_or(0.0, |e| e.saving_se_ns);
            let savings: Vec<f64> =
                std::iter::once(p.saving_ns)
                    .chain(at.iter().filter_map(|ps| {
                        ps.iter().find(|x| x.label == p.label).map(|x| x.saving_ns)
                    }))
                    .collect();
            let lo = savings.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = savings.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            PredictionInterval {
                calibration_low: speedup_of(native_seconds, lo),
                calibration_high: speedup_of(native_seconds, hi),
                low: speedup_of(native_seconds, lo - margin),
                high: speedup_of(native_seconds, hi + margin),
                label: p.label,
            }
        })
        .collect()
}

/// The interval of two mappings' savings added (`label`: the plan that
/// applies both, e.g. the JVM heap's and the rest of the plan's,
/// `plan::PlanDecision::applied_prediction`), over a run of `native_seconds`:
/// each end the two calibration ends' savings added, so both at their low end
/// at once and both at their high end, wider than any one corner would give.
/// The sampling's margins are not added (`low`, `high` are the calibration's
/// ends): two margins of one sample are not independent, and their sum at a
/// low sampling rate reached 17.8x on a 1.3x prediction.
pub fn added_interval(
    label: &str,
    native_seconds: f64,
    a: &PredictionInterval,
    b: &PredictionInterval,
) -> PredictionInterval {
    let saving = |x: f64| {
        if x > 0.0 {
            (native_seconds - native_seconds / x) * 1e9
        } else {
            0.0
        }
    };
    let add = |x: f64, y: f64| speedup_of(native_seconds, saving(x) + saving(y));
    PredictionInterval {
        label: label.to_string(),
        calibration_low: add(a.calibration_low, b.calibration_low),
        calibration_high: add(a.calibration_high, b.calibration_high),
        low: add(a.calibration_low, b.calibration_low),
        high: add(a.calibration_high, b.calibration_high),
    }
}

/// Percentage of maximal benefit (seed 001 §4): a benefit as a share of the best
/// one, 0..100; mappings that lose count as 0.
pub fn pmb(benefit: f64, best: f64) -> f64 {
    if best > 0.0 {
        (benefit.max(0.0) / best * 100.0).min(100.0)
    } else {
        0.0
    }
}

/// Seed 001 §5.3.2: the ranking error of one workload, the mean over its
/// mappings of |predicted PMB - measured PMB| (percentage points).
pub fn ranking_error(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.is_empty() {
        return None;
    }
    Some(pairs.iter().map(|(p, m)| (p - m).abs()).sum::<f64>() / pairs.len() as f64)
}

/// Measured PMB of each mapping from its run times (`times[m]`, one per round;
/// mapping 0 is all-small): the saving of its median time against all-small's
/// median over the best such saving (seed 001 §5.3.2; losses count as 0).
pub fn measured_pmbs(times: &[Vec<f64>]) -> Vec<f64> {
    let med: Vec<f64> = times.iter().map(|t| median(t)).collect();
    let Some(&base) = med.first() else {
        return vec![];
    };
    let best = med.iter().map(|t| base - t).fold(0.0, f64::max);
    med.iter().map(|t| pmb(base - t, best)).collect()
}

/// How sure the measured side of a ranking is: 95 % percentile-bootstrap
/// intervals of each mapping's measured PMB and of the ranking error.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankingUncertainty {
    pub pmb_ci: Vec<(f64, f64)>,
    pub error_ci: (f64, f64),
    pub resamples: usize,
}

impl RankingUncertainty {
    /// The widest measured-PMB interval, in percentage points.
    pub fn widest(&self) -> f64 {
        self.pmb_ci
            .iter()
            .map(|(lo, hi)| hi - lo)
            .fold(0.0, f64::max)
    }
}

/// Bootstraps the measured ranking: whole rounds are resampled with
/// replacement (a round runs every mapping once, so what a round shares —
/// the machine's state at that time — stays together), the PMBs and the
/// ranking error against `predicted_pmb` recomputed, and their 2.5 and 97.5
/// percentiles taken. `times[m][r]`: mapping m in round r, all of equal length.
/// Deterministic (splitmix64 from `seed`).
pub fn ranking_uncertainty(
    times: &[Vec<f64>],
    predicted_pmb: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<RankingUncertainty> {
    let rounds = times.first()?.len();
    if rounds == 0
        || resamples == 0
        || times.iter().any(|t| t.len() != rounds)
        || predicted_pmb.len() != times.len()
    {
        return None;
    }
    let mut rng = crate::mrc::synth::Rng(seed);
    let mut next = |n: usize| rng.below(n as u64) as usize;
    let m = times.len();
    let mut pmbs: Vec<Vec<f64>> = vec![Vec::with_capacity(resamples); m];
    let mut errors = Vec::with_capacity(resamples);
    let mut sample: Vec<Vec<f64>> = vec![vec![0.0; rounds]; m];
    let mut picks = vec![0usize; rounds];
    for _ in 0..resamples {
        for p in picks.iter_mut() {
            *p = next(rounds);
        }
        for (row, t) in sample.iter_mut().zip(times) {
            for (x, &pick) in row.iter_mut().zip(&picks) {
                *x = t[pick];
            }
        }
        let got = measured_pmbs(&sample);
        let pairs: Vec<(f64, f64)> = predicted_pmb
            .iter()
            .copied()
            .zip(got.iter().copied())
            .collect();
        errors.push(ranking_error(&pairs).unwrap_or(0.0));
        for (k, v) in got.into_iter().enumerate() {
            pmbs[k].push(v);
        }
    }
    let interval = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
        (at(0.025), at(0.975))
    };
    Some(RankingUncertainty {
        pmb_ci: pmbs.into_iter().map(interval).collect(),
        error_ci: interval(errors),
        resamples,
    })
}

/// `heap-large:hugetlb static:thp`; `all-small` when nothing is huge.
pub fn label(assignments: &[(Category, Backing)]) -> String {
    if assignments.is_empty() {
        return "all-small".into();
    }
    assignments
        .iter()
        .map(|(c, b)| {
            let short = match b {
                Backing::Base4k => "4k".to_string(),
                Backing::Thp(21) => "thp".into(),
                Backing::Hugetlb2m => "hugetlb".into(),
                b => b.name(),
            };
            format!("{}:{short}", crate::analysis::category_name(*c))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `site 2+0x1a2b:hugetlb` (module index until the caller names the module).
pub fn site_label(sites: &[PlannedSite]) -> String {
    sites
        .iter()
        .map(|s| {
            let module = if s.module.is_empty() {
                s.site.module.to_string()
            } else {
                s.module.rsplit('/').next().unwrap_or(&s.module).to_string()
            };
            let b = match s.backing {
                Backing::Thp(21) => "thp".to_string(),
                Backing::Hugetlb2m => "hugetlb".into(),
                b => b.name(),
            };
            format!("site {module}+{:#x}:{b}", s.site.offset)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seed 001's additivity assumption, checked: the saving of a combined mapping
/// minus the sum of its single-category savings, relative to the combined saving.
pub fn additivity_error(preds: &[Prediction], combined: &Prediction) -> Option<f64> {
    if combined.assignments.len() < 2 || combined.saving_ns.abs() < 1.0 {
        return None;
    }
    let mut sum = 0.0;
    for a in &combined.assignments {
        let single = preds.iter().find(|p| p.assignments == vec![*a])?;
        sum += single.saving_ns;
    }
    Some((combined.saving_ns - sum) / combined.saving_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_pmb_is_saving_over_the_best_saving() {
        let times = vec![
            vec![1.0, 1.1, 0.9], // all-small, median 1.0
            vec![0.5, 0.6, 0.4], // median 0.5: the best saving
            vec![0.8, 0.7, 0.9], // median 0.8: 40 %
            vec![1.2, 1.3, 1.1], // slower: 0
        ];
        let p = measured_pmbs(&times);
        assert_eq!(p.len(), 4);
        assert!((p[0] - 0.0).abs() < 1e-9);
        assert!((p[1] - 100.0).abs() < 1e-9);
        assert!((p[2] - 40.0).abs() < 1e-9, "{p:?}");
        assert_eq!(p[3], 0.0);
        // nothing gains: every PMB is 0
        assert_eq!(measured_pmbs(&[vec![1.0], vec![1.1]]), vec![0.0, 0.0]);
        assert!(measured_pmbs(&[]).is_empty());
    }

    #[test]
    fn bootstrap_intervals_cover_the_point_estimate_and_shrink_without_noise() {
        // no noise: every resample gives the same PMBs and error
        let exact = vec![vec![1.0; 5], vec![0.5; 5], vec![1.0; 5]];
        let u = ranking_uncertainty(&exact, &[0.0, 100.0, 10.0], 500, 7).unwrap();
        assert_eq!(u.pmb_ci, vec![(0.0, 0.0), (100.0, 100.0), (0.0, 0.0)]);
        assert!((u.error_ci.0 - 10.0 / 3.0).abs() < 1e-9);
        assert_eq!(u.widest(), 0.0);
        // noise on the all-small runs: the no-op mapping's interval widens and
        // holds the point estimate
        let noisy = vec![
            vec![1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.85],
            vec![0.5, 0.52, 0.48, 0.5, 0.51, 0.49, 0.5],
            vec![1.0, 0.98, 1.02, 1.0, 1.01, 0.99, 1.0],
        ];
        let u = ranking_uncertainty(&noisy, &[0.0, 100.0, 0.0], 2000, 7).unwrap();
        let p = measured_pmbs(&noisy);
        for (k, (lo, hi)) in u.pmb_ci.iter().enumerate() {
            assert!(lo <= &p[k] && &p[k] <= hi, "{k}: {lo}..{hi} vs {}", p[k]);
        }
        assert!(u.pmb_ci[2].1 > 5.0, "{:?}", u.pmb_ci);
        // deterministic per seed
        assert_eq!(
            u,
            ranking_uncertainty(&noisy, &[0.0, 100.0, 0.0], 2000, 7).unwrap()
        );
        // ragged or empty input: none
        assert!(ranking_uncertainty(&[vec![1.0], vec![]], &[0.0, 0.0], 10, 1).is_none());
        assert!(ranking_uncertainty(&[], &[], 10, 1).is_none());
        assert!(ranking_uncertainty(&exact, &[0.0], 10, 1).is_none());
    }
}
