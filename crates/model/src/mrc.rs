//! Miss-ratio curves (MRCs) of fully associative LRU structures, their error
//! measure, and the synthetic reference traces the engines are evaluated on.
//!
//! An exact [`Histogram`] is itself a curve. Approximate engines (SHARDS,
//! StatStack) produce an [`Mrc`]: weights over *estimated* stack distances in
//! bins that are exact below 256 and log-spaced above (128 bins per octave, so
//! under 0.8 % relative width), which keeps a curve for any capacity in a few
//! tens of kilobytes whatever the footprint.

use crate::reuse::Histogram;
use serde::{Deserialize, Serialize};

/// Anything that answers "what fraction of references miss in a fully associative
/// LRU structure of `capacity` entries".
pub trait MissRatioCurve {
    fn miss_ratio(&self, capacity: u64) -> f64;
}

impl MissRatioCurve for Histogram {
    fn miss_ratio(&self, capacity: u64) -> f64 {
        Histogram::miss_ratio(self, capacity)
    }
}

/// Distances below this have one bin each.
const LINEAR: usize = 256;
const LINEAR_BITS: u32 = 8;
/// Log-spaced bins per octave above `LINEAR`.
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;

/// The bin of an estimated distance `x >= 0`.
fn bin_of(x: f64) -> usize {
    if x < LINEAR as f64 {
        return x.max(0.0) as usize;
    }
    // Past 2^63 everything shares the last octave; no real trace gets there.
    let xi = if x >= 9.2e18 { u64::MAX >> 1 } else { x as u64 };
    let octave = 63 - xi.leading_zeros();
    let sub = ((xi >> (octave - SUB_BITS)) as usize) & (SUB - 1);
    LINEAR + (octave - LINEAR_BITS) as usize * SUB + sub
}

/// The lower edge of bin `b` (inclusive); bin `b` is `[lower(b), lower(b + 1))`.
fn lower(b: usize) -> f64 {
    if b <= LINEAR {
        return b as f64;
    }
    let o = (b - LINEAR) / SUB;
    let sub = (b - LINEAR) % SUB;
    let octave = LINEAR_BITS + o as u32;
    ((1u64 << octave) + ((sub as u64) << (octave - SUB_BITS))) as f64
}

/// An approximate miss-ratio curve: reference weights binned by estimated stack
/// distance, cold (infinite-distance) weight, and the number of input references
/// the weights stand for (so that [`Mrc::misses`] is in input references).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mrc {
    bins: Vec<f64>,
    cold: f64,
    /// Sum of all weights, cold included (the denominator of the ratio).
    total: f64,
    /// Input references the curve describes.
    refs: u64,
}

impl Mrc {
    pub fn new() -> Self {
        Self::default()
    }

    /// The exact curve of a histogram (distances ≥ 256 lose their exact position
    /// within a bin of < 0.8 % relative width).
    pub fn from_histogram(h: &Histogram) -> Self {
        let mut m = Mrc::new();
        for (d, &c) in h.counts.iter().enumerate() {
            if c > 0 {
                m.add(d as f64, c as f64);
            }
        }
        m.add_cold(h.cold as f64);
        m.refs = h.total;
        m
    }

    /// Add `weight` references of estimated distance `x`.
    pub fn add(&mut self, x: f64, weight: f64) {
        let b = bin_of(x);
        if b >= self.bins.len() {
            self.bins.resize(b + 1, 0.0);
        }
        self.bins[b] += weight;
        self.total += weight;
    }

    /// Add `weight` first-touch (or never-reused) references.
    pub fn add_cold(&mut self, weight: f64) {
        self.cold += weight;
        self.total += weight;
    }

    /// SHARDS_adj: `delta` references (possibly negative) of distance 0.
    pub fn adjust_first(&mut self, delta: f64) {
        self.add(0.0, delta);
    }

    /// `self + k × other`, bin by bin, for a regression-style adjustment. Bins
    /// past the first are kept ≥ 0 (so the curve stays monotone) and whatever that
    /// clamps, plus `residual`, goes to the first bin; `refs` is `self`'s.
    pub fn plus_scaled(&self, other: &Mrc, k: f64, residual: f64) -> Mrc {
        let n = self.bins.len().max(other.bins.len());
        let mut out = Mrc {
            bins: vec![0.0; n.max(1)],
            cold: (self.cold + k * other.cold).max(0.0),
            total: 0.0,
            refs: self.refs,
        };
        let mut spill = residual + (self.cold + k * other.cold).min(0.0);
        for b in 0..n {
            let w = self.bins.get(b).copied().unwrap_or(0.0)
                + k * other.bins.get(b).copied().unwrap_or(0.0);
            if b > 0 && w < 0.0 {
                spill += w;
            } else {
                out.bins[b] = w;
            }
        }
        out.bins[0] += spill;
        out.total = out.bins.iter().sum::<f64>() + out.cold;
        out
    }

    /// `short` below distance `x` (rounded down to a bin edge) and `long`'s shape
    /// above it, scaled to `short`'s weight there: a curve that is `short`'s up
    /// to `x` and continues it with `long`'s relative decline (monotone when both
    /// are). `refs` is `long`'s.
    pub fn splice(short: &Mrc, long: &Mrc, x: f64) -> Mrc {
        let bx = bin_of(x);
        let below = |m: &Mrc| m.bins.iter().take(bx).sum::<f64>();
        let s_tail = short.total - below(short);
        let l_tail = long.total - below(long);
        let mut out = Mrc {
            bins: short.bins.iter().take(bx).copied().collect(),
            cold: 0.0,
            total: short.total,
            refs: long.refs,
        };
        if l_tail <= 0.0 || s_tail <= 0.0 {
            // Nothing beyond x on one side: keep the short curve whole.
            out.bins = short.bins.clone();
            out.cold = short.cold;
            return out;
        }
        let k = s_tail / l_tail;
        out.bins.resize(bx, 0.0);
        out.bins
            .extend(long.bins.iter().skip(bx).map(|w| w.max(0.0) * k));
        out.cold = long.cold * k;
        out.total = out.bins.iter().sum::<f64>() + out.cold;
        out
    }

    /// Multiply every weight by `f`.
    pub fn scale(&mut self, f: f64) {
        self.bins.iter_mut().for_each(|w| *w *= f);
        self.cold *= f;
        self.total *= f;
    }

    /// Set the number of input references the curve describes.
    pub fn set_refs(&mut self, refs: u64) {
        self.refs = refs;
    }

    pub fn refs(&self) -> u64 {
        self.refs
    }

    /// Total weight (the ratio's denominator).
    pub fn weight(&self) -> f64 {
        self.total
    }

    /// Cold weight.
    pub fn cold(&self) -> f64 {
        self.cold
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bins.capacity() * std::mem::size_of::<f64>()
    }

    /// Weight of references whose estimated distance is below `capacity` (hits);
    /// linear within a log bin.
    fn hits(&self, capacity: u64) -> f64 {
        let c = capacity as f64;
        let cb = bin_of(c);
        let full: f64 = self.bins.iter().take(cb).sum();
        let part = match self.bins.get(cb) {
            Some(&w) if cb >= LINEAR => {
                let (lo, hi) = (lower(cb), lower(cb + 1));
                w * ((c - lo) / (hi - lo))
            }
            _ => 0.0,
        };
        full + part
    }

    /// Estimated misses in input references, `miss_ratio × refs`.
    pub fn misses(&self, capacity: u64) -> f64 {
        self.miss_ratio(capacity) * self.refs as f64
    }
}

impl MissRatioCurve for Mrc {
    /// Clamped to [0, 1]: SHARDS_adj may leave a negative first bin.
    fn miss_ratio(&self, capacity: u64) -> f64 {
        if self.total <= 0.0 {
            return 0.0;
        }
        ((self.total - self.hits(capacity)) / self.total).clamp(0.0, 1.0)
    }
}

/// Miss-ratio curves of a whole reference stream at each page size: how many
/// references would miss a fully associative LRU TLB of each capacity if every
/// page were 4 KB, 2 MB or 1 GB (exact reuse distances per page-size key), or,
/// from a sampled stream ([`PageSizeMrcs::sampled`]), their estimates
/// (`sampled.rs`: 4 KB keys from the page sample, 2 MB keys from the region
/// sample, 1 GB keys coarse).
pub struct PageSizeMrcs {
    engines: [crate::reuse::ReuseEngine; 3],
    hist: [crate::reuse::Histogram; 3],
    sampled: Option<Box<SampledCurves>>,
    /// The 4 KB page of the previous reference (`u64::MAX`: none, or the
    /// sampling changed since). A reference to it again is at distance 0 at
    /// every page size and leaves every engine as it was (no other key came
    /// between), so it is counted without them: a program's references mostly
    /// stay on their predecessor's page (a JVM's stack: 83 % of its
    /// references), and this feed runs on the analysis's serial thread.
    last_page: u64,
}

/// The estimating side of [`PageSizeMrcs`].
struct SampledCurves {
    sampling: crate::sampled::Sampling,
    engines: [crate::sampled::SampledEngine; 3],
    curves: [Mrc; 3],
    /// References of the complete stream, when known (the curves' denominator:
    /// SHARDS_adj).
    input_refs: Option<u64>,
    /// The realized sampling rate of the regions (sampled / all referenced) over
    /// the nominal one, when known: R times it replaces R (a ratio estimator,
    /// docs/model.md §3.1).
    realized: f64,
    /// The region of the previous reference and whether it is sampled under
    /// the current threshold (`u64::MAX`: none): most references stay in their
    /// predecessor's 2 MB region, and the hash is the feed's largest cost.
    last_group: u64,
    last_group_in: bool,
    /// Whether the previous reference's page is in the page sample.
    last_page_in: bool,
}

impl SampledCurves {
    /// The weights of a reference in the page sample and in the region
    /// sample: 1 / R, and 1 / (R × the realized ratio).
    fn weights(&self) -> (f64, f64) {
        let r = self.sampling.rate();
        (1.0 / r, 1.0 / (self.realized * r))
    }
}

impl Default for PageSizeMrcs {
    fn default() -> Self {
        Self::new()
    }
}

impl PageSizeMrcs {
    pub fn new() -> Self {
        PageSizeMrcs {
            engines: Default::default(),
            hist: Default::default(),
            sampled: None,
            last_page: u64::MAX,
        }
    }

    /// Curves estimated from the pages and regions `sampling` keeps;
    /// [`PageSizeMrcs::feed`] drops the other references.
    pub fn sampled(sampling: crate::sampled::Sampling) -> Self {
        use crate::sampled::SampledEngine;
        PageSizeMrcs {
            sampled: Some(Box::new(SampledCurves {
                sampling,
                engines: [0; 3].map(|_| SampledEngine::estimating()),
                curves: Default::default(),
                input_refs: None,
                realized: 1.0,
                last_group: u64::MAX,
                last_group_in: false,
                last_page_in: false,
            })),
            ..Self::new()
        }
    }

    /// One reference of the stream.
    pub fn feed(&mut self, addr: u64) {
        const SHIFTS: [u32; 3] = [12, 21, 30];
        let page = addr >> crate::sampled::PAGE_SHIFT;
        if page == self.last_page {
            self.feed_repeat();
            return;
        }
        self.last_page = page;
        let Some(s) = self.sampled.as_deref_mut() else {
            for (i, shift) in SHIFTS.into_iter().enumerate() {
                let d = self.engines[i].access(addr >> shift);
                self.hist[i].record(d);
            }
            return;
        };
        use crate::sampled::Layer;
        let group = addr >> crate::sampled::REGION_SHIFT;
        let (inv_page, inv_region) = s.weights();
        let in_page = s.sampling.page_sampled(page);
        s.last_page_in = in_page;
        let in_region = if group == s.last_group {
            s.last_group_in
        } else {
            s.last_group = group;
            s.last_group_in = s.sampling.region_sampled(group);
            s.last_group_in
        };
        for (i, shift) in SHIFTS.into_iter().enumerate() {
            let (layer, unit, inv) = match i {
                0 if in_page => (Layer::Page, page, inv_page),
                1 if in_region => (Layer::Region, group, inv_region),
                2 if in_region => (Layer::Coarse, group, inv_region),
                _ => continue,
            };
            let coarse = layer == Layer::Coarse;
            match s.engines[i].access(addr >> shift, layer, unit, inv_page, inv_region) {
                Some(d) => s.curves[i].add(d as f64, inv),
                // A coarse key's first touch is seen once, however many of its
                // references this one stands for (the others reuse it).
                None if coarse => {
                    s.curves[i].add_cold(1.0);
                    s.curves[i].add(0.0, inv - 1.0);
                }
                None => s.curves[i].add_cold(inv),
            }
        }
    }

    /// The previous reference's page again: what `feed` would count, distance 0
    /// at each page size its sampling keeps (the same decisions as for the
    /// previous reference, which was on the same page).
    fn feed_repeat(&mut self) {
        let Some(s) = self.sampled.as_deref_mut() else {
            for h in &mut self.hist {
                h.record(Some(0));
            }
            return;
        };
        let (inv_page, inv_region) = s.weights();
        if s.last_page_in {
            s.curves[0].add(0.0, inv_page);
        }
        if s.last_group_in {
            s.curves[1].add(0.0, inv_region);
            s.curves[2].add(0.0, inv_region);
        }
    }

    /// Fixed-size sampling lowered the threshold to `t`.
    pub fn set_threshold(&mut self, t: u64) {
        self.last_page = u64::MAX;
        if let Some(s) = self.sampled.as_deref_mut() {
            if t > 0 && t < s.sampling.threshold {
                s.sampling.threshold = t;
                s.last_group = u64::MAX;
                let sampling = s.sampling;
                for e in &mut s.engines {
                    e.evict(
                        |p| !sampling.page_sampled(p),
                        |g| !sampling.region_sampled(g),
                    );
                }
            }
        }
    }

    /// The number of references of the complete stream, when known (a sampled
    /// stream's END): the curves' denominator, which adds the difference to the
    /// sample's weight at distance 0 (SHARDS_adj).
    pub fn set_input_refs(&mut self, n: u64) {
        if let Some(s) = self.sampled.as_deref_mut() {
            s.input_refs = Some(n);
        }
    }

    /// The realized rate of the regions (sampled regions referenced / all
    /// regions referenced) over the nominal one, when known
    /// ([`crate::sampled::realized_ratio`]): R times it replaces R in the
    /// references' weights and in the distances to other regions' keys (a ratio
    /// estimator, docs/model.md §3.1).
    pub fn set_realized(&mut self, ratio: f64) {
        self.last_page = u64::MAX;
        if let Some(s) = self.sampled.as_deref_mut() {
            s.realized = crate::sampled::sane_ratio(ratio);
        }
    }

    /// The curve of page size `i` (0: 4 KB, 1: 2 MB, 2: 1 GB).
    pub fn mrc(&self, i: usize) -> Mrc {
        match self.sampled.as_deref() {
            None => Mrc::from_histogram(&self.hist[i]),
            Some(s) => {
                let mut m = s.curves[i].clone();
                let n = s.input_refs.map_or(m.weight(), |n| n as f64);
                m.adjust_first(n - m.weight());
                m.set_refs(n.round() as u64);
                m
            }
        }
    }

    /// `(page size name, [(entries, miss ratio)])` over `tlb_capacities()`.
    pub fn curves(&self) -> Vec<(&'static str, Vec<(u64, f64)>)> {
        ["4k", "2m", "1g"]
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let pts: Vec<(u64, f64)> = match self.sampled {
                    None => tlb_capacities()
                        .into_iter()
                        .map(|c| (c, self.hist[i].miss_ratio(c)))
                        .collect(),
                    Some(_) => {
                        let m = self.mrc(i);
                        tlb_capacities()
                            .into_iter()
                            .map(|c| (c, m.miss_ratio(c)))
                            .collect()
                    }
                };
                (name, pts)
            })
            .collect()
    }
}

/// TLB-relevant capacities: every power of two from 16 to 65 536 and the
/// midpoints (×1.5) between them — 25 sizes.
pub fn tlb_capacities() -> Vec<u64> {
    let mut v = Vec::new();
    let mut c = 16u64;
    while c <= 65536 {
        v.push(c);
        if c < 65536 {
            v.push(c + c / 2);
        }
        c *= 2;
    }
    v
}

/// Mean absolute error of `approx` against `exact` over `capacities`.
pub fn mae(exact: &impl MissRatioCurve, approx: &impl MissRatioCurve, capacities: &[u64]) -> f64 {
    if capacities.is_empty() {
        return 0.0;
    }
    capacities
        .iter()
        .map(|&c| (exact.miss_ratio(c) - approx.miss_ratio(c)).abs())
        .sum::<f64>()
        / capacities.len() as f64
}

/// Deterministic synthetic traces of page keys (pure functions of their
/// arguments), shared by the tests, the benches and `hugetune bench model`.
pub mod synth {
    pub use crate::stats::Rng;

    /// Base page number of the synthetic traces (a heap-like 4 KB page number).
    pub const BASE: u64 = 0x5555_5000_0000 >> 12;

    /// `n` references uniformly random over `pages` contiguous pages.
    pub fn uniform(n: usize, pages: u64, seed: u64) -> Vec<u64> {
        let mut r = Rng(seed);
        (0..n).map(|_| BASE + r.below(pages)).collect()
    }

    /// `n` references with Zipf popularity of exponent `s` (P(rank r) ∝ r^-s,
    /// drawn by inverting the continuous power law) over `pages` contiguous pages;
    /// ranks are scattered over the pages by an odd multiplier so hot pages are
    /// not neighbours.
    pub fn zipf(n: usize, pages: u64, s: f64, seed: u64) -> Vec<u64> {
        let mut r = Rng(seed);
        let span = pages.next_power_of_two();
        let top = (pages + 1) as f64;
        let inv = |u: f64| -> f64 {
            if (s - 1.0).abs() < 1e-9 {
                (u * top.ln()).exp()
            } else {
                let a = 1.0 - s;
                (1.0 + u * (top.powf(a) - 1.0)).powf(1.0 / a)
            }
        };
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let rank = (inv(r.unit()) as u64).saturating_sub(1);
            if rank >= pages {
                continue;
            }
            // A bijection on 0..span; ranks map to distinct pages.
            let p = rank.wrapping_mul(0x9e37_79b9_7f4a_7c15 | 1) & (span - 1);
            out.push(BASE + p);
        }
        out
    }

    /// Loops: `n` references sweeping `pages` contiguous pages in order, `per_page`
    /// consecutive references to each (a strided walk over an array).
    pub fn sweep(n: usize, pages: u64, per_page: u64) -> Vec<u64> {
        (0..n as u64)
            .map(|i| BASE + (i / per_page) % pages)
            .collect()
    }

    /// Three interleaved loops: each visit goes to the next page of one of three
    /// cyclic sweeps (1 000, 20 000 and 300 000 contiguous pages, chosen with
    /// probabilities 0.5 / 0.3 / 0.2) and makes `per_page` consecutive references
    /// to it, so stack distances cluster near 2 000, 34 000 and 320 000.
    pub fn loops(n: usize, per_page: u64, seed: u64) -> Vec<u64> {
        let mut r = Rng(seed);
        let sizes = [1_000u64, 20_000, 300_000];
        let bases = [BASE, BASE + 1_000, BASE + 21_000];
        let mut next = [0u64; 3];
        let mut out = Vec::with_capacity(n + per_page as usize);
        while out.len() < n {
            let u = r.below(10);
            let l = if u < 5 {
                0
            } else if u < 8 {
                1
            } else {
                2
            };
            let p = bases[l] + next[l];
            next[l] = (next[l] + 1) % sizes[l];
            for _ in 0..per_page {
                out.push(p);
            }
        }
        out.truncate(n);
        out
    }

    /// The loop of REF-model §1.2: 40 sweeps over 300 pages, 8 consecutive
    /// references to each page, and after each reference, with probability 1/9,
    /// one to a random page of 20 hot pages.
    pub fn ref_loop(seed: u64) -> Vec<u64> {
        let mut r = Rng(seed);
        let mut out = Vec::new();
        for _ in 0..40 {
            for p in 0..300u64 {
                for _ in 0..8 {
                    out.push(BASE + p);
                    if r.below(9) == 0 {
                        out.push(BASE + 1000 + r.below(20));
                    }
                }
            }
        }
        out
    }
}

/// Accuracy of the approximate engines against the exact one, as reported by
/// the benches and `hugetune bench model` (pure functions of a trace).
pub mod eval {
    use super::{mae, synth, tlb_capacities};
    use crate::reuse::{Histogram, ReuseEngine};
    use crate::shards::{Sampler, Shards, MODULUS};
    use crate::statstack;
    use serde::{Deserialize, Serialize};

    /// The exact histogram of a trace.
    pub fn exact_histogram(trace: &[u64]) -> Histogram {
        let mut e = ReuseEngine::new();
        let mut h = Histogram::default();
        e.access_batch(trace, |d| h.record(d));
        h
    }

    /// Distinct keys of a histogram's trace (each has one cold reference).
    pub fn distinct(h: &Histogram) -> u64 {
        h.cold
    }

    /// MAE over [`tlb_capacities`] of SHARDS against exact, in both modes and
    /// with each adjustment.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct ShardsFigures {
        pub distinct: u64,
        pub s_max: usize,
        /// Fixed-size: the final rate, the keys sampled, heap bytes.
        pub rate: f64,
        pub sampled_keys: usize,
        pub bytes: usize,
        /// [`Shards::mrc`]: short distances from time samples, SHARDS beyond.
        pub fixed_size: f64,
        /// SHARDS alone ([`Shards::mrc_shards`], count-weighted adjustment).
        pub fixed_size_shards: f64,
        pub fixed_size_adj: f64,
        pub fixed_size_unadjusted: f64,
        /// Fixed-rate at s_max / distinct (the same expected sample).
        pub fixed_rate: f64,
        pub fixed_rate_shards: f64,
        pub fixed_rate_adj: f64,
        pub fixed_rate_unadjusted: f64,
    }

    pub fn shards_figures(
        trace: &[u64],
        exact: &Histogram,
        s_max: usize,
        region_shift: u32,
        seed: u64,
    ) -> ShardsFigures {
        let caps = tlb_capacities();
        let mut fs = Shards::fixed_size(Sampler::new(seed, MODULUS, region_shift), s_max);
        fs.process(trace);
        let rate = (s_max as f64 / distinct(exact).max(1) as f64).min(1.0);
        let mut fr = Shards::with_rate(seed, region_shift, rate);
        fr.process(trace);
        ShardsFigures {
            distinct: distinct(exact),
            s_max,
            rate: fs.rate(),
            sampled_keys: fs.sampled_keys(),
            bytes: fs.heap_bytes(),
            fixed_size: mae(exact, &fs.mrc(), &caps),
            fixed_size_shards: mae(exact, &fs.mrc_shards(), &caps),
            fixed_size_adj: mae(exact, &fs.mrc_adj(), &caps),
            fixed_size_unadjusted: mae(exact, &fs.mrc_unadjusted(), &caps),
            fixed_rate: mae(exact, &fr.mrc(), &caps),
            fixed_rate_shards: mae(exact, &fr.mrc_shards(), &caps),
            fixed_rate_adj: mae(exact, &fr.mrc_adj(), &caps),
            fixed_rate_unadjusted: mae(exact, &fr.mrc_unadjusted(), &caps),
        }
    }

    /// MAE over [`tlb_capacities`] of StatStack on the trace time-sampled every
    /// `period` references.
    pub fn statstack_mae(trace: &[u64], exact: &Histogram, period: u64, seed: u64) -> f64 {
        mae(
            exact,
            &statstack::time_sampled_mrc(trace, period, seed),
            &tlb_capacities(),
        )
    }

    /// The synthetic trace shapes, `n` references each: uniform and Zipf
    /// (s = 0.6, about REF-model's u^2.5 skew, and s = 1) over 1 M pages, and
    /// three interleaved loops over 321 000 pages with 8 references per page.
    pub fn shapes(n: usize) -> Vec<(&'static str, Vec<u64>)> {
        vec![
            ("uniform, 1 M pages", synth::uniform(n, 1 << 20, 1)),
            ("zipf s=0.6, 1 M pages", synth::zipf(n, 1 << 20, 0.6, 2)),
            ("zipf s=1, 1 M pages", synth::zipf(n, 1 << 20, 1.0, 3)),
            ("loops, 321 K pages", synth::loops(n, 8, 4)),
        ]
    }

    /// The sampling periods StatStack is reported at.
    pub const PERIODS: [u64; 3] = [97, 1_000, 10_000];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_partition_the_line() {
        for x in [
            0.0,
            1.0,
            255.0,
            255.9,
            256.0,
            257.0,
            300.5,
            1e6,
            123456789.0,
        ] {
            let b = bin_of(x);
            assert!(lower(b) <= x && x < lower(b + 1), "{x}: bin {b}");
        }
        for b in 0..3000 {
            assert_eq!(bin_of(lower(b)), b);
            assert!(lower(b + 1) > lower(b));
        }
        // Relative width under 1 % above the linear part.
        let b = bin_of(1e9);
        assert!((lower(b + 1) - lower(b)) / lower(b) < 0.008);
    }

    #[test]
    fn histogram_curve_matches_histogram() {
        let mut h = Histogram::default();
        for d in [
            None,
            Some(0),
            Some(3),
            Some(10),
            None,
            Some(300),
            Some(70000),
        ] {
            h.record(d);
        }
        let m = Mrc::from_histogram(&h);
        // Exact below 256 and at the edges of log bins ([300, 302) here) ...
        for c in [0, 1, 4, 11, 64, 256, 300, 302, 1 << 20] {
            assert_eq!(m.miss_ratio(c), h.miss_ratio(c), "capacity {c}");
        }
        // ... linear inside them.
        assert!((m.miss_ratio(301) - (h.miss_ratio(300) + h.miss_ratio(302)) / 2.0).abs() < 1e-12);
        assert_eq!(m.misses(11), 4.0);
        assert_eq!(mae(&h, &m, &tlb_capacities()), 0.0);
    }

    #[test]
    fn adjustment_and_scaling() {
        let mut m = Mrc::new();
        m.add(5.0, 10.0);
        m.add_cold(10.0);
        m.set_refs(40);
        assert_eq!(m.miss_ratio(6), 0.5);
        assert_eq!(m.misses(6), 20.0);
        // A negative first bin: fewer hits; past 1 the ratio is clamped.
        m.adjust_first(-5.0);
        assert_eq!(m.weight(), 15.0);
        assert_eq!(m.miss_ratio(6), 10.0 / 15.0);
        assert_eq!(m.miss_ratio(1), 1.0);
        m.adjust_first(10.0);
        assert_eq!(m.miss_ratio(1), 20.0 / 25.0);
        assert_eq!(m.miss_ratio(6), 10.0 / 25.0);
        m.scale(0.5);
        assert_eq!(m.miss_ratio(6), 10.0 / 25.0);
        assert_eq!(m.cold(), 5.0);
    }

    #[test]
    fn splice_keeps_the_short_curve_and_the_long_shape() {
        let mut short = Mrc::new();
        short.add(1.0, 50.0);
        short.add(300.0, 30.0);
        short.add_cold(20.0);
        let mut long = Mrc::new();
        long.add(0.0, 10.0);
        long.add(1000.0, 10.0);
        long.add(5000.0, 10.0);
        long.add_cold(10.0);
        long.set_refs(7);
        let m = Mrc::splice(&short, &long, 256.0);
        // Below 256: the short curve.
        for c in [0, 1, 2, 256] {
            assert!(
                (m.miss_ratio(c) - short.miss_ratio(c)).abs() < 1e-12,
                "capacity {c}"
            );
        }
        // Above: 50 % beyond 256 as in short, declining as long does (3 thirds).
        assert!((m.miss_ratio(2000) - 0.5 * 2.0 / 3.0).abs() < 1e-12);
        assert!((m.miss_ratio(10_000) - 0.5 / 3.0).abs() < 1e-12);
        assert_eq!(m.refs(), 7);
    }

    #[test]
    fn capacities_and_mae() {
        let c = tlb_capacities();
        assert_eq!(c.len(), 25);
        assert_eq!((c[0], c[1], c[24]), (16, 24, 65536));
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        for i in 0..100 {
            a.record(Some(i));
            b.record(Some(i + 20));
        }
        // At 16 both miss 84 % vs 100 %.
        assert!((mae(&a, &b, &[16]) - 0.16).abs() < 1e-12);
        assert_eq!(mae(&a, &a, &c), 0.0);
    }

    #[test]
    fn synthetic_traces_have_their_shape() {
        let u = synth::uniform(100_000, 1000, 1);
        assert!(u
            .iter()
            .all(|&p| (synth::BASE..synth::BASE + 1000).contains(&p)));
        let z = synth::zipf(200_000, 1 << 16, 1.0, 2);
        let hot = z.iter().filter(|&&p| p == synth::BASE).count() as f64 / z.len() as f64;
        // P(rank 0) = ln 2 / ln(65537) ≈ 0.062.
        assert!((hot - 0.062).abs() < 0.005, "{hot}");
        let s = synth::sweep(10, 3, 2);
        assert_eq!(
            s[..7].iter().map(|p| p - synth::BASE).collect::<Vec<_>>(),
            vec![0, 0, 1, 1, 2, 2, 0]
        );
        let l = synth::ref_loop(3);
        assert!(l.len() > 40 * 2400 && l.len() < 40 * 2800, "{}", l.len());
    }

    /// Counting a reference to the previous one's page without the engines
    /// gives the very curves the engines give, complete and sampled (fixed
    /// rate, and a threshold falling midway as fixed-size sampling lowers it).
    #[test]
    fn repeats_counted_without_the_engines_change_no_curve() {
        use crate::sampled::Sampling;
        let mut r = crate::stats::Rng(3);
        // Runs of 1-8 references to one page, pages over 64 GiB and within a
        // hot 8 MiB, a few 1 GB groups.
        let mut refs = Vec::new();
        while refs.len() < 300_000 {
            let page = if r.below(2) == 0 {
                r.below(1 << 24)
            } else {
                (1 << 20) + r.below(2048)
            };
            for _ in 0..1 + r.below(8) {
                refs.push((page << 12) + r.below(4096));
            }
        }
        let makers: [fn() -> super::PageSizeMrcs; 3] = [
            super::PageSizeMrcs::new,
            || super::PageSizeMrcs::sampled(Sampling::with_rate(9, 0.1)),
            || super::PageSizeMrcs::sampled(Sampling::with_rate(9, 0.3)),
        ];
        for (k, make) in makers.into_iter().enumerate() {
            let mut fast = make();
            let mut slow = make();
            for (m, every) in [(&mut fast, false), (&mut slow, true)] {
                m.set_realized(0.9);
                for (i, &a) in refs.iter().enumerate() {
                    if k == 2 && i == refs.len() / 2 {
                        m.set_threshold(Sampling::with_rate(9, 0.05).threshold);
                    }
                    m.feed(a);
                    // Forgetting the page sends every repeat through the engines.
                    if every {
                        m.last_page = u64::MAX;
                    }
                }
                m.set_input_refs(refs.len() as u64);
            }
            assert_eq!(fast.curves(), slow.curves(), "maker {k}");
            for i in 0..3 {
                let (f, s) = (fast.mrc(i), slow.mrc(i));
                assert_eq!(f.cold(), s.cold(), "maker {k}, size {i}");
                assert_eq!(f.weight(), s.weight(), "maker {k}, size {i}");
                // Below the curves' smallest capacity too (distance 0 is not 1).
                for cap in [1, 2, 3, 8] {
                    assert_eq!(f.misses(cap), s.misses(cap), "maker {k}, size {i}, {cap}");
                }
            }
        }
    }

    #[test]
    fn page_size_curves_of_a_repeated_sweep() {
        // 8 MiB swept twice at 4 KB steps: 2048 small pages, 4 huge ones, 1 gigantic.
        let mut m = super::PageSizeMrcs::new();
        for _ in 0..2 {
            for i in 0..2048u64 {
                m.feed(0x4000_0000 + i * 4096);
            }
        }
        let c = m.curves();
        let at = |k: usize, cap: u64| c[k].1.iter().find(|p| p.0 == cap).unwrap().1;
        assert_eq!(c[0].0, "4k");
        // 4 KB: every reference misses below 2048 entries, only the cold half at it.
        assert_eq!(at(0, 1536), 1.0);
        assert_eq!(at(0, 2048), 0.5);
        // 2 MB: 4 pages fit in 16 entries; misses are the 4 first touches.
        assert_eq!(at(1, 16), 4.0 / 4096.0);
        assert_eq!(at(2, 16), 1.0 / 4096.0);
        assert!(c
            .iter()
            .all(|(_, v)| v.len() == super::tlb_capacities().len()));
    }
}
