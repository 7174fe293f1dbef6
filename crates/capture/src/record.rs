//! A recording session: the program under the runtime library (record mode, with
//! markers) and a reference source, in a scratch directory. A program the
//! library cannot enter (`elf::preload_can_enter`: static and Go binaries) is
//! recorded under qemu alone, the plugin writing its allocation record from the
//! guest's system calls (`record_outside`).

use crate::damon::{self, DamonOptions};
use crate::lackey::{self, LackeyRun};
use crate::launcher;
use crate::perf::{self, PerfPlan};
use crate::qemu::{self, QemuRun, Sampling};
use anyhow::{bail, Context, Result};
use hugetune_format::alloclog::AllocLog;
use hugetune_format::env::{record_env, RecordEnv};
use hugetune_format::profile::RefStreamInfo;
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
    /// Bundle sections the source adds (docs/formats.md §7): `perf`, `damon`,
    /// `launch` (zstd-compressed JSON).
    pub extra: Vec<(String, Vec<u8>)>,
    /// The program a launcher started (its executable, as the runtime library
    /// saw it), when the command was a launcher (docs/launchers.md).
    pub followed_program: Option<String>,
    /// What the capture's own scan of the stream found (qemu: the raw stream is
    /// read to its end and checked once, before compression), so that writing
    /// the bundle need not read it again; None where nothing scanned it.
    pub stream_info: Option<RefStreamInfo>,
}

/// What a scan of the raw stream found: its description for the bundle, and
/// the references in the marker area `(base, span)` it was given.
struct Scanned {
    info: RefStreamInfo,
    markers: (u64, u64, u64),
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

/// The logs of the process the session started, one per image, oldest first (the
/// root is the logged process that is not a child of another logged one; it may
/// have exec'd: a launcher such as valgrind's, `sh -c`, or a wrapper script).
fn root_images(dir: &Path, only_pid: Option<u32>) -> Result<Vec<(PathBuf, AllocLog)>> {
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
    let pids: Vec<u32> = parsed.iter().map(|(_, l)| l.header.pid).collect();
    let Some((pid, ppid)) = parsed
        .iter()
        .find(|(_, l)| match only_pid {
            Some(p) => l.header.pid == p,
            None => !pids.contains(&l.header.ppid),
        })
        .map(|(_, l)| (l.header.pid, l.header.ppid))
    else {
        bail!(
            "the runtime library wrote no allocation log in {} (was the program statically linked, or did it exec something setuid?)",
            dir.display()
        );
    };
    let mut images: Vec<(PathBuf, AllocLog)> = parsed
        .into_iter()
        .filter(|(_, l)| l.header.pid == pid && l.header.ppid == ppid)
        .collect();
    images.sort_by_key(|(_, l)| l.header.exec_gen);
    Ok(images)
}

/// Marker references of the stream inside each image's marker area; taken
/// from the capture's scan (`counted`: an area and its references) where every
/// image's area is that one, without reading the stream again.
fn marker_refs(
    refs: &Path,
    images: &[(PathBuf, AllocLog)],
    counted: Option<(u64, u64, u64)>,
) -> Result<Vec<u64>> {
    if let Some((base, span, n)) = counted {
        if images
            .iter()
            .all(|(_, l)| (l.header.marker_base, l.header.marker_span) == (base, span))
        {
            return Ok(vec![n; images.len()]);
        }
    }
    let mut r = hugetune_format::refstream::RefReader::new(
        std::fs::File::open(refs).with_context(|| format!("opening {}", refs.display()))?,
    )?;
    let areas: Vec<(u64, u64)> = images
        .iter()
        .map(|(_, l)| (l.header.marker_base, l.header.marker_span))
        .collect();
    let mut n = vec![0u64; images.len()];
    while let Some(x) = r.next_record()? {
        for (k, &(base, span)) in areas.iter().enumerate() {
            if span > 0 && x.addr.wrapping_sub(base) < span {
                n[k] += 1;
            }
        }
    }
    Ok(n)
}

/// The image whose references the stream holds, found by the runtime library's
/// marker loads: the one whose marker area received exactly as many marker
/// references as its log has marked calls (else the most). Every later image of
/// the process ran untraced (valgrind and qemu do not follow exec here), so a
/// traced image that is not the last one is an error: its allocations would be
/// matched with another program's references.
fn traced_image(
    dir: &Path,
    refs: Option<&Path>,
    counted: Option<(u64, u64, u64)>,
    argv: &[OsString],
    only_pid: Option<u32>,
) -> Result<(PathBuf, AllocLog)> {
    let mut images = root_images(dir, only_pid)?;
    let Some(refs) = refs else {
        // No references (DAMON): the program is the last image.
        return Ok(images
            .pop()
            .expect("root_images returns at least one image"));
    };
    let seen = marker_refs(refs, &images, counted)?;
    let expected: Vec<u64> = images
        .iter()
        .map(|(_, l)| l.records.iter().filter(|r| r.has_marker(&l.header)).count() as u64)
        .collect();
    let exact = (0..images.len())
        .rev()
        .find(|&k| seen[k] > 0 && seen[k] == expected[k]);
    let most = (0..images.len())
        .filter(|&k| seen[k] > 0)
        .max_by_key(|&k| seen[k]);
    let Some(k) = exact.or(most) else {
        bail!(
            "the reference stream holds none of the runtime library's marker loads, so its references cannot be matched with allocations (did the traced program run without the library: statically linked, or setuid?)"
        );
    };
    if k + 1 < images.len() {
        let exec_path = |i: usize| {
            images[i]
                .1
                .execs
                .iter()
                .rev()
                .find(|e| e.errno == 0)
                .map_or("another program".to_string(), |e| format!("`{}`", e.path))
        };
        let (next, last) = (exec_path(k), exec_path(images.len() - 2));
        let chain = if images.len() - k > 2 {
            format!(", which in turn became {last}")
        } else {
            String::new()
        };
        bail!(
            "`{}` replaced itself (exec) with {next}{chain} after the image the reference source traced; what ran after that ran untraced, so its allocations and these references would not match. Profile the final program directly (a wrapper script or launcher in front of it cannot be traced through)",
            argv.first().map_or(String::new(), |a| a.to_string_lossy().into_owned())
        );
    }
    Ok(images.swap_remove(k))
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
        None,
        &mut |n, _, _, t| progress(n, t),
    )
}

fn tail(messages: &[String]) -> String {
    let n = messages.len().saturating_sub(8);
    messages[n..].join("\n")
}

/// "the profiled command died of signal 11 (SIGSEGV) under qemu; its stderr
/// ended with: …": how the program ended in its own terms, and what it (not the
/// tool's internals) last said. Emulators' own notes of the signal are left out.
pub fn command_failed(
    under: &str,
    status: std::process::ExitStatus,
    messages: &[String],
) -> String {
    use std::os::unix::process::ExitStatusExt;
    let ended = match (status.code(), status.signal()) {
        (_, Some(sig)) => format!("died of signal {sig}{}", signal_name(sig)),
        (Some(c), None) => format!("exited with status {c}"),
        (None, None) => "ended abnormally".to_string(),
    };
    let own: Vec<String> = messages
        .iter()
        .filter(|l| !l.starts_with("qemu: uncaught target signal") && !l.starts_with("=="))
        .cloned()
        .collect();
    let mut m = format!("the profiled command {ended} under {under}, so no profile was made");
    if own.is_empty() {
        m.push_str(" (it printed nothing on stderr)");
    } else {
        m.push_str("; its stderr ended with:\n");
        m.push_str(&tail(&own));
    }
    if status.code().is_some_and(|c| c != 0) {
        m.push_str("\n(hugetune profiles runs that succeed: give arguments with which it exits 0)");
    }
    m
}

/// " (SIGSEGV)" for the common fatal signals.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGBUS => " (SIGBUS)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGILL => " (SIGILL)",
        libc::SIGFPE => " (SIGFPE)",
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGINT => " (SIGINT)",
        libc::SIGPIPE => " (SIGPIPE)",
        _ => "",
    }
}

/// Runs `argv` under the runtime library (record mode, markers) and `source`;
/// the stream, the log and the summary land in `dir`.
pub fn record(
    source: &Source,
    lib: &Path,
    argv: &[OsString],
    dir: &Path,
    show_output: bool,
    driver: Option<&crate::session::Driver>,
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
    let mut scanned: Option<Scanned> = None;
    if argv.is_empty() {
        bail!("no command to profile");
    }
    if driver.is_some() && !matches!(source, Source::Qemu { .. }) {
        bail!("a server with a driver is profiled under qemu only (--refs qemu)");
    }
    if let Some(launcher) = launcher::launcher_of(argv) {
        return record_followed(source, &launcher, &env, argv, dir, stdout, driver, progress);
    }
    if let Some(program) = crate::elf::resolve_program(&argv[0]) {
        if let Some(barrier) = crate::elf::preload_barrier(&program)? {
            return record_outside(
                source, &program, barrier, argv, dir, stdout, driver, progress,
            );
        }
    }
    let capture = match source {
        Source::Valgrind => {
            let run: LackeyRun =
                lackey::capture(argv, &env, &refs_path, stdout, |n, t| progress(n, n, 0, t))?;
            if run.status.code() != Some(0) {
                bail!("{}", command_failed("valgrind", run.status, &run.messages));
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
            let spec = qemu::QemuSpec {
                qemu: qemu_bin,
                plugin,
                argv,
                guest_env: &env,
                out: &raw,
                sampling: *sampling,
                seed: *seed,
                markers: true,
                scratch: dir,
                driver,
                alloc: None,
            };
            let (capture, _, scan) = qemu_capture(&spec, &refs_path, stdout, progress)?;
            scanned = Some(scan);
            capture
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
    let traced_refs = match source {
        // perf's time samples rarely hit a marker: the program is the last image.
        Source::Perf { .. } | Source::Damon { .. } => None,
        _ => Some(refs_path.as_path()),
    };
    let (log_path, log) = traced_image(
        dir,
        traced_refs,
        scanned.as_ref().map(|s| s.markers),
        argv,
        None,
    )
    .context("matching the allocation log to the references")?;
    if traced_refs.is_some() {
        let exe = argv[0].to_string_lossy();
        let images = root_images(dir, Some(log.header.pid))?;
        let largest = images
            .iter()
            .map(|(_, l)| largest_block(l))
            .max()
            .unwrap_or(0);
        unknown_wrapper(dir, &exe, largest, &[log.header.pid])?;
    }
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
    let summary = image_summary(dir, &log);
    Ok(Recorded {
        refs_path: has_refs.then_some(refs_path),
        log_path,
        log,
        capture,
        summary,
        extra,
        followed_program: None,
        stream_info: scanned.map(|s| s.info),
    })
}

/// A program the runtime library cannot enter (`elf::preload_barrier`: static
/// or Go): it runs under qemu without the library, and the plugin writes the
/// allocation record itself from the guest's mmap, munmap, mremap, mprotect and
/// brk system calls (`alloc=`, formats.md §2.10), with its own markers in the
/// reference stream. Only the qemu source can do that.
#[allow(clippy::too_many_arguments)]
fn record_outside(
    source: &Source,
    program: &Path,
    barrier: crate::elf::PreloadBarrier,
    argv: &[OsString],
    dir: &Path,
    stdout: Stdio,
    driver: Option<&crate::session::Driver>,
    progress: ProgressFn<'_>,
) -> Result<Recorded> {
    let Source::Qemu {
        qemu: qemu_bin,
        plugin,
        sampling,
        seed,
    } = source
    else {
        bail!(
            "`{}` is {}: the runtime library cannot enter it, so hugetune records its allocations from its system calls under qemu; profile it with --refs qemu ({})",
            program.display(),
            barrier.describe(),
            qemu::INSTALL_HINT
        );
    };
    let raw = dir.join("refs.raw");
    let log_path = dir.join("alloc.syscalls.log");
    let refs_path = dir.join("refs.zst");
    let spec = qemu::QemuSpec {
        qemu: qemu_bin,
        plugin,
        argv,
        guest_env: &[],
        out: &raw,
        sampling: *sampling,
        seed: *seed,
        markers: false,
        scratch: dir,
        driver,
        alloc: Some(&log_path),
    };
    let (capture, messages, scan) = qemu_capture(&spec, &refs_path, stdout, progress)?;
    let log = AllocLog::read(&log_path).with_context(|| {
        format!(
            "the plugin's allocation record of `{}`; qemu said:\n{}",
            program.display(),
            tail(&messages)
        )
    })?;
    if !log.header.syscalls || log.header.marker_base != qemu::ALLOC_MARKER_ADDR {
        bail!(
            "{}: not the plugin's system-call record (markers at {:#x})",
            log_path.display(),
            log.header.marker_base
        );
    }
    if !log.modules.iter().any(|m| Path::new(&m.path) == program) {
        eprintln!(
            "hugetune: the allocation record does not describe `{}` itself (its program headers could not be read): its static data counts as other memory",
            program.display()
        );
    }
    Ok(Recorded {
        refs_path: Some(refs_path),
        log_path,
        log,
        capture,
        summary: None,
        extra: Vec::new(),
        followed_program: None,
        stream_info: Some(scan.info),
    })
}

/// One run under qemu with the plugin (`spec.out` its raw stream): the stream
/// compressed into `refs_path` and what the capture saw, with qemu's last
/// messages for errors found after it; a failed run is an error naming them.
fn qemu_capture(
    spec: &qemu::QemuSpec,
    refs_path: &Path,
    stdout: Stdio,
    progress: ProgressFn<'_>,
) -> Result<(Capture, Vec<String>, Scanned)> {
    let run: QemuRun = qemu::capture(spec, stdout, |p, t| {
        progress(p.refs_seen, p.refs_written, p.pages, t)
    })?;
    if run.status.code() != Some(0) {
        bail!("{}", command_failed("qemu", run.status, &run.messages));
    }
    qemu::compress(spec.out, refs_path)?;
    let _ = std::fs::remove_file(spec.out);
    let capture = Capture {
        source: "qemu",
        sampling: spec.sampling.name(),
        refs_written: run.totals.refs_written,
        refs_seen: run.totals.refs_seen,
        instructions: 0,
        pages: run.pages,
        elapsed: run.elapsed,
    };
    let (base, span) = run.marker_area.unwrap_or((0, 0));
    let scanned = Scanned {
        info: RefStreamInfo {
            version: run.version,
            header: run.header,
            totals: run.totals,
        },
        markers: (base, span, run.marker_refs),
    };
    Ok((capture, run.messages, scanned))
}

/// An image's runtime summary: `%p` is `<pid>.x<g>` for an exec'd image
/// (formats.md §1).
fn image_summary(dir: &Path, log: &AllocLog) -> Option<serde_json::Value> {
    let pid_part = match log.header.exec_gen {
        0 => log.header.pid.to_string(),
        g => format!("{}.x{g}", log.header.pid),
    };
    std::fs::read_to_string(dir.join(format!("summary.{pid_part}.json")))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// The largest block a log's malloc family handed out.
fn largest_block(log: &AllocLog) -> u64 {
    log.records
        .iter()
        .filter(|r| r.kind.is_malloc_alloc())
        .map(|r| r.size)
        .max()
        .unwrap_or(0)
}

/// One followed process of the program: its stream and what it saw.
#[derive(serde::Serialize)]
struct Rank {
    pid: u32,
    path: String,
    argv: Vec<String>,
    refs_seen: u64,
    refs_written: u64,
    pages: u64,
    largest_block: u64,
    analysed: bool,
    /// Seconds since the launcher started during which its stream grew, at
    /// the progress files' resolution (a quarter second): which ranks ran at
    /// once (`launcher::alongside`).
    #[serde(skip_serializing_if = "Option::is_none")]
    active_s: Option<[f64; 2]>,
}

/// When a rank's stream grew: the first and last poll at which its progress
/// file showed more references than before.
#[derive(Default)]
struct Active {
    seen: u64,
    first: Option<f64>,
    last: Option<f64>,
}

impl Active {
    fn saw(&mut self, refs_seen: u64, t: f64) {
        if refs_seen > self.seen {
            self.seen = refs_seen;
            self.first.get_or_insert(t);
            self.last = Some(t);
        }
    }

    fn span(&self) -> Option<[f64; 2]> {
        Some([self.first?, self.last?])
    }
}

/// A launcher's command (docs/launchers.md): the launcher runs natively with
/// the runtime library in follow mode, which re-executes every real program it
/// starts (each MPI rank) under qemu with the plugin writing
/// `refs.<pid>.raw`, and the library in record mode writing `alloc.<pid>.log`.
/// The bundle holds the rank with the most references (ranks of one program
/// run the same code: the plan, per category and site, serves them all) and a
/// `launch` section with every rank's figures.
#[allow(clippy::too_many_arguments)]
fn record_followed(
    source: &Source,
    launcher: &Path,
    env: &[(String, String)],
    argv: &[OsString],
    dir: &Path,
    stdout: Stdio,
    driver: Option<&crate::session::Driver>,
    progress: ProgressFn<'_>,
) -> Result<Recorded> {
    let what = argv
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let Source::Qemu {
        qemu: qemu_bin,
        plugin,
        sampling,
        seed,
    } = source
    else {
        bail!(
            "`{}` is a launcher: hugetune follows it into the program it starts under qemu only (--refs qemu; docs/launchers.md)",
            launcher.display()
        );
    };
    let spec = qemu::QemuSpec {
        qemu: qemu_bin,
        plugin,
        argv,
        guest_env: env,
        out: &dir.join("refs.%p.raw"),
        sampling: *sampling,
        seed: *seed,
        markers: true,
        scratch: dir,
        driver,
        alloc: None,
    };
    let plugin_opt = qemu::plugin_option(&spec, spec.out, &dir.join("qemu-progress.%p"))?;
    let follow_log = dir.join("follow.log");
    let mut role_env = env.to_vec();
    role_env.push((
        "HUGETUNE_MARKER_ADDR".into(),
        format!("{:#x}", qemu::MARKER_ADDR),
    ));
    let env = hugetune_format::env::follow_env(
        role_env,
        "record",
        &follow_log,
        &[
            ("HUGETUNE_FOLLOW_QEMU", qemu_bin.display().to_string()),
            (
                "HUGETUNE_FOLLOW_PLUGIN",
                plugin_opt.to_string_lossy().into_owned(),
            ),
        ],
    );
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(stdout);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("HUGETUNE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    // Progress: the ranks' progress files summed; when each one's grew.
    let started = std::time::Instant::now();
    let active: std::cell::RefCell<std::collections::HashMap<u32, Active>> = Default::default();
    let read = || {
        let mut sum = qemu::Progress::default();
        let mut any = false;
        let t = started.elapsed().as_secs_f64();
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_string_lossy()
                .strip_prefix("qemu-progress.")
                .map(str::to_string)
            else {
                continue;
            };
            if let Some(p) = qemu::read_progress(&e.path()) {
                sum.refs_seen += p.refs_seen;
                sum.refs_written += p.refs_written;
                sum.pages += p.pages;
                any = true;
                if let Ok(pid) = pid.parse() {
                    active
                        .borrow_mut()
                        .entry(pid)
                        .or_default()
                        .saw(p.refs_seen, t);
                }
            }
        }
        any.then_some(sum)
    };
    let (status, elapsed, messages, _) = qemu::supervise(
        &mut cmd,
        &launcher.display().to_string(),
        driver,
        read,
        &mut |p, t| progress(p.refs_seen, p.refs_written, p.pages, t),
    )?;
    // What grew after the last poll ended with the launcher.
    let _ = read();
    let active = active.into_inner();
    let events = launcher::read_follow_log(&follow_log)?;
    let followed = launcher::check_followed(&events, &what)?;
    if !status.success() {
        bail!(
            "{}",
            command_failed("its launcher (the program under qemu)", status, &messages)
        );
    }
    // Every rank's stream and log.
    let mut ranks = Vec::new();
    for p in &followed.programs {
        let raw = dir.join(format!("refs.{}.raw", p.pid));
        let path = p.path.clone().unwrap_or_default();
        if !raw.exists() {
            bail!(
                "the program `{path}` (pid {}) left no reference stream: qemu did not run it to its end",
                p.pid
            );
        }
        let scan = qemu::scan_stream(&raw, Some((qemu::MARKER_ADDR, qemu::MARKER_SPAN)))
            .with_context(|| format!("the reference stream of `{path}` (pid {})", p.pid))?;
        let log = root_images(dir, Some(p.pid)).with_context(|| {
            format!(
                "`{path}` (pid {}) ran under qemu without the runtime library (statically linked?)",
                p.pid
            )
        })?;
        ranks.push(Rank {
            pid: p.pid,
            path,
            argv: p.argv.clone(),
            refs_seen: scan.totals.refs_seen,
            refs_written: scan.totals.refs_written,
            pages: scan.pages,
            largest_block: log.iter().map(|(_, l)| largest_block(l)).max().unwrap_or(0),
            analysed: false,
            active_s: active.get(&p.pid).and_then(Active::span),
        });
    }
    // The program: the executable with the most references over its ranks;
    // its busiest rank is analysed.
    let mut by_path: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in &ranks {
        *by_path.entry(r.path.as_str()).or_default() += r.refs_seen;
    }
    let program = by_path
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(p, _)| p.to_string())
        .context("no followed program")?;
    let k = (0..ranks.len())
        .filter(|&i| ranks[i].path == program)
        .max_by_key(|&i| (ranks[i].refs_written, std::cmp::Reverse(ranks[i].pid)))
        .context("no followed program")?;
    ranks[k].analysed = true;
    let pid = ranks[k].pid;
    let traced: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    unknown_wrapper(dir, &program, ranks[k].largest_block, &traced)?;
    let raw = dir.join(format!("refs.{pid}.raw"));
    let refs_path = dir.join("refs.zst");
    qemu::compress(&raw, &refs_path)?;
    let (log_path, log) = traced_image(dir, Some(&refs_path), None, argv, Some(pid))
        .context("matching the allocation log to the references")?;
    if log.header.marker_base != qemu::MARKER_ADDR {
        bail!(
            "the runtime library mapped its marker area at {:#x}, not at {:#x} where the qemu plugin keeps every reference (see the summary's errors)",
            log.header.marker_base,
            qemu::MARKER_ADDR
        );
    }
    let summary = image_summary(dir, &log);
    let r = &ranks[k];
    let capture = Capture {
        source: "qemu",
        sampling: sampling.name(),
        refs_written: r.refs_written,
        refs_seen: r.refs_seen,
        instructions: 0,
        pages: r.pages,
        elapsed,
    };
    let launch = serde_json::json!({
        "command": argv.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>(),
        "launchers": followed.launchers.iter().filter_map(|e| e.path.clone()).collect::<Vec<_>>(),
        "execs": followed.execs,
        "program": program,
        "ranks": ranks,
    });
    for r in &ranks {
        let _ = std::fs::remove_file(dir.join(format!("refs.{}.raw", r.pid)));
    }
    Ok(Recorded {
        refs_path: Some(refs_path),
        log_path,
        log,
        capture,
        summary,
        extra: vec![(
            "launch".to_string(),
            zstd::encode_all(&serde_json::to_vec(&launch)?[..], 3)?,
        )],
        followed_program: Some(program),
        stream_info: None,
    })
}

/// An unknown wrapper: what ran under the reference source (`program`, pids
/// `traced`) handed out no large block (none of heap-large's 128 KiB, or under
/// a quarter of the other's), but another program it started, which the
/// source did not follow (qemu and valgrind do not follow exec), did: the
/// profile would be the wrapper's. An error naming the way to follow it.
fn unknown_wrapper(dir: &Path, program: &str, largest: u64, traced: &[u32]) -> Result<()> {
    const LARGE: u64 = 128 << 10; // glibc's mmap threshold: heap-large
    let bar = LARGE.max(largest.saturating_mul(4));
    let Some((_, l)) = all_logs(dir)
        .into_iter()
        .filter(|(_, l)| {
            !traced.contains(&l.header.pid) && l.header.exec_gen > 0 && largest_block(l) >= bar
        })
        .max_by_key(|(_, l)| largest_block(l))
    else {
        return Ok(());
    };
    let name = Path::new(program)
        .file_name()
        .map_or(program.to_string(), |n| n.to_string_lossy().into_owned());
    bail!(
        "`{program}` ran under the reference source and its largest block was {largest} bytes, while a program it started (pid {}), which the source did not follow, allocated {} bytes: `{name}` looks like a launcher hugetune does not know, and this profile would be the launcher's. Name it in HUGETUNE_LAUNCHERS (colon-separated executable names, e.g. HUGETUNE_LAUNCHERS={name}) to follow it into the program (docs/launchers.md)",
        l.header.pid,
        largest_block(&l),
    )
}

/// Every readable allocation log in `dir`.
fn all_logs(dir: &Path) -> Vec<(PathBuf, AllocLog)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("alloc.") && n.ends_with(".log") {
            if let Ok(l) = AllocLog::read(&e.path()) {
                out.push((e.path(), l));
            }
        }
    }
    out
}
