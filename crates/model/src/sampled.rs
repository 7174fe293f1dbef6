//! Analysis of a spatially sampled reference stream (docs/model.md §3.1): two
//! samples in one stream, so that the reuse distances of every translation size
//! and the first touches of every folio size are estimated without bias from
//! one pass.
//!
//! - **Pages** (4 KB translations and folios): a 4 KB page is in the sample when
//!   `fmix64(page ^ seed ^ PAGE_SALT) % P < T` — SHARDS on pages, one
//!   independent decision per key.
//! - **Regions** (translations and folios above 4 KB: mTHP, 2 MB, and the 2 MB
//!   entries a 1 GB page is smashed into): a *group*, a 2 MB region number, is in
//!   the sample when `fmix64(group ^ seed) % P < T`, and all of its references
//!   are. A reference's group is its own region for captured addresses; the
//!   runtime library places heap-large objects at the start of huge-page-aligned
//!   mappings and static data at its link-time address, so there the 2 MB pages
//!   follow the object (the link-time address): the group is the captured region
//!   of the first byte of the object's (segment's) 2 MB *unit* that holds the
//!   reference ([`group_of`]). A unit spans that region and the next, and the
//!   capture keeps the region after every sampled one, so sampled units are
//!   whole; the analysis drops what was kept only as a neighbour.
//!
//! A 4 KB page of a heap-large object under the runtime library's placement is
//! decided by the captured page of its first byte ([`page_unit`]); the part of it
//! in the next captured page (the object's start offset in its page: 16 bytes
//! behind glibc's chunk header) is seen only when that page is sampled too.
//!
//! **Distances.** A sampled reference to key k whose previous reference had
//! `d` distinct keys after it: `d_p` page-sampled 4 KB keys, `d_r` keys of
//! sampled regions, of which `a` in k's own group (sampled with it for sure), and
//! `c` keys of 1 GB pages (*coarse*: a 1 GB page referenced at all in an interval
//! long enough to matter is referenced in some sampled region; seen, not scaled).
//! Every other key is in its sample with probability R, independently of k's
//! (distinct pages and regions hash independently; the two samples use different
//! seeds), so
//!
//! ```text
//! d̂ = d_p / R + (d_r − a) / R + a + c,   E[d̂ | k sampled] = d
//! ```
//!
//! A coarse key's previous *sampled* reference can be older than its previous
//! one: its distance is overestimated (1 GB pages look worse, never better).
//! The realized rate of the regions (sampled regions referenced over all
//! referenced, which the capture counts) replaces R for the region sample: a
//! ratio estimator, much closer when the regions are alike.
//!
//! **Fixed-size samples**: the threshold falls during the stream; [`evict`]
//! removes the keys of units that left, so the engine holds the current sample
//! and R is the current rate (per-reference Horvitz-Thompson weights).
//!
//! [`evict`]: SampledEngine::evict

use crate::categorize::{ObjectInfo, StaticSegment};
use crate::category::Category;
use crate::reuse::ReuseEngine;
use crate::shards::fmix64;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// The region sample's unit: 2 MB.
pub const REGION_SHIFT: u32 = 21;
const UNIT: u64 = 1 << REGION_SHIFT;
/// The page sample's unit: 4 KB.
pub const PAGE_SHIFT: u32 = 12;

/// Mixed into the seed of the page sample, so that a page's decision does not
/// follow its region's.
pub const PAGE_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// Sub-samples for the error bars: sampled pages and groups fall into this many
/// buckets by an independent hash (random groups, `rank::sampling_errors`).
pub const BUCKETS: usize = 16;

/// Which pages and groups are in the sample: hash < threshold, with the
/// capture's hash (seed, modulus; the one of [`crate::shards::Sampler`] with
/// region shift 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampling {
    pub seed: u64,
    pub modulus: u64,
    /// The threshold T now (fixed-size: it falls).
    pub threshold: u64,
}

impl Sampling {
    /// `None` unless 0 < threshold ≤ modulus.
    pub fn new(seed: u64, modulus: u64, threshold: u64) -> Option<Self> {
        (modulus > 0 && threshold > 0 && threshold <= modulus).then_some(Sampling {
            seed,
            modulus,
            threshold,
        })
    }

    /// Everything (a complete stream).
    pub fn complete() -> Self {
        Sampling {
            seed: 0,
            modulus: 1,
            threshold: 1,
        }
    }

    /// Sampling at `rate` (clamped to (0, 1]) with the plugin's modulus 2^24.
    pub fn with_rate(seed: u64, rate: f64) -> Self {
        let m = crate::shards::MODULUS;
        let t = if rate.is_finite() {
            ((rate * m as f64).round() as u64).clamp(1, m)
        } else {
            m
        };
        Sampling {
            seed,
            modulus: m,
            threshold: t,
        }
    }

    pub fn rate(&self) -> f64 {
        self.threshold as f64 / self.modulus as f64
    }

    pub fn is_complete(&self) -> bool {
        self.threshold >= self.modulus
    }

    /// `fmix64(x ^ seed) mod P` ([`Sampler::hash`] with region shift 0).
    #[inline(always)]
    fn hash(&self, x: u64, seed: u64) -> u64 {
        let h = fmix64(x ^ seed);
        if self.modulus.is_power_of_two() {
            h & (self.modulus - 1)
        } else {
            h % self.modulus.max(1)
        }
    }

    /// `hash(group) mod P` of the region sample.
    #[inline(always)]
    pub fn region_hash(&self, group: u64) -> u64 {
        self.hash(group, self.seed)
    }

    /// `hash(page) mod P` of the page sample.
    #[inline(always)]
    pub fn page_hash(&self, page: u64) -> u64 {
        self.hash(page, self.seed ^ PAGE_SALT)
    }

    /// Whether `group` (a 2 MB region number) is in the region sample.
    #[inline(always)]
    pub fn region_sampled(&self, group: u64) -> bool {
        self.is_complete() || self.region_hash(group) < self.threshold
    }

    /// Whether `page` (a 4 KB page number) is in the page sample.
    #[inline(always)]
    pub fn page_sampled(&self, page: u64) -> bool {
        self.is_complete() || self.page_hash(page) < self.threshold
    }

    /// Whether the capture keeps a reference to `addr` (the QEMU plugin's rule,
    /// marker loads aside): its page is in the page sample, or its region or the
    /// region before is in the region sample.
    #[inline]
    pub fn capture_keeps(&self, addr: u64) -> bool {
        let r = addr >> REGION_SHIFT;
        self.page_sampled(addr >> PAGE_SHIFT)
            || self.region_sampled(r)
            || self.region_sampled(r.wrapping_sub(1))
    }
}

/// The realized rate of the sampled regions over the nominal rate: `sampled`
/// regions referenced in the sample out of `all` referenced (the capture counts
/// them), at rate `rate` (fixed-size: the final one). 1 when unknown.
pub fn realized_ratio(sampled: u64, all: u64, rate: f64) -> f64 {
    if all == 0 || sampled == 0 || rate.is_nan() || rate <= 0.0 {
        return 1.0;
    }
    sane_ratio(sampled as f64 / all as f64 / rate)
}

/// A realized ratio kept finite and within a factor 16 of nominal (beyond, the
/// counts are not to be trusted anyway, and the error bars say so).
pub fn sane_ratio(r: f64) -> f64 {
    if r.is_finite() && r > 0.0 {
        r.clamp(1.0 / 16.0, 16.0)
    } else {
        1.0
    }
}

/// The group of a reference to `addr` in `obj` (module doc): the captured region
/// of the first byte of its 2 MB unit for heap-large objects and the main
/// program's static segment, its own region otherwise.
#[inline]
pub fn group_of(obj: &ObjectInfo, seg: Option<&StaticSegment>, addr: u64) -> u64 {
    match obj.category {
        Category::HeapLarge => {
            let off = addr.wrapping_sub(obj.start) & !(UNIT - 1);
            obj.start.wrapping_add(off) >> REGION_SHIFT
        }
        Category::Static => match seg.filter(|s| s.main_program) {
            Some(s) => {
                let v = addr.wrapping_sub(s.bias) & !(UNIT - 1);
                v.wrapping_add(s.bias) >> REGION_SHIFT
            }
            None => addr >> REGION_SHIFT,
        },
        _ => addr >> REGION_SHIFT,
    }
}

/// The page that decides whether a 4 KB page of the runtime library's placement
/// of `obj` holding `addr` is sampled: the captured page of its first byte (for
/// captured 4 KB pages, the page itself).
#[inline]
pub fn page_unit(obj: &ObjectInfo, addr: u64) -> u64 {
    match obj.category {
        Category::HeapLarge => {
            let off = addr.wrapping_sub(obj.start) & !((1 << PAGE_SHIFT) - 1);
            obj.start.wrapping_add(off) >> PAGE_SHIFT
        }
        _ => addr >> PAGE_SHIFT,
    }
}

/// The error-bar bucket of a unit (a page number or a group): a hash independent
/// of the sampling ones.
#[inline(always)]
pub fn bucket_of(unit: u64) -> usize {
    (fmix64(unit.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d) >> 60) as usize
        % BUCKETS
}

/// Which sample a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// A 4 KB translation or folio: the page sample (unit: the deciding page).
    Page,
    /// Above 4 KB and at most 2 MB: the region sample (unit: the group).
    Region,
    /// A 1 GB page: seen through the region sample, counted once (unit: the
    /// group of the reference).
    Coarse,
}

/// The region keys of one group and the engine clock at their last
/// reference.
#[derive(Debug, Clone, Default)]
struct Group {
    keys: Vec<u64>,
    stamps: Vec<u32>,
}

/// What an estimating engine keeps beside the exact one.
#[derive(Debug, Clone, Default)]
struct Est {
    /// Every key: its layer, its unit and (region keys) its index in the
    /// group, for eviction and for its stamp.
    units: FxHashMap<u64, (Layer, u64, u32)>,
    /// Region keys by group (1 per group at 2 MB, 32 at 64 KB, 512 for the 4 KB
    /// entries of mTHP folios).
    groups: FxHashMap<u64, Group>,
    /// Coarse keys (1 GB pages: a handful) and their stamps.
    coarse: Vec<(u64, u32)>,
    /// Accesses so far (stamps; renumbered before it wraps).
    clock: u32,
}

impl Est {
    fn tick(&mut self) -> u32 {
        if self.clock == u32::MAX {
            self.renumber();
        }
        self.clock += 1;
        self.clock
    }

    /// Stamps by rank, the order kept (every 4 G accesses).
    #[cold]
    fn renumber(&mut self) {
        let mut all: Vec<u32> = self
            .groups
            .values()
            .flat_map(|g| g.stamps.iter().copied())
            .chain(self.coarse.iter().map(|&(_, s)| s))
            .collect();
        all.sort_unstable();
        all.dedup();
        let rank = |s: u32| all.binary_search(&s).map_or(0, |i| i as u32 + 1);
        for g in self.groups.values_mut() {
            for s in &mut g.stamps {
                *s = rank(*s);
            }
        }
        for c in &mut self.coarse {
            c.1 = rank(c.1);
        }
        self.clock = all.len() as u32;
    }
}

/// An exact LRU stack-distance engine over the sampled keys that returns the
/// estimated distance in the complete stream (module doc); with nothing left out
/// (a complete stream) it is the exact engine.
#[derive(Debug, Clone, Default)]
pub struct SampledEngine {
    engine: ReuseEngine,
    est: Option<Box<Est>>,
}

impl SampledEngine {
    /// An engine for a complete stream: distances are exact.
    pub fn exact() -> Self {
        SampledEngine {
            engine: ReuseEngine::new(),
            est: None,
        }
    }

    /// An engine for a sampled stream.
    pub fn estimating() -> Self {
        SampledEngine {
            engine: ReuseEngine::new(),
            est: Some(Box::default()),
        }
    }

    pub fn is_estimating(&self) -> bool {
        self.est.is_some()
    }

    /// Keys in the engine.
    pub fn distinct(&self) -> usize {
        self.engine.distinct()
    }

    /// A reference to `key` of `layer` with its unit (module doc), the page
    /// sample at rate `1 / inv_page`, the region sample at `1 / inv_region`: the
    /// estimated number of distinct keys since its previous reference, or `None`
    /// for its first one. Exact engines ignore all but the key.
    #[inline]
    pub fn access(
        &mut self,
        key: u64,
        layer: Layer,
        unit: u64,
        inv_page: f64,
        inv_region: f64,
    ) -> Option<u64> {
        let Some(est) = self.est.as_deref_mut() else {
            return self.engine.access(key);
        };
        let now = if layer == Layer::Page { 0 } else { est.tick() };
        let Some((prev, d, d_r)) = self.engine.access_classed(key, layer == Layer::Region) else {
            let idx = match layer {
                Layer::Region => {
                    let g = est.groups.entry(unit).or_default();
                    g.keys.push(key);
                    g.stamps.push(now);
                    g.keys.len() as u32 - 1
                }
                Layer::Coarse => {
                    est.coarse.push((key, now));
                    0
                }
                Layer::Page => 0,
            };
            est.units.insert(key, (layer, unit, idx));
            return None;
        };
        // Coarse keys referenced since: their slots are later than `prev`.
        let e = &self.engine;
        let c = est
            .coarse
            .iter()
            .filter(|&&(k, _)| k != key && e.slot_of(k).is_some_and(|s| s > prev))
            .count() as u64;
        // Keys of the reference's own group referenced since (its stamp `t`): a
        // page key's region may be sampled too, but its keys are not in the page
        // sample because of it (independent), so none count as certain.
        let a = match layer {
            Layer::Page => 0,
            Layer::Region => match est.units.get(&key) {
                Some(&(_, u, i)) if u == unit => est.groups.get_mut(&unit).map_or(0, |g| {
                    let t = std::mem::replace(&mut g.stamps[i as usize], now);
                    // Its own new stamp is among them.
                    (g.stamps.iter().filter(|&&x| x > t).count() as u64).saturating_sub(1)
                }),
                // The key was first seen from another group (hostile input).
                _ => 0,
            },
            Layer::Coarse => {
                let t = est
                    .coarse
                    .iter_mut()
                    .find(|(k, _)| *k == key)
                    .map_or(0, |c| std::mem::replace(&mut c.1, now));
                est.groups
                    .get(&unit)
                    .map_or(0, |g| g.stamps.iter().filter(|&&x| x > t).count() as u64)
            }
        }
        .min(d_r);
        let d_p = d.saturating_sub(d_r + c);
        Some(a + c + (d_p as f64 * inv_page + (d_r - a) as f64 * inv_region) as u64)
    }

    /// Removes the keys of the pages and groups that left the sample (fixed-size:
    /// the threshold fell below their hash). Coarse keys stay.
    pub fn evict(&mut self, page_left: impl Fn(u64) -> bool, group_left: impl Fn(u64) -> bool) {
        let Some(est) = self.est.as_deref_mut() else {
            return;
        };
        let engine = &mut self.engine;
        est.units.retain(|&k, &mut (layer, unit, _)| {
            let gone = match layer {
                Layer::Page => page_left(unit),
                Layer::Region => group_left(unit),
                Layer::Coarse => false,
            };
            if gone {
                engine.remove(k);
            }
            !gone
        });
        est.groups.retain(|&g, _| !group_left(g));
    }

    /// Heap bytes held (approximate for the hash maps).
    pub fn heap_bytes(&self) -> usize {
        self.engine.heap_bytes()
            + self.est.as_ref().map_or(0, |e| {
                e.units.capacity() * 32
                    + e.groups
                        .values()
                        .map(|g| g.keys.capacity() * 8 + g.stamps.capacity() * 4 + 64)
                        .sum::<usize>()
                    + e.coarse.capacity() * 16
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_of_the_own_region_is_not_scaled() {
        // 65 regions of 512 pages swept three times, as region keys (64 KB folios
        // would be alike): a re-reference has 511 keys of its own group and
        // 64 × 512 of others between.
        let mut trace = Vec::new();
        for _ in 0..3 {
            for r in 0..65u64 {
                for p in 0..512u64 {
                    trace.push((r << 9) + p);
                }
            }
        }
        let s = Sampling::with_rate(3, 0.25);
        let mut e = SampledEngine::estimating();
        let mut re = Vec::new();
        for &k in &trace {
            let g = k >> 9;
            if s.region_sampled(g) {
                if let Some(d) = e.access(k, Layer::Region, g, 4.0, 4.0) {
                    re.push(d);
                }
            }
        }
        let x = (0..65u64).filter(|&r| s.region_sampled(r)).count() as u64;
        assert!(x >= 2, "{x} regions sampled");
        // Exactly a + b / R with a = 511 and b the other sampled regions' keys;
        // SHARDS' d_s / R would be 511 × 3 more.
        let want = 511 + (x - 1) * 512 * 4;
        assert_eq!(re.len() as u64, 2 * x * 512);
        assert!(re.iter().all(|&d| d == want), "{:?} vs {want}", &re[..4]);
    }

    #[test]
    fn complete_sampling_is_exact() {
        let trace = crate::mrc::synth::zipf(50_000, 20_000, 0.8, 4);
        let s = Sampling::complete();
        let mut exact = ReuseEngine::new();
        let mut e = SampledEngine::estimating();
        for &k in &trace {
            assert!(s.page_sampled(k) && s.region_sampled(k >> 9));
            let layer = if k % 3 == 0 {
                Layer::Region
            } else {
                Layer::Page
            };
            assert_eq!(e.access(k, layer, k >> 9, 1.0, 1.0), exact.access(k));
        }
    }

    #[test]
    fn layers_scale_apart_and_eviction_removes_units() {
        let mut e = SampledEngine::estimating();
        // A coarse key, region keys of groups 5 and 6, page keys.
        assert_eq!(e.access(1 << 40, Layer::Coarse, 5, 10.0, 4.0), None);
        assert_eq!(e.access(7, Layer::Region, 5, 10.0, 4.0), None);
        assert_eq!(e.access(8, Layer::Region, 6, 10.0, 4.0), None);
        assert_eq!(e.access(100, Layer::Page, 100, 10.0, 4.0), None);
        assert_eq!(e.access(2 << 40, Layer::Coarse, 6, 10.0, 4.0), None);
        assert_eq!(e.access(101, Layer::Page, 101, 10.0, 4.0), None);
        // Key 7: between, 8 (region, other group: 4), 100 and 101 (pages: 10
        // each), 2<<40 (coarse: 1).
        assert_eq!(e.access(7, Layer::Region, 5, 10.0, 4.0), Some(25));
        // Key 8: 100, 2<<40, 101, 7 (region, other group).
        assert_eq!(e.access(8, Layer::Region, 6, 10.0, 4.0), Some(25));
        // A second key of group 6: 8 is of its own group, counted once.
        assert_eq!(e.access(9, Layer::Region, 6, 10.0, 4.0), None);
        assert_eq!(e.access(8, Layer::Region, 6, 10.0, 4.0), Some(1));
        // Coarse 1<<40: 7, 8, 9 (region: other groups for a coarse reference of
        // group 5... 7 is of group 5: a), 100, 101 (pages), 2<<40.
        assert_eq!(
            e.access(1 << 40, Layer::Coarse, 5, 10.0, 4.0),
            Some(1 + 1 + 2 * 4 + 2 * 10)
        );
        e.evict(|p| p == 100, |g| g == 6);
        assert_eq!(e.distinct(), 4, "1<<40, 2<<40, 7, 101");
        assert_eq!(e.access(8, Layer::Region, 6, 10.0, 4.0), None);
        assert_eq!(e.access(100, Layer::Page, 100, 10.0, 4.0), None);
    }

    #[test]
    fn units_of_unaligned_objects() {
        let obj = ObjectInfo {
            id: 1,
            category: Category::HeapLarge,
            start: 0x7f00_0010_0010,
            len: 64 << 20,
            via: None,
            site: None,
            alloc_seq: 0,
            free_seq: None,
            virt_base: 0,
            segment: None,
            self_thp: false,
        };
        // The unit holding offset 3 MB starts at start + 2 MB.
        let g = group_of(&obj, None, obj.start + (3 << 20));
        assert_eq!(g, (obj.start + (2 << 20)) >> 21);
        // Its last byte lies in the next captured region, same group.
        assert_eq!(group_of(&obj, None, obj.start + (4 << 20) - 1), g);
        // Placement pages: decided by their first byte's captured page.
        assert_eq!(
            page_unit(&obj, obj.start + 4096 + 8),
            (obj.start + 4096) >> 12
        );
        assert_eq!(page_unit(&obj, obj.start + 8191), (obj.start + 4096) >> 12);
        let small = ObjectInfo {
            category: Category::HeapSmall,
            ..obj.clone()
        };
        let a = obj.start + (4 << 20) - 1;
        assert_eq!(group_of(&small, None, a), a >> 21);
        assert_eq!(page_unit(&small, a), a >> 12);
        let seg = StaticSegment {
            module: 0,
            start: 0x5555_0030_0000,
            end: 0x5555_0090_0000,
            bias: 0x5555_0010_0000,
            anon_start_vaddr: 0,
            main_program: true,
        };
        let st = ObjectInfo {
            category: Category::Static,
            ..obj
        };
        // Link-time unit [2 MB, 4 MB) is captured [bias + 2 MB, bias + 4 MB).
        assert_eq!(
            group_of(&st, Some(&seg), seg.bias + (3 << 20)),
            (seg.bias + (2 << 20)) >> 21
        );
    }

    #[test]
    fn samples_are_independent_and_buckets_spread() {
        let s = Sampling::with_rate(1, 0.5);
        let both = (0..20_000u64)
            .filter(|&p| s.page_sampled(p) && s.region_sampled(p))
            .count();
        assert!((4_500..5_500).contains(&both), "{both}");
        let mut n = [0usize; BUCKETS];
        for g in 0..16_000u64 {
            n[bucket_of(g)] += 1;
        }
        assert!(n.iter().all(|&c| (800..1200).contains(&c)), "{n:?}");
        assert_eq!(realized_ratio(0, 10, 0.1), 1.0);
        assert_eq!(realized_ratio(2, 10, 0.1), 2.0);
        assert_eq!(sane_ratio(f64::NAN), 1.0);
    }
}
