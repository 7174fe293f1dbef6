//! The JVM's heap (memory the JVM maps itself: category `other`) evaluated on
//! 2 MB THP, as HotSpot's `-XX:+UseTransparentHugePages` puts it
//! (`AnalysisOptions::jvm`, mapping `jvm`; docs/runtimes.md, "Predicted"):
//! only for a JVM, never a base mapping, and what it saves is the walks and
//! faults of `other` on 2 MB pages.

mod common;
use common::zen_like;
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::page::Backing;
use hugetune_model::rank;
use hugetune_model::stats::Rng;
use hugetune_model::stream::{analyze_stream, present_categories, AnalysisOptions, StreamSpec};

/// A JVM-like program: no allocation the model sees, random loads over a 64
/// MiB range it mapped itself (a heap committed in place: `other`).
fn program() -> (StreamSpec, Vec<u64>, Vec<Category>) {
    let markers = 0x9000_0000u64;
    let spec = StreamSpec {
        space: Default::default(),
        events: vec![],
        threshold: 128 << 10,
        markers: (markers, 1 << 20),
    };
    let heap = 0x7e00_0000_0000u64;
    let mut r = Rng(7);
    let mut refs = vec![markers + 1];
    refs.extend((0..400_000).map(|_| heap + r.below((64 << 20) / 64) * 64));
    let (present, _, _) = present_categories(&spec, refs.iter().copied());
    (spec, refs, present)
}

#[test]
fn a_jvms_heap_is_predicted_on_thp_and_only_for_a_jvm() {
    let (spec, refs, present) = program();
    assert_eq!(present, vec![Category::Other]);
    let g = zen_like();
    let opts = |jvm| AnalysisOptions {
        threads: 1,
        jvm,
        ..Default::default()
    };
    let (plain, _, _) = analyze_stream(&spec, &g, &present, &opts(false), refs.iter().copied());
    assert!(
        plain.mappings.iter().all(|m| !m.mapping.is_jvm_heap()),
        "not a JVM: no jvm mapping"
    );
    let (r, _, _) = analyze_stream(&spec, &g, &present, &opts(true), refs.iter().copied());
    let m = r
        .mappings
        .iter()
        .find(|m| m.mapping.is_jvm_heap())
        .expect("a JVM: the jvm mapping");
    assert_eq!(m.name, "jvm");
    assert!(!m.base, "never a base mapping: rank does not measure it");
    let small = r.all_small().total();
    let huge = m.cell(Category::Other, Backing::Thp2m);
    // 64 MiB: 16 384 pages of 4 KB, past the 2 048-entry L2 TLB; 32 of 2 MB.
    assert!(small.walks > 300_000, "{small:?}");
    assert!(huge.walks < small.walks / 100, "{huge:?} against {small:?}");
    assert_eq!(huge.faults, 32, "one fault per 2 MB region touched");
    let cost = CostModel::default();
    let preds = rank::predictions(&r, &cost, 1.0);
    let p = preds.iter().find(|p| p.is_jvm_heap()).unwrap();
    assert_eq!(p.label, "jvm:thp");
    assert!(p.saving_ns > 0.0 && p.predicted_speedup > 1.0, "{p:?}");
    assert!(preds
        .iter()
        .filter(|p| !p.is_jvm_heap())
        .all(|p| p.saving_ns.abs() < 1e-6));
}

/// A JVM that maps a 64 MiB file (a memory-mapped index) next to a 64 MiB
/// heap it committed itself, and reads both at random, half and half: only
/// the heap is on THP in the `jvm` mapping, since the switch advises only the
/// memory the JVM mapped anonymously for itself (`AllocVia::MmapFile`).
#[test]
fn a_jvms_file_mappings_are_not_its_heap() {
    use hugetune_model::categorize::{AllocEvent, AllocOp, AllocVia};
    let markers = 0x9000_0000u64;
    let (heap, file) = (0x7e00_0000_0000u64, 0x7f00_0000_0000u64);
    let map = |seq, addr, via| AllocEvent {
        seq,
        op: AllocOp::Alloc {
            addr,
            size: 64 << 20,
            via,
            site: None,
        },
    };
    let spec = |file_via| StreamSpec {
        space: Default::default(),
        events: vec![map(1, heap, AllocVia::Mmap), map(2, file, file_via)],
        threshold: 128 << 10,
        markers: (markers, 1 << 20),
    };
    let mut r = Rng(11);
    let mut refs = vec![markers + 1, markers + 2];
    refs.extend((0..400_000).map(|i| {
        let base = if i % 2 == 0 { heap } else { file };
        base + r.below((64 << 20) / 64) * 64
    }));
    let g = zen_like();
    let opts = AnalysisOptions {
        threads: 1,
        jvm: true,
        ..Default::default()
    };
    let jvm = |file_via| {
        let spec = spec(file_via);
        let (present, _, _) = present_categories(&spec, refs.iter().copied());
        assert_eq!(present, vec![Category::Other]);
        let (r, _, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
        let small = r.all_small().total();
        let m = r.mappings.iter().find(|m| m.mapping.is_jvm_heap()).unwrap();
        (small, m.total())
    };
    // The file as if it were heap: nearly every walk saved (the reference).
    let (small, both) = jvm(AllocVia::Mmap);
    assert!(both.walks < small.walks / 50, "{both:?} against {small:?}");
    assert_eq!(both.faults, 64, "both ranges' 2 MB regions on THP");
    // The file as it is: its half of the walks stays, on 4 KB pages.
    let (small, heap_only) = jvm(AllocVia::MmapFile);
    let kept = heap_only.walks as f64 / small.walks as f64;
    assert!(
        (0.35..0.65).contains(&kept),
        "{kept}: {heap_only:?} against {small:?}"
    );
    // The heap's 32 regions fault on THP, the file's 16 384 pages on 4 KB.
    assert_eq!(heap_only.faults, 32 + 16_384, "{heap_only:?}");
}
