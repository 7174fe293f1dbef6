//! Stage 1, record: the program under a reference source and the runtime
//! library in record mode, then one uninstrumented run for its native time; the
//! profile bundle written.

use super::{display_cmd, note, program_of, strings};
use crate::artifacts::Artifacts;
use anyhow::{bail, Context, Result};
use hugetune_capture::damon::DamonOptions;
use hugetune_capture::perf;
use hugetune_capture::qemu::{self, Sampling};
use hugetune_capture::record::{self as rec_mod, Source};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_capture::session::Driver;
use hugetune_format::bundle::Section;
use hugetune_format::profile::{self, ProfileMeta};
use hugetune_host::machine;
use hugetune_host::procfs::RunStats;
use std::ffi::OsString;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where references come from. `auto` is perf where the PMU samples data
/// addresses, else qemu where `qemu-x86_64` is installed, else valgrind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RefSource {
    /// The best source this machine has for the command (its --refs help says which)
    Auto,
    /// Hardware sampling (Intel PEBS, AMD IBS, ARM SPE) through perf: time-sampled
    Perf,
    /// QEMU user-mode emulation with hugetune's TCG plugin (fast; can sample)
    Qemu,
    /// Valgrind lackey (slow; every reference)
    Valgrind,
    /// DAMON region access frequencies of the process (no references)
    Damon,
}

/// `--refs auto`'s order (the issue's): perf where the PMU samples data addresses,
/// else qemu where installed, else valgrind, which every machine has.
pub fn auto_choice(perf_samples: bool, qemu_installed: bool) -> RefSource {
    if perf_samples {
        RefSource::Perf
    } else if qemu_installed {
        RefSource::Qemu
    } else {
        RefSource::Valgrind
    }
}

/// How `record` captures references.
#[derive(Debug, Clone, PartialEq)]
pub struct RefOptions {
    pub source: RefSource,
    /// SHARDS fixed-rate sampling of 4 KB pages and 2 MB regions at this rate
    /// (qemu only; docs/model.md §3.1).
    pub rate: Option<f64>,
    /// SHARDS fixed-size sampling with at most this many 4 KB pages, 2 MB
    /// regions at the same rate (qemu only).
    pub max_pages: Option<u64>,
    /// Fixed-size sampling with a reference budget too: the sample halves
    /// whenever the references it keeps pass this (qemu only; `optimize`'s
    /// automatic sampling). `max_pages` defaults to [`DEFAULT_MAX_PAGES`].
    pub max_refs: Option<u64>,
    /// With `max_refs`: the sampling rate the capture starts at (default 1,
    /// every page); `optimize` starts where the native run's resident size
    /// says the page bound will take it.
    pub start_rate: Option<f64>,
    /// The page hash's seed.
    pub seed: u64,
}

impl RefOptions {
    /// Valgrind lackey, every reference.
    pub fn valgrind() -> Self {
        RefOptions {
            source: RefSource::Valgrind,
            rate: None,
            max_pages: None,
            max_refs: None,
            start_rate: None,
            seed: 0,
        }
    }

    /// References for the model: `Auto` is QEMU's plugin where qemu-x86_64 is
    /// installed (fast, every reference), else valgrind lackey; `Perf` is the
    /// PMU's time samples (docs/model.md §3.2); DAMON is taken as asked (a
    /// frequency estimate, damon_plan.rs).
    pub fn complete(source: RefSource) -> Result<Self> {
        let source = match source {
            RefSource::Auto => {
                if qemu::find_qemu().is_some() {
                    RefSource::Qemu
                } else {
                    note(format!(
                        "qemu-x86_64 is not installed: profiling with valgrind lackey (slow); {} for the fast source",
                        qemu::INSTALL_HINT
                    ));
                    RefSource::Valgrind
                }
            }
            s @ (RefSource::Qemu | RefSource::Valgrind | RefSource::Perf | RefSource::Damon) => s,
        };
        Ok(RefOptions {
            source,
            ..Self::valgrind()
        })
    }

    /// The concrete source: `auto` decided, options checked.
    pub fn resolve(&self, art: &Artifacts) -> Result<Source> {
        anyhow::ensure!(
            self.start_rate.is_none() || self.max_refs.is_some(),
            "a starting sampling rate needs a reference budget"
        );
        let sampling = match (self.rate, self.max_pages, self.max_refs) {
            (Some(_), Some(_), _) => bail!("--rate and --max-pages exclude each other"),
            (Some(_), None, Some(_)) => {
                bail!("a reference budget needs fixed-size sampling, not --rate")
            }
            (None, _, Some(0)) => bail!("a reference budget of 0 references"),
            (None, Some(0), _) => bail!("--max-pages must be at least 1"),
            (None, s, Some(max_refs)) => Sampling::Budget {
                max_pages: s.unwrap_or(DEFAULT_MAX_PAGES),
                max_refs,
                start_rate: self.start_rate.unwrap_or(1.0),
            },
            (Some(r), None, None) => {
                if !(r > 0.0 && r <= 1.0) {
                    bail!("--rate {r} is not in (0, 1]");
                }
                Sampling::Rate(r)
            }
            (None, Some(s), None) => Sampling::MaxPages(s),
            (None, None, None) => Sampling::Complete,
        };
        let sampling_is_qemus = |what: &str| -> Result<()> {
            if sampling != Sampling::Complete {
                bail!("--rate and --max-pages need the qemu source (--refs qemu); {what}");
            }
            Ok(())
        };
        let use_qemu = match self.source {
            RefSource::Valgrind => false,
            RefSource::Qemu => true,
            RefSource::Perf => {
                sampling_is_qemus("perf samples in time, at its own period")?;
                let support = perf::sampling_support();
                let Some(plan) = support.plan else {
                    bail!(
                        "perf cannot sample data addresses here: {}",
                        support.problems.join("; ")
                    );
                };
                return Ok(Source::Perf {
                    plan,
                    opts: perf::RecordOptions::for_model(),
                });
            }
            RefSource::Damon => {
                sampling_is_qemus("DAMON monitors regions, not references")?;
                return Ok(Source::Damon {
                    opts: DamonOptions::from_env(),
                });
            }
            RefSource::Auto => {
                let support = perf::sampling_support();
                let has_qemu = qemu::find_qemu().is_some();
                let wants_pages = sampling != Sampling::Complete;
                let choice = auto_choice(support.plan.is_some() && !wants_pages, has_qemu);
                if support.plan.is_none() {
                    note(format!(
                        "no hardware sampling of data addresses ({})",
                        support
                            .problems
                            .first()
                            .map_or("perf unusable", |p| p.as_str())
                    ));
                }
                match (choice, support.plan) {
                    (RefSource::Perf, Some(plan)) => {
                        note("the PMU samples data addresses: recording with perf (time-sampled)");
                        return Ok(Source::Perf {
                            plan,
                            opts: perf::RecordOptions::for_model(),
                        });
                    }
                    (RefSource::Qemu, _) => true,
                    _ => {
                        note(format!(
                            "qemu-x86_64 is not installed: using valgrind lackey (slow); {} for the fast source",
                            qemu::INSTALL_HINT
                        ));
                        false
                    }
                }
            }
        };
        if !use_qemu {
            sampling_is_qemus("valgrind traces every reference")?;
            return Ok(Source::Valgrind);
        }
        Ok(Source::Qemu {
            qemu: qemu::require_qemu()?,
            plugin: art.qemu_plugin.clone(),
            sampling,
            seed: self.seed,
        })
    }
}

/// The page bound of fixed-size sampling when only a reference budget is given
/// (the plugin's own default).
pub const DEFAULT_MAX_PAGES: u64 = 16384;

/// Profiles `argv`: references from `refs` with the runtime library in record
/// mode, plus one uninstrumented run for its time and faults. Writes the bundle
/// to `out`.
pub fn record(
    art: &Artifacts,
    argv: &[OsString],
    out: &Path,
    refs: &RefOptions,
    tlb_override: Option<&Path>,
    show_output: bool,
    driver: Option<&Driver>,
) -> Result<ProfileMeta> {
    record_with_native(
        art,
        argv,
        out,
        refs,
        tlb_override,
        show_output,
        driver,
        None,
    )
}

/// [`record`] with the uninstrumented run already made (`native`: `optimize`
/// times the command before it chooses the sampling).
#[allow(clippy::too_many_arguments)]
pub fn record_with_native(
    art: &Artifacts,
    argv: &[OsString],
    out: &Path,
    refs: &RefOptions,
    tlb_override: Option<&Path>,
    show_output: bool,
    driver: Option<&Driver>,
    native: Option<RunStats>,
) -> Result<ProfileMeta> {
    // A launcher's program is confirmed by what ran (below).
    let guessed = if hugetune_capture::launcher::launcher_of(argv).is_some() {
        program_of(argv).ok()
    } else {
        Some(program_of(argv)?)
    };
    let mut source = refs.resolve(art)?;
    // A program the runtime library cannot enter is profiled under qemu, whose
    // plugin records its allocations from its system calls (formats.md §2.10).
    let barrier = match &guessed {
        Some(p) if hugetune_capture::launcher::launcher_of(argv).is_none() => {
            hugetune_capture::elf::preload_barrier(Path::new(&p.path))?
        }
        _ => None,
    };
    if let Some(b) = barrier {
        if refs.source == RefSource::Auto && !matches!(source, Source::Qemu { .. }) {
            source = RefOptions {
                source: RefSource::Qemu,
                ..refs.clone()
            }
            .resolve(art)
            .with_context(|| {
                format!(
                    "`{}` is {}: only qemu can profile it",
                    display_cmd(argv),
                    b.describe()
                )
            })?;
        }
        if matches!(source, Source::Qemu { .. }) {
            note(format!(
                "`{}` is {}: the runtime library cannot enter it; the qemu plugin records its mmap, munmap, mremap, mprotect and brk system calls, and its plan is applied from outside the process (THP only)",
                display_cmd(argv),
                b.describe()
            ));
        }
    }
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-record.")?;
    match &source {
        Source::Valgrind => note(format!(
            "profiling `{}` under valgrind lackey (slow: every reference is traced)",
            display_cmd(argv)
        )),
        Source::Perf { plan, .. } => note(format!(
            "profiling `{}` with perf ({:?}; time-sampled: one reference in {}, analysed under the independent reference model)",
            display_cmd(argv),
            plan.mechanism,
            perf::MODEL_PERIOD
        )),
        Source::Damon { .. } => note(format!(
            "monitoring `{}` with DAMON (region access frequencies: analyze makes a frequency estimate, not a TLB model)",
            display_cmd(argv)
        )),
        Source::Qemu { sampling, .. } => note(format!(
            "profiling `{}` under qemu with hugetune's plugin ({})",
            display_cmd(argv),
            match sampling {
                Sampling::Complete => "every reference".to_string(),
                Sampling::Rate(r) => format!("4 KB pages and 2 MB regions sampled at R = {r}"),
                Sampling::MaxPages(s) =>
                    format!("4 KB pages and 2 MB regions sampled, fixed-size: at most {s} pages"),
                Sampling::Budget { max_pages, max_refs, start_rate } => format!(
                    "4 KB pages and 2 MB regions sampled: at most {max_pages} pages and about {:.1} M references kept{}",
                    *max_refs as f64 / 1e6,
                    if *start_rate < 1.0 {
                        format!(", starting at R = {start_rate:.4}")
                    } else {
                        String::new()
                    }
                ),
            }
        )),
    }
    let bar = crate::progress::Progress::spinner("recording");
    let rec = rec_mod::record(
        &source,
        &art.runtime_lib,
        argv,
        dir.path(),
        show_output,
        driver,
        &mut |seen, _written, pages, t| {
            let rate = seen as f64 / 1e6 / t.as_secs_f64().max(1e-3);
            if pages > 0 {
                bar.set_message(format!(
                    "{:.1} M references seen ({rate:.1} M/s), {pages} pages sampled",
                    seen as f64 / 1e6
                ));
            } else {
                bar.set_message(format!(
                    "{:.1} M references ({rate:.1} M/s)",
                    seen as f64 / 1e6
                ));
            }
        },
    )?;
    drop(bar);
    let program = match (&rec.followed_program, guessed) {
        (Some(ran), g) => {
            let p = super::program_at(std::ffi::OsStr::new(ran))?;
            match g {
                Some(g) if g.path == p.path => {
                    note(format!("followed the launcher into `{}`", p.path))
                }
                g => note(format!(
                    "`{}` ran `{}`, which its arguments do not name{}: this is `{}`'s profile, but `run` and `plan` look the program up from the command's arguments and will not find it; give them `{}` directly",
                    display_cmd(argv),
                    p.path,
                    g.map_or(String::new(), |g| format!(" (they suggest `{}`)", g.path)),
                    p.path,
                    p.path
                )),
            }
            p
        }
        (None, Some(g)) => g,
        (None, None) => program_of(argv)?,
    };
    let c = &rec.capture;
    if c.source == "damon" {
        note(format!(
            "DAMON monitored the run for {:.1} s; its region snapshots are the bundle's 'damon' section",
            c.elapsed.as_secs_f64()
        ));
    } else if c.instructions > 0 {
        note(format!(
            "captured {:.2} M data references ({:.2} M instructions) in {:.1} s",
            c.refs_written as f64 / 1e6,
            c.instructions as f64 / 1e6,
            c.elapsed.as_secs_f64()
        ));
    } else {
        note(format!(
            "captured {:.2} M of {:.2} M data references ({} pages, {}) in {:.1} s",
            c.refs_written as f64 / 1e6,
            c.refs_seen as f64 / 1e6,
            c.pages,
            c.sampling,
            c.elapsed.as_secs_f64()
        ));
    }
    let native = match native {
        Some(n) => n,
        None => native_run(argv, driver)?,
    };
    let meta = ProfileMeta {
        format: profile::FORMAT.into(),
        version: profile::META_VERSION,
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command: strings(argv),
        program,
        ref_source: c.source.into(),
        ref_sampling: c.sampling.into(),
        refs: c.refs_written,
        instructions: c.instructions,
        capture_s: c.elapsed.as_secs_f64(),
        pid: rec.log.header.pid,
        native,
        machine: machine::machine(tlb_override)?,
        runtime_summary: rec.summary.clone(),
        ref_stream: None,
        // The command inherited this process's affinity (taskset, cpuset).
        affinity: Some(
            hugetune_capture::runner::allowed_cpus()
                .into_iter()
                .map(|c| c as u32)
                .collect(),
        ),
    };
    let log_bytes = std::fs::read(&rec.log_path)?;
    let refs = match &rec.refs_path {
        Some(p) => Some(std::fs::read(p)?),
        None => None,
    };
    let extra = rec
        .extra
        .iter()
        .map(|(name, data)| Section {
            name: name.clone(),
            data: data.clone(),
        })
        .collect();
    Ok(profile::write_scanned(
        out,
        &meta,
        &log_bytes,
        refs,
        rec.stream_info.clone(),
        extra,
    )?)
}

/// `: why` a server's session failed, or nothing.
pub fn session_why(r: &RunStats) -> String {
    r.session_error
        .as_deref()
        .map_or(String::new(), |e| format!(": {e}"))
}

/// The uninstrumented time of a command: the median of three runs when it is short
/// (short runs are noisy), one run otherwise.
pub fn native_run(argv: &[OsString], driver: Option<&Driver>) -> Result<RunStats> {
    let mut spec = RunSpec::new(argv.to_vec());
    spec.stdout = Output::Null;
    spec.driver = driver.cloned();
    let mut runs: Vec<RunStats> = Vec::new();
    let bar = crate::progress::Progress::spinner("native runs (timed, no tracing)");
    while runs.len() < 3 && runs.first().is_none_or(|r| r.wall_s < 2.0) {
        bar.set_message(format!("run {}", runs.len() + 1));
        let r = runner::run(&spec).context("running the profiled command natively")?;
        if r.exit_code != 0 {
            bail!(
                "the profiled command exited with status {} when run natively{}",
                r.exit_code,
                session_why(&r)
            );
        }
        runs.push(r);
    }
    runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
    Ok(runs.swap_remove(runs.len() / 2))
}
