//! Per-core TLBs (docs/model.md §3, "Per-core TLBs"): each thread's references
//! go through the TLBs of the core it runs on (round-robin over the run's CPUs
//! in the order the threads first appear); faults stay per process; the
//! cores' savings overlap on the wall clock by the cores busy at once.
//!
//! The brute-force check: a core's TLB sees exactly its threads' references,
//! so every core's misses are those of a one-TLB analysis of its sub-stream,
//! and the faults are those of one TLB over the whole stream.

use hugetune_model::analysis::{AnalysisResult, SizeStats};
use hugetune_model::categorize::{AddressSpace, AllocEvent, AllocOp, AllocVia};
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::page::Backing;
use hugetune_model::page::PageSize::{P1g, P2m, P4k};
use hugetune_model::rank;
use hugetune_model::sampled::Sampling;
use hugetune_model::stats::Rng;
use hugetune_model::stream::{
    analyze_stream_sampled, present_categories, AnalysisOptions, StreamItem, StreamSampling,
    StreamSpec,
};
use hugetune_model::tlb::{TlbArray, TlbGeometry, TlbLevel};

const MARKERS: u64 = 0x9000_0000;
const BLOCK: u64 = 0x7f00_0000_0000;
const BLOCK_SIZE: u64 = 64 << 20;

/// L1 64 entries, L2 512 (fully associative, 2 MB entries in both).
fn geometry() -> TlbGeometry {
    TlbGeometry {
        levels: vec![
            TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
            TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 512, 0)], None),
        ],
        source: "test".into(),
    }
}

/// One 64 MiB heap-large block, allocated before every reference (the first
/// item of every stream is its marker).
fn spec() -> StreamSpec {
    StreamSpec {
        space: AddressSpace::default(),
        events: vec![AllocEvent {
            seq: 1,
            op: AllocOp::Alloc {
                addr: BLOCK,
                size: BLOCK_SIZE,
                via: AllocVia::Malloc,
                site: None,
            },
        }],
        threshold: 128 << 10,
        markers: (MARKERS, 1 << 20),
    }
}

/// A `(thread, value)` entry that is no reference: the sampling threshold
/// falls to `value` here.
const THRESHOLD: u32 = u32::MAX;

/// (thread, address) references as stream items: the marker, then a THREAD
/// item wherever the thread changes.
fn items(refs: &[(u32, u64)]) -> Vec<StreamItem> {
    let mut v = vec![StreamItem::Ref(MARKERS + 1)];
    let mut cur = None;
    for &(t, a) in refs {
        if t == THRESHOLD {
            v.push(StreamItem::Threshold(a));
            continue;
        }
        if cur != Some(t) {
            cur = Some(t);
            v.push(StreamItem::Thread(t));
        }
        v.push(StreamItem::Ref(a));
    }
    v
}

fn opts(cpus: usize) -> AnalysisOptions {
    AnalysisOptions {
        gigantic: true,
        simulate: true,
        threads: 1,
        cpus,
        cpus_source: format!("test {cpus}"),
        ..Default::default()
    }
}

fn run(items: Vec<StreamItem>, o: &AnalysisOptions) -> AnalysisResult {
    run_sampled(items, o, None)
}

fn run_sampled(
    items: Vec<StreamItem>,
    o: &AnalysisOptions,
    sampling: Option<StreamSampling>,
) -> AnalysisResult {
    let s = spec();
    let present = vec![Category::HeapLarge];
    analyze_stream_sampled(&s, &geometry(), &present, o, sampling, items.into_iter()).0
}

/// A random page of `pages` 4 KB pages starting at page `first` of the block.
fn page(r: &mut Rng, first: u64, pages: u64) -> u64 {
    BLOCK + (first + r.below(pages)) * 4096 + r.below(64) * 64
}

/// Two threads walking `n` random references each, interleaved in chunks of
/// `chunk` as the QEMU plugin writes them; thread t's page comes from `pick`.
fn two_threads(n: usize, chunk: usize, pick: impl Fn(&mut Rng, u32) -> u64) -> Vec<(u32, u64)> {
    let mut r = Rng(11);
    let mut v = Vec::with_capacity(2 * n);
    for c in 0..(2 * n).div_ceil(chunk) {
        let t = (c % 2) as u32;
        for _ in 0..chunk {
            v.push((t, pick(&mut r, t)));
        }
    }
    v
}

/// Each thread walks its own 480 pages: one core's L2 (512) holds them, one
/// TLB for both (960) does not. Per-core TLBs miss only on first touches.
/// (The threads interleave finely, as they run at once; the coarse chunks of
/// a captured stream would hide the thrashing of one TLB, not of the cores.)
#[test]
fn private_buffers_fit_each_core_but_not_one_tlb() {
    let refs = two_threads(200_000, 10, |r, t| page(r, 480 * t as u64, 480));
    let one = run(items(&refs), &opts(0));
    let per = run(items(&refs), &opts(2));
    let (w1, w2) = (one.all_small().total(), per.all_small().total());
    assert_eq!(w2.refs, w1.refs);
    assert!(w1.walks > 50 * w2.walks, "one TLB thrashes: {w1:?}");
    assert_eq!(w2.walks, 960, "cold misses only, 480 per core: {w2:?}");
    assert_eq!(w2.faults, w1.faults, "faults are per process");
    assert_eq!(w1.faults, 960);
    let c = per.cores.as_ref().unwrap();
    assert_eq!((c.threads, c.cpus, c.cores()), (2, 2, 2));
    assert!((c.concurrency - 2.0).abs() < 1e-9, "{c:?}");
    assert_eq!(c.refs, vec![200_000, 200_000]);
    assert_eq!(per.all_small().per_core.len(), 2);
    assert_eq!(per.all_small().per_core[0].walks, 480);
    assert!(one.cores.is_none() && one.all_small().per_core.is_empty());
    // The simulation sees the same per core.
    assert_eq!(w2.sim_walks, 960);
    assert_eq!(
        c.describe(),
        "2 threads over 2 cores (test 2): per-core TLBs; their savings overlap 2.00x (the references spread over 2.00 cores)"
    );
    // The native run kept 1.5 CPUs busy: the savings overlap no more; a run
    // that took turns on one CPU adds them up; unknown times change nothing.
    let busy = c.clone().with_native_run(1.5, 1.0);
    assert_eq!((busy.busy_cpus, busy.concurrency), (Some(1.5), 1.5));
    assert!(busy
        .describe()
        .ends_with("the native run kept 1.50 CPUs busy)"));
    assert_eq!(c.clone().with_native_run(0.6, 1.0).concurrency, 1.0);
    assert_eq!(c.clone().with_native_run(7.9, 1.0).concurrency, 2.0);
    assert_eq!(c.clone().with_native_run(0.0, 1.0), *c);
    assert_eq!(c.clone().with_native_run(1.0, 0.0), *c);
}

/// Both threads walk the same 300 pages: each core misses on each page once,
/// the pages fault once.
#[test]
fn shared_data_misses_on_every_core_and_faults_once() {
    let refs = two_threads(100_000, 3_000, |r, _| page(r, 0, 300));
    let one = run(items(&refs), &opts(0));
    let per = run(items(&refs), &opts(2));
    let (w1, w2) = (one.all_small().total(), per.all_small().total());
    assert_eq!(w1.walks, 300);
    assert_eq!(w2.walks, 600);
    assert_eq!((w1.faults, w2.faults), (300, 300));
    let pc = &per.all_small().per_core;
    assert_eq!(
        pc.iter().map(|x| x.walks).collect::<Vec<_>>(),
        vec![300, 300]
    );
    assert_eq!(pc.iter().map(|x| x.faults).sum::<u64>(), 300);
    // 2 MB pages: the block's 300 pages lie in one 2 MB page; each core
    // misses on it once, it faults once.
    let hl = per
        .mapping("heap-large")
        .unwrap()
        .cell(Category::HeapLarge, Backing::Thp2m);
    assert_eq!((hl.walks, hl.faults), (2, 1));
}

/// One thread: the result of one TLB, bit for bit, however many CPUs the run
/// had; with one CPU, every thread's references on the one TLB.
#[test]
fn one_thread_or_one_core_is_one_tlb() {
    let (_, addrs) = hugetune_model::stream::synth::program(300_000, 48 << 20, 5);
    let s = hugetune_model::stream::synth::program(300_000, 48 << 20, 5).0;
    let (present, _, _) = present_categories(&s, addrs.iter().copied());
    let g = geometry();
    let plain = analyze_stream_sampled(
        &s,
        &g,
        &present,
        &opts(0),
        None,
        addrs.iter().map(|&a| StreamItem::Ref(a)),
    )
    .0;
    let threaded = |cpus: usize, threads: u32| {
        let mut v = Vec::new();
        for (i, &a) in addrs.iter().enumerate() {
            if i % 1000 == 0 {
                v.push(StreamItem::Thread((i / 1000) as u32 % threads));
            }
            v.push(StreamItem::Ref(a));
        }
        analyze_stream_sampled(&s, &g, &present, &opts(cpus), None, v.into_iter()).0
    };
    for (cpus, threads) in [(2, 1), (16, 1), (1, 1), (1, 4)] {
        let r = threaded(cpus, threads);
        assert_eq!(r.mappings, plain.mappings, "{cpus} CPUs, {threads} threads");
        let c = r.cores.as_ref().unwrap();
        assert_eq!((c.threads, c.cores()), (threads as u64, 1));
        assert_eq!(c.concurrency, 1.0);
        let cost = CostModel::default();
        assert_eq!(
            rank::predictions(&r, &cost, 0.5),
            rank::predictions(&plain, &cost, 0.5)
        );
    }
}

/// Threads go round-robin over min(threads, CPUs) cores in the order they
/// first appear (ids need not be dense: perf gives tids).
#[test]
fn threads_spread_round_robin_in_order_of_appearance() {
    let mut r = Rng(3);
    let tids = [4242u32, 17, 99];
    let mut refs = Vec::new();
    for round in 0..6 {
        let t = tids[round % 3];
        for _ in 0..1000 {
            refs.push((t, page(&mut r, 0, 100)));
        }
    }
    let per = run(items(&refs), &opts(2));
    let c = per.cores.unwrap();
    assert_eq!((c.threads, c.cores()), (3, 2));
    // 4242 and 99 on core 0, 17 on core 1.
    assert_eq!(c.refs, vec![4000, 2000]);
    assert!((c.concurrency - 1.5).abs() < 1e-9);
    let four = run(items(&refs), &opts(4));
    assert_eq!(four.cores.unwrap().refs, vec![2000, 2000, 2000]);
}

/// The sum of `per_core` is the mapping's total, and every core's misses are a
/// one-TLB analysis of its own threads' references: randomized threads,
/// chunks, shared and private data, exact and SHARDS-sampled (fixed-rate, and
/// fixed-size whose threshold falls twice, evicting from every core).
#[test]
fn every_core_is_one_tlb_over_its_own_references() {
    let mut multi_seeds = Vec::new();
    for seed in 1..=8u64 {
        let mut r = Rng(seed);
        let threads = 1 + r.below(4) as u32;
        let cpus = 1 + r.below(3) as usize;
        let mut refs = Vec::new();
        while refs.len() < 60_000 {
            let t = r.below(threads as u64) as u32;
            for _ in 0..1 + r.below(3000) {
                // Shared pages, the thread's own pages, and a sweep.
                let a = match r.below(3) {
                    0 => page(&mut r, 0, 700),
                    1 => page(&mut r, 1000 + 700 * t as u64, 700),
                    _ => BLOCK + (refs.len() as u64 * 64) % BLOCK_SIZE,
                };
                refs.push((t, a));
            }
        }
        let modulus = Sampling::with_rate(1, 1.0).modulus;
        let falling = seed % 4 == 0;
        if falling {
            // From R = 1/2 to 1/4 and 1/8 a third and two thirds in.
            let n = refs.len();
            refs.insert(2 * n / 3, (THRESHOLD, modulus / 8));
            refs.insert(n / 3, (THRESHOLD, modulus / 4));
        }
        let sampled = |s: u64| {
            s.is_multiple_of(2).then(|| StreamSampling {
                regions: Sampling::new(s, modulus, modulus / 2).unwrap(),
                kind: if falling { "spatial-size" } else { "analysis" },
                realized: 1.0,
            })
        };
        let mut o = opts(cpus);
        o.simulate = sampled(seed).is_none();
        let whole = run_sampled(items(&refs), &o, sampled(seed));
        if falling {
            assert_eq!(whole.sampling.as_ref().unwrap().threshold, modulus / 8);
        }
        let one = {
            let mut o = o.clone();
            o.cpus = 0;
            run_sampled(items(&refs), &o, sampled(seed))
        };
        let mut order: Vec<u32> = Vec::new();
        for &(t, _) in &refs {
            if t != THRESHOLD && !order.contains(&t) {
                order.push(t);
            }
        }
        let core_of = |t: u32| order.iter().position(|&x| x == t).unwrap() % cpus;
        let cores = threads.min(cpus as u32) as usize;
        if cores > 1 {
            multi_seeds.push((seed, falling));
        }
        let subs: Vec<AnalysisResult> = (0..cores)
            .map(|c| {
                let sub: Vec<(u32, u64)> = refs
                    .iter()
                    .copied()
                    .filter(|&(t, _)| t == THRESHOLD || core_of(t) == c)
                    .collect();
                let mut o = o.clone();
                o.cpus = 0;
                run_sampled(items(&sub), &o, sampled(seed))
            })
            .collect();
        // Counts of a sampled stream are rounded sums of weights: one count
        // per core of rounding.
        let slack = if sampled(seed).is_some() {
            cores as u64
        } else {
            0
        };
        for (mi, m) in whole.mappings.iter().enumerate() {
            let t = m.total();
            let mut sum = SizeStats::default();
            for s in &subs {
                let x = s.mappings[mi].total();
                sum.refs += x.refs;
                sum.l1_misses += x.l1_misses;
                sum.walks += x.walks;
                sum.sim_walks += x.sim_walks;
            }
            let ctx = format!("seed {seed}: {threads} threads on {cpus} CPUs, {}", m.name);
            assert!(t.refs.abs_diff(sum.refs) <= slack, "{ctx}: {t:?} {sum:?}");
            assert!(t.l1_misses.abs_diff(sum.l1_misses) <= slack, "{ctx}");
            assert!(t.walks.abs_diff(sum.walks) <= slack, "{ctx}: {t:?} {sum:?}");
            assert_eq!(t.sim_walks, sum.sim_walks, "{ctx}");
            assert!(
                t.faults.abs_diff(one.mappings[mi].total().faults) <= slack,
                "{ctx}: faults per process"
            );
            if cores > 1 {
                assert_eq!(m.per_core.len(), cores, "{ctx}");
                let w: u64 = m.per_core.iter().map(|x| x.walks).sum();
                assert!(w.abs_diff(t.walks) <= slack, "{ctx}");
            } else {
                assert_eq!(m, &one.mappings[mi], "{ctx}");
            }
        }
    }
    // The seeds cover several cores, sampled with falling thresholds among them.
    assert!(multi_seeds.len() >= 3, "{multi_seeds:?}");
    assert!(multi_seeds.iter().any(|&(_, f)| f), "{multi_seeds:?}");
}

/// Wall-clock savings: two balanced cores save half of what their walks cost
/// together; the CPU-time miss counts are the cores' sum.
#[test]
fn balanced_cores_overlap_their_savings() {
    let refs = two_threads(150_000, 5_000, |r, _| page(r, 0, 3000));
    let per = run(items(&refs), &opts(2));
    let cost = CostModel::default();
    let p = rank::predictions(&per, &cost, 10.0);
    let mut cpu = per.clone();
    cpu.cores = None;
    let q = rank::predictions(&cpu, &cost, 20.0);
    let find = |v: &[rank::Prediction], l: &str| v.iter().find(|x| x.label == l).unwrap().clone();
    let (a, b) = (
        find(&p, "heap-large:hugetlb"),
        find(&q, "heap-large:hugetlb"),
    );
    assert!(a.saving_ns > 0.0);
    // The same walks set against twice the time (two cores of 10 s) overlap
    // alike; the wall-clock saving is half of the cores' together.
    assert!(
        (a.saving_ns * 2.0 - b.saving_ns).abs() < 1e-6 * b.saving_ns,
        "{} vs {}",
        a.saving_ns,
        b.saving_ns
    );
}
