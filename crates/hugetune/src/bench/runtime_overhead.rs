//! `hugetune bench runtime`: the runtime library's overhead. Each workload runs
//! without the library, with it inert, in record mode (with its log) and in apply
//! mode with a plan that leaves the workload's allocations alone (they are all
//! small), so the ratios are the cost of the library itself.

use crate::stages;
use anyhow::{bail, Context, Result};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_format::{env, plan};
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::stats::median;
use hugetune_render::table;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;

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
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-bench.")?;
    let plan = dir.path().join("plan");
    // Heap-large on THP: nothing here is that large, so apply mode touches nothing.
    let assignments = [(Category::HeapLarge, Backing::Thp2m)];
    std::fs::write(&plan, plan::plan_text(&assignments, 128 * 1024))?;
    let log = dir.path().join("alloc.%p.log");
    let envs: Vec<Vec<(String, String)>> = vec![
        vec![],
        vec![("LD_PRELOAD".into(), env::preload_value(&art.runtime_lib))],
        env::record_env(&env::RecordEnv {
            lib: &art.runtime_lib,
            log: Some(&log),
            summary: None,
            markers: false,
        }),
        env::apply_env(&art.runtime_lib, &plan, None, &assignments),
    ];
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut out = Vec::new();
    for (name, args) in workloads(quick) {
        let mut argv: Vec<OsString> = vec![art.work.clone().into_os_string()];
        argv.extend(args.iter().map(OsString::from));
        stages::note(format!("bench runtime: {name}"));
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
