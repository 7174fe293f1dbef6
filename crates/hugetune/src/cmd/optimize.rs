//! `hugetune optimize`: record (on a training command if given) → analyze →
//! plan for the pages available now (optionally growing the pool for the run) →
//! validate with interleaved A/B runs → store and report.

use crate::stages::{self, Analysis, Validation};
use crate::Ctx;
use anyhow::{Context, Result};
use hugetune_capture::session::{self, Driver};
use hugetune_format::plan::PlanOptions;

use hugetune_host::machine;
use hugetune_model::plan;
use hugetune_model::plan::{Availability, ProgramTraits};
use hugetune_model::rank::{Prediction, PredictionError, PredictionInterval};
use hugetune_model::stream::AnalysisOptions;
use hugetune_render::{bytes, secs};
use hugetune_store::db::NewRun;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Profile this command instead (a training input; seed 001 §5.3.3), e.g. "./app --small"
    #[arg(long, value_name = "CMD")]
    profile_cmd: Option<String>,
    #[command(flatten)]
    runs: super::RunCountArgs,
    /// As root: grow the hugetlb pools for the runs (2 MB, and 1 GB where the
    /// plan wants them and the fragmentation doctor expects them), restore them
    /// afterwards
    #[arg(long)]
    reserve: bool,
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// Where to keep the profile bundle (default: in the data directory)
    #[arg(long, value_name = "FILE")]
    bundle: Option<PathBuf>,
    /// Reference source of the profile: auto (qemu where installed, else
    /// valgrind), qemu, valgrind, perf (the PMU's time samples; docs/model.md
    /// §3.2), or damon: DAMON monitors the native run instead (a frequency
    /// estimate, not a TLB model)
    #[arg(long, value_enum, default_value = "auto")]
    refs: stages::RefSource,
    /// Profile a sample: 4 KB pages and 2 MB regions at this rate (qemu); the
    /// predictions come with error bars (docs/model.md §3.1)
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Profile a fixed-size sample of at most this many 4 KB pages (qemu)
    #[arg(long, value_name = "S", conflicts_with = "rate")]
    max_pages: Option<u64>,
    /// Without --rate/--max-pages/--exact, the profile is sampled so that
    /// profiling plus analysis takes about this many times the native run of the
    /// profiled command (timed first); the references kept follow from it
    #[arg(long, value_name = "FACTOR", default_value_t = DEFAULT_PROFILE_BUDGET)]
    profile_budget: f64,
    /// Profile every reference and analyze the complete stream exactly (the
    /// reference; slow on large programs)
    #[arg(long, conflicts_with_all = ["rate", "max_pages"])]
    exact: bool,
    /// mTHP sizes the plan may use (comma-separated: 64k,1m; `none`), also
    /// sizes whose control is `never`: a plan with one sets the per-size
    /// controls system-wide for each of its runs (PMD THP off included) and
    /// restores them after. Default: only sizes usable now (docs/model.md, "mTHP")
    #[arg(long, value_name = "SIZES")]
    mthp: Option<String>,
    /// The command is a server: run this client against it in every run (the
    /// profile, the sizing run, each timed run), stop the server with SIGTERM
    /// when the client ends, and time the client. `{port}` in the command,
    /// --profile-cmd and the client becomes a free port, and the client then
    /// starts once the server accepts connections there. E.g.
    /// --driver "redis-benchmark -p {port} -q -t set,get -n 1000000 -d 500 -r 1000000"
    #[arg(long, value_name = "CMD")]
    driver: Option<String>,
    /// The client for the profiled run (default: --driver): a lighter load for
    /// the training input
    #[arg(long, value_name = "CMD", requires = "driver")]
    profile_driver: Option<String>,
    /// Print one JSON object
    #[arg(long)]
    json: bool,
    /// The command to optimize
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub struct Options {
    pub command: Vec<OsString>,
    pub profile_command: Vec<OsString>,
    pub runs: hugetune_capture::ab::RunCount,
    pub reserve: bool,
    pub min_gain: f64,
    pub bundle: Option<PathBuf>,
    /// Where the references come from (`RefOptions::complete`).
    pub refs: stages::RefSource,
    /// Sample them (qemu): `record --rate` / `--max-pages`.
    pub rate: Option<f64>,
    pub max_pages: Option<u64>,
    /// Every reference, analysed exactly (else sampled within `profile_budget`
    /// when neither `rate` nor `max_pages` is given).
    pub exact: bool,
    /// Profile + analysis within this many native runs of the profiled command.
    pub profile_budget: f64,
    /// The command is a server driven by this client (`{port}` placeholders
    /// allowed), and by `profile_driver` in the profiled run.
    pub driver: Option<Vec<OsString>>,
    pub profile_driver: Option<Vec<OsString>>,
    /// mTHP sizes (folio shifts) to evaluate and plan; `None`: those
    /// `stages::mthp_sizes` picks.
    pub mthp: Option<Vec<u8>>,
}

/// The commands of one optimize with `{port}` filled in, and their drivers.
struct Commands {
    command: Vec<OsString>,
    profile_command: Vec<OsString>,
    driver: Option<Driver>,
    profile_driver: Option<Driver>,
}

impl Options {
    /// What the bench suites run: `hugetune optimize`'s defaults (sampled within
    /// the default budget, the default `--min-gain`, only usable mTHP sizes), no
    /// driver, the profile kept at `bundle`.
    pub fn for_bench(
        command: Vec<OsString>,
        profile_command: Vec<OsString>,
        runs: hugetune_capture::ab::RunCount,
        reserve: bool,
        bundle: PathBuf,
    ) -> Self {
        Options {
            command,
            profile_command,
            runs,
            reserve,
            min_gain: stages::DEFAULT_MIN_GAIN,
            bundle: Some(bundle),
            refs: stages::RefSource::Auto,
            rate: None,
            max_pages: None,
            exact: false,
            profile_budget: DEFAULT_PROFILE_BUDGET,
            driver: None,
            profile_driver: None,
            mthp: None,
        }
    }

    fn commands(&self) -> Result<Commands> {
        let Some(driver) = &self.driver else {
            return Ok(Commands {
                command: self.command.clone(),
                profile_command: self.profile_command.clone(),
                driver: None,
                profile_driver: None,
            });
        };
        let port = session::free_port()?;
        let make = |argv: &[OsString], server: &[OsString]| {
            let mut d = Driver::new(session::with_port(argv, port));
            // The client waits for the port only where the server is told it.
            d.ready_port = session::names_port(server).then_some(port);
            d
        };
        let profile_driver = self.profile_driver.as_deref().unwrap_or(driver);
        Ok(Commands {
            command: session::with_port(&self.command, port),
            profile_command: session::with_port(&self.profile_command, port),
            driver: Some(make(driver, &self.command)),
            profile_driver: Some(make(profile_driver, &self.profile_command)),
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanReport {
    pub assignments: Vec<(hugetune_model::Category, hugetune_model::Backing)>,
    pub text: String,
    pub reasons: Vec<String>,
    pub hugetlb_pages: u64,
    pub reserved_pages: u64,
    /// 1 GB pages reserved for the runs (and released after).
    #[serde(default)]
    pub reserved_1g_pages: u64,
    /// The fragmentation doctor's estimate of the 1 GB pages obtainable, when
    /// `--reserve` asked it (the plan wanted more 1 GB pages than were free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gigantic: Option<stages::GiganticEstimate>,
    pub availability: Availability,
    /// What the profile and the sizing run showed about the program (forks).
    #[serde(default)]
    pub program: ProgramTraits,
    /// The shared pool weighed against per-allocation pages (plan `pool`),
    /// when the plan puts blocks on hugetlb-2m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<hugetune_model::pool::PoolWeighing>,
    /// The per-size THP controls set for each optimized run and restored after
    /// it (a plan with an mTHP size; `hugetune_model::plan::thp_controls`).
    #[serde(default)]
    pub thp_controls: Vec<hugetune_model::plan::ThpControl>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub command: Vec<String>,
    pub profile_command: Vec<String>,
    pub plan: PlanReport,
    pub predicted: Vec<Prediction>,
    pub chosen_prediction: Option<Prediction>,
    pub significance: hugetune_model::rank::Significance,
    pub baseline_s: Vec<f64>,
    pub optimized_s: Vec<f64>,
    pub baseline_median_s: f64,
    pub optimized_median_s: f64,
    pub speedup: f64,
    pub verdict: String,
    pub huge_bytes_backed: u64,
    /// Predicted next to measured, for the mappings that were run.
    pub compared: Vec<Compared>,
    pub validation: Validation,
    pub reference_heap_large_pages: u64,
    pub profile: ProfileReport,
    pub profile_id: i64,
    pub run_id: i64,
    pub db: String,
    /// What the chosen plan is predicted to do to the measured command.
    #[serde(default)]
    pub predicted_speedup: PredictedSpeedup,
    /// Where the time of this optimize went.
    #[serde(default)]
    pub timings: Timings,
    /// `--refs damon`: the frequency estimate the predictions come from (not
    /// a TLB model; lower bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency: Option<hugetune_model::frequency::FrequencyResult>,
}

/// `--profile-budget`'s default: profile + analysis within 10 native runs
/// (issue 18).
pub const DEFAULT_PROFILE_BUDGET: f64 = 10.0;

/// What the emulation costs before any reference is kept: qemu with the
/// plugin's filter, as a factor of the native run (measured, docs/model.md
/// §3.3: 1.4–3x on the built-in kernels; compute-bound code is slower).
const EMULATION_FACTOR: f64 = 3.0;
/// Seconds per reference the sample keeps: the plugin writing it and the
/// analysis of every candidate mapping (docs/model.md §3.3).
const SECONDS_PER_KEPT_REF: f64 = 0.5e-6;
/// Seconds the analysis spends per reference in the stream whatever it keeps
/// (two decoding passes, categorizing, the key histogram): cg over 1 GiB, 35.9 M
/// references in the stream, took 4.1 s with 1.1 M of them through the engines
/// on the Intel guest (docs/model.md §3.3).
const SECONDS_PER_STREAM_REF: f64 = 0.1e-6;
/// The fewest references kept whatever the budget (error bars stay useful),
/// and the most (a bundle of a few tens of MB).
const MIN_KEPT_REFS: u64 = 2_000_000;
const MAX_KEPT_REFS: u64 = 20_000_000;

/// `optimize`'s automatic sampling: the page bound and the reference budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoSampling {
    pub max_pages: u64,
    pub max_refs: u64,
    /// The rate the capture starts at: the page bound over the native run's
    /// resident pages (at most 1).
    pub start_rate: f64,
}

/// The sampling that keeps profiling plus analysis within `factor` native runs
/// of `native_s`: what is left after the native run and the emulation's own
/// cost, spent on kept references, within [MIN_KEPT_REFS, MAX_KEPT_REFS]. The
/// capture starts at the rate the page bound reaches for `resident_kb` (the
/// native run's peak resident size; 0 = unknown, start at 1): started at 1, a
/// program sweeping 1 GiB kept every reference until 16 384 pages were in the
/// sample, and wrote 61 M references for a 20 M budget (docs/model.md §3.3).
pub fn auto_sampling(native_s: f64, factor: f64, resident_kb: u64) -> AutoSampling {
    let left = (factor - 1.0 - EMULATION_FACTOR).max(0.0) * native_s.max(0.0);
    let refs = (left / SECONDS_PER_KEPT_REF).clamp(MIN_KEPT_REFS as f64, MAX_KEPT_REFS as f64);
    let max_pages = stages::DEFAULT_MAX_PAGES;
    let resident_pages = resident_kb / 4;
    let start_rate = if resident_pages > max_pages {
        max_pages as f64 / resident_pages as f64
    } else {
        1.0
    };
    AutoSampling {
        max_pages,
        max_refs: refs as u64,
        start_rate,
    }
}

/// The analysis's reference budget once the profile has run: what is left of
/// `factor` native runs after the profile (native run included) and the passes
/// over the `stream_refs` references the capture wrote, spent on references
/// through the engines; at least MIN_KEPT_REFS, at most what the capture was
/// planned with. The capture's own cost is only estimated before it runs
/// (EMULATION_FACTOR): a program whose emulation costs more leaves the
/// analysis less.
pub fn analysis_refs(
    a: &AutoSampling,
    factor: f64,
    native_s: f64,
    profile_s: f64,
    stream_refs: u64,
) -> u64 {
    let left = factor * native_s - profile_s - stream_refs as f64 * SECONDS_PER_STREAM_REF;
    let n = (left / SECONDS_PER_KEPT_REF).max(MIN_KEPT_REFS as f64);
    (n as u64).min(a.max_refs)
}

/// The chosen plan's predicted speedup for the command that is measured, with
/// its interval: the calibration's spread (docs/model.md §4.1) and the
/// profile's sampling, 90 % (§3.1), together in `lo`..`hi`, each alone in its
/// own field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictedSpeedup {
    pub value: f64,
    pub lo: f64,
    pub hi: f64,
    /// Where the figure comes from: which intervals `lo`..`hi` holds, a
    /// complete profile, and whether it is extrapolated from a training input.
    pub basis: String,
    /// The speedup's range over the calibration's spread alone (`None`: the
    /// default costs, or no interval for this plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<(f64, f64)>,
    /// The 90 % interval of the sampling alone (`None`: exact counts, or none
    /// for this plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<(f64, f64)>,
}

impl Default for PredictedSpeedup {
    fn default() -> Self {
        PredictedSpeedup {
            value: 1.0,
            lo: 1.0,
            hi: 1.0,
            basis: String::new(),
            calibration: None,
            sampling: None,
        }
    }
}

/// Wall-clock seconds of each stage of one optimize (`Instant` around each).
/// `native_s` is the profiled command's uninstrumented run, which `record`
/// makes after the capture: it lies inside `profile_s`. The other stages are
/// disjoint; `total_s` also covers the planning and the database.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub native_s: f64,
    /// `record`: the capture, the native runs and the bundle written.
    pub profile_s: f64,
    pub analyze_s: f64,
    /// The record-mode sizing run of the measured command.
    pub size_s: f64,
    pub validate_s: f64,
    pub total_s: f64,
}

/// Where a profile's counts come from, which says what their interval is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counts {
    /// A complete reference stream: exact counts.
    Exact,
    /// A sampled stream (spatial or time): counts with a sampling error.
    Sampled,
    /// DAMON region access frequencies: lower bounds on walks and faults
    /// (frequency.rs), no sampling error of their own.
    Frequency,
}

/// `chosen` as the measured command will see it: its interval from the
/// calibration's spread (`intervals`, by label; none with the default costs)
/// and from the sampling where the profile was sampled (`errors`, by label;
/// counts are exact otherwise), said to be an extrapolation where the profile
/// was of another input (`training`). A frequency estimate's interval is the
/// calibration's spread over its lower-bound counts, and says so: the speedup
/// may lie above it.
pub fn predicted_speedup(
    chosen: Option<&Prediction>,
    counts: Counts,
    errors: &[PredictionError],
    intervals: &[PredictionInterval],
    training: Option<&str>,
) -> PredictedSpeedup {
    let Some(p) = chosen else {
        return PredictedSpeedup {
            basis: "no plan: the command runs unchanged on 4 KB pages".into(),
            ..Default::default()
        };
    };
    let value = p.predicted_speedup;
    let sampling = errors
        .iter()
        .find(|e| counts == Counts::Sampled && e.label == p.label)
        .map(|e| (e.speedup_low.min(value), e.speedup_high.max(value)));
    let interval = intervals.iter().find(|i| i.label == p.label);
    let calibration =
        interval.map(|i| (i.calibration_low.min(value), i.calibration_high.max(value)));
    let (lo, hi, mut basis) = if counts == Counts::Frequency {
        let head = format!(
            "{}: DAMON region access frequencies, walks and faults lower bounds",
            hugetune_model::frequency::BASIS
        );
        match calibration {
            Some((lo, hi)) => (
                lo,
                hi,
                format!("{head}; interval from the calibration's spread (each figure between its fastest and slowest repetition) over those bounds: the speedup may lie above it"),
            ),
            None => (
                value,
                value,
                format!("{head}; no calibration spread (lo = hi = value)"),
            ),
        }
    } else {
        let counts = match (counts, sampling) {
            (Counts::Sampled, Some(_)) => "the profile's sampling (90 %)",
            (Counts::Sampled, None) => {
                "sampled profile, but no sampling interval for this combined plan"
            }
            _ => "complete profile: exact counts",
        };
        match (interval, sampling) {
            (Some(i), _) => (
                i.low.min(value),
                i.high.max(value),
                format!("interval from the calibration's spread (each figure between its fastest and slowest repetition) and {counts}"),
            ),
            (None, Some((lo, hi))) => (
                lo,
                hi,
                format!("interval from {counts}; default costs, no calibration spread"),
            ),
            (None, None) => (
                value,
                value,
                format!("{counts}; no calibration spread (lo = hi = value)"),
            ),
        }
    };
    if p.label.contains("+jvm:") {
        basis += "; the JVM heap's saving (its own switch) added to the rest of the plan's, each predicted apart";
    }
    if let Some(t) = training {
        basis += &format!(
            "; extrapolation: predicted on the profiled input `{t}`, not on the measured command"
        );
    }
    PredictedSpeedup {
        value,
        lo,
        hi,
        basis,
        calibration,
        sampling,
    }
}

/// A mapping that was both predicted and measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Compared {
    pub mapping: String,
    pub predicted_speedup: f64,
    pub predicted_pmb: f64,
    pub measured_speedup: f64,
    pub measured_median_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProfileReport {
    pub bundle: String,
    pub refs: u64,
    pub ref_source: String,
    /// How the references were sampled (`complete`, `spatial-rate`,
    /// `spatial-size`, ...), and the reference budget of the automatic sampling.
    #[serde(default)]
    pub ref_sampling: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_refs: Option<u64>,
    /// The analysis's budget: `max_refs`, or less when the profile took more
    /// of `--profile-budget` than planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_max_refs: Option<u64>,
    pub capture_s: f64,
    pub native_s: f64,
    pub refs_per_category: serde_json::Value,
    pub tlb: hugetune_model::tlb::TlbGeometry,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let profile_command = match &a.profile_cmd {
        Some(s) => stages::split_command(s).context("--profile-cmd")?,
        None => a.command.clone(),
    };
    anyhow::ensure!(
        a.min_gain.is_finite() && (0.0..1.0).contains(&a.min_gain),
        "--min-gain must be in [0, 1)"
    );
    anyhow::ensure!(
        a.profile_budget.is_finite() && a.profile_budget >= 1.0,
        "--profile-budget {} must be a factor of at least 1 (the native run itself counts)",
        a.profile_budget
    );
    let split = |s: &Option<String>, what: &str| {
        s.as_deref()
            .map(|s| stages::split_command(s).with_context(|| what.to_string()))
            .transpose()
    };
    let opts = Options {
        driver: split(&a.driver, "--driver")?,
        profile_driver: split(&a.profile_driver, "--profile-driver")?,
        command: a.command,
        profile_command,
        runs: a.runs.count()?,
        reserve: a.reserve,
        min_gain: a.min_gain,
        bundle: a.bundle,
        refs: a.refs,
        rate: a.rate,
        max_pages: a.max_pages,
        exact: a.exact,
        profile_budget: a.profile_budget,
        mthp: a.mthp.as_deref().map(stages::parse_mthp).transpose()?,
    };
    let report = execute(ctx, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render(&report));
    }
    // validate's statuses: 2 a loss, 3 the plan broke the program.
    use hugetune_capture::ab::Verdict;
    let verdict = [
        Verdict::Gain,
        Verdict::NoSignificantChange,
        Verdict::Loss,
        Verdict::Broke,
    ]
    .into_iter()
    .find(|v| v.name() == report.verdict);
    Ok(verdict.map_or(0, super::validate::exit_status))
}

fn default_bundle(argv: &[OsString]) -> PathBuf {
    let name = argv
        .first()
        .and_then(|p| std::path::Path::new(p).file_name())
        .map_or("program".into(), |n| n.to_string_lossy().into_owned());
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    profiles_dir().join(format!("{name}-{ts}.htb"))
}

/// Where `optimize` keeps the bundles it records (removed with their profile
/// by `db rm`).
pub fn profiles_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("hugetune")
        .join("profiles")
}

pub fn execute(ctx: &Ctx, o: &Options) -> Result<Report> {
    let start = Instant::now();
    let mut timings = Timings::default();
    let art = crate::artifacts::find()?;
    let refs = stages::RefOptions {
        rate: o.rate,
        max_pages: o.max_pages,
        ..stages::RefOptions::complete(o.refs)?
    };
    anyhow::ensure!(
        !(o.exact && (o.rate.is_some() || o.max_pages.is_some())),
        "--exact profiles every reference: it excludes --rate and --max-pages"
    );
    let machine = machine::machine(ctx.tlb.as_deref())?;
    let bundle = o
        .bundle
        .clone()
        .unwrap_or_else(|| default_bundle(&o.profile_command));
    let cmds = o.commands()?;
    if cmds.driver.is_some() {
        stages::note(format!(
            "the command is a server: every run is a session of `{}`, timed by the client",
            stages::display_cmd(&cmds.driver.as_ref().map_or(vec![], |d| d.argv.clone()))
        ));
    }
    let t = Instant::now();
    let mut refs = refs;
    let mut native = None;
    let mut budget = None;
    if !o.exact
        && o.rate.is_none()
        && o.max_pages.is_none()
        && refs.source == stages::RefSource::Qemu
    {
        // The sampling follows from the native run: time it first (record
        // reuses it as the profile's native figure).
        let n = stages::native_run(&cmds.profile_command, cmds.profile_driver.as_ref())?;
        let a = auto_sampling(n.wall_s, o.profile_budget, n.max_rss_kb);
        stages::note(format!(
            "native run {}: profiling within {}x of it ({}), keeping at most {} pages and about {:.1} M references (--profile-budget, --rate, --max-pages or --exact to choose)",
            secs(n.wall_s),
            o.profile_budget,
            secs(n.wall_s * o.profile_budget),
            a.max_pages,
            a.max_refs as f64 / 1e6
        ));
        refs.max_pages = Some(a.max_pages);
        refs.max_refs = Some(a.max_refs);
        refs.start_rate = Some(a.start_rate);
        native = Some(n);
        budget = Some(a);
    }
    let meta = stages::record_with_native(
        &art,
        &cmds.profile_command,
        &bundle,
        &refs,
        ctx.tlb.as_deref(),
        ctx.verbose,
        cmds.profile_driver.as_ref(),
        native,
    )?;
    timings.profile_s = t.elapsed().as_secs_f64();
    timings.native_s = meta.native.wall_s;
    let analysis_budget = budget.map(|a| {
        let n = analysis_refs(
            &a,
            o.profile_budget,
            timings.native_s,
            timings.profile_s,
            meta.refs,
        );
        if n < a.max_refs {
            stages::note(format!(
                "the profile took {} of the budget's {}: the analysis keeps about {:.1} M references, not {:.1} M",
                secs(timings.profile_s),
                secs(o.profile_budget * timings.native_s),
                n as f64 / 1e6,
                a.max_refs as f64 / 1e6
            ));
        }
        n
    });
    let t = Instant::now();
    // The validation's runs do not hold free page reporting off: where the
    // host takes freed memory back, their faults are the cold ones.
    let reporting = hugetune_host::kernel_state::free_page_reporting();
    let cost = stages::cost_model_for_runs(&ctx.db_path, &machine, reporting.as_deref())?;
    let an: Analysis = stages::analyze_sampled(
        &bundle,
        &machine.tlb.geometry,
        &cost,
        &AnalysisOptions {
            mthp: o
                .mthp
                .clone()
                .unwrap_or_else(|| stages::mthp_sizes(&machine.tlb.geometry, false)),
            ..stages::analysis_options(false, &machine.tlb.geometry)
        },
        &stages::SampleOptions {
            exact: o.exact,
            max_refs: analysis_budget,
            ..Default::default()
        },
    )?;
    timings.analyze_s = t.elapsed().as_secs_f64();
    if budget.is_some() {
        let spent = timings.profile_s + timings.analyze_s;
        let factor = spent / timings.native_s.max(1e-9);
        stages::note(format!(
            "profile and analysis took {} ({factor:.1}x the native run; budget {}x){}",
            secs(spent),
            o.profile_budget,
            if factor > o.profile_budget * 1.1 {
                format!(
                    ": over it — emulating the program costs about {:.1}x its native time here whatever the sampling",
                    (timings.profile_s - timings.native_s) / timings.native_s.max(1e-9)
                )
            } else {
                String::new()
            }
        ));
    }
    let mut db = ctx.db()?;
    let (profile_id, _, machine_id) =
        stages::store_analysis(&mut db, &an, Some(&bundle), &machine)?;
    let program = meta.program.clone(); // the program a launcher started, if any
    let program_id = db.upsert_program(&program.path, program.build_id.as_deref())?;

    stages::note(
        "warm-up run in record mode (sizes the hugetlb pages this input needs; not timed)",
    );
    let t = Instant::now();
    let sizing = stages::sizing_run(&art, &cmds.command, cmds.driver.as_ref())?;
    timings.size_s = t.elapsed().as_secs_f64();
    let ref_pages = sizing.heap_large_pages;
    let small_pages =
        sizing.heap_small_pages(stages::heap_small_training(&an.result, &an.predictions));
    let preds = stages::with_reference_pages(&an.predictions, ref_pages, small_pages);
    // The reference input may fork where the training input did not.
    let program = ProgramTraits {
        forks: an.program.forks || sizing.program.forks,
        fork_children: an.program.fork_children.max(sizing.program.fork_children),
        mapping_cuts: an.program.mapping_cuts.max(sizing.program.mapping_cuts),
        outside: an.program.outside,
        jvm: an.program.jvm || sizing.program.jvm,
    };
    if program.forks {
        stages::note(format!(
            "the program forks ({} children seen): private hugetlb pages are ruled out, \
             the library runs with fork-safe thp",
            program.fork_children
        ));
    }
    if program.outside {
        stages::note(plan::OUTSIDE_REASON);
    }
    let mut plan_options = PlanOptions::for_program(&program);
    let native_s = meta.native.wall_s;

    // The pools are read, grown and used under the kernel-state lock: another
    // hugetune (a bench suite, a size sweep) may hold pools it sized for its
    // own runs, whose free pages are not ours to take.
    let mut reserved = stages::Reserved::default();
    if o.reserve {
        reserved.hold_lock()?;
    }
    let avail_now = stages::availability_now();
    let mut avail_plan = avail_now.clone();
    let mut gigantic = None;
    if o.reserve {
        // A shared pool may take more pages than the blocks' peak (whole pages
        // per block, first-fit fragmentation, slack for threads).
        let pool_extra = sizing
            .heap_large_pool_pages(an.threshold)
            .saturating_sub(ref_pages);
        avail_plan.hugetlb_2m_free += ref_pages + small_pages + pool_extra;
        avail_plan.hugetlb_2m_total += ref_pages + small_pages + pool_extra;
        // 1 GB pages count as far as the fragmentation doctor expects the
        // kernel to assemble them now (and memory lasts).
        let want_1g = preds.iter().map(|p| p.hugetlb_1g_pages).max().unwrap_or(0);
        if want_1g > avail_now.hugetlb_1g_free && machine::pool(1 << 20).is_some() {
            let short = want_1g - avail_now.hugetlb_1g_free;
            match stages::gigantic_estimate() {
                Ok(e) => {
                    stages::note(e.text());
                    let mut counted = e.obtainable.min(short);
                    // The estimate is a lower bound (free pages the scan cannot
                    // see as free): where it falls short, the kernel decides.
                    let ask = short.min(e.by_memory());
                    if counted < ask {
                        match reserved.probe_gigantic(ask) {
                            Ok(got) => counted = got,
                            Err(e) => stages::note(format!("cannot grow the 1 GB pool: {e:#}")),
                        }
                    }
                    avail_plan.hugetlb_1g_free += counted;
                    gigantic = Some(e);
                }
                Err(e) => stages::note(format!(
                    "no 1 GB page counted as obtainable: the fragmentation doctor failed: {e:#}"
                )),
            }
        }
    }
    // Plans of this program that lost a validation before stay out.
    let policy = plan::Policy {
        min_gain: o.min_gain,
        lost: db.lost_mappings(program_id)?,
        confidence: vec![],
    };
    // Then the shared pool against per-allocation pages for the blocks the
    // plan puts on hugetlb-2m (seed 002), from the sizing run's logs.
    let choose = |avail: &Availability| {
        let mut d = plan::choose_with(&preds, &an.significance, avail, &program, native_s, &policy);
        plan::choose_pool(
            &mut d,
            &sizing.pool,
            an.threshold,
            &cost,
            avail,
            native_s,
            o.min_gain,
        );
        d
    };
    let mut decision = choose(&avail_plan);
    // 1 GB pages probed above and not in the plan go back (before the pools
    // grow for it, and again after a plan made anew).
    let give_back_1g = |d: &plan::PlanDecision, reserved: &mut stages::Reserved| {
        let need = d.prediction.as_ref().map_or(0, |p| p.hugetlb_1g_pages);
        if let Err(e) = reserved.give_back_unused(1 << 20, need) {
            stages::note(format!("cannot shrink the 1 GB pool: {e:#}"));
        }
    };
    if o.reserve {
        give_back_1g(&decision, &mut reserved);
        if let Err(e) = stages::reserve_for(&decision, &stages::availability_now(), &mut reserved) {
            stages::note(format!("cannot grow the hugetlb pool: {e:#}"));
        }
        let got = stages::availability_now();
        if let Some(why) = stages::gigantic_shortfall(&decision, got.hugetlb_1g_free) {
            stages::note(why);
            avail_plan.hugetlb_1g_free = got.hugetlb_1g_free;
            decision = choose(&avail_plan);
            if let Err(e) = stages::reserve_for(&decision, &got, &mut reserved) {
                stages::note(format!("cannot grow the hugetlb pool: {e:#}"));
            }
        }
        let got = stages::availability_now();
        if decision.hugetlb_pages() > got.hugetlb_2m_free {
            stages::note(format!(
                "only {} hugetlb pages are available; planning again with what there is",
                got.hugetlb_2m_free
            ));
            decision = choose(&got);
        }
        give_back_1g(&decision, &mut reserved);
    } else if decision.hugetlb_pages() > 0
        || decision
            .prediction
            .as_ref()
            .is_some_and(|p| p.hugetlb_1g_pages > 0)
    {
        // Pool pages the operator set aside, used as they are: under the lock,
        // and planned again if someone took them while it was waited for.
        reserved.hold_lock()?;
        let got = stages::availability_now();
        if decision.hugetlb_pages() > got.hugetlb_2m_free
            || stages::gigantic_shortfall(&decision, got.hugetlb_1g_free).is_some()
        {
            stages::note(format!(
                "the pools changed while another user held them ({} x 2 MB and {} x 1 GB free now); planning again with what there is",
                got.hugetlb_2m_free, got.hugetlb_1g_free
            ));
            decision = choose(&got);
        }
    }
    let availability = stages::availability_now();
    stages::jvm::plan(
        &mut decision,
        &program,
        &an.significance,
        &an.predictions,
        &availability,
        &policy.lost,
        policy.min_gain * native_s * 1e9,
    );
    plan_options = plan_options
        .with_sites(&decision.sites)
        .with_jvm(decision.jvm);
    plan_options.pool_2m = decision.pool_2m();
    // The JVM's switch as the runs will get it (said once, at the runs).
    let plan_options = stages::jvm::for_command(
        &plan_options,
        &cmds.command,
        &|| availability.clone(),
        false,
    );
    let plan_text =
        hugetune_format::plan::plan_text_with(&decision.assignments, an.threshold, &plan_options);
    stages::note(format!("plan: {}", super::decision_text(&decision)));

    let t = Instant::now();
    let validation = stages::validate(
        &art,
        &cmds.command,
        &decision.assignments,
        an.threshold,
        &plan_options,
        o.runs,
        cmds.driver.as_ref(),
    )?;
    timings.validate_s = t.elapsed().as_secs_f64();
    let reserved_pages = reserved.added(2048);
    let reserved_1g_pages = reserved.added(1 << 20);
    drop(reserved);

    let huge = validation
        .huge_bytes_proc
        .max(validation.huge_bytes_runtime);
    let mapping = decision.label();
    let confidence = stages::learn_from(&db, profile_id, &decision, &validation)?;
    let run_id = db.insert_run(&NewRun {
        program_id,
        mapping: mapping.clone(),
        profile_id: Some(profile_id),
        machine_id: Some(machine_id),
        args: stages::strings(&o.command),
        plan: serde_json::json!({"mapping": mapping, "assignments": decision.assignments, "sites": decision.sites, "text": plan_text}),
        baseline_s: validation.baseline_s.clone(),
        optimized_s: validation.optimized_s.clone(),
        speedup: Some(validation.speedup),
        huge_bytes_backed: huge,
        verdict: validation.verdict.name().into(),
        details: serde_json::json!({"validation": validation, "confidence": confidence}),
    })?;
    let mut compared = vec![Compared {
        mapping: "all-small".into(),
        predicted_speedup: 1.0,
        predicted_pmb: 0.0,
        measured_speedup: 1.0,
        measured_median_s: validation.baseline_median_s,
    }];
    let applied = decision.applied_prediction();
    if let Some(p) = &applied {
        compared.push(Compared {
            mapping: p.label.clone(),
            predicted_speedup: p.predicted_speedup,
            predicted_pmb: p.pmb,
            measured_speedup: validation.speedup,
            measured_median_s: validation.optimized_median_s,
        });
    }
    let extrapolated = o.profile_command != o.command
        || o.profile_driver
            .as_ref()
            .is_some_and(|d| Some(d) != o.driver.as_ref());
    let training = stages::display_cmd(&cmds.profile_command);
    let counts = if an.frequency.is_some() {
        Counts::Frequency
    } else if an.result.sampling.is_some() {
        Counts::Sampled
    } else {
        Counts::Exact
    };
    // A plan with the JVM's switch and categories of its own: the two
    // intervals added, as the savings are.
    let mut intervals = an.intervals.clone();
    if let (Some(p), Some(j)) = (
        &decision.prediction,
        decision.jvm.and(decision.jvm_prediction.as_ref()),
    ) {
        let of = |l: &str| an.intervals.iter().find(|i| i.label == l);
        if let (Some(a), Some(b)) = (of(&p.label), of(&j.label)) {
            let native = p.predicted_seconds * p.predicted_speedup;
            intervals.push(hugetune_model::rank::added_interval(
                &decision.label(),
                native,
                a,
                b,
            ));
        }
    }
    let predicted_speedup = predicted_speedup(
        applied.as_ref(),
        counts,
        &an.errors,
        &intervals,
        extrapolated.then_some(training.as_str()),
    );
    timings.total_s = start.elapsed().as_secs_f64();
    Ok(Report {
        frequency: an.frequency.clone(),
        predicted_speedup,
        timings,
        compared,
        command: stages::strings(&o.command),
        profile_command: stages::strings(&o.profile_command),
        plan: PlanReport {
            assignments: decision.assignments.clone(),
            text: plan_text,
            reasons: decision.reasons.clone(),
            hugetlb_pages: decision.hugetlb_pages(),
            reserved_pages,
            reserved_1g_pages,
            gigantic,
            availability,
            program,
            pool: decision.pool.clone(),
            thp_controls: decision.thp_controls.clone(),
        },
        chosen_prediction: applied.clone(),
        predicted: preds,
        significance: an.significance.clone(),
        baseline_s: validation.baseline_s.clone(),
        optimized_s: validation.optimized_s.clone(),
        baseline_median_s: validation.baseline_median_s,
        optimized_median_s: validation.optimized_median_s,
        speedup: validation.speedup,
        verdict: validation.verdict.name().into(),
        huge_bytes_backed: huge,
        reference_heap_large_pages: ref_pages,
        profile: ProfileReport {
            bundle: bundle.display().to_string(),
            refs: an.stream.refs,
            ref_source: an.meta.ref_source.clone(),
            ref_sampling: an.meta.ref_sampling.clone(),
            max_refs: budget.map(|a| a.max_refs),
            analysis_max_refs: analysis_budget,
            capture_s: an.meta.capture_s,
            native_s,
            refs_per_category: stages::category_map(&an.stream.refs_per_category),
            tlb: an.result.geometry.clone(),
        },
        validation,
        profile_id,
        run_id,
        db: ctx.db_path.display().to_string(),
    })
}

/// "predicted 1.80x (1.60-2.00x)", or why there is no interval.
fn predicted_text(p: &PredictedSpeedup) -> String {
    let extrapolated = p.basis.contains("extrapolation");
    let frequency = p.basis.starts_with(hugetune_model::frequency::BASIS);
    let how = if p.hi > p.lo && frequency {
        format!(
            "{:.2}-{:.2}x, the calibration's spread over lower bounds on walks and faults: {}",
            p.lo,
            p.hi,
            hugetune_model::frequency::BASIS
        )
    } else if p.hi > p.lo {
        let what = match (p.calibration, p.sampling) {
            (Some(_), Some(_)) => "the calibration's spread and 90 % sampling",
            (Some(_), None) => "the calibration's spread",
            _ => "90 % sampling interval",
        };
        format!("{:.2}-{:.2}x, {what}", p.lo, p.hi)
    } else if frequency {
        format!(
            "{}, from lower bounds on walks and faults",
            hugetune_model::frequency::BASIS
        )
    } else if p.basis.starts_with("complete") {
        "complete profile, no sampling interval".into()
    } else if p.basis.starts_with("no plan") {
        "no plan".into()
    } else {
        "no sampling interval".into()
    };
    format!(
        "predicted {:.2}x ({how}{})",
        p.value,
        if extrapolated {
            "; extrapolated from the profiled input"
        } else {
            ""
        }
    )
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let hi = v.iter().copied().fold(f64::MIN, f64::max);
    format!("{:.3}–{:.3} s", lo, hi)
}

/// The profile and significance lines of a profile with references.
fn profile_lines(r: &Report, same: bool) -> String {
    let mut s = format!(
        "profile      {}{}: {} references ({}) in {:.1} s; native {}\n",
        r.profile_command.join(" "),
        if same { "" } else { " (training input)" },
        hugetune_render::count(r.profile.refs as f64),
        r.profile.ref_source,
        r.profile.capture_s,
        secs(r.profile.native_s)
    );
    let sig = &r.significance;
    s += &format!(
        "significance {} TLB misses/s, {} faults/s with 4 KB pages (model): {}\n",
        hugetune_render::count(sig.tlb_misses_per_s),
        hugetune_render::count(sig.faults_per_s),
        if sig.passes { "passes" } else { "fails" }
    );
    s
}

pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let same = r.command == r.profile_command;
    s += &format!("\ncommand      {}\n", r.command.join(" "));
    if let Some(f) = &r.frequency {
        for l in stages::frequency_lines(
            &r.profile_command,
            r.profile.capture_s,
            &r.profile.tlb.source,
            &r.significance,
            f,
        ) {
            s += &format!("{l}\n");
        }
    } else {
        s += &profile_lines(r, same);
    }
    s += &format!(
        "\npredicted ranking (on the profiled input{}; hugetlb pages sized for this input: heap-large needs {})\n",
        if r.frequency.is_some() {
            ", a frequency estimate, not a TLB model: walks and faults are lower bounds"
        } else {
            ""
        },
        r.reference_heap_large_pages
    );
    s += &super::predictions_table(&r.predicted);
    s += "\n\nplan         ";
    // A JVM's heap goes through the JVM's own switch (plan `jvm B`).
    match r.plan.text.lines().find_map(|l| l.strip_prefix("jvm ")) {
        Some(b) if r.plan.assignments.is_empty() => {
            s += &format!("the JVM's heap → {b} (the JVM's own switch)")
        }
        Some(b) => {
            s += &format!(
                "{}, the JVM's heap → {b} (the JVM's own switch)",
                super::assignments_text(&r.plan.assignments)
            )
        }
        None => s += &super::assignments_text(&r.plan.assignments),
    }
    s += "\n";
    for why in &r.plan.reasons {
        s += &format!("             - {why}\n");
    }
    if let Some(g) = &r.plan.gigantic {
        s += &format!("             {}\n", g.text());
    }
    if r.plan.reserved_pages > 0 || r.plan.reserved_1g_pages > 0 {
        s += &format!(
            "             {} reserved for the runs and released after\n",
            match (r.plan.reserved_pages, r.plan.reserved_1g_pages) {
                (n, 0) => format!("{n} hugetlb pages"),
                (0, g) => format!("{g} x 1 GB hugetlb pages"),
                (n, g) => format!("{g} x 1 GB and {n} x 2 MB hugetlb pages"),
            }
        );
    }
    let v = &r.validation;
    s += &format!(
        "\nmeasured     {} baseline and {} optimized runs, interleaved (wall time, median and range; {} to {} pairs until the speedup's 95 % CI was narrower than {:.3})\n",
        v.baseline_s.len(),
        v.optimized_s.len(),
        v.run_count.min,
        v.run_count.max,
        v.run_count.ci_width
    );
    s += &format!(
        "  baseline   {}  ({})  {} minor faults\n",
        secs(v.baseline_median_s),
        range(&v.baseline_s),
        v.baseline_minor_faults
    );
    if !v.optimized_s.is_empty() {
        s += &format!(
            "  optimized  {}  ({})  {} minor faults\n",
            secs(v.optimized_median_s),
            range(&v.optimized_s),
            v.optimized_minor_faults
        );
    }
    if let Some(b) = &v.broken_run {
        s += &format!("  broke      {} (its time is in no median)\n", b.describe());
        for l in b
            .stderr_tail
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            s += &format!("             stderr: {l}\n");
        }
    }
    for c in &v.pool_changes {
        s += &format!("  warning    {c}\n");
    }
    s += &format!(
        "  speedup    {}: {}, measured {:.2}x (95 % CI {:.2}..{:.2}x, one-sided Mann-Whitney p = {:.3})\n",
        r.verdict,
        predicted_text(&r.predicted_speedup),
        r.speedup,
        v.speedup_ci.0,
        v.speedup_ci.1,
        v.p_gain
    );
    let t = &r.timings;
    s += &format!(
        "  time       profile {} (native run {}), analysis {}, sizing run {}, validation {}; {} in all\n",
        secs(t.profile_s),
        secs(t.native_s),
        secs(t.analyze_s),
        secs(t.size_s),
        secs(t.validate_s),
        secs(t.total_s)
    );
    let rows: Vec<Vec<String>> = r
        .compared
        .iter()
        .map(|c| {
            vec![
                c.mapping.clone(),
                format!("{:.2}x", c.predicted_speedup),
                format!("{:.0}%", c.predicted_pmb),
                format!("{:.2}x", c.measured_speedup),
                secs(c.measured_median_s),
            ]
        })
        .collect();
    s += "\npredicted (profiled input) next to measured (this command)\n";
    s += &hugetune_render::table(
        &["mapping", "predicted", "PMB", "measured", "median"],
        &rows,
    );
    s += "\n\n";
    s += &format!(
        "huge pages   {} huge at peak per /proc/PID/smaps_rollup (baseline {}); {} {} backed\n",
        bytes(v.huge_bytes_proc),
        bytes(v.baseline_huge_bytes_proc),
        if r.plan.program.outside {
            "collapsed from outside and verified in smaps:"
        } else {
            "runtime library reports"
        },
        bytes(v.huge_bytes_runtime)
    );
    if let Some(p) = super::folio_proof(v) {
        s += &format!("             {p}\n");
    }
    for f in stages::fallbacks(&v.runtime_summaries) {
        s += &format!("             fallback: {f}\n");
    }
    s += &format!(
        "stored       profile #{}, run #{} in {}\n",
        r.profile_id, r.run_id, r.db
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The predicted speedup for the measured command: the calibration's
    /// interval with the sampling on top where both exist, each alone where
    /// only one does, a point for exact counts with the default costs; the
    /// basis and the verdict's words say which.
    #[test]
    fn the_predicted_speedup_carries_the_intervals_it_has() {
        let p = Prediction {
            mapping: "heap-large".into(),
            label: "heap-large:thp".into(),
            base: false,
            assignments: vec![],
            sites: vec![],
            miss_time_ns: 0.0,
            saving_ns: 1e8,
            pmb: 100.0,
            predicted_seconds: 0.5,
            predicted_speedup: 1.5,
            hugetlb_pages: 0,
            hugetlb_1g_pages: 0,
            static_pages_1g: (0, 0),
            thp_pages: 0,
            walks: 0,
            faults: 0,
        };
        let e = PredictionError {
            label: p.label.clone(),
            saving_se_ns: 1e6,
            speedup_low: 1.45,
            speedup_high: 1.55,
            walks_se: 0.0,
            faults_se: 0.0,
        };
        let i = PredictionInterval {
            label: p.label.clone(),
            calibration_low: 1.2,
            calibration_high: 1.9,
            low: 1.15,
            high: 2.0,
        };
        let both = predicted_speedup(
            Some(&p),
            Counts::Sampled,
            std::slice::from_ref(&e),
            std::slice::from_ref(&i),
            None,
        );
        assert_eq!((both.lo, both.hi), (1.15, 2.0));
        assert_eq!(both.calibration, Some((1.2, 1.9)));
        assert_eq!(both.sampling, Some((1.45, 1.55)));
        assert!(both.basis.contains("calibration's spread") && both.basis.contains("90 %"));
        assert!(predicted_text(&both)
            .contains("1.15-2.00x, the calibration's spread and 90 % sampling"));
        let cal = predicted_speedup(
            Some(&p),
            Counts::Exact,
            &[],
            std::slice::from_ref(&i),
            Some("train"),
        );
        assert_eq!((cal.lo, cal.hi, cal.sampling), (1.15, 2.0, None));
        assert!(cal.basis.contains("complete profile") && cal.basis.contains("extrapolation"));
        assert!(
            predicted_text(&cal).contains("the calibration's spread;"),
            "{}",
            predicted_text(&cal)
        );
        let sampled = predicted_speedup(
            Some(&p),
            Counts::Sampled,
            std::slice::from_ref(&e),
            &[],
            None,
        );
        assert_eq!(
            (sampled.lo, sampled.hi, sampled.calibration),
            (1.45, 1.55, None)
        );
        assert!(sampled.basis.contains("default costs"));
        assert!(predicted_text(&sampled).contains("90 % sampling interval"));
        let point = predicted_speedup(Some(&p), Counts::Exact, &[], &[], None);
        assert_eq!((point.lo, point.value, point.hi), (1.5, 1.5, 1.5));
        assert!(point.basis.starts_with("complete profile"));
        // A frequency estimate: the calibration's spread alone (DAMON has no
        // sampling error), said to be over lower bounds; a sampling error
        // given by mistake is not used.
        let freq = predicted_speedup(
            Some(&p),
            Counts::Frequency,
            std::slice::from_ref(&e),
            std::slice::from_ref(&i),
            None,
        );
        assert_eq!(
            (freq.lo, freq.hi, freq.sampling),
            (1.2, 1.9, None),
            "{freq:?}"
        );
        assert!(freq.basis.starts_with(hugetune_model::frequency::BASIS));
        assert!(freq.basis.contains("may lie above"), "{}", freq.basis);
        assert!(predicted_text(&freq)
            .contains("1.20-1.90x, the calibration's spread over lower bounds"));
        let bare = predicted_speedup(Some(&p), Counts::Frequency, &[], &[], Some("train"));
        assert_eq!((bare.lo, bare.hi), (1.5, 1.5));
        assert!(
            bare.basis.contains("no calibration spread") && bare.basis.contains("extrapolation")
        );
        assert!(predicted_text(&bare).contains("from lower bounds on walks and faults"));
        // Intervals of another mapping are not this one's.
        let other = PredictionInterval {
            label: "static:thp".into(),
            ..i
        };
        assert_eq!(
            predicted_speedup(Some(&p), Counts::Exact, &[], &[other], None).lo,
            1.5
        );
    }

    /// The capture starts where the page bound takes a footprint the native
    /// run showed (1 GiB resident: 16 384 of 262 144 pages), at 1 where the
    /// footprint fits the bound or is unknown; the budget follows the native
    /// time within its bounds.
    #[test]
    fn automatic_sampling_starts_at_the_rate_the_footprint_needs() {
        let a = auto_sampling(5.0, 10.0, 1 << 20);
        assert_eq!(a.max_pages, stages::DEFAULT_MAX_PAGES);
        assert!((a.start_rate - 16384.0 / 262144.0).abs() < 1e-12);
        assert_eq!(a.max_refs, MAX_KEPT_REFS);
        assert_eq!(auto_sampling(5.0, 10.0, 16384 * 4).start_rate, 1.0);
        assert_eq!(auto_sampling(5.0, 10.0, 0).start_rate, 1.0);
        let short = auto_sampling(0.1, 10.0, 0);
        assert_eq!(short.max_refs, MIN_KEPT_REFS);
        let mid = auto_sampling(1.0, 10.0, 0);
        assert_eq!(mid.max_refs, 12_000_000);
    }

    /// After the profile the analysis spends what is left: all it was planned
    /// with when the emulation cost what was assumed, less when it cost more
    /// (never under the floor), and the stream's own passes count.
    #[test]
    fn the_analysis_gets_what_the_profile_left() {
        let a = auto_sampling(5.0, 10.0, 0);
        assert_eq!(a.max_refs, MAX_KEPT_REFS);
        // 5 s native, the profile 20 s (native + 3x): 30 s left.
        assert_eq!(analysis_refs(&a, 10.0, 5.0, 20.0, 0), MAX_KEPT_REFS);
        // The profile took 43 s: 7 s left, 1 s of it the stream's 10 M.
        let n = analysis_refs(&a, 10.0, 5.0, 43.0, 10_000_000);
        assert!((11_900_000..=12_000_000).contains(&n), "{n}");
        // Over budget already: the floor.
        assert_eq!(analysis_refs(&a, 10.0, 5.0, 60.0, 0), MIN_KEPT_REFS);
    }
}
