//! A/B validation: baseline and optimized runs interleaved (A B A B ...), so drift
//! in the machine's state hits both sides alike; medians and a distribution-free
//! verdict.

//!
//! A failed run is never a timing: the first baseline run sets how the program
//! ends (its exit status); a baseline run that dies of a signal, or ends
//! otherwise than the first, stops the validation with the reason (there is
//! nothing to compare); an optimized run that ends otherwise than the baseline
//! stops it as `broke` (the plan broke the program) and its time is never
//! kept. With `compare_output`, what a run prints on stdout is part of how it
//! ends: it must equal the first baseline run's, byte for byte (a baseline
//! that prints something else from run to run stops the validation). A
//! hugetlb pool resized by someone else meanwhile is reported.

use crate::rounds::{self, Ran, Rounds};
use crate::runner::{run, RunSpec};
use anyhow::{bail, Result};
use hugetune_host::machine;
use hugetune_host::procfs::RunStats;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbResult {
    /// The timed runs that ended as the program does (a broken optimized run
    /// is not among them).
    pub baseline: Vec<RunStats>,
    pub optimized: Vec<RunStats>,
    /// Runtime library summaries of the optimized runs, when available.
    pub summaries: Vec<serde_json::Value>,
    /// The optimized run that ended otherwise than the baseline, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broke: Option<BrokenRun>,
    /// Hugetlb pools resized by someone else during the runs, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool_changes: Vec<String>,
}

/// An optimized run that did not end as the program does without the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokenRun {
    /// 0-based pair.
    pub pair: usize,
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// How the baseline ends.
    pub baseline_exit_code: i32,
    pub wall_s: f64,
    /// The end of what it wrote to stderr.
    pub stderr_tail: String,
    /// How its stdout differed from the baseline's (`compare_output`), when it
    /// ended with the same status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_differs: Option<String>,
}

impl BrokenRun {
    pub fn describe(&self) -> String {
        if let Some(d) = &self.output_differs {
            return format!(
                "optimized run {} printed other output than the program without the plan: {d}",
                self.pair + 1
            );
        }
        format!(
            "optimized run {} {} after {:.2} s, where the program {} without the plan",
            self.pair + 1,
            ended(self.exit_code, self.signal),
            self.wall_s,
            ended(self.baseline_exit_code, None)
        )
    }
}

/// "exited with status 3", "died of signal 11".
pub fn ended(exit_code: i32, signal: Option<i32>) -> String {
    match signal {
        Some(s) => format!("died of signal {s}"),
        None => format!("exited with status {exit_code}"),
    }
}

/// The last `max` bytes of a stream as text, from a line start where possible.
pub fn tail_text(b: &[u8], max: usize) -> String {
    let from = b.len().saturating_sub(max);
    let mut t = &b[from..];
    if from > 0 {
        if let Some(nl) = t.iter().position(|&c| c == b'\n') {
            t = &t[nl + 1..];
        }
    }
    String::from_utf8_lossy(t).trim_end().to_string()
}

/// (page kB, nr_hugepages) of every pool now.
fn pool_sizes() -> Vec<(u64, u64)> {
    machine::hugetlb_pools(Path::new(machine::HUGEPAGES_SYSFS))
        .into_iter()
        .map(|p| (p.page_kb, p.nr))
        .collect()
}

use hugetune_model::stats::{mann_whitney_p, speedup_ci};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Gain,
    NoSignificantChange,
    Loss,
    /// An optimized run ended otherwise than the program does without the plan.
    Broke,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Gain => "gain",
            Verdict::NoSignificantChange => "no significant change",
            Verdict::Loss => "loss",
            Verdict::Broke => "the plan broke the program",
        }
    }
}

/// Significance level of the verdict (one-sided, each direction).
pub const ALPHA: f64 = 0.05;

/// Gain when the optimized runs are significantly faster (exact one-sided
/// Mann-Whitney U at 5 %: with 3 + 3 runs that needs every optimized run faster
/// than every baseline run) and the speedup's 95 % bootstrap interval, which is
/// printed beside the verdict, lies above 1; loss in the mirror case. A verdict
/// never contradicts its interval ("1.33x (0.90..1.41x): gain" was possible
/// with the test alone).
pub fn verdict(baseline: &[f64], optimized: &[f64]) -> Verdict {
    let (lo, hi) = speedup_ci(baseline, optimized);
    if mann_whitney_p(optimized, baseline) <= ALPHA && lo > 1.0 {
        Verdict::Gain
    } else if mann_whitney_p(baseline, optimized) <= ALPHA && hi < 1.0 {
        Verdict::Loss
    } else {
        Verdict::NoSignificantChange
    }
}

/// The rank test alone: `a`'s runs significantly faster than `b`'s (exact
/// one-sided Mann-Whitney U at 5 %). For comparisons that print no interval
/// (is the best peer faster than hugetune?); verdicts use `verdict`.
pub fn significantly_faster(a: &[f64], b: &[f64]) -> bool {
    mann_whitney_p(a, b) <= ALPHA
}

/// How many A/B pairs to run and how a run is judged: at least `min`, then
/// more until the 95 % bootstrap confidence interval of the speedup is
/// narrower than `ci_width` (in speedup units: 0.05 means ±2.5 %), at most
/// `max`; with `compare_output` a run's stdout is part of how it ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunCount {
    pub min: usize,
    pub max: usize,
    pub ci_width: f64,
    #[serde(default)]
    pub compare_output: bool,
}

impl RunCount {
    pub fn fixed(n: usize) -> Self {
        RunCount {
            min: n,
            max: n,
            ci_width: f64::INFINITY,
            compare_output: false,
        }
    }

    /// Whether `b`/`o` (one entry per pair so far) are enough.
    pub fn enough(&self, b: &[f64], o: &[f64]) -> bool {
        let n = b.len().min(o.len());
        if n >= self.max {
            return true;
        }
        if n < self.min.max(2) {
            return false;
        }
        let (lo, hi) = speedup_ci(b, o);
        hi - lo < self.ci_width
    }
}

/// Where `got` first differs from `want`, in words; `None` when they are equal.
pub fn output_difference(want: &[u8], got: &[u8]) -> Option<String> {
    if want == got {
        return None;
    }
    let at = want
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let line = want[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    Some(format!(
        "{} bytes where the baseline printed {}, first different at byte {at} (line {line})",
        got.len(),
        want.len()
    ))
}

/// Runs pairs, baseline first in each pair, until `count` says they are enough
/// or an optimized run breaks (module doc). `after_optimized` reads the runtime
/// library's summary after an optimized run. With `count.compare_output` both
/// specs must capture stdout (`Output::Capture`); an untimed baseline run
/// first gives the output every run must print.
pub fn interleaved(
    baseline: &RunSpec,
    optimized: &RunSpec,
    count: RunCount,
    mut after_optimized: impl FnMut() -> Option<serde_json::Value>,
    mut progress: impl FnMut(&str, usize, &RunStats),
) -> Result<AbResult> {
    let r = RefCell::new(AbResult {
        baseline: vec![],
        optimized: vec![],
        summaries: vec![],
        broke: None,
        pool_changes: vec![],
    });
    let compare_output = count.compare_output;
    // The output to compare with, from a run of its own: the first timed
    // baseline run is already compared, so a program whose output changes from
    // run to run is found before any optimized run is blamed for it.
    let reference = if compare_output {
        let s = run(baseline)?;
        if s.signal.is_some() {
            bail!(
                "the program {} without the plan: nothing to validate{}",
                ended(s.exit_code, s.signal),
                stderr_part(&tail_text(&s.stderr, 2000))
            );
        }
        s.stdout
    } else {
        Vec::new()
    };
    let pools = pool_sizes();
    let watch = |r: &mut AbResult| {
        for (kb, nr) in pool_sizes() {
            let was = pools.iter().find(|p| p.0 == kb).map_or(0, |p| p.1);
            let text = format!(
                "the {kb} kB hugetlb pool went from {was} to {nr} pages during the runs (changed by another process)"
            );
            if nr != was && !r.pool_changes.contains(&text) {
                r.pool_changes.push(text);
            }
        }
    };
    // Pairs: baseline then optimized, no warm-up round (validate warms the
    // optimized configuration up itself), until `count` says they are enough.
    let pairs = Rounds {
        min: 1,
        max: usize::MAX,
        warm_up: false,
        rotate: false,
        warm_memory: false,
        footprint_of: 0,
    };
    rounds::run(
        2,
        &pairs,
        |step| {
            let i = step.round - 1;
            let mut r = r.borrow_mut();
            if step.config == 0 {
                let s = run(baseline)?;
                progress("baseline", i, &s);
                watch(&mut r);
                let first = r.baseline.first().unwrap_or(&s);
                if s.signal.is_some() || (s.exit_code, s.signal) != (first.exit_code, first.signal)
                {
                    let how = ended(s.exit_code, s.signal);
                    let tail = tail_text(&s.stderr, 2000);
                    if r.baseline.is_empty() {
                        bail!(
                            "the program {how} without the plan: nothing to validate{}",
                            stderr_part(&tail)
                        );
                    }
                    bail!(
                        "baseline run {} {how} where the first {}: the program does not end the same \
                         way from run to run, so its times cannot be compared{}",
                        i + 1,
                        ended(first.exit_code, first.signal),
                        stderr_part(&tail)
                    );
                }
                let mut s = s;
                if compare_output {
                    if let Some(d) = output_difference(&reference, &s.stdout) {
                        bail!(
                            "baseline run {} printed other output than the run before it ({d}): the \
                             program's output changes from run to run without the plan, so \
                             --compare-output cannot judge the plan",
                            i + 1
                        );
                    }
                    s.stdout = Vec::new();
                }
                r.baseline.push(s);
                return Ok(Ran::Done); // (no footprint: no warm-up round)
            }
            let mut s = run(optimized)?;
            progress("optimized", i, &s);
            watch(&mut r);
            let summary = after_optimized();
            let want = &r.baseline[0];
            let same_end = (s.exit_code, s.signal) == (want.exit_code, want.signal);
            let output_differs = if compare_output && same_end {
                output_difference(&reference, &s.stdout)
            } else {
                None
            };
            if !same_end || output_differs.is_some() {
                r.broke = Some(BrokenRun {
                    pair: i,
                    exit_code: s.exit_code,
                    signal: s.signal,
                    baseline_exit_code: want.exit_code,
                    wall_s: s.wall_s,
                    stderr_tail: tail_text(&s.stderr, 2000),
                    output_differs,
                });
                r.summaries.extend(summary);
                return Ok(Ran::Stop);
            }
            s.stdout = Vec::new();
            r.optimized.push(s);
            r.summaries.extend(summary);
            Ok(Ran::Done)
        },
        |_| {
            let r = r.borrow();
            let b: Vec<f64> = r.baseline.iter().map(|s| s.wall_s).collect();
            let o: Vec<f64> = r.optimized.iter().map(|s| s.wall_s).collect();
            !count.enough(&b, &o)
        },
    )?;
    Ok(r.into_inner())
}

fn stderr_part(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Output;
    use hugetune_model::stats::median;

    fn sh(script: &str) -> RunSpec {
        let mut s = RunSpec::new(vec!["sh".into(), "-c".into(), script.into()]);
        s.stderr = Output::Capture;
        s
    }

    /// The pairs of `b` and `o` (shell scripts), `n` of them at most.
    fn pairs(b: &str, o: &str, n: usize) -> Result<AbResult> {
        interleaved(&sh(b), &sh(o), RunCount::fixed(n), || None, |_, _, _| {})
    }

    #[test]
    fn a_broken_optimized_run_stops_the_runs_and_is_never_timed() {
        let r = pairs("exit 0", "echo boom >&2; kill -SEGV $$", 3).unwrap();
        let b = r.broke.expect("the optimized run broke the program");
        assert_eq!((b.pair, b.signal, b.baseline_exit_code), (0, Some(11), 0));
        assert_eq!(b.stderr_tail, "boom");
        assert!(
            b.describe().contains("died of signal 11"),
            "{}",
            b.describe()
        );
        assert!(r.optimized.is_empty(), "a failed run is never a timing");
        assert_eq!(r.baseline.len(), 1);
        // A status that differs is a break too, a program's own non-zero is not.
        let r = pairs("exit 2", "exit 2", 2).unwrap();
        assert!(r.broke.is_none() && r.optimized.len() == 2);
        let r = pairs("exit 2", "exit 0", 2).unwrap();
        assert_eq!(r.broke.unwrap().exit_code, 0);
    }

    #[test]
    fn a_failed_baseline_run_stops_the_validation_with_the_reason() {
        let e = pairs("echo no input >&2; kill -TERM $$", "exit 0", 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("died of signal 15 without the plan") && e.contains("no input"),
            "{e}"
        );
        let d = tempfile::tempdir().unwrap();
        let flag = d.path().join("ran");
        let flaky = format!(
            "if [ -e {0} ]; then exit 1; else touch {0}; fi",
            flag.display()
        );
        let e = pairs(&flaky, "exit 0", 3).unwrap_err().to_string();
        assert!(
            e.contains("baseline run 2 exited with status 1 where the first exited with status 0"),
            "{e}"
        );
    }

    /// `pairs` comparing what the scripts print.
    fn printing(b: &str, o: &str, n: usize) -> Result<AbResult> {
        let (mut b, mut o) = (sh(b), sh(o));
        b.stdout = Output::Capture;
        o.stdout = Output::Capture;
        let count = RunCount {
            compare_output: true,
            ..RunCount::fixed(n)
        };
        interleaved(&b, &o, count, || None, |_, _, _| {})
    }

    #[test]
    fn compared_outputs_must_be_the_baselines() {
        let r = printing("printf 'a\\nb\\n'", "printf 'a\\nb\\n'", 2).unwrap();
        assert!(r.broke.is_none() && r.optimized.len() == 2);
        assert!(r.optimized.iter().all(|s| s.stdout.is_empty()), "not kept");
        // Same status, other output: the plan broke the program.
        let r = printing("printf 'a\\nb\\n'", "printf 'a\\nc\\n'", 2).unwrap();
        let b = r.broke.expect("other output is a break");
        assert!(r.optimized.is_empty());
        let d = b.describe();
        assert!(
            d.contains("printed other output") && d.contains("byte 2 (line 2)"),
            "{d}"
        );
        // A baseline whose output changes from run to run cannot be judged.
        let e = printing("date +%N", "date +%N", 3).unwrap_err().to_string();
        assert!(e.contains("cannot judge the plan"), "{e}");
        assert_eq!(
            output_difference(b"ab", b"abc").unwrap(),
            "3 bytes where the baseline printed 2, first different at byte 2 (line 1)"
        );
        // Without the comparison, output does not matter.
        let r = pairs("echo a", "echo b", 1).unwrap();
        assert!(r.broke.is_none());
    }

    #[test]
    fn stderr_tails_start_at_a_line() {
        assert_eq!(tail_text(b"one\ntwo\nthree\n", 9), "three");
        assert_eq!(tail_text(b"short", 100), "short");
        assert_eq!(tail_text(b"", 10), "");
    }

    #[test]
    fn medians_and_verdicts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(
            verdict(&[10.0, 11.0, 10.5], &[7.0, 7.2, 7.1]),
            Verdict::Gain
        );
        assert_eq!(
            verdict(&[10.0, 11.0], &[10.5, 7.0]),
            Verdict::NoSignificantChange
        );
        assert_eq!(verdict(&[7.0, 7.1, 7.2], &[9.0, 9.1, 9.3]), Verdict::Loss);
        // One run per side can never be significant.
        assert_eq!(verdict(&[7.0], &[9.0]), Verdict::NoSignificantChange);
        // 5 + 5 tolerates one outlier of a modest size.
        assert_eq!(
            verdict(&[5.9, 5.4, 6.6, 5.8, 6.0], &[3.8, 3.7, 5.0, 3.9, 3.6]),
            Verdict::Gain
        );
        // The rank test alone would call this a gain, but the interval printed
        // beside the verdict reaches below 1: the verdict follows the interval.
        let (b, o) = ([5.9, 5.4, 6.6, 5.8, 6.0], [3.8, 3.7, 6.0, 3.9, 3.6]);
        assert!(mann_whitney_p(&o, &b) <= ALPHA);
        assert!(speedup_ci(&b, &o).0 <= 1.0, "{:?}", speedup_ci(&b, &o));
        assert_eq!(verdict(&b, &o), Verdict::NoSignificantChange);
    }

    #[test]
    fn bootstrap_interval_and_adaptive_count() {
        let b = [10.0, 10.2, 9.9, 10.1, 10.0];
        let o = [7.0, 7.1, 6.9, 7.05, 7.0];
        let (lo, hi) = speedup_ci(&b, &o);
        let point = median(&b) / median(&o);
        assert!(lo <= point && point <= hi, "{lo} {point} {hi}");
        assert!(lo > 1.35 && hi < 1.5, "{lo} {hi}");
        // Deterministic.
        assert_eq!(speedup_ci(&b, &o), (lo, hi));
        // Noisy runs give a wider interval than tight ones.
        let noisy_o = [5.0, 9.0, 7.0, 6.0, 8.5];
        let (nlo, nhi) = speedup_ci(&b, &noisy_o);
        assert!(nhi - nlo > 3.0 * (hi - lo));
        let c = RunCount {
            min: 3,
            max: 10,
            ci_width: 0.2,
            compare_output: false,
        };
        assert!(!c.enough(&b[..2], &o[..2]), "below the minimum");
        assert!(c.enough(&b, &o), "tight runs: enough at 5");
        assert!(!c.enough(&b, &noisy_o), "noisy runs: more");
        assert!(
            c.enough(&[b, b].concat(), &[noisy_o, noisy_o].concat()),
            "the maximum ends it"
        );
        assert!(RunCount::fixed(3).enough(&b[..3], &o[..3]));
        assert!(!RunCount::fixed(3).enough(&b[..2], &o[..2]));
        assert!(speedup_ci(&[], &o).0.is_nan());
    }

    #[test]
    fn mann_whitney_exact_values() {
        // Complete separation, 3 + 3: 1 / C(6,3) = 0.05.
        assert!((mann_whitney_p(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]) - 0.05).abs() < 1e-12);
        // 5 + 5 complete separation: 1 / 252.
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!((p - 1.0 / 252.0).abs() < 1e-12);
        // One inversion in 5 + 5: U = 24, P(U >= 24) = 2 / 252.
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0, 6.5], &[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!((p - 2.0 / 252.0).abs() < 1e-12);
        // The opposite direction is not significant.
        assert!(mann_whitney_p(&[6.0, 7.0, 8.0], &[1.0, 2.0, 3.0]) > 0.9);
        // Large samples use the normal approximation and agree on clear cases.
        let x: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let y: Vec<f64> = (0..100).map(|i| i as f64 + 50.0).collect();
        assert!(mann_whitney_p(&x, &y) < 1e-6);
        assert!(mann_whitney_p(&y, &x) > 0.99);
    }
}
