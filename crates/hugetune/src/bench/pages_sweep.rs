//! `bench pages-sweep` (seed 004, experiment 1): how many huge pages a
//! memory-bound process needs. randmem (100 % random accesses) over 2 GiB of
//! many small nodes, with the hugetlb pool holding 10 % … 110 % of its
//! footprint in 2 MB pages: the runtime library's arena takes pool pages chunk
//! by chunk until the pool runs dry and the rest of the data stays on 4 KB pages
//! (THP is off for the runs, so nothing else is huge). Time against pages, next
//! to the model's curve.
//!
//! Why heap-small: a single 2 GiB malloc is one block, which the library maps on
//! hugetlb pages whole or not at all (it falls back as one segment), so a budget
//! short of the block would measure "none" at every point. The arena backs its
//! 2 MB chunks one by one, which is the partial backing the seed varies.

use super::config::Config;
use super::output::{self, SuiteReport};
use super::run::{Workload, WorkloadResult};
use super::stats;
use super::{emit, Opts, SuiteRun};
use crate::stages::{self, RefOptions, RefSource};
use crate::Ctx;
use anyhow::{bail, Context, Result};
use hugetune_format::plan::PlanOptions;
use hugetune_host::machine;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::ffi::OsString;

pub fn size(quick: bool) -> u64 {
    if quick {
        16 << 20
    } else {
        2 << 30
    }
}

/// The training input the model profiles (QEMU): big enough to exceed the TLB
/// reach, small enough to trace.
pub fn training_args(quick: bool) -> Vec<String> {
    let a = if quick {
        "randmem --place heap-small --size 8M --random-pct 100 --accesses 100000"
    } else {
        "randmem --place heap-small --size 64M --random-pct 100 --accesses 1000000"
    };
    a.split_whitespace().map(String::from).collect()
}

pub fn workload(quick: bool) -> Workload {
    let s = size(quick);
    Workload::work(
        "randmem-heap-small",
        &format!(
            "memory-bound: randmem over {} MiB of 64-512 byte nodes (heap-small), 100 % random accesses",
            s >> 20
        ),
        &format!("randmem --place heap-small --size {s} --random-pct 100"),
        "kernel",
        "memory",
    )
}

/// A budget of `pages` 2 MB pages (None: the baseline, no pages) for the
/// library's arena, THP off so the rest stays on 4 KB pages.
pub fn budget_config(pct: Option<u32>, pages: u64) -> Config {
    let (name, about) = match pct {
        None => (
            "0 pages".to_string(),
            "no hugetlb pages: the arena's chunks fall back to 4 KB pages (THP off)".to_string(),
        ),
        Some(p) => (
            format!("{p}%"),
            format!("{pages} 2 MB hugetlb pages ({p} % of the footprint); the arena's chunks beyond them on 4 KB pages (THP off)"),
        ),
    };
    let mut c = Config::new(&name, &about).with_plan(
        &[(Category::HeapSmall, Backing::Hugetlb2m)],
        &PlanOptions::default(),
    );
    c.thp = Some("never".into());
    c.budget_2m = Some(pages);
    c.expects_huge = pct.is_some();
    c
}

/// The model's side of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCurve {
    pub training_command: Vec<String>,
    pub mapping: String,
    /// Speedup the model predicts for heap-small on 2 MB pages on the whole
    /// training run (for reference; the curve is the sizing rule's shape).
    pub predicted_speedup: f64,
    /// (pages, predicted PMB, predicted seconds) at each budget.
    pub points: Vec<(u64, f64, f64)>,
    pub note: String,
}

/// The model's rule for a budget short of a mapping's need (`hugetune size`,
/// crates/model/src/sizing.rs): the saving pro rata to the pages it gets. Drawn
/// between the measured time without pages `t0` and with all of them `t_full`:
/// (predicted PMB, predicted seconds) at `pages` of `need`.
pub fn pro_rata(t0: f64, t_full: f64, need: u64, pages: u64) -> (f64, f64) {
    let share = if need == 0 {
        1.0
    } else {
        (pages as f64 / need as f64).min(1.0)
    };
    (share * 100.0, t0 - share * (t0 - t_full))
}

/// Profiles the training input with QEMU and returns the model's best
/// heap-small 2 MB prediction (label, speedup).
fn model_prediction(
    ctx: &Ctx,
    quick: bool,
    dir: &std::path::Path,
) -> Result<(String, f64, Vec<String>)> {
    let art = crate::artifacts::find()?;
    let m = machine::machine(ctx.tlb.as_deref())?;
    let mut cmd: Vec<OsString> = vec![art.work.clone().into_os_string()];
    cmd.extend(training_args(quick).into_iter().map(OsString::from));
    let bundle = dir.join("training.htb");
    let refs = RefOptions {
        source: RefSource::Qemu,
        rate: None,
        max_pages: None,
        max_refs: None,
        start_rate: None,
        seed: 0,
    };
    stages::record(&art, &cmd, &bundle, &refs, ctx.tlb.as_deref(), false, None)
        .context("profiling the training input")?;
    let cost = stages::cost_model_at(&ctx.db_path, &m)?;
    let an = stages::analyze(&bundle, &m.tlb.geometry, &cost)?;
    let best = an
        .predictions
        .iter()
        .filter(|p| {
            p.assignments.len() == 1
                && p.assignments[0].0 == Category::HeapSmall
                && p.assignments[0].1.folio_bytes() == 2 << 20
        })
        .max_by(|a, b| a.saving_ns.total_cmp(&b.saving_ns));
    let Some(b) = best else {
        bail!("the model predicted no heap-small mapping on 2 MB pages");
    };
    Ok((b.label.clone(), b.predicted_speedup, stages::strings(&cmd)))
}

pub fn run(ctx: &Ctx, o: &Opts, pcts: &[u32]) -> Result<()> {
    if !o.configs.is_empty() {
        bail!("bench pages-sweep takes no --configs: its configurations are the budgets (--pcts)");
    }
    if pcts.is_empty() {
        bail!("--pcts needs at least one percentage");
    }
    let w = workload(o.quick);
    super::select(
        vec![w.clone()],
        &o.workloads,
        |w| w.name.as_str(),
        "workload",
        "pages-sweep",
    )?;
    let mut sr = SuiteRun::begin(
        "pages-sweep",
        "seed 004 experiment 1 (time of a memory-bound process against the number of hugetlb pages it may use)",
    );
    if !super::state::is_root() {
        bail!("bench pages-sweep sets hugetlb pool budgets and THP for each run: run it as root");
    }
    let scratch = hugetune_host::kernel_state::Scratch::new("hugetune-sweep.")?;
    stages::note("pages-sweep: the model's prediction from a QEMU profile of a training input");
    let model = if hugetune_capture::qemu::require_qemu().is_ok() {
        match model_prediction(ctx, o.quick, scratch.path()) {
            Ok(m) => Some(m),
            Err(e) => {
                sr.notes.push(format!("no model curve: {e:#}"));
                None
            }
        }
    } else {
        sr.notes.push(
            "no model curve: qemu-x86_64 is not installed (apt-get install qemu-user)".into(),
        );
        None
    };
    let base = budget_config(None, 0);
    let bench = sr.bench(&[&base])?;
    // The footprint, from a run without pages (not timed).
    let probe = bench.run_one(&w, &base, 0)?;
    if !probe.ok {
        bail!(
            "the workload failed without huge pages: {}",
            probe.error.unwrap_or_default()
        );
    }
    // The sampled peak can miss the top on a busy machine (the suite saw 7
    // pages for 16 MiB of nodes); the kernel's maxrss does not.
    let footprint = (probe.figures.rss + probe.figures.hugetlb).max(probe.max_rss_kb * 1024);
    let need = footprint.div_ceil(2 << 20);
    sr.notes.push(format!(
        "footprint {} (peak RSS of a run without huge pages) = {need} 2 MB pages",
        hugetune_render::bytes(footprint)
    ));
    let mut configs = vec![base];
    for (p, pages) in stats::budgets(need, pcts) {
        configs.push(budget_config(Some(p), pages));
    }
    let runs = o.runs();
    let result = bench.measure(&w, &configs, runs);
    let extra = curve(&result, need, model.as_ref());
    let r = sr.finish(Some(bench), o.quick, runs, configs, vec![result], extra);
    emit(&r, o, &text_extra(&r), html(&r))
}

/// Measured and predicted points.
fn curve(
    w: &WorkloadResult,
    need: u64,
    model: Option<&(String, f64, Vec<String>)>,
) -> serde_json::Value {
    let t0 = w.results.first().and_then(|r| r.primary).map(|s| s.median);
    let mut pages = Vec::new();
    let mut medians = Vec::new();
    for r in &w.results {
        let given = r
            .runs
            .iter()
            .filter_map(|x| x.budget_given)
            .min()
            .unwrap_or(0);
        pages.push(given);
        medians.push(r.primary.map_or(f64::NAN, |s| s.median));
    }
    let pmb = t0.map_or(vec![], |t| stats::measured_pmb(t, &medians));
    let measured: Vec<serde_json::Value> = w
        .results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "config": r.config, "pages": pages[i], "median_s": r.primary.map(|s| s.median),
                "min_s": r.primary.map(|s| s.min), "max_s": r.primary.map(|s| s.max),
                "pmb": pmb.get(i), "huge_bytes": r.huge_bytes, "pool_pages_used": r.pool_pages,
                "speedup": r.speedup,
            })
        })
        .collect();
    // The measured time with every page the workload can use: the first budget
    // at or above the need.
    let t_full = pages
        .iter()
        .zip(&medians)
        .find(|(&p, _)| p >= need)
        .map(|(_, &t)| t);
    let model = match (model, t0, t_full) {
        (Some((label, sp, cmd)), Some(t0), Some(t_full)) => Some(ModelCurve {
            training_command: cmd.clone(),
            mapping: label.clone(),
            predicted_speedup: *sp,
            points: pages
                .iter()
                .map(|&p| {
                    let (pmb, t) = pro_rata(t0, t_full, need, p);
                    (p, pmb, t)
                })
                .collect(),
            note: "the model's sizing rule (`hugetune size`, crates/model/src/sizing.rs): a budget short of a mapping's need saves pro rata to the pages it gets; drawn between the measured times without pages and with all of them. The predicted speedup is the model's for the whole training run (initialization faults included), shown for reference".into(),
        }),
        _ => None,
    };
    json!({"need_pages": need, "measured": measured, "model": model})
}

fn text_extra(r: &SuiteReport) -> String {
    let mut s = format!(
        "\nfootprint {} 2 MB pages; time against pages (measured median, PMB; model PMB, time):\n",
        r.extra["need_pages"]
    );
    let model: Vec<&serde_json::Value> = r.extra["model"]["points"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    for (i, m) in r.extra["measured"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        s += &format!(
            "  {:>8} {:>6} pages  {:>8} s  PMB {:>5}",
            m["config"].as_str().unwrap_or("?"),
            m["pages"],
            m["median_s"].as_f64().map_or("-".into(), output::num),
            m["pmb"].as_f64().map_or("-".into(), |v| format!("{v:.0}%")),
        );
        if let Some(p) = model.get(i) {
            s += &format!(
                "   model PMB {:>5}  {} s",
                p[1].as_f64().map_or("-".into(), |v| format!("{v:.0}%")),
                p[2].as_f64().map_or("-".into(), output::num)
            );
        }
        s += "\n";
    }
    if let Some(sp) = r.extra["model"]["predicted_speedup"].as_f64() {
        s += &format!(
            "model: {} predicted {:.2}x on {}\n",
            r.extra["model"]["mapping"].as_str().unwrap_or("?"),
            sp,
            r.extra["model"]["training_command"]
        );
    }
    s
}

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    let meas: Vec<&serde_json::Value> = r.extra["measured"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let mpts: Vec<&serde_json::Value> = r.extra["model"]["points"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let xy = |v: &[&serde_json::Value],
              x: &dyn Fn(&serde_json::Value) -> Option<f64>,
              y: &dyn Fn(&serde_json::Value) -> Option<f64>|
     -> Vec<(f64, f64)> { v.iter().filter_map(|q| Some((x(q)?, y(q)?))).collect() };
    let mut time_series = vec![Series::new(
        "measured",
        xy(&meas, &|q| q["pages"].as_f64(), &|q| q["median_s"].as_f64()),
    )
    .with_spread(
        meas.iter()
            .filter_map(|q| {
                Some((
                    q["pages"].as_f64()?,
                    q["min_s"].as_f64()?,
                    q["max_s"].as_f64()?,
                ))
            })
            .collect(),
    )];
    let mut pmb_series = vec![Series::new(
        "measured",
        xy(&meas, &|q| q["pages"].as_f64(), &|q| q["pmb"].as_f64()),
    )];
    if !mpts.is_empty() {
        time_series.push(Series::new(
            "model (pro rata)",
            xy(&mpts, &|q| q[0].as_f64(), &|q| q[2].as_f64()),
        ));
        pmb_series.push(Series::new(
            "model (pro rata)",
            xy(&mpts, &|q| q[0].as_f64(), &|q| q[1].as_f64()),
        ));
    }
    p.push_heading("Time against hugetlb pages (seed 004 fig. 3)");
    p.push_svg(svg::render(
        &Chart {
            title: "randmem (heap-small, 100 % random): kernel-phase time against 2 MB pages"
                .into(),
            x_label: "2 MB hugetlb pages the process may take".into(),
            y_label: "seconds (median, min-max)".into(),
            kind: ChartKind::Line,
            series: time_series,
            ..Default::default()
        },
        760,
        400,
    ));
    p.push_svg(svg::render(
        &Chart {
            title: "percentage of maximal benefit against 2 MB pages".into(),
            x_label: "2 MB hugetlb pages the process may take".into(),
            y_label: "% of maximal benefit".into(),
            kind: ChartKind::Line,
            series: pmb_series,
            ..Default::default()
        },
        760,
        400,
    ));
    if let Some(n) = r.extra["model"]["note"].as_str() {
        p.push_paragraph(&format!(
            "Model: {} predicted {:.2}x on `{}`; {n}.",
            r.extra["model"]["mapping"].as_str().unwrap_or("?"),
            r.extra["model"]["predicted_speedup"]
                .as_f64()
                .unwrap_or(f64::NAN),
            r.extra["model"]["training_command"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(" "))
                .unwrap_or_default()
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
    fn budgets_and_pro_rata() {
        let c = budget_config(Some(50), 300);
        assert_eq!(c.name, "50%");
        assert_eq!(c.budget_2m, Some(300));
        assert_eq!(c.thp.as_deref(), Some("never"));
        assert!(c
            .plan
            .as_ref()
            .unwrap()
            .text
            .contains("heap-small arena hugetlb-2m"));
        let b = budget_config(None, 0);
        assert!(!b.expects_huge && b.needs_root());
        // Half the pages: half the gain; beyond the need: all of it.
        let (pmb, t) = pro_rata(10.0, 5.0, 100, 50);
        assert_eq!(pmb, 50.0);
        assert!((t - 7.5).abs() < 1e-12);
        let (pmb, t) = pro_rata(10.0, 5.0, 100, 150);
        assert_eq!(pmb, 100.0);
        assert!((t - 5.0).abs() < 1e-12);
        assert_eq!(pro_rata(10.0, 5.0, 100, 0), (0.0, 10.0));
        assert_eq!(pro_rata(10.0, 5.0, 0, 0), (100.0, 5.0));
    }
}
