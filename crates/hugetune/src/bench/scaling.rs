//! `bench scaling` (seed 002, Noronha & Panda): OpenMP kernels shaped like NAS
//! CG, MG and SP at 1..N threads, 4 KB pages against 2 MB pages: the
//! workload's own mappings (`--page 4k`, `thp`, and `hugetlb-2m` from one pool
//! shared by all threads), and the unmodified kernel (plain malloc) through
//! the runtime library: the plan `hugetune optimize` chose for it, and
//! heap-large on hugetlb-2m forced with the shared pool (`pool hugetlb-2m N`,
//! N from a record-mode run's allocation log, as the planner sizes it) and
//! without (per-allocation pages). Per kernel: time against threads, the huge
//! page speedup at each thread count, the parallel speedup per configuration,
//! optimize's choice and why, next to seed 002's published figures. panels
//! (blocks allocated and freed over and over) is the control where the pool
//! matters.

use super::config::{own_page, Config, LibPlan, Missing, THRESHOLD};
use super::output::{self, SuiteReport};
use super::run::{Workload, WorkloadResult};
use super::stats;
use super::{drop_missing_kernels, emit, select, select_configs, Opts, SuiteRun};
use crate::cmd::optimize;
use crate::stages;
use crate::Ctx;
use anyhow::Result;
use hugetune_format::plan::PlanOptions;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use serde_json::json;
use std::ffi::OsString;

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

/// The control where the shared pool matters: blocks allocated and freed
/// again and again while the threads work (the NAS-like kernels allocate
/// their arrays once).
pub const CHURN: (&str, &str) = (
    "panels",
    "HPL-like: panels of 3-12 MiB allocated and freed (FIFO) by one thread between the threads' parallel fill and update",
);

/// panels' live memory and passes: (bytes, iters).
pub fn churn_size(quick: bool) -> (u64, u32) {
    if quick {
        (32 << 20, 2)
    } else {
        (256 << 20, 3)
    }
}

pub fn workloads(quick: bool, threads: &[u32]) -> Vec<Workload> {
    let mut v = Vec::new();
    for (k, about) in KERNELS.into_iter().chain([CHURN]) {
        let (s, iters) = if k == CHURN.0 {
            churn_size(quick)
        } else {
            size(quick)
        };
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

/// The configurations through the runtime library, on the unmodified kernel.
pub const OPTIMIZE: &str = "optimize";
pub const LIB_POOL: &str = "lib-pool";
pub const LIB_PER_ALLOC: &str = "lib-per-alloc";

/// What the library configurations of one workload apply.
#[derive(Debug, Clone, Default)]
pub struct LibPlans {
    /// optimize's plan text and the 2 MB pages it needs (None: it failed).
    pub optimize: Option<(String, u64)>,
    /// `pool hugetlb-2m N` for heap-large on hugetlb-2m (the planner's N).
    pub pool_pages: u64,
    /// Peak per-allocation 2 MB pages of heap-large on hugetlb-2m.
    pub per_alloc_pages: u64,
}

/// optimize's plan (where it ran), and heap-large on hugetlb-2m with the
/// shared pool and without. A few pages of margin for the library's fallbacks.
pub fn lib_configs(p: &LibPlans) -> Vec<Config> {
    let hl = [(Category::HeapLarge, Backing::Hugetlb2m)];
    let mut v = Vec::new();
    if let Some((text, pages)) = &p.optimize {
        let mut c = Config::new(
            OPTIMIZE,
            "the unmodified kernel (plain malloc) with the plan `hugetune optimize` chose for it, by the runtime library",
        );
        // An empty plan (no gain predicted) is meant to change nothing.
        c.expects_huge = text
            .lines()
            .any(|l| l.contains("thp-") || l.contains("hugetlb-"));
        c.plan = Some(LibPlan::from_text(text.clone()));
        c.pool_2m = if *pages > 0 { pages + 4 } else { 0 };
        v.push(c);
    }
    let mut pool = Config::new(
        LIB_POOL,
        "the unmodified kernel, heap-large on hugetlb-2m from one shared pool (`pool hugetlb-2m N`, populated at start-up) by the runtime library",
    )
    .with_plan(
        &hl,
        &PlanOptions {
            pool_2m: Some(p.pool_pages.max(1)),
            ..PlanOptions::default()
        },
    );
    pool.pool_2m = p.pool_pages.max(1) + 4;
    let mut per = Config::new(
        LIB_PER_ALLOC,
        "the unmodified kernel, heap-large on hugetlb-2m pages mapped per allocation by the runtime library",
    )
    .with_plan(&hl, &PlanOptions::default());
    per.pool_2m = p.per_alloc_pages + 4;
    v.push(pool);
    v.push(per);
    v
}

/// Seed 002's published figures (Noronha & Panda, section 4.4 and fig. 4-5),
/// next to which this suite's are read.
pub fn published() -> serde_json::Value {
    json!([
        {"kernel": "cg", "threads": 4, "machine": "dual dual-core Opteron 270", "speedup_2m_over_4k": 1.25,
         "text": "CG: about 25 % faster with 2M pages at 4 threads on the Opteron 270"},
        {"kernel": "sp", "threads": 4, "machine": "dual dual-core Opteron 270", "speedup_2m_over_4k": 1.20,
         "text": "SP: 20 % at 4 threads on the Opteron 270"},
        {"kernel": "sp", "threads": 8, "machine": "dual dual-core Xeon, hyperthreading", "speedup_2m_over_4k": 1.13,
         "text": "SP: 13 % at 8 threads (SMT) on the Xeon"},
        {"kernel": "mg", "threads": 4, "machine": "dual dual-core Opteron 270", "speedup_2m_over_4k": 1.17,
         "text": "MG: about 17 % at 4 threads on the Opteron 270"},
        {"kernel": "cg, sp, mg", "threads": 4, "machine": "dual dual-core Opteron 270", "dtlb_miss_reduction": 10.0,
         "text": "DTLB misses about 10x fewer with 2M pages for CG, SP and MG (OProfile, fig. 5)"}
    ])
}

pub fn run(ctx: &Ctx, o: &Opts, max_threads: Option<u32>) -> Result<()> {
    let max = max_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    let threads = thread_counts(max);
    let mut sr = SuiteRun::begin(
        "scaling",
        "seed 002 (Noronha & Panda): OpenMP NAS CG/MG/SP-like kernels, 1..N threads, 4 KB against 2 MB pages, own mappings and unmodified through optimize and the runtime library, with the shared pool and without",
    );
    // Checks the names given (the library configurations included).
    let mut all = configs(o.quick);
    all.extend(lib_configs(&LibPlans {
        optimize: Some((String::new(), 0)),
        ..LibPlans::default()
    }));
    let wanted: Vec<String> = select_configs(all, o, "scaling")?
        .into_iter()
        .map(|c| c.name)
        .collect();
    let ws = select(
        workloads(o.quick, &threads),
        &o.workloads,
        |w| w.name.as_str(),
        "workload",
        "scaling",
    )?;
    let art = crate::artifacts::find()?;
    let ws = drop_missing_kernels(ws, &art.work, &mut sr.missing);
    // optimize and the sizing runs first: optimize takes the kernel-state
    // lock itself to grow the pool for its runs.
    let mut per_workload: Vec<Vec<Config>> = Vec::new();
    let mut chosen = Vec::new();
    let scratch = hugetune_host::kernel_state::Scratch::new("hugetune-scaling.")?;
    for w in &ws {
        let argv: Vec<OsString> = w
            .command(&art.work)
            .into_iter()
            .map(OsString::from)
            .collect();
        let mut plans = LibPlans::default();
        let mut entry = json!({"workload": w.name});
        if wanted.iter().any(|n| n == LIB_POOL || n == LIB_PER_ALLOC) {
            match stages::sizing_run(&art, &argv, None) {
                Ok(s) => {
                    plans.pool_pages = s.heap_large_pool_pages(THRESHOLD);
                    plans.per_alloc_pages = s.heap_large_pages;
                    entry["pool_pages"] = json!(plans.pool_pages);
                    entry["per_alloc_pages"] = json!(plans.per_alloc_pages);
                }
                Err(e) => sr.missing.push(Missing {
                    what: format!("{LIB_POOL} and {LIB_PER_ALLOC} on {}", w.name),
                    reason: format!("the record-mode sizing run failed: {e:#}"),
                }),
            }
        }
        if wanted.iter().any(|n| n == OPTIMIZE) {
            let opts = optimize::Options::for_bench(
                argv.clone(),
                argv.clone(),
                super::optimize_runs(o.quick),
                super::state::is_root(),
                scratch.path().join(format!("{}.htb", w.name)),
            );
            stages::note(format!("scaling: hugetune optimize on {}", w.name));
            match optimize::execute(ctx, &opts) {
                Ok(r) => {
                    entry["optimize"] = json!({
                        "plan_text": r.plan.text, "reasons": r.plan.reasons,
                        "pool": r.plan.pool, "hugetlb_pages": r.plan.hugetlb_pages,
                        "speedup": r.speedup, "verdict": r.verdict,
                        "predicted_speedup": r.chosen_prediction.as_ref().map(|c| c.predicted_speedup),
                    });
                    plans.optimize = Some((r.plan.text.clone(), r.plan.hugetlb_pages));
                }
                Err(e) => {
                    sr.missing.push(Missing {
                        what: format!("{OPTIMIZE} on {}", w.name),
                        reason: format!("hugetune optimize failed: {e:#}"),
                    });
                    entry["optimize"] = json!({"error": format!("{e:#}")});
                }
            }
        }
        let mut cs = configs(o.quick);
        if w.kernel() == Some(CHURN.0) {
            // panels has no mapping of its own (`--page` is ignored): only
            // the library can put its panels on huge pages.
            cs.retain(|c| c.name == "4k");
        }
        let failed_sizing = entry["pool_pages"].is_null();
        cs.extend(
            lib_configs(&plans)
                .into_iter()
                .filter(|c| !(failed_sizing && (c.name == LIB_POOL || c.name == LIB_PER_ALLOC))),
        );
        cs.retain(|c| wanted.contains(&c.name));
        per_workload.push(cs);
        chosen.push(entry);
    }
    let refs: Vec<&Config> = per_workload.iter().flatten().collect();
    let bench = sr.bench(&refs)?;
    sr.missing.dedup_by(|a, b| a.reason == b.reason);
    let runs = o.runs();
    // The suite's configuration list: the longest one (every workload's is a
    // prefix-preserving selection of the same names).
    let configs = per_workload
        .iter()
        .max_by_key(|c| c.len())
        .cloned()
        .unwrap_or_else(|| configs(o.quick));
    let results: Vec<WorkloadResult> = ws
        .iter()
        .zip(&per_workload)
        .map(|(w, cs)| bench.measure(w, cs, runs))
        .collect();
    let extra = json!({
        "threads": threads, "curves": curves(&results), "plans": chosen,
        "published": published(),
    });
    let r = sr.finish(Some(bench), o.quick, runs, configs, results, extra);
    emit(&r, o, &text_extra(&r), html(&r))
}

/// Per kernel and configuration: (threads, median, min, max, huge page speedup
/// over 4 KB, parallel speedup over 1 thread, efficiency).
pub fn curves(ws: &[WorkloadResult]) -> serde_json::Value {
    let mut out = Vec::new();
    for (k, _) in KERNELS.into_iter().chain([CHURN]) {
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
    let tail = plans_text(r);
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
    s + &tail
}

/// optimize's choice per workload (the pool or not, and why), the pool the
/// forced configuration had, and seed 002's figures.
fn plans_text(r: &SuiteReport) -> String {
    let mut s = String::new();
    for p in r.extra["plans"].as_array().into_iter().flatten() {
        let name = p["workload"].as_str().unwrap_or("?");
        if let Some(n) = p["pool_pages"].as_u64() {
            s += &format!(
                "  {name}: {LIB_POOL} had `pool hugetlb-2m {n}`, {LIB_PER_ALLOC} peaks at {} pages\n",
                p["per_alloc_pages"]
            );
        }
        let o = &p["optimize"];
        if let Some(e) = o["error"].as_str() {
            s += &format!("  {name}: optimize failed: {e}\n");
            continue;
        }
        if o.is_null() {
            continue;
        }
        let plan: Vec<&str> = o["plan_text"]
            .as_str()
            .unwrap_or("")
            .lines()
            .filter(|l| !l.starts_with("hugetune-plan") && !l.starts_with("threshold"))
            .collect();
        s += &format!(
            "  {name}: optimize planned {} ({}, {:.2}x validated)\n",
            if plan.is_empty() {
                "nothing".to_string()
            } else {
                plan.join("; ")
            },
            o["verdict"].as_str().unwrap_or("?"),
            o["speedup"].as_f64().unwrap_or(f64::NAN)
        );
        if let Some(why) = o["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l.as_str())
            .find(|l| l.starts_with("pool vs per-allocation"))
        {
            s += &format!("    {why}\n");
        }
    }
    if !s.is_empty() {
        s = format!("\nthrough the runtime library (unmodified kernels):\n{s}");
    }
    s += "\nseed 002 (Noronha & Panda), published:\n";
    for p in r.extra["published"].as_array().into_iter().flatten() {
        s += &format!("  {}\n", p["text"].as_str().unwrap_or("?"));
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
        assert_eq!(w.len(), 8);
        assert_eq!(w[1].name, "cg-t2");
        assert_eq!(w[7].name, "panels-t2");
        assert_eq!(w[7].kernel(), Some("panels"));
        assert_eq!(w[1].kernel(), Some("cg"));
        let c = configs(false);
        assert_eq!(c[2].page.as_deref(), Some("hugetlb-2m"));
        assert!(c[2].pool_2m >= 512);
    }

    /// The unmodified kernel through the library: optimize's plan as written,
    /// and heap-large on hugetlb-2m with the pool and without.
    #[test]
    fn library_configurations_force_the_pool_and_leave_it_out() {
        let plans = LibPlans {
            optimize: Some((
                "hugetune-plan 1\nthreshold 131072\nheap-large thp-2m\n".into(),
                0,
            )),
            pool_pages: 20,
            per_alloc_pages: 16,
        };
        let c = lib_configs(&plans);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [OPTIMIZE, LIB_POOL, LIB_PER_ALLOC]);
        assert!(c.iter().all(|c| c.page.is_none()), "no own mapping");
        assert_eq!(c[0].pool_2m, 0);
        assert!(c[0].expects_huge);
        let text = |i: usize| c[i].plan.as_ref().unwrap().text.clone();
        assert!(text(0).contains("heap-large thp-2m"));
        assert!(
            text(1).contains("pool hugetlb-2m 20\n") && text(1).contains("heap-large hugetlb-2m")
        );
        assert_eq!(c[1].pool_2m, 24);
        assert!(!text(2).contains("pool ") && text(2).contains("heap-large hugetlb-2m"));
        assert_eq!(c[2].pool_2m, 20);
        // optimize failed: its configuration is left out.
        let c = lib_configs(&LibPlans {
            optimize: None,
            ..plans
        });
        assert_eq!(c.len(), 2);
        assert!(published().as_array().unwrap().len() >= 4);
    }
}
