//! `hugetune bench`: benchmarks that print figures. Timing comparisons are ratios
//! taken in one run, configurations interleaved and repeated, medians.
//!
//! Suite `model`: the reuse-distance engines of the model (docs/reuse.md):
//! throughput of the exact engine and of the SHARDS filter, SHARDS memory, and
//! the MAE of SHARDS and StatStack against exact per trace shape, real
//! `hugetune-work` traces included.
//!
//! Suite `runtime`: the runtime library's overhead. Each workload runs without the
//! library, with it inert, in record mode (with its log) and in apply mode with a
//! plan that leaves the workload's allocations alone (they are all small), so the
//! ratios are the cost of the library itself.

use crate::{pipeline, Ctx};
use anyhow::{bail, Context, Result};
use hugetune_capture::ab::median;
use hugetune_capture::launch;
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_report::table;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(clap::Subcommand)]
enum Suite {
    /// Overhead of the runtime library: none / inert / record / apply
    Runtime {
        /// Small sizes, for tests (figures are not meaningful)
        #[arg(long)]
        quick: bool,
        /// Repetitions of each configuration
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Reuse-distance engines: exact and SHARDS throughput, SHARDS memory, SHARDS
    /// and StatStack accuracy per trace shape (docs/reuse.md)
    Model {
        /// Small traces, for tests (figures are not meaningful)
        #[arg(long)]
        quick: bool,
        /// Repetitions of each timing
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Reference capture speed: native / qemu+plugin / valgrind lackey
    Capture {
        /// Small sizes, for tests (figures are not meaningful)
        #[arg(long)]
        quick: bool,
        /// Repetitions of each configuration
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let _ = ctx;
    match a.suite {
        Suite::Runtime { quick, runs, json } => {
            let r = runtime_overhead(quick, runs as usize)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", render(&r));
            }
        }
        Suite::Model { quick, runs, json } => {
            let r = model_figures(quick, runs as usize)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", render_model(&r));
            }
        }
        Suite::Capture { quick, runs, json } => {
            let r = capture_speed(quick, runs as usize)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", render_capture(&r));
            }
        }
    }
    Ok(0)
}

const CONFIGS: [&str; 4] = ["none", "inert", "record", "apply"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub config: String,
    /// Kernel-phase seconds reported by the workload, one per run.
    pub seconds: Vec<f64>,
    /// Whole-process wall time, one per run.
    pub wall_s: Vec<f64>,
    pub median_s: f64,
    pub median_wall_s: f64,
    /// Median kernel time relative to `none`.
    pub ratio: f64,
    pub wall_ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub workload: String,
    pub args: Vec<String>,
    pub results: Vec<Measured>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RuntimeReport {
    pub runs: usize,
    pub quick: bool,
    pub load_before: String,
    pub workloads: Vec<WorkloadResult>,
}

/// (name, hugetune-work arguments separated by spaces).
fn workloads(quick: bool) -> Vec<(&'static str, Vec<&'static str>)> {
    let list: &[(&'static str, &'static str)] = if quick {
        &[
            (
                "malloc, 2 threads, tiny ring",
                "malloc --threads 2 --size 32K --accesses 200000",
            ),
            ("chase, heap-small", "chase --size 4M --place heap-small"),
        ]
    } else {
        &[
            (
                "malloc, 2 threads, tiny ring",
                "malloc --threads 2 --size 32K --accesses 10000000",
            ),
            (
                "malloc, 1 thread, tiny ring",
                "malloc --threads 1 --size 32K --accesses 10000000",
            ),
            (
                "malloc, 2 threads, 64 MiB live",
                "malloc --threads 2 --size 64M --accesses 2000000",
            ),
            (
                "randmem, heap-small, 256 MiB",
                "randmem --size 256M --place heap-small",
            ),
            (
                "chase, heap-small, 256 MiB",
                "chase --size 256M --place heap-small",
            ),
            (
                "gups, 2 threads, heap-small, 256 MiB",
                "gups --size 256M --place heap-small --threads 2",
            ),
        ]
    };
    list.iter()
        .map(|&(name, args)| (name, args.split_whitespace().collect()))
        .collect()
}

fn kernel_seconds(stdout: &[u8]) -> Result<f64> {
    let v: serde_json::Value =
        serde_json::from_slice(stdout).context("the workload did not print its JSON line")?;
    v["seconds"]
        .as_f64()
        .context("no 'seconds' in the workload's output")
}

pub fn runtime_overhead(quick: bool, runs: usize) -> Result<RuntimeReport> {
    let art = crate::artifacts::find()?;
    let dir = tempfile::Builder::new()
        .prefix("hugetune-bench.")
        .tempdir()?;
    let plan = dir.path().join("plan");
    // Heap-large on THP: nothing here is that large, so apply mode touches nothing.
    let assignments = [(Category::HeapLarge, Backing::Thp2m)];
    std::fs::write(&plan, launch::plan_text(&assignments, 128 * 1024))?;
    let log = dir.path().join("alloc.%p.log");
    let envs: Vec<Vec<(String, String)>> = vec![
        vec![],
        vec![("LD_PRELOAD".into(), launch::preload_value(&art.runtime_lib))],
        launch::record_env(&launch::RecordEnv {
            lib: &art.runtime_lib,
            log: Some(&log),
            summary: None,
            markers: false,
        }),
        launch::apply_env(&art.runtime_lib, &plan, None, &assignments),
    ];
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut out = Vec::new();
    for (name, args) in workloads(quick) {
        let mut argv: Vec<OsString> = vec![art.work.clone().into_os_string()];
        argv.extend(args.iter().map(OsString::from));
        pipeline::note(format!("bench runtime: {name}"));
        let mut secs = vec![Vec::new(); CONFIGS.len()];
        let mut walls = vec![Vec::new(); CONFIGS.len()];
        // One untimed warm-up of each configuration, then interleaved repetitions.
        for rep in 0..=runs {
            for (i, env) in envs.iter().enumerate() {
                let mut spec = RunSpec::new(argv.clone());
                spec.env = env.clone();
                spec.stdout = Output::Capture;
                spec.env_remove = vec!["HUGETUNE_MODE".into(), "LD_PRELOAD".into()];
                let r = runner::run(&spec)?;
                // The record log is big; it only has to exist while it is written.
                for e in std::fs::read_dir(dir.path())?.flatten() {
                    if e.file_name().to_string_lossy().starts_with("alloc.") {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
                if r.exit_code != 0 {
                    bail!(
                        "{name} failed in configuration {} (exit {})",
                        CONFIGS[i],
                        r.exit_code
                    );
                }
                if rep > 0 {
                    secs[i].push(kernel_seconds(&r.stdout)?);
                    walls[i].push(r.wall_s);
                }
            }
        }
        let base = median(&secs[0]);
        let base_wall = median(&walls[0]);
        let results = CONFIGS
            .iter()
            .enumerate()
            .map(|(i, c)| Measured {
                config: c.to_string(),
                median_s: median(&secs[i]),
                median_wall_s: median(&walls[i]),
                ratio: median(&secs[i]) / base,
                wall_ratio: median(&walls[i]) / base_wall,
                seconds: secs[i].clone(),
                wall_s: walls[i].clone(),
            })
            .collect();
        out.push(WorkloadResult {
            workload: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            results,
        });
    }
    Ok(RuntimeReport {
        runs,
        quick,
        load_before,
        workloads: out,
    })
}

pub fn render(r: &RuntimeReport) -> String {
    let mut rows = Vec::new();
    for w in &r.workloads {
        let mut row = vec![w.workload.clone()];
        for m in &w.results {
            row.push(if m.config == "none" {
                format!("{:.3} s", m.median_s)
            } else {
                format!("{:.2}x ({:.2}x)", m.ratio, m.wall_ratio)
            });
        }
        rows.push(row);
    }
    format!(
        "runtime library overhead: kernel-phase time relative to no library (whole process in parentheses),\n\
         medians of {} interleaved runs after a warm-up; load average before: {}\n{}\n",
        r.runs,
        r.load_before,
        table(&["workload", "no library", "inert", "record", "apply (untouched)"], &rows)
    )
}

// ---------------------------------------------------------------- capture

/// The configurations of `bench capture`, in the order they run.
const CAPTURE_CONFIGS: [&str; 4] = ["native", "qemu-rate", "qemu-complete", "lackey"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureMeasured {
    pub config: String,
    /// Whole-process wall time (capture included: the stream written and checked).
    pub wall_s: Vec<f64>,
    pub median_wall_s: f64,
    /// Median relative to native.
    pub vs_native: f64,
    /// References the source saw (0 for native).
    pub refs_seen: u64,
    /// REF records written.
    pub refs_written: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureWorkload {
    pub workload: String,
    pub args: Vec<String>,
    pub results: Vec<CaptureMeasured>,
    /// lackey's median over qemu-rate's (`None` where lackey did not run it).
    pub lackey_over_qemu: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureReport {
    pub runs: usize,
    pub quick: bool,
    pub qemu_rate: f64,
    pub load_before: String,
    pub workloads: Vec<CaptureWorkload>,
}

/// (name, hugetune-work arguments, whether lackey runs it too). Lackey takes
/// 150–800× native, so it runs the short inputs only; the long inputs (a second or
/// more natively) show qemu's ratio once its start-up (about 0.2 s) no longer
/// dominates.
fn capture_workloads(quick: bool) -> Vec<(&'static str, Vec<&'static str>, bool)> {
    let list: &[(&'static str, &'static str, bool)] = if quick {
        &[
            ("chase 2 MiB", "chase --size 2M", true),
            ("randmem 2 MiB", "randmem --size 2M", true),
            ("gups 2 MiB", "gups --size 2M", true),
        ]
    } else {
        &[
            ("chase 16 MiB", "chase --size 16M", true),
            ("randmem 32 MiB", "randmem --size 32M", true),
            ("gups 16 MiB", "gups --size 16M", true),
            ("chase 256 MiB", "chase --size 256M", false),
            ("randmem 256 MiB x4", "randmem --size 256M --iters 4", false),
            ("gups 256 MiB", "gups --size 256M", false),
        ]
    };
    list.iter()
        .map(|&(name, args, lackey)| (name, args.split_whitespace().collect(), lackey))
        .collect()
}

/// Native, qemu with the plugin (fixed-rate R = 1/1024, and complete), and
/// lackey, interleaved; every capture writes and checks its stream as `record`
/// does. No runtime library: this measures the reference sources alone.
pub fn capture_speed(quick: bool, runs: usize) -> Result<CaptureReport> {
    use hugetune_capture::{lackey, qemu};
    let art = crate::artifacts::find()?;
    let qemu_bin = qemu::require_qemu()?;
    if !lackey::valgrind_available() {
        bail!("valgrind is not installed (apt-get install valgrind)");
    }
    let rate = 1.0 / 1024.0;
    let dir = tempfile::Builder::new()
        .prefix("hugetune-bench.")
        .tempdir()?;
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut out = Vec::new();
    for (name, args, with_lackey) in capture_workloads(quick) {
        let mut argv: Vec<OsString> = vec![art.work.clone().into_os_string()];
        argv.extend(args.iter().map(OsString::from));
        pipeline::note(format!("bench capture: {name}"));
        let n = CAPTURE_CONFIGS.len();
        let mut walls = vec![Vec::new(); n];
        let mut seen = vec![0u64; n];
        let mut written = vec![0u64; n];
        let stream = dir.path().join("refs");
        for rep in 0..=runs {
            for (i, config) in CAPTURE_CONFIGS.iter().enumerate() {
                if *config == "lackey" && !with_lackey {
                    continue;
                }
                let start = std::time::Instant::now();
                let (ok, s, w) = match *config {
                    "native" => {
                        let mut spec = RunSpec::new(argv.clone());
                        spec.stdout = Output::Null;
                        let r = runner::run(&spec)?;
                        (r.exit_code == 0, 0, 0)
                    }
                    "lackey" => {
                        let r = lackey::capture(
                            &argv,
                            &[],
                            &stream,
                            std::process::Stdio::null(),
                            |_, _| {},
                        )?;
                        (r.status.success(), r.refs, r.refs)
                    }
                    _ => {
                        let sampling = if *config == "qemu-rate" {
                            qemu::Sampling::Rate(rate)
                        } else {
                            qemu::Sampling::Complete
                        };
                        let r = qemu::capture(
                            &qemu::QemuSpec {
                                qemu: &qemu_bin,
                                plugin: &art.qemu_plugin,
                                argv: &argv,
                                guest_env: &[],
                                out: &stream,
                                sampling,
                                seed: 0,
                                markers: false,
                                scratch: dir.path(),
                            },
                            std::process::Stdio::null(),
                            |_, _| {},
                        )?;
                        (
                            r.status.success(),
                            r.totals.refs_seen,
                            r.totals.refs_written,
                        )
                    }
                };
                let wall = start.elapsed().as_secs_f64();
                let _ = std::fs::remove_file(&stream);
                if !ok {
                    bail!("{name} failed in configuration {config}");
                }
                if rep > 0 {
                    walls[i].push(wall);
                    seen[i] = s;
                    written[i] = w;
                }
            }
        }
        let base = median(&walls[0]);
        let results: Vec<CaptureMeasured> = CAPTURE_CONFIGS
            .iter()
            .enumerate()
            .map(|(i, c)| CaptureMeasured {
                config: c.to_string(),
                median_wall_s: median(&walls[i]),
                vs_native: median(&walls[i]) / base,
                wall_s: walls[i].clone(),
                refs_seen: seen[i],
                refs_written: written[i],
            })
            .collect();
        let lackey_over_qemu =
            with_lackey.then(|| results[3].median_wall_s / results[1].median_wall_s);
        out.push(CaptureWorkload {
            workload: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            results,
            lackey_over_qemu,
        });
    }
    Ok(CaptureReport {
        runs,
        quick,
        qemu_rate: rate,
        load_before,
        workloads: out,
    })
}

pub fn render_capture(r: &CaptureReport) -> String {
    let mut rows = Vec::new();
    for w in &r.workloads {
        let mut row = vec![w.workload.clone()];
        for m in &w.results {
            row.push(if m.config == "native" {
                format!("{:.3} s", m.median_wall_s)
            } else if m.wall_s.is_empty() {
                "not run".to_string()
            } else {
                format!("{:.3} s ({:.1}x)", m.median_wall_s, m.vs_native)
            });
        }
        row.push(
            w.lackey_over_qemu
                .map_or("-".into(), |x| format!("{x:.1}x")),
        );
        let q = &w.results[1];
        row.push(format!(
            "{:.1} M / {:.3} M",
            q.refs_seen as f64 / 1e6,
            q.refs_written as f64 / 1e6
        ));
        rows.push(row);
    }
    format!(
        "reference capture speed: whole-process wall time (x native), medians of {} interleaved runs after a warm-up;\n\
         qemu-rate samples pages at R = {}; load average before: {}\n{}\n",
        r.runs,
        r.qemu_rate,
        r.load_before,
        table(
            &[
                "workload",
                "native",
                "qemu+plugin, sampled",
                "qemu+plugin, complete",
                "valgrind lackey",
                "lackey / qemu sampled",
                "qemu refs seen / written"
            ],
            &rows
        )
    )
}

// ---------------------------------------------------------------- model

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
    pipeline::note(format!("bench model: {name}"));
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
    let mut r = hugetune_capture::refs::RefReader::new(std::io::BufReader::new(
        std::fs::File::open(&file)?,
    ))?;
    let mut keys = Vec::new();
    while let Some(x) = r.next_record()? {
        keys.push(x.addr >> 12);
    }
    std::fs::remove_file(&file)?;
    Ok(keys)
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
    let dir = tempfile::Builder::new()
        .prefix("hugetune-bench.")
        .tempdir()?;
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
        pipeline::note(format!("bench model: tracing {name}"));
        inputs.push((name.to_string(), work_pages(&art.work, args, dir.path())?));
    }
    let mut shapes = Vec::new();
    for (shape, trace) in inputs {
        pipeline::note(format!("bench model: accuracy on {shape}"));
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
    Ok(ModelReport {
        runs,
        quick,
        load_before,
        timings,
        shards_bytes,
        shapes,
    })
}

fn count_pages(p: u64) -> String {
    if p >= 1 << 20 {
        format!("{} M", p >> 20)
    } else {
        format!("{} K", p >> 10)
    }
}

pub fn render_model(r: &ModelReport) -> String {
    let rows: Vec<Vec<String>> = r
        .timings
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                format!("{:.1} M", t.refs as f64 / 1e6),
                format!("{:.1} M/s", t.refs_per_s_cpu / 1e6),
                format!("{:.1} M/s", t.refs_per_s_wall / 1e6),
            ]
        })
        .collect();
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
    format!(
        "reuse-distance engines: throughput in input references per second (thread CPU time and wall time),\n\
         medians of {} runs; load average before: {}\n{}\n\
         SHARDS fixed-size engine (s_max 8192): {} KB\n\
         accuracy: MAE of the miss-ratio curve against exact over 25 TLB capacities 16..65536\n\
         (SHARDS 8K and fixed-rate: short distances from time samples; StatStack 1/P: time samples alone)\n{}\n",
        r.runs,
        r.load_before,
        table(&["engine", "refs", "refs/s (CPU)", "refs/s (wall)"], &rows),
        r.shards_bytes / 1024,
        table(&head, &acc)
    )
}
