//! `hugetune run`: the online agent. Looks up the program's directives, plans for
//! the pages available now, runs it with the plan applied, and records the run.

use crate::{stages, Ctx};
use anyhow::Result;
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_format::plan::PlanOptions;
use hugetune_store::db::NewRun;
use std::ffi::OsString;

#[derive(clap::Args)]
pub struct Args {
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// Print why the plan was chosen
    #[arg(long)]
    explain: bool,
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let db = ctx.db()?;
    let stored = stages::stored_predictions(&db, &a.command)?;
    let Some(st) = stored else {
        stages::note(format!(
            "no profile of this program yet: running it unchanged (try `hugetune optimize -- {}`)",
            stages::display_cmd(&a.command)
        ));
        let mut spec = RunSpec::new(a.command.clone());
        spec.stdout = Output::Inherit;
        return Ok(runner::run(&spec)?.exit_code);
    };
    let d = st.choose(&stages::availability_now(), a.min_gain);
    if a.explain || d.prediction.is_none() {
        for r in &d.reasons {
            stages::note(format!("  - {r}"));
        }
    }
    stages::note(format!(
        "applying {} (profile #{})",
        super::decision_text(&d),
        st.profile_id
    ));
    let applied = stages::applied_spec(
        &art,
        &a.command,
        &d.assignments,
        st.threshold,
        &PlanOptions::for_program(&st.program).with_sites(&d.sites),
        Output::Inherit,
    )?;
    let stats = runner::run(&applied.spec)?;
    let summaries = stages::take_summaries(applied.dir.path());
    let huge = stages::summary_huge_bytes(&summaries).max(stats.peak.huge());
    stages::note(format!(
        "done in {:.3} s; {} on huge pages",
        stats.wall_s,
        hugetune_render::bytes(huge)
    ));
    for f in super::optimize::fallbacks(&[serde_json::Value::Array(summaries.clone())]) {
        stages::note(format!("fallback: {f}"));
    }
    let mapping = d.label();
    db.insert_run(&NewRun {
        program_id: st.program_id,
        mapping: mapping.clone(),
        profile_id: Some(st.profile_id),
        machine_id: None,
        args: stages::strings(&a.command),
        plan: serde_json::json!({"mapping": mapping, "assignments": d.assignments, "sites": d.sites}),
        baseline_s: vec![],
        optimized_s: vec![stats.wall_s],
        speedup: None,
        huge_bytes_backed: huge,
        verdict: "applied".into(),
        details: serde_json::json!({"stats": stats, "summaries": summaries}),
    })?;
    Ok(stats.exit_code)
}
