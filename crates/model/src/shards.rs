//! SHARDS: spatially hashed sampling of a reference stream for approximate LRU
//! miss-ratio curves in constant memory (Waldspurger, Park, Garthwaite, Ahmad,
//! FAST 2015; REF-model §5.1).
//!
//! A key is in the sample when `hash(key) mod P < T`; every reference to a
//! sampled key goes through the exact engine, and its stack distance among the
//! sampled keys, divided by the rate R = T/P, estimates its true distance.
//! - Fixed-rate: T is constant.
//! - Fixed-size: at most `s_max` sampled keys. When one more arrives, T falls to
//!   the largest hash in the sample and the keys at or above it leave; the weights
//!   recorded so far are multiplied by T_new/T_old so that every reference is
//!   weighted as if sampled at the final rate.
//! - SHARDS_adj ([`Shards::mrc_adj`]): the sample of a skewed trace may hold more
//!   or fewer hot keys than its share; the difference Δ between the expected
//!   number of sampled references (R × all references) and the number seen is
//!   added at distance 0.
//! - [`Shards::mrc`] spreads the same Δ by a regression on the keys' reference
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
//! **Region shift.** The hash is of `key >> region_shift`, so that all keys of a
//! region are sampled together: with 4 KB page numbers and `region_shift = 9`,
//! a 4 KB page is sampled exactly when its 2 MB region is, and the 2 MB class
//! (keys `addr >> 21`, `region_shift = 0`) with the same seed, modulus and
//! threshold samples that same region: samples nest across page sizes
//! (REF-model §1.3). The estimate stays unbiased (every key is in the sample with
//! probability R), with more variance when a region's pages behave alike.
//!
//! **Hash.** MurmurHash3's fmix64 of `(key >> region_shift) ^ seed`, reduced mod
//! the modulus: with `region_shift = 0` this is the decision of the QEMU plugin
//! and of `hugetune_capture::refs::sampled` (same function, same seed and
//! modulus), so a stream the plugin sampled can be fed to
//! [`Shards::process_prefiltered`]. The three copies must agree; a test in the
//! `hugetune` crate checks the model's against the capture crate's.

use crate::mrc::Mrc;
use crate::reuse::ReuseEngine;
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
    /// Sampled references, weighted like the curve (rescaled in fixed-size mode).
    sampled_refs: f64,
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
            heap: BinaryHeap::new(),
            curve: Mrc::new(),
            by_count: Mrc::new(),
            refs: 0,
            sampled_refs: 0.0,
            keys: Vec::with_capacity(BUF),
            hashes: Vec::with_capacity(BUF),
        }
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

    /// Heap bytes held by the engine (exact engine, sample heap, curve, buffer).
    pub fn heap_bytes(&self) -> usize {
        self.engine.heap_bytes()
            + self.heap.capacity() * std::mem::size_of::<(u64, u64)>()
            + self.curve.heap_bytes()
            + self.by_count.heap_bytes()
            + (self.keys.capacity() + self.hashes.capacity()) * 8
    }

    /// Feed every input reference: hash and compare each key, then the sampled
    /// ones through the exact engine.
    pub fn process(&mut self, keys: &[u64]) {
        self.refs += keys.len() as u64;
        for chunk in keys.chunks(BUF) {
            self.filter(chunk);
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
    pub fn process_prefiltered(&mut self, keys: &[u64], input_refs: u64) {
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
                Self::record(&mut self.curve, &mut self.by_count, d, j, inv, 1.0);
            }
            self.sampled_refs += self.keys.len() as f64;
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
                Self::record(&mut self.curve, &mut self.by_count, Some(d), j, inv, 1.0);
                self.sampled_refs += 1.0;
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
                self.curve.add_cold(1.0);
                self.sampled_refs += 1.0;
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

    /// T falls to the largest sampled hash; keys at or above it leave, and the
    /// weights so far are rescaled to the new rate.
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
        let f = t as f64 / self.threshold as f64;
        self.curve.scale(f);
        self.by_count.scale(f);
        self.sampled_refs *= f;
        self.threshold = t;
    }

    /// The miss-ratio curve, adjusted to the expected number of sampled
    /// references by the count-weighted regression (module doc); `misses` are in
    /// input references.
    pub fn mrc(&self) -> Mrc {
        let base = self.mrc_unadjusted();
        let delta = self.rate() * self.refs as f64 - self.sampled_refs;
        let mut by_count = self.by_count.clone();
        // First references: one per key, each weighing its key's count, so
        // together all the sampled references.
        by_count.add_cold(self.sampled_refs);
        let sum_sq = by_count.weight();
        if sum_sq <= 0.0 || delta == 0.0 {
            return self.mrc_adj();
        }
        let k = delta / sum_sq;
        base.plus_scaled(&by_count, k, 0.0)
    }

    /// The miss-ratio curve with SHARDS_adj (Δ at distance 0).
    pub fn mrc_adj(&self) -> Mrc {
        let mut m = self.mrc_unadjusted();
        let expected = self.rate() * self.refs as f64;
        m.adjust_first(expected - self.sampled_refs);
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
        // Adjusted: E[N_s] = R × N, about half of it hits at distance 0.
        let want = sh.rate() * trace.len() as f64 - raw.weight();
        assert!((adj.weight() - raw.weight() - want).abs() < 1e-6);
        assert!(
            (adj.miss_ratio(1) - 0.5).abs() < 0.02,
            "{}",
            adj.miss_ratio(1)
        );
        assert_eq!(adj.miss_ratio(0), 1.0);
    }

    #[test]
    fn fixed_size_lowers_the_threshold_and_rescales() {
        let t = synth::uniform(200_000, 50_000, 9);
        let mut s = Shards::fixed_size(Sampler::new(5, MODULUS, 0), 500);
        s.process(&t);
        assert!(s.sampled_keys() <= 500);
        // About 500 of 50 000 keys: R ≈ 0.01.
        assert!((0.006..0.014).contains(&s.rate()), "{}", s.rate());
        // Weights are in units of the final rate.
        let w = s.mrc_unadjusted().weight();
        let expect = s.rate() * t.len() as f64;
        assert!((w / expect - 1.0).abs() < 0.2, "{w} vs {expect}");
    }
}
