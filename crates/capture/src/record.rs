//! A recording session: the program under the runtime library (record mode, with
//! markers) and a reference source, in a scratch directory.

use crate::alloclog::AllocLog;
use crate::damon::{self, DamonOptions};
use crate::lackey::{self, LackeyRun};
use crate::launch::{record_env, RecordEnv};
use crate::perf::{self, PerfPlan};
use crate::qemu::{self, QemuRun, Sampling};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub struct Recorded {
    /// The reference stream (zstd); `None` for DAMON, which gives no references.
    pub refs_path: Option<PathBuf>,
    pub log_path: PathBuf,
    pub log: AllocLog,
    pub capture: Capture,
    pub summary: Option<serde_json::Value>,
    /// Bundle sections the source adds (docs/formats.md §7): `perf`, `damon`
    /// (zstd-compressed JSON).
    pub extra: Vec<(String, Vec<u8>)>,
}

/// What the reference source reported.
pub struct Capture {
    /// The stream's `source` (formats.md §6): `valgrind-lackey`, `qemu`.
    pub source: &'static str,
    /// The stream's `sampling`: `complete`, `spatial-rate`, `spatial-size`.
    pub sampling: &'static str,
    /// REF records in the stream.
    pub refs_written: u64,
    /// Every reference the source saw, sampled or not.
    pub refs_seen: u64,
    /// Guest instructions (lackey only; 0 where the source does not count them).
    pub instructions: u64,
    /// Distinct sampled pages (qemu; 0 for lackey, which does not count them).
    pub pages: u64,
    pub elapsed: Duration,
}

/// Progress of a capture: references seen, references written, pages sampled
/// (0 where unknown), elapsed time.
pub type ProgressFn<'a> = &'a mut dyn FnMut(u64, u64, u64, Duration);

/// Which reference source a recording uses, and how.
#[derive(Debug, Clone)]
pub enum Source {
    Valgrind,
    Qemu {
        qemu: PathBuf,
        plugin: PathBuf,
        sampling: Sampling,
        seed: u64,
    },
    /// Hardware sampling of data addresses (PEBS, IBS, SPE) through perf.
    Perf {
        plan: PerfPlan,
        opts: perf::RecordOptions,
    },
    /// DAMON region access frequencies of the process (no references).
    Damon {
        opts: DamonOptions,
    },
}

/// The allocation log of the process the session started (the one whose parent is
/// the session's own child, valgrind, or the first log when only one exists).
fn main_log(dir: &Path) -> Result<(PathBuf, AllocLog)> {
    let mut logs = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("alloc.") && n.ends_with(".log") {
            logs.push(e.path());
        }
    }
    logs.sort();
    let mut parsed = Vec::new();
    for p in logs {
        match AllocLog::read(&p) {
            Ok(l) => parsed.push((p, l)),
            Err(e) => eprintln!("hugetune: ignoring unreadable log: {e:#}"),
        }
    }
    // The profiled process is the one that is not a child of another logged one;
    // if it exec'd (a launcher such as valgrind's, or `sh -c`, becoming the program)
    // each image wrote its own log: the program is the last image.
    let pids: Vec<u32> = parsed.iter().map(|(_, l)| l.header.pid).collect();
    let root = parsed
        .iter()
        .find(|(_, l)| !pids.contains(&l.header.ppid))
        .map(|(_, l)| (l.header.pid, l.header.ppid));
    let idx = root.and_then(|(pid, ppid)| {
        parsed
            .iter()
            .enumerate()
            .filter(|(_, (_, l))| l.header.pid == pid && l.header.ppid == ppid)
            .max_by_key(|(_, (_, l))| l.header.exec_gen)
            .map(|(i, _)| i)
    });
    match idx {
        Some(i) => Ok(parsed.swap_remove(i)),
        None => bail!(
            "the runtime library wrote no allocation log in {} (was the program statically linked, or did it exec something setuid?)",
            dir.display()
        ),
    }
}

pub fn record_with_lackey(
    lib: &Path,
    argv: &[OsString],
    dir: &Path,
    show_output: bool,
    mut progress: impl FnMut(u64, Duration),
) -> Result<Recorded> {
    record(
        &Source::Valgrind,
        lib,
        argv,
        dir,
        show_output,
        &mut |n, _, _, t| progress(n, t),
    )
}

fn tail(messages: &[String]) -> String {
    let n = messages.len().saturating_sub(8);
    messages[n..].join("\n")
}

/// Runs `argv` under the runtime library (record mode, markers) and `source`;
/// the stream, the log and the summary land in `dir`.
pub fn record(
    source: &Source,
    lib: &Path,
    argv: &[OsString],
    dir: &Path,
    show_output: bool,
    progress: ProgressFn<'_>,
) -> Result<Recorded> {
    let log_pattern = dir.join("alloc.%p.log");
    let summary_pattern = dir.join("summary.%p.json");
    let env = record_env(&RecordEnv {
        lib,
        log: Some(&log_pattern),
        summary: Some(&summary_pattern),
        markers: true,
    });
    let refs_path = dir.join("refs.zst");
    let stdout = if show_output {
        Stdio::inherit()
    } else {
        Stdio::null()
    };
    let mut extra = Vec::new();
    let mut has_refs = true;
    if argv.is_empty() {
        bail!("no command to profile");
    }
    let capture = match source {
        Source::Valgrind => {
            let run: LackeyRun =
                lackey::capture(argv, &env, &refs_path, stdout, |n, t| progress(n, n, 0, t))?;
            if run.status.code() != Some(0) {
                bail!(
                    "the profiled command failed under valgrind ({}); valgrind said:\n{}",
                    run.status,
                    tail(&run.messages)
                );
            }
            Capture {
                source: "valgrind-lackey",
                sampling: "complete",
                refs_written: run.refs,
                refs_seen: run.refs,
                instructions: run.instructions,
                pages: 0,
                elapsed: run.elapsed,
            }
        }
        Source::Qemu {
            qemu: qemu_bin,
            plugin,
            sampling,
            seed,
        } => {
            let raw = dir.join("refs.raw");
            let run: QemuRun = qemu::capture(
                &qemu::QemuSpec {
                    qemu: qemu_bin,
                    plugin,
                    argv,
                    guest_env: &env,
                    out: &raw,
                    sampling: *sampling,
                    seed: *seed,
                    markers: true,
                    scratch: dir,
                },
                stdout,
                |p, t| progress(p.refs_seen, p.refs_written, p.pages, t),
            )?;
            if run.status.code() != Some(0) {
                bail!(
                    "the profiled command failed under qemu ({}); qemu said:\n{}",
                    run.status,
                    tail(&run.messages)
                );
            }
            qemu::compress(&raw, &refs_path)?;
            let _ = std::fs::remove_file(&raw);
            Capture {
                source: "qemu",
                sampling: sampling.name(),
                refs_written: run.totals.refs_written,
                refs_seen: run.totals.refs_seen,
                instructions: 0,
                pages: run.pages,
                elapsed: run.elapsed,
            }
        }
        Source::Perf { plan, opts } => {
            let run = perf::record(plan, argv, &env, stdout, opts)?;
            if run.status.code() != Some(0) {
                bail!(
                    "the profiled command failed under `{}` ({}); perf said:\n{}",
                    run.record_command,
                    run.status,
                    tail(&run.messages)
                );
            }
            if run.samples.samples.is_empty() {
                bail!(
                    "perf recorded no data addresses ({} samples dropped); the program may be too short for sampling",
                    run.samples.dropped
                );
            }
            let file = std::fs::File::create(&refs_path)
                .with_context(|| format!("creating {}", refs_path.display()))?;
            let command = Some(
                argv.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            );
            perf::write_stream(&run.samples, command, file)?;
            let summary = serde_json::json!({
                "record_command": run.record_command,
                "sampling": format!("{:?}", run.samples.sampling),
                "samples": run.samples.samples.len(),
                "dropped": run.samples.dropped,
                "by_event": run.samples.by_event,
                "data_page_sizes": perf::page_size_counts(&run.samples),
            });
            extra.push((
                "perf".to_string(),
                zstd::encode_all(&serde_json::to_vec(&summary)?[..], 3)?,
            ));
            progress(
                run.samples.total(),
                run.samples.samples.len() as u64,
                0,
                run.elapsed,
            );
            Capture {
                source: "perf",
                sampling: "time",
                refs_written: run.samples.samples.len() as u64,
                refs_seen: run.samples.total(),
                instructions: 0,
                pages: 0,
                elapsed: run.elapsed,
            }
        }
        Source::Damon { opts } => {
            damon::available(&opts.root)
                .map_err(|why| anyhow::anyhow!("DAMON cannot monitor the program here: {why}"))?;
            let mut cmd = std::process::Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(stdout);
            let t0 = std::time::Instant::now();
            let (cap, status) = damon::record_command(cmd, opts)?;
            if status.code() != Some(0) {
                bail!("the profiled command failed under DAMON monitoring ({status})");
            }
            let snapshots = cap.snapshots.len() as u64;
            extra.push((
                "damon".to_string(),
                zstd::encode_all(&serde_json::to_vec(&cap)?[..], 3)?,
            ));
            progress(0, 0, snapshots, t0.elapsed());
            has_refs = false;
            Capture {
                source: "damon",
                sampling: "regions",
                refs_written: 0,
                refs_seen: 0,
                instructions: 0,
                pages: 0,
                elapsed: t0.elapsed(),
            }
        }
    };
    let (log_path, log) = main_log(dir).context("reading the allocation log")?;
    if log.header.marker_span == 0 {
        bail!("the allocation log has no markers: references cannot be aligned with allocations");
    }
    if matches!(source, Source::Qemu { .. }) && log.header.marker_base != qemu::MARKER_ADDR {
        bail!(
            "the runtime library mapped its marker area at {:#x}, not at {:#x} where the qemu plugin keeps every reference (see the summary's errors)",
            log.header.marker_base,
            qemu::MARKER_ADDR
        );
    }
    // The image's summary: `%p` is `<pid>.x<g>` for an exec'd image (formats.md §1).
    let pid_part = match log.header.exec_gen {
        0 => log.header.pid.to_string(),
        g => format!("{}.x{g}", log.header.pid),
    };
    let summary = std::fs::read_to_string(dir.join(format!("summary.{pid_part}.json")))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Ok(Recorded {
        refs_path: has_refs.then_some(refs_path),
        log_path,
        log,
        capture,
        summary,
        extra,
    })
}
