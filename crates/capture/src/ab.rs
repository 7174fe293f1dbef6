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

pub use hugetune_model::rank::median;

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

/// Probability, if both samples came from the same distribution, of a Mann-Whitney
/// U at least as large as the one observed for "`x` tends to be smaller than `y`"
/// (U counts pairs with x < y, ties as one half). Exact for up to 60 runs per side
/// (with ties it rounds U down, which is conservative), normal approximation beyond.
pub fn mann_whitney_p(x: &[f64], y: &[f64]) -> f64 {
    let (n, m) = (x.len(), y.len());
    if n == 0 || m == 0 {
        return 1.0;
    }
    let mut u2 = 0usize; // 2U, so ties stay integral
    for a in x {
        for b in y {
            u2 += if a < b {
                2
            } else if a == b {
                1
            } else {
                0
            };
        }
    }
    let u = u2 / 2;
    if n <= 60 && m <= 60 {
        let dist = u_distribution(n, m);
        let total: f64 = dist.iter().sum();
        return (dist[u..].iter().sum::<f64>() / total).min(1.0);
    }
    let mean = (n * m) as f64 / 2.0;
    let sd = ((n * m * (n + m + 1)) as f64 / 12.0).sqrt();
    let z = (u as f64 - 0.5 - mean) / sd;
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Number of orderings of n x's and m y's with U = u, for u in 0..=n*m. Taking the
/// largest element: an x adds no pair, a y adds one pair per x, so
/// f(i, j, u) = f(i-1, j, u) + f(i, j-1, u-i).
fn u_distribution(n: usize, m: usize) -> Vec<f64> {
    let max_u = n * m;
    // f[i][u] for the current j.
    let mut f: Vec<Vec<f64>> = (0..=n)
        .map(|_| {
            let mut v = vec![0f64; max_u + 1];
            v[0] = 1.0;
            v
        })
        .collect();
    for _j in 1..=m {
        let mut g: Vec<Vec<f64>> = vec![vec![0f64; max_u + 1]; n + 1];
        g[0][0] = 1.0;
        for i in 1..=n {
            for u in 0..=max_u {
                let last_x = g[i - 1][u];
                let last_y = if u >= i { f[i][u - i] } else { 0.0 };
                g[i][u] = last_x + last_y;
            }
        }
        f = g;
    }
    f.swap_remove(n)
}

/// Complementary error function (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.26551223
        + t * (1.00002368
            + t * (0.37409196
                + t * (0.09678418
                    + t * (-0.18628806
                        + t * (0.27886807
                            + t * (-1.13520398
                                + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
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

/// 95 % percentile-bootstrap confidence interval of the speedup
/// median(baseline) / median(optimized), each side resampled on its own
/// (2000 resamples, fixed seed: the same runs give the same interval).
pub fn speedup_ci(baseline: &[f64], optimized: &[f64]) -> (f64, f64) {
    if baseline.is_empty() || optimized.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = hugetune_model::mrc::synth::Rng(0x9e37_79b9_7f4a_7c15);
    let mut next = |n: usize| rng.below(n as u64) as usize;
    const RESAMPLES: usize = 2000;
    let mut ratios = Vec::with_capacity(RESAMPLES);
    let (mut rb, mut ro) = (vec![0.0; baseline.len()], vec![0.0; optimized.len()]);
    for _ in 0..RESAMPLES {
        for x in rb.iter_mut() {
            *x = baseline[next(baseline.len())];
        }
        for x in ro.iter_mut() {
            *x = optimized[next(optimized.len())];
        }
        ratios.push(median(&rb) / median(&ro));
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((q * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    (at(0.025), at(0.975))
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
