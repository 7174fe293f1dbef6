//! Processes side by side (docs/model.md §4): the page tables of a program's
//! other processes that ran at once (MPI ranks) share the caches a walk reads,
//! so the analysed process's walks cost what they cost at their page tables
//! together. The factor acts on the walk curve's page-table axis only.

mod common;
use common::zen_like;
use hugetune_model::analysis::Alongside;
use hugetune_model::cost::CostModel;
use hugetune_model::rank;
use hugetune_model::stream::{analyze_stream, present_categories, AnalysisOptions, StreamSpec};

fn analysed(alongside: Option<Alongside>) -> hugetune_model::analysis::AnalysisResult {
    let (spec, refs): (StreamSpec, Vec<u64>) =
        hugetune_model::stream::synth::program(400_000, 96 << 20, 3);
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    let opts = AnalysisOptions {
        threads: 1,
        alongside,
        ..Default::default()
    };
    analyze_stream(&spec, &zen_like(), &present, &opts, refs.iter().copied()).0
}

/// Walks that cost more the larger the page table: 50 ns at 64 KiB of leaf
/// entries, 150 ns at 1 MiB and beyond, for every leaf size.
fn rising() -> CostModel {
    let mut c = CostModel::default();
    for curve in &mut c.walk_curve {
        *curve = vec![(65536.0, 50.0), (1048576.0, 150.0)];
    }
    c.spread = None;
    c
}

#[test]
fn page_tables_alongside_move_the_walk_cost_along_its_curve() {
    let alone = analysed(None);
    let two = analysed(Some(Alongside {
        processes: 2,
        page_tables: 2.0,
    }));
    assert_eq!(alone.page_table_factor(), 1.0);
    assert_eq!(two.page_table_factor(), 2.0);
    // The TLB model is the same: only the costing differs.
    assert_eq!(alone.mappings, two.mappings);
    let cost = rising();
    // Twice the page tables on the curve = the curve at half the page table.
    let mut halved = cost.clone();
    for curve in &mut halved.walk_curve {
        for p in curve.iter_mut() {
            p.0 /= 2.0;
        }
    }
    for native_s in [100.0, 0.05] {
        let with = rank::predictions(&two, &cost, native_s);
        let shifted = rank::predictions(&alone, &halved, native_s);
        let without = rank::predictions(&alone, &cost, native_s);
        for (a, b) in with.iter().zip(&shifted) {
            assert_eq!(a.label, b.label);
            let tol = 1e-6 * a.miss_time_ns.abs().max(1.0);
            assert!(
                (a.miss_time_ns - b.miss_time_ns).abs() < tol,
                "{}: {} against {}",
                a.label,
                a.miss_time_ns,
                b.miss_time_ns
            );
        }
        // The 4 KB walks of a 96 MiB program sit on the curve's rise: with the
        // other rank's page tables they cost more, and huge pages save more
        // (by less where the run is short: the run's own bound on the overlap
        // keeps the translation time within the native time).
        let best = |p: &[rank::Prediction]| p[0].saving_ns;
        let more = if native_s > 1.0 { 1.05 } else { 1.0 };
        assert!(
            best(&with) > best(&without) * more,
            "{native_s} s: {} against {}",
            best(&with),
            best(&without)
        );
    }
}

#[test]
fn a_factor_below_one_or_not_a_number_is_none() {
    for f in [0.5, 0.0, f64::NAN, f64::INFINITY, -3.0] {
        let r = hugetune_model::analysis::AnalysisResult {
            alongside: Some(Alongside {
                processes: 2,
                page_tables: f,
            }),
            ..analysed(None)
        };
        assert_eq!(r.page_table_factor(), 1.0, "{f}");
    }
    // A factor no machine has (a hostile bundle's pages): costed at the
    // curve's far end, no overflow.
    let huge = hugetune_model::analysis::AnalysisResult {
        alongside: Some(Alongside {
            processes: 2,
            page_tables: 1e300,
        }),
        ..analysed(None)
    };
    let far = rank::predictions(&huge, &rising(), 100.0);
    assert!(far.iter().all(|p| p.saving_ns.is_finite()), "{far:?}");
}

#[test]
fn results_stored_before_it_read_as_alone() {
    let r = analysed(None);
    let mut v = serde_json::to_value(&r).unwrap();
    assert!(v.get("alongside").is_none(), "not written when alone");
    v.as_object_mut().unwrap().remove("alongside");
    let back: hugetune_model::analysis::AnalysisResult = serde_json::from_value(v).unwrap();
    assert_eq!(back.alongside, None);
    assert_eq!(back.page_table_factor(), 1.0);
}
