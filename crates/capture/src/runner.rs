//! Running a command and measuring it: wall time, rusage (user, system, faults),
//! and the peak huge page usage of it and its descendants, sampled from
//! /proc/PID/smaps_rollup while it runs.
//!
//! A `RunSpec::launch` hook may start the child itself and reap it (a tracer:
//! hugetune-attach's fault-time advice): the runner then takes the child's end
//! from it and never waits for the child, since a tracer's stops would
//! otherwise be reported to the runner's wait.

use crate::session::{self, Driver};
use anyhow::{bail, Context, Result};
use hugetune_host::kernel_state::track_child;
use hugetune_host::procfs::{tree_usage, HugeUsage, RunStats};

use std::ffi::OsString;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Inherit,
    Null,
    Capture,
}

impl Output {
    fn stdio(self) -> Stdio {
        match self {
            Output::Inherit => Stdio::inherit(),
            Output::Null => Stdio::null(),
            Output::Capture => Stdio::piped(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunSpec {
    pub argv: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub env_remove: Vec<String>,
    pub stdout: Output,
    pub stderr: Output,
    /// Longest pause between /proc samples; sampling starts at 1 ms and backs off
    /// to this, so short runs are still seen.
    pub sample_every: Duration,
    /// Also take a census of the large folios the process maps (pagemap +
    /// kpageflags, root), at most every `FOLIO_CENSUS_EVERY`; the largest is kept.
    pub folio_census: bool,
    /// Run the command on this CPU only (sched_setaffinity before exec), so that
    /// the measuring process and the machine's housekeeping stay off its core.
    pub cpu: Option<usize>,
    /// The command is a server: this client drives it, and the run ends when
    /// the driver does (session.rs). `wall_s` is then the driver's time.
    pub driver: Option<Driver>,
    /// Called with the child's PID once it runs the command; what it returns is
    /// called after the child was reaped (`hugetune run` applies a plan from
    /// outside this way: hugetune-attach).
    pub on_start: Option<OnStart>,
    /// Starts the child instead of `Command::spawn` (see `Launch`).
    pub launch: Option<Launch>,
    /// Called just before the child starts (before its clock); what it returns
    /// lives until the child was reaped: kernel state for this run only (a
    /// plan's per-size THP controls). Its error fails the run, nothing started.
    pub around: Option<Around>,
}

/// What `RunSpec::around` calls: a guard for the run's duration.
pub type AroundFn = dyn Fn() -> Result<Box<dyn std::any::Any>> + Send + Sync;

/// A hook around one run (see `RunSpec::around`).
#[derive(Clone)]
pub struct Around(pub std::sync::Arc<AroundFn>);

impl std::fmt::Debug for Around {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Around")
    }
}

/// The end of a child reaped by a `Launch` hook: wait status, rusage, when.
pub type Reaped = (i32, libc::rusage, Instant);

/// Starts the prepared command; returns the child and, when the hook reaps it
/// itself, the receiver of its end (the runner must then not wait for it).
pub type LaunchFn = dyn Fn(
        Command,
    ) -> std::io::Result<(
        std::process::Child,
        Option<std::sync::mpsc::Receiver<Reaped>>,
    )> + Send
    + Sync;

/// A hook that starts the child (see `RunSpec::launch`).
#[derive(Clone)]
pub struct Launch(pub std::sync::Arc<LaunchFn>);

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Launch")
    }
}

/// A hook on a started child (see `RunSpec::on_start`).
#[derive(Clone)]
pub struct OnStart(pub std::sync::Arc<dyn Fn(u32) -> Box<dyn FnOnce() + Send> + Send + Sync>);

impl std::fmt::Debug for OnStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnStart")
    }
}

/// Pause between folio censuses: each reads the whole pagemap of the process.
pub const FOLIO_CENSUS_EVERY: Duration = Duration::from_millis(250);
/// Shortest pause between censuses while the process grows.
pub const FOLIO_CENSUS_MIN_GAP: Duration = Duration::from_millis(20);

impl RunSpec {
    pub fn new(argv: Vec<OsString>) -> Self {
        RunSpec {
            argv,
            env: vec![],
            env_remove: vec![],
            stdout: Output::Null,
            stderr: Output::Inherit,
            sample_every: Duration::from_millis(25),
            folio_census: false,
            cpu: None,
            driver: None,
            on_start: None,
            launch: None,
            around: None,
        }
    }
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

/// The affinity mask this process had before `keep_off_cpu` narrowed it:
/// the CPUs a measured command may still be pinned to.
static FIRST_ALLOWED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();

/// CPUs this process may run on: its affinity mask as it was before
/// `keep_off_cpu` moved it (a child may be pinned to any of them).
pub fn allowed_cpus() -> Vec<usize> {
    FIRST_ALLOWED.get().cloned().unwrap_or_else(current_cpus)
}

/// The calling thread's affinity mask now.
fn current_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is valid; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is that of `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return vec![];
    }
    // SAFETY: CPU_ISSET reads the set for indices below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Moves the calling thread (and the threads it starts later) off `cpu`, onto
/// the other CPUs it may use; false when there is no other CPU.
pub fn keep_off_cpu(cpu: usize) -> bool {
    let first = FIRST_ALLOWED.get_or_init(current_cpus);
    let others: Vec<usize> = first.iter().copied().filter(|&c| c != cpu).collect();
    if others.is_empty() {
        return false;
    }
    // SAFETY: an all-zero cpu_set_t is valid; CPU_SET writes indices below
    // CPU_SETSIZE (allowed_cpus never returns more).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in others {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is this thread; the size is that of `set`.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

fn pin_to(cmd: &mut Command, cpu: usize) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let allowed = allowed_cpus();
    if !allowed.contains(&cpu) {
        bail!("CPU {cpu} is not available to this process (allowed: {allowed:?})");
    }
    // SAFETY: the closure only calls sched_setaffinity (async-signal-safe) on
    // a set built before the fork.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

pub fn run(spec: &RunSpec) -> Result<RunStats> {
    let Some((prog, args)) = spec.argv.split_first() else {
        bail!("empty command")
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(spec.stdout.stdio())
        .stderr(spec.stderr.stdio());
    for k in &spec.env_remove {
        cmd.env_remove(k);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(cpu) = spec.cpu {
        pin_to(&mut cmd, cpu)?;
    }
    // Dropped when this returns: after the reap, or on any error before.
    let _around = spec.around.as_ref().map(|a| (a.0)()).transpose()?;
    let start = Instant::now();
    let spawning = hugetune_host::kernel_state::begin_spawn()?;
    let (mut child, reaped) = match &spec.launch {
        Some(l) => (l.0)(cmd),
        None => cmd.spawn().map(|c| (c, None)),
    }
    .with_context(|| format!("starting {}", prog.to_string_lossy()))?;
    let pid = child.id();
    let _tracked = track_child(pid);
    drop(spawning);
    let driver = spec.driver.as_ref().map(|d| session::start(d, pid));
    let started = spec.on_start.as_ref().map(|h| (h.0)(pid));
    let reader = |r: Option<Box<dyn Read + Send>>| {
        r.map(|mut r| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        })
    };
    let out_t = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err_t = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let mut peak = HugeUsage::default();
    let mut peak_folios: Vec<(u64, u64)> = Vec::new();
    let mut last_census: Option<(Instant, u64)> = None;
    let mut pause = Duration::from_millis(1);
    let mut status: i32 = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten by wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut end: Option<Instant> = None;
    loop {
        if let Some(rx) = &reaped {
            match rx.recv_timeout(pause) {
                Ok((st, r, at)) => {
                    (status, ru, end) = (st, r, Some(at));
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("the tracer of {pid} ended without its exit status")
                }
            }
        } else {
            // SAFETY: wait4 on our own child with valid out-pointers.
            let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut ru) };
            if r == pid as i32 {
                break;
            }
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e).context("waiting for the child");
            }
        }
        let now = tree_usage(pid);
        peak = peak.max(now);
        // A census when the resident set grew by a tenth since the last one (the
        // program is still placing data), else now and then.
        let due = last_census.is_none_or(|(t, rss): (Instant, u64)| {
            t.elapsed() >= FOLIO_CENSUS_EVERY
                || (t.elapsed() >= FOLIO_CENSUS_MIN_GAP && now.rss > rss + rss / 10)
        });
        if spec.folio_census && due {
            last_census = Some((Instant::now(), now.rss));
            let c = hugetune_host::procfs::folio_census(pid);
            let sum = |v: &[(u64, u64)]| v.iter().map(|&(_, b)| b).sum::<u64>();
            if sum(&c) > sum(&peak_folios) {
                peak_folios = c;
            }
        }
        if reaped.is_none() {
            // (A hook's receiver waited already.)
            std::thread::sleep(pause);
        }
        pause = (pause * 2).min(spec.sample_every);
    }
    let wall = end.map_or_else(|| start.elapsed(), |e| e.duration_since(start));
    // The child is reaped: keep std from waiting on it again.
    std::mem::forget(child);
    if let Some(f) = started {
        f();
    }
    let (mut exit_code, mut signal) = if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        (128 + libc::WTERMSIG(status), Some(libc::WTERMSIG(status)))
    } else {
        (-1, None)
    };
    let mut wall_s = wall.as_secs_f64();
    let mut session_error = None;
    let mut driver_stdout = Vec::new();
    if let Some(d) = driver {
        let mut o = d.finish();
        driver_stdout = std::mem::take(&mut o.stdout);
        exit_code = o.status(exit_code);
        if exit_code == 0 {
            signal = None;
        }
        wall_s = o.wall_s;
        session_error = o.error;
    }
    Ok(RunStats {
        exit_code,
        signal,
        wall_s,
        session_error,
        driver_stdout,
        user_s: tv(ru.ru_utime),
        sys_s: tv(ru.ru_stime),
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
        max_rss_kb: ru.ru_maxrss as u64,
        peak,
        peak_folios,
        stdout: out_t
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default(),
        stderr: err_t
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default(),
    })
}

pub fn duration_s(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_measures() {
        let mut s = RunSpec::new(vec![
            "sh".into(),
            "-c".into(),
            "echo hi; echo err >&2; exit 3".into(),
        ]);
        s.stdout = Output::Capture;
        s.stderr = Output::Capture;
        let r = run(&s).unwrap();
        assert_eq!(r.exit_code, 3);
        assert_eq!(r.stdout, b"hi\n");
        assert_eq!(r.stderr, b"err\n");
        assert!(r.wall_s > 0.0);
    }

    #[test]
    fn signals_are_reported() {
        let r = run(&RunSpec::new(vec![
            "sh".into(),
            "-c".into(),
            "kill -9 $$".into(),
        ]))
        .unwrap();
        assert_eq!(r.signal, Some(9));
        assert_eq!(r.exit_code, 137);
    }

    /// A pinned command sees only its CPU; a CPU outside the mask is refused.
    #[test]
    fn pinning_sets_the_affinity() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        let mut s = RunSpec::new(vec![
            "sh".into(),
            "-c".into(),
            "grep Cpus_allowed_list /proc/self/status".into(),
        ]);
        s.stdout = Output::Capture;
        s.cpu = Some(last);
        let r = run(&s).unwrap();
        assert_eq!(r.exit_code, 0);
        let out = String::from_utf8_lossy(&r.stdout);
        assert_eq!(
            out.split_whitespace().last(),
            Some(last.to_string().as_str()),
            "{out}"
        );
        // After this thread moved off `last`, a command may still be pinned
        // there (rank --cpu does both).
        if cpus.len() > 1 {
            assert!(keep_off_cpu(last));
            assert!(!current_cpus().contains(&last));
            let r = run(&s).unwrap();
            let out = String::from_utf8_lossy(&r.stdout);
            assert_eq!(
                out.split_whitespace().last(),
                Some(last.to_string().as_str()),
                "{out}"
            );
        }
        s.cpu = Some(100_000);
        let e = run(&s).unwrap_err();
        assert!(format!("{e:#}").contains("CPU 100000"), "{e:#}");
    }

    /// A launch hook that reaps the child itself (as the tracer does): the
    /// runner takes the status, rusage and end time it hands over, and never
    /// waits for the child (a second wait would fail with ECHILD).
    #[test]
    fn a_launch_hook_owns_the_childs_wait() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c2 = calls.clone();
        let mut s = RunSpec::new(vec![
            "sh".into(),
            "-c".into(),
            "echo out; sleep 0.2; exit 7".into(),
        ]);
        s.stdout = Output::Capture;
        s.launch = Some(Launch(std::sync::Arc::new(move |mut cmd: Command| {
            c2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let child = cmd.spawn()?;
            let pid = child.id() as i32;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut st = 0;
                // SAFETY: wait4 on the child spawned above, valid pointers.
                let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
                unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
                let _ = tx.send((st, ru, Instant::now()));
            });
            Ok((child, Some(rx)))
        })));
        let r = run(&s).unwrap();
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(r.exit_code, 7);
        assert_eq!(r.stdout, b"out\n");
        assert!(r.wall_s >= 0.2 && r.wall_s < 5.0, "{}", r.wall_s);
        // A hook whose reaper vanishes without a status is an error, not a hang.
        s.launch = Some(Launch(std::sync::Arc::new(|mut cmd: Command| {
            let child = cmd.spawn()?;
            let (_, rx) = std::sync::mpsc::channel();
            Ok((child, Some(rx)))
        })));
        let e = run(&s).unwrap_err();
        assert!(
            format!("{e:#}").contains("without its exit status"),
            "{e:#}"
        );
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let e = run(&RunSpec::new(vec!["/nonexistent/prog".into()])).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/prog"));
    }
}
