//! `hugetune report`'s content: what a profile predicted, what its runs measured
//! and what a ranking experiment compared, gathered from the database rows into one
//! serializable value (`--json` prints it as is), and rendered as a terminal
//! summary or a self-contained HTML page with SVG plots (`plots`).
//!
//! Rows written before a field existed (the profile's miss-ratio curves, a run's
//! mapping name or validation details) are not errors: the field is `None` and the
//! page says "not recorded".

use super::plots;
use hugetune_model::stats::median_finite as median;
use hugetune_render::html::Page;
use hugetune_render::{bytes, secs, table};
use hugetune_store::query::{DirectiveRow, ProfileRow, RunRow};
use serde::{Deserialize, Serialize};

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub title: String,
    pub profile: Option<ProfileView>,
    /// One per analysed mapping, best predicted saving first.
    pub mappings: Vec<MappingView>,
    /// The cheapest mapping that gets most of the benefit (see `plots::knee`).
    pub knee: Option<Knee>,
    /// Miss ratio against TLB entries per page size; `None`: not recorded.
    pub mrc: Option<Vec<MrcCurve>>,
    pub runs: Vec<RunView>,
    /// Predicted against measured time per mapping: one set from the runs, one per
    /// ranking experiment given.
    pub compared: Vec<ComparedSet>,
    /// What is missing, in words.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileView {
    pub id: i64,
    pub program: String,
    pub build_id: Option<String>,
    pub command: Vec<String>,
    /// "hostname, cpu, kernel"; `None` when the machine was not stored.
    pub machine: Option<String>,
    pub created: String,
    pub refs: Option<u64>,
    pub ref_source: Option<String>,
    pub native_s: Option<f64>,
    pub significance_passes: Option<bool>,
    pub tlb_misses_per_s: Option<f64>,
    pub faults_per_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MappingView {
    pub mapping: String,
    /// The mapping with its backings (the model's label), or the name again.
    pub label: String,
    pub base: bool,
    pub pmb: f64,
    pub predicted_speedup: f64,
    pub saving_ms: f64,
    pub hugetlb_pages: u64,
    pub hugetlb_1g_pages: u64,
    pub thp_pages: u64,
    pub confidence: f64,
    /// The newest run of this mapping with an A/B comparison.
    pub measured_speedup: Option<f64>,
    pub verdict: Option<String>,
    pub run_id: Option<i64>,
}

impl MappingView {
    /// Huge pages of any size the mapping needs (the x axis of seed 001 fig. 3).
    pub fn huge_pages(&self) -> u64 {
        self.hugetlb_pages + self.hugetlb_1g_pages + self.thp_pages
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    pub mapping: String,
    pub huge_pages: u64,
    pub pmb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MrcCurve {
    /// "4k", "2m", "1g".
    pub page_size: String,
    /// (TLB entries, miss ratio).
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub id: i64,
    pub profile_id: Option<i64>,
    pub program: String,
    pub created: String,
    /// The directive's mapping the run applied; `None`: not recorded.
    pub mapping: Option<String>,
    pub verdict: String,
    pub speedup: Option<f64>,
    pub baseline_s: Vec<f64>,
    pub optimized_s: Vec<f64>,
    pub baseline_median_s: Option<f64>,
    pub optimized_median_s: Option<f64>,
    /// One-sided Mann-Whitney p-value of "optimized is faster"; `None`: not recorded.
    pub p_gain: Option<f64>,
    pub huge_bytes_backed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedSet {
    /// "runs" or "rank: <workload>".
    pub source: String,
    pub mappings: Vec<Compared>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// The group's label: the mapping (and the run it comes from).
    pub label: String,
    /// The measured all-small median the prediction is scaled from.
    pub baseline_s: f64,
    pub predicted_s: f64,
    pub measured_s: f64,
    pub predicted_speedup: f64,
    pub measured_speedup: f64,
}

impl Compared {
    /// Predicted time: the measured all-small median over the predicted speedup
    /// (the model predicts ratios; the baseline is the same for both bars).
    pub fn new(label: String, baseline_s: f64, predicted_speedup: f64, measured_s: f64) -> Self {
        Compared {
            label,
            baseline_s,
            predicted_s: baseline_s / predicted_speedup,
            measured_s,
            predicted_speedup,
            measured_speedup: baseline_s / measured_s,
        }
    }
}

fn profile_view(p: &ProfileRow) -> ProfileView {
    let s = &p.summary;
    ProfileView {
        id: p.id,
        program: p.program_path.clone(),
        build_id: (!p.build_id.is_empty()).then(|| p.build_id.clone()),
        command: p.args.clone(),
        machine: p
            .machine
            .as_ref()
            .map(|m| format!("{}, {}, kernel {}", m.hostname, m.cpu, m.kernel)),
        created: p.created.clone(),
        refs: s["refs"].as_u64(),
        ref_source: s["ref_source"].as_str().map(String::from),
        native_s: s["native_s"].as_f64(),
        significance_passes: s["significance"]["passes"].as_bool(),
        tlb_misses_per_s: s["significance"]["tlb_misses_per_s"].as_f64(),
        faults_per_s: s["significance"]["faults_per_s"].as_f64(),
    }
}

/// `summary["mrc"]`: `{"4k": [[entries, miss_ratio], ...], ...}`; `None` when
/// absent or not of that shape.
fn mrc(summary: &serde_json::Value) -> Option<Vec<MrcCurve>> {
    let m = summary.get("mrc")?.as_object()?;
    let mut out = Vec::new();
    for (size, pts) in m {
        let points: Option<Vec<(f64, f64)>> = pts
            .as_array()?
            .iter()
            .map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
            .collect();
        out.push(MrcCurve {
            page_size: size.clone(),
            points: points?,
        });
    }
    // Small pages first: 4k, 2m, 1g (then anything else by name).
    let rank = |s: &str| ["4k", "2m", "1g"].iter().position(|x| *x == s).unwrap_or(3);
    out.sort_by(|a, b| {
        rank(&a.page_size)
            .cmp(&rank(&b.page_size))
            .then(a.page_size.cmp(&b.page_size))
    });
    (!out.is_empty()).then_some(out)
}

fn run_view(r: &RunRow) -> RunView {
    // `details.validation` is the `Validation`; rows from before it was nested
    // hold the Validation itself as the details.
    let v = match r.details.get("validation") {
        Some(v) => v,
        None => &r.details,
    };
    RunView {
        id: r.id,
        profile_id: r.profile_id,
        program: r.program_path.clone(),
        created: r.created.clone(),
        mapping: r.plan["mapping"].as_str().map(String::from),
        verdict: r.verdict.clone(),
        speedup: r.speedup,
        baseline_median_s: median(&r.baseline_s),
        optimized_median_s: median(&r.optimized_s),
        baseline_s: r.baseline_s.clone(),
        optimized_s: r.optimized_s.clone(),
        p_gain: v["p_gain"].as_f64(),
        huge_bytes_backed: r.huge_bytes_backed,
    }
}

/// The directive a run applied: the one named by `plan.mapping`; where several
/// share the name (the same categories on hugetlb and on THP), the one whose
/// assignments are the plan's, else the best predicted of them.
fn applied(directives: &[DirectiveRow], r: &RunRow) -> Option<usize> {
    let name = r.plan["mapping"].as_str()?;
    let named = || {
        directives
            .iter()
            .enumerate()
            .filter(|(_, d)| d.mapping == name)
    };
    named()
        .find(|(_, d)| r.plan.get("assignments") == Some(&d.assignments))
        .or_else(|| named().next())
        .map(|(i, _)| i)
}

impl Report {
    /// The report of a profile (if any), its directives and runs.
    pub fn assemble(
        profile: Option<&ProfileRow>,
        directives: &[DirectiveRow],
        runs: &[RunRow],
    ) -> Report {
        let mut notes = Vec::new();
        let applied: Vec<Option<usize>> = runs.iter().map(|r| applied(directives, r)).collect();
        let runs: Vec<RunView> = runs.iter().map(run_view).collect();
        let mut mappings: Vec<MappingView> = directives
            .iter()
            .map(|d| MappingView {
                mapping: d.mapping.clone(),
                label: d.details["label"]
                    .as_str()
                    .unwrap_or(&d.mapping)
                    .to_string(),
                base: d.base,
                pmb: d.pmb,
                predicted_speedup: d.predicted_speedup,
                saving_ms: d.saving_ns / 1e6,
                hugetlb_pages: d.hugetlb_pages,
                hugetlb_1g_pages: d.details["hugetlb_1g_pages"].as_u64().unwrap_or(0),
                thp_pages: d.thp_pages,
                confidence: d.confidence,
                measured_speedup: None,
                verdict: None,
                run_id: None,
            })
            .collect();
        let mut compared = Vec::new();
        // Runs are oldest first: each mapping keeps its newest compared run.
        for (r, i) in runs.iter().zip(&applied) {
            if let (Some(name), None) = (&r.mapping, i) {
                notes.push(format!(
                    "run {} applied the mapping '{name}', which has no directive here",
                    r.id
                ));
            }
            let (Some(i), Some(b), Some(o)) = (*i, r.baseline_median_s, r.optimized_median_s)
            else {
                continue;
            };
            let m = &mut mappings[i];
            m.measured_speedup = r.speedup;
            m.verdict = Some(r.verdict.clone());
            m.run_id = Some(r.id);
            compared.push(Compared::new(
                format!("{} (run {})", m.label, r.id),
                b,
                m.predicted_speedup,
                o,
            ));
        }
        let compared = if compared.is_empty() {
            vec![]
        } else {
            vec![ComparedSet {
                source: "runs".into(),
                mappings: compared,
            }]
        };
        if runs.iter().any(|r| r.mapping.is_none()) {
            notes.push(format!(
                "the mapping of run(s) {} was not recorded: they are left out of the predicted vs measured plot",
                runs.iter()
                    .filter(|r| r.mapping.is_none())
                    .map(|r| r.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mrc = profile.and_then(|p| mrc(&p.summary));
        if let Some(p) = profile {
            if mrc.is_none() {
                notes.push(format!(
                    "miss-ratio curves: not recorded in profile {}",
                    p.id
                ));
            }
            if directives.is_empty() {
                notes.push(format!("profile {} has no directives", p.id));
            }
        }
        let knee = plots::knee(&mappings);
        let title = match profile {
            Some(p) => format!("hugetune report: {}", p.program_path),
            None => match runs.first() {
                Some(r) => format!("hugetune report: {}", r.program),
                None => "hugetune report".to_string(),
            },
        };
        Report {
            title,
            profile: profile.map(profile_view),
            mappings,
            knee,
            mrc,
            runs,
            compared,
            notes,
        }
    }

    /// The terminal summary: header, one line per mapping, runs, comparisons, notes.
    pub fn terminal(&self) -> String {
        let mut s = String::new();
        if let Some(p) = &self.profile {
            s += &format!("profile {}: {}\n", p.id, p.command.join(" "));
            s += &format!("  program  {}\n", p.program);
            s += &format!(
                "  machine  {}\n",
                p.machine.as_deref().unwrap_or("not recorded")
            );
            s += &format!("  created  {}\n", p.created);
        }
        if !self.mappings.is_empty() {
            let rows: Vec<Vec<String>> = self
                .mappings
                .iter()
                .map(|m| {
                    vec![
                        m.label.clone(),
                        format!("{:.2}x", m.predicted_speedup),
                        format!("{:.0}%", m.pmb),
                        if m.hugetlb_1g_pages > 0 {
                            format!("{} + {} x 1 GB", m.hugetlb_pages, m.hugetlb_1g_pages)
                        } else {
                            m.hugetlb_pages.to_string()
                        },
                        m.thp_pages.to_string(),
                        m.measured_speedup
                            .map_or("-".into(), |x| format!("{x:.2}x")),
                        m.verdict.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            s += "\n";
            s += &table(
                &[
                    "mapping",
                    "predicted",
                    "PMB",
                    "hugetlb pages",
                    "THP pages",
                    "measured",
                    "verdict",
                ],
                &rows,
            );
            s += "\n";
        }
        if let Some(k) = &self.knee {
            s += &format!(
                "\nknee: {} ({:.0}% of the maximal benefit with {} huge pages)\n",
                k.mapping, k.pmb, k.huge_pages
            );
        }
        if !self.runs.is_empty() {
            s += "\n";
            s += &table(&RUN_HEADERS, &self.run_rows());
            s += "\n";
        }
        for set in &self.compared {
            s += &format!("\npredicted vs measured ({})\n", set.source);
            s += &table(&COMPARED_HEADERS, &compared_rows(set));
            s += "\n";
        }
        for n in &self.notes {
            s += &format!("note: {n}\n");
        }
        s.trim_start_matches('\n').to_string()
    }

    fn run_rows(&self) -> Vec<Vec<String>> {
        self.runs
            .iter()
            .map(|r| {
                vec![
                    r.id.to_string(),
                    r.mapping.clone().unwrap_or_else(|| "not recorded".into()),
                    format!("{} + {}", r.baseline_s.len(), r.optimized_s.len()),
                    r.baseline_median_s.map_or("-".into(), secs),
                    r.optimized_median_s.map_or("-".into(), secs),
                    r.speedup.map_or("-".into(), |x| format!("{x:.2}x")),
                    r.p_gain
                        .map_or("not recorded".into(), |p| format!("{p:.3}")),
                    bytes(r.huge_bytes_backed),
                    r.verdict.clone(),
                ]
            })
            .collect()
    }

    /// The self-contained HTML page.
    pub fn html(&self) -> String {
        let mut page = Page::new(&self.title);
        if let Some(p) = &self.profile {
            page.push_heading("Profile");
            let opt = |v: Option<String>| v.unwrap_or_else(|| "not recorded".into());
            page.push_table(
                &["profile", &p.id.to_string()],
                &[
                    vec!["program".into(), p.program.clone()],
                    vec!["build-id".into(), opt(p.build_id.clone())],
                    vec!["command".into(), p.command.join(" ")],
                    vec!["machine".into(), opt(p.machine.clone())],
                    vec!["created".into(), p.created.clone()],
                    vec!["references".into(), opt(p.refs.map(|r| r.to_string()))],
                    vec!["reference source".into(), opt(p.ref_source.clone())],
                    vec!["native run".into(), opt(p.native_s.map(secs))],
                    vec![
                        "significance test".into(),
                        opt(p.significance_passes.map(|ok| {
                            format!(
                                "{} ({:.0} TLB misses/s, {:.0} faults/s)",
                                if ok { "passes" } else { "fails" },
                                p.tlb_misses_per_s.unwrap_or(f64::NAN),
                                p.faults_per_s.unwrap_or(f64::NAN)
                            )
                        })),
                    ],
                ],
            );
        }
        if !self.mappings.is_empty() {
            page.push_heading("Directives");
            let rows: Vec<Vec<String>> = self
                .mappings
                .iter()
                .map(|m| {
                    vec![
                        format!("{}{}", m.label, if m.base { "" } else { " *" }),
                        format!("{:.1} ms", m.saving_ms),
                        format!("{:.1}%", m.pmb),
                        format!("{:.3}x", m.predicted_speedup),
                        m.hugetlb_pages.to_string(),
                        m.hugetlb_1g_pages.to_string(),
                        m.thp_pages.to_string(),
                        format!("{:.2}", m.confidence),
                        m.measured_speedup
                            .map_or("-".into(), |x| format!("{x:.3}x")),
                        m.verdict.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            page.push_table(
                &[
                    "mapping",
                    "saving",
                    "PMB",
                    "predicted",
                    "2 MB hugetlb",
                    "1 GB hugetlb",
                    "THP",
                    "confidence",
                    "measured",
                    "verdict",
                ],
                &rows,
            );
            page.push_paragraph("* a combined (non-base) mapping.");
            page.push_heading("PMB against huge pages needed");
            page.push_paragraph(
                "Each point is a mapping: the percentage of the maximal predicted benefit it gets \
                 against the huge pages (of any size) it needs (seed 001, fig. 3). Points up and to \
                 the left are the good bargains.",
            );
            if let Some(k) = &self.knee {
                page.push_paragraph(&format!(
                    "Knee: {} gets {:.0}% of the maximal benefit with {} huge pages.",
                    k.mapping, k.pmb, k.huge_pages
                ));
            }
            page.push_svg(plots::pmb_chart(&self.mappings, self.knee.as_ref()));
        }
        // A report of ranking experiments alone has no profile and no runs.
        let stored = self.profile.is_some() || !self.runs.is_empty();
        if stored {
            page.push_heading("Miss-ratio curves");
        }
        match &self.mrc {
            Some(curves) => {
                page.push_paragraph(
                    "The fraction of references that miss a fully associative LRU TLB of the given \
                     number of entries, per page size, from the profile's reuse distances.",
                );
                page.push_svg(plots::mrc_chart(curves));
            }
            None if stored => page.push_paragraph("Not recorded for this profile."),
            None => {}
        }
        page.push_heading("Predicted against measured time per mapping");
        if self.compared.is_empty() {
            page.push_paragraph(
                "Not recorded: no run of this profile names its mapping, and no ranking experiment \
                 (--rank) was given.",
            );
        }
        for set in &self.compared {
            page.push_paragraph(&format!(
                "From {}: the predicted time is the measured all-small median divided by the \
                 predicted speedup (seed 001, fig. 4).",
                set.source
            ));
            page.push_svg(plots::compared_chart(set));
            page.push_table(&COMPARED_HEADERS, &compared_rows(set));
        }
        if stored {
            page.push_heading("Distribution of A/B runs");
        }
        if self.runs.is_empty() {
            if stored {
                page.push_paragraph("No runs recorded.");
            }
        } else {
            page.push_paragraph(
                "Every timed run: baseline (all small pages) and optimized (the plan applied), \
                 interleaved; the bars are the medians.",
            );
            page.push_svg(plots::runs_chart(&self.runs));
            page.push_table(&RUN_HEADERS, &self.run_rows());
        }
        for n in &self.notes {
            page.push_paragraph(&format!("Note: {n}"));
        }
        page.render()
    }
}

const RUN_HEADERS: [&str; 9] = [
    "run",
    "mapping",
    "runs (A + B)",
    "baseline median",
    "optimized median",
    "speedup",
    "p (gain)",
    "huge backed",
    "verdict",
];

const COMPARED_HEADERS: [&str; 6] = [
    "mapping",
    "all-small",
    "predicted",
    "measured",
    "predicted speedup",
    "measured speedup",
];

fn compared_rows(set: &ComparedSet) -> Vec<Vec<String>> {
    set.mappings
        .iter()
        .map(|c| {
            vec![
                c.label.clone(),
                secs(c.baseline_s),
                secs(c.predicted_s),
                secs(c.measured_s),
                format!("{:.2}x", c.predicted_speedup),
                format!("{:.2}x", c.measured_speedup),
            ]
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hugetune_store::db::{NewDirective, NewRun};
    use hugetune_store::query::MachineRow;

    pub fn directive(id: i64, mapping: &str, pmb: f64, sp: f64, h: u64, t: u64) -> DirectiveRow {
        DirectiveRow {
            id,
            directive: NewDirective {
                mapping: mapping.into(),
                assignments: serde_json::json!([]),
                base: true,
                saving_ns: pmb * 1e6,
                pmb,
                predicted_speedup: sp,
                hugetlb_pages: h,
                thp_pages: t,
                confidence: 1.0,
                validations: 0,
                lost: false,
                details: serde_json::json!({"label": format!("{mapping}:label")}),
            },
        }
    }

    pub fn profile(summary: serde_json::Value) -> ProfileRow {
        ProfileRow {
            id: 3,
            program_id: 1,
            program_path: "/bin/app".into(),
            build_id: String::new(),
            machine: Some(MachineRow {
                id: 1,
                hostname: "box".into(),
                cpu: "EPYC".into(),
                kernel: "6.18".into(),
            }),
            args: vec!["app".into(), "--big".into()],
            bundle: None,
            summary,
            created: "2026-11-22T12:00:00Z".into(),
        }
    }

    pub fn run(id: i64, plan: serde_json::Value, details: serde_json::Value) -> RunRow {
        RunRow {
            id,
            program_path: "/bin/app".into(),
            created: "2026-11-22T12:10:00Z".into(),
            run: NewRun {
                program_id: 1,
                mapping: plan["mapping"].as_str().unwrap_or_default().into(),
                profile_id: Some(3),
                machine_id: None,
                args: vec!["app".into()],
                plan,
                baseline_s: vec![2.0, 2.2, 2.1],
                optimized_s: vec![1.0, 1.1, 1.05],
                speedup: Some(2.0),
                huge_bytes_backed: 1 << 30,
                verdict: "gain".into(),
                details,
            },
        }
    }

    pub fn sample() -> Report {
        let summary = serde_json::json!({
            "refs": 1000, "native_s": 2.5, "ref_source": "qemu",
            "significance": {"passes": true, "tlb_misses_per_s": 2e6, "faults_per_s": 5e3},
            "mrc": {"2m": [[1, 0.5], [64, 0.01]], "4k": [[1, 0.9], [64, 0.6], [4096, 0.1]]},
        });
        Report::assemble(
            Some(&profile(summary)),
            &[
                directive(10, "all-large", 100.0, 2.0, 600, 10),
                directive(11, "heap-large", 95.0, 1.9, 512, 0),
                directive(12, "static", 5.0, 1.05, 0, 3),
                directive(13, "all-small", 0.0, 1.0, 0, 0),
            ],
            &[
                run(
                    20,
                    serde_json::json!({"mapping": "heap-large"}),
                    serde_json::json!({"validation": {"p_gain": 0.004}}),
                ),
                run(
                    21,
                    serde_json::json!({"assignments": []}),
                    serde_json::json!({}),
                ),
            ],
        )
    }

    #[test]
    fn assembles_mappings_runs_and_comparisons() {
        let r = sample();
        assert_eq!(r.title, "hugetune report: /bin/app");
        assert_eq!(r.mappings.len(), 4);
        let hl = &r.mappings[1];
        assert_eq!(hl.label, "heap-large:label");
        assert_eq!(
            (hl.measured_speedup, hl.verdict.as_deref(), hl.run_id),
            (Some(2.0), Some("gain"), Some(20))
        );
        assert_eq!(r.mappings[0].measured_speedup, None);
        // MRC curves in page-size order.
        let mrc = r.mrc.as_ref().unwrap();
        assert_eq!(mrc[0].page_size, "4k");
        assert_eq!(mrc[0].points.len(), 3);
        assert_eq!(r.runs[0].p_gain, Some(0.004));
        assert_eq!(r.runs[0].baseline_median_s, Some(2.1));
        assert_eq!(r.runs[1].mapping, None);
        assert_eq!(r.runs[1].p_gain, None);
        // Only the run with a mapping is compared; predicted = 2.1 s / 1.9.
        assert_eq!(r.compared.len(), 1);
        let c = &r.compared[0].mappings[0];
        assert_eq!(c.label, "heap-large:label (run 20)");
        assert!((c.predicted_s - 2.1 / 1.9).abs() < 1e-12);
        assert!((c.measured_speedup - 2.0).abs() < 1e-12);
        assert!(r.notes.iter().any(|n| n.contains("run(s) 21")));
        // heap-large has 95 % for 512 pages, all-large 100 % for 610: the knee.
        assert_eq!(r.knee.as_ref().unwrap().mapping, "heap-large:label");
    }

    #[test]
    fn a_run_is_matched_to_the_backing_it_applied() {
        let mut thp = directive(14, "heap-large", 90.0, 1.8, 0, 512);
        thp.directive.assignments = serde_json::json!([["heap-large", "thp-2m"]]);
        thp.directive.details["label"] = "heap-large:thp".into();
        let mut hugetlb = directive(11, "heap-large", 95.0, 1.9, 512, 0);
        hugetlb.directive.assignments = serde_json::json!([["heap-large", "hugetlb-2m"]]);
        let ds = [hugetlb, thp];
        let plan =
            |a: serde_json::Value| serde_json::json!({"mapping": "heap-large", "assignments": a});
        let r = Report::assemble(
            None,
            &ds,
            &[run(
                1,
                plan(serde_json::json!([["heap-large", "thp-2m"]])),
                serde_json::json!({}),
            )],
        );
        assert_eq!(r.mappings[0].run_id, None);
        assert_eq!(r.mappings[1].run_id, Some(1));
        assert_eq!(r.compared[0].mappings[0].predicted_speedup, 1.8);
        // Without assignments: the best predicted of the name.
        let r = Report::assemble(
            None,
            &ds,
            &[run(
                2,
                serde_json::json!({"mapping": "heap-large"}),
                serde_json::json!({}),
            )],
        );
        assert_eq!(r.mappings[0].run_id, Some(2));
        // A name no directive has: not compared, not attributed.
        let r = Report::assemble(
            None,
            &ds,
            &[run(
                3,
                serde_json::json!({"mapping": "gone"}),
                serde_json::json!({}),
            )],
        );
        assert!(r.compared.is_empty() && r.mappings.iter().all(|m| m.run_id.is_none()));
        assert!(r
            .notes
            .iter()
            .any(|n| n.contains("run 3 applied the mapping 'gone'")));
    }

    #[test]
    fn json_round_trips_and_names_every_part() {
        let r = sample();
        let v = serde_json::to_value(&r).unwrap();
        for key in [
            "title", "profile", "mappings", "knee", "mrc", "runs", "compared", "notes",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["profile"]["machine"], "box, EPYC, kernel 6.18");
        assert_eq!(v["mappings"][1]["measured_speedup"], 2.0);
        assert_eq!(v["mrc"][1]["points"][1][0], 64.0);
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn terminal_summary_has_one_line_per_mapping() {
        let t = sample().terminal();
        assert!(t.starts_with("profile 3: app --big\n"), "{t}");
        let header = t.lines().find(|l| l.contains("hugetlb pages")).unwrap();
        for h in [
            "mapping",
            "predicted",
            "PMB",
            "THP pages",
            "measured",
            "verdict",
        ] {
            assert!(header.contains(h), "{h}");
        }
        let hl = t
            .lines()
            .find(|l| l.trim_start().starts_with("heap-large:label"))
            .unwrap();
        assert!(
            hl.contains("1.90x") && hl.contains("95%") && hl.contains("512"),
            "{hl}"
        );
        assert!(
            hl.contains("2.00x") && hl.trim_end().ends_with("gain"),
            "{hl}"
        );
        let st = t
            .lines()
            .find(|l| l.trim_start().starts_with("static:label"))
            .unwrap();
        assert!(st.trim_end().ends_with('-'), "{st}");
        assert!(t.contains("knee: heap-large:label"));
        assert!(t.contains("not recorded"));
        assert!(t.contains("predicted vs measured (runs)"));
        assert!(t.contains("note: the mapping of run(s) 21"));
    }

    #[test]
    fn old_rows_say_not_recorded() {
        let r = Report::assemble(
            Some(&profile(serde_json::json!({}))),
            &[],
            &[run(5, serde_json::json!({}), serde_json::json!({}))],
        );
        assert!(r.mrc.is_none() && r.knee.is_none() && r.compared.is_empty());
        assert!(r.notes.iter().any(|n| n.contains("miss-ratio curves")));
        assert!(r.notes.iter().any(|n| n.contains("no directives")));
        let h = r.html();
        assert!(h.contains("Not recorded for this profile."));
        assert!(h.contains("Not recorded: no run of this profile"));
        // The run distribution is still drawn.
        assert_eq!(h.matches("<svg").count(), 1);
        let t = r.terminal();
        assert!(t.contains("references") || t.contains("profile 3"));
        // A malformed curve is treated as absent, not a panic.
        let bad = profile(serde_json::json!({"mrc": {"4k": [[1, "x"]]}}));
        assert!(Report::assemble(Some(&bad), &[], &[]).mrc.is_none());
    }

    #[test]
    fn html_has_the_four_plots() {
        let h = sample().html();
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert_eq!(h.matches("<svg").count(), 4);
        assert!(!h.contains("<script"));
        for heading in [
            "PMB against huge pages needed",
            "Miss-ratio curves",
            "Predicted against measured time per mapping",
            "Distribution of A/B runs",
        ] {
            assert!(h.contains(&format!("<h2>{heading}</h2>")), "{heading}");
        }
    }

    #[test]
    fn a_ranking_alone_shows_only_its_comparisons() {
        let mut r = Report::assemble(None, &[], &[]);
        r.compared.push(ComparedSet {
            source: "rank: w".into(),
            mappings: vec![Compared::new("all-small".into(), 1.0, 1.0, 1.0)],
        });
        let h = r.html();
        assert_eq!(h.matches("<svg").count(), 1);
        assert!(!h.contains("Miss-ratio") && !h.contains("A/B runs"));
        let t = r.terminal();
        assert!(t.starts_with("predicted vs measured (rank: w)"), "{t}");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, f64::NAN, 2.0, 3.0]), Some(2.5));
    }
}
