//! DAMON (the kernel's Data Access MONitor) region access-frequency snapshots of
//! one process, through the sysfs interface (`/sys/kernel/mm/damon/admin`, Linux
//! `Documentation/admin-guide/mm/damon/usage.rst`).
//!
//! A session takes the kernel-state lock, sets up one kdamond with one `vaddr`
//! context, one target (the pid) and one `stat` scheme that matches every region,
//! turns it on, and then every few aggregation intervals asks the kernel to fill
//! `schemes/0/tried_regions` (`update_schemes_tried_regions`) and reads the regions
//! back: `{start, end, nr_accesses, age}` each. The kdamond is turned off and
//! `nr_kdamonds` put back when the session is dropped, on error and on
//! SIGINT/SIGTERM/SIGHUP (`kernel_state::on_restore`). A kdamond that someone else
//! runs is never taken over: the session refuses to start instead.
//!
//! What DAMON gives is a per-region access frequency (how many of the samples in
//! one aggregation interval found the region accessed), not a reference stream:
//! good for choosing regions, useless for reuse distance. See docs/damon.md.

use anyhow::{anyhow, bail, Context, Result};
use hugetune_host::kernel_state::{
    lock_kernel_state, on_restore, track_child, KernelStateLock, Restore,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// Where the kernel puts DAMON's sysfs interface.
pub const DAMON_ADMIN: &str = "/sys/kernel/mm/damon/admin";
/// `format` of a serialized [`DamonCapture`].
pub const FORMAT: &str = "hugetune-damon/1";

/// DAMON's monitoring attributes (`contexts/0/monitoring_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamonAttrs {
    /// Sampling interval: how often one page per region is checked (µs).
    pub sample_us: u64,
    /// Aggregation interval: samples are counted into `nr_accesses` over this (µs).
    pub aggr_us: u64,
    /// Operations update interval: how often the vaddr regions are re-read from the
    /// process's mappings (µs).
    pub update_us: u64,
    pub min_nr_regions: u64,
    pub max_nr_regions: u64,
}

impl Default for DamonAttrs {
    fn default() -> Self {
        DamonAttrs {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_nr_regions: 10,
            max_nr_regions: 1_000,
        }
    }
}

impl DamonAttrs {
    /// The kernel's own checks (`damon_set_attrs`), made before anything is written.
    pub fn validate(&self) -> Result<()> {
        if self.sample_us == 0 {
            bail!("DAMON sample interval must be > 0");
        }
        if self.aggr_us < self.sample_us {
            bail!(
                "DAMON aggregation interval ({} µs) is shorter than the sample interval ({} µs)",
                self.aggr_us,
                self.sample_us
            );
        }
        if self.min_nr_regions < 3 {
            bail!(
                "DAMON needs at least 3 regions (min_nr_regions = {})",
                self.min_nr_regions
            );
        }
        if self.max_nr_regions < self.min_nr_regions {
            bail!(
                "DAMON max_nr_regions ({}) < min_nr_regions ({})",
                self.max_nr_regions,
                self.min_nr_regions
            );
        }
        Ok(())
    }

    /// The largest `nr_accesses` a region can show: samples per aggregation.
    pub fn max_nr_accesses(&self) -> u64 {
        self.aggr_us / self.sample_us.max(1)
    }
}

#[derive(Debug, Clone)]
pub struct DamonOptions {
    /// DAMON's sysfs admin directory ([`DAMON_ADMIN`]; tests use a fake tree).
    pub root: PathBuf,
    pub attrs: DamonAttrs,
    /// A snapshot every this many aggregation intervals.
    pub snapshot_every_aggrs: u32,
    /// Stop monitoring after this long even if the process still runs.
    pub max_duration: Option<Duration>,
    /// Keep the process's /proc/PID/maps with the snapshots (when it changed):
    /// what categorizes the regions of a process without an allocation log.
    pub capture_maps: bool,
}

impl Default for DamonOptions {
    fn default() -> Self {
        DamonOptions {
            root: PathBuf::from(DAMON_ADMIN),
            attrs: DamonAttrs::default(),
            snapshot_every_aggrs: 5,
            max_duration: None,
            capture_maps: false,
        }
    }
}

/// Environment variable naming another DAMON admin directory than
/// [`DAMON_ADMIN`] (a fake tree, for tests of the whole command line).
pub const ROOT_ENV: &str = "HUGETUNE_DAMON_ROOT";

impl DamonOptions {
    /// The defaults, at the admin directory `$HUGETUNE_DAMON_ROOT` names if set.
    pub fn from_env() -> Self {
        DamonOptions {
            root: std::env::var_os(ROOT_ENV)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from(DAMON_ADMIN), PathBuf::from),
            ..Default::default()
        }
    }

    pub fn snapshot_every(&self) -> Duration {
        Duration::from_micros(self.attrs.aggr_us * u64::from(self.snapshot_every_aggrs.max(1)))
    }
}

/// One region as the kernel reports it under `tried_regions/N/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamonRegion {
    /// Virtual start address (inclusive).
    pub start: u64,
    /// Virtual end address (exclusive).
    pub end: u64,
    /// Samples of the last aggregation interval that found the region accessed
    /// (0 ..= `max_nr_accesses`).
    pub nr_accesses: u64,
    /// Aggregation intervals the region has kept about this access frequency.
    pub age: u64,
}

impl DamonRegion {
    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    pub nr_regions: u64,
    /// Bytes covered by the regions (what DAMON monitored).
    pub bytes: u64,
    /// Bytes of the regions with `nr_accesses > 0`.
    pub bytes_accessed: u64,
    /// `tried_regions/total_bytes` when the kernel has it (6.6+).
    pub kernel_total_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamonSnapshot {
    /// Milliseconds since monitoring was turned on, when the regions were read.
    pub t_ms: u64,
    pub summary: SnapshotSummary,
    /// Sorted by start address.
    pub regions: Vec<DamonRegion>,
    /// The process's /proc/PID/maps read right after the regions, where
    /// `capture_maps` asked for it and it differs from the previous snapshot's
    /// (absent: unchanged, or not asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maps: Option<String>,
}

impl DamonSnapshot {
    pub fn new(t_ms: u64, mut regions: Vec<DamonRegion>, kernel_total_bytes: Option<u64>) -> Self {
        regions.sort_by_key(|r| (r.start, r.end));
        let summary = SnapshotSummary {
            nr_regions: regions.len() as u64,
            bytes: regions.iter().map(DamonRegion::bytes).sum(),
            bytes_accessed: regions
                .iter()
                .filter(|r| r.nr_accesses > 0)
                .map(DamonRegion::bytes)
                .sum(),
            kernel_total_bytes,
        };
        DamonSnapshot {
            t_ms,
            summary,
            regions,
            maps: None,
        }
    }
}

/// What one monitored run produced; serialized as JSON (docs/damon.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamonCapture {
    /// [`FORMAT`].
    pub format: String,
    pub pid: u32,
    pub attrs: DamonAttrs,
    /// `aggr_us / sample_us`: the scale of `nr_accesses`.
    pub max_nr_accesses: u64,
    /// Period between snapshots.
    pub snapshot_every_ms: u64,
    /// From turning DAMON on to turning it off.
    pub duration_ms: u64,
    pub snapshots: Vec<DamonSnapshot>,
}

impl DamonCapture {
    /// Reads a serialized capture, rejecting a `format` other than [`FORMAT`].
    pub fn from_json(text: &str) -> Result<DamonCapture> {
        #[derive(Deserialize)]
        struct Head {
            format: String,
        }
        let head: Head = serde_json::from_str(text).context("a DAMON capture: no format")?;
        if head.format != FORMAT {
            bail!(
                "a DAMON capture of format {:?}: this hugetune reads {FORMAT:?}",
                head.format
            );
        }
        serde_json::from_str(text).context("a DAMON capture")
    }
}

// ---------------------------------------------------------------- sysfs helpers

fn read_trim(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim().to_string())
}

fn read_num(path: &Path) -> Result<u64> {
    let text = read_trim(path)?;
    text.parse::<u64>()
        .map_err(|_| anyhow!("{}: expected a number, read {text:?}", path.display()))
}

fn write(path: &Path, value: impl std::fmt::Display) -> Result<()> {
    let value = value.to_string();
    std::fs::write(path, format!("{value}\n"))
        .with_context(|| format!("writing {value} to {}", path.display()))
}

fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access only reads the NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

fn has_vaddr(avail_operations: &str) -> bool {
    avail_operations.split_whitespace().any(|o| o == "vaddr")
}

fn describe_kdamond(kd: &Path) -> String {
    let get = |rel: &str| read_trim(&kd.join(rel)).unwrap_or_else(|_| "?".into());
    format!(
        "{} is on (kdamond pid {}, operations {}, target pid {})",
        kd.display(),
        get("pid"),
        get("contexts/0/operations"),
        get("contexts/0/targets/0/pid_target")
    )
}

/// Whether a session can start under `root` (normally [`DAMON_ADMIN`]): `Err`
/// says why not (no DAMON sysfs, no permission, a kdamond that someone else runs,
/// a kernel without vaddr monitoring). Reads only.
pub fn available(root: &Path) -> Result<(), String> {
    let kds = root.join("kdamonds");
    if !kds.is_dir() {
        return Err(format!(
            "no DAMON sysfs interface at {} (kernel without CONFIG_DAMON_SYSFS?)",
            kds.display()
        ));
    }
    let nr_path = kds.join("nr_kdamonds");
    let n = read_num(&nr_path).map_err(|e| format!("{e:#}"))?;
    if !writable(&nr_path) {
        return Err(format!(
            "cannot write {}: DAMON needs root",
            nr_path.display()
        ));
    }
    let mut reasons = Vec::new();
    for i in 0..n {
        let kd = kds.join(i.to_string());
        let state_path = kd.join("state");
        match read_trim(&state_path) {
            Ok(s) if s == "off" => {}
            Ok(s) if s == "on" => reasons.push(describe_kdamond(&kd)),
            Ok(s) => reasons.push(format!(
                "{} reads {s:?} (neither on nor off)",
                state_path.display()
            )),
            Err(e) => reasons.push(format!("{e:#}")),
        }
    }
    if !reasons.is_empty() {
        reasons.push(format!(
            "DAMON is in use by someone else (nr_kdamonds = {n}); hugetune does not take over a running kdamond"
        ));
    }
    // avail_operations exists only inside a context directory: check it where one
    // is there (a session checks again after creating its own).
    for i in 0..n {
        let ops_path = kds.join(format!("{i}/contexts/0/avail_operations"));
        if let Ok(ops) = read_trim(&ops_path) {
            if !has_vaddr(&ops) {
                reasons.push(no_vaddr(&ops_path, &ops));
            }
            break;
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons.join("; "))
    }
}

fn no_vaddr(ops_path: &Path, ops: &str) -> String {
    format!(
        "this kernel's DAMON cannot monitor a process: {} lists {ops:?}, no vaddr (kernel built without CONFIG_DAMON_VADDR)",
        ops_path.display()
    )
}

/// Reads `tried_regions/` after `update_schemes_tried_regions`: the numbered
/// directories (each `start`, `end`, `nr_accesses`, `age`; other files such as
/// `sz_filter_passed` are ignored) and `total_bytes` when present.
pub fn read_tried_regions(dir: &Path) -> Result<(Vec<DamonRegion>, Option<u64>)> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    let mut numbered = Vec::new();
    for e in entries {
        let e = e.with_context(|| format!("listing {}", dir.display()))?;
        let path = e.path();
        if let Some(i) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) {
            if path.is_dir() {
                numbered.push((i, path));
            }
        }
    }
    numbered.sort();
    let mut regions = Vec::with_capacity(numbered.len());
    for (_, d) in numbered {
        let r = DamonRegion {
            start: read_num(&d.join("start"))?,
            end: read_num(&d.join("end"))?,
            nr_accesses: read_num(&d.join("nr_accesses"))?,
            age: read_num(&d.join("age"))?,
        };
        if r.end < r.start {
            bail!(
                "{}: end {:#x} before start {:#x}",
                d.display(),
                r.end,
                r.start
            );
        }
        regions.push(r);
    }
    let total_path = dir.join("total_bytes");
    let total = if total_path.exists() {
        Some(read_num(&total_path)?)
    } else {
        None
    };
    Ok((regions, total))
}

// ---------------------------------------------------------------- the session

/// One kdamond monitoring one process, for as long as the value lives.
pub struct DamonSession {
    kd: PathBuf,
    pid: u32,
    attrs: DamonAttrs,
    started: Instant,
    // Field order: the restorer runs (kdamond off, nr_kdamonds back) before the
    // lock is released.
    _restore: Restore,
    _lock: KernelStateLock,
}

fn restorer(kd: PathBuf, nr_path: PathBuf, previous: u64) -> impl FnMut() + Send + 'static {
    move || {
        let state = kd.join("state");
        if state.exists() && read_trim(&state).map(|s| s != "off").unwrap_or(true) {
            // Fails harmlessly when the kdamond already stopped (target exited).
            if let Err(e) = write(&state, "off") {
                if read_trim(&state).map(|s| s != "off").unwrap_or(true) {
                    eprintln!("hugetune: could not turn DAMON off: {e:#}");
                }
            }
        }
        // nr_kdamonds is refused (EBUSY) while a kdamond is still stopping.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match write(&nr_path, previous) {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => {
                    eprintln!("hugetune: could not restore DAMON's nr_kdamonds: {e:#}");
                    break;
                }
            }
        }
    }
}

fn configure(kd: &Path, pid: u32, attrs: &DamonAttrs) -> Result<()> {
    write(&kd.join("contexts/nr_contexts"), 1)?;
    let ctx = kd.join("contexts/0");
    let avail = ctx.join("avail_operations");
    if let Ok(ops) = read_trim(&avail) {
        if !has_vaddr(&ops) {
            bail!("{}", no_vaddr(&avail, &ops));
        }
    }
    write(&ctx.join("operations"), "vaddr")?;
    let iv = ctx.join("monitoring_attrs/intervals");
    write(&iv.join("sample_us"), attrs.sample_us)?;
    write(&iv.join("aggr_us"), attrs.aggr_us)?;
    write(&iv.join("update_us"), attrs.update_us)?;
    let nr = ctx.join("monitoring_attrs/nr_regions");
    write(&nr.join("min"), attrs.min_nr_regions)?;
    write(&nr.join("max"), attrs.max_nr_regions)?;
    write(&ctx.join("targets/nr_targets"), 1)?;
    write(&ctx.join("targets/0/pid_target"), pid)?;
    write(&ctx.join("schemes/nr_schemes"), 1)?;
    let scheme = ctx.join("schemes/0");
    write(&scheme.join("action"), "stat")?;
    // The ranges start as 0..0: open them to every region.
    let pattern = scheme.join("access_pattern");
    for (range, max) in [
        ("sz", u64::MAX),
        ("nr_accesses", u64::from(u32::MAX)),
        ("age", u64::from(u32::MAX)),
    ] {
        write(&pattern.join(range).join("min"), 0)?;
        write(&pattern.join(range).join("max"), max)?;
    }
    Ok(())
}

impl DamonSession {
    /// Configures and turns on a kdamond for `pid` (see the module comment).
    pub fn start(pid: u32, opts: &DamonOptions) -> Result<DamonSession> {
        opts.attrs.validate()?;
        Self::start_locked(pid, opts, lock_kernel_state()?)
    }

    /// [`DamonSession::start`] under a kernel-state lock the caller took
    /// (before starting the process, so that none of its run goes unmonitored
    /// while another hugetune holds the lock).
    pub fn start_locked(
        pid: u32,
        opts: &DamonOptions,
        lock: KernelStateLock,
    ) -> Result<DamonSession> {
        opts.attrs.validate()?;
        available(&opts.root).map_err(|e| anyhow!("DAMON unavailable: {e}"))?;
        let kds = opts.root.join("kdamonds");
        let nr_path = kds.join("nr_kdamonds");
        let previous = read_num(&nr_path)?;
        let kd = kds.join("0");
        let restore = on_restore(restorer(kd.clone(), nr_path.clone(), previous));
        write(&nr_path, 1)?;
        configure(&kd, pid, &opts.attrs)
            .with_context(|| format!("configuring DAMON for pid {pid}"))?;
        write(&kd.join("state"), "on")
            .with_context(|| format!("turning DAMON on for pid {pid} (is it running?)"))?;
        Ok(DamonSession {
            kd,
            pid,
            attrs: opts.attrs,
            started: Instant::now(),
            _restore: restore,
            _lock: lock,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the kdamond still runs (it stops by itself when the process exits).
    pub fn is_running(&self) -> bool {
        read_trim(&self.kd.join("state")).is_ok_and(|s| s == "on")
    }

    /// Asks the kernel for the current regions and reads them. The write blocks
    /// until the kdamond has walked its regions (about one aggregation interval).
    pub fn snapshot(&self) -> Result<DamonSnapshot> {
        write(&self.kd.join("state"), "update_schemes_tried_regions")?;
        let t_ms = self.started.elapsed().as_millis() as u64;
        let (regions, total) =
            read_tried_regions(&self.kd.join("contexts/0/schemes/0/tried_regions"))?;
        Ok(DamonSnapshot::new(t_ms, regions, total))
    }

    /// Takes a snapshot every `opts.snapshot_every()` while `alive()` says the
    /// process runs (polled every 10 ms at most), the kdamond runs and
    /// `opts.max_duration` has not passed.
    pub fn record(
        &self,
        opts: &DamonOptions,
        mut alive: impl FnMut() -> bool,
    ) -> Result<Vec<DamonSnapshot>> {
        let every = opts.snapshot_every();
        let mut snaps: Vec<DamonSnapshot> = Vec::new();
        let mut last_maps: Option<String> = None;
        let mut next = Instant::now() + every;
        loop {
            loop {
                if !alive() {
                    return Ok(snaps);
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                std::thread::sleep((next - now).min(Duration::from_millis(10)));
            }
            if opts
                .max_duration
                .is_some_and(|max| self.started.elapsed() >= max)
            {
                return Ok(snaps);
            }
            match self.snapshot() {
                Ok(mut s) => {
                    if opts.capture_maps {
                        // Read-only, and gone with the process: then kept as it was.
                        if let Ok(m) = std::fs::read_to_string(format!("/proc/{}/maps", self.pid)) {
                            if last_maps.as_deref() != Some(m.as_str()) {
                                s.maps = Some(m.clone());
                                last_maps = Some(m);
                            }
                        }
                    }
                    snaps.push(s)
                }
                // The process exited between the check and the snapshot.
                Err(_) if !alive() || !self.is_running() => return Ok(snaps),
                Err(e) => return Err(e),
            }
            next += every;
            let now = Instant::now();
            if next < now {
                next = now;
            }
        }
    }

    /// Ends the session (kdamond off, `nr_kdamonds` back, lock released) and
    /// wraps the snapshots.
    pub fn finish(self, snapshots: Vec<DamonSnapshot>, opts: &DamonOptions) -> DamonCapture {
        let capture = DamonCapture {
            format: FORMAT.to_string(),
            pid: self.pid,
            attrs: self.attrs,
            max_nr_accesses: self.attrs.max_nr_accesses(),
            snapshot_every_ms: opts.snapshot_every().as_millis() as u64,
            duration_ms: self.started.elapsed().as_millis() as u64,
            snapshots,
        };
        drop(self);
        capture
    }
}

/// Whether `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the last ')' (the command name may contain one).
    match stat.rsplit_once(')') {
        Some((_, rest)) => !matches!(rest.trim_start().chars().next(), Some('Z' | 'X') | None),
        None => false,
    }
}

/// Monitors a running process (not necessarily our child) until it exits or
/// `opts.max_duration` passes.
pub fn record_pid(pid: u32, opts: &DamonOptions) -> Result<DamonCapture> {
    record_pid_until(pid, opts, &std::sync::atomic::AtomicBool::new(false))
}

/// [`record_pid`] that also ends when `stop` is set (Ctrl-C): the snapshots
/// taken so far are kept. The process is only read (its maps, DAMON's
/// accessed-bit sampling): it runs on whatever happens here.
pub fn record_pid_until(
    pid: u32,
    opts: &DamonOptions,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<DamonCapture> {
    use std::sync::atomic::Ordering;
    if !pid_alive(pid) {
        bail!("no running process {pid} to monitor");
    }
    let session = DamonSession::start(pid, opts)?;
    let snaps = session.record(opts, || !stop.load(Ordering::SeqCst) && pid_alive(pid))?;
    Ok(session.finish(snaps, opts))
}

/// Starts `cmd`, monitors it until it exits (or `opts.max_duration` passes, then
/// waits for it unmonitored) and returns the capture and its exit status. The
/// child is killed if monitoring cannot start or fails.
pub fn record_command(mut cmd: Command, opts: &DamonOptions) -> Result<(DamonCapture, ExitStatus)> {
    opts.attrs.validate()?;
    // The lock first: a command started before it would run unmonitored for
    // as long as another hugetune holds it.
    let lock = lock_kernel_state()?;
    available(&opts.root).map_err(|e| anyhow!("DAMON unavailable: {e}"))?;
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let pid = child.id();
    let _tracked = track_child(pid);
    let stop = |child: &mut std::process::Child| {
        let _ = child.kill();
        let _ = child.wait();
    };
    let session = match DamonSession::start_locked(pid, opts, lock) {
        Ok(s) => s,
        Err(e) => {
            stop(&mut child);
            return Err(e);
        }
    };
    let mut status = None;
    let recorded = session.record(opts, || {
        if status.is_some() {
            return false;
        }
        match child.try_wait() {
            Ok(Some(s)) => {
                status = Some(s);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    });
    let snaps = match recorded {
        Ok(s) => s,
        Err(e) => {
            drop(session);
            stop(&mut child);
            return Err(e);
        }
    };
    let capture = session.finish(snaps, opts);
    let status = match status {
        Some(s) => s,
        None => child.wait().context("waiting for the monitored command")?,
    };
    Ok((capture, status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fs;

    fn put(root: &Path, rel: &str, value: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, value).unwrap();
    }

    fn get(root: &Path, rel: &str) -> String {
        fs::read_to_string(root.join(rel))
            .unwrap()
            .trim()
            .to_string()
    }

    /// The files of kdamond `k` as the kernel creates them (initial values).
    fn fake_kdamond(root: &Path, k: u64, avail_operations: &str) {
        let c = format!("kdamonds/{k}/contexts/0");
        for (rel, v) in [
            (format!("kdamonds/{k}/state"), "off"),
            (format!("kdamonds/{k}/pid"), "-1"),
            (format!("kdamonds/{k}/refresh_ms"), "0"),
            (format!("kdamonds/{k}/contexts/nr_contexts"), "0"),
            (format!("{c}/avail_operations"), avail_operations),
            (format!("{c}/operations"), "vaddr"),
            (format!("{c}/addr_unit"), "1"),
            (format!("{c}/monitoring_attrs/intervals/sample_us"), "5000"),
            (format!("{c}/monitoring_attrs/intervals/aggr_us"), "100000"),
            (
                format!("{c}/monitoring_attrs/intervals/update_us"),
                "1000000",
            ),
            (format!("{c}/monitoring_attrs/nr_regions/min"), "10"),
            (format!("{c}/monitoring_attrs/nr_regions/max"), "1000"),
            (format!("{c}/targets/nr_targets"), "0"),
            (format!("{c}/targets/0/pid_target"), "0"),
            (format!("{c}/targets/0/regions/nr_regions"), "0"),
            (format!("{c}/schemes/nr_schemes"), "0"),
            (format!("{c}/schemes/0/action"), "stat"),
            (format!("{c}/schemes/0/apply_interval_us"), "0"),
            (format!("{c}/schemes/0/tried_regions/total_bytes"), "0"),
        ] {
            put(root, &rel, &format!("{v}\n"));
        }
        for range in ["sz", "nr_accesses", "age"] {
            for end in ["min", "max"] {
                put(
                    root,
                    &format!("{c}/schemes/0/access_pattern/{range}/{end}"),
                    "0\n",
                );
            }
        }
    }

    /// A DAMON admin tree with `nr` kdamonds (all off) plus kdamond 0's files,
    /// which the kernel would create on `nr_kdamonds = 1`.
    fn fake_tree(nr: u64, avail_operations: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        put(t.path(), "kdamonds/nr_kdamonds", &format!("{nr}\n"));
        for k in 0..nr.max(1) {
            fake_kdamond(t.path(), k, avail_operations);
        }
        t
    }

    fn files(root: &Path) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let v = fs::read_to_string(&p).unwrap();
                    out.insert(p.strip_prefix(root).unwrap().to_path_buf(), v);
                }
            }
        }
        out
    }

    fn opts(root: &Path) -> DamonOptions {
        DamonOptions {
            root: root.to_path_buf(),
            ..Default::default()
        }
    }

    fn region(root: &Path, i: u64, start: u64, end: u64, nr_accesses: u64, age: u64) {
        let d = format!("kdamonds/0/contexts/0/schemes/0/tried_regions/{i}");
        put(root, &format!("{d}/start"), &format!("{start}\n"));
        put(root, &format!("{d}/end"), &format!("{end}\n"));
        put(
            root,
            &format!("{d}/nr_accesses"),
            &format!("{nr_accesses}\n"),
        );
        put(root, &format!("{d}/age"), &format!("{age}\n"));
        put(root, &format!("{d}/sz_filter_passed"), "0\n");
    }

    #[test]
    fn configuration_writes_what_the_kernel_expects() {
        let t = fake_tree(0, "vaddr fvaddr paddr");
        let r = t.path();
        let before: Vec<PathBuf> = files(r).into_keys().collect();
        let mut o = opts(r);
        o.attrs.sample_us = 2_000;
        o.attrs.min_nr_regions = 20;
        let s = DamonSession::start(4321, &o).unwrap();
        // Nothing written outside the files the kernel has.
        assert_eq!(files(r).into_keys().collect::<Vec<_>>(), before);
        let c = "kdamonds/0/contexts/0";
        for (rel, want) in [
            ("kdamonds/nr_kdamonds".to_string(), "1"),
            ("kdamonds/0/state".into(), "on"),
            ("kdamonds/0/contexts/nr_contexts".into(), "1"),
            (format!("{c}/operations"), "vaddr"),
            (format!("{c}/monitoring_attrs/intervals/sample_us"), "2000"),
            (format!("{c}/monitoring_attrs/intervals/aggr_us"), "100000"),
            (
                format!("{c}/monitoring_attrs/intervals/update_us"),
                "1000000",
            ),
            (format!("{c}/monitoring_attrs/nr_regions/min"), "20"),
            (format!("{c}/monitoring_attrs/nr_regions/max"), "1000"),
            (format!("{c}/targets/nr_targets"), "1"),
            (format!("{c}/targets/0/pid_target"), "4321"),
            (format!("{c}/schemes/nr_schemes"), "1"),
            (format!("{c}/schemes/0/action"), "stat"),
            (format!("{c}/schemes/0/access_pattern/sz/min"), "0"),
            (
                format!("{c}/schemes/0/access_pattern/sz/max"),
                "18446744073709551615",
            ),
            (
                format!("{c}/schemes/0/access_pattern/nr_accesses/max"),
                "4294967295",
            ),
            (
                format!("{c}/schemes/0/access_pattern/age/max"),
                "4294967295",
            ),
        ] {
            assert_eq!(get(r, &rel), want, "{rel}");
        }
        assert!(s.is_running());
        assert_eq!(s.pid(), 4321);
        drop(s);
        assert_eq!(get(r, "kdamonds/0/state"), "off");
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "0");
    }

    #[test]
    fn snapshot_reads_tried_regions_in_order_and_ignores_extra_files() {
        let t = fake_tree(0, "vaddr paddr");
        let r = t.path();
        let s = DamonSession::start(1, &opts(r)).unwrap();
        region(r, 10, 0x7000_0000, 0x7010_0000, 0, 5);
        region(r, 2, 0x1000, 0x3000, 7, 1);
        region(r, 1, 0x0, 0x1000, 20, 0);
        put(
            r,
            "kdamonds/0/contexts/0/schemes/0/tried_regions/total_bytes",
            "1056768\n",
        );
        put(
            r,
            "kdamonds/0/contexts/0/schemes/0/tried_regions/some_future_file",
            "x\n",
        );
        let snap = s.snapshot().unwrap();
        assert_eq!(get(r, "kdamonds/0/state"), "update_schemes_tried_regions");
        assert_eq!(
            snap.regions,
            vec![
                DamonRegion {
                    start: 0,
                    end: 0x1000,
                    nr_accesses: 20,
                    age: 0
                },
                DamonRegion {
                    start: 0x1000,
                    end: 0x3000,
                    nr_accesses: 7,
                    age: 1
                },
                DamonRegion {
                    start: 0x7000_0000,
                    end: 0x7010_0000,
                    nr_accesses: 0,
                    age: 5
                },
            ]
        );
        assert_eq!(
            snap.summary,
            SnapshotSummary {
                nr_regions: 3,
                bytes: 0x3000 + 0x10_0000,
                bytes_accessed: 0x3000,
                kernel_total_bytes: Some(1056768),
            }
        );
        drop(s);
        assert_eq!(get(r, "kdamonds/0/state"), "off");
    }

    #[test]
    fn garbled_or_missing_files_are_named() {
        let t = fake_tree(0, "vaddr");
        let r = t.path();
        let dir = r.join("kdamonds/0/contexts/0/schemes/0/tried_regions");
        region(r, 0, 0, 4096, 1, 1);
        put(
            r,
            "kdamonds/0/contexts/0/schemes/0/tried_regions/0/start",
            "zz\n",
        );
        let e = format!("{:#}", read_tried_regions(&dir).unwrap_err());
        assert!(
            e.contains("tried_regions/0/start") && e.contains("zz"),
            "{e}"
        );

        region(r, 0, 0, 4096, 1, 1);
        fs::remove_file(dir.join("0/age")).unwrap();
        let e = format!("{:#}", read_tried_regions(&dir).unwrap_err());
        assert!(e.contains("tried_regions/0/age"), "{e}");

        region(r, 0, 8192, 4096, 1, 1);
        let e = format!("{:#}", read_tried_regions(&dir).unwrap_err());
        assert!(e.contains("before start"), "{e}");

        region(r, 0, 0, 4096, 1, 1);
        put(
            r,
            "kdamonds/0/contexts/0/schemes/0/tried_regions/total_bytes",
            "",
        );
        let e = format!("{:#}", read_tried_regions(&dir).unwrap_err());
        assert!(e.contains("total_bytes"), "{e}");

        let e = format!("{:#}", read_tried_regions(&r.join("nope")).unwrap_err());
        assert!(e.contains("nope"), "{e}");

        put(r, "kdamonds/nr_kdamonds", "one\n");
        let e = available(r).unwrap_err();
        assert!(e.contains("nr_kdamonds") && e.contains("one"), "{e}");

        let e = available(&r.join("absent")).unwrap_err();
        assert!(e.contains("no DAMON sysfs interface"), "{e}");
    }

    #[test]
    fn a_running_kdamond_is_refused_and_left_alone() {
        let t = fake_tree(1, "paddr");
        let r = t.path();
        put(r, "kdamonds/0/state", "on\n");
        put(r, "kdamonds/0/pid", "77\n");
        put(r, "kdamonds/0/contexts/0/operations", "paddr\n");
        let before = files(r);
        let e = available(r).unwrap_err();
        assert!(e.contains("in use by someone else"), "{e}");
        assert!(e.contains("kdamond pid 77, operations paddr"), "{e}");
        assert!(e.contains("CONFIG_DAMON_VADDR"), "{e}");
        let e = format!("{:#}", DamonSession::start(1, &opts(r)).err().unwrap());
        assert!(e.contains("in use by someone else"), "{e}");
        assert_eq!(files(r), before);
    }

    #[test]
    fn no_vaddr_fails_and_restores() {
        // An idle kdamond shows the kernel lacks vaddr: refused before any write.
        let t = fake_tree(1, "paddr");
        let e = available(t.path()).unwrap_err();
        assert!(e.contains("no vaddr"), "{e}");
        // With no kdamond to look at, the session finds out after nr_kdamonds = 1
        // and puts it back.
        let t = fake_tree(0, "paddr\n");
        let r = t.path();
        assert!(available(r).is_ok());
        let e = format!("{:#}", DamonSession::start(1, &opts(r)).err().unwrap());
        assert!(e.contains("CONFIG_DAMON_VADDR"), "{e}");
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "0");
        assert_eq!(get(r, "kdamonds/0/state"), "off");
    }

    #[test]
    fn failure_while_configuring_restores() {
        let t = fake_tree(0, "vaddr");
        let r = t.path();
        // A write that fails half-way through the configuration.
        let pid_target = r.join("kdamonds/0/contexts/0/targets/0/pid_target");
        fs::remove_file(&pid_target).unwrap();
        fs::create_dir(&pid_target).unwrap();
        let e = format!("{:#}", DamonSession::start(1, &opts(r)).err().unwrap());
        assert!(e.contains("pid_target"), "{e}");
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "0");
        assert_eq!(get(r, "kdamonds/0/state"), "off");
    }

    #[test]
    fn record_takes_periodic_snapshots_and_restores_nr_kdamonds() {
        let t = fake_tree(2, "vaddr");
        let r = t.path();
        region(r, 0, 0x10000, 0x20000, 3, 2);
        let mut o = opts(r);
        o.attrs = DamonAttrs {
            sample_us: 1_000,
            aggr_us: 2_000,
            update_us: 10_000,
            min_nr_regions: 3,
            max_nr_regions: 10,
        };
        o.snapshot_every_aggrs = 5; // 10 ms
        let s = DamonSession::start(99, &o).unwrap();
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "1");
        let start = Instant::now();
        let snaps = s
            .record(&o, || start.elapsed() < Duration::from_millis(100))
            .unwrap();
        let cap = s.finish(snaps, &o);
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "2");
        assert_eq!(get(r, "kdamonds/0/state"), "off");
        assert!(
            (3..=11).contains(&cap.snapshots.len()),
            "{}",
            cap.snapshots.len()
        );
        assert!(cap.snapshots.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
        assert_eq!(cap.snapshot_every_ms, 10);
        assert_eq!(cap.max_nr_accesses, 2);
        assert_eq!(cap.pid, 99);
        assert_eq!(cap.snapshots[0].summary.bytes_accessed, 0x10000);
        let json = serde_json::to_string(&cap).unwrap();
        assert!(json.contains("\"format\":\"hugetune-damon/1\""), "{json}");
        assert_eq!(DamonCapture::from_json(&json).unwrap(), cap);
        let other = json.replace("hugetune-damon/1", "hugetune-damon/9");
        let e = format!("{:#}", DamonCapture::from_json(&other).unwrap_err());
        assert!(e.contains("hugetune-damon/9"), "{e}");
        assert!(DamonCapture::from_json("{}").is_err());
    }

    /// With `capture_maps`, the process's maps come with the first snapshot
    /// and again only when they change; a stop flag ends `record_pid_until`.
    #[test]
    fn maps_are_kept_when_they_change_and_a_stop_flag_ends_recording() {
        let t = fake_tree(0, "vaddr");
        let r = t.path();
        region(r, 0, 0x10000, 0x20000, 3, 2);
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let mut o = opts(r);
        o.attrs.sample_us = 1_000;
        o.attrs.aggr_us = 2_000;
        o.snapshot_every_aggrs = 5;
        o.capture_maps = true;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let cap = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(80));
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            record_pid_until(pid, &o, &stop).unwrap()
        });
        assert!(pid_alive(pid), "the process was left running");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(cap.snapshots.len() >= 3, "{}", cap.snapshots.len());
        let first = cap.snapshots[0].maps.as_deref().unwrap();
        assert!(first.contains("sleep"), "{first}");
        assert!(cap.snapshots[1..].iter().all(|s| s.maps.is_none()));
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "0");
        let json = serde_json::to_string(&cap).unwrap();
        assert_eq!(DamonCapture::from_json(&json).unwrap(), cap);
        let e = format!("{:#}", record_pid_until(pid, &o, &stop).unwrap_err());
        assert!(e.contains("no running process"), "{e}");
    }

    #[test]
    fn max_duration_stops_recording() {
        let t = fake_tree(0, "vaddr");
        let r = t.path();
        let mut o = opts(r);
        o.attrs.sample_us = 1_000;
        o.attrs.aggr_us = 1_000;
        o.snapshot_every_aggrs = 2;
        o.max_duration = Some(Duration::from_millis(30));
        let s = DamonSession::start(1, &o).unwrap();
        let begun = Instant::now();
        let snaps = s.record(&o, || true).unwrap();
        assert!(begun.elapsed() < Duration::from_secs(2));
        assert!(!snaps.is_empty());
        drop(s);
        assert_eq!(get(r, "kdamonds/nr_kdamonds"), "0");
    }

    #[test]
    fn attrs_are_checked_like_the_kernel_does() {
        assert!(DamonAttrs::default().validate().is_ok());
        assert_eq!(DamonAttrs::default().max_nr_accesses(), 20);
        let bad = [
            DamonAttrs {
                sample_us: 0,
                ..Default::default()
            },
            DamonAttrs {
                aggr_us: 1_000,
                ..Default::default()
            },
            DamonAttrs {
                min_nr_regions: 2,
                ..Default::default()
            },
            DamonAttrs {
                max_nr_regions: 5,
                ..Default::default()
            },
        ];
        for a in bad {
            assert!(a.validate().is_err(), "{a:?}");
        }
    }

    #[test]
    fn pid_alive_sees_exits() {
        assert!(pid_alive(std::process::id()));
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        // A zombie counts as gone.
        while !matches!(
            fs::read_to_string(format!("/proc/{pid}/stat")),
            Ok(s) if s.contains(") Z")
        ) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!pid_alive(pid));
        c.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
