//! `hugetune bench`: benchmarks that print figures, and suites that reproduce
//! the seeds' experiments with the built-in workloads and real programs, next
//! to the mechanisms people use today (docs/reproducing.md).
//!
//! - `runtime`, `capture`, `model`: the runtime library's overhead, reference
//!   capture speed, the reuse-distance engines (figures, no HTML).
//! - `characterize` (seed 004), `pages-sweep` (seed 004 experiment 1),
//!   `integration` (seed 000), `scaling` (seed 002), `categories` (seed 001
//!   fig. 4), `peers`: configurations interleaved and repeated, every run with
//!   its proof of backing, the machine's settings restored also on error and
//!   Ctrl-C; `--json`, `--out DIR` (SUITE.json + SUITE.html).
//! - `programs`: real programs (own mmap allocator, numpy, MPI, bash -c,
//!   static C, Go, Java) through `hugetune optimize` and `hugetune run`, next to
//!   THP always and glibc's hugetlb tunable; what cannot run is skipped with why.
//!
//! The shared parts: `config` (configurations as data), `run` (the
//! interleaved runner and proof of backing), `stats` (pure computation),
//! `state` (kernel state and machine facts), `output` (report, HTML), `redis`.

pub mod capture_speed;
pub mod categories;
pub mod characterize;
pub mod config;
pub mod integration;
pub mod output;
pub mod pages_sweep;
pub mod peers;
pub mod programs;
pub mod redis;
pub mod reuse_engines;
pub mod run;
pub mod runtime_overhead;
pub mod scaling;
pub mod soak;
pub mod state;
pub mod stats;
pub mod store;

use crate::{stages, Ctx};
use anyhow::{bail, Result};
use config::{Config, Missing};
use output::SuiteReport;
use run::{Bench, WorkloadResult};
use state::{Held, KernelSnapshot, MachineFacts};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    suite: Suite,
}

/// Options every reproduction suite takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Opts {
    /// Small sizes and one timed run, for tests (figures are not meaningful)
    #[arg(long)]
    pub quick: bool,
    /// Timed runs of every configuration, interleaved, after one untimed
    /// warm-up round [default: 5; 1 with --quick]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: Option<u32>,
    /// Print the report as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Write SUITE.json and SUITE.html (with the plots) into DIR
    #[arg(long = "out-dir", alias = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Only these workloads (comma-separated names; an unknown name lists them)
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub workloads: Vec<String>,
    /// Only these configurations (comma-separated; the baseline always runs)
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub configs: Vec<String>,
}

impl Opts {
    pub fn runs(&self) -> usize {
        self.runs.unwrap_or(if self.quick { 1 } else { 5 }) as usize
    }
}

#[derive(clap::Subcommand)]
enum Suite {
    /// Overhead of the runtime library: none / inert / record / apply
    Runtime {
        /// Small sizes, for tests (figures are not meaningful)
        #[arg(long)]
        quick: bool,
        /// Repetitions of each configuration
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Reuse-distance engines: exact and SHARDS throughput, SHARDS memory, SHARDS
    /// and StatStack accuracy per trace shape (docs/reuse.md)
    Model {
        /// Small traces, for tests (figures are not meaningful)
        #[arg(long)]
        quick: bool,
        /// Repetitions of each timing
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Reference capture speed: native / qemu+plugin / valgrind lackey
    Capture {
        /// Small sizes, for tests (figures are not meaningful)
        #[arg(long)]
        quick: bool,
        /// Repetitions of each configuration
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Seed 004: CPU-, memory- and I/O-bound workloads and Redis under 4 KB, THP 2 MB,
    /// hugetlb 2 MB, hugetlb 1 GB and one mTHP size
    Characterize(Opts),
    /// Seed 004 experiment 1: the memory-bound workload with hugetlb budgets from 10 %
    /// to 110 % of its footprint, next to the model's predicted curve
    PagesSweep {
        #[command(flatten)]
        opts: Opts,
        /// Budgets in percent of the footprint
        #[arg(long, value_delimiter = ',', default_value = "10,20,30,40,50,60,70,80,90,100,110",
              value_parser = clap::value_parser!(u32).range(1..=400))]
        pcts: Vec<u32>,
    },
    /// Seed 000: one big buffer, many 3-12 MB buffers, many ~2 KB objects under 4 KB, THP,
    /// hugetlb through the runtime library and hugetlb with unrounded sizes
    Integration(Opts),
    /// Seed 002: OpenMP kernels shaped like NAS CG, MG and SP, 1..N threads, 4 KB against 2 MB
    Scaling {
        #[command(flatten)]
        opts: Opts,
        /// Most threads (default: the CPUs of this machine)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
        threads: Option<u32>,
    },
    /// Seed 001 fig. 4: data in static, heap-small and heap-large; every base mapping timed,
    /// predicted against measured ranking and the ranking error
    Categories(Opts),
    /// hugetune next to THP always, glibc's hugetlb tunable, libhugetlbfs, jemalloc and
    /// mimalloc on every workload: speedup, huge pages used, what was really huge
    Peers {
        #[command(flatten)]
        opts: Opts,
        /// A peer's library at PATH instead of the system's (PEER: jemalloc, mimalloc,
        /// libhugetlbfs), e.g. mimalloc=/opt/lib/libmimalloc.so.2; a missing file is
        /// reported as a missing peer
        #[arg(long = "peer-lib", value_name = "PEER=PATH")]
        peer_lib: Vec<String>,
    },
    /// Real programs (own mmap allocator, numpy, mpirun, bash -c, static C, Go, Java):
    /// optimize's timings, plan and predicted/validated speedup, then `hugetune run`
    /// next to THP always and glibc.malloc.hugetlb=2, interleaved; a program that
    /// cannot run here is skipped with the reason
    Programs(programs::Args),
    /// Redis under the runtime library's plan for a long time: writes, a BGSAVE every
    /// 10 s, the pool shrunk by another process half-way; checks that nothing
    /// breaks and memory stays steady (root)
    Soak(soak::Args),
    /// Many hosts on one store: concurrent clients doing `run`'s plan look-up and run
    /// inserts against --db (a PostgreSQL server or a file); look-ups and writes per
    /// second, latency percentiles (docs/fleet.md)
    Store(store::Args),
    /// The suites' Redis client against a server already running on 127.0.0.1:PORT:
    /// load KEYS values with pipelined SETs, read every key back (each value checked),
    /// then BGSAVE; exits 1 if anything failed. A driver for `optimize --driver`
    RedisClient {
        /// The server's port on 127.0.0.1
        #[arg(long)]
        port: u16,
        /// Keys to load
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        keys: u64,
        /// Bytes per value
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(8..=(64 << 20)))]
        value_bytes: u64,
        /// Commands per pipelined batch
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        batch: u64,
        /// Also BGSAVE (fork + copy-on-write) and require it to succeed
        #[arg(long)]
        bgsave: bool,
        /// Print the outcome as one JSON object (a failed BGSAVE is then reported
        /// in it, not as a failure)
        #[arg(long)]
        json: bool,
    },
}

/// A figures suite's result: one JSON object, or its rendered table.
fn print_figures<T: serde::Serialize>(r: &T, json: bool, render: fn(&T) -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print!("{}", render(r));
    }
    Ok(())
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    match a.suite {
        Suite::Runtime { quick, runs, json } => print_figures(
            &runtime_overhead::runtime_overhead(quick, runs as usize)?,
            json,
            runtime_overhead::render,
        )?,
        Suite::Model { quick, runs, json } => print_figures(
            &reuse_engines::model_figures(quick, runs as usize)?,
            json,
            reuse_engines::render_model,
        )?,
        Suite::Capture { quick, runs, json } => print_figures(
            &capture_speed::capture_speed(quick, runs as usize)?,
            json,
            capture_speed::render_capture,
        )?,
        Suite::Characterize(o) => characterize::run(&o)?,
        Suite::PagesSweep { opts, pcts } => pages_sweep::run(ctx, &opts, &pcts)?,
        Suite::Integration(o) => integration::run(&o)?,
        Suite::Scaling { opts, threads } => scaling::run(ctx, &opts, threads)?,
        Suite::Categories(o) => categories::run(ctx, &o)?,
        Suite::Soak(a) => return soak::run(a),
        Suite::Store(a) => return store::run(ctx, a),
        Suite::Peers { opts, peer_lib } => peers::run(ctx, &opts, &peer_lib)?,
        Suite::Programs(a) => programs::run(ctx, &a)?,
        Suite::RedisClient {
            port,
            keys,
            value_bytes,
            batch,
            bgsave,
            json,
        } => {
            let job = redis::RedisJob {
                keys,
                value_bytes: value_bytes as usize,
                batch: batch as usize,
                bgsave,
            };
            // JSON is for the bench's own runs, which judge the BGSAVE themselves.
            let out = redis::client(&job, port, !json)?;
            if json {
                println!("{}", serde_json::to_string(&out)?);
            } else {
                for (phase, s) in &out.phases {
                    println!("{phase:8} {s:.3} s");
                }
            }
        }
    }
    Ok(0)
}

/// Keeps the items whose names are listed (all when the list is empty); an
/// unknown name is an error that lists the valid ones.
pub fn select<T>(
    items: Vec<T>,
    wanted: &[String],
    name: impl Fn(&T) -> &str,
    what: &str,
    suite: &str,
) -> Result<Vec<T>> {
    if wanted.is_empty() {
        return Ok(items);
    }
    let names: Vec<String> = items.iter().map(|i| name(i).to_string()).collect();
    for w in wanted {
        if !names.iter().any(|n| n == w) {
            bail!(
                "unknown {what} '{w}' for bench {suite} (one of: {})",
                names.join(", ")
            );
        }
    }
    Ok(items
        .into_iter()
        .filter(|i| wanted.iter().any(|w| w == name(i)))
        .collect())
}

/// Configurations selected by `--configs`; the first (the baseline) always stays.
pub fn select_configs(all: Vec<Config>, o: &Opts, suite: &str) -> Result<Vec<Config>> {
    if o.configs.is_empty() {
        return Ok(all);
    }
    let base = all.first().map(|c| c.name.clone()).unwrap_or_default();
    let mut wanted = o.configs.clone();
    if !wanted.contains(&base) {
        wanted.insert(0, base);
    }
    select(all, &wanted, |c| c.name.as_str(), "configuration", suite)
}

/// One suite from start to report: the machine before, the kernel state held,
/// and afterwards (everything dropped) the settings compared with before.
pub struct SuiteRun {
    pub name: String,
    pub reproduces: String,
    pub before: KernelSnapshot,
    pub facts: MachineFacts,
    pub t0: Instant,
    pub started: u64,
    pub notes: Vec<String>,
    pub missing: Vec<Missing>,
}

impl SuiteRun {
    pub fn begin(name: &str, reproduces: &str) -> SuiteRun {
        let before = state::resting_snapshot();
        let facts = state::machine_facts();
        stages::note(format!(
            "bench {name}: load average {}; {}",
            facts.load_before, facts.pmu_note
        ));
        SuiteRun {
            name: name.into(),
            reproduces: reproduces.into(),
            before,
            facts,
            t0: Instant::now(),
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            notes: vec![],
            missing: vec![],
        }
    }

    /// Takes the kernel state the configurations need (root), or nothing
    /// (configurations that need it are then skipped with the reason).
    pub fn bench(&mut self, configs: &[&Config]) -> Result<Bench> {
        let held = if state::is_root() {
            Held::take(configs)?
        } else {
            if configs.iter().any(|c| c.needs_root()) {
                self.notes.push(
                    "not root: configurations that need hugetlb pools or THP settings are skipped"
                        .into(),
                );
            }
            Held::none()
        };
        self.notes.extend(held.notes.iter().cloned());
        Bench::new(&self.name, held, self.facts.tlb_counters)
    }

    /// The report, after `bench` (and with it every kernel setting) is dropped.
    pub fn finish(
        mut self,
        bench: Option<Bench>,
        quick: bool,
        runs: usize,
        configs: Vec<Config>,
        workloads: Vec<WorkloadResult>,
        extra: serde_json::Value,
    ) -> SuiteReport {
        drop(bench);
        let after = state::resting_snapshot();
        self.facts.load_after = state::loadavg();
        let restored = after == self.before;
        if !restored {
            stages::note(format!(
                "warning: kernel settings differ from before the suite: before {:?}, after {:?}",
                self.before, after
            ));
        }
        SuiteReport {
            suite: self.name,
            reproduces: self.reproduces,
            quick,
            runs,
            started: self.started,
            elapsed_s: self.t0.elapsed().as_secs_f64(),
            machine: self.facts,
            configs,
            workloads,
            missing: self.missing,
            notes: self.notes,
            kernel_before: self.before,
            kernel_after: after,
            restored,
            extra,
        }
    }
}

/// Prints (text or JSON) and writes (`--out`) a finished report.
pub fn emit(r: &SuiteReport, o: &Opts, text_extra: &str, html: String) -> Result<()> {
    if let Some(dir) = &o.out {
        output::write(dir, r, &html)?;
    }
    if o.json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print!("{}", output::render_text(r, text_extra));
    }
    Ok(())
}

/// Workloads whose `hugetune-work` kernel is missing are reported as missing
/// (the kernels come with the workloads; an older build lacks some).
pub fn drop_missing_kernels(
    ws: Vec<run::Workload>,
    work: &std::path::Path,
    missing: &mut Vec<Missing>,
) -> Vec<run::Workload> {
    let have = run::available_kernels(work);
    ws.into_iter()
        .filter(|w| match w.kernel() {
            Some(k) if !have.iter().any(|h| h == k) => {
                missing.push(Missing {
                    what: w.name.clone(),
                    reason: format!(
                        "{} has no '{k}' kernel (neither its --help nor its list of kernels names it; it comes with a newer hugetune-work)",
                        work.display()
                    ),
                });
                false
            }
            _ => true,
        })
        .collect()
}

/// The timed runs of `hugetune optimize` inside a suite: one with `--quick`,
/// else 3 to 10 until the speedup's 95 % interval is 5 % wide.
pub fn optimize_runs(quick: bool) -> hugetune_capture::ab::RunCount {
    if quick {
        hugetune_capture::ab::RunCount::fixed(1)
    } else {
        hugetune_capture::ab::RunCount {
            min: 3,
            max: 10,
            ci_width: 0.05,
            compare_output: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_by_name() {
        let items = vec!["a", "b", "c"];
        assert_eq!(
            select(items.clone(), &[], |s| s, "workload", "x").unwrap(),
            items
        );
        assert_eq!(
            select(
                items.clone(),
                &["c".into(), "a".into()],
                |s| s,
                "workload",
                "x"
            )
            .unwrap(),
            vec!["a", "c"]
        );
        let e = select(items, &["z".into()], |s| s, "workload", "x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown workload 'z' for bench x (one of: a, b, c)"
        );
    }
}
