//! SHARDS: spatially hashed sampling of a reference stream for approximate LRU
//! miss-ratio curves in constant memory (Waldspurger, Park, Garthwaite, Ahmad,
//! FAST 2015; REF-model §5.1).
//!
//! A key is in the sample when `hash(key) mod P < T`; every reference to a
//! sampled key goes through the exact engine, and its stack distance among the
//! sampled keys, divided by the rate R = T/P, estimates its true distance.
//! - Fixed-rate: T is constant.
//! - Fixed-size: at most `s_max` sampled keys. When one more arrives, T falls to
//!   the largest hash in the sample and the keys at or above it leave. The paper
//!   multiplies the counts so far by T_new/T_old; here every sampled reference is
//!   weighted 1/R at its time instead (Horvitz-Thompson), which gives the same
//!   curve (the paper's weights are these times the final R) without touching
//!   the histogram on every eviction.
//! - SHARDS_adj ([`Shards::mrc_adj`]): the sample of a skewed trace may hold more
//!   or fewer hot keys than its share; the difference Δ between the expected
//!   number of sampled references (R × all references) and the number seen is
//!   added at distance 0. (Weights are in input references, so Δ = N − Σ 1/R.)
//! - [`Shards::mrc_shards`] spreads the same Δ by a regression on the keys' reference
//!   counts instead (a GREG calibration to the known total): each reference's
//!   share of Δ is proportional to its key's reference count, Δ × n_k / Σ n_k².
//!   When Δ comes from a hot key that is over- or under-represented, its
//!   references (short distances, so hits) absorb it, as with SHARDS_adj; when
//!   it comes from the number of sampled keys (a uniform trace, where SHARDS_adj
//!   shifts the whole curve by Δ/N_s, about 1/√s_max), all keys absorb it and the
//!   curve keeps its shape (the ratio estimate). The per-reference weight uses
//!   the key's running count j: a reference's future references are as many as
//!   its past ones on average, so n_k ≈ 2j − 1 for a re-reference; a first
//!   reference gets its key's final count.
//!
//! **Short distances from time samples** ([`Shards::mrc`]). At TLB sizes SHARDS
//! is weak where it matters most: a distance below 1/R (about 128 pages at
//! 8 K of 1 M pages) is seen as 0 or 1 sampled key, and the few hot pages that
//! carry much of a skewed trace's short reuses are either in the sample or not
//! (with Zipf s = 1 over 1 M pages, the 100 hottest carry a third of the
//! references and the sample holds about one of them). Since the filter sees
//! every input reference anyway, it also time-samples them (one in 128,
//! jittered) with watchpoints that give up after 65 536 references
//! ([`HorizonSampler`]), and the curve below X = min(64/R, half the expected
//! distance at that horizon) is StatStack's (`statstack`), continued above X
//! by SHARDS's shape scaled to StatStack's weight beyond X ([`Mrc::splice`]).
//! Without enough time samples (short traces), or at R = 1, or for a stream
//! someone else filtered, the curve is SHARDS's alone ([`Shards::mrc_shards`]).
//!
//! **Region shift.** The hash is of `key >> region_shift`, so that all keys of a
//! region are sampled together: with 4 KB page numbers and `region_shift = 9`,
//! a 4 KB page is sampled exactly when its 2 MB region is, and the 2 MB class
//! (keys `addr >> 21`, `region_shift = 0`) with the same seed, modulus and
//! threshold samples that same region: samples nest across page sizes
//! (REF-model §1.3). Every key is in the sample with probability R, but the keys
//! of a reference's own region are in it for sure, so d_s / R overestimates a
//! 4 KB distance by up to 511 (1/R − 1), and whole regions enter or leave at
//! once (`bench model` reports it, "8K, 2 MB regions"). The analysis of sampled
//! streams does not use this engine: `sampled.rs` samples pages and regions
//! separately and corrects for the own region.
//!
//! **Hash.** MurmurHash3's fmix64 of `(key >> region_shift) ^ seed`, reduced mod
//! the modulus: with `region_shift = 0` this is the decision of the QEMU plugin
//! and of `hugetune_format::refstream::sampled` (same function, same seed and
//! modulus), so a stream the plugin sampled can be fed to
//! [`Shards::process_prefiltered`]. The three copies must agree; a test in the
//! `hugetune` crate checks the model's against the capture crate's.

use crate::mrc::Mrc;
use crate::reuse::ReuseEngine;
use crate::statstack::HorizonSampler;
use std::collections::BinaryHeap;

/// The default modulus P of the sampling hash.
pub const MODULUS: u64 = 1 << 24;

/// MurmurHash3's 64-bit finalizer.
#[inline(always)]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The sampling hash: which keys a threshold admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampler {
    pub seed: u64,
    pub modulus: u64,
    pub region_shift: u32,
    /// `modulus - 1` when the modulus is a power of two (a mask instead of a
    /// division on the hot path), else 0.
    mask: u64,
}

impl Sampler {
    /// `modulus > 0`; `region_shift < 64`.
    pub fn new(seed: u64, modulus: u64, region_shift: u32) -> Self {
        assert!(modulus > 0 && region_shift < 64);
        let mask = if modulus.is_power_of_two() {
            modulus - 1
        } else {
            0
        };
        Sampler {
            seed,
            modulus,
            region_shift,
            mask,
        }
    }

    /// `hash(key) mod P`: the key is sampled at threshold T when this is < T.
    #[inline(always)]
    pub fn hash(&self, key: u64) -> u64 {
        let h = fmix64((key >> self.region_shift) ^ self.seed);
        if self.mask != 0 || self.modulus == 1 {
            h & self.mask
        } else {
            h % self.modulus
        }
    }

    /// Whether `key` is in the sample at `threshold`.
    #[inline(always)]
    pub fn sampled(&self, key: u64, threshold: u64) -> bool {
        self.hash(key) < threshold
    }
}

/// Fixed-rate or fixed-size operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    FixedRate,
    /// At most this many sampled keys.
    FixedSize(usize),
}

/// Sampled keys buffered between the filter and the exact engine.
const BUF: usize = 4096;
/// Time sampling for short distances: a watch every 128 input references on
/// average, given up after 65 536.
pub const SHORT_PERIOD: u64 = 128;
pub const SHORT_HORIZON: u64 = 1 << 16;
/// Short distances come from the time samples up to this many SHARDS
/// granules (1/R) ...
const SPLICE_GRANULES: f64 = 64.0;
/// ... and at most this fraction of the expected distance at the horizon ...
const SPLICE_HORIZON_SHARE: f64 = 0.5;
/// ... once there are this many time samples (below, SHARDS alone is better).
const SPLICE_MIN_SAMPLES: f64 = 4096.0;

/// A SHARDS engine for one page-size class.
#[derive(Debug, Clone)]
pub struct Shards {
    sampler: Sampler,
    mode: Mode,
    threshold: u64,
    engine: ReuseEngine,
    /// Fixed-size: (hash, key) of every sampled key, largest hash on top.
    heap: BinaryHeap<(u64, u64)>,
    /// Weights by scaled distance; unadjusted.
    curve: Mrc,
    /// The same references weighted by their key's (estimated) reference count.
    by_count: Mrc,
    /// Input references (all of them, sampled or not).
    refs: u64,
    /// Sampled references, weighted like the curve (each by 1/R at its time).
    sampled_refs: f64,
    /// Short distances from time samples of the input (module doc).
    short: Option<HorizonSampler>,
    /// Keys and hashes of filtered references awaiting the engine.
    keys: Vec<u64>,
    hashes: Vec<u64>,
}

impl Shards {
    /// Fixed-rate SHARDS at rate `threshold / sampler.modulus`.
    pub fn fixed_rate(sampler: Sampler, threshold: u64) -> Self {
        assert!(threshold > 0 && threshold <= sampler.modulus);
        Self::with(sampler, Mode::FixedRate, threshold)
    }

    /// Fixed-rate SHARDS at rate `rate` (0 < rate ≤ 1) with modulus 2^24.
    pub fn with_rate(seed: u64, region_shift: u32, rate: f64) -> Self {
        let t = ((rate * MODULUS as f64).round() as u64).clamp(1, MODULUS);
        Self::fixed_rate(Sampler::new(seed, MODULUS, region_shift), t)
    }

    /// Fixed-size SHARDS keeping at most `s_max` sampled keys, starting at rate 1.
    pub fn fixed_size(sampler: Sampler, s_max: usize) -> Self {
        assert!(s_max > 0);
        Self::with(sampler, Mode::FixedSize(s_max), sampler.modulus)
    }

    fn with(sampler: Sampler, mode: Mode, threshold: u64) -> Self {
        Shards {
            sampler,
            mode,
            threshold,
            engine: ReuseEngine::new(),
            heap: match mode {
                Mode::FixedSize(s_max) => BinaryHeap::with_capacity(s_max + 1),
                Mode::FixedRate => BinaryHeap::new(),
            },
            curve: Mrc::new(),
            by_count: Mrc::new(),
            short: Some(HorizonSampler::new(
                SHORT_PERIOD,
                SHORT_HORIZON,
                sampler.seed,
            )),
            refs: 0,
            sampled_refs: 0.0,
            keys: Vec::with_capacity(BUF),
            hashes: Vec::with_capacity(BUF),
        }
    }

    /// Pure SHARDS: no time samples for short distances.
    pub fn without_short_range(mut self) -> Self {
        self.short = None;
        self
    }

    /// Whether short distances come from time samples.
    pub fn has_short_range(&self) -> bool {
        self.short.is_some()
    }

    pub fn sampler(&self) -> Sampler {
        self.sampler
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The current threshold T.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The current rate R = T / P.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / self.sampler.modulus as f64
    }

    /// Input references so far.
    pub fn refs(&self) -> u64 {
        self.refs
    }

    /// Keys in the sample now.
    pub fn sampled_keys(&self) -> usize {
        self.engine.distinct()
    }

    /// Heap bytes held: exact engine, sample heap, curves, time samples, buffers.
    pub fn heap_bytes(&self) -> usize {
        self.engine.heap_bytes()
            + self.heap.capacity() * std::mem::size_of::<(u64, u64)>()
            + self.curve.heap_bytes()
            + self.by_count.heap_bytes()
            + (self.keys.capacity() + self.hashes.capacity()) * 8
            + self.short.as_ref().map_or(0, |s| s.heap_bytes())
    }

    /// Feed every input reference: hash and compare each key, then the sampled
    /// ones through the exact engine.
    pub fn process(&mut self, keys: &[u64]) {
        self.refs += keys.len() as u64;
        for chunk in keys.chunks(BUF) {
            self.filter(chunk);
            if let Some(short) = self.short.as_mut() {
                short.process(chunk);
            }
            self.drain();
        }
    }

    /// One input reference.
    pub fn access(&mut self, key: u64) {
        self.process(std::slice::from_ref(&key));
    }

    /// Feed a stream a sampling source already filtered (e.g. the QEMU plugin at
    /// a threshold ≥ this engine's, same seed and modulus): `keys` are its kept
    /// references, `input_refs` the references it saw in that span. Keys above
    /// this engine's threshold are dropped.
    /// Such a stream lacks the other references, so there are no time samples
    /// for short distances: this turns them off.
    pub fn process_prefiltered(&mut self, keys: &[u64], input_refs: u64) {
        self.short = None;
        self.refs += input_refs;
        for chunk in keys.chunks(BUF) {
            self.keys.clear();
            self.hashes.clear();
            for &k in chunk {
                let h = self.sampler.hash(k);
                if h < self.threshold {
                    self.keys.push(k);
                    self.hashes.push(h);
                }
            }
            self.drain();
        }
    }

    /// Branch-free: every key is written to the buffers, and the length advances
    /// only for sampled ones, so the loop has no unpredictable branch.
    #[inline(always)]
    fn filter(&mut self, keys: &[u64]) {
        let s = self.sampler;
        let t = self.threshold;
        self.keys.clear();
        self.hashes.clear();
        let ks = &mut self.keys.spare_capacity_mut()[..keys.len()];
        let hs = &mut self.hashes.spare_capacity_mut()[..keys.len()];
        let mut n = 0usize;
        for &k in keys {
            let h = s.hash(k);
            ks[n].write(k);
            hs[n].write(h);
            // n ≤ the index of k, so the next write stays in bounds.
            n += (h < t) as usize;
        }
        // SAFETY: entries 0..n were written above.
        unsafe {
            self.keys.set_len(n);
            self.hashes.set_len(n);
        }
    }

    fn drain(&mut self) {
        if self.mode == Mode::FixedRate {
            let inv = 1.0 / self.rate();
            for &k in &self.keys {
                let (d, j) = self.engine.access_counted(k);
                Self::record(&mut self.curve, &mut self.by_count, d, j, inv, inv);
                self.sampled_refs += inv;
            }
        } else {
            for i in 0..self.keys.len() {
                self.one_fixed_size(self.keys[i], self.hashes[i]);
            }
        }
    }

    fn one_fixed_size(&mut self, key: u64, h: u64) {
        let Mode::FixedSize(s_max) = self.mode else {
            unreachable!()
        };
        // The threshold may have fallen since the key passed the filter.
        if h >= self.threshold {
            return;
        }
        match self.engine.access_counted(key) {
            (Some(d), j) => {
                let inv = 1.0 / self.rate();
                Self::record(&mut self.curve, &mut self.by_count, Some(d), j, inv, inv);
                self.sampled_refs += inv;
            }
            (None, _) => {
                self.heap.push((h, key));
                if self.heap.len() > s_max {
                    self.lower_threshold();
                    if h >= self.threshold {
                        // Its own hash was the largest: it left with the others.
                        return;
                    }
                }
                let inv = 1.0 / self.rate();
                self.curve.add_cold(inv);
                self.sampled_refs += inv;
            }
        }
    }

    /// One sampled reference: distance `d` among sampled keys (cold if `None`),
    /// the `j`-th access of its key. First references go to `by_count` at the end
    /// (their weight is the key's final count).
    #[inline(always)]
    fn record(curve: &mut Mrc, by_count: &mut Mrc, d: Option<u64>, j: u32, inv: f64, w: f64) {
        match d {
            None => curve.add_cold(w),
            Some(d) => {
                let x = d as f64 * inv;
                curve.add(x, w);
                by_count.add(x, w * (2.0 * j as f64 - 1.0));
            }
        }
    }

    /// T falls to the largest sampled hash; keys at or above it leave.
    fn lower_threshold(&mut self) {
        let Some(&(t, _)) = self.heap.peek() else {
            return;
        };
        while let Some(&(h, k)) = self.heap.peek() {
            if h < t {
                break;
            }
            self.heap.pop();
            self.engine.remove(k);
        }
        self.threshold = t;
    }

    /// The miss-ratio curve: the adjusted SHARDS curve ([`Shards::mrc_shards`]),
    /// its short distances from the time samples when there are any (module
    /// doc); `misses` are in input references.
    pub fn mrc(&self) -> Mrc {
        let long = self.mrc_shards();
        let Some(short) = self.short.as_ref() else {
            return long;
        };
        let times = short.times();
        if self.rate() >= 1.0 || times.samples() < SPLICE_MIN_SAMPLES {
            return long;
        }
        let x = (SPLICE_GRANULES / self.rate())
            .min(SPLICE_HORIZON_SHARE * times.expected_distance(short.horizon()));
        if x < 1.0 {
            return long;
        }
        Mrc::splice(&times.mrc(self.refs), &long, x)
    }

    /// The SHARDS curve alone, adjusted to the expected number of sampled
    /// references by the count-weighted regression (module doc).
    pub fn mrc_shards(&self) -> Mrc {
        let base = self.mrc_unadjusted();
        let delta = self.refs as f64 - self.sampled_refs;
        let mut by_count = self.by_count.clone();
        // First references: one per key, each weighing its key's count, so
        // together all the sampled references.
        by_count.add_cold(self.sampled_refs);
        let sum_sq = by_count.weight();
        if sum_sq <= 0.0 || delta == 0.0 {
            return base;
        }
        let k = delta / sum_sq;
        base.plus_scaled(&by_count, k, 0.0)
    }

    /// The miss-ratio curve with SHARDS_adj (Δ at distance 0).
    pub fn mrc_adj(&self) -> Mrc {
        let mut m = self.mrc_unadjusted();
        m.adjust_first(self.refs as f64 - self.sampled_refs);
        m
    }

    /// The curve without SHARDS_adj.
    pub fn mrc_unadjusted(&self) -> Mrc {
        let mut m = self.curve.clone();
        m.set_refs(self.refs);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mrc::{synth, MissRatioCurve};
    use crate::reuse::Histogram;

    #[test]
    fn fmix64_is_murmur3() {
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
    }

    #[test]
    fn hash_is_the_plugins_decision() {
        // fmix64(page ^ seed) % modulus < threshold, also for a modulus that is
        // not a power of two.
        for m in [1u64 << 24, 1_000_003, 1] {
            let s = Sampler::new(7, m, 0);
            for p in 0..10_000u64 {
                assert_eq!(s.hash(p), fmix64(p ^ 7) % m);
                assert_eq!(s.sampled(p, m / 3), fmix64(p ^ 7) % m < m / 3);
            }
        }
    }

    #[test]
    fn region_sampling_nests_across_page_sizes() {
        let s4k = Sampler::new(99, MODULUS, 9);
        let s2m = Sampler::new(99, MODULUS, 0);
        let t = MODULUS / 64;
        let mut hits = 0;
        for page in (0..1u64 << 20).step_by(37) {
            let addr = page << 12;
            let a = s4k.sampled(addr >> 12, t);
            assert_eq!(a, s2m.sampled(addr >> 21, t), "page {page:#x}");
            // Every page of a sampled region is sampled.
            assert_eq!(a, s4k.sampled((addr >> 21) << 9, t));
            hits += a as usize;
        }
        assert!(hits > 0);
    }

    fn exact(trace: &[u64]) -> Histogram {
        let mut e = ReuseEngine::new();
        let mut h = Histogram::default();
        for &k in trace {
            h.record(e.access(k));
        }
        h
    }

    #[test]
    fn rate_one_is_exact() {
        let t = synth::zipf(50_000, 3000, 1.0, 5);
        let h = exact(&t);
        let mut s = Shards::fixed_rate(Sampler::new(1, MODULUS, 0), MODULUS);
        s.process(&t);
        let m = s.mrc();
        for c in [0, 1, 2, 10, 100, 255, 1000, 5000] {
            assert_eq!(m.miss_ratio(c), h.miss_ratio(c), "capacity {c}");
        }
        assert_eq!(m.misses(10), h.misses(10) as f64);
    }

    #[test]
    fn adjustment_adds_the_missing_sampled_references_at_distance_zero() {
        // One hot key (sampled or not) and a cold sweep.
        let s = Sampler::new(3, MODULUS, 0);
        let t = MODULUS / 16;
        let hot = (0..).find(|&k| !s.sampled(k, t)).unwrap();
        let mut trace = Vec::new();
        for k in 1000..50_000u64 {
            trace.push(k);
            trace.push(hot);
        }
        let mut sh = Shards::fixed_rate(s, t);
        sh.process(&trace);
        let raw = sh.mrc_unadjusted();
        let adj = sh.mrc_adj();
        // Unadjusted: only the sweep is seen, all cold: miss ratio 1.
        assert_eq!(raw.miss_ratio(1), 1.0);
        // Adjusted: weights are input references (1/R each), so the adjustment
        // is N minus the weight seen; about half of all references hit at 0.
        let want = trace.len() as f64 - raw.weight();
        assert!((adj.weight() - raw.weight() - want).abs() < 1e-6);
        assert!(
            (adj.miss_ratio(1) - 0.5).abs() < 0.02,
            "{}",
            adj.miss_ratio(1)
        );
        assert_eq!(adj.miss_ratio(0), 1.0);
    }

    #[test]
    fn time_samples_fix_short_distances_of_a_skewed_trace() {
        // Zipf s = 1: a few hot pages carry much of the traffic, so 2 000 sampled
        // pages of 200 000 hold too many or too few of them and the SHARDS
        // curve is off at TLB sizes; time samples are not.
        let t = synth::zipf(3_000_000, 200_000, 1.0, 12);
        let h = exact(&t);
        let caps = crate::mrc::tlb_capacities();
        let mut s = Shards::fixed_size(Sampler::new(4, MODULUS, 0), 2000);
        s.process(&t);
        let spliced = crate::mrc::mae(&h, &s.mrc(), &caps);
        let alone = crate::mrc::mae(&h, &s.mrc_shards(), &caps);
        assert!(spliced < 0.005, "spliced {spliced}, SHARDS alone {alone}");
        assert!(
            spliced < alone / 2.0,
            "spliced {spliced}, SHARDS alone {alone}"
        );
    }

    #[test]
    fn fixed_size_lowers_the_threshold_and_rescales() {
        let t = synth::uniform(200_000, 50_000, 9);
        let mut s = Shards::fixed_size(Sampler::new(5, MODULUS, 0), 500);
        s.process(&t);
        assert!(s.sampled_keys() <= 500);
        // About 500 of 50 000 keys: R ≈ 0.01.
        assert!((0.006..0.014).contains(&s.rate()), "{}", s.rate());
        // Weights are input references (1/R at the time of each).
        let w = s.mrc_unadjusted().weight();
        let expect = t.len() as f64;
        assert!((w / expect - 1.0).abs() < 0.2, "{w} vs {expect}");
    }
}
