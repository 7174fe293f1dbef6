//! The planner: which categories go on which huge pages, given what the machine
//! can give now. Every analysed mapping has an exact prediction, so the planner
//! picks the feasible one with the largest predicted saving (a knapsack over a
//! handful of items), then drops categories that do not earn their pages.

use crate::category::Category;
use crate::page::Backing;
use crate::rank::{PlannedSite, Prediction, Significance};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    Always,
    #[default]
    Madvise,
    Never,
}

/// What the machine can give right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// Free, unreserved 2 MB hugetlb pages (or the budget the user allows).
    pub hugetlb_2m_free: u64,
    /// Free, unreserved 1 GB hugetlb pages.
    #[serde(default)]
    pub hugetlb_1g_free: u64,
    pub thp: ThpMode,
    /// mTHP folio sizes (shifts 14..=20) whose control lets `MADV_HUGEPAGE` use them.
    #[serde(default)]
    pub mthp: Vec<u8>,
}

/// What the profile says about the program beyond its references.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramTraits {
    /// The program calls `fork` (in the profile or the sizing run). Private
    /// hugetlb pages it touched before a fork are shared copy-on-write with the
    /// child, and the first write after the fork needs a fresh huge page: SIGBUS
    /// when the pool has none left. Such programs get THP instead (seed 002;
    /// the runtime library also copies at fork when it still holds hugetlb).
    #[serde(default)]
    pub forks: bool,
    /// Children seen forking in the profile (0 when only failed forks were seen).
    #[serde(default)]
    pub fork_children: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanDecision {
    /// What to apply; empty (and no sites): run unchanged.
    pub assignments: Vec<(Category, Backing)>,
    /// Allocation sites to place on huge pages (a per-site mapping).
    #[serde(default)]
    pub sites: Vec<PlannedSite>,
    pub prediction: Option<Prediction>,
    /// Human-readable reasons, in the order the planner considered them.
    pub reasons: Vec<String>,
}

impl PlanDecision {
    pub fn hugetlb_pages(&self) -> u64 {
        self.prediction.as_ref().map_or(0, |p| p.hugetlb_pages)
    }
}

fn uses_hugetlb(p: &Prediction) -> bool {
    p.assignments.iter().any(|&(_, b)| b.uses_pool())
        || p.sites.iter().any(|s| s.backing.uses_pool())
}

fn feasible(p: &Prediction, avail: &Availability, program: &ProgramTraits) -> Result<(), String> {
    if program.forks && uses_hugetlb(p) {
        return Err(format!(
            "the program forks ({} {} in the profile): private hugetlb pages shared \
             copy-on-write with a child can SIGBUS when the pool runs dry",
            program.fork_children,
            if program.fork_children == 1 {
                "child"
            } else {
                "children"
            }
        ));
    }
    if p.hugetlb_pages > avail.hugetlb_2m_free {
        return Err(format!(
            "needs {} hugetlb 2 MB pages, {} available",
            p.hugetlb_pages, avail.hugetlb_2m_free
        ));
    }
    if p.hugetlb_1g_pages > avail.hugetlb_1g_free {
        return Err(format!(
            "needs {} hugetlb 1 GB pages, {} available",
            p.hugetlb_1g_pages, avail.hugetlb_1g_free
        ));
    }
    if avail.thp == ThpMode::Never && p.assignments.iter().any(|&(_, b)| b == Backing::Thp2m) {
        return Err("needs THP, which is disabled (transparent_hugepage/enabled = never)".into());
    }
    for &(_, b) in &p.assignments {
        if let Backing::Thp(s) = b {
            if b.is_mthp() && !avail.mthp.contains(&s) {
                return Err(format!(
                    "needs {b} folios, which are disabled (hugepages-{}kB/enabled)",
                    b.folio_bytes() >> 10
                ));
            }
        }
    }
    Ok(())
}

/// Choose a plan. `min_gain` is the smallest predicted saving, as a fraction of the
/// native run time, that justifies placing a category on huge pages.
pub fn choose(
    preds: &[Prediction],
    sig: &Significance,
    avail: &Availability,
    program: &ProgramTraits,
    native_seconds: f64,
    min_gain: f64,
) -> PlanDecision {
    let mut reasons = Vec::new();
    let empty = |reasons| PlanDecision {
        assignments: vec![],
        sites: vec![],
        prediction: None,
        reasons,
    };
    if !sig.passes {
        reasons.push(format!(
            "significance test failed: {:.0} TLB misses/s (< {:.0}) and {:.0} faults/s (< {:.0}) with 4 KB pages",
            sig.tlb_misses_per_s,
            crate::rank::SIG_TLB_MISSES_PER_S,
            sig.faults_per_s,
            crate::rank::SIG_FAULTS_PER_S
        ));
        return empty(reasons);
    }
    let threshold_ns = min_gain * native_seconds * 1e9;
    let mut best: Option<&Prediction> = None;
    for p in preds.iter().filter(|p| !p.is_all_small()) {
        match feasible(p, avail, program) {
            Err(why) => reasons.push(format!("{}: ruled out: {}", p.label, why)),
            Ok(()) => {
                if best.is_none_or(|b| p.saving_ns > b.saving_ns) {
                    best = Some(p);
                }
            }
        }
    }
    let Some(mut best) = best else {
        reasons.push("no mapping is possible with what the machine offers now".into());
        return empty(reasons);
    };
    // Drop categories whose marginal saving is below the bar: they would hold
    // huge pages for nothing (seed 001: PMB against pages needed).
    loop {
        let mut improved = false;
        for &(c, _) in &best.assignments {
            let without: Vec<(Category, Backing)> = best
                .assignments
                .iter()
                .copied()
                .filter(|&(ac, _)| ac != c)
                .collect();
            let alt = preds.iter().find(|p| {
                p.assignments == without
                    && p.sites.is_empty()
                    && feasible(p, avail, program).is_ok()
            });
            let alt_saving = alt.map_or(0.0, |p| p.saving_ns);
            if best.saving_ns - alt_saving < threshold_ns {
                reasons.push(format!(
                    "{c}: marginal saving {:.1} ms is below {:.1}% of the run time; left on 4 KB pages",
                    (best.saving_ns - alt_saving) / 1e6,
                    min_gain * 100.0
                ));
                match alt {
                    Some(a) => {
                        best = a;
                        improved = true;
                        break;
                    }
                    None => return empty(reasons),
                }
            }
        }
        if !improved {
            break;
        }
    }
    if best.is_all_small() || best.saving_ns < threshold_ns {
        reasons.push(format!(
            "best predicted saving {:.1} ms is below {:.1}% of the run time: run unchanged",
            best.saving_ns.max(0.0) / 1e6,
            min_gain * 100.0
        ));
        return empty(reasons);
    }
    reasons.push(format!(
        "chose {}: predicted saving {:.1} ms ({:.2}x), PMB {:.0}%, {} hugetlb + {} THP pages",
        best.label,
        best.saving_ns / 1e6,
        best.predicted_speedup,
        best.pmb,
        best.hugetlb_pages,
        best.thp_pages
    ));
    PlanDecision {
        assignments: best.assignments.clone(),
        sites: best.sites.clone(),
        prediction: Some(best.clone()),
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pred(name: &str, a: Vec<(Category, Backing)>, saving_ms: f64, hugetlb: u64) -> Prediction {
        Prediction {
            mapping: name.into(),
            label: name.into(),
            base: true,
            assignments: a,
            miss_time_ns: 0.0,
            saving_ns: saving_ms * 1e6,
            pmb: 0.0,
            predicted_seconds: 1.0,
            predicted_speedup: 1.0,
            hugetlb_pages: hugetlb,
            hugetlb_1g_pages: 0,
            sites: vec![],
            thp_pages: 0,
            walks: 0,
            faults: 0,
        }
    }

    fn sig(passes: bool) -> Significance {
        Significance {
            tlb_misses_per_s: 1e6,
            faults_per_s: 0.0,
            passes,
            source: "model".into(),
        }
    }

    fn preds() -> Vec<Prediction> {
        use Backing::*;
        #[allow(non_upper_case_globals)]
        const Thp2m: Backing = Backing::Thp2m;
        use Category::*;
        vec![
            pred("all-small", vec![], 0.0, 0),
            pred("heap-large", vec![(HeapLarge, Hugetlb2m)], 300.0, 100),
            pred("heap-large thp", vec![(HeapLarge, Thp2m)], 250.0, 0),
            pred("static", vec![(Static, Thp2m)], 2.0, 0),
            pred(
                "all",
                vec![(Static, Thp2m), (HeapLarge, Hugetlb2m)],
                301.0,
                100,
            ),
            pred(
                "all thp",
                vec![(Static, Thp2m), (HeapLarge, Thp2m)],
                251.0,
                0,
            ),
        ]
    }

    #[test]
    fn picks_hugetlb_when_the_pool_allows_and_drops_tiny_categories() {
        let avail = Availability {
            hugetlb_2m_free: 100,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert_eq!(
            d.assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)]
        );
    }

    #[test]
    fn falls_back_to_thp_when_the_pool_is_short() {
        let avail = Availability {
            hugetlb_2m_free: 10,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert_eq!(d.assignments, vec![(Category::HeapLarge, Backing::Thp2m)]);
        assert!(d.reasons.iter().any(|r| r.contains("needs 100 hugetlb")));
    }

    #[test]
    fn nothing_without_significance_or_resources() {
        let avail = Availability {
            hugetlb_2m_free: 0,
            thp: ThpMode::Never,
            ..Default::default()
        };
        assert!(choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01
        )
        .assignments
        .is_empty());
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &preds(),
            &sig(false),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(d.assignments.is_empty());
        assert!(d.reasons[0].contains("significance"));
    }

    #[test]
    fn small_gains_are_not_worth_pages() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        // 300 ms of a 100 s run is 0.3 %: below a 1 % bar.
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            100.0,
            0.01,
        );
        assert!(d.assignments.is_empty(), "{:?}", d);
    }

    #[test]
    fn programs_that_fork_get_thp_instead_of_private_hugetlb() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let forks = ProgramTraits {
            forks: true,
            fork_children: 3,
        };
        let d = choose(&preds(), &sig(true), &avail, &forks, 1.0, 0.01);
        assert_eq!(d.assignments, vec![(Category::HeapLarge, Backing::Thp2m)]);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("heap-large: ruled out: the program forks (3 children")),
            "{:?}",
            d.reasons
        );
        assert_eq!(d.hugetlb_pages(), 0);
        // Without THP there is nothing safe left to apply.
        let no_thp = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Never,
            ..Default::default()
        };
        assert!(choose(&preds(), &sig(true), &no_thp, &forks, 1.0, 0.01)
            .assignments
            .is_empty());
    }
}
