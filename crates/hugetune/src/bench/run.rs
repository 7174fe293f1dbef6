//! The interleaved runner shared by the suites: rounds of every configuration of
//! a workload in rotated order, an untimed warm-up round first, every run with
//! its proof of backing (the runtime library's summary where it is loaded,
//! smaps_rollup sampled during the run, the hugetlb pool counters before, during
//! and after, the kernel's per-size folio fault counters), and per configuration
//! medians and spreads of wall, kernel-phase, user and system time and faults.

use super::config::{Config, Missing, SCRUB};
use super::redis::{self, RedisJob};
use super::state::Held;
use super::stats::{self, BackingFigures, BackingVerdict, Spread};
use crate::artifacts::Artifacts;
use crate::stages;
use anyhow::{Context, Result};
use hugetune_capture::rounds::{self, Ran, Rounds};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_format::summary::Summary;
use hugetune_host::machine::{self, HUGEPAGES_SYSFS, THP_SYSFS};
use hugetune_host::procfs::{HugeUsage, RunStats};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a workload runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Job {
    /// `hugetune-work` with these arguments (`{dir}` is replaced by the suite's
    /// scratch directory).
    Work {
        args: Vec<String>,
    },
    /// Any program (argv[0] looked up on PATH); `{dir}` replaced as above.
    Program {
        argv: Vec<String>,
    },
    Redis(RedisJob),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub name: String,
    pub about: String,
    pub job: Job,
    /// The measure compared across configurations: a phase (`kernel`: the
    /// workload's own kernel-phase `seconds`; redis: `read`, `total`, …) or `wall`.
    pub primary: String,
    /// `memory`, `cpu`, `io`, `server` …; controls are expected not to change.
    pub group: String,
    pub control: bool,
    /// Parameters for plots (random %, threads, pages …).
    pub params: serde_json::Value,
}

impl Workload {
    pub fn work(name: &str, about: &str, args: &str, primary: &str, group: &str) -> Workload {
        Workload {
            name: name.into(),
            about: about.into(),
            job: Job::Work {
                args: args.split_whitespace().map(String::from).collect(),
            },
            primary: primary.into(),
            group: group.into(),
            control: false,
            params: serde_json::Value::Null,
        }
    }
    pub fn control(mut self) -> Self {
        self.control = true;
        self
    }
    pub fn with_params(mut self, p: serde_json::Value) -> Self {
        self.params = p;
        self
    }
    /// The hugetune-work kernel it needs, if any.
    pub fn kernel(&self) -> Option<&str> {
        match &self.job {
            Job::Work { args } => args.first().map(String::as_str),
            _ => None,
        }
    }
    /// The command line, for the report.
    pub fn command(&self, work: &Path) -> Vec<String> {
        match &self.job {
            Job::Work { args } => std::iter::once(work.display().to_string())
                .chain(args.iter().cloned())
                .collect(),
            Job::Program { argv } => argv.clone(),
            Job::Redis(r) => vec![format!(
                "redis-server on 127.0.0.1: {} keys x {} B values, pipelined SET then GET of every key{}",
                r.keys,
                r.value_bytes,
                if r.bgsave { ", then BGSAVE" } else { "" }
            )],
        }
    }
}

/// The pool counters of one page size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolCounters {
    pub page_kb: u64,
    pub nr: u64,
    pub free: u64,
    pub resv: u64,
}

fn pools_now() -> Vec<PoolCounters> {
    machine::hugetlb_pools(Path::new(HUGEPAGES_SYSFS))
        .into_iter()
        .map(|p| PoolCounters {
            page_kb: p.page_kb,
            nr: p.nr,
            free: p.free,
            resv: p.resv,
        })
        .collect()
}

/// What the runtime library's summaries of one run say (all processes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeProof {
    pub processes: usize,
    pub hugetlb_2m_bytes: u64,
    pub hugetlb_1g_bytes: u64,
    pub thp_verified_bytes: u64,
    /// Bytes the library found in mTHP folios (below 2 MB; pagemap + kpageflags).
    pub mthp_bytes: u64,
    pub fallbacks: Vec<String>,
    pub errors: Vec<String>,
    pub allocator: String,
    pub plan_valid: bool,
    /// The main (first) process's per-category backing and arena counters.
    pub categories: serde_json::Value,
    pub arena: serde_json::Value,
}

impl RuntimeProof {
    pub fn huge_bytes(&self) -> u64 {
        self.hugetlb_2m_bytes + self.hugetlb_1g_bytes + self.thp_verified_bytes + self.mthp_bytes
    }
}

/// Reads the summaries (docs/formats.md §4).
pub fn runtime_proof(summaries: &[serde_json::Value]) -> Option<RuntimeProof> {
    if summaries.is_empty() {
        return None;
    }
    let mut p = RuntimeProof {
        processes: summaries.len(),
        plan_valid: true,
        ..Default::default()
    };
    for v in summaries {
        let s = match Summary::from_value(v) {
            Ok(s) => s,
            Err(e) => {
                p.errors.push(format!("unreadable runtime summary: {e}"));
                continue;
            }
        };
        p.hugetlb_2m_bytes += s.hugetlb_2m_bytes();
        p.hugetlb_1g_bytes += s.hugetlb_1g_bytes();
        p.thp_verified_bytes += s.thp_verified_bytes();
        p.mthp_bytes += s.mthp_bytes();
        for f in &s.fallbacks {
            let line = format!("{} x{}", f.describe("->"), f.count);
            if !p.fallbacks.contains(&line) {
                p.fallbacks.push(line);
            }
        }
        p.errors.extend(s.errors.iter().cloned());
        if let Some(a) = &s.allocator {
            p.allocator = a.clone();
        }
        if s.plan_refused() {
            p.plan_valid = false;
        }
        if p.categories.is_null() {
            p.categories = s.categories;
            p.arena = s.arena;
        }
    }
    Some(p)
}

/// One run of one configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// 0: the untimed warm-up round.
    pub round: usize,
    pub ok: bool,
    pub exit_code: i32,
    pub error: Option<String>,
    pub wall_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub max_rss_kb: u64,
    /// (name, seconds): `kernel` and `init` from the workload's line; redis's
    /// `load`, `read`, `total`, `bgsave`.
    pub phases: Vec<(String, f64)>,
    pub figures: BackingFigures,
    pub backing: BackingVerdict,
    pub pools_before: Vec<PoolCounters>,
    pub pools_after: Vec<PoolCounters>,
    /// hugetlb pages taken during the run, per page size in kB.
    pub pool_pages_used: Vec<(u64, u64)>,
    /// Free 2 MB pages the pool really had for a budget (pages sweep).
    pub budget_given: Option<u64>,
    /// Folios faulted in during the run per size in kB (system-wide counters).
    pub folio_faults: Vec<(u64, u64)>,
    pub runtime: Option<RuntimeProof>,
    /// Hardware TLB counters (name, count), where the PMU has them.
    pub tlb: Vec<(String, u64)>,
    /// Things worth saying about this run (e.g. a preload that did nothing).
    pub notes: Vec<String>,
    /// The workload's JSON line, or redis's figures.
    pub output: serde_json::Value,
}

impl RunRecord {
    /// The process's exit and resource usage, from the runner.
    fn take_run_stats(&mut self, st: &RunStats) {
        self.exit_code = st.exit_code;
        self.wall_s = st.wall_s;
        self.user_s = st.user_s;
        self.sys_s = st.sys_s;
        self.minor_faults = st.minor_faults;
        self.major_faults = st.major_faults;
        self.max_rss_kb = st.max_rss_kb;
    }
}

impl RunRecord {
    pub fn phase(&self, name: &str) -> Option<f64> {
        if name == "wall" {
            return Some(self.wall_s);
        }
        self.phases.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }
}

/// Summary of one configuration's timed runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    pub config: String,
    pub runs: Vec<RunRecord>,
    pub warmup: Option<RunRecord>,
    /// Every timed run succeeded.
    pub ok: bool,
    pub failures: usize,
    pub first_error: Option<String>,
    /// The workload's primary measure.
    pub primary: Option<Spread>,
    pub wall: Option<Spread>,
    pub kernel: Option<Spread>,
    pub user: Option<Spread>,
    pub sys: Option<Spread>,
    pub minor_faults: Option<Spread>,
    pub phases: Vec<(String, Spread)>,
    /// Median primary of the baseline (first configuration) over this one's.
    pub speedup: Option<f64>,
    /// Median of the runs' proven huge bytes, and the verdict of the median run.
    pub huge_bytes: u64,
    pub backing: String,
    pub huge_fraction: f64,
    /// Median hugetlb pool pages used per page size (kB).
    pub pool_pages: Vec<(u64, u64)>,
    /// What the reader must know (backed nothing although meant to, …).
    pub flags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub name: String,
    pub about: String,
    pub command: Vec<String>,
    pub primary: String,
    pub group: String,
    pub control: bool,
    pub params: serde_json::Value,
    pub results: Vec<ConfigResult>,
    /// Configurations that did not run, and why.
    pub skipped: Vec<Missing>,
}

impl WorkloadResult {
    pub fn result(&self, config: &str) -> Option<&ConfigResult> {
        self.results.iter().find(|r| r.config == config)
    }
}

/// A suite's running context: artifacts, scratch space, the kernel state it
/// holds, whether TLB counters are read.
pub struct Bench {
    pub art: Artifacts,
    /// Removed also when hugetune is interrupted (it exits without dropping).
    pub dir: hugetune_host::kernel_state::Scratch,
    pub held: Held,
    pub tlb_counters: bool,
    pub suite: String,
    /// Bytes of memory touched and freed before each timed run (warm memory).
    pub warm: bool,
}

impl Bench {
    pub fn new(suite: &str, held: Held, tlb_counters: bool) -> Result<Bench> {
        let art = crate::artifacts::find()?;
        let dir = hugetune_host::kernel_state::Scratch::new(&format!("hugetune-bench-{suite}."))?;
        Ok(Bench {
            art,
            dir,
            held,
            tlb_counters,
            suite: suite.into(),
            warm: true,
        })
    }

    fn subst(&self, s: &str) -> String {
        s.replace("{dir}", &self.dir.path().display().to_string())
    }

    fn plan_path(&self, c: &Config) -> Result<PathBuf> {
        let p = self.dir.path().join(format!("plan.{}", sanitize(&c.name)));
        // Written for every run: configurations of the same name differ
        // between workloads (`peers`' hugetune plan).
        if let Some(plan) = &c.plan {
            std::fs::write(&p, &plan.text).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(p)
    }

    fn summary_dir(&self) -> Result<PathBuf> {
        let d = self.dir.path().join("summaries");
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// Runs every configuration of `w` interleaved: round 0 untimed, then `runs`
    /// timed rounds in rotated order. The first configuration is the baseline
    /// of the speedups. A configuration that needs root (pools, THP) is skipped
    /// with the reason when not root; a failing run is recorded, never fatal.
    pub fn measure(&self, w: &Workload, configs: &[Config], runs: usize) -> WorkloadResult {
        let mut skipped = Vec::new();
        let runnable: Vec<&Config> = configs
            .iter()
            .filter(|c| {
                if c.needs_root() && !self.held.holds_lock() {
                    skipped.push(Missing {
                        what: c.name.clone(),
                        reason:
                            "needs root (hugetlb pool or THP settings under the kernel-state lock)"
                                .into(),
                    });
                    false
                } else {
                    true
                }
            })
            .collect();
        let n = runnable.len();
        let mut records: Vec<Vec<RunRecord>> = vec![Vec::new(); n];
        // Every configuration once per round, rotated; an untimed warm-up round;
        // the baseline's footprint touched before each timed run (capture::rounds).
        let rounds = Rounds {
            warm_memory: self.warm,
            ..Rounds::fixed(runs)
        };
        // Every configuration in the warm-up round and in each timed round.
        let bar = crate::progress::Progress::bar(
            &format!("{} {}", self.suite, w.name),
            (n * (runs + 1)) as u64,
            "runs",
        );
        // (Its runs never fail it: a failed run is a record.)
        let _ = rounds::run(
            n,
            &rounds,
            |step| {
                let (i, round) = (step.config, step.round);
                let c = runnable[i];
                let rec = match self.run_one(w, c, round) {
                    Ok(r) => r,
                    Err(e) => RunRecord {
                        round,
                        ok: false,
                        exit_code: -1,
                        error: Some(format!("{e:#}")),
                        ..Default::default()
                    },
                };
                let ran = if rec.ok {
                    Ran::Faults(rec.minor_faults)
                } else {
                    Ran::Done
                };
                stages::note(format!(
                    "{} {} [{}] {}: {}",
                    self.suite,
                    w.name,
                    c.name,
                    if round == 0 {
                        "warm-up".to_string()
                    } else {
                        format!("round {round}/{runs}")
                    },
                    if rec.ok {
                        format!(
                            "{}{} s, {} huge ({})",
                            if w.primary == "wall" {
                                String::new()
                            } else {
                                format!(
                                    "{} {:.3} s, ",
                                    w.primary,
                                    rec.phase(&w.primary).unwrap_or(f64::NAN)
                                )
                            },
                            format_args!("wall {:.3}", rec.wall_s),
                            hugetune_render::bytes(rec.backing.huge_bytes),
                            rec.backing.label
                        )
                    } else {
                        format!(
                            "FAILED: {}",
                            rec.error.as_deref().unwrap_or("unknown error")
                        )
                    }
                ));
                records[i].push(rec);
                bar.inc(1);
                Ok(ran)
            },
            |_| true,
        );
        drop(bar);
        let mut results: Vec<ConfigResult> = runnable
            .iter()
            .zip(records)
            .map(|(c, recs)| summarize(c, recs, &w.primary))
            .collect();
        let base = results.first().and_then(|r| r.primary);
        for r in &mut results {
            r.speedup = match (base, r.primary) {
                (Some(b), Some(p)) => Some(stats::speedup(&b, &p)),
                _ => None,
            };
        }
        WorkloadResult {
            name: w.name.clone(),
            about: w.about.clone(),
            command: w.command(&self.art.work),
            primary: w.primary.clone(),
            group: w.group.clone(),
            control: w.control,
            params: w.params.clone(),
            results,
            skipped,
        }
    }

    /// One run of `w` under `c`, with its proof of backing.
    pub fn run_one(&self, w: &Workload, c: &Config, round: usize) -> Result<RunRecord> {
        let settings = self.held.for_run(c)?;
        let plan = self.plan_path(c)?;
        let sdir = self.summary_dir()?;
        stages::take_summaries(&sdir);
        let summary = sdir.join("summary.%p.json");
        let env = c.env_for(&self.art.runtime_lib, &plan, &summary);
        let folios_before = machine::folio_fault_counts(Path::new(THP_SYSFS));
        let pools_before = pools_now();
        let sampler = Sampler::start();
        let mut rec = RunRecord {
            round,
            pools_before: pools_before.clone(),
            budget_given: settings.budget_given,
            ..Default::default()
        };
        if let (Some(want), Some(got)) = (c.budget_2m, settings.budget_given) {
            if got < want {
                rec.notes.push(format!(
                    "the kernel gave {got} of the {want} 2 MB pages of the budget"
                ));
            }
        }
        let peak: HugeUsage;
        match &w.job {
            Job::Work { .. } | Job::Program { .. } => {
                let (argv, perf_out) = self.argv(w, c)?;
                let mut spec = RunSpec::new(argv);
                spec.env = env;
                spec.env_remove = SCRUB.iter().map(|s| s.to_string()).collect();
                spec.stdout = Output::Capture;
                spec.stderr = Output::Capture;
                let st = runner::run(&spec)?;
                peak = st.peak;
                rec.take_run_stats(&st);
                let stderr = String::from_utf8_lossy(&st.stderr);
                rec.notes.extend(stderr_notes(&stderr));
                if let Some(p) = perf_out {
                    rec.tlb = parse_perf_counts(&std::fs::read_to_string(&p).unwrap_or_default());
                    let _ = std::fs::remove_file(p);
                }
                rec.ok = st.exit_code == 0;
                if matches!(w.job, Job::Work { .. }) {
                    match serde_json::from_slice::<serde_json::Value>(&st.stdout) {
                        Ok(v) => {
                            if let Some(s) = v["seconds"].as_f64() {
                                rec.phases.push(("kernel".into(), s));
                            }
                            if let Some(s) = v["init_seconds"].as_f64() {
                                rec.phases.push(("init".into(), s));
                            }
                            rec.output = v;
                        }
                        Err(_) if rec.ok => {
                            rec.ok = false;
                            rec.error = Some("the workload printed no JSON line".into());
                        }
                        Err(_) => {}
                    }
                }
                if !rec.ok && rec.error.is_none() {
                    let last = stderr
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty() && !l.contains("libhugetlbfs: INFO"))
                        .unwrap_or("")
                        .trim();
                    rec.error = Some(match st.signal {
                        Some(s) => format!("killed by signal {s} {last}"),
                        None => format!("exit status {}: {last}", st.exit_code),
                    });
                }
            }
            Job::Redis(job) => {
                let server = redis::server_path().map_err(anyhow::Error::msg)?;
                let rdir = self.dir.path().join("redis");
                std::fs::create_dir_all(&rdir)?;
                let scrub: Vec<&str> = SCRUB.to_vec();
                let (out, st) = redis::run(job, &server, &c.wrapper, &env, &scrub, &rdir)?;
                peak = st.peak;
                rec.take_run_stats(&st);
                rec.phases = out.phases.clone();
                rec.ok = out.error.is_none();
                rec.error = out.error.clone();
                if job.bgsave && rec.ok && out.bgsave_status.as_deref() != Some("ok") {
                    let what = format!(
                        "BGSAVE failed (rdb_last_bgsave_status:{}): {}",
                        out.bgsave_status.as_deref().unwrap_or("?"),
                        redis_log_message(&out.log_tail)
                    );
                    if w.control {
                        rec.ok = false;
                        rec.error = Some(what);
                    } else {
                        rec.notes.push(what);
                    }
                }
                rec.notes.extend(stderr_notes(&out.log_tail));
                rec.notes.extend(stderr_notes(&out.stderr_tail));
                rec.output = serde_json::json!({
                    "used_memory": out.used_memory,
                    "used_memory_rss": out.used_memory_rss,
                    "keys": out.keys,
                    "fork_usec": out.fork_usec,
                    "bgsave_status": out.bgsave_status,
                    "log_tail": out.log_tail,
                });
            }
        }
        let (min_free, pools_max_used) = sampler.stop();
        let pools_after = pools_now();
        let folios_after = machine::folio_fault_counts(Path::new(THP_SYSFS));
        rec.pool_pages_used = pool_pages_used(&pools_before, &min_free, &pools_max_used);
        for (kb, n) in pages_held_after(&pools_before, &pools_after) {
            if let Some(u) = rec.pool_pages_used.iter_mut().find(|(k, _)| *k == kb) {
                u.1 = u.1.saturating_sub(n);
            }
            rec.notes.push(format!(
                "{n} pages of the {kb} kB pool were taken during the run and still were after it ended: another process's (or a file on hugetlbfs), not counted as the run's"
            ));
        }
        rec.folio_faults = folio_delta(&folios_before, &folios_after);
        rec.pools_after = pools_after;
        rec.runtime = runtime_proof(&stages::take_summaries(&sdir));
        if let Some(rt) = &rec.runtime {
            if !rt.plan_valid {
                rec.notes
                    .push("the runtime library refused the plan (nothing applied)".into());
            }
            for e in &rt.errors {
                rec.notes.push(format!("runtime library: {e}"));
            }
        }
        rec.figures = BackingFigures {
            rss: peak.rss,
            anon_huge: peak.anon_huge,
            hugetlb: peak.hugetlb,
            pool_bytes: rec
                .pool_pages_used
                .iter()
                .map(|&(kb, n)| kb * 1024 * n)
                .sum(),
            mthp_bytes: rec
                .folio_faults
                .iter()
                .filter(|&&(kb, _)| kb < 2048)
                .map(|&(kb, n)| kb * 1024 * n)
                .sum(),
            runtime: rec.runtime.as_ref().map(|r| r.huge_bytes()),
        };
        rec.backing = stats::backing_verdict(&rec.figures);
        drop(settings);
        Ok(rec)
    }

    /// The command line of a run: perf (when counting TLB misses), the
    /// configuration's wrapper, the program, its arguments, `--page`.
    fn argv(&self, w: &Workload, c: &Config) -> Result<(Vec<OsString>, Option<PathBuf>)> {
        let mut argv: Vec<OsString> = Vec::new();
        let mut perf_out = None;
        if self.tlb_counters {
            let f = self.dir.path().join("perf.out");
            argv.extend(
                [
                    "perf",
                    "stat",
                    "-x",
                    ",",
                    "-e",
                    "dTLB-load-misses,dTLB-loads,iTLB-load-misses",
                    "-o",
                ]
                .map(OsString::from),
            );
            argv.push(f.clone().into_os_string());
            argv.push("--".into());
            perf_out = Some(f);
        }
        argv.extend(c.wrapper.iter().map(OsString::from));
        match &w.job {
            Job::Work { args } => {
                argv.push(self.art.work.clone().into_os_string());
                argv.extend(args.iter().map(|a| OsString::from(self.subst(a))));
                if let Some(p) = &c.page {
                    argv.push("--page".into());
                    argv.push(p.into());
                }
            }
            Job::Program { argv: a } => {
                argv.extend(a.iter().map(|s| OsString::from(self.subst(s))));
            }
            Job::Redis(_) => unreachable!("redis runs through redis::run"),
        }
        Ok((argv, perf_out))
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Per page size (kB): the lowest free count and the most pages in use seen.
type PoolSamples = (Vec<(u64, u64)>, Vec<(u64, u64)>);

/// Samples the hugetlb pools' free counters while a run goes on: the lowest
/// free count per page size (pages taken = free before − lowest free).
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<PoolSamples>,
}

impl Sampler {
    fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut min_free: Vec<(u64, u64)> = Vec::new();
            // Pages used can also show as a growing pool (surplus pages).
            let mut max_used: Vec<(u64, u64)> = Vec::new();
            loop {
                for p in pools_now() {
                    let used = p.nr.saturating_sub(p.free);
                    match min_free.iter_mut().find(|(k, _)| *k == p.page_kb) {
                        Some(e) => e.1 = e.1.min(p.free),
                        None => min_free.push((p.page_kb, p.free)),
                    }
                    match max_used.iter_mut().find(|(k, _)| *k == p.page_kb) {
                        Some(e) => e.1 = e.1.max(used),
                        None => max_used.push((p.page_kb, used)),
                    }
                }
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (min_free, max_used)
        });
        Sampler { stop, handle }
    }

    fn stop(self) -> PoolSamples {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// hugetlb pages a run took per page size: the drop of the free count below its
/// value before the run, or the rise of the pages in use (surplus pages).
pub fn pool_pages_used(
    before: &[PoolCounters],
    min_free: &[(u64, u64)],
    max_used: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    before
        .iter()
        .map(|b| {
            let dropped = min_free
                .iter()
                .find(|(k, _)| *k == b.page_kb)
                .map_or(0, |&(_, f)| b.free.saturating_sub(f));
            let grown = max_used
                .iter()
                .find(|(k, _)| *k == b.page_kb)
                .map_or(0, |&(_, u)| u.saturating_sub(b.nr.saturating_sub(b.free)));
            (b.page_kb, dropped.max(grown))
        })
        .collect()
}

/// Pages per size still taken (in use or reserved) after a run's processes
/// ended that were not before it: another process's (a neighbouring program
/// using the pool without hugetune's lock) or a file left on hugetlbfs. The
/// pool counters are the whole machine's, so these come off the run's use.
pub fn pages_held_after(before: &[PoolCounters], after: &[PoolCounters]) -> Vec<(u64, u64)> {
    let taken = |c: &PoolCounters| c.nr.saturating_sub(c.free) + c.resv.min(c.free);
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.page_kb == a.page_kb)?;
            let n = taken(a).saturating_sub(taken(b));
            (n > 0).then_some((a.page_kb, n))
        })
        .collect()
}

/// Folios faulted per size during a run, from counters before and after.
pub fn folio_delta(before: &[(u64, u64)], after: &[(u64, u64)]) -> Vec<(u64, u64)> {
    after
        .iter()
        .filter_map(|&(kb, n)| {
            let b = before.iter().find(|(k, _)| *k == kb).map_or(n, |&(_, c)| c);
            let d = n.saturating_sub(b);
            (d > 0).then_some((kb, d))
        })
        .collect()
}

/// What a run's stderr (or a server's log) says that the report must show:
/// libhugetlbfs's morecore not being set up, preloads that failed.
pub fn stderr_notes(stderr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in stderr.lines() {
        let l = l.trim();
        if l.contains("Not setting up morecore") {
            out.push(format!(
                "libhugetlbfs did not set up its morecore (glibc {} has no __morecore): {l}",
                super::state::glibc_version()
            ));
        } else if l.contains("cannot be preloaded") {
            out.push(format!("preload failed: {l}"));
        } else if l.contains("mimalloc: warning") || l.contains("mimalloc: error") {
            out.push(l.to_string());
        }
    }
    out.dedup();
    out
}

/// The last line of a redis log about the background save, without the
/// `pid:role date time` prefix (so that runs' messages compare equal).
pub fn redis_log_message(log: &str) -> String {
    log.lines()
        .rev()
        .find(|l| l.contains("Background") || l.contains("signal") || l.contains("fork"))
        .map(|l| {
            let l = l.trim();
            l.split_once(" # ")
                .or_else(|| l.split_once(" * "))
                .map_or(l, |x| x.1)
                .to_string()
        })
        .unwrap_or_default()
}

/// `perf stat -x ,` output: (event, count) for the counted events.
pub fn parse_perf_counts(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            if f.len() < 3 {
                return None;
            }
            let n = f[0].trim().parse::<u64>().ok()?;
            Some((f[2].trim().to_string(), n))
        })
        .collect()
}

/// Medians and spreads of one configuration's timed runs.
pub fn summarize(c: &Config, recs: Vec<RunRecord>, primary: &str) -> ConfigResult {
    let mut recs = recs;
    let warmup = if recs.first().is_some_and(|r| r.round == 0) {
        Some(recs.remove(0))
    } else {
        None
    };
    let good: Vec<&RunRecord> = recs.iter().filter(|r| r.ok).collect();
    let sp = |f: &dyn Fn(&RunRecord) -> Option<f64>| {
        Spread::of(&good.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    let mut phase_names: Vec<String> = Vec::new();
    for r in &good {
        for (n, _) in &r.phases {
            if !phase_names.contains(n) {
                phase_names.push(n.clone());
            }
        }
    }
    let phases = phase_names
        .iter()
        .filter_map(|n| Some((n.clone(), sp(&|r| r.phase(n))?)))
        .collect();
    let failures = recs.iter().filter(|r| !r.ok).count();
    let first_error = recs
        .iter()
        .chain(warmup.iter())
        .find_map(|r| r.error.clone());
    // The run with the median huge bytes stands for the configuration.
    let mut by_huge: Vec<&RunRecord> = good.clone();
    by_huge.sort_by_key(|r| r.backing.huge_bytes);
    let mid = by_huge.get(by_huge.len() / 2).copied();
    let mut pool_pages: Vec<(u64, u64)> = Vec::new();
    if let Some(r) = good.first() {
        for &(kb, _) in &r.pool_pages_used {
            let mut v: Vec<u64> = good
                .iter()
                .map(|r| {
                    r.pool_pages_used
                        .iter()
                        .find(|(k, _)| *k == kb)
                        .map_or(0, |&(_, n)| n)
                })
                .collect();
            v.sort_unstable();
            pool_pages.push((kb, v[v.len() / 2]));
        }
    }
    let mut flags = Vec::new();
    if let Some(m) = mid {
        if c.expects_huge && m.backing.label == "none" {
            flags.push(format!(
                "{}: applied, but nothing was backed by huge pages",
                c.name
            ));
        }
    }
    let mut notes: Vec<String> = recs.iter().flat_map(|r| r.notes.clone()).collect();
    notes.sort();
    notes.dedup();
    flags.extend(notes);
    if failures > 0 {
        flags.push(format!(
            "{failures} of {} runs failed: {}",
            recs.len(),
            first_error.as_deref().unwrap_or("?")
        ));
    }
    ConfigResult {
        config: c.name.clone(),
        ok: failures == 0 && !recs.is_empty(),
        failures,
        first_error,
        primary: sp(&|r| r.phase(primary)),
        wall: sp(&|r| Some(r.wall_s)),
        kernel: sp(&|r| r.phase("kernel")),
        user: sp(&|r| Some(r.user_s)),
        sys: sp(&|r| Some(r.sys_s)),
        minor_faults: sp(&|r| Some(r.minor_faults as f64)),
        phases,
        speedup: None,
        huge_bytes: mid.map_or(0, |r| r.backing.huge_bytes),
        backing: mid.map_or("-".into(), |r| r.backing.label.clone()),
        huge_fraction: mid.map_or(0.0, |r| r.backing.fraction),
        pool_pages,
        flags,
        runs: recs,
        warmup,
    }
}

/// The kernels `hugetune-work --help` lists (the lines under `kernels:` that
/// start with two spaces and a name).
pub fn kernels_listed(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in help.lines() {
        if l.trim_end() == "kernels:" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if !l.starts_with(' ') && !l.trim().is_empty() {
            break;
        }
        if let Some(rest) = l.strip_prefix("  ") {
            if !rest.starts_with(' ') {
                if let Some(name) = rest.split_whitespace().next() {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

/// The kernels an unknown-kernel error names: `... (expected a, b, c or d)`.
pub fn kernels_expected(stderr: &str) -> Vec<String> {
    let Some(i) = stderr.find("(expected ") else {
        return vec![];
    };
    let rest = &stderr[i + "(expected ".len()..];
    let list = rest.split(')').next().unwrap_or("");
    list.replace(" or ", ", ")
        .split(',')
        .map(|k| k.trim().to_string())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .collect()
}

/// The kernels this `hugetune-work` has: those its `--help` lists, and those
/// its error for an unknown kernel names (a build whose help text lags its
/// kernels still runs them).
pub fn available_kernels(work: &Path) -> Vec<String> {
    let text = |args: &[&str]| {
        std::process::Command::new(work)
            .args(args)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default()
    };
    let mut v = kernels_listed(&text(&["--help"]));
    for k in kernels_expected(&text(&["hugetune-no-such-kernel"])) {
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_list_from_help() {
        let help = "usage: hugetune-work KERNEL [options]\n\nkernels:\n  randmem   read+write one word\n            (default: size/64)\n  cg        conjugate gradient\n  iocopy    copy a file\n\noptions:\n  --size BYTES  memory\n";
        assert_eq!(kernels_listed(help), vec!["randmem", "cg", "iocopy"]);
        assert!(kernels_listed("no kernels here").is_empty());
        assert_eq!(
            kernels_expected("hugetune-work: error: unknown kernel 'x' (expected randmem, chase, mg or iocopy)\n"),
            vec!["randmem", "chase", "mg", "iocopy"]
        );
        assert!(kernels_expected("hugetune-work: error: --size 1 is too small").is_empty());
    }

    #[test]
    fn pool_and_folio_accounting() {
        let before = [
            PoolCounters {
                page_kb: 2048,
                nr: 100,
                free: 100,
                resv: 0,
            },
            PoolCounters {
                page_kb: 1 << 20,
                nr: 2,
                free: 2,
                resv: 0,
            },
        ];
        let used = pool_pages_used(&before, &[(2048, 40), (1 << 20, 2)], &[(2048, 60)]);
        assert_eq!(used, vec![(2048, 60), (1 << 20, 0)]);
        // CI's case: 46 free before, 10 in use and 2 reserved after the run
        // ended (a neighbour's): the run used none of them.
        let c = |nr, free, resv| PoolCounters {
            page_kb: 2048,
            nr,
            free,
            resv,
        };
        assert_eq!(
            pages_held_after(&[c(46, 46, 0)], &[c(46, 36, 2)]),
            vec![(2048, 12)]
        );
        assert_eq!(pages_held_after(&[c(46, 46, 0)], &[c(46, 46, 0)]), vec![]);
        assert_eq!(
            pages_held_after(&[c(46, 40, 1)], &[c(46, 46, 0)]),
            vec![],
            "pages given back during the run are not held"
        );
        assert_eq!(
            folio_delta(&[(64, 10), (2048, 5)], &[(64, 30), (2048, 5), (16, 3)]),
            vec![(64, 20)],
            "a size without a before value counts from its first reading"
        );
    }

    #[test]
    fn runtime_summaries() {
        let s = serde_json::json!({
            "backed": {"hugetlb-2m": {"bytes": 4194304}, "hugetlb-1g": {"bytes": 0},
                       "thp-2m": {"verified_bytes": 2097152}},
            "verify": {"thp_sizes": {"bytes": {"4k": 4096, "64k": 65536, "2m": 2097152}}},
            "fallbacks": [{"category": "heap-large", "from": "hugetlb-2m", "to": "thp-2m",
                           "reason": "ENOMEM", "count": 2, "bytes": 10}],
            "errors": ["bad line"], "allocator": "glibc", "plan": {"valid": false}
        });
        let p = runtime_proof(&[s.clone(), s]).unwrap();
        assert_eq!(p.processes, 2);
        assert_eq!(p.huge_bytes(), 2 * (4194304 + 2097152 + 65536));
        assert_eq!(
            p.fallbacks,
            vec!["heap-large hugetlb-2m -> thp-2m (ENOMEM) x2"]
        );
        assert_eq!(p.errors.len(), 2);
        assert!(!p.plan_valid);
        assert!(runtime_proof(&[]).is_none());
    }

    #[test]
    fn redis_log_lines() {
        let log = "1:M 22 Nov 2026 20:40:00.123 * Background saving started by pid 7\n\
                   1:M 22 Nov 2026 20:40:01.456 # Background saving terminated by signal 7\n";
        assert_eq!(
            redis_log_message(log),
            "Background saving terminated by signal 7"
        );
        assert_eq!(redis_log_message(""), "");
    }

    #[test]
    fn notes_and_perf() {
        let n = stderr_notes(
            "libhugetlbfs: INFO: Not setting up morecore because it's not available (see issue #52).\n\
             ERROR: ld.so: object 'libhugetlbfs.so' from LD_PRELOAD cannot be preloaded (cannot open shared object file): ignored.\n",
        );
        assert_eq!(n.len(), 2);
        assert!(n[0].contains("did not set up its morecore"), "{n:?}");
        assert!(n[1].starts_with("preload failed"));
        let c = parse_perf_counts(
            "# started on x\n\n1234,,dTLB-load-misses,100,100.00,,\n<not supported>,,dTLB-loads,0,100.00,,\n",
        );
        assert_eq!(c, vec![("dTLB-load-misses".to_string(), 1234)]);
    }

    #[test]
    fn summaries_of_runs() {
        let c = Config::new("x", "");
        let rec = |round, ok, t: f64, huge| RunRecord {
            round,
            ok,
            wall_s: t + 1.0,
            phases: vec![("kernel".into(), t)],
            backing: BackingVerdict {
                huge_bytes: huge,
                fraction: if huge > 0 { 1.0 } else { 0.0 },
                label: if huge > 0 { "huge" } else { "none" }.into(),
            },
            error: (!ok).then(|| "exit status 3: no pool".to_string()),
            ..Default::default()
        };
        let r = summarize(
            &c,
            vec![
                rec(0, true, 9.0, 0),
                rec(1, true, 2.0, 0),
                rec(2, false, 0.0, 0),
                rec(3, true, 4.0, 0),
            ],
            "kernel",
        );
        assert!(r.warmup.is_some());
        assert_eq!(r.runs.len(), 3);
        assert_eq!((r.failures, r.ok), (1, false));
        assert_eq!(r.primary.unwrap().median, 3.0);
        assert_eq!(r.wall.unwrap().median, 4.0);
        assert!(
            r.flags.iter().any(|f| f.contains("backed by huge pages")),
            "{:?}",
            r.flags
        );
        assert!(r.flags.iter().any(|f| f.contains("1 of 3 runs failed")));
        let mut b = Config::new("4k", "");
        b.expects_huge = false;
        let r = summarize(&b, vec![rec(1, true, 2.0, 0)], "wall");
        assert!(r.flags.is_empty() && r.ok && r.warmup.is_none());
        assert_eq!(r.primary.unwrap().median, 3.0);
    }
}
