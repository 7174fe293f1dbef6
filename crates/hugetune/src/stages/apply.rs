//! Stage 4, apply: a run with a plan applied. The plan file and the runtime
//! library's environment (hugetune_format::{plan, env}) in a private directory,
//! the hugetlb pool grown for the plan's pages (given back when the guard
//! drops), the library's summaries collected, and `hugetune run`'s applied run
//! recorded in the database.

use super::{display_cmd, note, strings, Stored};
use crate::artifacts::Artifacts;
use anyhow::Result;
use hugetune_capture::launcher;
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_format::env;
use hugetune_format::plan::{self, PlanOptions};
use hugetune_format::summary::Summary;
use hugetune_host::kernel_state::{reserve_hugetlb, PoolChange};
use hugetune_host::procfs::RunStats;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::plan::{Availability, PlanDecision};
use hugetune_store::db::NewRun;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub struct Applied {
    /// Holds the plan file and the runtime library's summaries.
    pub dir: tempfile::TempDir,
    pub spec: RunSpec,
}

/// The optimized run's spec: the plan file written, the runtime library preloaded.
pub fn applied_spec(
    art: &Artifacts,
    argv: &[OsString],
    assignments: &[(Category, Backing)],
    threshold: u64,
    options: &PlanOptions,
    stdout: Output,
) -> Result<Applied> {
    let dir = tempfile::Builder::new().prefix("hugetune-run.").tempdir()?;
    let options = &super::jvm::for_command(options, argv, &super::availability_now, true);
    let plan_file = dir.path().join("plan");
    std::fs::write(
        &plan_file,
        plan::plan_text_with(assignments, threshold, options),
    )?;
    let summary = dir.path().join("summary.%p.json");
    let mut spec = RunSpec::new(argv.to_vec());
    spec.env = env::apply_env(&art.runtime_lib, &plan_file, Some(&summary), assignments);
    super::jvm::environment(options, argv, Some(dir.path()), &mut spec.env);
    // A launcher stays inert and the program it starts (every rank) takes the
    // plan: the runtime library's follow mode (docs/launchers.md). Only the
    // program the arguments name, when they name one.
    if launcher::launcher_of(argv).is_some() {
        let mut extra = Vec::new();
        if let Ok(p) = super::program_of(argv) {
            extra.push(("HUGETUNE_FOLLOW_PROGRAM", p.path));
        }
        spec.env = env::follow_env(spec.env, "apply", &dir.path().join("follow.log"), &extra);
    }
    spec.stdout = stdout;
    Ok(Applied { dir, spec })
}

/// Collects (and removes) the runtime library summaries written in `dir`.
pub fn take_summaries(dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("summary."))
        })
        .collect();
    paths.sort();
    for p in paths {
        if let Ok(t) = std::fs::read_to_string(&p) {
            match serde_json::from_str(&t) {
                Ok(v) => out.push(v),
                Err(e) => note(format!(
                    "runtime summary {} is not valid JSON: {e}",
                    p.display()
                )),
            }
        }
        let _ = std::fs::remove_file(&p);
    }
    out
}

/// Huge bytes the runtime library says it backed, summed over processes:
/// hugetlb bytes plus THP bytes verified in smaps.
pub fn summary_huge_bytes(summaries: &[serde_json::Value]) -> u64 {
    summaries
        .iter()
        .filter_map(|s| Summary::from_value(s).ok())
        .map(|s| s.huge_bytes())
        .sum()
}

/// Why an applied run left no runtime summary, when it left none. The library
/// writes one at exit, at `_exit`/`_Exit` and at exec; a process killed by a
/// signal (or ending with a raw exit_group system call) cannot write it, and
/// what it backed is then known only from /proc's peak.
pub fn missing_summary(stats: &RunStats, summaries: &[serde_json::Value]) -> Option<String> {
    if !summaries.is_empty() {
        return None;
    }
    Some(match stats.signal {
        Some(s) => format!(
            "no runtime summary: the program {} before the runtime library could write one \
             (huge pages are counted from /proc's peak only)",
            hugetune_capture::ab::ended(stats.exit_code, Some(s))
        ),
        None => format!(
            "no runtime summary although the program {}: it left without exit handlers in a way \
             the library cannot see (a raw exit_group system call), or the library stayed inert \
             (a setuid program, or its environment was cleared)",
            hugetune_capture::ab::ended(stats.exit_code, None)
        ),
    })
}

/// Grows the pool when the plan needs more hugetlb pages than are free.
pub fn reserve_for(
    decision: &PlanDecision,
    avail_now: &Availability,
) -> Result<Option<PoolChange>> {
    let need = decision.hugetlb_pages();
    if need <= avail_now.hugetlb_2m_free {
        return Ok(None);
    }
    let extra = need - avail_now.hugetlb_2m_free;
    let r = reserve_hugetlb(2048, extra)?;
    note(format!(
        "grew the 2 MB hugetlb pool by {} pages ({} asked) for the runs; it goes back to {} afterwards",
        r.added(),
        extra,
        r.previous
    ));
    Ok(Some(r))
}

/// Fallbacks the runtime library reported, deduplicated across runs.
pub fn fallbacks(summaries: &[serde_json::Value]) -> Vec<String> {
    let mut out = Vec::new();
    for run in summaries {
        for proc in run.as_array().into_iter().flatten() {
            let Ok(s) = Summary::from_value(proc) else {
                continue;
            };
            for f in &s.fallbacks {
                let line = format!("{}, {} time(s)", f.describe("→"), f.count);
                if !out.contains(&line) {
                    out.push(line);
                }
            }
        }
    }
    out
}

/// The program run unchanged (it has no profile): its exit status.
pub fn run_unchanged(argv: &[OsString]) -> Result<i32> {
    note(format!(
        "no profile of this program yet: running it unchanged (try `hugetune optimize -- {}`)",
        display_cmd(argv)
    ));
    let mut spec = RunSpec::new(argv.to_vec());
    spec.stdout = Output::Inherit;
    Ok(runner::run(&spec)?.exit_code)
}

/// What an applied run did.
pub struct AppliedRun {
    pub stats: RunStats,
    pub summaries: Vec<serde_json::Value>,
    /// Huge bytes backed: the library's summaries or /proc's peak, the larger.
    pub huge_bytes: u64,
}

/// Runs `argv` with the plan `d` (chosen from the stored profile `st`) applied,
/// output to the terminal, and records the run (verdict `applied`).
/// The run is recorded by `record` once the program ended (`run`'s start-up
/// cache connects to the store while the program runs).
pub fn run_applied_then(
    art: &Artifacts,
    argv: &[OsString],
    st: &Stored,
    d: &PlanDecision,
    record: impl FnOnce(&NewRun) -> Result<()>,
) -> Result<AppliedRun> {
    let applied = applied_spec(
        art,
        argv,
        &d.assignments,
        st.threshold,
        &PlanOptions::for_program(&st.program)
            .with_sites(&d.sites)
            .with_jvm(d.jvm),
        Output::Inherit,
    )?;
    let stats = runner::run(&applied.spec)?;
    let summaries = take_summaries(applied.dir.path());
    super::jvm::note_heap(applied.dir.path(), &summaries);
    let huge_bytes = summary_huge_bytes(&summaries).max(stats.peak.huge());
    let mapping = d.label();
    record(&NewRun {
        program_id: st.program_id,
        mapping: mapping.clone(),
        profile_id: Some(st.profile_id),
        machine_id: None,
        args: strings(argv),
        plan: serde_json::json!({"mapping": mapping, "assignments": d.assignments, "sites": d.sites}),
        baseline_s: vec![],
        optimized_s: vec![stats.wall_s],
        speedup: None,
        huge_bytes_backed: huge_bytes,
        verdict: "applied".into(),
        details: serde_json::json!({"stats": stats, "summaries": summaries}),
    })?;
    Ok(AppliedRun {
        stats,
        summaries,
        huge_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_a_summary_is_explained() {
        let one = vec![serde_json::json!({"pid": 1})];
        let killed = RunStats {
            exit_code: 137,
            signal: Some(9),
            ..Default::default()
        };
        assert_eq!(missing_summary(&killed, &one), None);
        let m = missing_summary(&killed, &[]).unwrap();
        assert!(m.contains("died of signal 9"), "{m}");
        let quiet = RunStats::default();
        let m = missing_summary(&quiet, &[]).unwrap();
        assert!(
            m.contains("exited with status 0") && m.contains("inert"),
            "{m}"
        );
    }
}
