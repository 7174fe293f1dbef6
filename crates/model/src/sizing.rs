//! Sizing: how many hugetlb pages a program should get. The predicted benefit
//! as a function of the pool budget (seed 001 fig. 3: PMB against pages needed;
//! seed 004 experiment 1: time against the number of huge pages), and its knee.

use crate::page::Backing;
use crate::plan::{self, Availability, Policy, ProgramTraits};
use crate::rank::{Prediction, Significance};
use serde::{Deserialize, Serialize};

/// Which hugetlb pool a curve is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pool {
    #[serde(rename = "2m")]
    P2m,
    #[serde(rename = "1g")]
    P1g,
}

impl Pool {
    pub fn page_kb(self) -> u64 {
        match self {
            Pool::P2m => 2048,
            Pool::P1g => 1 << 20,
        }
    }
    fn pages(self, p: &Prediction) -> u64 {
        match self {
            Pool::P2m => p.hugetlb_pages,
            Pool::P1g => p.hugetlb_1g_pages,
        }
    }
    fn backing(self) -> Backing {
        match self {
            Pool::P2m => Backing::Hugetlb2m,
            Pool::P1g => Backing::Hugetlb1g,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Pool pages this program may take.
    pub pages: u64,
    pub saving_ns: f64,
    /// Percentage of the benefit with every page it can use.
    pub pmb: f64,
    /// What the planner applies with that budget.
    pub label: String,
    pub assignments: Vec<(crate::category::Category, Backing)>,
    #[serde(default)]
    pub sites: Vec<crate::rank::PlannedSite>,
    /// The saving is a pro-rata estimate (the pool runs dry part-way through the
    /// mapping's objects; the rest stays on 4 KB pages), not an analysed mapping.
    pub partial: bool,
}

/// Whether a prediction places something on `pool`'s pages.
pub fn uses(p: &Prediction, pool: Pool) -> bool {
    p.assignments.iter().any(|&(_, b)| b == pool.backing())
        || p.sites.iter().any(|s| s.backing == pool.backing())
}

/// The best mapping (most saving) on `pool`'s pages that has not lost a validation.
pub fn best_on<'a>(preds: &'a [Prediction], pool: Pool, policy: &Policy) -> Option<&'a Prediction> {
    preds
        .iter()
        .filter(|p| uses(p, pool) && pool.pages(p) > 0 && !policy.lost.contains(&p.label))
        .max_by(|a, b| a.saving_ns.total_cmp(&b.saving_ns))
}

/// The pages a full hugetlb mapping on `pool` needs: those of the mapping on
/// that pool that saves most (the fewer pages on a tie), so that a mapping
/// which adds pages without adding saving does not raise the need.
pub fn pages_needed(preds: &[Prediction], pool: Pool) -> u64 {
    preds
        .iter()
        .filter(|p| uses(p, pool) && pool.pages(p) > 0)
        .max_by(|a, b| {
            a.saving_ns
                .total_cmp(&b.saving_ns)
                .then(pool.pages(b).cmp(&pool.pages(a)))
        })
        .map_or(0, |p| pool.pages(p))
}

/// What the planner knows of a program.
#[derive(Clone, Copy)]
pub struct Planned<'a> {
    pub preds: &'a [Prediction],
    pub sig: &'a Significance,
    pub traits: &'a ProgramTraits,
    pub native_seconds: f64,
    pub policy: &'a Policy,
}

/// The predicted PMB-vs-pages curve on `pool` at `steps + 1` evenly spaced
/// budgets from 0 to the pages needed: at each budget, the better of the
/// planner's choice (which may use THP or the other pool from `base`) and a
/// hugetlb mapping cut short by the budget (saving pro rata to the pages it gets).
pub fn pmb_curve(
    program: &Planned,
    base: &Availability,
    pool: Pool,
    steps: u64,
) -> Vec<CurvePoint> {
    let Planned {
        preds,
        sig,
        traits,
        native_seconds,
        policy,
    } = *program;
    let need = pages_needed(preds, pool);
    let steps = steps.clamp(1, need.max(1));
    let best_full = best_on(preds, pool, policy);
    let mut points: Vec<CurvePoint> = (0..=steps)
        .map(|i| {
            let pages = need * i / steps;
            let mut avail = base.clone();
            match pool {
                Pool::P2m => avail.hugetlb_2m_free = pages,
                Pool::P1g => avail.hugetlb_1g_free = pages,
            }
            avail.hugetlb_2m_total = 0;
            let d = plan::choose_with(preds, sig, &avail, traits, native_seconds, policy);
            let mut point = CurvePoint {
                pages,
                saving_ns: d.prediction.as_ref().map_or(0.0, |p| p.saving_ns.max(0.0)),
                pmb: 0.0,
                label: d
                    .prediction
                    .as_ref()
                    .map_or("all-small".into(), |p| p.label.clone()),
                assignments: d.assignments,
                sites: d.sites,
                partial: false,
            };
            if let Some(f) = best_full {
                let cut = f.saving_ns * pages as f64 / pool.pages(f) as f64;
                if pages < pool.pages(f) && cut > point.saving_ns {
                    point = CurvePoint {
                        pages,
                        saving_ns: cut,
                        pmb: 0.0,
                        label: format!("{} ({pages} of {} pages)", f.label, pool.pages(f)),
                        assignments: f.assignments.clone(),
                        sites: f.sites.clone(),
                        partial: true,
                    };
                }
            }
            point
        })
        .collect();
    let top = points.iter().map(|p| p.saving_ns).fold(0.0, f64::max);
    for p in &mut points {
        p.pmb = crate::rank::pmb(p.saving_ns, top);
    }
    points
}

/// The knee of a PMB-vs-pages curve (Kneedle: the point farthest above the
/// chord from the first to the last point, both axes normalized): past it,
/// more pages buy little. None for a curve without benefit.
pub fn knee(curve: &[CurvePoint]) -> Option<&CurvePoint> {
    let first = curve.first()?;
    let last = curve.last()?;
    let span = (last.pages - first.pages) as f64;
    let (y0, y1) = (first.pmb, last.pmb);
    if span <= 0.0 || y1 - y0 <= 0.0 {
        return curve.iter().find(|p| p.pmb >= y1).filter(|p| p.pmb > 0.0);
    }
    let (p, lift) = curve
        .iter()
        .map(|p| {
            let x = (p.pages - first.pages) as f64 / span;
            let y = (p.pmb - y0) / (y1 - y0);
            (p, y - x)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.pages.cmp(&a.0.pages)))?;
    // A straight or convex curve has no knee: every page pays at least as well
    // as the ones before it, so the recommendation is all of them.
    Some(if lift <= KNEE_MIN_LIFT { last } else { p })
}

/// How far (normalized) above the chord a point must lie to be a knee.
pub const KNEE_MIN_LIFT: f64 = 0.05;

/// The smallest budget reaching `pmb` percent.
pub fn pages_for(curve: &[CurvePoint], pmb: f64) -> Option<u64> {
    curve.iter().find(|p| p.pmb >= pmb).map(|p| p.pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::plan::ThpMode;

    use crate::plan::tests::pred;

    fn sig() -> Significance {
        crate::plan::tests::sig(true)
    }

    /// The need is the pages of the mapping that saves most on the pool: the
    /// heap-small arena's page more does not count unless it saves more.
    #[test]
    fn pages_needed_follows_the_best_mapping() {
        use Category::*;
        let large = vec![(HeapLarge, Backing::Hugetlb2m)];
        let both = vec![
            (HeapSmall, Backing::Hugetlb2m),
            (HeapLarge, Backing::Hugetlb2m),
        ];
        let preds = |both_saves| {
            vec![
                pred("heap-large:hugetlb", large.clone(), 400.0, 16),
                pred(
                    "heap-small:hugetlb heap-large:hugetlb",
                    both.clone(),
                    both_saves,
                    17,
                ),
                pred(
                    "heap-large:thp",
                    vec![(HeapLarge, Backing::Thp2m)],
                    900.0,
                    0,
                ),
            ]
        };
        assert_eq!(pages_needed(&preds(399.0), Pool::P2m), 16);
        assert_eq!(pages_needed(&preds(400.0), Pool::P2m), 16);
        assert_eq!(pages_needed(&preds(401.0), Pool::P2m), 17);
        assert_eq!(pages_needed(&[], Pool::P2m), 0);
    }

    fn curve(thp: ThpMode) -> Vec<CurvePoint> {
        let preds = vec![
            pred("all-small", vec![], 0.0, 0),
            pred(
                "heap-large:hugetlb",
                vec![(Category::HeapLarge, Backing::Hugetlb2m)],
                400.0,
                1000,
            ),
            pred(
                "heap-large:thp",
                vec![(Category::HeapLarge, Backing::Thp2m)],
                300.0,
                0,
            ),
        ];
        let base = Availability {
            thp,
            ..Default::default()
        };
        let policy = Policy {
            min_gain: 0.01,
            ..Policy::default()
        };
        let planned = Planned {
            preds: &preds,
            sig: &sig(),
            traits: &ProgramTraits::default(),
            native_seconds: 10.0,
            policy: &policy,
        };
        pmb_curve(&planned, &base, Pool::P2m, 10)
    }

    #[test]
    fn without_thp_the_curve_rises_with_the_pool() {
        let c = curve(ThpMode::Never);
        assert_eq!(c.len(), 11);
        assert_eq!((c[0].pages, c[0].pmb), (0, 0.0));
        assert_eq!(
            (c[10].pages, c[10].pmb, c[10].partial),
            (1000, 100.0, false)
        );
        assert!(c[5].partial && (c[5].pmb - 50.0).abs() < 1e-9, "{:?}", c[5]);
        assert!(c.windows(2).all(|w| w[0].pmb <= w[1].pmb));
        // A straight line has no knee: every page pays alike, take them all.
        assert_eq!(knee(&c).unwrap().pages, 1000);
        assert_eq!(pages_for(&c, 90.0), Some(900));
    }

    #[test]
    fn with_thp_hugetlb_pays_only_past_thps_share() {
        let c = curve(ThpMode::Madvise);
        // THP alone gives 75 %; hugetlb pages beat it from 750 pages on.
        assert_eq!(c[0].pmb, 75.0);
        assert_eq!(c[0].label, "heap-large:thp");
        assert!(c[8].partial && c[8].pmb == 80.0);
        assert_eq!(pages_for(&c, 100.0), Some(1000));
        // Convex past THP's share: no knee before the end.
        assert_eq!(knee(&c).unwrap().pages, 1000, "{c:?}");
    }

    #[test]
    fn a_concave_curve_has_its_knee_early() {
        let pts: Vec<CurvePoint> = [
            (0, 0.0),
            (100, 60.0),
            (200, 85.0),
            (300, 95.0),
            (400, 100.0),
        ]
        .iter()
        .map(|&(pages, pmb)| CurvePoint {
            pages,
            saving_ns: pmb,
            pmb,
            label: String::new(),
            assignments: vec![],
            sites: vec![],
            partial: false,
        })
        .collect();
        assert_eq!(knee(&pts).unwrap().pages, 100);
        assert!(knee(&[]).is_none());
        let flat = vec![pts[0].clone()];
        assert!(knee(&flat).is_none());
    }
}
