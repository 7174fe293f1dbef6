//! `cargo bench -p fragsim --bench events`: simulator throughput in
//! allocation/free events per second on the kernel-build workload over
//! 1 GiB, for every policy, printed once per policy before the criterion
//! timings (which cover linux-4.5 and Illuminator).
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fragsim::workload::{Kbuild, KbuildParams};
use fragsim::{PolicyKind, Sim, SimConfig};
use std::hint::black_box;

const PAGES: u64 = 1 << 18; // 1 GiB
const EVENTS: u64 = 2_000_000;

fn run(kind: PolicyKind) -> u64 {
    let mut sim = Sim::with_pages(PAGES, &SimConfig::new(kind, 1));
    let mut kb = Kbuild::new(KbuildParams::new(EVENTS), 1, PAGES);
    while kb.events < EVENTS {
        kb.step(&mut sim);
    }
    kb.events
}

fn bench(c: &mut Criterion) {
    for kind in PolicyKind::ALL {
        let t = std::time::Instant::now();
        let ev = run(kind);
        let s = t.elapsed().as_secs_f64();
        println!(
            "{:<18} {:>6.2} M events/s ({ev} events in {s:.2} s)",
            kind.name(),
            ev as f64 / s / 1e6
        );
    }
    let mut g = c.benchmark_group("kbuild-1GiB");
    g.sample_size(10);
    g.throughput(Throughput::Elements(EVENTS));
    for kind in [PolicyKind::Linux45, PolicyKind::Illuminator] {
        g.bench_function(kind.name(), |b| b.iter(|| black_box(run(kind))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
