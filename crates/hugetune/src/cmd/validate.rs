//! `hugetune validate`: interleaved A/B runs of the stored plan against the
//! unchanged program; the outcome goes back into the directive's confidence.
//! `--revalidate MAPPING` measures a plan a loss barred (on any host of this
//! host's class) again, and lifts the bar when no loss is measured.

use crate::{stages, Ctx};
use anyhow::{bail, Result};
use hugetune_capture::ab::Verdict;
use hugetune_format::plan::PlanOptions;
use hugetune_store::db::NewRun;
use std::ffi::OsString;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    runs: super::RunCountArgs,
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// Print the validation as one JSON object
    #[arg(long)]
    json: bool,
    /// Measure MAPPING, a plan barred for this host's class by a loss measured
    /// on some host, again here; no loss measured lifts the bar for every host
    /// of the class (a loss keeps it). `hugetune report` lists barred mappings
    #[arg(long, value_name = "MAPPING")]
    revalidate: Option<String>,
    /// The program and its arguments (after --)
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let db = ctx.db()?;
    let Some(mut st) = stages::stored_predictions(&db, &a.command)? else {
        bail!(
            "no profile of this program in {}; run `hugetune optimize` first",
            ctx.db_path.display()
        );
    };
    if let Some(m) = &a.revalidate {
        // Only the barred plan, the bar set aside for this measurement.
        if !st.lost.contains(m) {
            bail!(
                "{m} is not barred for this host's machine class (barred: {}); plain `hugetune validate` \
                 measures the plan the planner chooses",
                if st.lost.is_empty() { "none".to_string() } else { st.lost.join(", ") }
            );
        }
        st.predictions.retain(|p| &p.label == m);
        if st.predictions.is_empty() {
            bail!("profile #{} has no directive {m}", st.profile_id);
        }
        st.lost.retain(|l| l != m);
    }
    let d = st.choose(&stages::availability_now(), a.min_gain);
    if let (Some(m), false) = (
        &a.revalidate,
        d.prediction
            .as_ref()
            .is_some_and(|p| a.revalidate.as_ref() == Some(&p.label)),
    ) {
        for r in &d.reasons {
            stages::note(format!("  - {r}"));
        }
        bail!("{m} cannot be applied now (see above): nothing revalidated");
    }
    if d.prediction.is_none() {
        for r in &d.reasons {
            stages::note(format!("  - {r}"));
        }
        bail!("nothing to validate: the planner applies no huge pages to this program now");
    }
    let v = stages::validate(
        &art,
        &a.command,
        &d.assignments,
        st.threshold,
        &PlanOptions::for_decision(&st.program, &d),
        a.runs.count()?,
        None,
    )?;
    let confidence = match (&a.revalidate, &d.prediction) {
        (Some(m), Some(p)) => {
            let lost = matches!(v.verdict, Verdict::Loss | Verdict::Broke);
            let agreement = if v.verdict == Verdict::Broke {
                0.0
            } else {
                v.agreement(p.predicted_speedup)
            };
            let c = db.record_revalidation(st.profile_id, m, agreement, lost)?;
            stages::note(if lost {
                format!("{m} lost again on this host: it stays barred")
            } else {
                format!(
                    "{m} measured no loss on this host: its bar is lifted for this machine class"
                )
            });
            Some(c)
        }
        _ => stages::learn_from(&db, st.profile_id, &d, &v)?,
    };
    let mapping = d.label();
    let predicted = d.prediction.as_ref().map_or(1.0, |p| p.predicted_speedup);
    let run_id = db.insert_run(&NewRun {
        program_id: st.program_id,
        mapping: mapping.clone(),
        profile_id: Some(st.profile_id),
        machine_id: None,
        args: stages::strings(&a.command),
        plan: serde_json::json!({"mapping": mapping, "assignments": d.assignments, "sites": d.sites}),
        baseline_s: v.baseline_s.clone(),
        optimized_s: v.optimized_s.clone(),
        speedup: Some(v.speedup),
        huge_bytes_backed: v.huge_bytes_proc.max(v.huge_bytes_runtime),
        verdict: v.verdict.name().into(),
        details: serde_json::json!({"validation": v, "confidence": confidence}),
    })?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"run_id": run_id, "mapping": mapping, "predicted_speedup": predicted,
                               "plan": d.assignments, "sites": d.sites, "validation": v, "confidence": confidence})
        );
        return Ok(exit_status(v.verdict));
    }
    println!("plan: {} ({mapping})", super::decision_text(&d));
    println!(
        "baseline {:.3} s, optimized {:.3} s (medians of {} pairs): {:.2}x (95 % CI {:.2}..{:.2}x; predicted {:.2}x), {}",
        v.baseline_median_s,
        v.optimized_median_s,
        v.runs,
        v.speedup,
        v.speedup_ci.0,
        v.speedup_ci.1,
        predicted,
        v.verdict.name(),
    );
    println!(
        "backing: {} huge at peak (/proc smaps_rollup), {} {}",
        hugetune_render::bytes(v.huge_bytes_proc),
        hugetune_render::bytes(v.huge_bytes_runtime),
        if v.attach.is_empty() {
            "reported by the runtime library"
        } else {
            "verified by the outside applier (MADV_HUGEPAGE at fault time, MADV_COLLAPSE; the library cannot enter this program)"
        }
    );
    if let Some(f) = v.attach.iter().find_map(|r| r.failure_text()) {
        println!("         refused MADV_COLLAPSE calls in a run: {f}");
    }
    if let Some(p) = super::folio_proof(&v) {
        println!("         {p}");
    }
    if let Some(c) = confidence {
        println!("directive confidence now {c:.2} (run #{run_id})");
    }
    Ok(exit_status(v.verdict))
}

/// The verdict as an exit status, for scripts and unit files: 0 gain or no
/// significant change, 2 a loss (the plan makes the program slower), 3 the plan
/// broke the program (an optimized run ended otherwise than it does without).
pub fn exit_status(verdict: hugetune_capture::ab::Verdict) -> i32 {
    use hugetune_capture::ab::Verdict;
    match verdict {
        Verdict::Gain | Verdict::NoSignificantChange => 0,
        Verdict::Loss => 2,
        Verdict::Broke => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_capture::ab::Verdict;

    #[test]
    fn a_loss_and_a_broken_program_are_failures_for_scripts() {
        assert_eq!(exit_status(Verdict::Gain), 0);
        assert_eq!(exit_status(Verdict::NoSignificantChange), 0);
        assert_eq!(exit_status(Verdict::Loss), 2);
        assert_eq!(exit_status(Verdict::Broke), 3);
    }
}
