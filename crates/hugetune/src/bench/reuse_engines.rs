//! `hugetune bench model`: the reuse-distance engines of the model (docs/reuse.md):
//! throughput of the exact engine and of the SHARDS filter, SHARDS memory, and
//! the MAE of SHARDS and StatStack against exact per trace shape, real
//! `hugetune-work` traces included; and the analysis end to end (decode,
//! categorize, resolve, every mapping's engines; one thread) of a complete
//! stream against the same stream sampled as the QEMU plugin samples it
//! (docs/model.md §3.1), in input references per second.

use crate::stages;
use anyhow::{bail, Context, Result};
use hugetune_model::stats::median;
use hugetune_render::table;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelTiming {
    pub name: String,
    pub refs: u64,
    /// Thread CPU seconds per run (robust to other processes on the machine).
    pub cpu_s: Vec<f64>,
    pub wall_s: Vec<f64>,
    /// Input references per second, from the median CPU and wall times.
    pub refs_per_s_cpu: f64,
    pub refs_per_s_wall: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelShape {
    pub shape: String,
    pub refs: u64,
    pub shards: hugetune_model::mrc::eval::ShardsFigures,
    /// SHARDS sampling 2 MB regions of the 4 KB pages (region shift 9).
    pub shards_2m_regions: hugetune_model::mrc::eval::ShardsFigures,
    /// (period, MAE) of StatStack on the trace time-sampled every period.
    pub statstack: Vec<(u64, f64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelReport {
    pub runs: usize,
    pub quick: bool,
    pub load_before: String,
    pub timings: Vec<ModelTiming>,
    /// Heap bytes of one fixed-size SHARDS engine (s_max 8192) after a run.
    pub shards_bytes: usize,
    pub shapes: Vec<ModelShape>,
    /// The analysis end to end, complete and sampled (input references: those
    /// of the complete stream in both).
    #[serde(default)]
    pub analysis: Vec<ModelTiming>,
    /// Mappings the analysis timings evaluate.
    #[serde(default)]
    pub analysis_mappings: usize,
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn time_runs(name: &str, refs: usize, runs: usize, mut f: impl FnMut() -> u64) -> ModelTiming {
    stages::note(format!("bench model: {name}"));
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (c0, w0) = (thread_cpu_s(), std::time::Instant::now());
        std::hint::black_box(f());
        cpu.push(thread_cpu_s() - c0);
        wall.push(w0.elapsed().as_secs_f64());
    }
    ModelTiming {
        name: name.into(),
        refs: refs as u64,
        refs_per_s_cpu: refs as f64 / median(&cpu),
        refs_per_s_wall: refs as f64 / median(&wall),
        cpu_s: cpu,
        wall_s: wall,
    }
}

/// The 4 KB pages of every reference of a `hugetune-work --trace` run.
fn work_pages(work: &std::path::Path, args: &[&str], dir: &std::path::Path) -> Result<Vec<u64>> {
    let file = dir.join("trace.htrefs");
    let out = std::process::Command::new(work)
        .args(args)
        .arg("--trace")
        .arg(&file)
        .output()
        .with_context(|| format!("running {}", work.display()))?;
    if !out.status.success() {
        bail!(
            "hugetune-work {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut r = hugetune_format::refstream::RefReader::new(std::io::BufReader::new(
        std::fs::File::open(&file)?,
    ))?;
    let mut keys = Vec::new();
    while let Some(x) = r.next_record()? {
        keys.push(x.addr >> 12);
    }
    std::fs::remove_file(&file)?;
    Ok(keys)
}

/// An encoded stream of the synthetic program and how it was sampled.
struct Encoded {
    bytes: Vec<u8>,
    sampling: Option<hugetune_model::stream::StreamSampling>,
}

/// The synthetic program's stream, complete or as the plugin keeps it at
/// `rate` (its END counts the regions referenced).
fn encode(addrs: &[u64], markers: (u64, u64), rate: Option<f64>) -> Result<Encoded> {
    use hugetune_format::refstream::{RefWriter, SamplingKind, StreamHeader};
    use hugetune_model::sampled::{Sampling, PAGE_SALT, PAGE_SHIFT, REGION_SHIFT};
    use hugetune_model::stream::StreamSampling;
    let s = rate.map(|r| Sampling::with_rate(1, r));
    let header = match s {
        None => StreamHeader::complete("bench"),
        Some(s) => StreamHeader {
            sampling: SamplingKind::SpatialRate,
            page_shift: Some(PAGE_SHIFT),
            region_shift: Some(REGION_SHIFT),
            page_seed: Some(s.seed ^ PAGE_SALT),
            hash: Some("fmix64".into()),
            seed: Some(s.seed),
            modulus: Some(s.modulus),
            threshold: Some(s.threshold),
            ..StreamHeader::complete("bench")
        },
    };
    let mut w = RefWriter::new(Vec::new(), &header)?;
    let mut regions = std::collections::HashSet::new();
    for &a in addrs {
        let marker = a.wrapping_sub(markers.0) < markers.1;
        if !marker {
            regions.insert(a >> REGION_SHIFT);
        }
        if marker || s.is_none_or(|s| s.capture_keeps(a)) {
            w.push(a, false)?;
        }
    }
    let bytes = w.finish_with(addrs.len() as u64, s.map(|_| regions.len() as u64))?;
    Ok(Encoded {
        bytes,
        sampling: s.map(|regions| StreamSampling {
            regions,
            kind: "spatial-rate",
            realized: 1.0,
        }),
    })
}

/// `analyze`'s work on an encoded stream, as its stage does it: a first pass
/// (categories, regions referenced), then every mapping at once. Returns the
/// mappings evaluated.
fn analyze_encoded(
    e: &Encoded,
    spec: &hugetune_model::stream::StreamSpec,
    geometry: &hugetune_model::tlb::TlbGeometry,
) -> Result<usize> {
    use hugetune_format::refstream::{Event, RefReader};
    use hugetune_model::sampled::{realized_ratio, REGION_SHIFT};
    use hugetune_model::stream::{
        analyze_stream_sampled, present_categories, AnalysisOptions, StreamItem,
    };
    let items = || -> Result<Vec<StreamItem>> {
        let mut r = RefReader::new(&e.bytes[..])?;
        let mut v = Vec::new();
        while let Some(x) = r.next_event()? {
            v.push(match x {
                Event::Ref(x) if x.write => StreamItem::Write(x.addr),
                Event::Ref(x) => StreamItem::Ref(x.addr),
                Event::Threshold(t) => StreamItem::Threshold(t),
            });
        }
        Ok(v)
    };
    let mut r = RefReader::new(&e.bytes[..])?;
    let mut addrs = Vec::new();
    while let Some(x) = r.next_record()? {
        addrs.push(x.addr);
    }
    let mut regions = std::collections::HashSet::new();
    let (present, _, sites) = present_categories(
        spec,
        addrs.iter().copied().inspect(|&a| {
            if a.wrapping_sub(spec.markers.0) >= spec.markers.1 {
                regions.insert(a >> REGION_SHIFT);
            }
        }),
    );
    drop(addrs);
    let mut sampling = e.sampling;
    if let Some(s) = sampling.as_mut() {
        let all = r.totals().and_then(|t| t.regions_seen).unwrap_or(0);
        let x = regions
            .iter()
            .filter(|&&g| s.regions.region_sampled(g))
            .count() as u64;
        s.realized = realized_ratio(x, all, s.regions.rate());
    }
    let opts = AnalysisOptions {
        gigantic: true,
        mthp: vec![16],
        sites,
        threads: 1,
        ..Default::default()
    };
    let (result, _, _) = analyze_stream_sampled(
        spec,
        geometry,
        &present,
        &opts,
        sampling,
        items()?.into_iter(),
    );
    Ok(result.mappings.len())
}

pub fn model_figures(quick: bool, runs: usize) -> Result<ModelReport> {
    use hugetune_model::mrc::{eval, synth};
    use hugetune_model::reuse::ReuseEngine;
    use hugetune_model::shards::{Sampler, Shards, MODULUS};
    let art = crate::artifacts::find()?;
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string();
    let n = if quick { 1_000_000 } else { 40_000_000 };
    let pages: u64 = if quick { 1 << 16 } else { 4 << 20 };
    let mut timings = Vec::new();
    for (name, trace) in [
        (
            format!("exact, uniform, {} pages", count_pages(pages)),
            synth::uniform(n, pages, 1),
        ),
        (
            format!("exact, zipf s=1, {} pages", count_pages(pages)),
            synth::zipf(n, pages, 1.0, 2),
        ),
    ] {
        timings.push(time_runs(&name, n, runs, || {
            let mut e = ReuseEngine::new();
            let mut s = 0u64;
            e.access_batch(&trace, |d| s = s.wrapping_add(d.unwrap_or(1)));
            s
        }));
    }
    let trace = synth::uniform(n, 1 << 20, 3);
    let mut shards_bytes = 0;
    for (name, rate, short) in [
        ("SHARDS filter, fixed-rate R=0.01", Some(0.01), true),
        ("SHARDS filter, fixed-rate R=0.001", Some(0.001), true),
        ("SHARDS filter, fixed-size 8K", None, true),
        ("SHARDS filter, fixed-size 8K, no time samples", None, false),
    ] {
        timings.push(time_runs(name, n, runs, || {
            let mut s = match rate {
                Some(r) => Shards::with_rate(1, 0, r),
                None => Shards::fixed_size(Sampler::new(1, MODULUS, 0), 8192),
            };
            if !short {
                s = s.without_short_range();
            }
            s.process(&trace);
            if rate.is_none() && short {
                shards_bytes = s.heap_bytes();
            }
            s.sampled_keys() as u64
        }));
    }
    drop(trace);
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-bench.")?;
    let synth_n = if quick { 500_000 } else { 20_000_000 };
    let mut inputs: Vec<(String, Vec<u64>)> = eval::shapes(synth_n)
        .into_iter()
        .map(|(s, t)| (s.to_string(), t))
        .collect();
    let real: [(&str, &[&str]); 2] = if quick {
        [
            (
                "hugetune-work randmem 64M",
                &[
                    "randmem",
                    "--size",
                    "64M",
                    "--random-pct",
                    "50",
                    "--accesses",
                    "200000",
                ],
            ),
            (
                "hugetune-work chase 64M",
                &["chase", "--size", "64M", "--accesses", "200000"],
            ),
        ]
    } else {
        [
            (
                "hugetune-work randmem 1G, 50 % random",
                &[
                    "randmem",
                    "--size",
                    "1G",
                    "--random-pct",
                    "50",
                    "--accesses",
                    "4000000",
                ],
            ),
            (
                "hugetune-work chase 512M",
                &["chase", "--size", "512M", "--accesses", "4000000"],
            ),
        ]
    };
    for (name, args) in real {
        stages::note(format!("bench model: tracing {name}"));
        inputs.push((name.to_string(), work_pages(&art.work, args, dir.path())?));
    }
    let mut shapes = Vec::new();
    for (shape, trace) in inputs {
        stages::note(format!("bench model: accuracy on {shape}"));
        let exact = eval::exact_histogram(&trace);
        shapes.push(ModelShape {
            shape,
            refs: trace.len() as u64,
            shards: eval::shards_figures(&trace, &exact, 8192, 0, 1),
            shards_2m_regions: eval::shards_figures(&trace, &exact, 8192, 9, 1),
            statstack: eval::PERIODS
                .iter()
                .map(|&p| (p, eval::statstack_mae(&trace, &exact, p, 1)))
                .collect(),
        });
    }
    // The analysis end to end: the synthetic program with a 4 GiB block (a 1 GiB
    // block for --quick), complete and sampled at R = 0.01, on this machine's
    // TLB geometry.
    let geometry = hugetune_host::machine::machine(None)?.tlb.geometry;
    let (an, block) = if quick {
        (1_000_000, 1u64 << 30)
    } else {
        (20_000_000, 4u64 << 30)
    };
    let (spec, addrs) = hugetune_model::stream::synth::program(an, block, 7);
    let mut analysis = Vec::new();
    let mut analysis_mappings = 0;
    for (name, rate) in [
        ("analysis end to end, complete stream", None),
        ("analysis end to end, sampled R = 0.01", Some(0.01)),
    ] {
        let e = encode(&addrs, spec.markers, rate)?;
        let mut err = None;
        analysis.push(time_runs(name, an, runs, || {
            match analyze_encoded(&e, &spec, &geometry) {
                Ok(m) => {
                    analysis_mappings = m;
                    m as u64
                }
                Err(x) => {
                    err = Some(x);
                    0
                }
            }
        }));
        if let Some(x) = err {
            return Err(x);
        }
    }
    Ok(ModelReport {
        runs,
        quick,
        load_before,
        timings,
        shards_bytes,
        shapes,
        analysis,
        analysis_mappings,
    })
}

fn count_pages(p: u64) -> String {
    if p >= 1 << 20 {
        format!("{} M", p >> 20)
    } else {
        format!("{} K", p >> 10)
    }
}

/// One table row per timing: name, references, M/s on CPU time and on wall time.
fn timing_rows(ts: &[ModelTiming]) -> Vec<Vec<String>> {
    ts.iter()
        .map(|t| {
            vec![
                t.name.clone(),
                format!("{:.1} M", t.refs as f64 / 1e6),
                format!("{:.1} M/s", t.refs_per_s_cpu / 1e6),
                format!("{:.1} M/s", t.refs_per_s_wall / 1e6),
            ]
        })
        .collect()
}

pub fn render_model(r: &ModelReport) -> String {
    let rows = timing_rows(&r.timings);
    let acc: Vec<Vec<String>> = r
        .shapes
        .iter()
        .map(|s| {
            let f = &s.shards;
            let mut row = vec![
                s.shape.clone(),
                format!("{}", f.distinct),
                format!("{:.4}", f.fixed_size),
                format!("{:.4}", f.fixed_rate),
                format!(
                    "{:.4} / {:.4} / {:.4}",
                    f.fixed_size_shards, f.fixed_size_adj, f.fixed_size_unadjusted
                ),
                format!("{:.4}", s.shards_2m_regions.fixed_size),
            ];
            row.extend(s.statstack.iter().map(|(_, m)| format!("{m:.4}")));
            row
        })
        .collect();
    let mut head = vec![
        "trace (4 KB pages)",
        "pages",
        "SHARDS 8K",
        "fixed-rate",
        "8K, SHARDS alone: count-adj / adj / none",
        "8K, 2 MB regions",
    ];
    let periods: Vec<String> = hugetune_model::mrc::eval::PERIODS
        .iter()
        .map(|p| format!("StatStack 1/{p}"))
        .collect();
    head.extend(periods.iter().map(|s| s.as_str()));
    let an_rows = timing_rows(&r.analysis);
    format!(
        "reuse-distance engines: throughput in input references per second (thread CPU time and wall time),\n\
         medians of {} runs; load average before: {}\n{}\n\
         SHARDS fixed-size engine (s_max 8192): {} KB\n\
         accuracy: MAE of the miss-ratio curve against exact over 25 TLB capacities 16..65536\n\
         (SHARDS 8K and fixed-rate: short distances from time samples; StatStack 1/P: time samples alone)\n{}\n\
         analysis end to end (decode, categorize, resolve, {} mappings' engines; two passes, one thread),\n\
         in input references of the complete stream per second (docs/model.md §3.1)\n{}\n",
        r.runs,
        r.load_before,
        table(&["engine", "refs", "refs/s (CPU)", "refs/s (wall)"], &rows),
        r.shards_bytes / 1024,
        table(&head, &acc),
        r.analysis_mappings,
        table(&["analysis", "input refs", "refs/s (CPU)", "refs/s (wall)"], &an_rows)
    )
}
