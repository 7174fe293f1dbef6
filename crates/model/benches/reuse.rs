//! `cargo bench -p hugetune-model --bench reuse`: exact engine throughput.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hugetune_model::mrc::synth;
use hugetune_model::reuse::ReuseEngine;
use std::hint::black_box;

const REFS: usize = 40_000_000;
const PAGES: u64 = 4 << 20;

fn exact(c: &mut Criterion) {
    let mut g = c.benchmark_group("exact");
    g.sample_size(10);
    g.throughput(Throughput::Elements(REFS as u64));
    for (name, trace) in [
        ("uniform-4M", synth::uniform(REFS, PAGES, 1)),
        ("zipf-4M", synth::zipf(REFS, PAGES, 1.0, 2)),
    ] {
        g.bench_function(format!("{name}/access"), |b| {
            b.iter(|| {
                let mut e = ReuseEngine::new();
                let mut s = 0u64;
                for &k in &trace {
                    s = s.wrapping_add(e.access(k).unwrap_or(1));
                }
                black_box(s)
            })
        });
        g.bench_function(format!("{name}/batch"), |b| {
            b.iter(|| {
                let mut e = ReuseEngine::new();
                let mut s = 0u64;
                e.access_batch(&trace, |d| s = s.wrapping_add(d.unwrap_or(1)));
                black_box(s)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, exact);
criterion_main!(benches);
