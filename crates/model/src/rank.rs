//! From page-level counts to decisions: the cost of each mapping (seed 001 eq. 2),
//! the significance test (§5.3.1), the percentage-of-maximal-benefit ranking and the
//! huge pages each mapping needs.

use crate::analysis::{AnalysisResult, MappingResult};
use crate::category::Category;
use crate::cost::CostModel;
use crate::page::{Backing, PageSize};
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
    }
}

/// The prediction for one mapping with a concrete backing per huge category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The set of categories on huge pages (`all-small`, `heap-large`, `all-large`, ...).
    pub mapping: String,
    /// The mapping with its backings, e.g. `heap-large:hugetlb static:thp`.
    pub label: String,
    pub base: bool,
    pub assignments: Vec<(Category, Backing)>,
    /// Time spent in TLB misses and faults (ns), eq. 2.
    pub miss_time_ns: f64,
    /// Saving against all-small (ns).
    pub saving_ns: f64,
    /// Percentage of maximal benefit among all predictions (0..100).
    pub pmb: f64,
    pub predicted_seconds: f64,
    pub predicted_speedup: f64,
    /// Pages taken from the hugetlb pool (peak, whole pages per object).
    pub hugetlb_pages: u64,
    /// THP pages expected to be faulted in.
    pub thp_pages: u64,
    pub walks: u64,
    pub faults: u64,
}

/// The natural huge backing of a category: the runtime library owns heap-large
/// allocations (hugetlb first); static data and glibc's heap get THP.
pub fn default_backing(c: Category) -> Backing {
    match c {
        Category::HeapLarge => Backing::Hugetlb2m,
        _ => Backing::Thp2m,
    }
}

fn miss_time(m: &MappingResult, cost: &CostModel, assignments: &[(Category, Backing)]) -> f64 {
    // Distinct pages of each size the mapping touches (first touches), whose
    // page-table entries the walks fetch.
    let pages = |size: PageSize| {
        Category::ALL
            .iter()
            .map(|&c| m.category(c, size).faults)
            .sum::<u64>()
    };
    let walk_ns = [
        cost.walk(PageSize::P4k, pages(PageSize::P4k)),
        cost.walk(PageSize::P2m, pages(PageSize::P2m)),
    ];
    let mut t = 0.0;
    for c in Category::ALL {
        for size in [PageSize::P4k, PageSize::P2m] {
            let s = m.category(c, size);
            let backing = if size == PageSize::P2m {
                assignments
                    .iter()
                    .find(|(ac, _)| *ac == c)
                    .map(|&(_, b)| b)
                    .unwrap_or(Backing::Thp2m)
            } else {
                Backing::Base4k
            };
            t += (s.l1_misses - s.walks) as f64 * cost.l2_hit(size)
                + s.walks as f64 * walk_ns[size.index()]
                + s.faults as f64 * cost.fault(backing);
        }
    }
    t
}

/// Predictions for every analysed mapping; mappings with heap-large on huge pages
/// come twice, with hugetlb and with THP backing. Sorted by saving, best first.
pub fn predictions(
    result: &AnalysisResult,
    cost: &CostModel,
    native_seconds: f64,
) -> Vec<Prediction> {
    let base_time = miss_time(result.all_small(), cost, &[]);
    let mut out = Vec::new();
    for m in &result.mappings {
        let mut variants = vec![m
            .mapping
            .huge
            .iter()
            .map(|&c| (c, default_backing(c)))
            .collect::<Vec<_>>()];
        if m.mapping.huge.contains(&Category::HeapLarge) {
            variants.push(
                m.mapping
                    .huge
                    .iter()
                    .map(|&c| {
                        (
                            c,
                            if c == Category::HeapLarge {
                                Backing::Thp2m
                            } else {
                                default_backing(c)
                            },
                        )
                    })
                    .collect(),
            );
        }
        for assignments in variants {
            let mt = miss_time(m, cost, &assignments);
            let saving = base_time - mt;
            let mut hugetlb = 0;
            let mut thp = 0;
            for &(c, b) in &assignments {
                match (c, b) {
                    (Category::HeapLarge, Backing::Hugetlb2m) => {
                        hugetlb += result.heap_large_peak_pages
                    }
                    (_, Backing::Thp2m) => thp += m.category(c, PageSize::P2m).faults,
                    _ => {}
                }
            }
            let predicted_seconds = (native_seconds - saving / 1e9).max(native_seconds * 0.01);
            let total = m.total();
            out.push(Prediction {
                label: label(&assignments),
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
                thp_pages: thp,
                walks: total.walks,
                faults: total.faults,
            });
        }
    }
    let best = out.iter().map(|p| p.saving_ns).fold(0.0f64, f64::max);
    for p in &mut out {
        p.pmb = if best > 0.0 {
            (p.saving_ns.max(0.0) / best * 100.0).min(100.0)
        } else {
            0.0
        };
    }
    out.sort_by(|a, b| {
        b.saving_ns
            .total_cmp(&a.saving_ns)
            .then(a.label.cmp(&b.label))
    });
    out
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
                Backing::Base4k => "4k",
                Backing::Thp2m => "thp",
                Backing::Hugetlb2m => "hugetlb",
            };
            format!("{c}:{short}")
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
