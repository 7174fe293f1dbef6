//! `cargo bench -p hugetune-model --bench reuse`: throughput of the exact engine
//! (4 M distinct pages, uniform and Zipf) and of the SHARDS filter (input
//! references per second), and — printed once before the timings — the memory of
//! a fixed-size SHARDS engine and the MAE of SHARDS and StatStack against exact
//! on each trace shape. `HUGETUNE_BENCH_QUICK=1` shortens the traces.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hugetune_model::mrc::eval::{exact_histogram, shapes, shards_figures, statstack_mae, PERIODS};
use hugetune_model::mrc::synth;
use hugetune_model::reuse::ReuseEngine;
use hugetune_model::shards::{Sampler, Shards, MODULUS};
use std::hint::black_box;

fn quick() -> bool {
    std::env::var_os("HUGETUNE_BENCH_QUICK").is_some()
}

fn refs() -> usize {
    if quick() {
        4_000_000
    } else {
        40_000_000
    }
}

/// The accuracy and memory figures (not timed).
fn figures() {
    let n = if quick() { 2_000_000 } else { 20_000_000 };
    println!("accuracy: MAE over 25 TLB capacities 16..65536, {n} references per shape");
    for (name, trace) in shapes(n) {
        let h = exact_histogram(&trace);
        let f = shards_figures(&trace, &h, 8192, 0, 1);
        println!(
            "  {name}: {} pages; fixed-size 8K (R {:.4}, {} keys, {} KB): MAE {:.4} (SHARDS alone {:.4}, SHARDS_adj {:.4}, unadjusted {:.4}); \
             fixed-rate: MAE {:.4} (SHARDS alone {:.4}, SHARDS_adj {:.4}, unadjusted {:.4})",
            f.distinct,
            f.rate,
            f.sampled_keys,
            f.bytes / 1024,
            f.fixed_size,
            f.fixed_size_shards,
            f.fixed_size_adj,
            f.fixed_size_unadjusted,
            f.fixed_rate,
            f.fixed_rate_shards,
            f.fixed_rate_adj,
            f.fixed_rate_unadjusted
        );
        let ss: Vec<String> = PERIODS
            .iter()
            .map(|&p| format!("every {p}: {:.4}", statstack_mae(&trace, &h, p, 1)))
            .collect();
        println!("  {name}: StatStack, time-sampled {}", ss.join(", "));
    }
}

fn exact(c: &mut Criterion) {
    figures();
    let n = refs();
    let mut g = c.benchmark_group("exact");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n as u64));
    for (name, trace) in [
        ("uniform-4M-pages", synth::uniform(n, 4 << 20, 1)),
        ("zipf1-4M-pages", synth::zipf(n, 4 << 20, 1.0, 2)),
    ] {
        g.bench_function(name, |b| {
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

fn shards(c: &mut Criterion) {
    let n = refs();
    let trace = synth::uniform(n, 1 << 20, 3);
    let mut g = c.benchmark_group("shards-filter");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n as u64));
    let mut mem = Shards::fixed_size(Sampler::new(1, MODULUS, 0), 8192);
    mem.process(&trace);
    println!(
        "SHARDS fixed-size s_max 8192 after {n} references over 1 M pages: {} keys, {} bytes ({} KB) per engine",
        mem.sampled_keys(),
        mem.heap_bytes(),
        mem.heap_bytes() / 1024
    );
    for (name, make) in [
        (
            "fixed-rate-0.01",
            Box::new(|| Shards::with_rate(1, 0, 0.01)) as Box<dyn Fn() -> Shards>,
        ),
        (
            "fixed-rate-0.001",
            Box::new(|| Shards::with_rate(1, 0, 0.001)),
        ),
        (
            "fixed-size-8K",
            Box::new(|| Shards::fixed_size(Sampler::new(1, MODULUS, 0), 8192)),
        ),
        (
            "fixed-size-8K-no-time-samples",
            Box::new(|| {
                Shards::fixed_size(Sampler::new(1, MODULUS, 0), 8192).without_short_range()
            }),
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut s = make();
                s.process(&trace);
                black_box(s.sampled_keys())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, exact, shards);
criterion_main!(benches);
