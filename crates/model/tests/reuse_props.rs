//! Property tests of the reuse-distance engines: the exact engine against a
//! brute-force LRU stack (with removals, batched and not), SHARDS at rate 1
//! against exact, fixed-size SHARDS's bound on its sample, and monotone curves.

use hugetune_model::mrc::{MissRatioCurve, Mrc};
use hugetune_model::reuse::{Histogram, ReuseEngine};
use hugetune_model::shards::{Sampler, Shards, MODULUS};
use hugetune_model::statstack::{time_sampled_mrc, ReuseTimes};
use proptest::prelude::*;

/// An explicit LRU stack with move-to-front; `None` for a first touch.
#[derive(Default)]
struct Brute(Vec<u64>);

impl Brute {
    fn access(&mut self, k: u64) -> Option<u64> {
        let pos = self.0.iter().position(|&x| x == k);
        if let Some(p) = pos {
            self.0.remove(p);
        }
        self.0.insert(0, k);
        pos.map(|p| p as u64)
    }

    fn remove(&mut self, k: u64) -> bool {
        let pos = self.0.iter().position(|&x| x == k);
        if let Some(p) = pos {
            self.0.remove(p);
        }
        pos.is_some()
    }
}

/// An operation: access a key, or remove it (SHARDS evicting it).
#[derive(Debug, Clone)]
enum Op {
    Access(u64),
    Remove(u64),
}

fn ops(keys: u64, len: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            9 => (0..keys).prop_map(Op::Access),
            1 => (0..keys).prop_map(Op::Remove),
        ],
        0..len,
    )
}

fn exact_hist(trace: &[u64]) -> Histogram {
    let mut e = ReuseEngine::new();
    let mut h = Histogram::default();
    for &k in trace {
        h.record(e.access(k));
    }
    h
}

fn monotone(what: &str, m: &impl MissRatioCurve) -> Result<(), TestCaseError> {
    let mut prev = 1.0f64;
    let mut caps: Vec<u64> = (0..20).map(|i| (1u64 << i) - 1).collect();
    caps.extend([3000, 10_000, 1 << 30]);
    caps.sort_unstable();
    for c in caps {
        let r = m.miss_ratio(c);
        prop_assert!((0.0..=1.0).contains(&r), "{} capacity {}: {}", what, c, r);
        prop_assert!(
            r <= prev + 1e-12,
            "{} capacity {}: {} after {}",
            what,
            c,
            r,
            prev
        );
        prev = r;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn exact_with_removals_matches_brute_force(ops in ops(48, 3000)) {
        let mut e = ReuseEngine::new();
        let mut b = Brute::default();
        for op in &ops {
            match *op {
                Op::Access(k) => prop_assert_eq!(e.access(k), b.access(k)),
                Op::Remove(k) => prop_assert_eq!(e.remove(k), b.remove(k)),
            }
            prop_assert_eq!(e.distinct(), b.0.len());
        }
    }

    #[test]
    fn exact_with_removals_compaction_and_growth_matches_brute_force(
        ops in ops(2000, 9000),
    ) {
        // Enough slots for several compactions and keys for several table
        // growths, with backward-shift deletions in between.
        let mut e = ReuseEngine::new();
        let mut b = Brute::default();
        for op in &ops {
            match *op {
                Op::Access(k) => prop_assert_eq!(e.access(k), b.access(k)),
                Op::Remove(k) => prop_assert_eq!(e.remove(k), b.remove(k)),
            }
        }
        prop_assert_eq!(e.distinct(), b.0.len());
    }

    #[test]
    fn batch_equals_one_at_a_time(
        trace in proptest::collection::vec(0u64..5000, 0..6000),
        split in 0usize..6000,
    ) {
        let mut one = ReuseEngine::new();
        let want: Vec<Option<u64>> = trace.iter().map(|&k| one.access(k)).collect();
        // Two batches, so the pipeline's state crosses a call.
        let mut e = ReuseEngine::new();
        let mut got = Vec::new();
        let (a, b) = trace.split_at(split.min(trace.len()));
        e.access_batch(a, |d| got.push(d));
        e.access_batch(b, |d| got.push(d));
        prop_assert_eq!(got, want);
    }

    #[test]
    fn counts_are_accesses_since_entering(trace in proptest::collection::vec(0u64..20, 0..500)) {
        let mut e = ReuseEngine::new();
        let mut n = std::collections::HashMap::new();
        for &k in &trace {
            let c = n.entry(k).or_insert(0u32);
            *c += 1;
            prop_assert_eq!(e.access_counted(k).1, *c);
        }
        let squares: f64 = n.values().map(|&c| (c as f64).powi(2)).sum();
        prop_assert_eq!(e.count_squares(), squares);
    }

    #[test]
    fn shards_at_rate_one_is_exact(
        trace in proptest::collection::vec(0u64..3000, 1..5000),
        seed in any::<u64>(),
        shift in 0u32..4,
    ) {
        let h = exact_hist(&trace);
        let mut rate = Shards::fixed_rate(Sampler::new(seed, MODULUS, shift), MODULUS);
        rate.process(&trace);
        // Fixed-size with room for every key never lowers its threshold.
        let mut size = Shards::fixed_size(Sampler::new(seed, MODULUS, shift), 3000);
        for chunk in trace.chunks(777) {
            size.process(chunk);
        }
        prop_assert_eq!(size.rate(), 1.0);
        for m in [rate.mrc(), rate.mrc_adj(), size.mrc(), size.mrc_unadjusted()] {
            for c in [0u64, 1, 2, 5, 17, 100, 255, 256, 3000] {
                prop_assert_eq!(m.miss_ratio(c), h.miss_ratio(c), "capacity {}", c);
            }
        }
    }

    #[test]
    fn fixed_size_never_holds_more_than_s_max(
        trace in proptest::collection::vec(0u64..20_000, 0..8000),
        s_max in 1usize..200,
        shift in 0u32..3,
        chunk in 1usize..3000,
    ) {
        let mut s = Shards::fixed_size(Sampler::new(11, MODULUS, shift), s_max);
        for c in trace.chunks(chunk) {
            s.process(c);
            prop_assert!(s.sampled_keys() <= s_max, "{} > {}", s.sampled_keys(), s_max);
        }
        prop_assert_eq!(s.refs(), trace.len() as u64);
    }

    #[test]
    fn curves_are_monotone(
        trace in proptest::collection::vec(0u64..4000, 1..6000),
        s_max in 1usize..500,
        rate in 0.01f64..1.0,
        period in 1u64..50,
    ) {
        let mut fs = Shards::fixed_size(Sampler::new(3, MODULUS, 0), s_max);
        fs.process(&trace);
        let mut fr = Shards::with_rate(5, 0, rate);
        fr.process(&trace);
        for (what, m) in [
            ("fixed-size", fs.mrc()),
            ("fixed-size adj", fs.mrc_adj()),
            ("fixed-size unadjusted", fs.mrc_unadjusted()),
            ("fixed-size SHARDS alone", fs.mrc_shards()),
            ("fixed-rate", fr.mrc()),
            ("fixed-rate adj", fr.mrc_adj()),
        ] {
            monotone(what, &m)?;
        }
        monotone("statstack", &time_sampled_mrc(&trace, period, 7))?;
        monotone("exact", &Mrc::from_histogram(&exact_hist(&trace)))?;
    }

    #[test]
    fn prefiltered_streams_give_the_same_curve(
        trace in proptest::collection::vec(0u64..5000, 0..5000),
        t in 1u64..MODULUS,
    ) {
        // What a source sampling at threshold t writes, fed to an engine at t.
        let s = Sampler::new(9, MODULUS, 0);
        let kept: Vec<u64> = trace.iter().copied().filter(|&k| s.sampled(k, t)).collect();
        // (A prefiltered stream has no time samples for short distances.)
        let mut direct = Shards::fixed_rate(s, t).without_short_range();
        direct.process(&trace);
        let mut fed = Shards::fixed_rate(s, t);
        fed.process_prefiltered(&kept, trace.len() as u64);
        prop_assert_eq!(direct.mrc(), fed.mrc());
    }
}

#[test]
fn statstack_on_a_reuse_time_histogram_is_monotone_in_reuse_time() {
    // Longer reuse times, longer expected distances: moving weight from reuse
    // time 10 to 1000 can only raise the curve.
    let mut a = ReuseTimes::new();
    a.add(10, 5.0);
    a.add(1000, 5.0);
    a.add_censored(1.0);
    let mut b = ReuseTimes::new();
    b.add(1000, 10.0);
    b.add_censored(1.0);
    let (ma, mb) = (a.mrc(11), b.mrc(11));
    for c in [1u64, 5, 9, 50, 500, 999, 5000] {
        assert!(mb.miss_ratio(c) >= ma.miss_ratio(c), "capacity {c}");
    }
    // D(10) = 9: the short reuses hit from 10 entries on.
    assert!(mb.miss_ratio(10) > ma.miss_ratio(10));
}

/// Brute force with marks: (distance, marked keys among those between).
fn brute_classed(trace: &[(u64, bool)]) -> Vec<Option<(u64, u64)>> {
    let mut stack: Vec<(u64, bool)> = Vec::new();
    trace
        .iter()
        .map(|&(k, m)| match stack.iter().position(|&(x, _)| x == k) {
            None => {
                stack.insert(0, (k, m));
                None
            }
            Some(pos) => {
                let e = stack.remove(pos);
                let marked = stack[..pos].iter().filter(|x| x.1).count() as u64;
                stack.insert(0, e);
                Some((pos as u64, marked))
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Marked keys are counted apart among the keys between, through removals
    /// and compactions; `slot_of` orders keys by their last access.
    #[test]
    fn marked_keys_are_counted_apart(
        trace in proptest::collection::vec((0u64..300, any::<bool>()), 0..6000),
        removals in proptest::collection::vec(0u64..300, 0..5),
    ) {
        // A key's mark is the one it entered with: fix it per key.
        let trace: Vec<(u64, bool)> = trace.iter().map(|&(k, _)| (k, k % 3 == 0)).collect();
        let mut e = ReuseEngine::new();
        let mut brute: Vec<(u64, bool)> = Vec::new();
        for (i, &(k, m)) in trace.iter().enumerate() {
            if i == trace.len() / 2 {
                for &r in &removals {
                    e.remove(r);
                    brute.retain(|x| x.0 != r);
                }
            }
            let want = match brute.iter().position(|x| x.0 == k) {
                None => { brute.insert(0, (k, m)); None }
                Some(pos) => {
                    let x = brute.remove(pos);
                    let marked = brute[..pos].iter().filter(|y| y.1).count() as u64;
                    brute.insert(0, x);
                    Some((pos as u64, marked))
                }
            };
            let got = e.access_classed(k, m);
            prop_assert_eq!(got.map(|(_, d, dm)| (d, dm)), want);
            if let Some((prev, d, _)) = got {
                // Exactly the keys accessed since have a later slot.
                let later = brute[1..].iter().filter(|x| e.slot_of(x.0).unwrap() > prev).count() as u64;
                prop_assert_eq!(later, d);
            }
        }
        prop_assert_eq!(brute_classed(&[]), vec![]);
    }
}
