use crate::{stages, Ctx};
use anyhow::{bail, Result};
use hugetune_format::plan::PlanOptions;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Write the plan file for the runtime library here
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// hugetlb 2 MB pages to plan with instead of those free now
    #[arg(long)]
    budget: Option<u64>,
    /// hugetlb 1 GB pages to plan with instead of those free now
    #[arg(long)]
    budget_1g: Option<u64>,
    /// Print why: every mapping considered, what ruled it out, what was chosen
    #[arg(long)]
    explain: bool,
    /// Print the decision as one JSON object
    #[arg(long)]
    json: bool,
    /// The program (and arguments) to plan for; its newest profile is used
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let db = ctx.db()?;
    let Some(st) = stages::stored_predictions(&db, &a.command)? else {
        bail!(
            "no profile of {} in {}; run `hugetune optimize` or `record` + `analyze` first",
            stages::display_cmd(&a.command[..1]),
            ctx.db_path.display()
        );
    };
    let mut avail = stages::availability_now();
    if let Some(b) = a.budget {
        // A budget is what this program may take: no other program's share.
        avail.hugetlb_2m_free = b;
        avail.hugetlb_2m_total = 0;
    }
    if let Some(b) = a.budget_1g {
        avail.hugetlb_1g_free = b;
    }
    let d = st.choose(&avail, a.min_gain);
    let threshold = st.threshold;
    let text = hugetune_format::plan::plan_text_with(
        &d.assignments,
        threshold,
        &PlanOptions::for_decision(&st.program, &d),
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
        "profile #{}; {} free hugetlb 2 MB pages, {} free 1 GB pages, THP {:?}, {} 2 MB blocks free for THP",
        st.profile_id,
        avail.hugetlb_2m_free,
        avail.hugetlb_1g_free,
        avail.thp,
        avail
            .thp_2m_allocatable
            .map_or("unknown".into(), |n| n.to_string())
    );
    println!("plan: {}", super::decision_text(&d));
    if let Some(p) = &d.prediction {
        println!(
            "  predicted {:.2}x, PMB {:.0}%, {} hugetlb 2 MB + {} 1 GB pages, {} THP folios",
            p.predicted_speedup, p.pmb, p.hugetlb_pages, p.hugetlb_1g_pages, p.thp_pages
        );
    }
    if st.program.outside && !a.explain {
        println!("  - {}", hugetune_model::plan::OUTSIDE_REASON);
    }
    let shown = if a.explain { d.reasons.len() } else { 0 };
    for r in d.reasons.iter().take(shown) {
        println!("  - {r}");
    }
    if !a.explain {
        // The last reason says what was chosen, or why nothing was.
        if let Some(r) = d.reasons.last() {
            println!("  - {r} (--explain for all reasons)");
        }
    }
    if let Some(o) = &a.output {
        println!("plan file written to {}", o.display());
    }
    Ok(0)
}
