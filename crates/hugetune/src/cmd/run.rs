//! `hugetune run`: the online agent. Looks up the program's directives, plans for
//! the pages available now, runs it with the plan applied, and records the run.
//! Signals sent to hugetune go to the program (forwarded), which ends as it would
//! alone; its exit status is hugetune's.

use crate::{stages, Ctx};
use anyhow::Result;
use std::ffi::OsString;

#[derive(clap::Args)]
pub struct Args {
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// Print why the plan was chosen
    #[arg(long)]
    explain: bool,
    /// The program and its arguments (after --)
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    // A wrapper in a unit file: signals are the program's, and hugetune waits
    // for its end (exit status included) before it records the run.
    hugetune_host::kernel_state::forward_signals();
    let art = crate::artifacts::find()?;
    let db = ctx.db()?;
    let Some(st) = stages::stored_predictions(&db, &a.command)? else {
        return stages::run_unchanged(&a.command);
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
    let r = stages::run_applied(&art, &db, &a.command, &st, &d)?;
    stages::note(format!(
        "done in {:.3} s; {} on huge pages",
        r.stats.wall_s,
        hugetune_render::bytes(r.huge_bytes)
    ));
    if let Some(m) = stages::missing_summary(&r.stats, &r.summaries) {
        stages::note(m);
    }
    for f in stages::fallbacks(&[serde_json::Value::Array(r.summaries)]) {
        stages::note(format!("fallback: {f}"));
    }
    Ok(r.stats.exit_code)
}
