//! Statistics of repeated measurements, one home for all of them: medians,
//! quantiles, the spread of a sample, the exact Mann-Whitney test, the bootstrap
//! interval of a speedup, and the one seeded generator the pure code uses.
//!
//! Invariants: pure (no I/O, no clock, no global state); every random choice comes
//! from a `Rng` with a fixed seed, so the same runs always give the same figures.

use serde::{Deserialize, Serialize};

/// Median of a sample (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Median of the finite values; `None` when there are none.
pub fn median_finite(v: &[f64]) -> Option<f64> {
    let f: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    (!f.is_empty()).then(|| median(&f))
}

/// Median of counts (0 when empty), rounded down.
pub fn median_u64(v: impl Iterator<Item = u64>) -> u64 {
    let v: Vec<f64> = v.map(|x| x as f64).collect();
    let m = median(&v);
    if m.is_nan() {
        0
    } else {
        m as u64
    }
}

/// Quantile of sorted values, linear between order statistics (type 7).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (h - lo as f64)
}

/// Median, extremes and quartiles of one measure over repeated runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// First and third quartiles (linear interpolation between order statistics).
    pub q1: f64,
    pub q3: f64,
}

impl Spread {
    /// `None` for no values; NaNs are left out.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            n: v.len(),
            median: median(&v),
            min: v[0],
            max: v[v.len() - 1],
            q1: quantile(&v, 0.25),
            q3: quantile(&v, 0.75),
        })
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

/// 95 % percentile-bootstrap confidence interval of the speedup
/// median(baseline) / median(optimized), each side resampled on its own
/// (2000 resamples, fixed seed: the same runs give the same interval).
pub fn speedup_ci(baseline: &[f64], optimized: &[f64]) -> (f64, f64) {
    if baseline.is_empty() || optimized.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
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

/// SplitMix64: the one seeded generator of the pure code (synthetic traces,
/// bootstrap resamples): small, fast, and good enough for both.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-32 for n < 2^32).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_quantiles_and_spreads() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(
            median_finite(&[f64::NAN, 1.0, f64::INFINITY, 3.0]),
            Some(2.0)
        );
        assert_eq!(median_finite(&[f64::NAN]), None);
        assert_eq!(median_u64([5u64, 1, 3].into_iter()), 3);
        assert_eq!(median_u64(std::iter::empty()), 0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        let s = Spread::of(&[3.0, f64::NAN, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!(Spread::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn the_generator_is_splitmix64_and_seeded() {
        let mut a = Rng(1);
        let mut b = Rng(1);
        let x: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        assert_eq!(x, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        // SplitMix64's reference output for seed 1 (first value).
        assert_eq!(x[0], 0x910a_2dec_8902_5cc1);
        assert!((0..1000).all(|_| a.below(7) < 7 && (0.0..1.0).contains(&a.unit())));
    }
}
