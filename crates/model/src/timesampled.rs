//! Analysis of a *time-sampled* reference stream (perf: PEBS, IBS, SPE;
//! docs/model.md §3.2): one address every `period` references, no reuse times
//! (a PMU has no watchpoints; `statstack.rs` needs them), so LRU distances on the
//! samples are meaningless (REF-model §1.2).
//!
//! **Estimator.** Under the independent reference model (IRM) every reference
//! is key k with probability p_k, whatever came before. The samples of a key are
//! then Poisson with mean λ_k = N p_k (N samples): the per-key sample counts
//! estimate the p_k. The reuse time of k is geometric, so the reuse-time
//! distribution of the stream is P(R > m) = Σ_k p_k (1 − p_k)^m, and StatStack's
//! expected stack distance of a reuse after r references, D(r) = Σ_{m<r-1}
//! P(R > m), is the expected number of distinct keys in the window between.
//! For an LRU array of C entries that is Che's approximation: the window
//! T_C in which C distinct keys are expected,
//!
//! ```text
//! Σ_k (1 − e^{−p_k T_C}) = C,      P(miss | key k) = e^{−p_k T_C}
//! ```
//!
//! plus one compulsory miss per key (1 / r_k of its r_k references).
//!
//! **Few samples per key.** A TLB's keys are 4 KB pages: a run sampled at 1 in
//! 10 000 sees most pages a few times or not at all. Raw counts overstate the
//! skew (Poisson noise adds λ to E[n²]) and miss the unseen keys, which both
//! make hits look likelier. So the rates are the posterior means of a
//! Gamma–Poisson empirical Bayes fit (method of moments: the Gamma's variance is
//! the counts' variance less their Poisson part), over the seen keys and the
//! unseen ones that Chao1 estimates (f₁(f₁−1) / 2(f₂+1), at most f₁ × period:
//! the unseen mass is f₁/N of the references, at least one each). A uniform
//! stream shrinks to its exact uniform rate; a skewed one keeps its counts.
//!
//! **Where IRM fails.** Loops and sweeps larger than a TLB: LRU misses nearly
//! every reference of a cyclic sweep over more pages than entries, IRM
//! predicts only 1 − C/footprint. Such streams are under-predicted (tested in
//! tests/timesampled.rs); their walks are a lower bound, and the analysis says
//! so in its basis.
//!
//! **Faults** cannot come from samples (a page touched once is almost never
//! sampled): heap-large objects that have samples fault every folio of their
//! layout under the mapping (the allocation log's sizes: allocated memory is
//! taken as touched), every other cell the Chao1 estimate of its folios.
//!
//! **Error bars**: the samples fall into [`BUCKETS`] buckets by their index; each
//! bucket's Horvitz–Thompson sums (× `BUCKETS`) are an estimate of their own, as
//! for spatial samples (`rank::sampling_errors`). They cover the sampling noise
//! of the sums, not the IRM's model error nor that of the fitted rates.

use crate::analysis::{resolve, routes_of, Cell, Mapping, MappingResult, SizeStats};
use crate::categorize::{head_pages_1g, ObjectInfo, StaticSegment};
use crate::category::Category;
use crate::page::{key, Backing, BACKINGS, SIZE_1G, SIZE_2M};
use crate::sampled::BUCKETS;
use crate::stats::Rng;
use crate::tlb::TlbGeometry;
use rustc_hash::{FxHashMap, FxHashSet};

const PAGE: u64 = 4096;

/// The IRM of one key space, estimated from its sample counts (module doc): the
/// expected distinct keys in a window and the miss probability of a sampled
/// reference, as rarefaction (windows up to the N references of the sample's
/// size) and Chao's extrapolation beyond.
#[derive(Debug, Clone, PartialEq)]
pub struct Irm {
    /// (sample count, keys seen that often), ascending.
    classes: Vec<(u32, f64)>,
    seen: f64,
    f1: f64,
    /// Unseen keys (Chao1, capped).
    unseen: f64,
    /// References per sample.
    period: f64,
    /// Samples of the whole stream (N).
    total: f64,
}

impl Irm {
    /// Fits the counts of the keys seen (each ≥ 1) in a stream of `total`
    /// samples taken every `period` references.
    pub fn fit(counts: impl IntoIterator<Item = u32>, total: u64, period: u64) -> Irm {
        let mut hist: FxHashMap<u32, f64> = FxHashMap::default();
        for n in counts.into_iter().filter(|&n| n > 0) {
            *hist.entry(n).or_default() += 1.0;
        }
        let f1 = hist.get(&1).copied().unwrap_or(0.0);
        let f2 = hist.get(&2).copied().unwrap_or(0.0);
        // Bias-corrected Chao1; the unseen keys are at most the unseen
        // references (f1/N of them), one each.
        let unseen = (f1 * (f1 - 1.0).max(0.0) / (2.0 * (f2 + 1.0))).min(f1 * period as f64);
        let mut classes: Vec<(u32, f64)> = hist.into_iter().collect();
        classes.sort_unstable_by_key(|c| c.0);
        Irm {
            seen: classes.iter().map(|c| c.1).sum(),
            classes,
            f1,
            unseen,
            period: period.max(1) as f64,
            total: total.max(1) as f64,
        }
    }

    /// Keys of the space (seen, and unseen estimated).
    pub fn keys(&self) -> f64 {
        self.seen + self.unseen
    }

    /// Expected distinct keys in a window of τ·N references (N: samples):
    /// Σ_k (1 − e^{−λ_k τ}) with λ_k = N p_k the key's expected samples.
    pub fn distinct(&self, tau: f64) -> f64 {
        if tau <= 1.0 {
            // E[(1 − τ)^n] = e^{−λτ} for n ~ Poisson(λ): unbiased.
            self.classes
                .iter()
                .map(|&(n, k)| k * (1.0 - (1.0 - tau).powi(n as i32)))
                .sum()
        } else if self.unseen > 0.0 {
            self.seen + self.unseen * -(-(tau - 1.0) * self.f1 / self.unseen).exp_m1()
        } else {
            self.seen
        }
    }

    /// The window τ (in units of N references) in which `capacity` distinct
    /// keys are expected: Che's characteristic time; infinite when every key
    /// fits.
    pub fn window(&self, capacity: u64) -> f64 {
        let c = capacity as f64;
        if self.keys() <= c {
            return f64::INFINITY;
        }
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        while self.distinct(hi) < c {
            lo = hi;
            hi *= 2.0;
            if hi > 1e30 {
                return f64::INFINITY;
            }
        }
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if self.distinct(mid) < c {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo <= 1e-12 * hi {
                break;
            }
        }
        0.5 * (lo + hi)
    }

    /// Probability that a reference sampled from a key sampled `n` times misses
    /// an LRU array of window `tau`: its compulsory share 1/(n·period) plus the
    /// reuse miss e^{−λτ}, estimated without bias by (1 − τ)^{n−1} (its mean
    /// over the samples is the slope of [`Irm::distinct`] / N: the miss ratio);
    /// beyond τ = 1 only singletons miss, at the slope of the extrapolation.
    pub fn miss(&self, n: u32, tau: f64) -> f64 {
        let n = n.max(1);
        let cold = (1.0 / (n as f64 * self.period)).min(1.0);
        let reuse = if !tau.is_finite() {
            0.0
        } else if tau <= 1.0 {
            (1.0 - tau).powi(n as i32 - 1)
        } else if n == 1 && self.unseen > 0.0 {
            (-(tau - 1.0) * self.f1 / self.unseen).exp()
        } else {
            0.0
        };
        cold + (1.0 - cold) * reuse
    }

    /// Samples of the whole stream.
    pub fn samples(&self) -> f64 {
        self.total
    }
}

/// Picks the references a PMU samples at `period` (uniform jitter of
/// ±period/2, as a randomised period does): [`PeriodSampler::take`] per
/// reference. For tests and for turning exact traces into time-sampled ones.
#[derive(Debug, Clone)]
pub struct PeriodSampler {
    period: u64,
    rng: Rng,
    countdown: u64,
}

impl PeriodSampler {
    pub fn new(period: u64, seed: u64) -> Self {
        let mut s = PeriodSampler {
            period: period.max(1),
            rng: Rng(seed),
            countdown: 0,
        };
        s.countdown = s.gap();
        s
    }

    fn gap(&mut self) -> u64 {
        let half = self.period / 2;
        (self.period - half + self.rng.below(2 * half + 1)).max(1)
    }

    /// Whether the next reference is sampled.
    pub fn take(&mut self) -> bool {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = self.gap();
            true
        } else {
            false
        }
    }
}

/// Miss ratios at `capacities` of an LRU array over the keys whose samples
/// are `keys` (every reference's key, sampled every `period` references).
pub fn miss_ratio_curve(keys: &[u64], period: u64, capacities: &[u64]) -> Vec<(u64, f64)> {
    let mut counts: FxHashMap<u64, u32> = FxHashMap::default();
    for &k in keys {
        *counts.entry(k).or_default() += 1;
    }
    let irm = Irm::fit(counts.values().copied(), keys.len() as u64, period);
    // Σ over samples = Σ over keys of n × miss(n): by count class.
    let mut by_n: FxHashMap<u32, f64> = FxHashMap::default();
    for &n in counts.values() {
        *by_n.entry(n).or_default() += n as f64;
    }
    let total = keys.len().max(1) as f64;
    capacities
        .iter()
        .map(|&c| {
            let t = irm.window(c);
            let m: f64 = by_n.iter().map(|(&n, &w)| w * irm.miss(n, t)).sum();
            (c, m / total)
        })
        .collect()
}

/// What [`analyze`] needs: the categorized samples and the mappings.
pub struct TimeSampledInput<'a> {
    pub geometry: &'a TlbGeometry,
    pub static_segments: &'a [StaticSegment],
    pub objects: &'a [ObjectInfo],
    pub mappings: Vec<Mapping>,
    /// (object id, address) of every program sample, in stream order.
    pub samples: &'a [(u32, u64)],
    /// References per sample.
    pub period: u64,
    /// The program's own `MADV_HUGEPAGE` counts (`Analyzer::with_self_advice`).
    pub advised: bool,
}

const CELLS: usize = 5 * BACKINGS;

#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    refs: f64,
    l1: f64,
    walks: f64,
}

/// Folios of a heap-large object of `len` bytes under resolution `res` of the
/// runtime library's layout, by backing (module doc).
fn object_folios(len: u64, res: Option<Backing>) -> Vec<(Backing, u64)> {
    let pages = |bytes: u64| bytes.div_ceil(PAGE);
    match res {
        None => vec![(Backing::Base4k, pages(len))],
        Some(Backing::Hugetlb1g) => {
            let (g, m) = head_pages_1g(len);
            let tail = len - g * SIZE_1G - m * SIZE_2M;
            vec![
                (Backing::Hugetlb1g, g),
                (Backing::Hugetlb2m, m),
                (Backing::Base4k, pages(tail)),
            ]
        }
        Some(b) => {
            let p = b.folio_bytes();
            vec![(b, len / p), (Backing::Base4k, pages(len % p))]
        }
    }
}

/// The resolution of `obj` under `m` (the analyzer's rule: sites first).
fn res_of(m: &Mapping, res: &[Option<Backing>; 5], obj: &ObjectInfo) -> Option<Backing> {
    match obj.site {
        Some(site) if !m.sites.is_empty() && obj.category == Category::HeapLarge => {
            m.sites.iter().find(|(s, _)| *s == site).map(|&(_, b)| b)
        }
        _ => res[obj.category.index()],
    }
}

/// Every mapping's counts from a time-sampled stream (module doc); buckets for
/// the error bars included.
pub fn analyze(input: &TimeSampledInput<'_>) -> Vec<MappingResult> {
    let period = input.period.max(1);
    let w = period as f64;
    let levels = input.geometry.levels.len();
    let all = Backing::all();
    // Heap-large objects with samples: every folio of theirs faults.
    let sampled_objs: FxHashSet<u32> = input
        .samples
        .iter()
        .map(|s| s.0)
        .filter(|&id| input.objects[id as usize].category == Category::HeapLarge)
        .collect();
    let mut out = Vec::with_capacity(input.mappings.len());
    for m in &input.mappings {
        let res = m.resolution();
        let (routes, engines) = routes_of(m, input.geometry, input.advised);
        let place = |&(id, addr): &(u32, u64)| {
            let obj = &input.objects[id as usize];
            let seg = obj
                .segment
                .and_then(|i| input.static_segments.get(i as usize));
            let (b, space, pa) = resolve(
                obj,
                seg,
                addr,
                res_of(m, &res, obj),
                input.advised.then(|| m.self_advice()),
            );
            (obj, b, space, pa)
        };
        // Pass 1: sample counts per engine key and per cell folio.
        let mut counts: Vec<FxHashMap<u64, u32>> = vec![FxHashMap::default(); engines];
        let mut folios: Vec<FxHashMap<u64, u32>> = vec![FxHashMap::default(); CELLS];
        for s in input.samples {
            let (obj, b, space, pa) = place(s);
            let mut done = [usize::MAX; 8];
            for (l, r) in routes[b.index()].iter().enumerate() {
                let Some(r) = r else { continue };
                if done[..l.min(8)].contains(&r.engine) {
                    continue;
                }
                if l < 8 {
                    done[l] = r.engine;
                }
                *counts[r.engine].entry(key(space, r.shift, pa)).or_default() += 1;
            }
            if obj.category != Category::HeapLarge {
                let cell = obj.category.index() * BACKINGS + b.index();
                *folios[cell]
                    .entry(key(space, b.folio_shift(), pa))
                    .or_default() += 1;
            }
        }
        let n = input.samples.len() as u64;
        let irms: Vec<Irm> = counts
            .iter()
            .map(|c| Irm::fit(c.values().copied(), n, period))
            .collect();
        let mut windows: FxHashMap<(usize, u64), f64> = FxHashMap::default();
        // Pass 2: expected misses of every sample's references.
        let mut acc = vec![Acc::default(); CELLS * BUCKETS];
        for (i, s) in input.samples.iter().enumerate() {
            let (obj, b, space, pa) = place(s);
            let mut miss = [1.0f64; 8];
            let mut walk = 1.0f64;
            for (l, r) in routes[b.index()].iter().enumerate() {
                let Some(r) = r else { continue };
                let irm = &irms[r.engine];
                let t = *windows
                    .entry((r.engine, r.entries))
                    .or_insert_with(|| irm.window(r.entries));
                let c = counts[r.engine]
                    .get(&key(space, r.shift, pa))
                    .copied()
                    .unwrap_or(1);
                let x = irm.miss(c, t);
                if l < 8 {
                    miss[l] = x;
                }
                // Levels see the same reuse window: all miss when the one with
                // the longest reach misses.
                walk = walk.min(x);
            }
            let cell = (i % BUCKETS) * CELLS + obj.category.index() * BACKINGS + b.index();
            let a = &mut acc[cell];
            a.refs += w;
            a.l1 += w * if levels > 0 { miss[0] } else { 1.0 };
            a.walks += w * walk;
        }
        // Faults per cell.
        let mut faults = vec![0f64; CELLS];
        for (c, f) in folios.iter().enumerate() {
            if !f.is_empty() {
                faults[c] = Irm::fit(f.values().copied(), n, period).keys();
            }
        }
        for &id in &sampled_objs {
            let obj = &input.objects[id as usize];
            for (b, k) in object_folios(obj.len, res_of(m, &res, obj)) {
                faults[Category::HeapLarge.index() * BACKINGS + b.index()] += k as f64;
            }
        }
        let cells_of = |sum: &[Acc], scale: f64| -> Vec<Cell> {
            sum.iter()
                .enumerate()
                .filter(|(_, a)| a.refs > 0.0)
                .map(|(c, a)| Cell {
                    category: Category::ALL[c / BACKINGS],
                    backing: all[c % BACKINGS],
                    stats: SizeStats {
                        refs: (a.refs * scale).round() as u64,
                        l1_misses: (a.l1 * scale).round() as u64,
                        walks: (a.walks * scale).round() as u64,
                        // The samples carry no stores: read as loads.
                        dirty_walks: 0,
                        faults: faults[c].round() as u64,
                        sim_l1_misses: 0,
                        sim_walks: 0,
                    },
                })
                .collect()
        };
        let mut total = vec![Acc::default(); CELLS];
        for bucket in acc.chunks(CELLS) {
            for (t, x) in total.iter_mut().zip(bucket) {
                t.refs += x.refs;
                t.l1 += x.l1;
                t.walks += x.walks;
            }
        }
        out.push(MappingResult {
            name: m.name(),
            base: m.is_base(),
            mapping: m.clone(),
            cells: cells_of(&total, 1.0),
            simulated: false,
            buckets: acc
                .chunks(CELLS)
                .map(|b| cells_of(b, BUCKETS as f64))
                .collect(),
            per_core: vec![],
        });
    }
    out
}

/// Miss-ratio curves of the whole stream per page size (`4k`, `2m`, `1g`) over
/// `capacities`, from the sampled addresses.
pub fn curves(
    addrs: &[u64],
    period: u64,
    capacities: &[u64],
) -> Vec<(&'static str, Vec<(u64, f64)>)> {
    [("4k", 12u32), ("2m", 21), ("1g", 30)]
        .into_iter()
        .map(|(name, shift)| {
            let keys: Vec<u64> = addrs.iter().map(|a| a >> shift).collect();
            (name, miss_ratio_curve(&keys, period, capacities))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_interpolate_and_extrapolate() {
        // 1000 keys, 2 samples each on average.
        let mut r = Rng(3);
        let mut c = vec![0u32; 1000];
        for _ in 0..2000 {
            c[r.below(1000) as usize] += 1;
        }
        let irm = Irm::fit(c.iter().copied(), 2000, 10);
        let k = irm.keys();
        assert!((900.0..1100.0).contains(&k), "keys {k}");
        // Uniform: 1000 (1 − e^{−2τ}).
        for tau in [0.1f64, 0.5, 1.0, 2.0] {
            let want = 1000.0 * (1.0 - (-2.0 * tau).exp());
            let got = irm.distinct(tau);
            assert!((got - want).abs() < 0.05 * want, "τ {tau}: {got} vs {want}");
        }
    }

    #[test]
    fn window_fits_capacity_and_miss_falls_with_it() {
        let irm = Irm::fit(vec![4u32; 100], 400, 1);
        assert!(irm.window(100).is_infinite());
        assert!(irm.window(50) < irm.window(60));
        assert!(irm.miss(4, irm.window(10)) > irm.miss(4, irm.window(60)));
        // Singletons always miss inside the sample's span.
        assert_eq!(Irm::fit(vec![1u32, 1, 2], 4, 1).miss(1, 0.5), 1.0);
    }

    #[test]
    fn heap_large_layouts() {
        let len = (1 << 30) + (3 << 21) + 5000;
        assert_eq!(
            object_folios(len, Some(Backing::Hugetlb1g)),
            vec![
                (Backing::Hugetlb1g, 1),
                (Backing::Hugetlb2m, 3),
                (Backing::Base4k, 2)
            ]
        );
        assert_eq!(
            object_folios(len, Some(Backing::Thp2m)),
            vec![(Backing::Thp2m, 515), (Backing::Base4k, 2)]
        );
        assert_eq!(object_folios(8192, None), vec![(Backing::Base4k, 2)]);
    }

    #[test]
    fn period_sampler_mean_gap() {
        let mut s = PeriodSampler::new(100, 1);
        let n = (0..1_000_000).filter(|_| s.take()).count();
        assert!((9_900..10_100).contains(&n), "{n}");
    }
}
