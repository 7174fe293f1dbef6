//! Plans applied from outside (issue 19, items 2 and 5; docs/attach.md):
//! `hugetune run -p PID` on a running program, `hugetune run --plan FILE` on a
//! static program the runtime library cannot enter, and the ways it can fail
//! (no such process, no stored plan, a process that exits while watched, the
//! kernel refusing, another user's process), each with the program unharmed.
//!
//! Kernel state: none of these tests changes any global setting. MADV_COLLAPSE
//! works in THP `madvise` mode as it is, and touches only the memory of the
//! test's own programs, so no shared kernel-state lock is taken. They need
//! CAP_SYS_NICE (root): without it they check that the error says so.

mod common;
use common::{hugetune_at, Proc, HUGETUNE};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A program that mallocs MB MiB, fills it, says `ready`, then reads it at
/// random: each round of 1 M reads prints the sum of (value - what was
/// written), 0 while its memory is intact. Ends after ROUNDS rounds (0: never).
const READER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc, char **argv) {
    size_t mb = argc > 1 ? strtoul(argv[1], 0, 10) : 256, n = (mb << 20) / 8;
    long rounds = argc > 2 ? atol(argv[2]) : 0;
    uint64_t *a = malloc(n * 8);
    if (!a) return 2;
    for (size_t i = 0; i < n; i++) a[i] = i * 2654435761u;
    printf("ready\n");
    fflush(stdout);
    uint64_t x = 88172645463325252u;
    for (long r = 0; rounds == 0 || r < rounds; r++) {
        uint64_t s = 0;
        for (long i = 0; i < 1000000; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t k = x % n;
            s += a[k] - k * 2654435761u;
        }
        printf("%lu\n", (unsigned long)s);
        fflush(stdout);
    }
    return 0;
}
"#;

/// A random-read program (workloads/programs/random_reads.c): fills MB MiB, then
/// N dependent-free random reads; prints the parity of their sum.
const WALK: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc, char **argv) {
    size_t mb = argc > 1 ? atol(argv[1]) : 512; long n = argc > 2 ? atol(argv[2]) : 20000000;
    size_t len = mb << 20; uint64_t *a = malloc(len); size_t cnt = len / 8;
    for (size_t i = 0; i < cnt; i++) a[i] = i * 2654435761u;
    uint64_t x = 1, s = 0;
    for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += a[x % cnt]; }
    printf("%lu\n", (unsigned long)s);
    return 0;
}
"#;

fn build(dir: &Path, name: &str, src: &str, static_: bool) -> Option<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&c);
    if static_ {
        cmd.arg("-static");
    }
    match cmd.output() {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) if static_ => {
            eprintln!(
                "skipped: no static C library here ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            None
        }
        r => panic!("cc failed: {r:?}"),
    }
}

/// A running READER and the lines it prints.
struct Reader {
    proc: Proc,
    lines: mpsc::Receiver<String>,
}

impl Reader {
    fn start(exe: &Path, mb: u32, rounds: u32) -> Reader {
        let mut cmd = Command::new(exe);
        cmd.args([mb.to_string(), rounds.to_string()])
            .stdout(Stdio::piped());
        let mut proc = Proc::spawn(&mut cmd);
        let out = proc.child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let r = Reader { proc, lines };
        assert_eq!(r.next(), "ready");
        r
    }

    fn next(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the program printed nothing for a minute")
    }

    /// Its rounds' sums from now on: all 0 while its memory is intact.
    fn check_rounds(&self, n: usize, what: &str) {
        // Lines printed before this point may be queued: read n more.
        for _ in 0..n {
            assert_eq!(self.next(), "0", "{what}: the program's memory changed");
        }
        assert!(!self.proc.exited(), "{what}: the program ended");
    }
}

/// AnonHugePages and size of the process's largest mapping.
fn largest_mapping(pid: u32) -> (u64, u64) {
    let t = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let v = hugetune_host::procfs::parse_smaps(&t);
    let m = v.iter().max_by_key(|m| m.end - m.start).unwrap();
    (m.anon_huge, m.end - m.start)
}

fn plan_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn permitted() -> bool {
    hugetune_attach::process::has_cap_sys_nice()
}

fn json_line(out: &str) -> serde_json::Value {
    let last = out.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn run_p_makes_a_running_programs_heap_huge_and_it_keeps_running_correctly() {
    let d = tempfile::tempdir().unwrap();
    let exe = build(d.path(), "reader", READER, false).unwrap();
    let r = Reader::start(&exe, 256, 0);
    r.check_rounds(1, "before");
    let (huge0, len) = largest_mapping(r.proc.pid);
    assert!(len >= 256 << 20, "{len}");
    assert!(
        huge0 < 32 << 20,
        "already {huge0} huge before: THP is not `madvise` here?"
    );
    let plan = plan_file(d.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");
    let pid = r.proc.pid.to_string();
    let (code, out, err) = hugetune_at(None, &["run", "-p", &pid, "--plan", &plan]);
    if !permitted() {
        assert_eq!(code, 1);
        assert!(err.contains("CAP_SYS_NICE"), "{err}");
        return;
    }
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("heap-large:") && out.contains("became huge"),
        "{out}"
    );
    let (huge1, _) = largest_mapping(r.proc.pid);
    // Most of it: the whole 2 MiB-aligned interior unless the kernel found no
    // free huge page for some (ENOMEM on a loaded machine).
    assert!(
        huge1 >= len * 3 / 4,
        "{huge1} of {len} huge after run -p: {out}{err}"
    );
    r.check_rounds(3, "after run -p");

    // A dynamically linked program's hugetlb plan, applied from outside: THP,
    // said so; --json carries the report.
    let r2 = Reader::start(&exe, 64, 0);
    let plan = plan_file(
        d.path(),
        "h",
        "hugetune-plan 1\nheap-large hugetlb-2m\nlayout round-up\n",
    );
    let pid2 = r2.proc.pid.to_string();
    let (code, out, err) = hugetune_at(None, &["run", "-p", &pid2, "--plan", &plan, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("hugetlb pages cannot be given"), "{err}");
    let j = json_line(&out);
    assert_eq!(j["pid"].as_u64(), Some(r2.proc.pid as u64));
    let huge = j["attach"]["huge_bytes"].as_u64().unwrap();
    assert!(huge >= 32 << 20, "{j}");
    assert_eq!(j["attach"]["ended"], "once");
    r2.check_rounds(2, "after the hugetlb plan as THP");
}

#[test]
fn a_static_program_takes_its_plan_from_outside_and_prints_the_same() {
    let d = tempfile::tempdir().unwrap();
    let Some(walk) = build(d.path(), "walk-static", WALK, true) else {
        return;
    };
    let walk_s = walk.display().to_string();
    let args = ["192", "30000000"];
    let plain = Command::new(&walk).args(args).output().unwrap();
    assert!(plain.status.success());
    let plan = plan_file(d.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");
    let db = d.path().join("a.db");
    let (code, out, err) = hugetune_at(
        Some(&db),
        &[
            "run", "--plan", &plan, "--json", "--", &walk_s, args[0], args[1],
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().next().unwrap_or(""),
        String::from_utf8_lossy(&plain.stdout).trim(),
        "the output changed: {err}"
    );
    assert!(err.contains("cannot enter this program"), "{err}");
    let j = json_line(&out);
    assert_eq!(j["exit_code"], 0);
    let a = &j["attach"][0];
    if !permitted() {
        assert_eq!(a["ended"], "error", "{j}");
        assert!(
            a["notes"][0].as_str().unwrap().contains("CAP_SYS_NICE"),
            "{j}"
        );
        return;
    }
    assert_eq!(a["ended"], "exited", "{j}");
    assert_eq!(a["categories"][0], "heap-large", "{j}");
    // Collapsed while it ran, verified in smaps before it exited.
    let huge = a["huge_bytes"].as_u64().unwrap();
    assert!(huge >= 32 << 20, "{huge} huge: {j}");
    assert!(j["huge_bytes"].as_u64().unwrap() >= huge);
    assert!(err.contains("applied from outside to process"), "{err}");
}

#[test]
fn failures_are_clear_and_leave_the_program_unharmed() {
    let d = tempfile::tempdir().unwrap();
    let exe = build(d.path(), "reader", READER, false).unwrap();
    let plan = plan_file(d.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");

    // A PID that names no process.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    // SAFETY: probing whether the PID exists.
    if unsafe { libc::kill(gone_pid as i32, 0) } != 0 {
        let (code, _, err) =
            hugetune_at(None, &["run", "-p", &gone_pid.to_string(), "--plan", &plan]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(&format!("no process {gone_pid}")), "{err}");
    }

    // No plan stored for the program: the error names it.
    let r = Reader::start(&exe, 16, 0);
    let pid = r.proc.pid.to_string();
    let db = d.path().join("empty.db");
    let (code, _, err) = hugetune_at(Some(&db), &["run", "-p", &pid]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no plan stored for") && err.contains(&exe.display().to_string()),
        "{err}"
    );
    // A plan that is not one.
    let bad = plan_file(d.path(), "bad", "hugetune-plan 1\nheap-large thp-3m\n");
    let (code, _, err) = hugetune_at(None, &["run", "-p", &pid, "--plan", &bad]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("line 2") && err.contains("thp-3m"), "{err}");
    r.check_rounds(1, "after the refused starts");
    drop(r);

    if !permitted() {
        return;
    }
    // The kernel refusing every collapse (injected): counted, not fatal.
    let r = Reader::start(&exe, 64, 0);
    let pid = r.proc.pid.to_string();
    let o = Command::new(HUGETUNE)
        .args(["run", "-p", &pid, "--plan", &plan, "--json"])
        .env("HUGETUNE_ATTACH_INJECT", "EAGAIN")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let j = json_line(&out);
    assert!(
        j["attach"]["failures"]["EAGAIN (injected)"]
            .as_u64()
            .unwrap()
            >= 1,
        "{j}"
    );
    assert_eq!(j["attach"]["collapsed_bytes"], 0, "{j}");
    r.check_rounds(2, "after refused collapses");
    drop(r);

    // A process that exits while it is watched: the watch ends with it.
    let r = Reader::start(&exe, 64, 20);
    let pid = r.proc.pid.to_string();
    let t0 = std::time::Instant::now();
    let (code, out, err) = hugetune_at(
        None,
        &[
            "run", "-p", &pid, "--plan", &plan, "--watch", "60s", "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "the watch outlived the process"
    );
    let j = json_line(&out);
    assert_eq!(j["attach"]["ended"], "exited", "{j}");
    for _ in 0..20 {
        assert_eq!(r.next(), "0", "the watched program's memory changed");
    }

    // Another user's process: refused, named.
    if common::is_root() {
        let r = Reader::start(&exe, 16, 0);
        let pid = r.proc.pid.to_string();
        let world = std::env::temp_dir().join(format!("attach-plan-{}", std::process::id()));
        std::fs::write(&world, "hugetune-plan 1\nheap-large thp-2m\n").unwrap();
        let mut c = Command::new(HUGETUNE);
        c.args(["run", "-p", &pid, "--plan"]).arg(&world);
        // SAFETY: setgid/setuid only, in the child before exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            c.pre_exec(|| {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let o = c.output().unwrap();
        let _ = std::fs::remove_file(&world);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot attach to process") && err.contains("another user"),
            "{err}"
        );
        r.check_rounds(1, "after another user's attempt");
    }
}

/// A static program's .bss (the anonymous mapping after its writable segment)
/// is `static`; the writable file segment itself (.data) the kernel refuses to
/// collapse, and it is reported as left alone, not as a failure.
const STATIC_DATA: &str = r#"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static char data[8 << 20] = {1};
static char bss[64 << 20];
int main(void) {
    memset(bss, 3, sizeof bss);
    memset(data, 2, sizeof data);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        sleep(1);
        unsigned long s = 0;
        for (size_t i = 0; i < sizeof bss; i += 4096) s += bss[i] + data[i % sizeof data];
        printf("%lu\n", s == (sizeof bss / 4096) * 5 ? 0ul : s);
        fflush(stdout);
    }
}
"#;

#[test]
fn a_static_programs_bss_is_static_and_its_data_segment_is_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = build(d.path(), "static-data", STATIC_DATA, true) else {
        return;
    };
    let mut cmd = Command::new(&exe);
    cmd.stdout(Stdio::piped());
    let mut proc = Proc::spawn(&mut cmd);
    let out = proc.child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines().map_while(Result::ok);
    assert_eq!(lines.next().as_deref(), Some("ready"));
    let plan = plan_file(d.path(), "p", "hugetune-plan 1\nstatic thp-2m\n");
    let (code, out, err) = hugetune_at(
        None,
        &[
            "run",
            "-p",
            &proc.pid.to_string(),
            "--plan",
            &plan,
            "--json",
        ],
    );
    if !permitted() {
        assert_eq!(code, 1, "{err}");
        return;
    }
    assert_eq!(code, 0, "{out}{err}");
    let j = json_line(&out);
    let ranges = j["attach"]["ranges"].as_array().unwrap();
    let bss = ranges
        .iter()
        .find(|r| r["huge_bytes"].as_u64().unwrap() > 0)
        .unwrap_or_else(|| panic!("nothing became huge: {j}"));
    assert_eq!(bss["category"], "static");
    // 64 MiB at an unaligned start: at least 60 MiB of whole huge pages.
    assert!(bss["huge_bytes"].as_u64().unwrap() >= 60 << 20, "{j}");
    assert!(
        j["attach"]["skipped"]
            .as_object()
            .is_some_and(|m| m.keys().any(|k| k.contains("writable file segments"))),
        "{j}"
    );
    assert_eq!(
        j["attach"]["failures"].as_object().map_or(0, |m| m.len()),
        0,
        "{j}"
    );
    assert_eq!(
        lines.next().as_deref(),
        Some("0"),
        "the program's memory changed"
    );
    assert!(!proc.exited());
}

/// `run --plan FILE` on a program the library can enter: the library applies
/// the file (its summary in `--json`), nothing from outside.
#[test]
fn a_plan_file_for_a_dynamic_program_goes_to_the_runtime_library() {
    let d = tempfile::tempdir().unwrap();
    let exe = build(d.path(), "walk", WALK, false).unwrap();
    let plan = plan_file(d.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");
    let exe_s = exe.display().to_string();
    let (code, out, err) = hugetune_at(
        None,
        &["run", "--plan", &plan, "--json", "--", &exe_s, "16", "1000"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let j = json_line(&out);
    assert_eq!(j["attach"].as_array().map(|a| a.len()), Some(0), "{j}");
    let s = &j["summaries"][0];
    assert!(
        s["backed"]["thp-2m"]["bytes"].as_u64().unwrap() >= 16 << 20,
        "{j}"
    );
}
