//! A/B validation: baseline and optimized runs interleaved (A B A B ...), so drift
//! in the machine's state hits both sides alike; medians and a distribution-free
//! verdict.

use crate::runner::{run, RunSpec, RunStats};
use anyhow::Result;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbResult {
    pub baseline: Vec<RunStats>,
    pub optimized: Vec<RunStats>,
    /// Runtime library summaries of the optimized runs, when available.
    pub summaries: Vec<serde_json::Value>,
}

use hugetune_model::stats::{mann_whitney_p, speedup_ci};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Gain,
    NoSignificantChange,
    Loss,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Gain => "gain",
            Verdict::NoSignificantChange => "no significant change",
            Verdict::Loss => "loss",
        }
    }
}

/// Significance level of the verdict (one-sided, each direction).
pub const ALPHA: f64 = 0.05;

/// Gain when the optimized runs are significantly faster (exact one-sided
/// Mann-Whitney U at 5 %: with 3 + 3 runs that needs every optimized run faster
/// than every baseline run), loss in the mirror case.
pub fn verdict(baseline: &[f64], optimized: &[f64]) -> Verdict {
    if mann_whitney_p(optimized, baseline) <= ALPHA {
        Verdict::Gain
    } else if mann_whitney_p(baseline, optimized) <= ALPHA {
        Verdict::Loss
    } else {
        Verdict::NoSignificantChange
    }
}

/// How many A/B pairs to run: at least `min`, then more until the 95 %
/// bootstrap confidence interval of the speedup is narrower than `ci_width`
/// (in speedup units: 0.05 means ±2.5 %), at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunCount {
    pub min: usize,
    pub max: usize,
    pub ci_width: f64,
}

impl RunCount {
    pub fn fixed(n: usize) -> Self {
        RunCount {
            min: n,
            max: n,
            ci_width: f64::INFINITY,
        }
    }

    /// Whether `b`/`o` (one entry per pair so far) are enough.
    pub fn enough(&self, b: &[f64], o: &[f64]) -> bool {
        let n = b.len().min(o.len());
        if n >= self.max {
            return true;
        }
        if n < self.min.max(2) {
            return false;
        }
        let (lo, hi) = speedup_ci(b, o);
        hi - lo < self.ci_width
    }
}

/// Runs pairs, baseline first in each pair, until `count` says they are enough.
/// `after_optimized` reads the runtime library's summary after an optimized run.
pub fn interleaved(
    baseline: &RunSpec,
    optimized: &RunSpec,
    count: RunCount,
    mut after_optimized: impl FnMut() -> Option<serde_json::Value>,
    mut progress: impl FnMut(&str, usize, &RunStats),
) -> Result<AbResult> {
    let mut r = AbResult {
        baseline: vec![],
        optimized: vec![],
        summaries: vec![],
    };
    let (mut b, mut o) = (Vec::new(), Vec::new());
    let mut i = 0;
    while !count.enough(&b, &o) {
        let s = run(baseline)?;
        progress("baseline", i, &s);
        b.push(s.wall_s);
        r.baseline.push(s);
        let s = run(optimized)?;
        progress("optimized", i, &s);
        o.push(s.wall_s);
        r.optimized.push(s);
        if let Some(s) = after_optimized() {
            r.summaries.push(s);
        }
        i += 1;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_model::stats::median;

    #[test]
    fn medians_and_verdicts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(
            verdict(&[10.0, 11.0, 10.5], &[7.0, 7.2, 7.1]),
            Verdict::Gain
        );
        assert_eq!(
            verdict(&[10.0, 11.0], &[10.5, 7.0]),
            Verdict::NoSignificantChange
        );
        assert_eq!(verdict(&[7.0, 7.1, 7.2], &[9.0, 9.1, 9.3]), Verdict::Loss);
        // One run per side can never be significant.
        assert_eq!(verdict(&[7.0], &[9.0]), Verdict::NoSignificantChange);
        // 5 + 5 tolerates one outlier.
        assert_eq!(
            verdict(&[5.9, 5.4, 6.6, 5.8, 6.0], &[3.8, 3.7, 6.0, 3.9, 3.6]),
            Verdict::Gain
        );
    }

    #[test]
    fn bootstrap_interval_and_adaptive_count() {
        let b = [10.0, 10.2, 9.9, 10.1, 10.0];
        let o = [7.0, 7.1, 6.9, 7.05, 7.0];
        let (lo, hi) = speedup_ci(&b, &o);
        let point = median(&b) / median(&o);
        assert!(lo <= point && point <= hi, "{lo} {point} {hi}");
        assert!(lo > 1.35 && hi < 1.5, "{lo} {hi}");
        // Deterministic.
        assert_eq!(speedup_ci(&b, &o), (lo, hi));
        // Noisy runs give a wider interval than tight ones.
        let noisy_o = [5.0, 9.0, 7.0, 6.0, 8.5];
        let (nlo, nhi) = speedup_ci(&b, &noisy_o);
        assert!(nhi - nlo > 3.0 * (hi - lo));
        let c = RunCount {
            min: 3,
            max: 10,
            ci_width: 0.2,
        };
        assert!(!c.enough(&b[..2], &o[..2]), "below the minimum");
        assert!(c.enough(&b, &o), "tight runs: enough at 5");
        assert!(!c.enough(&b, &noisy_o), "noisy runs: more");
        assert!(
            c.enough(&[b, b].concat(), &[noisy_o, noisy_o].concat()),
            "the maximum ends it"
        );
        assert!(RunCount::fixed(3).enough(&b[..3], &o[..3]));
        assert!(!RunCount::fixed(3).enough(&b[..2], &o[..2]));
        assert!(speedup_ci(&[], &o).0.is_nan());
    }

    #[test]
    fn mann_whitney_exact_values() {
        // Complete separation, 3 + 3: 1 / C(6,3) = 0.05.
        assert!((mann_whitney_p(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]) - 0.05).abs() < 1e-12);
        // 5 + 5 complete separation: 1 / 252.
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!((p - 1.0 / 252.0).abs() < 1e-12);
        // One inversion in 5 + 5: U = 24, P(U >= 24) = 2 / 252.
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0, 6.5], &[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!((p - 2.0 / 252.0).abs() < 1e-12);
        // The opposite direction is not significant.
        assert!(mann_whitney_p(&[6.0, 7.0, 8.0], &[1.0, 2.0, 3.0]) > 0.9);
        // Large samples use the normal approximation and agree on clear cases.
        let x: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let y: Vec<f64> = (0..100).map(|i| i as f64 + 50.0).collect();
        assert!(mann_whitney_p(&x, &y) < 1e-6);
        assert!(mann_whitney_p(&y, &x) > 0.99);
    }
}
