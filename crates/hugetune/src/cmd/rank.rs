//! `hugetune rank`: the model's predicted ranking of mappings against the measured
//! one (seed 001 §5.3.2). Profiles a command once, predicts every base mapping at
//! every page size the machine has, then runs the command under each mapping,
//! interleaved and repeated, and compares percentages of maximal benefit.

use crate::stages::{self, RefOptions, RefSource};
use crate::Ctx;
use anyhow::{bail, Context, Result};
use hugetune_capture::rounds::{self, Ran, Rounds};
use hugetune_capture::runner::{self, Output};
use hugetune_format::plan::PlanOptions;
use hugetune_host::kernel_state::{
    hold_page_reporting, lock_kernel_state, set_hugetlb_pool_holding, PoolChange, SysfsChange,
};
use hugetune_host::machine;
use hugetune_model::rank::{
    default_backing, measured_pmbs, pmb, ranking_error, ranking_uncertainty, Prediction,
    RankingUncertainty,
};
use hugetune_model::stats::median;
use hugetune_model::stream::AnalysisOptions;
use hugetune_model::Backing;
use hugetune_render::table;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Timed runs of each mapping (after one untimed warm-up run each), interleaved
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Keep adding rounds past --runs, up to this many, until every mapping's
    /// measured PMB has a 95 % bootstrap interval narrower than --pmb-ci
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub max_runs: Option<u32>,
    /// Widest measured-PMB interval (percentage points) that ends the rounds early
    #[arg(long, default_value_t = 10.0)]
    pub pmb_ci: f64,
    /// Run the command on this CPU only (the measuring process stays off it)
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Reference source of the profile
    #[arg(long, value_enum, default_value = "qemu")]
    pub refs: RefSource,
    /// Profile bundle: reused when it exists (complete or sampled), written
    /// otherwise
    #[arg(long)]
    pub bundle: Option<PathBuf>,
    /// Profile a sample: 4 KB pages and 2 MB regions at this rate (qemu;
    /// predictions come with error bars, docs/model.md §3.1)
    #[arg(long, value_name = "R", conflicts_with = "simulate")]
    pub rate: Option<f64>,
    /// Also run the exact set-associative TLB simulation and report the fully
    /// associative approximation's error against it (needs every reference)
    #[arg(long)]
    pub simulate: bool,
    /// mTHP sizes to predict and measure (comma-separated: 64k,1m; `none`);
    /// default: those `analyze` evaluates (docs/model.md, "mTHP"). Each run of
    /// an mTHP mapping sets its per-size controls and restores them after
    #[arg(long, value_name = "SIZES")]
    pub mthp: Option<String>,
    /// A name for the workload in the report
    #[arg(long)]
    pub name: Option<String>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
    /// The command
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

/// Seed of the bootstrap over rounds (the same runs give the same intervals).
const UNCERTAINTY_SEED: u64 = 0x5eed_0001;

/// A number that JSON wrote as null because it was not finite: an unbounded speedup.
fn null_is_infinite<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// An interval whose ends may be unbounded (`null` in JSON, as serde_json
/// writes an infinite f64), read back as infinite ends.
fn interval_nulls_are_infinite<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<(f64, f64)>, D::Error> {
    let v = Option::<(Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok(v.map(|(lo, hi)| (lo.unwrap_or(f64::INFINITY), hi.unwrap_or(f64::INFINITY))))
}

/// "1.23x", or "∞" for an unbounded speedup.
fn speedup_text(s: f64) -> String {
    if s.is_finite() {
        format!("{s:.2}x")
    } else {
        "∞".into()
    }
}

/// One mapping: predicted and measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankedMapping {
    pub label: String,
    pub predicted_saving_ms: f64,
    pub predicted_pmb: f64,
    /// Infinite when the predicted saving exceeds the measured 4 KB time (JSON
    /// writes it as null).
    #[serde(deserialize_with = "null_is_infinite")]
    pub predicted_speedup: f64,
    /// The prediction's interval (docs/model.md §4.1) as speedups over the
    /// measured all-small median, like `predicted_speedup`; absent without a
    /// calibration's spread (the default costs) and in older results.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "interval_nulls_are_infinite"
    )]
    pub predicted_interval: Option<(f64, f64)>,
    pub measured_median_s: f64,
    pub measured_min_s: f64,
    pub measured_max_s: f64,
    pub measured_pmb: f64,
    pub measured_speedup: f64,
    /// Huge bytes the runtime library reported backed (median over runs).
    pub huge_bytes: u64,
    /// Page walks: fully associative approximation, and the exact simulation.
    pub walks: u64,
    pub sim_walks: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReport {
    pub name: String,
    pub command: Vec<String>,
    pub runs: usize,
    pub refs: u64,
    pub significance_passes: bool,
    pub tlb_misses_per_s: f64,
    pub faults_per_s: f64,
    pub mappings: Vec<RankedMapping>,
    /// Seed 001 §5.3.2: mean |predicted PMB - measured PMB| over the mappings.
    pub ranking_error: f64,
    /// 95 % bootstrap intervals of the measured PMBs and of the ranking error
    /// (rounds resampled); absent in results from before they were computed.
    #[serde(default)]
    pub uncertainty: Option<RankingUncertainty>,
    /// The CPU the command was pinned to, if any.
    #[serde(default)]
    pub cpu: Option<usize>,
    /// Whether the best predicted mapping is the best measured one, or within the
    /// measured spread of it.
    pub best_agrees: bool,
    pub geometry: String,
    pub cost_source: String,
}

/// The mappings measured: the seed's base mappings (all small, one category
/// large, all large) — single categories at every page size and backing the
/// analysis predicted (mTHP sizes included), all-large with each category's
/// default backing. A 1 GB mapping without a 1 GB page is the 2 MB one again
/// and is left out.
fn measured_set(preds: &[Prediction]) -> Vec<Prediction> {
    let mut out: Vec<Prediction> = Vec::new();
    for p in preds.iter().filter(|p| p.base) {
        let gigantic = p.assignments.iter().any(|&(_, b)| b == Backing::Hugetlb1g);
        if gigantic && p.hugetlb_1g_pages == 0 {
            continue;
        }
        if p.assignments.len() > 1 && p.assignments.iter().any(|&(c, b)| b != default_backing(c)) {
            continue;
        }
        if !out.iter().any(|q| q.label == p.label) {
            out.push(p.clone());
        }
    }
    out.sort_by(|a, b| a.label.cmp(&b.label));
    if let Some(i) = out.iter().position(|p| p.assignments.is_empty()) {
        let s = out.remove(i);
        out.insert(0, s);
    }
    out
}

/// Kernel state held for the whole experiment, restored on drop and on interrupt.
struct Held {
    _pools: Vec<PoolChange>,
    _reporting: Option<SysfsChange>,
}

/// Pools the measured mappings need, grown under one lock for the whole
/// experiment; free page reporting held off meanwhile (hugetlb pool pages stay
/// backed by the host, and so must the memory of the other configurations).
fn hold_kernel_state(set: &[Prediction]) -> Result<Held> {
    let lock = lock_kernel_state()?;
    let reporting = hold_page_reporting(&lock)?;
    if let Some(r) = &reporting {
        stages::note(format!(
            "free page reporting held off for the runs ({} was {}; restored afterwards)",
            r.path.display(),
            r.previous
        ));
    }
    Ok(Held {
        _pools: reserve_pools(&lock, set)?,
        _reporting: reporting,
    })
}

fn reserve_pools(
    lock: &hugetune_host::kernel_state::KernelStateLock,
    set: &[Prediction],
) -> Result<Vec<PoolChange>> {
    let need_2m = set.iter().map(|p| p.hugetlb_pages).max().unwrap_or(0);
    let need_1g = set.iter().map(|p| p.hugetlb_1g_pages).max().unwrap_or(0);
    let mut changes = Vec::new();
    for (kb, need) in [(2048u64, need_2m), (1 << 20, need_1g)] {
        if need == 0 {
            continue;
        }
        let Some(pool) = machine::pool(kb) else {
            stages::note(format!("no {kb} kB hugetlb pool on this kernel"));
            continue;
        };
        // A page or two of slack: the library's tail and alignment never need
        // more, and a short pool would silently measure a fallback.
        let want = pool.nr + need + 2;
        let c = set_hugetlb_pool_holding(lock, kb, want)?;
        if c.now < want {
            stages::note(format!(
                "the {kb} kB pool grew to {} of {want} pages (fragmentation): mappings \
                 needing more fall back, see the huge bytes column",
                c.now
            ));
        }
        changes.push(c);
    }
    Ok(changes)
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let report = execute(ctx, &a)?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(0)
}

pub fn execute(ctx: &Ctx, a: &Args) -> Result<RankReport> {
    if a.pmb_ci.is_nan() || a.pmb_ci <= 0.0 {
        bail!("--pmb-ci must be a positive number of percentage points");
    }
    if let Some(cpu) = a.cpu {
        let allowed = runner::allowed_cpus();
        if !allowed.contains(&cpu) {
            bail!("--cpu {cpu}: not a CPU this process may use (allowed: {allowed:?})");
        }
    }
    let art = crate::artifacts::find()?;
    let m = machine::machine(ctx.tlb.as_deref())?;
    let tmp = hugetune_host::kernel_state::Scratch::new("hugetune-rank.")?;
    let bundle = a
        .bundle
        .clone()
        .unwrap_or_else(|| tmp.path().join("profile.htb"));
    if !bundle.exists() {
        let refs = RefOptions {
            source: a.refs,
            rate: a.rate,
            max_pages: None,
            max_refs: None,
            start_rate: None,
            seed: 0,
        };
        stages::record(
            &art,
            &a.command,
            &bundle,
            &refs,
            ctx.tlb.as_deref(),
            ctx.verbose,
            None,
        )?;
    } else {
        stages::note(format!("reusing the profile {}", bundle.display()));
    }
    let cost = stages::cost_model_at(&ctx.db_path, &m)?;
    let opts = AnalysisOptions {
        gigantic: machine::pool(1 << 20).is_some(),
        mthp: match &a.mthp {
            None => stages::mthp_sizes(&m.tlb.geometry, true),
            Some(list) => stages::parse_mthp(list)?,
        },
        simulate: a.simulate,
        sites: vec![],
        threads: 0,
        ..Default::default()
    };
    let an = stages::analyze_with(&bundle, &m.tlb.geometry, &cost, &opts)?;
    let set = measured_set(&an.predictions);
    if set.len() < 2 {
        bail!("the analysis found no mapping to compare (no mappable data)");
    }
    stages::note(format!(
        "measuring {} mappings x {} runs: {}",
        set.len(),
        a.runs,
        set.iter()
            .map(|p| p.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let _held = hold_kernel_state(&set)?;
    let plan_options = PlanOptions::for_program(&an.program);
    let mut applied = Vec::new();
    // Every mapping runs with the runtime library loaded, all-small with an empty
    // plan: the runs differ only in what the plan places on huge pages.
    for p in &set {
        let ap = stages::applied_spec(
            &art,
            &a.command,
            &p.assignments,
            an.threshold,
            &plan_options,
            Output::Null,
        )?;
        applied.push(ap);
    }
    let n = set.len();
    let times: RefCell<Vec<Vec<f64>>> = RefCell::new(vec![Vec::new(); n]);
    let mut huge: Vec<Vec<f64>> = vec![Vec::new(); n];
    let min_runs = a.runs as usize;
    let max_runs = a.max_runs.map_or(min_runs, |m| (m as usize).max(min_runs));
    let predicted_pmbs: Vec<f64> = {
        let best = set.iter().map(|p| p.saving_ns).fold(0.0, f64::max);
        set.iter().map(|p| pmb(p.saving_ns, best)).collect()
    };
    let mut specs: Vec<runner::RunSpec> = applied.iter().map(|ap| ap.spec.clone()).collect();
    for s in &mut specs {
        s.cpu = a.cpu;
    }
    // The measured command gets its CPU to itself: this process (its /proc
    // sampling, the memory warm-up) moves to the others.
    if let Some(cpu) = a.cpu {
        if !runner::keep_off_cpu(cpu) {
            stages::note(format!(
                "--cpu {cpu}: no other CPU to move the measuring process to; it shares CPU {cpu}"
            ));
        }
    }
    // Round 0 is the untimed warm-up (memory the host reclaimed is slow once);
    // each round runs every mapping, in an order rotated from round to round
    // (capture::rounds).
    let rounds = Rounds {
        min: min_runs,
        max: max_runs,
        warm_up: true,
        rotate: true,
        warm_memory: true,
        // The footprint, from the all-small run's 4 KB faults (not its maximum
        // RSS: a child's counts what it inherited from us at fork).
        footprint_of: set.iter().position(|p| p.is_all_small()).unwrap_or(0),
    };
    let round = rounds::run(
        n,
        &rounds,
        |step| {
            let (i, round) = (step.config, step.round);
            let st = runner::run(&specs[i])
                .with_context(|| format!("running the mapping {}", set[i].label))?;
            if st.exit_code != 0 {
                bail!(
                    "the command exited with status {} under the mapping {}",
                    st.exit_code,
                    set[i].label
                );
            }
            let bytes = stages::summary_huge_bytes(&stages::take_summaries(applied[i].dir.path()));
            if step.timed() {
                times.borrow_mut()[i].push(st.wall_s);
                huge[i].push(bytes as f64);
                stages::note(format!(
                    "round {round}/{min_runs}..{max_runs} {}: {:.3} s",
                    set[i].label, st.wall_s
                ));
            }
            Ok(Ran::Faults(st.minor_faults))
        },
        |round| {
            // Past --runs, rounds go on (up to --max-runs) while some mapping's
            // measured PMB is still uncertain by more than --pmb-ci points.
            let u = ranking_uncertainty(&times.borrow(), &predicted_pmbs, 1000, UNCERTAINTY_SEED);
            match u {
                Some(u) if u.widest() > a.pmb_ci => {
                    stages::note(format!(
                        "after {round} rounds the widest measured-PMB interval is {:.1} points \
                         (> {}): another round",
                        u.widest(),
                        a.pmb_ci
                    ));
                    true
                }
                _ => false,
            }
        },
    )?;
    let times = times.into_inner();
    let runs = round;
    let med: Vec<f64> = times.iter().map(|t| median(t)).collect();
    let base = med[0];
    let measured = measured_pmbs(&times);
    let uncertainty = ranking_uncertainty(&times, &predicted_pmbs, 2000, UNCERTAINTY_SEED);
    let best_predicted = set.iter().map(|p| p.saving_ns).fold(0.0, f64::max);
    let mut mappings = Vec::new();
    for (i, p) in set.iter().enumerate() {
        let mapping = an.result.mappings.iter().find(|r| r.name == p.mapping);
        let interval = an.intervals.iter().find(|x| x.label == p.label).map(|x| {
            (
                rebased_speedup(x.low, an.meta.native.wall_s, base),
                rebased_speedup(x.high, an.meta.native.wall_s, base),
            )
        });
        mappings.push(RankedMapping {
            label: p.label.clone(),
            predicted_saving_ms: p.saving_ns / 1e6,
            predicted_pmb: pmb(p.saving_ns, best_predicted),
            predicted_speedup: speedup_over(base, p.saving_ns / 1e9),
            predicted_interval: interval,
            measured_median_s: med[i],
            measured_min_s: times[i].iter().copied().fold(f64::INFINITY, f64::min),
            measured_max_s: times[i].iter().copied().fold(0.0, f64::max),
            measured_pmb: measured[i],
            measured_speedup: base / med[i],
            huge_bytes: median(&huge[i]) as u64,
            walks: p.walks,
            sim_walks: mapping.filter(|r| r.simulated).map(|r| r.total().sim_walks),
        });
    }
    let err = ranking_error(
        &mappings
            .iter()
            .map(|m| (m.predicted_pmb, m.measured_pmb))
            .collect::<Vec<_>>(),
    )
    .unwrap_or(0.0);
    let best_pred = mappings
        .iter()
        .max_by(|x, y| x.predicted_saving_ms.total_cmp(&y.predicted_saving_ms))
        .expect("at least two mappings");
    let best_meas = mappings
        .iter()
        .min_by(|x, y| x.measured_median_s.total_cmp(&y.measured_median_s))
        .expect("at least two mappings");
    let best_agrees =
        best_pred.label == best_meas.label || best_pred.measured_min_s <= best_meas.measured_max_s;
    Ok(RankReport {
        name: a
            .name
            .clone()
            .unwrap_or_else(|| stages::strings(&a.command).join(" ")),
        command: stages::strings(&a.command),
        runs,
        refs: an.stream.refs,
        significance_passes: an.significance.passes,
        tlb_misses_per_s: an.significance.tlb_misses_per_s,
        faults_per_s: an.significance.faults_per_s,
        mappings,
        ranking_error: err,
        uncertainty,
        cpu: a.cpu,
        best_agrees,
        geometry: m.tlb.geometry.describe().join("; "),
        cost_source: cost.source.clone(),
    })
}

/// The speedup of saving `saving_s` seconds of a `base`-second run; infinite
/// where the saving is the whole run or more.
fn speedup_over(base: f64, saving_s: f64) -> f64 {
    let rest = base - saving_s;
    if rest > 0.0 {
        base / rest
    } else {
        f64::INFINITY
    }
}

/// A speedup the analysis predicted over its own native time `native_s`, taken
/// over `base` (the measured all-small median) as `predicted_speedup` is: the
/// same saving in seconds, over the other baseline.
fn rebased_speedup(speedup: f64, native_s: f64, base: f64) -> f64 {
    if speedup.is_nan() || speedup <= 0.0 || !native_s.is_finite() {
        return speedup;
    }
    speedup_over(base, native_s * (1.0 - 1.0 / speedup))
}

/// How many mappings' measured speedups lie within their predicted interval,
/// of those that have one; all-small, the baseline both are taken over, is
/// 1.00x on both sides by construction and not counted.
fn inside_intervals(r: &RankReport) -> (usize, usize) {
    let with: Vec<_> = r
        .mappings
        .iter()
        .filter(|m| m.label != "all-small")
        .filter_map(|m| m.predicted_interval.map(|i| (i, m.measured_speedup)))
        .collect();
    let inside = with
        .iter()
        .filter(|((lo, hi), s)| lo <= s && s <= hi)
        .count();
    (inside, with.len())
}

fn render(r: &RankReport) -> String {
    let rows: Vec<Vec<String>> = r
        .mappings
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ci = r
                .uncertainty
                .as_ref()
                .and_then(|u| u.pmb_ci.get(i))
                .map(|(lo, hi)| format!(" [{lo:.0}, {hi:.0}]"))
                .unwrap_or_default();
            vec![
                m.label.clone(),
                format!("{:.1}", m.predicted_saving_ms),
                format!("{:.0}%", m.predicted_pmb),
                format!("{:.0}%{ci}", m.measured_pmb),
                match m.predicted_interval {
                    Some((lo, hi)) => format!(
                        "{} ({}-{})",
                        speedup_text(m.predicted_speedup),
                        speedup_text(lo),
                        speedup_text(hi)
                    ),
                    None => speedup_text(m.predicted_speedup),
                },
                format!("{:.2}x", m.measured_speedup),
                format!(
                    "{:.3} s [{:.3}, {:.3}]",
                    m.measured_median_s, m.measured_min_s, m.measured_max_s
                ),
                hugetune_render::bytes(m.huge_bytes),
                match m.sim_walks {
                    Some(s) => format!("{} / {}", m.walks, s),
                    None => format!("{}", m.walks),
                },
            ]
        })
        .collect();
    let error_ci = r
        .uncertainty
        .as_ref()
        .map(|u| format!(", 95 % CI {:.1}..{:.1}%", u.error_ci.0, u.error_ci.1))
        .unwrap_or_default();
    let inside = match inside_intervals(r) {
        (_, 0) => String::new(),
        (k, n) => format!("; measured speedup within the predicted interval on {k} of {n}"),
    };
    format!(
        "{}\n{}\nranking error {:.1}%{error_ci} (mean |predicted PMB - measured PMB| over {} mappings, {} runs each); best predicted mapping {} the best measured{inside}\n",
        r.name,
        table(
            &[
                "mapping",
                "predicted saving ms",
                "PMB pred",
                "PMB meas [95 % CI]",
                "speedup pred (interval)",
                "speedup meas",
                "median [min, max]",
                "huge",
                "walks (FA / sim)",
            ],
            &rows
        ),
        r.ranking_error,
        r.mappings.len(),
        r.runs,
        if r.best_agrees { "is" } else { "is NOT" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_model::Category;

    fn pred(label: &str, base: bool, a: Vec<(Category, Backing)>) -> Prediction {
        Prediction {
            mapping: label.into(),
            label: label.into(),
            base,
            assignments: a,
            miss_time_ns: 0.0,
            saving_ns: 0.0,
            pmb: 0.0,
            predicted_seconds: 1.0,
            predicted_speedup: 1.0,
            hugetlb_pages: 0,
            hugetlb_1g_pages: 0,
            static_pages_1g: (0, 0),
            sites: vec![],
            thp_pages: 0,
            walks: 0,
            faults: 0,
        }
    }

    /// A saving beyond the measured time: written as null, read back as ∞.
    #[test]
    fn an_unbounded_predicted_speedup_round_trips() {
        let m = RankedMapping {
            label: "heap-large:hugetlb".into(),
            predicted_saving_ms: 2400.0,
            predicted_pmb: 100.0,
            predicted_speedup: f64::INFINITY,
            predicted_interval: None,
            measured_median_s: 1.4,
            measured_min_s: 1.3,
            measured_max_s: 1.5,
            measured_pmb: 100.0,
            measured_speedup: 1.46,
            huge_bytes: 1 << 30,
            walks: 0,
            sim_walks: None,
        };
        let j = serde_json::to_string(&m).unwrap();
        assert!(j.contains("\"predicted_speedup\":null"), "{j}");
        assert!(!j.contains("predicted_interval"), "{j}");
        let back: RankedMapping = serde_json::from_str(&j).unwrap();
        assert!(back.predicted_speedup.is_infinite());
        assert_eq!(speedup_text(back.predicted_speedup), "∞");
        assert_eq!(speedup_text(1.234), "1.23x");
        let finite: RankedMapping = serde_json::from_str(
            &j.replace("\"predicted_speedup\":null", "\"predicted_speedup\":1.5"),
        )
        .unwrap();
        assert_eq!(finite.predicted_speedup, 1.5);
    }

    /// An interval the analysis gave over its own native time is the same
    /// saving over the measured baseline; the report counts the mappings
    /// whose measured speedup lies inside theirs.
    #[test]
    fn intervals_are_taken_over_the_measured_baseline() {
        // 2x over a 1 s native run saves 0.5 s: over a 2 s baseline, 1.33x.
        assert!((rebased_speedup(2.0, 1.0, 2.0) - 4.0 / 3.0).abs() < 1e-12);
        // The same baseline: unchanged.
        assert!((rebased_speedup(1.7, 1.5, 1.5) - 1.7).abs() < 1e-12);
        // A saving of the whole measured run or more: unbounded.
        assert!(rebased_speedup(3.0, 3.0, 1.0).is_infinite());
        // Slower (a speedup below 1) stays slower.
        assert!(rebased_speedup(0.8, 1.0, 2.0) < 1.0);
        let row = |label: &str, interval, measured| RankedMapping {
            label: label.into(),
            predicted_saving_ms: 0.0,
            predicted_pmb: 0.0,
            predicted_speedup: 1.0,
            predicted_interval: interval,
            measured_median_s: 1.0,
            measured_min_s: 1.0,
            measured_max_s: 1.0,
            measured_pmb: 0.0,
            measured_speedup: measured,
            huge_bytes: 0,
            walks: 0,
            sim_walks: None,
        };
        let mut r = RankReport {
            name: "w".into(),
            command: vec![],
            runs: 3,
            refs: 0,
            significance_passes: true,
            tlb_misses_per_s: 0.0,
            faults_per_s: 0.0,
            mappings: vec![
                row("all-small", Some((1.0, 1.0)), 1.0),
                row("a", Some((1.2, 1.6)), 1.5),
                row("b", Some((1.2, 1.6)), 1.7),
                row("c", None, 9.0),
            ],
            ranking_error: 0.0,
            uncertainty: None,
            cpu: None,
            best_agrees: true,
            geometry: String::new(),
            cost_source: String::new(),
        };
        // all-small (1.00x inside 1.00x-1.00x by construction) does not count;
        // a mapping without an interval neither.
        assert_eq!(inside_intervals(&r), (1, 2));
        let text = render(&r);
        assert!(text.contains("1.00x (1.20x-1.60x)"), "{text}");
        assert!(
            text.contains("within the predicted interval on 1 of 2"),
            "{text}"
        );
        let j = serde_json::to_string(&r.mappings[1]).unwrap();
        assert!(j.contains("\"predicted_interval\":[1.2,1.6]"), "{j}");
        // An unbounded high end (the saving the whole run) round-trips.
        let mut open = r.mappings[1].clone();
        open.predicted_interval = Some((1.2, f64::INFINITY));
        let j = serde_json::to_string(&open).unwrap();
        assert!(j.contains("\"predicted_interval\":[1.2,null]"), "{j}");
        let back: RankedMapping = serde_json::from_str(&j).unwrap();
        assert_eq!(back.predicted_interval, Some((1.2, f64::INFINITY)));
        // Without intervals (the default costs) the report says nothing of them.
        r.mappings
            .iter_mut()
            .for_each(|m| m.predicted_interval = None);
        assert!(!render(&r).contains("interval on"));
    }

    #[test]
    fn measured_set_is_base_mappings_all_small_first() {
        let hl = Category::HeapLarge;
        let preds = vec![
            pred("heap-large:hugetlb", true, vec![(hl, Backing::Hugetlb2m)]),
            pred("all-small", true, vec![]),
            pred("static+heap-small", false, vec![]),
            pred("heap-large:thp-64k", true, vec![(hl, Backing::Thp(16))]),
            pred("heap-large:hugetlb", true, vec![(hl, Backing::Hugetlb2m)]),
            pred(
                "heap-large:hugetlb-1g",
                true,
                vec![(hl, Backing::Hugetlb1g)],
            ),
            pred(
                "static:thp heap-large:thp",
                true,
                vec![(Category::Static, Backing::Thp2m), (hl, Backing::Thp2m)],
            ),
            pred(
                "static:thp heap-large:hugetlb",
                true,
                vec![(Category::Static, Backing::Thp2m), (hl, Backing::Hugetlb2m)],
            ),
            pred(
                "static:thp-64k heap-large:thp-64k",
                true,
                vec![(Category::Static, Backing::Thp(16)), (hl, Backing::Thp(16))],
            ),
        ];
        let s = measured_set(&preds);
        let labels: Vec<&str> = s.iter().map(|p| p.label.as_str()).collect();
        // Single categories at every size, mTHP ones included (issue 23);
        // all-large only with each category's default backing.
        assert_eq!(
            labels,
            vec![
                "all-small",
                "heap-large:hugetlb",
                "heap-large:thp-64k",
                "static:thp heap-large:hugetlb"
            ]
        );
        assert_eq!(stages::parse_mthp("64k, 1m").unwrap(), vec![16, 20]);
        assert!(stages::parse_mthp("none").unwrap().is_empty());
        for bad in ["2m", "4k", "3k", ""] {
            let e = stages::parse_mthp(bad).unwrap_err().to_string();
            assert!(e.contains("is no mTHP size"), "{bad}: {e}");
        }
    }
}
