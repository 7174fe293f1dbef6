//! Stage 5, validate: baseline and optimized runs (`apply`'s spec) interleaved,
//! the verdict and its agreement with the prediction. A program the runtime
//! library cannot enter is measured with its plan applied from outside
//! (`apply`'s spec does it); the outside applier's verified bytes count as the
//! library's would.

use super::{
    applied_spec, attach_huge_bytes, note, session_why, summary_huge_bytes, take_attach_reports,
    take_summaries,
};
use crate::artifacts::Artifacts;
use anyhow::{bail, Result};
use hugetune_capture::ab::{self, AbResult, RunCount, Verdict};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_capture::session::Driver;
use hugetune_format::plan::PlanOptions;
use hugetune_host::machine;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::stats;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Validation {
    /// Pairs run (each: one baseline, one optimized), as `RunCount` decided.
    pub runs: usize,
    pub run_count: RunCount,
    /// 95 % bootstrap confidence interval of the speedup.
    pub speedup_ci: (f64, f64),
    pub baseline_s: Vec<f64>,
    pub optimized_s: Vec<f64>,
    pub baseline_median_s: f64,
    pub optimized_median_s: f64,
    pub speedup: f64,
    pub verdict: Verdict,
    /// One-sided exact Mann-Whitney p-value for "optimized runs are faster".
    pub p_gain: f64,
    pub baseline_minor_faults: u64,
    pub optimized_minor_faults: u64,
    /// Median over optimized runs of the peak huge memory seen in /proc.
    pub huge_bytes_proc: u64,
    /// Median over optimized runs of what the runtime library reports backed
    /// (or, for a program it cannot enter, what the outside applier verified).
    pub huge_bytes_runtime: u64,
    pub baseline_huge_bytes_proc: u64,
    pub runtime_summaries: Vec<serde_json::Value>,
    /// Every kept run ended as the program does without the plan (false: an
    /// optimized run broke it, `broken_run`).
    pub exit_codes_match: bool,
    /// The optimized run that broke the program (verdict `broke`); its time is
    /// in no median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken_run: Option<hugetune_capture::ab::BrokenRun>,
    /// Hugetlb pools resized by another process during the runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool_changes: Vec<String>,
    /// Anonymous folios faulted in per optimized run, per folio size in kB,
    /// from the kernel's per-size counters (Linux 6.9+; empty before): the
    /// proof that mTHP and THP sizes were really used.
    #[serde(default)]
    pub folio_faults_per_run: Vec<(u64, u64)>,
    /// Bytes of the process in large folios, per folio size in kB, at the
    /// largest census of a run (median over optimized runs; pagemap +
    /// kpageflags, root only): mTHP sizes that smaps_rollup does not show.
    #[serde(default)]
    pub folio_bytes: Vec<(u64, u64)>,
    /// The outside applier's report of each optimized run, for a program the
    /// runtime library cannot enter (docs/attach.md); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attach: Vec<hugetune_attach::Report>,
}

impl Validation {
    /// How well the measured gain bore out a predicted speedup (see
    /// [`agreement`]).
    pub fn agreement(&self, predicted_speedup: f64) -> f64 {
        agreement(predicted_speedup, self.speedup, self.speedup_ci)
    }
}

/// How well a measured speedup (median, with its 95 % interval) bore out a
/// predicted one, 0..=1. A prediction inside the interval, or a measured gain at
/// least as large as the predicted one, agrees (1): the directive kept its
/// promise, and de-emphasizing it would only favour mappings never validated.
/// A shortfall falls linearly to 0 when the measured gain (fraction of time
/// saved) is short of the predicted one by as much as the predicted gain (at
/// least 2 % of the time).
pub fn agreement(predicted_speedup: f64, measured_speedup: f64, ci: (f64, f64)) -> f64 {
    let (lo, hi) = ci;
    if predicted_speedup >= lo && predicted_speedup <= hi {
        return 1.0;
    }
    let gain = |s: f64| 1.0 - 1.0 / s;
    let (gp, gm) = (gain(predicted_speedup), gain(measured_speedup));
    if gm >= gp {
        return 1.0;
    }
    let a = 1.0 - (gp - gm) / gp.abs().max(0.02);
    if a.is_finite() {
        a.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

pub fn validate(
    art: &Artifacts,
    argv: &[OsString],
    assignments: &[(Category, Backing)],
    threshold: u64,
    options: &PlanOptions,
    count: RunCount,
    driver: Option<&Driver>,
) -> Result<Validation> {
    let mut applied = applied_spec(art, argv, assignments, threshold, options, Output::Null)?;
    applied.spec.driver = driver.cloned();
    // SAFETY: geteuid has no preconditions.
    applied.spec.folio_census = unsafe { libc::geteuid() } == 0;
    let mut baseline = RunSpec::new(argv.to_vec());
    baseline.stdout = Output::Null;
    baseline.driver = driver.cloned();
    // Kept to quote when a run fails (a failed run is never a timing).
    baseline.stderr = Output::Capture;
    applied.spec.stderr = Output::Capture;
    if count.compare_output {
        baseline.stdout = Output::Capture;
        applied.spec.stdout = Output::Capture;
    }
    let dir = applied.dir.path().to_path_buf();
    if !assignments.is_empty() {
        // Memory first touched since it was given back (freshly reserved hugetlb
        // pages; in VMs with free page reporting, any memory the host reclaimed)
        // is slow once. Pay that outside the timed runs, as the baseline's warm-up
        // (the sizing run) does for 4 KB pages.
        note("warm-up run with the plan applied (not timed)");
        let w = runner::run(&applied.spec)?;
        take_summaries(&dir);
        take_attach_reports(&dir);
        if w.exit_code != 0 {
            note(format!(
                "warning: the warm-up run exited with status {}{}",
                w.exit_code,
                session_why(&w)
            ));
        }
    }
    let mut per_run_runtime: Vec<u64> = Vec::new();
    let mut attach = Vec::new();
    // Optimized runs that left no runtime summary (killed, or the library inert).
    let mut no_summary = 0usize;
    // Folio counters just before and after each optimized run.
    let thp_root = Path::new(machine::THP_SYSFS);
    let before = RefCell::new(Vec::new());
    let mut folio_faults: Vec<(u64, u64)> = Vec::new();
    let upto = if count.max > count.min {
        format!("{}..{}", count.min, count.max)
    } else {
        count.max.to_string()
    };
    // Baseline and optimized runs alternate; a verdict reached early (count.min)
    // ends the bar short of its length.
    let bar = crate::progress::Progress::bar("validating", 2 * count.max as u64, "runs");
    let r: AbResult = ab::interleaved(
        &baseline,
        &applied.spec,
        count,
        || {
            for (kb, n) in machine::folio_fault_counts(thp_root) {
                let was = before
                    .borrow()
                    .iter()
                    .find(|(k, _)| *k == kb)
                    .map_or(n, |&(_, c)| c);
                match folio_faults.iter_mut().find(|(k, _)| *k == kb) {
                    Some(e) => e.1 += n.saturating_sub(was),
                    None => folio_faults.push((kb, n.saturating_sub(was))),
                }
            }
            let s = take_summaries(&dir);
            let a = take_attach_reports(&dir);
            no_summary += usize::from(s.is_empty() && a.is_empty() && !assignments.is_empty());
            per_run_runtime.push(summary_huge_bytes(&s) + attach_huge_bytes(&a));
            attach.extend(a);
            Some(serde_json::Value::Array(s))
        },
        |which, i, s| {
            if which == "baseline" {
                *before.borrow_mut() = machine::folio_fault_counts(thp_root);
            }
            bar.inc(1);
            bar.set_message(format!("{which} {:.2} s", s.wall_s));
            note(format!(
                "{which} run {}/{upto}: {:.3} s, {} minor faults, {} huge",
                i + 1,
                s.wall_s,
                s.minor_faults,
                hugetune_render::bytes(s.peak.huge())
            ))
        },
    )?;
    drop(bar);
    let runs = r.optimized.len();
    // Every kept run ended as the first baseline run (ab::interleaved).
    let codes_match = r.broke.is_none();
    if no_summary > 0 {
        note(format!(
            "warning: {no_summary} of {} optimized runs left no runtime summary (killed by a signal, \
             or the runtime library stayed inert): their huge pages are counted from /proc only",
            r.optimized.len()
        ));
    }
    for c in &r.pool_changes {
        note(format!("warning: {c}"));
    }
    if let Some(x) = &r.broke {
        note(format!(
            "the plan broke the program: {}{}",
            x.describe(),
            if x.stderr_tail.is_empty() {
                String::new()
            } else {
                format!("; its stderr ended with:\n{}", x.stderr_tail)
            }
        ));
        if !r.pool_changes.is_empty() {
            note("(a hugetlb pool was resized by another process during the runs: a likely cause)");
        }
    }
    // A failed session's time is the time to fail: nothing to compare.
    for (which, runs) in [("baseline", &r.baseline), ("optimized", &r.optimized)] {
        if let Some(e) = runs.iter().find_map(|s| s.session_error.as_deref()) {
            bail!("a {which} run's server session failed: {e}");
        }
    }
    let b: Vec<f64> = r.baseline.iter().map(|s| s.wall_s).collect();
    let o: Vec<f64> = r.optimized.iter().map(|s| s.wall_s).collect();
    // No optimized run completed (the first one broke): 0, not NaN (stored).
    let (bm, om) = (
        stats::median(&b),
        if o.is_empty() { 0.0 } else { stats::median(&o) },
    );
    let verdict = if r.broke.is_some() {
        Verdict::Broke
    } else {
        ab::verdict(&b, &o)
    };
    Ok(Validation {
        runs,
        run_count: count,
        speedup_ci: if o.is_empty() {
            (0.0, 0.0)
        } else {
            stats::speedup_ci(&b, &o)
        },
        folio_bytes: {
            let mut sizes: Vec<u64> = r
                .optimized
                .iter()
                .flat_map(|s| s.peak_folios.iter().map(|&(kb, _)| kb))
                .collect();
            sizes.sort_unstable();
            sizes.dedup();
            sizes
                .into_iter()
                .map(|kb| {
                    let per_run = r.optimized.iter().map(|s| {
                        s.peak_folios
                            .iter()
                            .find(|(k, _)| *k == kb)
                            .map_or(0, |&(_, b)| b)
                    });
                    (kb, stats::median_u64(per_run))
                })
                .collect()
        },
        folio_faults_per_run: folio_faults
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(kb, n)| (kb, n / runs.max(1) as u64))
            .collect(),
        verdict,
        p_gain: stats::mann_whitney_p(&o, &b),
        speedup: if om > 0.0 { bm / om } else { 0.0 },
        baseline_median_s: bm,
        optimized_median_s: om,
        baseline_s: b,
        optimized_s: o,
        baseline_minor_faults: stats::median_u64(r.baseline.iter().map(|s| s.minor_faults)),
        optimized_minor_faults: stats::median_u64(r.optimized.iter().map(|s| s.minor_faults)),
        huge_bytes_proc: stats::median_u64(r.optimized.iter().map(|s| s.peak.huge())),
        huge_bytes_runtime: stats::median_u64(per_run_runtime.into_iter()),
        baseline_huge_bytes_proc: stats::median_u64(r.baseline.iter().map(|s| s.peak.huge())),
        runtime_summaries: r.summaries,
        exit_codes_match: codes_match,
        broken_run: r.broke,
        pool_changes: r.pool_changes,
        attach,
    })
}
