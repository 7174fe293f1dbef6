//! One module per command: argument parsing and rendering; the work is in `pipeline`.

pub mod analyze;
pub mod calibrate;
pub mod completions;
pub mod db;
pub mod demo;
pub mod frag;
pub mod fragsim;
pub mod machine;
pub mod optimize;
pub mod plan;
pub mod rank;
pub mod record;
pub mod report;
pub mod restore;
pub mod run;
pub mod service;
pub mod size;
pub mod status;
pub mod validate;

use hugetune_capture::ab::RunCount;
use hugetune_model::rank::Prediction;

/// How many interleaved A/B pairs a validation runs (`optimize`, `validate`).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct RunCountArgs {
    /// Fewest A/B pairs (a baseline and an optimized run each, interleaved)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// Most A/B pairs: more pairs run while the speedup's 95 % confidence interval is wider than --ci-width
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_runs: u32,
    /// Width of the speedup's 95 % bootstrap confidence interval that is enough (0.05: about ±2.5 %)
    #[arg(long, default_value_t = 0.05)]
    pub ci_width: f64,
    /// Also compare what every run prints on stdout with the first baseline run's,
    /// byte for byte: other output is a broken run, like another exit status
    /// (stdout is then kept, not shown)
    #[arg(long)]
    pub compare_output: bool,
}

impl RunCountArgs {
    pub fn count(&self) -> anyhow::Result<RunCount> {
        anyhow::ensure!(
            self.ci_width > 0.0 && self.ci_width.is_finite(),
            "--ci-width must be a positive number"
        );
        Ok(RunCount {
            min: self.runs as usize,
            max: self.max_runs.max(self.runs) as usize,
            ci_width: self.ci_width,
            compare_output: self.compare_output,
        })
    }
}
use hugetune_render::{count, table};

/// The prediction table shared by `analyze` and `optimize`.
pub fn predictions_table(preds: &[Prediction]) -> String {
    let rows: Vec<Vec<String>> = preds
        .iter()
        .map(|p| {
            vec![
                format!("{}{}", p.label, if p.base { "" } else { " *" }),
                if p.hugetlb_1g_pages > 0 {
                    format!("{} + {} x 1 GB", p.hugetlb_pages, p.hugetlb_1g_pages)
                } else {
                    format!("{}", p.hugetlb_pages)
                },
                format!("{}", p.thp_pages),
                count(p.walks as f64),
                count(p.faults as f64),
                format!("{:.1} ms", p.saving_ns / 1e6),
                format!("{:.0}%", p.pmb),
                format!("{:.2}x", p.predicted_speedup),
            ]
        })
        .collect();
    table(
        &[
            "mapping",
            "hugetlb pages",
            "THP pages",
            "TLB walks",
            "faults",
            "saving",
            "PMB",
            "speedup",
        ],
        &rows,
    )
}

pub fn assignments_text(a: &[(hugetune_model::Category, hugetune_model::Backing)]) -> String {
    if a.is_empty() {
        "nothing (run unchanged)".into()
    } else {
        a.iter()
            .map(|(c, b)| format!("{c} → {b}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What a plan decision places on huge pages, in words.
pub fn decision_text(d: &hugetune_model::plan::PlanDecision) -> String {
    let own = if d.sites.is_empty() {
        assignments_text(&d.assignments)
    } else {
        hugetune_model::rank::site_label(&d.sites)
    };
    let own = match d.pool_2m() {
        Some(n) => format!("{own}, one shared pool of {n} x 2 MB pages"),
        None => own,
    };
    // A JVM's heap goes through the JVM's own switch (stages/jvm.rs).
    match d.jvm {
        Some(b) if d.assignments.is_empty() && d.sites.is_empty() => {
            format!("the JVM's heap → {b} (the JVM's own switch)")
        }
        Some(b) => format!("{own}, the JVM's heap → {b} (the JVM's own switch)"),
        None => own,
    }
}

/// The backing proof beyond smaps_rollup: large folios per size seen in the
/// process (pagemap + kpageflags) and faulted in per run (the kernel's counters).
pub fn folio_proof(v: &crate::stages::Validation) -> Option<String> {
    let list = |x: &[(u64, u64)], f: &dyn Fn(u64) -> String| {
        x.iter()
            .map(|&(kb, n)| format!("{} in {kb} kB folios", f(n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !v.folio_bytes.is_empty() {
        parts.push(format!(
            "mapped {} (pagemap + kpageflags)",
            list(&v.folio_bytes, &|b| hugetune_render::bytes(b))
        ));
    }
    if !v.folio_faults_per_run.is_empty() {
        parts.push(format!(
            "faulted per run {} (anon_fault_alloc)",
            list(&v.folio_faults_per_run, &|n| n.to_string())
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}
