//! The walk overlap (docs/model.md §4, "Overlap"): the rate at which the native
//! run walks, set between a dependent chase's (no overlap) and independent
//! random loads' (`walk_concurrency`), decides how many walks hide behind each
//! other, and every walk's cost is divided by it; faults are not.

use hugetune_model::cost::CostModel;
use hugetune_model::page::PageSize::{P1g, P2m, P4k};
use hugetune_model::rank::{self, walk_overlap};
use hugetune_model::stream::{analyze_stream, present_categories, AnalysisOptions};
use hugetune_model::tlb::{TlbArray, TlbGeometry, TlbLevel};

fn zen_like() -> TlbGeometry {
    TlbGeometry {
        levels: vec![
            TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
            TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 2048, 0)], None),
        ],
        source: "test".into(),
    }
}

#[test]
fn overlap_follows_the_native_time_per_walk() {
    let (spec, refs) = hugetune_model::stream::synth::program(600_000, 96 << 20, 3);
    let g = zen_like();
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    let opts = AnalysisOptions {
        threads: 1,
        ..Default::default()
    };
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
