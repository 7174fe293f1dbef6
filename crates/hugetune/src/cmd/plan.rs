use crate::{pipeline, Ctx};
use anyhow::{bail, Result};
use hugetune_capture::launch::PlanOptions;
use hugetune_model::plan;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Write the plan file for the runtime library here
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = pipeline::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// hugetlb 2 MB pages to plan with instead of those free now
    #[arg(long)]
    budget: Option<u64>,
    #[arg(long)]
    json: bool,
    /// The program (and arguments) to plan for; its newest profile is used
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let db = ctx.db()?;
    let Some(st) = pipeline::stored_predictions(&db, &a.command)? else {
        bail!(
            "no profile of {} in {}; run `hugetune optimize` or `record` + `analyze` first",
            pipeline::display_cmd(&a.command[..1]),
            ctx.db_path.display()
        );
    };
    let mut avail = pipeline::availability_now();
    if let Some(b) = a.budget {
        avail.hugetlb_2m_free = b;
    }
    let d = plan::choose(
        &st.predictions,
        &st.significance,
        &avail,
        &st.program,
        st.native_s,
        a.min_gain,
    );
    let threshold = st.threshold;
    let text = hugetune_capture::launch::plan_text_with(
        &d.assignments,
        threshold,
        &PlanOptions::for_program(&st.program).with_sites(&d.sites),
    );
    if let Some(o) = &a.output {
        std::fs::write(o, &text)?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({"profile_id": st.profile_id, "availability": avail, "decision": d, "plan": text})
        );
        return Ok(0);
    }
    println!(
        "profile #{}; {} free hugetlb 2 MB pages, THP {:?}",
        st.profile_id, avail.hugetlb_2m_free, avail.thp
    );
    println!("plan: {}", super::assignments_text(&d.assignments));
    for r in &d.reasons {
        println!("  - {r}");
    }
    if let Some(o) = &a.output {
        println!("plan file written to {}", o.display());
    }
    Ok(0)
}
