use crate::{pipeline, Ctx};
use anyhow::{bail, Result};
use hugetune_capture::launch::PlanOptions;
use hugetune_model::plan;
use std::ffi::OsString;

#[derive(clap::Args)]
pub struct Args {
    /// Baseline and optimized runs each, interleaved
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    #[arg(long, default_value_t = pipeline::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    #[arg(long)]
    json: bool,
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let db = ctx.db()?;
    let Some(st) = pipeline::stored_predictions(&db, &a.command)? else {
        bail!(
            "no profile of this program in {}; run `hugetune optimize` first",
            ctx.db_path.display()
        );
    };
    let d = plan::choose(
        &st.predictions,
        &st.significance,
        &pipeline::availability_now(),
        &st.program,
        st.native_s,
        a.min_gain,
    );
    let threshold = st.threshold;
    let v = pipeline::validate(
        &art,
        &a.command,
        &d.assignments,
        threshold,
        &PlanOptions::for_program(&st.program).with_sites(&d.sites),
        a.runs as usize,
    )?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"plan": d.assignments, "validation": v})
        );
    } else {
        println!("plan: {}", super::assignments_text(&d.assignments));
        println!(
            "baseline {:.3} s, optimized {:.3} s (medians of {}): {:.2}x, {}; {} huge at peak",
            v.baseline_median_s,
            v.optimized_median_s,
            v.runs,
            v.speedup,
            v.verdict.name(),
            hugetune_report::bytes(v.huge_bytes_proc)
        );
    }
    Ok(0)
}
