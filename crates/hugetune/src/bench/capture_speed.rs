//! `hugetune bench capture`: reference capture speed. Native, qemu with the
//! plugin (sampled and complete) and valgrind lackey on the same workloads,
//! interleaved; whole-process wall time, medians.

use crate::stages;
use anyhow::{bail, Result};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_model::stats::median;
use hugetune_render::table;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;

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
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-bench.")?;
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut out = Vec::new();
    for (name, args, with_lackey) in capture_workloads(quick) {
        let mut argv: Vec<OsString> = vec![art.work.clone().into_os_string()];
        argv.extend(args.iter().map(OsString::from));
        stages::note(format!("bench capture: {name}"));
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
                                driver: None,
                                alloc: None,
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
