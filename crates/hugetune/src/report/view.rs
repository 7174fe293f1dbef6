//! `hugetune report`'s content: what a profile predicted, what its runs measured
//! and what a ranking experiment compared, gathered from the database rows into one
//! serializable value (`--json` prints it as is), and rendered as a terminal
//! summary or a self-contained HTML page with SVG plots (`plots`).
//!
//! The page opens with a verdict card: the plan the report recommends (`PlanView`,
//! chosen by `choose_plan`: a validated gain first, else the knee, else the best
//! predicted mapping, else keep 4 KB pages), what it needs, what it was predicted
//! and measured to gain and the commands that apply it; every plot highlights it.
//!
//! Rows written before a field existed (the profile's miss-ratio curves, a run's
//! mapping name or validation details) are not errors: the field is `None` and the
//! page says "not recorded". A directive no validation has touched has no
//! confidence to show: it reads "not validated", not the stored 1.0.

use super::plots;
use hugetune_model::stats::median_finite as median;
use hugetune_render::html::{Card, Page, Tone};
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
    /// What to do: the verdict card at the top of the page.
    pub plan: PlanView,
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
    /// Validations that updated `confidence`; 0: it is the initial 1.0, not evidence.
    #[serde(default)]
    pub validations: u64,
    /// Hosts whose validations make `confidence` (their mean), and the
    /// spread of their own confidences (min, max).
    #[serde(default)]
    pub hosts: usize,
    #[serde(default)]
    pub spread: Option<(f64, f64)>,
    /// Barred: some host's latest validation measured a loss.
    #[serde(default)]
    pub lost: bool,
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
    /// The label of the directive the run applied (see `applied`); `None`: none found.
    #[serde(default)]
    pub label: Option<String>,
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

/// The plan the report recommends, and how to apply it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    /// The directive's label; `None`: keep 4 KB pages.
    pub label: Option<String>,
    /// How it was chosen: "validated" (the newest run that measured a
    /// significant gain applied it), "knee", "best" (highest PMB), or "none".
    pub basis: String,
    /// What to do, in words: the headline of the card.
    pub action: String,
    /// Why, in words.
    pub why: String,
    pub hugetlb_pages: u64,
    pub hugetlb_1g_pages: u64,
    pub thp_pages: u64,
    pub pmb: Option<f64>,
    pub predicted_speedup: Option<f64>,
    /// The newest A/B run of the plan: its speedup, id, verdict and p-value.
    pub measured_speedup: Option<f64>,
    pub run_id: Option<i64>,
    pub run_verdict: Option<String>,
    pub p_gain: Option<f64>,
    /// What applies it for good, each with a caption.
    pub commands: Vec<PlanCommand>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanCommand {
    pub caption: String,
    pub command: String,
}

/// The parts of a mapping's label, `category:backing` each (`all-small` has none).
pub fn label_parts(label: &str) -> Vec<(&str, &str)> {
    label
        .split_whitespace()
        .filter_map(|t| t.rsplit_once(':'))
        .filter(|(_, b)| *b != "4k")
        .collect()
}

/// A backing as the model's labels name it (`hugetlb`, `hugetlb-1g`, `thp`,
/// `thp-64k`), in words.
pub fn backing_words(b: &str) -> String {
    match b {
        "hugetlb" | "hugetlb-2m" => "2 MB hugetlb pages".into(),
        "hugetlb-1g" => "1 GB hugetlb pages".into(),
        "thp" | "thp-2m" => "2 MB THP".into(),
        b => match b.strip_prefix("thp-") {
            Some(size) => format!("{} THP", size.to_uppercase().replace('K', " KB")),
            None => b.to_string(),
        },
    }
}

/// "heap-large on 2 MB hugetlb pages, static on 2 MB THP".
pub fn plan_words(label: &str) -> String {
    let parts = label_parts(label);
    if parts.is_empty() {
        return label.to_string();
    }
    parts
        .iter()
        .map(|(c, b)| format!("{c} on {}", backing_words(b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verdicts after which a mapping is not recommended again without a new
/// validation (`validate` bars a loss from automatic use too).
fn measured_bad(m: &MappingView) -> bool {
    matches!(m.verdict.as_deref(), Some("loss") | Some("broke"))
}

/// The plan to recommend: the mapping of the newest run that measured a gain;
/// else, where the significance test passes, the knee, or the highest PMB (fewest
/// pages on a tie) among the mappings not measured to lose that are predicted to
/// save at least `DEFAULT_MIN_GAIN` of the run time (the planner's bar); else none.
pub fn choose_plan(
    profile: Option<&ProfileRow>,
    mappings: &[MappingView],
    runs: &[RunView],
    knee: Option<&Knee>,
) -> PlanView {
    let min_speedup = 1.0 / (1.0 - crate::stages::DEFAULT_MIN_GAIN);
    let validated = runs
        .iter()
        .rev()
        .filter(|r| r.verdict == "gain")
        .find_map(|r| {
            let i = mappings
                .iter()
                .position(|m| Some(&m.label) == r.label.as_ref())?;
            Some((i, r))
        });
    let significance = profile.and_then(|p| p.summary["significance"]["passes"].as_bool());
    let usable = |m: &&MappingView| {
        m.pmb.is_finite()
            && m.pmb > 0.0
            && m.huge_pages() > 0
            && !measured_bad(m)
            && m.predicted_speedup >= min_speedup
    };
    let (chosen, basis, why): (Option<&MappingView>, &str, String) = if let Some((i, r)) = validated
    {
        let m = &mappings[i];
        (
            Some(m),
            "validated",
            format!(
                "run {} measured it {} faster than 4 KB pages (verdict gain{})",
                r.id,
                r.speedup.map_or("-".into(), |x| format!("{x:.2}x")),
                r.p_gain.map_or(String::new(), |p| format!(", p = {p:.3}"))
            ),
        )
    } else if significance == Some(false) {
        (
            None,
            "none",
            "the profile fails the significance test: too few TLB misses and page faults \
             for huge pages to matter"
                .into(),
        )
    } else {
        let ok: Vec<&MappingView> = mappings.iter().filter(usable).collect();
        let at_knee = knee.and_then(|k| ok.iter().find(|m| m.label == k.mapping).copied());
        let best = ok.iter().copied().max_by(|a, b| {
            a.pmb
                .total_cmp(&b.pmb)
                .then(b.huge_pages().cmp(&a.huge_pages()))
        });
        match (at_knee, best) {
            (Some(m), _) => (
                Some(m),
                "knee",
                format!(
                    "the knee: {:.0} % of the maximal predicted benefit for {} huge pages",
                    m.pmb,
                    m.huge_pages()
                ),
            ),
            (None, Some(m)) => (
                Some(m),
                "best",
                format!(
                    "the highest predicted benefit ({:.0} % of the maximum; no knee stands out)",
                    m.pmb
                ),
            ),
            (None, None) if mappings.is_empty() => {
                (None, "none", "no predictions in this report".into())
            }
            (None, None) => (
                None,
                "none",
                format!(
                    "no mapping is predicted to save {:.0} % of the run time without a measured loss",
                    crate::stages::DEFAULT_MIN_GAIN * 100.0
                ),
            ),
        }
    };
    let Some(m) = chosen else {
        return PlanView {
            label: None,
            basis: basis.into(),
            action: "Keep 4 KB pages".into(),
            why,
            hugetlb_pages: 0,
            hugetlb_1g_pages: 0,
            thp_pages: 0,
            pmb: None,
            predicted_speedup: None,
            measured_speedup: None,
            run_id: None,
            run_verdict: None,
            p_gain: None,
            commands: vec![],
        };
    };
    let run = m
        .run_id
        .and_then(|id| runs.iter().find(|r| r.id == id))
        .filter(|_| basis != "validated")
        .or(validated.map(|(_, r)| r));
    let cmd = profile.map_or_else(
        || "PROGRAM ARGS".to_string(),
        |p| {
            crate::stages::display_cmd(
                &p.args
                    .iter()
                    .map(std::ffi::OsString::from)
                    .collect::<Vec<_>>(),
            )
        },
    );
    let mut commands = Vec::new();
    if m.hugetlb_pages > 0 {
        commands.push(PlanCommand {
            caption: format!(
                "Reserve {} pages of 2 MB (on top of those other programs hold; \
                 hugetune size -- CMD prints the setting for boot):",
                m.hugetlb_pages
            ),
            // Added to what is reserved: a plain `sysctl -w` would set the total
            // and take pages from programs that hold some.
            command: format!(
                "echo $(( $(cat /proc/sys/vm/nr_hugepages) + {} )) | sudo tee /proc/sys/vm/nr_hugepages",
                m.hugetlb_pages
            ),
        });
    }
    if m.hugetlb_1g_pages > 0 {
        commands.push(PlanCommand {
            caption: format!(
                "Reserve {} pages of 1 GB (best at boot: hugepagesz=1G hugepages={}):",
                m.hugetlb_1g_pages, m.hugetlb_1g_pages
            ),
            command: format!(
                "f=/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages; \
                 echo $(( $(cat $f) + {} )) | sudo tee $f",
                m.hugetlb_1g_pages
            ),
        });
    }
    commands.push(PlanCommand {
        caption: "Run the program with it (hugetune plans from this database for the pages \
                  free at start):"
            .into(),
        command: format!("hugetune run -- {cmd}"),
    });
    commands.push(PlanCommand {
        caption:
            "Or deploy it to a systemd service (a drop-in that preloads the runtime \
                  library with the plan and reserves its pages at boot; --dry-run shows the files):"
                .into(),
        command: "sudo hugetune service install UNIT".into(),
    });
    if basis != "validated" {
        commands.insert(
            0,
            PlanCommand {
                caption: "Validate it first (interleaved A/B runs):".into(),
                command: format!("hugetune validate -- {cmd}"),
            },
        );
    }
    PlanView {
        label: Some(m.label.clone()),
        basis: basis.into(),
        action: format!("Put {}", plan_words(&m.label)),
        why,
        hugetlb_pages: m.hugetlb_pages,
        hugetlb_1g_pages: m.hugetlb_1g_pages,
        thp_pages: m.thp_pages,
        pmb: Some(m.pmb),
        predicted_speedup: Some(m.predicted_speedup),
        measured_speedup: run.and_then(|r| r.speedup),
        run_id: run.map(|r| r.id),
        run_verdict: run.map(|r| r.verdict.clone()),
        p_gain: run.and_then(|r| r.p_gain),
        commands,
    }
}

impl PlanView {
    /// "512 x 2 MB hugetlb (1.0 GiB), 1100 THP folios", or "none".
    pub fn pages_text(&self) -> String {
        let mut v = Vec::new();
        if self.hugetlb_pages > 0 {
            v.push(format!(
                "{} x 2 MB hugetlb ({} reserved)",
                self.hugetlb_pages,
                bytes(self.hugetlb_pages << 21)
            ));
        }
        if self.hugetlb_1g_pages > 0 {
            v.push(format!(
                "{} x 1 GB hugetlb ({} reserved)",
                self.hugetlb_1g_pages,
                bytes(self.hugetlb_1g_pages << 30)
            ));
        }
        if self.thp_pages > 0 {
            v.push(format!(
                "{} THP folios (from free memory, nothing reserved)",
                self.thp_pages
            ));
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    pub fn measured_text(&self) -> String {
        match (self.measured_speedup, self.run_id) {
            (Some(x), Some(id)) => format!(
                "{x:.2}x in run {id} ({}{})",
                self.run_verdict.as_deref().unwrap_or("-"),
                self.p_gain
                    .map_or(String::new(), |p| format!(", p = {p:.3}"))
            ),
            _ => "not validated yet".into(),
        }
    }

    /// The verdict card.
    pub fn card(&self) -> Card {
        let mut facts = vec![("Why".to_string(), self.why.clone())];
        if let Some(l) = &self.label {
            facts.insert(0, ("Plan".into(), l.clone()));
            facts.push(("Pages needed".into(), self.pages_text()));
            facts.push((
                "Predicted".into(),
                format!(
                    "{:.2}x faster ({:.0} % of the maximal benefit)",
                    self.predicted_speedup.unwrap_or(f64::NAN),
                    self.pmb.unwrap_or(f64::NAN)
                ),
            ));
            facts.push(("Measured".into(), self.measured_text()));
        }
        let tone = match (self.label.is_some(), self.basis.as_str()) {
            (true, "validated") => Tone::Good,
            (true, _) => Tone::Neutral,
            (false, _) => Tone::Bad,
        };
        Card {
            headline: self.action.clone(),
            tone,
            facts,
            commands: self
                .commands
                .iter()
                .map(|c| (c.caption.clone(), c.command.clone()))
                .collect(),
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
        label: None,
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
        let mut runs: Vec<RunView> = runs.iter().map(run_view).collect();
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
                validations: d.validations,
                hosts: d.hosts.len(),
                spread: d
                    .hosts
                    .iter()
                    .map(|h| (h.confidence, h.confidence))
                    .reduce(|(a, b), (c, e)| (a.min(c), b.max(e))),
                lost: d.lost,
                measured_speedup: None,
                verdict: None,
                run_id: None,
            })
            .collect();
        let mut compared = Vec::new();
        for (r, i) in runs.iter_mut().zip(&applied) {
            r.label = i.map(|i| mappings[i].label.clone());
        }
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
        let plan = choose_plan(profile, &mappings, &runs, knee.as_ref());
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
            plan,
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
        if self.profile.is_some() || !self.mappings.is_empty() {
            let pl = &self.plan;
            s += &format!("\nverdict: {}\n", pl.action);
            if let Some(l) = &pl.label {
                s += &format!("  plan      {l}\n");
                s += &format!("  pages     {}\n", pl.pages_text());
                s += &format!(
                    "  predicted {:.2}x ({:.0}% of the maximal benefit)\n",
                    pl.predicted_speedup.unwrap_or(f64::NAN),
                    pl.pmb.unwrap_or(f64::NAN)
                );
                s += &format!("  measured  {}\n", pl.measured_text());
            }
            s += &format!("  why       {}\n", pl.why);
            for c in &pl.commands {
                s += &format!("  $ {}\n", c.command);
            }
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

    /// The self-contained HTML page: the verdict card, the plots (each with the
    /// plan highlighted), then the tables behind them.
    pub fn html(&self) -> String {
        let mut page = Page::new(&self.title);
        page.push_card(self.plan.card());
        let plan = self.plan.label.as_deref();
        let plan_note = match plan {
            Some(l) => format!(" The plan ({l}) is ringed and labelled."),
            None => String::new(),
        };
        if !self.mappings.is_empty() {
            page.push_heading("PMB against huge pages needed");
            let (drawn, left_out) = plots::pmb_drawn(&self.mappings);
            page.push_paragraph(&format!(
                "Each point is a mapping: the percentage of the maximal predicted benefit it gets \
                 against the huge pages (of any size) it needs (seed 001, fig. 3); colour is the \
                 page size, shape whether it maps one category or several; hover a point for its \
                 name. The dashed line joins the mappings no cheaper one beats: up and to the left \
                 are the bargains.{plan_note}{}{}",
                match &self.knee {
                    Some(k) => format!(
                        " Knee: {} gets {:.0}% of the maximal benefit with {} huge pages.",
                        k.mapping, k.pmb, k.huge_pages
                    ),
                    None => " No knee: the benefit grows about in proportion to the pages.".into(),
                },
                if left_out > 0 && drawn > 0 {
                    format!(
                        " The page axis is logarithmic (the mappings need from a few to thousands \
                         of pages): the {left_out} mapping(s) without huge pages (0 %) are not drawn."
                    )
                } else {
                    String::new()
                }
            ));
            page.push_svg(plots::pmb_chart(&self.mappings, self.knee.as_ref(), plan));
        }
        // A report of ranking experiments alone has no profile and no runs.
        let stored = self.profile.is_some() || !self.runs.is_empty();
        if stored {
            page.push_heading("Miss-ratio curves");
        }
        match &self.mrc {
            Some(curves) => {
                page.push_paragraph(&format!(
                    "The fraction of references that miss a fully associative LRU TLB of the given \
                     number of entries, per page size, from the profile's reuse distances (both \
                     axes logarithmic where the values span decades).{}",
                    match plan.map(plots::plan_page_sizes) {
                        Some(sizes) if !sizes.is_empty() => {
                            " The page size the plan uses is drawn heavier and labelled."
                        }
                        _ => "",
                    }
                ));
                page.push_svg(plots::mrc_chart(curves, plan));
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
                 predicted speedup (seed 001, fig. 4).{}",
                set.source,
                if plan.is_some_and(|l| set.mappings.iter().any(|c| plots::is_plan(&c.label, l))) {
                    " The plan's row is shaded and labelled."
                } else {
                    ""
                }
            ));
            page.push_svg(plots::compared_chart(set, plan));
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
            page.push_paragraph(&format!(
                "Every timed run: baseline (all small pages) and optimized (the plan applied), \
                 interleaved; the bars are the medians.{}",
                if plan.is_some_and(|l| self.runs.iter().any(|r| r.label.as_deref() == Some(l))) {
                    " The runs of the plan are shaded and labelled."
                } else {
                    ""
                }
            ));
            page.push_svg(plots::runs_chart(&self.runs, plan));
            page.push_table(&RUN_HEADERS, &self.run_rows());
        }
        if !self.mappings.is_empty() {
            page.push_heading("Directives");
            let rows: Vec<Vec<String>> = self
                .mappings
                .iter()
                .map(|m| {
                    vec![
                        format!(
                            "{}{}{}",
                            m.label,
                            if m.base { "" } else { " *" },
                            if Some(m.label.as_str()) == plan {
                                " (plan)"
                            } else {
                                ""
                            }
                        ),
                        format!("{:.1} ms", m.saving_ms),
                        format!("{:.1}%", m.pmb),
                        format!("{:.3}x", m.predicted_speedup),
                        m.hugetlb_pages.to_string(),
                        m.hugetlb_1g_pages.to_string(),
                        m.thp_pages.to_string(),
                        confidence_text(m),
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
            page.push_paragraph(
                "* a combined (non-base) mapping. Confidence: how far validations bore the \
                 prediction out (1: fully); \"not validated\" until a run of the mapping is \
                 compared.",
            );
        }
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
        for n in &self.notes {
            page.push_paragraph(&format!("Note: {n}"));
        }
        page.render()
    }
}

/// A directive's confidence as the page shows it: "not validated" until a
/// validation moved it from its initial 1.0.
pub fn confidence_text(m: &MappingView) -> String {
    let base = match m.validations {
        0 => return "not validated".into(),
        1 => format!("{:.2} (1 validation", m.confidence),
        n => format!("{:.2} ({n} validations", m.confidence),
    };
    // Across hosts: how many, and how far apart their own confidences are.
    let hosts = match (m.hosts, m.spread) {
        (n, Some((lo, hi))) if n > 1 => format!(", {n} hosts: {lo:.2}–{hi:.2}"),
        _ => String::new(),
    };
    format!("{base}{hosts}){}", if m.lost { ", barred" } else { "" })
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
            hosts: vec![],
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
            "title", "profile", "mappings", "knee", "plan", "mrc", "runs", "compared", "notes",
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
    fn the_plan_is_the_validated_gain_else_the_knee_else_the_best_else_none() {
        // Run 20 measured a gain with heap-large: validated.
        let r = sample();
        assert_eq!(r.plan.label.as_deref(), Some("heap-large:label"));
        assert_eq!(r.plan.basis, "validated");
        assert_eq!(
            (r.plan.run_id, r.plan.measured_speedup),
            (Some(20), Some(2.0))
        );
        assert_eq!(r.runs[0].label.as_deref(), Some("heap-large:label"));
        assert!(r
            .plan
            .commands
            .iter()
            .all(|c| !c.command.contains("validate")));
        assert!(r.plan.commands[0]
            .command
            .contains("/proc/sys/vm/nr_hugepages) + 512 ))"));
        assert!(r
            .plan
            .commands
            .iter()
            .any(|c| c.command == "hugetune run -- app --big"));
        let summary = serde_json::json!({"significance": {"passes": true}});
        let ds = [
            directive(10, "all-large", 100.0, 2.0, 600, 10),
            directive(11, "heap-large", 95.0, 1.9, 512, 0),
            directive(12, "static", 5.0, 1.05, 0, 3),
            directive(13, "all-small", 0.0, 1.0, 0, 0),
        ];
        // No run: the knee, to be validated first.
        let r = Report::assemble(Some(&profile(summary.clone())), &ds, &[]);
        assert_eq!(
            (r.plan.label.as_deref(), r.plan.basis.as_str()),
            (Some("heap-large:label"), "knee")
        );
        assert_eq!(r.plan.measured_text(), "not validated yet");
        assert!(r.plan.commands[0]
            .command
            .starts_with("hugetune validate -- "));
        // The knee measured a loss: the best of the rest.
        let mut lost = run(
            30,
            serde_json::json!({"mapping": "heap-large"}),
            serde_json::json!({}),
        );
        lost.run.verdict = "loss".into();
        let r = Report::assemble(Some(&profile(summary.clone())), &ds, &[lost]);
        assert_eq!(
            (r.plan.label.as_deref(), r.plan.basis.as_str()),
            (Some("all-large:label"), "best")
        );
        // The significance test fails: keep 4 KB pages.
        let fails = serde_json::json!({"significance": {"passes": false}});
        let r = Report::assemble(Some(&profile(fails)), &ds, &[]);
        assert_eq!(
            (r.plan.label.as_deref(), r.plan.action.as_str()),
            (None, "Keep 4 KB pages")
        );
        assert!(r.plan.why.contains("significance"));
        assert!(r.plan.commands.is_empty());
        let card = r.plan.card();
        assert_eq!(card.tone, hugetune_render::html::Tone::Bad);
        // Nothing predicted to save 1 % of the run time: none either.
        let small = [directive(12, "static", 5.0, 1.005, 0, 3)];
        let r = Report::assemble(Some(&profile(summary)), &small, &[]);
        assert_eq!(r.plan.basis, "none");
        assert!(r.plan.why.contains("1 %"), "{}", r.plan.why);
        // The card comes first on the page, and the plan names the mapping in words.
        let h = sample().html();
        let first = h.split("</h1>\n").nth(1).unwrap();
        assert!(
            first.starts_with("<section class=\"verdict good\">"),
            "{first}"
        );
        assert!(
            first.contains("heap-large on 2 MB hugetlb pages")
                || first.contains("heap-large:label")
        );
    }

    #[test]
    fn labels_in_words() {
        assert_eq!(
            plan_words("static:thp heap-large:hugetlb-1g heap-small:thp-64k"),
            "static on 2 MB THP, heap-large on 1 GB hugetlb pages, heap-small on 64 KB THP"
        );
        assert_eq!(
            plan_words("heap-large:hugetlb static:4k"),
            "heap-large on 2 MB hugetlb pages"
        );
        assert_eq!(plan_words("all-small"), "all-small");
    }

    #[test]
    fn confidence_shows_the_spread_across_hosts_and_a_bar() {
        let mut ds = vec![directive(10, "all-large", 100.0, 2.0, 600, 10)];
        ds[0].directive.validations = 4;
        ds[0].directive.confidence = 0.5;
        ds[0].directive.lost = true;
        let h = |host: &str, confidence, lost| hugetune_store::db::HostValidations {
            host: Some(host.into()),
            hostname: None,
            validations: 2,
            confidence,
            lost,
        };
        ds[0].hosts = vec![h("a", 0.25, true), h("b", 0.75, false)];
        let r = Report::assemble(Some(&profile(serde_json::json!({}))), &ds, &[]);
        let m = &r.mappings[0];
        assert_eq!((m.hosts, m.spread, m.lost), (2, Some((0.25, 0.75)), true));
        assert_eq!(
            confidence_text(m),
            "0.50 (4 validations, 2 hosts: 0.25–0.75), barred"
        );
    }

    #[test]
    fn confidence_reads_not_validated_until_a_validation() {
        let mut m = sample().mappings[0].clone();
        assert_eq!(m.validations, 0);
        assert_eq!(confidence_text(&m), "not validated");
        (m.confidence, m.validations) = (0.42, 1);
        assert_eq!(confidence_text(&m), "0.42 (1 validation)");
        m.validations = 3;
        assert_eq!(confidence_text(&m), "0.42 (3 validations)");
        let h = sample().html();
        assert!(h.contains("<td>not validated</td>") && !h.contains("<td>1.00</td>"));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, f64::NAN, 2.0, 3.0]), Some(2.5));
    }
}
