//! `bench scaling` (seed 002, Noronha & Panda): OpenMP kernels shaped like NAS
//! CG, MG and SP at 1..N threads, 4 KB pages against 2 MB pages (the workload's
//! own mappings: `--page 4k`, `thp`, and `hugetlb-2m` from one pool shared by
//! all threads). Per kernel: time against threads, the huge page speedup at
//! each thread count, and the parallel speedup per page size.

use super::config::{own_page, Config};
use super::output::{self, SuiteReport};
use super::run::{Workload, WorkloadResult};
use super::stats;
use super::{drop_missing_kernels, emit, select, select_configs, Opts, SuiteRun};
use anyhow::Result;
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use serde_json::json;

pub const KERNELS: [(&str, &str); 3] = [
    ("cg", "NAS CG-like: conjugate gradient, CSR sparse matrix-vector products with random gathers"),
    ("mg", "NAS MG-like: multigrid V-cycles over a 3-D grid hierarchy (stencils, restriction, prolongation)"),
    ("sp", "NAS SP-like: scalar pentadiagonal line solves along x, y and z over a 3-D grid"),
];

pub fn size(quick: bool) -> (u64, u32) {
    if quick {
        (32 << 20, 2)
    } else {
        (1 << 30, 10)
    }
}

/// Thread counts 1..=max (powers of two above 8, and max itself).
pub fn thread_counts(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (1..=max.min(8)).collect();
    let mut t = 16;
    while t < max {
        v.push(t);
        t *= 2;
    }
    if !v.contains(&max) {
        v.push(max);
    }
    v
}

pub fn workloads(quick: bool, threads: &[u32]) -> Vec<Workload> {
    let (s, iters) = size(quick);
    let mut v = Vec::new();
    for (k, about) in KERNELS {
        for &t in threads {
            v.push(
                Workload::work(
                    &format!("{k}-t{t}"),
                    &format!("{about}; {} MiB, {t} thread(s)", s >> 20),
                    &format!("{k} --size {s} --iters {iters} --threads {t} --place heap-large"),
                    "kernel",
                    "memory",
                )
                .with_params(json!({"kernel": k, "threads": t})),
            );
        }
    }
    v
}

pub fn configs(quick: bool) -> Vec<Config> {
    let (s, _) = size(quick);
    // mg and sp keep a few arrays; a page each for alignment and slack.
    let pages = (s >> 21) + 16;
    vec![
        own_page("4k", 0, 0),
        own_page("thp", 0, 0),
        own_page("hugetlb-2m", pages, 0),
    ]
}

pub fn run(o: &Opts, max_threads: Option<u32>) -> Result<()> {
    let max = max_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    let threads = thread_counts(max);
    let mut sr = SuiteRun::begin(
        "scaling",
        "seed 002 (Noronha & Panda): OpenMP NAS CG/MG/SP-like kernels, 1..N threads, 4 KB against 2 MB pages",
    );
    let configs = select_configs(configs(o.quick), o, "scaling")?;
    let ws = select(
        workloads(o.quick, &threads),
        &o.workloads,
        |w| w.name.as_str(),
        "workload",
        "scaling",
    )?;
    let refs: Vec<&Config> = configs.iter().collect();
    let bench = sr.bench(&refs)?;
    let ws = drop_missing_kernels(ws, &bench.art.work, &mut sr.missing);
    sr.missing.dedup_by(|a, b| a.reason == b.reason);
    let runs = o.runs();
    let results: Vec<WorkloadResult> = ws
        .iter()
        .map(|w| bench.measure(w, &configs, runs))
        .collect();
    let extra = json!({"threads": threads, "curves": curves(&results)});
    let r = sr.finish(Some(bench), o.quick, runs, configs, results, extra);
    emit(&r, o, &text_extra(&r), html(&r))
}

/// Per kernel and configuration: (threads, median, min, max, huge page speedup
/// over 4 KB, parallel speedup over 1 thread, efficiency).
pub fn curves(ws: &[WorkloadResult]) -> serde_json::Value {
    let mut out = Vec::new();
    for (k, _) in KERNELS {
        let mine: Vec<&WorkloadResult> = ws
            .iter()
            .filter(|w| w.params["kernel"].as_str() == Some(k))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let configs: Vec<String> = mine[0].results.iter().map(|r| r.config.clone()).collect();
        let mut per_config = Vec::new();
        for c in &configs {
            let t1 = mine
                .iter()
                .find(|w| w.params["threads"].as_u64() == Some(1))
                .and_then(|w| w.result(c))
                .and_then(|r| r.primary)
                .map(|s| s.median);
            let points: Vec<serde_json::Value> = mine
                .iter()
                .filter_map(|w| {
                    let n = w.params["threads"].as_u64()?;
                    let r = w.result(c)?;
                    let s = r.primary?;
                    Some(json!({
                        "threads": n, "median_s": s.median, "min_s": s.min, "max_s": s.max,
                        "speedup_over_4k": r.speedup,
                        "parallel_speedup": t1.map(|t| t / s.median),
                        "efficiency": t1.map(|t| stats::efficiency(t, s.median, n as usize)),
                    }))
                })
                .collect();
            per_config.push(json!({"config": c, "points": points}));
        }
        out.push(json!({"kernel": k, "configs": per_config}));
    }
    json!(out)
}

fn text_extra(r: &SuiteReport) -> String {
    let mut s = String::from(
        "\nhuge page speedup over 4 KB (and parallel speedup over 1 thread) per thread count:\n",
    );
    for k in r.extra["curves"].as_array().into_iter().flatten() {
        for c in k["configs"].as_array().into_iter().flatten() {
            s += &format!(
                "  {:<4} {:<11}",
                k["kernel"].as_str().unwrap_or("?"),
                c["config"].as_str().unwrap_or("?")
            );
            for p in c["points"].as_array().into_iter().flatten() {
                s += &format!(
                    "  {}T: {} ({})",
                    p["threads"],
                    p["speedup_over_4k"]
                        .as_f64()
                        .map_or("-".into(), |v| format!("{v:.2}x")),
                    p["parallel_speedup"]
                        .as_f64()
                        .map_or("-".into(), |v| format!("{v:.2}x"))
                );
            }
            s += "\n";
        }
    }
    s
}

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    for k in r.extra["curves"].as_array().into_iter().flatten() {
        let name = k["kernel"].as_str().unwrap_or("?");
        let series = |f: &dyn Fn(&serde_json::Value) -> Option<f64>, spread: bool| -> Vec<Series> {
            k["configs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let pts: Vec<&serde_json::Value> =
                        c["points"].as_array().into_iter().flatten().collect();
                    let s = Series::new(
                        c["config"].as_str().unwrap_or("?"),
                        pts.iter()
                            .filter_map(|q| Some((q["threads"].as_f64()?, f(q)?)))
                            .collect(),
                    );
                    if spread {
                        s.with_spread(
                            pts.iter()
                                .filter_map(|q| {
                                    Some((
                                        q["threads"].as_f64()?,
                                        q["min_s"].as_f64()?,
                                        q["max_s"].as_f64()?,
                                    ))
                                })
                                .collect(),
                        )
                    } else {
                        s
                    }
                })
                .collect()
        };
        p.push_heading(&format!("{name}: thread scaling"));
        p.push_svg(svg::render(
            &Chart {
                title: format!("{name}: kernel-phase time against threads"),
                x_label: "OpenMP threads".into(),
                y_label: "seconds (median, min-max)".into(),
                kind: ChartKind::Line,
                series: series(&|q| q["median_s"].as_f64(), true),
                ..Default::default()
            },
            760,
            380,
        ));
        p.push_svg(svg::render(
            &Chart {
                title: format!(
                    "{name}: speedup over 4 KB pages against threads (seed 002 figs. 5-7)"
                ),
                x_label: "OpenMP threads".into(),
                y_label: "median 4 KB time / median time".into(),
                kind: ChartKind::Line,
                series: series(&|q| q["speedup_over_4k"].as_f64(), false),
                ..Default::default()
            },
            760,
            380,
        ));
    }
    output::push_workloads(&mut p, r);
    output::push_notes(&mut p, r);
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_and_workloads() {
        assert_eq!(thread_counts(1), vec![1]);
        assert_eq!(thread_counts(2), vec![1, 2]);
        assert_eq!(thread_counts(8), (1..=8).collect::<Vec<_>>());
        assert_eq!(thread_counts(40), vec![1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 40]);
        let w = workloads(true, &[1, 2]);
        assert_eq!(w.len(), 6);
        assert_eq!(w[1].name, "cg-t2");
        assert_eq!(w[1].kernel(), Some("cg"));
        let c = configs(false);
        assert_eq!(c[2].page.as_deref(), Some("hugetlb-2m"));
        assert!(c[2].pool_2m >= 512);
    }
}
