//! `bench categories` (seed 001, fig. 4): workloads whose data sit in static,
//! heap-small and heap-large; every base mapping of each (all small, one
//! category large, all large, at every page size the machine has) predicted by
//! the model and timed, interleaved; predicted against measured ranking and the
//! ranking error. Each workload is one `hugetune rank` (crates/hugetune/src/cmd/
//! rank.rs), which profiles it with QEMU and holds the pools its mappings need.

use super::output::{self, SuiteReport};
use super::{emit, select, Opts, SuiteRun};
use crate::cmd::rank::{self, RankReport};
use crate::stages::RefSource;
use crate::Ctx;
use anyhow::{bail, Result};
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use hugetune_render::table;
use serde_json::json;
use std::ffi::OsString;

/// (name, category of its data, hugetune-work arguments).
pub fn workloads(quick: bool) -> Vec<(&'static str, &'static str, String)> {
    let (s, acc) = if quick {
        ("8M", 100_000)
    } else {
        ("256M", 8_000_000)
    };
    vec![
        (
            "randmem-static",
            "static",
            format!("randmem --place static --size {s} --random-pct 100 --accesses {acc}"),
        ),
        (
            "gups-heap-small",
            "heap-small",
            format!("gups --place heap-small --size {s} --accesses {acc}"),
        ),
        (
            "chase-heap-large",
            "heap-large",
            format!("chase --place heap-large --size {s} --accesses {}", acc / 2),
        ),
    ]
}

/// The last CPU this process may use, where it has more than one.
fn own_cpu() -> Option<usize> {
    let cpus = hugetune_capture::runner::allowed_cpus();
    (cpus.len() > 1).then(|| *cpus.last().unwrap_or(&0))
}

pub fn run(ctx: &Ctx, o: &Opts) -> Result<()> {
    if !o.configs.is_empty() {
        bail!("bench categories takes no --configs: its configurations are every base mapping the model predicts");
    }
    let ws = select(
        workloads(o.quick),
        &o.workloads,
        |w| w.0,
        "workload",
        "categories",
    )?;
    let mut sr = SuiteRun::begin(
        "categories",
        "seed 001 fig. 4 (time of every base mapping of workloads with static, heap-small and heap-large data; predicted against measured ranking, ranking error)",
    );
    let art = crate::artifacts::find()?;
    let runs = o.runs();
    let mut reports: Vec<serde_json::Value> = Vec::new();
    if hugetune_capture::qemu::require_qemu().is_err() {
        sr.missing.push(super::config::Missing {
            what: "categories".into(),
            reason: "qemu-x86_64 is not installed (apt-get install qemu-user): the model's profiles come from it".into(),
        });
    } else if !super::state::is_root() {
        sr.missing.push(super::config::Missing {
            what: "categories".into(),
            reason: "not root: the hugetlb mappings need pools set under the kernel-state lock"
                .into(),
        });
    } else {
        for (name, cat, args) in &ws {
            let mut command: Vec<OsString> = vec![art.work.clone().into_os_string()];
            command.extend(args.split_whitespace().map(OsString::from));
            let a = rank::Args {
                runs: runs as u32,
                // Full size: more rounds while a measured PMB is uncertain by
                // more than 10 points, and the command alone on the last CPU
                // (as experiments/ranking.py runs rank).
                max_runs: (!o.quick).then_some(3 * runs as u32),
                pmb_ci: 10.0,
                cpu: if o.quick { None } else { own_cpu() },
                refs: RefSource::Qemu,
                bundle: None,
                rate: None,
                simulate: false,
                // The suite compares 2 MB / 1 GB mappings (mTHP: ranking.py).
                mthp: Some("none".into()),
                name: Some(name.to_string()),
                json: true,
                command,
            };
            crate::stages::note(format!("categories: {name} (data in {cat})"));
            match rank::execute(ctx, &a) {
                Ok(r) => reports.push(json!({"workload": name, "category": cat, "rank": r})),
                Err(e) => {
                    sr.notes.push(format!("{name}: rank failed: {e:#}"));
                    reports.push(
                        json!({"workload": name, "category": cat, "error": format!("{e:#}")}),
                    );
                }
            }
        }
    }
    let errors: Vec<f64> = reports
        .iter()
        .filter_map(|r| r["rank"]["ranking_error"].as_f64())
        .collect();
    let agree = reports
        .iter()
        .filter(|r| r["rank"]["best_agrees"].as_bool() == Some(true))
        .count();
    let extra = json!({
        "rankings": reports,
        "mean_ranking_error": if errors.is_empty() { None } else { Some(errors.iter().sum::<f64>() / errors.len() as f64) },
        "best_agrees": agree,
    });
    let r = sr.finish(None, o.quick, runs, vec![], vec![], extra);
    emit(&r, o, &text_extra(&r), html(&r))
}

fn rank_of(v: &serde_json::Value) -> Option<RankReport> {
    serde_json::from_value(v["rank"].clone()).ok()
}

fn rows(r: &RankReport) -> Vec<Vec<String>> {
    r.mappings
        .iter()
        .map(|m| {
            vec![
                m.label.clone(),
                format!("{:.0}%", m.predicted_pmb),
                format!("{:.0}%", m.measured_pmb),
                format!("{:.2}x", m.predicted_speedup),
                format!("{:.2}x", m.measured_speedup),
                format!(
                    "{} [{}, {}]",
                    output::num(m.measured_median_s),
                    output::num(m.measured_min_s),
                    output::num(m.measured_max_s)
                ),
                hugetune_render::bytes(m.huge_bytes),
            ]
        })
        .collect()
}

const HEADERS: [&str; 7] = [
    "mapping",
    "PMB predicted",
    "PMB measured",
    "speedup predicted",
    "speedup measured",
    "wall s, median [min, max]",
    "huge (library)",
];

fn text_extra(r: &SuiteReport) -> String {
    let mut s = String::new();
    for x in r.extra["rankings"].as_array().into_iter().flatten() {
        let name = x["workload"].as_str().unwrap_or("?");
        match rank_of(x) {
            Some(rk) => {
                s += &format!(
                    "\n{name} (data in {}): ranking error {:.1} %, best predicted mapping {} the best measured\n",
                    x["category"].as_str().unwrap_or("?"),
                    rk.ranking_error,
                    if rk.best_agrees { "is" } else { "is NOT" }
                );
                s += &table(&HEADERS, &rows(&rk));
                s += "\n";
            }
            None => s += &format!("\n{name}: {}\n", x["error"].as_str().unwrap_or("no result")),
        }
    }
    if let Some(e) = r.extra["mean_ranking_error"].as_f64() {
        s += &format!(
            "\nmean ranking error {e:.1} % over {} workloads; best mapping agrees on {}\n",
            r.extra["rankings"].as_array().map_or(0, |a| a.len()),
            r.extra["best_agrees"]
        );
    }
    s
}

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    let ranks: Vec<(String, String, RankReport)> = r.extra["rankings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| {
            Some((
                x["workload"].as_str()?.to_string(),
                x["category"].as_str()?.to_string(),
                rank_of(x)?,
            ))
        })
        .collect();
    if !ranks.is_empty() {
        p.push_heading("Predicted against measured PMB (seed 001 fig. 4)");
        p.push_svg(svg::render(
            &Chart {
                title: "every base mapping: predicted PMB against measured PMB".into(),
                x_label: "predicted % of maximal benefit".into(),
                y_label: "measured % of maximal benefit".into(),
                kind: ChartKind::Scatter,
                series: ranks
                    .iter()
                    .map(|(n, _, rk)| {
                        Series::new(
                            n.clone(),
                            rk.mappings
                                .iter()
                                .map(|m| (m.predicted_pmb, m.measured_pmb))
                                .collect(),
                        )
                    })
                    .collect(),
                ..Default::default()
            },
            640,
            480,
        ));
        if let Some(e) = r.extra["mean_ranking_error"].as_f64() {
            p.push_paragraph(&format!(
                "Mean ranking error (mean |predicted PMB - measured PMB| over a workload's mappings, averaged over the workloads): {e:.1} %."
            ));
        }
    }
    for (n, cat, rk) in &ranks {
        p.push_heading(&format!("{n} (data in {cat})"));
        let labels: Vec<String> = rk.mappings.iter().map(|m| m.label.clone()).collect();
        let pred: Vec<(f64, f64)> = rk
            .mappings
            .iter()
            .enumerate()
            .map(|(i, m)| {
                (
                    i as f64,
                    rk.mappings[0].measured_median_s / m.predicted_speedup.max(1e-9),
                )
            })
            .collect();
        let meas: Vec<(f64, f64)> = rk
            .mappings
            .iter()
            .enumerate()
            .map(|(i, m)| (i as f64, m.measured_median_s))
            .collect();
        let spread = rk
            .mappings
            .iter()
            .enumerate()
            .map(|(i, m)| (i as f64, m.measured_min_s, m.measured_max_s))
            .collect();
        p.push_svg(svg::render(
            &Chart {
                title: format!("{n}: time per base mapping, predicted and measured"),
                x_label: "mapping".into(),
                y_label: "wall seconds".into(),
                kind: ChartKind::Bar,
                series: vec![
                    Series::new("predicted", pred),
                    Series::new("measured", meas).with_spread(spread),
                ],
                x_categories: labels,
                ..Default::default()
            },
            860,
            380,
        ));
        p.push_table(&HEADERS, &rows(rk));
        p.push_paragraph(&format!(
            "Ranking error {:.1} %; the best predicted mapping {} the best measured.",
            rk.ranking_error,
            if rk.best_agrees { "is" } else { "is not" }
        ));
    }
    output::push_notes(&mut p, r);
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_workload_per_category() {
        let w = workloads(false);
        let cats: Vec<&str> = w.iter().map(|x| x.1).collect();
        assert_eq!(cats, ["static", "heap-small", "heap-large"]);
        for (_, cat, args) in w {
            assert!(args.contains(&format!("--place {cat}")), "{args}");
        }
    }
}
