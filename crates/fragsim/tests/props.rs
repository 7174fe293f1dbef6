//! Simulator invariants under random event sequences with every policy, buddy
//! merge correctness, determinism, and a parser that never panics.

use fragsim::replay;
use fragsim::workload::{run_highalloc, run_kbuild, HighallocParams, KbuildParams, RunOpts};
use fragsim::Sample;
use fragsim::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        order: u8,
        mt: u8,
        lru: bool,
        mode: u8,
    },
    Free(usize),
    Reclaim(u16),
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![6 => Just(0u8), 2 => 1u8..4, 1 => 4u8..=10], 0u8..3, any::<bool>(), 0u8..4)
            .prop_map(|(order, mt, lru, mode)| Op::Alloc { order, mt, lru, mode }),
        4 => any::<usize>().prop_map(Op::Free),
        1 => (0u16..600).prop_map(Op::Reclaim),
        1 => Just(Op::Compact),
    ]
}

fn zones(two: bool) -> Vec<ZoneSpec> {
    if two {
        vec![
            ZoneSpec {
                node: 0,
                name: "DMA32".into(),
                start_pfn: 4096,
                spanned: 4096,
                present: 4096,
                managed: 3900,
            },
            ZoneSpec {
                node: 0,
                name: "Normal".into(),
                start_pfn: 1 << 20,
                spanned: 2048,
                present: 2048,
                managed: 2048,
            },
        ]
    } else {
        vec![ZoneSpec::normal(4096)]
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Every event keeps the invariants (checked inside the simulator after
    /// each alloc, free and compaction); freeing everything gives back
    /// maximal free blocks.
    #[test]
    fn invariants_hold_for_every_policy(ops in prop::collection::vec(op(), 1..400), two in any::<bool>()) {
        for kind in PolicyKind::ALL {
            let mut cfg = SimConfig::new(kind, 3);
            cfg.check = true;
            let specs = zones(two);
            let mut sim = Sim::new(&specs, &cfg);
            let mut live: Vec<Handle> = Vec::new();
            for o in &ops {
                match *o {
                    Op::Alloc { order, mt, lru, mode } => {
                        let mode = [AllocMode::Normal, AllocMode::Hugetlb, AllocMode::Thp, AllocMode::NoWait][mode as usize];
                        let mut r = Req::new(order, Mt::from_u8(mt)).mode(mode);
                        if lru { r = r.lru(); }
                        if let Some(h) = sim.alloc(r) { live.push(h); }
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let h = live.swap_remove(i % live.len());
                        sim.free(h);
                    }
                    Op::Free(_) => {}
                    Op::Reclaim(n) => { sim.reclaim(n as u64); }
                    Op::Compact => { sim.compact_all(); sim.check_invariants().map_err(TestCaseError::fail)?; }
                }
            }
            for h in live { sim.free(h); }
            sim.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(sim.live_pages(), 0);
            for z in &sim.zones {
                prop_assert_eq!(z.free_pages, z.managed());
                // Everything merged back: the only free buddies are the
                // maximal aligned blocks that the reserved head leaves.
                let mut fresh = Zone::new(&ZoneSpec { node: 0, name: z.name.clone(), start_pfn: 0, spanned: z.pages as u64, present: z.pages as u64, managed: z.managed() }, 0);
                fresh.id = z.id;
                prop_assert_eq!(z.buddyinfo(), fresh.buddyinfo());
            }
        }
    }
}

fn small_opts(kind: PolicyKind, seed: u64) -> RunOpts {
    RunOpts {
        sim: SimConfig::new(kind, seed),
        zones: vec![ZoneSpec::normal(16384)],
        samples: 20,
        final_compaction: true,
    }
}

#[test]
fn same_seed_same_metrics() {
    for kind in PolicyKind::ALL {
        let p = KbuildParams {
            anon_pages: 512.0,
            cache_pages: 200.0,
            ..KbuildParams::new(150_000)
        };
        let a = run_kbuild(&p, &small_opts(kind, 9));
        let b = run_kbuild(&p, &small_opts(kind, 9));
        assert_eq!(a, b, "{}", kind.name());
        let c = run_kbuild(&p, &small_opts(kind, 10));
        assert_ne!(
            a.series,
            c.series,
            "{}: another seed, another run",
            kind.name()
        );
    }
}

#[test]
fn kbuild_and_highalloc_run_checked() {
    for kind in PolicyKind::ALL {
        let mut o = small_opts(kind, 5);
        o.sim.check = false;
        let mut p = HighallocParams::new(60_000);
        p.build.anon_pages = 512.0;
        p.build.cache_pages = 200.0;
        p.gap = 20;
        let s = run_highalloc(&p, &o);
        assert_eq!(s.passes.len(), 3);
        for pass in &s.passes {
            assert!(pass.success <= pass.attempts);
        }
        assert!(s.series.len() > 3);
        assert!(s.end.ufsi9 >= 0 && s.end.ufsi9 <= 1000);
    }
    // One short run with every invariant checked after every event.
    let mut o = small_opts(PolicyKind::Illuminator, 5);
    o.sim.check = true;
    o.zones = vec![ZoneSpec::normal(2048)];
    let p = KbuildParams {
        anon_pages: 128.0,
        cache_pages: 64.0,
        ..KbuildParams::new(8_000)
    };
    run_kbuild(&p, &o);
}

#[test]
fn replay_places_demand_by_policy() {
    let text = "# hugetune-pagealloc v1\n# zone node=0 name=Normal start_pfn=0 spanned=4096 present=4096 managed=4096\n\
                1 A 100 0 1\n2 A 200 3 0\n3 F 100 0\n4 F 999 0\n5 F 200 2\n6 A 300 9 1\n";
    let rec = replay::parse(text.as_bytes()).unwrap();
    for kind in PolicyKind::ALL {
        let mut cfg = SimConfig::new(kind, 1);
        cfg.check = true;
        let o = RunOpts {
            sim: cfg,
            zones: rec.zones.clone(),
            samples: 4,
            final_compaction: false,
        };
        let s = replay::run_replay(&rec, &o);
        assert_eq!((s.ignored_frees, s.unmatched_frees), (1, 1));
        assert_eq!(s.stats.allocs, 3);
        assert_eq!(s.stats.frees, 2);
        assert_eq!(s.end.free_pages, 4096 - 512);
    }
    // Empty zones are left out; frees of allocations that failed in the
    // simulator are not "ignored".
    let text = "# hugetune-pagealloc v1\n# zone node=0 name=Movable start_pfn=0 spanned=0 present=0 managed=0\n\
                # zone node=0 name=Normal start_pfn=0 spanned=2048 present=2048 managed=2048\n\
                1 A 0 10 1\n2 A 1024 10 1\n3 F 1024 10\n";
    let rec = replay::parse(text.as_bytes()).unwrap();
    let o = RunOpts {
        sim: SimConfig::new(PolicyKind::Linux45, 1),
        zones: rec.zones.clone(),
        samples: 4,
        final_compaction: true,
    };
    let s = replay::run_replay(&rec, &o);
    assert_eq!((s.stats.alloc_fail, s.ignored_frees), (1, 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parser_never_panics(s in "(# hugetune-pagealloc v1\n)?([0-9 AF#a-z=\n-]{0,200})") {
        let _ = replay::parse(s.as_bytes());
    }

    #[test]
    fn parser_never_panics_on_bytes(b in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut v = b"# hugetune-pagealloc v1\n".to_vec();
        v.extend(b);
        let _ = replay::parse(&v[..]);
    }
}

#[test]
fn compaction_gathers_scattered_movable_pages() {
    let mut cfg = SimConfig::new(PolicyKind::Linux45, 1);
    cfg.check = true;
    cfg.min_free_kbytes = Some(128);
    let mut sim = Sim::with_pages(8 * 512, &cfg);
    let mut hs = Vec::new();
    while let Some(h) = sim.alloc(Req::new(0, Mt::Movable).mode(AllocMode::NoWait)) {
        hs.push(h);
    }
    // Free every other page: half the memory free, no 2 MB block.
    for (i, h) in hs.iter().enumerate() {
        if i % 2 == 0 {
            sim.free(*h);
        }
    }
    assert_eq!(Sample::take(&sim, 0, "").free_hp, 0);
    sim.compact_all();
    let s = Sample::take(&sim, 0, "");
    assert!(s.free_hp >= 3, "{s:?}");
    assert!(sim.stats.migrated > 0 && sim.stats.migrate_scanned > 0 && sim.stats.free_scanned > 0);
    // Every surviving allocation is still live, wherever it moved.
    assert_eq!(hs.iter().filter(|h| sim.is_live(**h)).count(), hs.len() / 2);
}

#[test]
fn allocations_stop_at_the_min_watermark_when_nothing_is_reclaimable() {
    let mut sim = Sim::with_pages(8 * 512, &SimConfig::new(PolicyKind::Linux615, 1));
    let min = sim.zones[0].wmark[0];
    let mut n = 0u64;
    while sim.alloc(Req::new(0, Mt::Unmovable)).is_some() {
        n += 1;
    }
    assert!(
        sim.free_pages() >= min && sim.free_pages() <= min + 1,
        "{} free, min {min}",
        sim.free_pages()
    );
    assert_eq!(n + sim.free_pages(), 4096);
    // Page cache can be reclaimed: an allocation then succeeds again.
    let mut sim = Sim::with_pages(8 * 512, &SimConfig::new(PolicyKind::Linux615, 1));
    while sim
        .alloc(Req::new(0, Mt::Movable).lru().mode(AllocMode::NoWait))
        .is_some()
    {}
    assert!(sim.alloc(Req::new(0, Mt::Unmovable)).is_some());
    assert!(sim.stats.reclaimed > 0);
}
