//! A suite's report: one JSON object (`--json`, `SUITE.json`), a terminal
//! summary, and a self-contained HTML page with SVG plots (`SUITE.html`).

use super::config::{Config, Missing};
use super::run::{ConfigResult, WorkloadResult};
use super::state::{KernelSnapshot, MachineFacts};
use super::stats::Spread;
use anyhow::{Context, Result};
use hugetune_render::html::Page;
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use hugetune_render::{bytes, table};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteReport {
    pub suite: String,
    /// The seed experiment it reproduces, in words.
    pub reproduces: String,
    pub quick: bool,
    /// Timed runs per configuration (after one untimed warm-up round).
    pub runs: usize,
    /// Seconds since the epoch at the start.
    pub started: u64,
    pub elapsed_s: f64,
    pub machine: MachineFacts,
    pub configs: Vec<Config>,
    pub workloads: Vec<WorkloadResult>,
    /// Configurations or workloads that could not run, and why.
    pub missing: Vec<Missing>,
    pub notes: Vec<String>,
    pub kernel_before: KernelSnapshot,
    pub kernel_after: KernelSnapshot,
    /// `kernel_after == kernel_before`.
    pub restored: bool,
    /// Suite-specific results (curves, verdicts, rankings).
    pub extra: serde_json::Value,
}

pub fn fmt_spread(s: &Option<Spread>) -> String {
    match s {
        Some(s) => format!("{} [{}, {}]", num(s.median), num(s.min), num(s.max)),
        None => "-".into(),
    }
}

/// Seconds or counts with 3 significant digits.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        hugetune_render::count(v)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// One row per configuration of a workload.
pub fn config_rows(w: &WorkloadResult) -> Vec<Vec<String>> {
    w.results
        .iter()
        .map(|r| {
            vec![
                r.config.clone(),
                fmt_spread(&r.primary),
                r.speedup.map_or("-".into(), |s| format!("{s:.2}x")),
                fmt_spread(&r.wall),
                fmt_spread(&r.sys),
                r.minor_faults
                    .map_or("-".into(), |s| hugetune_render::count(s.median)),
                format!(
                    "{} ({}, {:.0} %)",
                    bytes(r.huge_bytes),
                    r.backing,
                    r.huge_fraction * 100.0
                ),
                pool_text(r),
                if r.ok {
                    format!("{} runs", r.runs.len())
                } else {
                    format!("{} of {} failed", r.failures, r.runs.len())
                },
            ]
        })
        .collect()
}

pub const CONFIG_HEADERS: [&str; 9] = [
    "configuration",
    "primary s, median [min, max]",
    "speedup",
    "wall s",
    "system s",
    "minor faults",
    "huge (proof)",
    "pool pages",
    "runs",
];

fn pool_text(r: &ConfigResult) -> String {
    let v: Vec<String> = r
        .pool_pages
        .iter()
        .filter(|&&(_, n)| n > 0)
        .map(|&(kb, n)| format!("{n} x {}", if kb >= 1 << 20 { "1G" } else { "2M" }))
        .collect();
    if v.is_empty() {
        "0".into()
    } else {
        v.join(" + ")
    }
}

/// The terminal summary: per workload a table, then flags, skipped
/// configurations, missing peers and notes.
pub fn render_text(r: &SuiteReport, extra: &str) -> String {
    let mut s = format!(
        "hugetune bench {}{}: {}\n{} timed runs per configuration after an untimed warm-up round, interleaved; medians [min, max]\n{}\n",
        r.suite,
        if r.quick { " --quick (figures not meaningful)" } else { "" },
        r.reproduces,
        r.runs,
        r.machine.pmu_note
    );
    for w in &r.workloads {
        s += &format!(
            "\n{} ({}; primary measure: {})\n",
            w.name, w.about, w.primary
        );
        if !w.results.is_empty() {
            s += &table(&CONFIG_HEADERS, &config_rows(w));
            s += "\n";
        }
        for res in &w.results {
            for f in &res.flags {
                s += &format!("  ! {f}\n");
            }
        }
        for m in &w.skipped {
            s += &format!("  skipped {}: {}\n", m.what, m.reason);
        }
    }
    s += extra;
    if !r.missing.is_empty() {
        s += "\nmissing:\n";
        for m in &r.missing {
            s += &format!("  {}: {}\n", m.what, m.reason);
        }
    }
    for n in &r.notes {
        s += &format!("note: {n}\n");
    }
    s += &format!(
        "kernel settings {} (THP {}, pools {:?}); load average before {}, after {}\n",
        if r.restored {
            "restored"
        } else {
            "NOT RESTORED"
        },
        r.kernel_after.thp_enabled,
        r.kernel_after.pools,
        r.machine.load_before,
        r.machine.load_after
    );
    s
}

/// Bars of the median primary measure per configuration, with the spread.
pub fn config_chart(w: &WorkloadResult, title: &str) -> String {
    let names: Vec<String> = w.results.iter().map(|r| r.config.clone()).collect();
    let mut pts = Vec::new();
    let mut spread = Vec::new();
    for (i, r) in w.results.iter().enumerate() {
        if let Some(p) = r.primary {
            pts.push((i as f64, p.median));
            spread.push((i as f64, p.min, p.max));
        }
    }
    let chart = Chart {
        title: title.into(),
        x_label: "configuration".into(),
        y_label: format!("{} seconds (median, min-max)", w.primary),
        kind: ChartKind::Bar,
        series: vec![Series::new(w.primary.clone(), pts).with_spread(spread)],
        x_categories: names,
        ..Default::default()
    };
    svg::render(&chart, 760, 360)
}

/// One measure of a configuration's runs.
pub type Measure = dyn Fn(&ConfigResult) -> Option<Spread>;

/// Grouped bars of several measures per configuration (e.g. user / system time).
pub fn measures_chart(
    w: &WorkloadResult,
    title: &str,
    y_label: &str,
    measures: &[(&str, &Measure)],
) -> String {
    let series = measures
        .iter()
        .map(|(name, f)| {
            let mut pts = Vec::new();
            let mut sp = Vec::new();
            for (i, r) in w.results.iter().enumerate() {
                if let Some(s) = f(r) {
                    pts.push((i as f64, s.median));
                    sp.push((i as f64, s.min, s.max));
                }
            }
            Series::new(*name, pts).with_spread(sp)
        })
        .collect();
    svg::render(
        &Chart {
            title: title.into(),
            x_label: "configuration".into(),
            y_label: y_label.into(),
            kind: ChartKind::Bar,
            series,
            x_categories: w.results.iter().map(|r| r.config.clone()).collect(),
            ..Default::default()
        },
        760,
        360,
    )
}

/// The page's head: what it reproduces, the machine, PMU, what is missing.
pub fn page_head(r: &SuiteReport) -> Page {
    let mut p = Page::new(&format!("hugetune bench {}", r.suite));
    p.push_paragraph(&format!(
        "Reproduces {}. {} timed runs per configuration after an untimed warm-up round, configurations interleaved (rotated order each round); medians with the min-max range.{}",
        r.reproduces,
        r.runs,
        if r.quick {
            " Quick mode: small sizes, figures not meaningful."
        } else {
            ""
        }
    ));
    let m = &r.machine;
    p.push_paragraph(&format!(
        "Machine: {} ({} CPUs, {} memory), kernel {}, glibc {}, THP {} (defrag {}). {}. Load average before {}, after {}. Kernel settings {} afterwards.",
        m.cpu,
        m.cpus,
        bytes(m.mem_total_kb * 1024),
        m.kernel,
        m.glibc,
        m.thp_enabled,
        m.thp_defrag,
        m.pmu_note,
        m.load_before,
        m.load_after,
        if r.restored { "restored" } else { "NOT restored" }
    ));
    if !r.missing.is_empty() {
        p.push_heading("Missing");
        p.push_table(
            &["what", "why"],
            &r.missing
                .iter()
                .map(|m| vec![m.what.clone(), m.reason.clone()])
                .collect::<Vec<_>>(),
        );
    }
    p.push_heading("Configurations");
    p.push_table(
        &["configuration", "what it is"],
        &r.configs
            .iter()
            .map(|c| vec![c.name.clone(), c.about.clone()])
            .collect::<Vec<_>>(),
    );
    p
}

/// Per workload: the bar chart, the table and the flags.
pub fn push_workloads(p: &mut Page, r: &SuiteReport) {
    for w in &r.workloads {
        p.push_heading(&w.name);
        p.push_paragraph(&format!("{} Command: {}", w.about, w.command.join(" ")));
        if !w.results.is_empty() {
            p.push_svg(config_chart(
                w,
                &format!("{}: {} time per configuration", w.name, w.primary),
            ));
            p.push_table(&CONFIG_HEADERS, &config_rows(w));
        }
        let mut flags: Vec<String> = w
            .results
            .iter()
            .flat_map(|r| r.flags.iter().cloned())
            .collect();
        flags.extend(
            w.skipped
                .iter()
                .map(|m| format!("skipped {}: {}", m.what, m.reason)),
        );
        if !flags.is_empty() {
            p.push_preformatted(&flags.join("\n"));
        }
    }
}

pub fn push_notes(p: &mut Page, r: &SuiteReport) {
    if !r.notes.is_empty() {
        p.push_heading("Notes");
        p.push_preformatted(&r.notes.join("\n"));
    }
}

/// Writes `SUITE.json` and `SUITE.html` into `dir`.
pub fn write(dir: &Path, r: &SuiteReport, html: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let j = dir.join(format!("{}.json", r.suite));
    std::fs::write(&j, serde_json::to_string_pretty(r)?)
        .with_context(|| format!("writing {}", j.display()))?;
    let h = dir.join(format!("{}.html", r.suite));
    std::fs::write(&h, html).with_context(|| format!("writing {}", h.display()))?;
    crate::stages::note(format!("wrote {} and {}", j.display(), h.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(1.23456), "1.235");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(0.01234), "0.0123");
        assert_eq!(num(2_500_000.0), "2.50 M");
        assert_eq!(fmt_spread(&None), "-");
        assert_eq!(
            fmt_spread(&Spread::of(&[1.0, 2.0, 3.0])),
            "2.000 [1.000, 3.000]"
        );
    }
}
