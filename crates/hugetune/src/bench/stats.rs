//! Pure computation of the suites: run orders, spreads, speedups, what a run's
//! proof of backing says, and the verdicts of `peers`. No I/O here.

use hugetune_capture::ab;
pub use hugetune_model::stats::Spread;
use serde::{Deserialize, Serialize};

/// Speedup of a configuration over the baseline: median(baseline) / median(config).
pub fn speedup(baseline: &Spread, config: &Spread) -> f64 {
    if config.median > 0.0 {
        baseline.median / config.median
    } else {
        f64::NAN
    }
}

/// What a run's memory was backed with, from every source of proof.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BackingFigures {
    /// Peak resident memory of the process tree (smaps_rollup `Rss`, which leaves
    /// hugetlb pages out).
    pub rss: u64,
    /// Peak `AnonHugePages` (PMD-size THP only).
    pub anon_huge: u64,
    /// Peak `Private_Hugetlb` + `Shared_Hugetlb`.
    pub hugetlb: u64,
    /// hugetlb pool pages taken during the run, from the pool counters (bytes).
    pub pool_bytes: u64,
    /// Bytes in mTHP folios (below 2 MB) faulted in during the run (the kernel's
    /// per-size `anon_fault_alloc` counters, system-wide).
    pub mthp_bytes: u64,
    /// What the runtime library reports backed huge (hugetlb + verified THP), if loaded.
    pub runtime: Option<u64>,
}

/// How much of a run's memory was huge, in words and as a fraction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackingVerdict {
    /// Huge bytes proven: the largest of the sources that see the same memory.
    pub huge_bytes: u64,
    /// `huge_bytes` over the footprint (Rss + hugetlb), 0..1.
    pub fraction: f64,
    /// `none`, `partial` or `huge`.
    pub label: String,
}

/// Below this share of the footprint a run counts as not backed by huge pages.
pub const NONE_BELOW: f64 = 0.01;
/// From this share on a run counts as (mostly) huge.
pub const HUGE_FROM: f64 = 0.5;

pub fn backing_verdict(f: &BackingFigures) -> BackingVerdict {
    let proc_huge = f.anon_huge + f.hugetlb;
    // The pool counters see hugetlb pages of the whole system (only ours change
    // while the kernel-state lock is held); smaps sees the process tree.
    // mTHP folios show in neither smaps figure; the runtime library's own
    // figure already has them (its pagemap census), so it is not added to.
    let huge =
        (proc_huge.max(f.anon_huge + f.pool_bytes) + f.mthp_bytes).max(f.runtime.unwrap_or(0));
    let footprint = (f.rss + f.hugetlb).max(f.rss + f.pool_bytes).max(1);
    let fraction = (huge as f64 / footprint as f64).min(1.0);
    let label = if fraction < NONE_BELOW {
        "none"
    } else if fraction < HUGE_FROM {
        "partial"
    } else {
        "huge"
    };
    BackingVerdict {
        huge_bytes: huge,
        fraction,
        label: label.into(),
    }
}

/// 2 MB-equivalent huge pages behind `bytes` (a 1 GB page counts 512).
pub fn pages_2m(bytes: u64) -> u64 {
    bytes.div_ceil(2 << 20)
}

/// One configuration of a workload in `peers`, reduced to what the verdict needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerOutcome {
    pub config: String,
    /// Timed runs of the primary measure (seconds).
    pub times: Vec<f64>,
    /// Median huge bytes proven per run.
    pub huge_bytes: u64,
    /// Whether every run succeeded.
    pub ok: bool,
}

/// `peers`' verdict for one workload: hugetune against the best peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeersVerdict {
    pub best_peer: Option<String>,
    pub best_peer_speedup: f64,
    pub hugetune_speedup: f64,
    /// hugetune's speedup is at least the best peer's, or the best peer is not
    /// significantly faster (one-sided Mann-Whitney at 5 %).
    pub speedup_met: bool,
    pub hugetune_huge_bytes: u64,
    pub best_peer_huge_bytes: u64,
    /// hugetune used no more huge memory than the best peer.
    pub fewer_pages: bool,
    /// A control workload: hugetune is not significantly slower than 4 KB
    /// (exact one-sided Mann-Whitney at 5 %). `None` for other workloads.
    pub no_slowdown: Option<bool>,
    /// hugetune's significance verdict against 4 KB.
    pub vs_4k: String,
}

/// hugetune against the best peer on one workload. `baseline` holds the 4 KB
/// runs; peers that failed a run do not compete.
pub fn peers_verdict(
    baseline: &[f64],
    peers: &[PeerOutcome],
    hugetune: &PeerOutcome,
    control: bool,
) -> PeersVerdict {
    let med = |v: &[f64]| hugetune_model::stats::median(v);
    let base = med(baseline);
    let sp = |v: &[f64]| base / med(v);
    let best = peers
        .iter()
        .filter(|p| p.ok && !p.times.is_empty())
        .max_by(|a, b| sp(&a.times).total_cmp(&sp(&b.times)));
    let hs = if hugetune.ok {
        sp(&hugetune.times)
    } else {
        0.0
    };
    let (best_name, best_sp, best_bytes, speedup_met) = match best {
        Some(b) => {
            // Equal unless the best peer's runs are significantly faster
            // (exact one-sided Mann-Whitney at 5 %): overlapping ranges are not
            // enough, one slow outlier widens a range a lot.
            let within = !ab::significantly_faster(&b.times, &hugetune.times);
            let bsp = sp(&b.times);
            (
                Some(b.config.clone()),
                bsp,
                b.huge_bytes,
                hugetune.ok && (hs >= bsp || within),
            )
        }
        None => (None, f64::NAN, 0, hugetune.ok),
    };
    let v = if hugetune.ok {
        ab::verdict(baseline, &hugetune.times)
    } else {
        ab::Verdict::Loss
    };
    PeersVerdict {
        best_peer: best_name,
        best_peer_speedup: best_sp,
        hugetune_speedup: hs,
        speedup_met,
        hugetune_huge_bytes: hugetune.huge_bytes,
        best_peer_huge_bytes: best_bytes,
        fewer_pages: hugetune.huge_bytes <= best_bytes,
        no_slowdown: control.then_some(v != ab::Verdict::Loss),
        vs_4k: v.name().into(),
    }
}

/// The PMB of each point of a measured curve: time saved against the baseline as
/// a share of the best saving (0..100).
pub fn measured_pmb(baseline: f64, medians: &[f64]) -> Vec<f64> {
    let best = medians.iter().map(|t| baseline - t).fold(0.0f64, f64::max);
    medians
        .iter()
        .map(|t| hugetune_model::rank::pmb(baseline - t, best))
        .collect()
}

/// Parallel efficiency: T(1 thread) / (T(n threads) * n).
pub fn efficiency(t1: f64, tn: f64, n: usize) -> f64 {
    if tn > 0.0 && n > 0 {
        t1 / (tn * n as f64)
    } else {
        f64::NAN
    }
}

/// hugetlb budgets for the pages sweep: `pcts` percent of `footprint_pages`,
/// rounded up, without repeats, ascending.
pub fn budgets(footprint_pages: u64, pcts: &[u32]) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::new();
    for &p in pcts {
        let pages = (footprint_pages * p as u64).div_ceil(100);
        if !out.iter().any(|&(_, q)| q == pages) {
            out.push((p, pages));
        }
    }
    out.sort_by_key(|&(_, q)| q);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 4.0, f64::NAN]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.q1 - 1.75).abs() < 1e-12 && (s.q3 - 3.25).abs() < 1e-12);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::NAN]).is_none());
        let one = Spread::of(&[2.0]).unwrap();
        assert_eq!((one.q1, one.median, one.q3), (2.0, 2.0, 2.0));
        let b = Spread::of(&[10.0, 10.0]).unwrap();
        assert!((speedup(&b, &Spread::of(&[5.0]).unwrap()) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn backing_verdicts() {
        const M: u64 = 1 << 20;
        // A 1 GiB hugetlb run: Rss leaves hugetlb out.
        let v = backing_verdict(&BackingFigures {
            rss: 4 * M,
            hugetlb: 1024 * M,
            pool_bytes: 1024 * M,
            ..Default::default()
        });
        assert_eq!(v.label, "huge");
        assert!(v.fraction > 0.99);
        // Applied but nothing backed.
        let v = backing_verdict(&BackingFigures {
            rss: 1024 * M,
            runtime: Some(0),
            ..Default::default()
        });
        assert_eq!((v.label.as_str(), v.huge_bytes), ("none", 0));
        // THP on a third.
        let v = backing_verdict(&BackingFigures {
            rss: 900 * M,
            anon_huge: 300 * M,
            ..Default::default()
        });
        assert_eq!(v.label, "partial");
        // A pool taken by a child that smaps sampling missed still counts.
        let v = backing_verdict(&BackingFigures {
            rss: 10 * M,
            pool_bytes: 100 * M,
            ..Default::default()
        });
        assert_eq!(v.label, "huge");
        // mTHP folios count (smaps does not show them).
        let v = backing_verdict(&BackingFigures {
            rss: 100 * M,
            mthp_bytes: 90 * M,
            ..Default::default()
        });
        assert_eq!(v.label, "huge");
        // The library's figure has the same mTHP folios: not counted twice.
        let v = backing_verdict(&BackingFigures {
            rss: 100 * M,
            mthp_bytes: 90 * M,
            runtime: Some(90 * M),
            ..Default::default()
        });
        assert_eq!(v.huge_bytes, 90 * M);
        // Nothing at all: no division by zero.
        assert_eq!(backing_verdict(&BackingFigures::default()).label, "none");
        assert_eq!(pages_2m(0), 0);
        assert_eq!(pages_2m(1), 1);
        assert_eq!(pages_2m(1 << 30), 512);
    }

    fn outcome(name: &str, times: &[f64], huge: u64) -> PeerOutcome {
        PeerOutcome {
            config: name.into(),
            times: times.to_vec(),
            huge_bytes: huge,
            ok: true,
        }
    }

    #[test]
    fn peers_verdicts() {
        let base = [10.0, 10.2, 9.9, 10.1, 10.0];
        let peers = vec![
            outcome("thp-always", &[8.0, 8.1, 7.9, 8.0, 8.2], 2000),
            outcome("jemalloc", &[9.0, 9.1, 8.9, 9.0, 9.2], 1000),
            PeerOutcome {
                ok: false,
                ..outcome("broken", &[1.0], 0)
            },
        ];
        let h = outcome("hugetune", &[7.0, 7.1, 6.9, 7.0, 7.2], 1500);
        let v = peers_verdict(&base, &peers, &h, false);
        assert_eq!(v.best_peer.as_deref(), Some("thp-always"));
        assert!(v.speedup_met && v.fewer_pages);
        assert_eq!(v.no_slowdown, None);
        assert_eq!(v.vs_4k, "gain");
        // Slower than the best peer, ranges apart: not met; more pages: not fewer.
        let slow = outcome("hugetune", &[9.5, 9.6, 9.4, 9.5, 9.6], 3000);
        let v = peers_verdict(&base, &peers, &slow, false);
        assert!(!v.speedup_met && !v.fewer_pages);
        // Not significantly slower than the best peer counts as met.
        let close = outcome("hugetune", &[8.1, 7.95, 8.3, 7.9, 8.2], 10);
        assert!(peers_verdict(&base, &peers, &close, false).speedup_met);
        // Ranges that overlap through one outlier are not enough (the best
        // peer is faster in every pair but one).
        let wide = outcome("hugetune", &[8.3, 8.4, 8.5, 8.6, 7.95], 10);
        assert!(!peers_verdict(&base, &peers, &wide, false).speedup_met);
        // Controls: a significant slowdown is flagged, noise is not.
        let loss = outcome("hugetune", &[11.0, 11.1, 11.2, 11.0, 11.3], 0);
        assert_eq!(
            peers_verdict(&base, &[], &loss, true).no_slowdown,
            Some(false)
        );
        let same = outcome("hugetune", &[10.1, 9.9, 10.0, 10.2, 10.0], 0);
        assert_eq!(
            peers_verdict(&base, &[], &same, true).no_slowdown,
            Some(true)
        );
        // A failed hugetune run meets nothing.
        let failed = PeerOutcome {
            ok: false,
            ..h.clone()
        };
        let v = peers_verdict(&base, &peers, &failed, true);
        assert!(!v.speedup_met);
        assert_eq!(v.no_slowdown, Some(false));
    }

    #[test]
    fn pmb_efficiency_budgets() {
        let p = measured_pmb(10.0, &[10.0, 8.0, 6.0, 11.0]);
        assert_eq!(p, vec![0.0, 50.0, 100.0, 0.0]);
        assert!(measured_pmb(10.0, &[12.0]).iter().all(|&x| x == 0.0));
        assert!((efficiency(10.0, 5.0, 2) - 1.0).abs() < 1e-12);
        assert!(efficiency(1.0, 0.0, 2).is_nan());
        assert_eq!(
            budgets(1000, &[10, 50, 100, 110]),
            vec![(10, 100), (50, 500), (100, 1000), (110, 1100)]
        );
        // Rounded up, duplicates dropped.
        assert_eq!(budgets(3, &[10, 20, 30]), vec![(10, 1)]);
        assert_eq!(budgets(0, &[10, 20]), vec![(10, 0)]);
    }
}
