//! What the integration tests share: the CLI as they run it (`hugetune`), and the
//! robustness tests' helpers: processes that cannot outlive a test (own process
//! group, timeout, killed on drop), the runtime library's modes as the tool
//! builds them (`hugetune_format::{env, plan}`), and the exit summaries.

#![allow(dead_code)]

use hugetune_format::env::{apply_env_with, record_env, RecordEnv};
use hugetune_format::plan::{plan_text_with, PlanOptions};
use hugetune_model::{Backing, Category};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HUGETUNE: &str = env!("CARGO_BIN_EXE_hugetune");

/// qemu-x86_64, or `None` after saying the test is skipped without it.
pub fn qemu_or_skip() -> Option<PathBuf> {
    let q = hugetune_capture::qemu::find_qemu();
    if q.is_none() {
        eprintln!(
            "SKIPPED: qemu-x86_64 is not installed ({}; scripts/setup.sh does)",
            hugetune_capture::qemu::INSTALL_HINT
        );
    }
    q
}
pub const LIB: &str = env!("HUGETUNE_BUILT_RUNTIME");
pub const WORK: &str = env!("HUGETUNE_BUILT_WORK");
pub const PLUGIN: &str = env!("HUGETUNE_BUILT_QEMU_PLUGIN");
pub const THRESHOLD: u64 = 131072;

/// hugetune as a child that a test signals: INT, HUP, QUIT and TERM at their
/// default disposition, whatever the test runner inherited. hugetune keeps a
/// signal ignored when it started with it ignored (nohup, a script's
/// background job), so under `nohup scripts/test.sh` a Ctrl-C sent by a test
/// would otherwise be ignored, as it should be there.
pub fn signalable() -> Command {
    let mut c = Command::new(HUGETUNE);
    // SAFETY: signal() is async-signal-safe; nothing else runs in the child.
    unsafe {
        c.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    c
}

/// Follows `child`'s stderr as it comes: each line is sent on the channel (for
/// a test that acts when a line appears), and the thread returns the whole text
/// once the stream closes.
pub fn follow_stderr(
    child: &mut Child,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
) {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l.clone());
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    (rx, reader)
}

/// `hugetune [--db DB] ARGS` with this build's runtime library and QEMU plugin:
/// its exit code (-1 when killed by a signal), stdout and stderr.
pub fn hugetune_at(db: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(HUGETUNE);
    if let Some(db) = db {
        c.arg("--db").arg(db);
    }
    let o = c
        .args(args)
        .env("HUGETUNE_RUNTIME_LIB", LIB)
        .env("HUGETUNE_QEMU_PLUGIN", PLUGIN)
        .output()
        .expect("run hugetune");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `hugetune --db DB ARGS` (see `hugetune_at`).
pub fn hugetune(db: &Path, args: &[&str]) -> (i32, String, String) {
    hugetune_at(Some(db), args)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The path of a program, or `None` (with a message saying the test skips it).
pub fn need_program(name: &str) -> Option<PathBuf> {
    for dir in ["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    eprintln!("SKIPPED: {name} is not installed (scripts/setup.sh installs it)");
    None
}

/// How the program runs: plain, or under the runtime library in one of its modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    /// Record mode with an allocation log (`log.%p`) and a summary.
    Record,
    /// Apply mode, plan `heap-large hugetlb-2m`.
    ApplyLarge,
    /// Apply mode, plan `heap-small thp-2m` through glibc's tunable (the launcher
    /// adds `heap-large 4k` and `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`).
    ApplySmall,
    /// Apply mode, heap-small in the library's arena (`heap-small arena thp-2m`),
    /// the launcher's default form.
    ApplySmallArena,
    /// Apply mode, plan `heap-large thp-2m`.
    ApplyLargeThp,
}

impl Mode {
    pub fn assignments(self) -> Vec<(Category, Backing)> {
        match self {
            Mode::ApplyLarge => vec![(Category::HeapLarge, Backing::Hugetlb2m)],
            Mode::ApplySmall | Mode::ApplySmallArena => vec![(Category::HeapSmall, Backing::Thp2m)],
            Mode::ApplyLargeThp => vec![(Category::HeapLarge, Backing::Thp2m)],
            Mode::Plain | Mode::Record => vec![],
        }
    }
    pub fn is_apply(self) -> bool {
        !matches!(self, Mode::Plain | Mode::Record)
    }
    /// How the launcher writes this mode's plan.
    pub fn plan_options(self) -> PlanOptions {
        PlanOptions {
            heap_small_arena: self != Mode::ApplySmall,
            ..PlanOptions::default()
        }
    }
}

/// Where one run keeps its plan, logs and summaries.
pub struct RunDir {
    pub dir: PathBuf,
    pub mode: Mode,
}

/// Environment variables the test process may have inherited that would change
/// what a "plain" run is.
const SCRUB: &[&str] = &[
    "LD_PRELOAD",
    "GLIBC_TUNABLES",
    "HUGETUNE_MODE",
    "HUGETUNE_LOG",
    "HUGETUNE_SUMMARY",
    "HUGETUNE_PLAN",
    "HUGETUNE_MARKERS",
    "HUGETUNE_THRESHOLD",
    "HUGETUNE_VERBOSE",
    "HUGETUNE_INJECT",
    "MALLOC_ARENA_MAX",
];

/// Applies `mode` to `cmd` (environment exactly as the tool builds it); the plan,
/// log and summaries go to a fresh directory under `base` named `tag`.
pub fn prepare(cmd: &mut Command, mode: Mode, base: &Path, tag: &str) -> RunDir {
    let dir = base.join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    for k in SCRUB {
        cmd.env_remove(k);
    }
    cmd.env("LC_ALL", "C").env("PYTHONHASHSEED", "0");
    let lib = Path::new(LIB);
    let summary = dir.join("summary.%p.json");
    let env = match mode {
        Mode::Plain => vec![],
        Mode::Record => {
            let log = dir.join("log.%p");
            record_env(&RecordEnv {
                lib,
                log: Some(&log),
                summary: Some(&summary),
                markers: false,
            })
        }
        _ => {
            let a = mode.assignments();
            let plan = dir.join("plan");
            let opts = mode.plan_options();
            std::fs::write(&plan, plan_text_with(&a, THRESHOLD, &opts)).unwrap();
            apply_env_with(lib, &plan, Some(&summary), &a, &opts)
        }
    };
    cmd.envs(env);
    RunDir { dir, mode }
}

/// A child in its own process group; dropping it kills the whole group (the
/// program and anything it started), so a failing test leaves nothing behind.
pub struct Proc {
    pub child: Child,
    pub pid: u32,
    reaped: bool,
}

impl Proc {
    pub fn spawn(cmd: &mut Command) -> Proc {
        cmd.process_group(0);
        // If the test process dies (Ctrl-C reaches only the foreground group, which
        // the child has left), the kernel kills the child.
        // SAFETY: prctl and getppid are async-signal-safe; nothing else runs
        // between fork and exec.
        unsafe {
            let parent = libc::getpid();
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(111);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
        let pid = child.id();
        Proc {
            child,
            pid,
            reaped: false,
        }
    }

    /// Has the program ended? Checked without reaping it, so its process group
    /// id stays reserved until `finish` has cleaned up the group.
    pub fn exited(&self) -> bool {
        // SAFETY: zeroed siginfo_t is a valid out-parameter; waitid with WNOWAIT
        // does not reap.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r == 0 && info.si_pid() != 0
        }
    }

    /// Waits at most `timeout`; on timeout the group is killed and the test fails.
    pub fn wait_exit(&mut self, timeout: Duration, what: &str) {
        let t0 = Instant::now();
        while !self.exited() {
            if t0.elapsed() > timeout {
                self.kill_group();
                panic!("{what}: still running after {timeout:?}; killed");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Processes of the group still alive besides the (exited) leader.
    pub fn kill_group(&self) -> bool {
        // SAFETY: signalling our own child's process group.
        let any = unsafe { libc::kill(-(self.pid as i32), 0) == 0 };
        // SAFETY: as above.
        unsafe { libc::kill(-(self.pid as i32), libc::SIGKILL) };
        any
    }

    /// Reaps the program after it exited; returns (status, whether other
    /// processes of its group were still running — they are killed).
    pub fn finish(&mut self) -> (std::process::ExitStatus, bool) {
        let leftovers = {
            // The leader is a zombie (not reaped): the group id is still ours.
            let alive = self.group_members_besides_leader();
            if alive {
                self.kill_group();
            }
            alive
        };
        let st = self.child.wait().expect("wait");
        self.reaped = true;
        (st, leftovers)
    }

    fn group_members_besides_leader(&self) -> bool {
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return false;
        };
        rd.flatten().any(|e| {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                return false;
            };
            if pid == self.pid {
                return false;
            }
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 2..];
                    // state ppid pgrp ...
                    rest.split(' ').nth(2)?.parse::<u32>().ok()
                })
                .is_some_and(|pgrp| pgrp == self.pid)
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_group();
            let _ = self.child.wait();
        }
    }
}

pub struct Output {
    pub pid: u32,
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub wall: Duration,
    /// Other processes of its group were still running when it exited.
    pub leftovers: bool,
}

impl Output {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Runs `cmd` to the end (stdin: `input`, or nothing), killing it and failing the
/// test after `timeout`.
pub fn run(cmd: &mut Command, input: Option<&[u8]>, timeout: Duration, what: &str) -> Output {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut p = Proc::spawn(cmd);
    let writer = input.map(|data| {
        let mut stdin = p.child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&data);
        })
    });
    let mut so = p.child.stdout.take().unwrap();
    let mut se = p.child.stderr.take().unwrap();
    let ro = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let re = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    p.wait_exit(timeout, what);
    let wall = t0.elapsed();
    let (status, leftovers) = p.finish();
    if let Some(w) = writer {
        let _ = w.join();
    }
    Output {
        pid: p.pid,
        status,
        stdout: ro.join().unwrap(),
        stderr: re.join().unwrap(),
        wall,
        leftovers,
    }
}

/// The summaries a run wrote, by pid.
pub fn summaries(rd: &RunDir) -> BTreeMap<u32, Value> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&rd.dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("summary.")
            .and_then(|s| s.strip_suffix(".json"))
        else {
            continue;
        };
        let text = std::fs::read(e.path()).unwrap();
        let text = String::from_utf8(text)
            .unwrap_or_else(|err| panic!("{name}: summary is not UTF-8: {err}"));
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{name}: not JSON ({err}): {text}"));
        out.insert(pid.parse().unwrap(), v);
    }
    out
}

/// Checks every summary of a run (mode, version, no errors) and returns the main
/// program's. `what` names the run in failure messages.
pub fn check_summaries(rd: &RunDir, main_pid: u32, what: &str) -> Option<Value> {
    let all = summaries(rd);
    if rd.mode == Mode::Plain {
        assert!(all.is_empty(), "{what}: a plain run wrote summaries");
        return None;
    }
    let want_mode = if rd.mode == Mode::Record {
        "record"
    } else {
        "apply"
    };
    for (pid, s) in &all {
        assert_eq!(s["version"], 1, "{what}: pid {pid}: {s}");
        assert_eq!(s["pid"].as_u64(), Some(*pid as u64), "{what}: {s}");
        assert_eq!(s["mode"], want_mode, "{what}: pid {pid}: {s}");
        let errors = s["errors"].as_array().expect("errors array");
        assert!(
            errors.is_empty(),
            "{what}: pid {pid}: errors in summary: {s}"
        );
        for f in s["fallbacks"].as_array().expect("fallbacks array") {
            assert!(
                f["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{what}: fallback without a reason: {s}"
            );
            assert!(f["count"].as_u64().unwrap() > 0, "{what}: {s}");
        }
    }
    let main = all
        .get(&main_pid)
        .unwrap_or_else(|| {
            panic!(
                "{what}: no summary for the main process {main_pid} (have {:?})",
                all.keys().collect::<Vec<_>>()
            )
        })
        .clone();
    Some(main)
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Sum of a `backed` map's bytes.
pub fn backed_sum(m: &Value) -> u64 {
    m.as_object().map(|o| o.values().map(u).sum()).unwrap_or(0)
}

/// The fallbacks of a summary matching (category, from, reason), summed: (count, bytes).
pub fn fallback(s: &Value, cat: &str, from: &str, reason: &str) -> (u64, u64) {
    s["fallbacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["category"] == cat && f["from"] == from && f["reason"] == reason)
        .fold((0, 0), |(c, b), f| (c + u(&f["count"]), b + u(&f["bytes"])))
}

/// First difference between two byte strings, for failure messages.
pub fn first_diff(a: &[u8], b: &[u8]) -> String {
    let i = a
        .iter()
        .zip(b.iter())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |v: &[u8]| {
        let lo = i.saturating_sub(80);
        let hi = (i + 80).min(v.len());
        String::from_utf8_lossy(&v[lo..hi]).into_owned()
    };
    format!(
        "lengths {} vs {}, first difference at byte {i}:\n--- expected\n{}\n--- got\n{}",
        a.len(),
        b.len(),
        show(a),
        show(b)
    )
}

/// Compares two files byte for byte without loading them whole.
pub fn same_file(a: &Path, b: &Path) -> Result<(), String> {
    let (ma, mb) = (
        std::fs::metadata(a).map_err(|e| format!("{}: {e}", a.display()))?,
        std::fs::metadata(b).map_err(|e| format!("{}: {e}", b.display()))?,
    );
    if ma.len() != mb.len() {
        return Err(format!(
            "{} has {} bytes, {} has {}",
            a.display(),
            ma.len(),
            b.display(),
            mb.len()
        ));
    }
    let mut fa = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(a).unwrap());
    let mut fb = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(b).unwrap());
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut off = 0u64;
    loop {
        let n = read_full(&mut fa, &mut ba);
        let m = read_full(&mut fb, &mut bb);
        if n != m || ba[..n] != bb[..m] {
            return Err(format!(
                "{} and {} differ in the block at byte {off}",
                a.display(),
                b.display()
            ));
        }
        if n == 0 {
            return Ok(());
        }
        off += n as u64;
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    n
}

/// A free TCP port on 127.0.0.1 (bound and released; callers retry on a race).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `blocks`: a small C program (tests/common/blocks.c), compiled into `dir`. It
/// allocates N blocks of SIZE bytes (all live at once), fills them from a seed,
/// reallocs and callocs, and prints a checksum: deterministic output whatever
/// backs the memory.
pub fn build_blocks(dir: &Path) -> PathBuf {
    let src = dir.join("blocks.c");
    std::fs::write(&src, include_str!("blocks.c")).unwrap();
    let exe = dir.join("blocks");
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(
        o.status.success(),
        "compiling blocks.c: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

/// Compiles C `src` as a static program `dir/name` with `-O2 -static` and `flags`,
/// or `None` after saying the test is skipped when no static libc is installed.
/// A test program that does not compile fails the test: only a missing library
/// skips.
pub fn static_c(dir: &Path, name: &str, src: &str, flags: &[&str]) -> Option<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    let o = Command::new("gcc")
        .args(["-O2", "-static"])
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("run gcc");
    if !o.status.success() {
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("cannot find -l"),
            "{name}.c does not compile: {e}"
        );
        eprintln!("SKIPPED: gcc -static failed (no static libc?): {e}");
        return None;
    }
    Some(exe)
}

/// Stores `cal` by hand as the calibration of the machine the tool looks up
/// (this host's id, as `stages::machine_id` registers it).
pub fn store_calibration(db: &Path, cal: &Value) {
    let m = hugetune_host::machine::machine(None).unwrap();
    let store = hugetune_store::db::Db::open(db).unwrap();
    let fp = hugetune_store::identity::host_id();
    let mid = store
        .upsert_machine(
            &fp,
            &m.hostname,
            &m.cpu.brand,
            &m.kernel,
            &serde_json::json!({}),
        )
        .unwrap();
    store.insert_calibration(mid, cal).unwrap();
}

/// A calibration stored by hand whose figures carry their repetitions' spread
/// (median, fastest, slowest of 9): 4 KB walks ranging 3× between repetitions
/// and the 4 KB fault from 1.8 to 2.6 µs (docs/model.md §4.1).
pub fn spread_calibration() -> Value {
    let rep = |median: f64, min: f64, max: f64| serde_json::json!({"median": median, "min": min, "max": max, "reps": 9});
    let fig = |kind: &str, what: &str, pt: Option<f64>, ns: Value| {
        serde_json::json!({"kind": kind, "what": what, "pt_bytes": pt, "ns": ns,
            "cold_ns": null, "source": "by hand"})
    };
    serde_json::json!({
        "l2_hit_ns": [2.0, 15.0, 15.0],
        "walk_curve": [[[16384.0, 20.0], [65536.0, 60.0], [2097152.0, 120.0]], [[4096.0, 15.0]], [[4096.0, 15.0]]],
        "fault_ns": [["4k", 2000.0], ["thp-2m", 90000.0], ["hugetlb-2m", 90000.0]],
        "sources": ["by hand"], "machine": "test", "created": "2026-12-07T00:00:00Z",
        "figures": [
            fig("walk", "4k", Some(16384.0), rep(20.0, 10.0, 30.0)),
            fig("walk", "4k", Some(65536.0), rep(60.0, 30.0, 90.0)),
            fig("walk", "4k", Some(2097152.0), rep(120.0, 60.0, 180.0)),
            fig("fault", "4k", None, rep(2000.0, 1800.0, 2600.0)),
        ]
    })
}
