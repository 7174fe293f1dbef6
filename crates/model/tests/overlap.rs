//! The walk overlap (docs/model.md §4, "Overlap"): the rate at which the native
//! run walks, set between a dependent chase's (no overlap) and independent
//! random loads' (`walk_concurrency`), decides how many walks hide behind each
//! other, and every walk's cost is divided by it; faults are not.

mod common;
use common::zen_like;
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::rank::{self, walk_overlap};
use hugetune_model::stream::{analyze_stream, present_categories, AnalysisOptions, StreamSpec};

/// The synthetic program both tests analyse: its spec and references, the
/// categories present, one analysis thread.
fn program() -> (StreamSpec, Vec<u64>, Vec<Category>, AnalysisOptions) {
    let (spec, refs) = hugetune_model::stream::synth::program(600_000, 96 << 20, 3);
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    let opts = AnalysisOptions {
        threads: 1,
        ..Default::default()
    };
    (spec, refs, present, opts)
}

#[test]
fn overlap_follows_the_native_time_per_walk() {
    let (spec, refs, present, opts) = program();
    let g = zen_like();
    let (r, _, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
    let cost = CostModel::default();
    let walks = r.all_small().total().walks;
    assert!(
        walks > 10_000,
        "the program must miss the TLB: {walks} walks"
    );
    // A long native run: more time per walk than a walk and its access in
    // series take, so no overlap.
    let slow = walk_overlap(&r, &cost, 100.0);
    assert_eq!(slow.factor, 1.0, "{slow:?}");
    assert!(slow.serial_ns > cost.memory_ns, "{slow:?}");
    // The native time that spends per walk what the calibrated independent
    // loads do: their overlap, exactly.
    let other_s = {
        let p = rank::predictions(&r, &cost, 100.0);
        let base = p
            .iter()
            .find(|p| p.base && p.assignments.is_empty())
            .unwrap();
        base.miss_time_ns / 1e9 - walks as f64 * (slow.serial_ns - cost.memory_ns) / 1e9
    };
    let at = |ns_per_walk: f64| other_s + walks as f64 * ns_per_walk / 1e9;
    let ind = walk_overlap(&r, &cost, at(cost.independent_ns_per_walk));
    assert!((ind.factor - cost.walk_concurrency).abs() < 1e-6, "{ind:?}");
    // A chase's time per walk: none.
    let dep = walk_overlap(&r, &cost, at(slow.serial_ns * 1.0001));
    assert_eq!(dep.factor, 1.0, "{dep:?}");
    // Walking at the rate halfway between the two (in walks per ns): halfway
    // between 1 and walk_concurrency.
    let mid_rate = (1.0 / slow.serial_ns + 1.0 / cost.independent_ns_per_walk) / 2.0;
    let half = at(1.0 / mid_rate);
    let mid = walk_overlap(&r, &cost, half);
    assert!(
        (mid.factor - (1.0 + cost.walk_concurrency) / 2.0).abs() < 1e-3,
        "{mid:?}"
    );
    // Faster than the independent loads: their concurrency, or what the
    // native run shows if more (a walk and its access take serial_ns; at 1 ns
    // per walk, serial_ns of them were in flight).
    let quick = walk_overlap(&r, &cost, at(cost.independent_ns_per_walk * 0.9));
    assert!(
        (quick.factor
            - cost
                .walk_concurrency
                .max(quick.serial_ns / quick.ns_per_walk))
        .abs()
            < 1e-6,
        "{quick:?}"
    );
    let fast = walk_overlap(&r, &cost, other_s + walks as f64 * 1e-9);
    assert!(
        (fast.factor - fast.serial_ns / fast.ns_per_walk).abs() < 1e-6
            && fast.factor > cost.walk_concurrency,
        "{fast:?}"
    );
    // The savings: the best mapping's saving shrinks with the overlap, but not
    // below what its faults alone save, and the ranking of the mappings by
    // saving stays sorted.
    let s1 = rank::predictions(&r, &cost, 100.0);
    let s2 = rank::predictions(&r, &cost, half);
    let best = &s1[0];
    let same = s2.iter().find(|p| p.label == best.label).unwrap();
    assert!(
        same.saving_ns < best.saving_ns,
        "{} vs {}",
        same.saving_ns,
        best.saving_ns
    );
    assert!(
        same.saving_ns > best.saving_ns / mid.factor - 1.0,
        "{} vs {}",
        same.saving_ns,
        best.saving_ns
    );
    assert!(s2.windows(2).all(|w| w[0].saving_ns >= w[1].saving_ns));
    // A calibration whose concurrency is below what the native run shows
    // (measured at a small page table, applied to a large one): the run's own
    // figure holds, and no mapping saves more than the run takes.
    let low = CostModel {
        walk_concurrency: 2.0,
        ..CostModel::default()
    };
    let quick_s = at(cost.independent_ns_per_walk);
    let o = walk_overlap(&r, &low, quick_s);
    assert!(
        (o.factor - o.serial_ns / o.ns_per_walk).abs() < 1e-6 && o.factor > 2.0,
        "{o:?}"
    );
    for p in rank::predictions(&r, &low, quick_s) {
        assert!(
            p.saving_ns < quick_s * 1e9,
            "{}: saves {} ns of a {} s run",
            p.label,
            p.saving_ns,
            quick_s
        );
    }
    // A concurrency of 1 turns the overlap off.
    let serial = CostModel {
        walk_concurrency: 1.0,
        ..CostModel::default()
    };
    assert_eq!(walk_overlap(&r, &serial, half).factor, 1.0);
    assert!(CostModel {
        walk_concurrency: 0.5,
        ..CostModel::default()
    }
    .validate()
    .is_err());
    assert!(CostModel {
        independent_ns_per_walk: 0.0,
        ..CostModel::default()
    }
    .validate()
    .is_err());
}

/// Writes (docs/model.md §4, "Writes"): a walk whose page the program writes
/// before its next walk is a dirty walk, also when another reference comes
/// between the load and the store; the overlap's serial time grows by the
/// dirty share times the cost model's `dirty_ratio`, and the saving shrinks.
#[test]
fn written_walks_are_dirty_and_save_less() {
    use hugetune_model::stream::{analyze_stream_sampled, StreamItem};
    let (spec, refs, present, opts) = program();
    let g = zen_like();
    let (mbase, mspan) = spec.markers;
    let marker = |a: u64| a.wrapping_sub(mbase) < mspan;
    let run = |items: Vec<StreamItem>| {
        analyze_stream_sampled(&spec, &g, &present, &opts, None, items.into_iter()).0
    };
    let loads = run(refs.iter().map(|&a| StreamItem::Ref(a)).collect());
    // Each load written back at once, then the same with the previous
    // reference's address read in between.
    let rmw = run(refs
        .iter()
        .flat_map(|&a| {
            let w = (!marker(a)).then_some(StreamItem::Write(a));
            std::iter::once(StreamItem::Ref(a)).chain(w)
        })
        .collect());
    let mut prev = None;
    let mut between = Vec::new();
    for &a in &refs {
        between.push(StreamItem::Ref(a));
        if !marker(a) {
            if let Some(p) = prev {
                between.push(StreamItem::Ref(p));
            }
            between.push(StreamItem::Write(a));
            prev = Some(a);
        }
    }
    let between = run(between);
    let (l, w, b) = (
        loads.all_small().total(),
        rmw.all_small().total(),
        between.all_small().total(),
    );
    assert!(l.walks > 10_000, "{l:?}");
    assert_eq!(l.dirty_walks, 0, "loads dirty nothing: {l:?}");
    assert_eq!((w.walks, w.dirty_walks), (l.walks, l.walks), "{w:?}");
    assert_eq!(b.dirty_walks, b.walks, "{b:?}");
    // Only a store to the walked page counts: a store after every reference
    // to one stack word dirties no walk but its own page's.
    let stack = spec.space.stack_ranges[0].0 + 256;
    let elsewhere = refs
        .iter()
        .flat_map(|&a| [StreamItem::Ref(a), StreamItem::Write(stack)])
        .collect();
    let e = run(elsewhere).all_small().total();
    assert!(e.walks >= l.walks && e.dirty_walks <= 1, "{e:?}");

    let mut cost = CostModel {
        dirty_ratio: 0.5,
        ..Default::default()
    };
    // A native run whose walks overlap: a third of a walk and its access in
    // series per walk, besides the faults.
    let slow = walk_overlap(&loads, &cost, 100.0);
    let fault_s = {
        let p = rank::predictions(&loads, &cost, 100.0);
        let base = p
            .iter()
            .find(|p| p.base && p.assignments.is_empty())
            .unwrap();
        base.miss_time_ns / 1e9 - l.walks as f64 * (slow.serial_ns - cost.memory_ns) / 1e9
    };
    let native = fault_s + l.walks as f64 * slow.serial_ns / 3.0 / 1e9;
    let (ol, ow) = (
        walk_overlap(&loads, &cost, native),
        walk_overlap(&rmw, &cost, native),
    );
    assert_eq!((ol.dirty_share, ow.dirty_share), (0.0, 1.0));
    assert!(ol.factor > 1.0 && ow.factor > ol.factor, "{ol:?} {ow:?}");
    assert!(
        (ow.serial_ns - 1.5 * ol.serial_ns).abs() < 1e-6,
        "{ol:?} {ow:?}"
    );
    let best = |r, cost: &CostModel| {
        rank::predictions(r, cost, native)
            .iter()
            .map(|p| p.saving_ns)
            .fold(f64::MIN, f64::max)
    };
    let (br, bl) = (best(&rmw, &cost), best(&loads, &cost));
    assert!(br < bl, "{br} vs {bl}");
    // Without the calibrated ratio writes cost as loads.
    cost.dirty_ratio = 0.0;
    assert_eq!(best(&rmw, &cost), best(&loads, &cost));
    cost.dirty_ratio = -0.1;
    assert!(cost.validate().is_err());
}

/// The prediction intervals (docs/model.md §4.1): without a spread there are
/// none; a spread of the 4 KB walk cost alone moves each huge mapping's
/// speedup between what the two ends of that curve predict, a spread of no
/// width leaves a point, and the sampling's margin widens the interval on
/// both sides.
#[test]
fn intervals_follow_the_calibration_spread_and_the_sampling() {
    use hugetune_model::cost::CostSpread;
    use hugetune_model::rank::PredictionError;
    let (spec, refs, present, opts) = program();
    let (r, _, _) = analyze_stream(&spec, &zen_like(), &present, &opts, refs.iter().copied());
    let native = 0.5;
    let cost = CostModel::default();
    assert!(rank::prediction_intervals(&r, &cost, native, &[]).is_empty());
    let point = CostSpread {
        l2_hit_ns: [cost.l2_hit_ns; 2],
        walk_curve: [cost.walk_curve.clone(), cost.walk_curve.clone()],
        fault_ns: [cost.fault_ns.clone(), cost.fault_ns.clone()],
        walk_concurrency: [cost.walk_concurrency; 2],
    };
    let with = |s: &CostSpread| CostModel {
        spread: Some(Box::new(s.clone())),
        ..CostModel::default()
    };
    let preds = rank::predictions(&r, &cost, native);
    let best = &preds[0];
    assert!(!best.base || !best.assignments.is_empty(), "{best:?}");
    for i in rank::prediction_intervals(&r, &with(&point), native, &[]) {
        let p = preds.iter().find(|p| p.label == i.label).unwrap();
        assert_eq!(
            (i.low, i.calibration_low, i.calibration_high, i.high),
            (
                p.predicted_speedup,
                p.predicted_speedup,
                p.predicted_speedup,
                p.predicted_speedup
            ),
            "{}",
            i.label
        );
    }
    // The 4 KB walks between half and twice the median curve.
    let mut walks = point.clone();
    let scaled = |f: f64| -> Vec<(f64, f64)> {
        cost.walk_curve[0]
            .iter()
            .map(|&(x, y)| (x, y * f))
            .collect()
    };
    walks.walk_curve[0][0] = scaled(0.5);
    walks.walk_curve[1][0] = scaled(2.0);
    let ends: Vec<Vec<rank::Prediction>> = [0.5, 2.0]
        .iter()
        .map(|&f| {
            let mut c = CostModel::default();
            c.walk_curve[0] = scaled(f);
            rank::predictions(&r, &c, native)
        })
        .collect();
    let intervals = rank::prediction_intervals(&r, &with(&walks), native, &[]);
    assert_eq!(intervals.len(), preds.len());
    let i = intervals.iter().find(|i| i.label == best.label).unwrap();
    let at = |k: usize| {
        ends[k]
            .iter()
            .find(|p| p.label == best.label)
            .unwrap()
            .predicted_speedup
    };
    let (lo, hi) = (at(0).min(at(1)), at(0).max(at(1)));
    assert!(
        lo < best.predicted_speedup && best.predicted_speedup < hi,
        "{lo} {} {hi}",
        best.predicted_speedup
    );
    assert!(
        (i.calibration_low - lo).abs() < 1e-12 && (i.calibration_high - hi).abs() < 1e-12,
        "{i:?} against {lo}..{hi}"
    );
    assert_eq!((i.low, i.high), (i.calibration_low, i.calibration_high));
    // A sampling error on top: wider on both sides.
    let e = PredictionError {
        label: best.label.clone(),
        saving_se_ns: 0.02 * best.saving_ns,
        speedup_low: 0.0,
        speedup_high: 0.0,
        walks_se: 0.0,
        faults_se: 0.0,
    };
    let j = rank::prediction_intervals(&r, &with(&walks), native, &[e]);
    let j = j.iter().find(|x| x.label == best.label).unwrap();
    assert!(j.low < i.low && j.high > i.high, "{j:?} vs {i:?}");
    assert_eq!(
        (j.calibration_low, j.calibration_high),
        (i.calibration_low, i.calibration_high)
    );
}
