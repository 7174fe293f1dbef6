//! Sampling on 2 MB regions (`sampled.rs`, docs/model.md §3.1) against the
//! exact analysis: the miss-ratio curves of 4 KB, 2 MB and 1 GB pages of
//! uniform, Zipf, loop and stride streams, with bounds that grow as the sample
//! shrinks; the analyzer's counts per mapping on a synthetic program, within
//! their error bars, with the same best mapping; property tests of the
//! estimator (exact at rate 1, curves monotone, thresholds that fall).

mod common;
use common::zen_like;
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::mrc::{mae, synth, tlb_capacities, MissRatioCurve, PageSizeMrcs};
use hugetune_model::rank;
use hugetune_model::sampled::{realized_ratio, Sampling};
use hugetune_model::stream::{
    analyze_stream, analyze_stream_sampled, present_categories, AnalysisOptions, StreamItem,
    StreamSampling, StreamSpec,
};
use proptest::prelude::*;

/// Addresses of a trace of 4 KB page keys (a line within the page varies).
fn addrs(keys: &[u64]) -> Vec<u64> {
    keys.iter()
        .enumerate()
        .map(|(i, &k)| (k << 12) | ((i as u64 * 64) & 0xfc0))
        .collect()
}

/// The exact curves of every page size.
fn exact_curves(trace: &[u64]) -> PageSizeMrcs {
    let mut exact = PageSizeMrcs::new();
    for &a in trace {
        exact.feed(a);
    }
    exact
}

/// MAE of the sampled curves of every page size against `exact` over the TLB
/// capacities.
fn curve_errors(trace: &[u64], exact: &PageSizeMrcs, s: Sampling) -> [f64; 3] {
    let mut est = PageSizeMrcs::sampled(s);
    // What the capture counts: every 2 MB region referenced.
    let regions: std::collections::HashSet<u64> = trace.iter().map(|a| a >> 21).collect();
    let x = regions.iter().filter(|&&g| s.region_sampled(g)).count() as u64;
    est.set_realized(realized_ratio(x, regions.len() as u64, s.rate()));
    for &a in trace {
        est.feed(a);
    }
    est.set_input_refs(trace.len() as u64);
    let caps = tlb_capacities();
    [0, 1, 2].map(|i| mae(&exact.mrc(i), &est.mrc(i), &caps))
}

/// A strided walk: `passes` sweeps over `pages` pages touching every
/// `stride`-th one, 4 references each.
fn stride(pages: u64, stride_pages: u64, passes: u64) -> Vec<u64> {
    let mut v = Vec::new();
    for _ in 0..passes {
        let mut p = 0;
        while p < pages {
            for _ in 0..4 {
                v.push(synth::BASE + p);
            }
            p += stride_pages;
        }
    }
    v
}

/// The effective number of 2 MB regions of a trace (Kish): (Σ n_r)² / Σ n_r²
/// with n_r the references to region r. A sample of rate R holds about R times
/// this many regions' worth of information.
fn effective_regions(trace: &[u64]) -> f64 {
    let mut n: std::collections::HashMap<u64, f64> = Default::default();
    for &a in trace {
        *n.entry(a >> 21).or_default() += 1.0;
    }
    let sum: f64 = n.values().sum();
    sum * sum / n.values().map(|x| x * x).sum::<f64>()
}

fn shapes() -> Vec<(&'static str, Vec<u64>)> {
    vec![
        (
            "uniform, 64 K pages",
            addrs(&synth::uniform(400_000, 1 << 16, 1)),
        ),
        (
            "zipf s=0.8, 256 K pages",
            addrs(&synth::zipf(400_000, 1 << 18, 0.8, 2)),
        ),
        ("loops, 321 K pages", addrs(&synth::loops(400_000, 8, 3))),
        (
            "stride 3 pages, 96 K pages",
            addrs(&stride(96 << 10, 3, 10)),
        ),
    ]
}

#[test]
fn page_size_curves_are_within_sampling_error() {
    for (name, trace) in shapes() {
        let regions = effective_regions(&trace);
        let exact = exact_curves(&trace);
        for (seed, rate) in [(1u64, 0.5), (2, 0.2), (3, 0.05)] {
            let worst = curve_errors(&trace, &exact, Sampling::with_rate(seed, rate));
            // The error of a sample of n regions shrinks as 1/sqrt(n).
            let n = (rate * regions).max(1.0);
            let bound = 0.01 + 0.15 / n.sqrt();
            eprintln!(
                "{name} ({regions:.0} effective regions), R = {rate}: MAE 4 KB {:.4}, 2 MB {:.4}, 1 GB {:.4} (bound {bound:.4})",
                worst[0], worst[1], worst[2]
            );
            for (i, size) in ["4 KB", "2 MB", "1 GB"].iter().enumerate() {
                assert!(
                    worst[i] <= bound,
                    "{name}, R = {rate}, {size}: MAE {} > {bound}",
                    worst[i]
                );
            }
        }
    }
}

/// The synthetic program of `stream::synth` with a 96 MiB block.
fn program(n: usize, seed: u64) -> (StreamSpec, Vec<u64>) {
    hugetune_model::stream::synth::program(n, 96 << 20, seed)
}

/// What the capture counts: the 2 MB regions referenced, all and sampled.
fn realized(refs: &[u64], s: Sampling) -> f64 {
    let all: std::collections::HashSet<u64> = refs.iter().map(|a| a >> 21).collect();
    let x = all.iter().filter(|&&g| s.region_sampled(g)).count() as u64;
    realized_ratio(x, all.len() as u64, s.rate())
}

#[test]
fn sampled_analysis_is_within_its_error_bars_and_ranks_alike() {
    let (spec, refs) = program(1_200_000, 7);
    let g = zen_like();
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    assert_eq!(
        present,
        vec![Category::HeapSmall, Category::HeapLarge, Category::Stack]
    );
    let opts = AnalysisOptions {
        mthp: vec![16],
        threads: 1,
        ..Default::default()
    };
    let (exact, _, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
    let cost = CostModel::default();
    let best = rank::predictions(&exact, &cost, 1.0)[0].label.clone();
    for (seed, rate) in [(1u64, 0.5), (2, 0.25), (3, 0.25)] {
        let regions = Sampling::with_rate(seed, rate);
        let sampling = StreamSampling {
            regions,
            kind: "analysis",
            realized: realized(&refs, regions),
        };
        let (est, summary, _) = analyze_stream_sampled(
            &spec,
            &g,
            &present,
            &opts,
            Some(sampling),
            refs.iter().map(|&a| StreamItem::Ref(a)),
        );
        assert!(summary.out_of_sample > 0 && summary.sampled_refs > 0);
        let errors = rank::sampling_errors(&est, &cost, 1.0);
        let preds = rank::predictions(&est, &cost, 1.0);
        assert_eq!(errors.len(), preds.len());
        for m in &exact.mappings {
            let e = est.mapping(&m.name).unwrap().total();
            let x = m.total();
            let se = |label: &str, f: &dyn Fn(&rank::PredictionError) -> f64| {
                errors
                    .iter()
                    .filter(|p| {
                        preds
                            .iter()
                            .any(|q| q.label == p.label && q.mapping == label)
                    })
                    .map(f)
                    .fold(0.0, f64::max)
            };
            let (ws, fs) = (se(&m.name, &|p| p.walks_se), se(&m.name, &|p| p.faults_se));
            eprintln!(
                "R = {rate} seed {seed} {}: walks {} vs {} (se {ws:.0}), faults {} vs {} (se {fs:.0}), l1 {} vs {}",
                m.name, e.walks, x.walks, e.faults, x.faults, e.l1_misses, x.l1_misses
            );
            let ok = |est: u64, exact: u64, se: f64| {
                (est as f64 - exact as f64).abs() <= 4.0 * se + 0.05 * exact as f64 + 50.0
            };
            assert!(ok(e.walks, x.walks, ws), "{}: walks", m.name);
            assert!(ok(e.faults, x.faults, fs), "{}: faults", m.name);
        }
        assert_eq!(preds[0].label, best, "R = {rate}, seed {seed}");
    }
}

/// At rate 1 the sampled path is the exact one, count for count.
#[test]
fn rate_one_is_the_exact_analysis() {
    let (spec, refs) = program(200_000, 11);
    let g = zen_like();
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    let opts = AnalysisOptions {
        mthp: vec![16],
        threads: 1,
        ..Default::default()
    };
    let (exact, s1, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
    let sampling = StreamSampling {
        regions: Sampling::with_rate(5, 1.0),
        kind: "analysis",
        realized: 1.0,
    };
    let (est, s2, _) = analyze_stream_sampled(
        &spec,
        &g,
        &present,
        &opts,
        Some(sampling),
        refs.iter().map(|&a| StreamItem::Ref(a)),
    );
    assert_eq!(s2.out_of_sample, 0);
    assert_eq!(
        (s1.refs, s1.refs_per_category),
        (s2.refs, s2.refs_per_category)
    );
    for m in &exact.mappings {
        assert_eq!(m.cells, est.mapping(&m.name).unwrap().cells, "{}", m.name);
    }
}

/// Fixed-size: the threshold falls during the stream; the analysis evicts what
/// left and goes on at the new rate, and stays near the exact counts.
#[test]
fn falling_thresholds_evict_and_rescale() {
    let (spec, refs) = program(600_000, 13);
    let g = zen_like();
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    let opts = AnalysisOptions {
        threads: 1,
        ..Default::default()
    };
    let (exact, _, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
    let m = shards_modulus();
    let items: Vec<StreamItem> = refs
        .iter()
        .enumerate()
        .flat_map(|(i, &a)| {
            let mut v = vec![StreamItem::Ref(a)];
            // From rate 1 down to 1/2 and 1/4 a third and two thirds in.
            if i == refs.len() / 3 {
                v.push(StreamItem::Threshold(m / 2));
            }
            if i == 2 * refs.len() / 3 {
                v.push(StreamItem::Threshold(m / 4));
            }
            v
        })
        .collect();
    let sampling = StreamSampling {
        regions: Sampling::new(9, m, m).unwrap(),
        kind: "spatial-size",
        realized: 1.0,
    };
    let (est, _, _) = analyze_stream_sampled(
        &spec,
        &g,
        &present,
        &opts,
        Some(sampling),
        items.into_iter(),
    );
    let s = est.sampling.as_ref().unwrap();
    assert_eq!((s.threshold, s.rate), (m / 4, 0.25));
    for x in &exact.mappings {
        let (e, x) = (est.mapping(&x.name).unwrap().total(), x.total());
        let close = |a: u64, b: u64| (a as f64 - b as f64).abs() <= 0.1 * b as f64 + 50.0;
        assert!(close(e.walks, x.walks), "walks {} vs {}", e.walks, x.walks);
        assert!(
            close(e.faults, x.faults),
            "faults {} vs {}",
            e.faults,
            x.faults
        );
        assert!(close(e.refs, x.refs), "refs {} vs {}", e.refs, x.refs);
    }
}

/// Mappings analysed side by side on threads give the serial sampled analysis,
/// threshold falls included.
#[test]
fn threaded_sampled_analysis_equals_serial() {
    let (spec, refs) = program(300_000, 17);
    let g = zen_like();
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    let m = shards_modulus();
    let items: Vec<StreamItem> = refs
        .iter()
        .enumerate()
        .flat_map(|(i, &a)| {
            let mut v = vec![StreamItem::Ref(a)];
            if i == refs.len() / 2 {
                v.push(StreamItem::Threshold(m / 8));
            }
            v
        })
        .collect();
    let run = |threads: usize| {
        let opts = AnalysisOptions {
            mthp: vec![16],
            threads,
            ..Default::default()
        };
        let sampling = StreamSampling {
            regions: Sampling::new(21, m, m / 2).unwrap(),
            kind: "spatial-size",
            realized: 1.1,
        };
        analyze_stream_sampled(
            &spec,
            &g,
            &present,
            &opts,
            Some(sampling),
            items.iter().copied(),
        )
    };
    let (serial, s1, _) = run(1);
    for threads in [3, 16] {
        let (par, s2, _) = run(threads);
        assert_eq!(par, serial, "{threads} threads");
        assert_eq!(s2, s1);
        for (a, b) in par.mappings.iter().zip(&serial.mappings) {
            assert_eq!(a.buckets, b.buckets, "{}", a.name);
        }
    }
}

fn shards_modulus() -> u64 {
    hugetune_model::shards::MODULUS
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Sampling everything gives the exact curves; any sample gives curves
    /// that never rise with the capacity and stay in [0, 1].
    #[test]
    fn curves_are_exact_at_rate_one_and_monotone(
        pages in proptest::collection::vec(0u64..40_000, 1..4000),
        seed in 0u64..1000,
        rate in 0.05f64..1.0,
    ) {
        let trace: Vec<u64> = pages.iter().map(|p| (synth::BASE + p * 7) << 12).collect();
        let exact = exact_curves(&trace);
        let mut all = PageSizeMrcs::sampled(Sampling::complete());
        let mut some = PageSizeMrcs::sampled(Sampling::with_rate(seed, rate));
        for &a in &trace {
            all.feed(a);
            some.feed(a);
        }
        all.set_input_refs(trace.len() as u64);
        some.set_input_refs(trace.len() as u64);
        let caps = tlb_capacities();
        for i in 0..3 {
            for &c in &caps {
                prop_assert!((exact.mrc(i).miss_ratio(c) - all.mrc(i).miss_ratio(c)).abs() < 1e-9);
            }
            let m = some.mrc(i);
            let mut last = 1.0f64;
            for c in 0..70_000u64 {
                let r = m.miss_ratio(c);
                prop_assert!((0.0..=1.0).contains(&r));
                prop_assert!(r <= last + 1e-12, "page size {i}: {r} after {last} at {c}");
                last = r;
            }
        }
    }

    /// The estimated distance of a re-reference is exact when every other key
    /// of the interval is of its own group, and a + b / R otherwise.
    #[test]
    fn estimates_are_exact_within_the_own_group(
        keys in proptest::collection::vec(0u64..64, 2..300),
        inv in 1.0f64..50.0,
    ) {
        use hugetune_model::sampled::{Layer, SampledEngine};
        use hugetune_model::reuse::ReuseEngine;
        let mut e = SampledEngine::estimating();
        let mut x = ReuseEngine::new();
        for &k in &keys {
            // One group: a region's keys (64 KB folios, say).
            prop_assert_eq!(e.access(k, Layer::Region, 7, inv, inv), x.access(k));
        }
    }
}
