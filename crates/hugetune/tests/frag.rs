//! `hugetune frag` end to end: JSON and HTML output, clear errors for bad input,
//! and kernel state restored after --try and after Ctrl-C during --events.

mod common;
use std::path::Path;
use std::time::Duration;

fn run(args: &[&str]) -> (i32, String, String) {
    common::hugetune_at(None, args)
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn json_and_html() {
    let (rc, out, err) = run(&["frag", "--json", "--no-scan"]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["snapshot"];
    assert_eq!(s["format"], 1);
    assert!(!s["zones"].as_array().unwrap().is_empty());
    assert!(s["totals"]["allocatable_2m_now"].is_u64());
    assert!(s["zones"][0]["orders"][0]["unusable_index"].is_i64());
    let d = tempfile::tempdir().unwrap();
    let h = d.path().join("f.html");
    let (rc, _, err) = run(&["frag", "--html", h.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    let html = std::fs::read_to_string(&h).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.matches("<svg").count() >= 3);
    assert!(!html.contains("<script"));
    if root() {
        assert!(html.contains("Pageblock map"));
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    for (args, want) in [
        (&["frag", "--try", "1", "--size", "3M"][..], "2M or 1G"),
        (&["frag", "--try", "0"][..], "at least one page"),
        (&["frag", "--events", "soon"][..], "duration"),
        (
            &["frag", "--record", "/nonexistent-dir/x", "--duration", "1s"][..],
            "/nonexistent-dir/x",
        ),
        (&["frag", "--watch", "0"][..], "positive"),
    ] {
        let (rc, _, err) = run(args);
        assert_ne!(rc, 0, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

fn pool(kb: u64) -> u64 {
    std::fs::read_to_string(format!(
        "/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages"
    ))
    .unwrap()
    .trim()
    .parse()
    .unwrap()
}

#[test]
fn try_restores_the_pool() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (rc, out, err) = run(&["frag", "--no-scan", "--try", "1", "--size", "2M", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = &v["try"];
    assert_eq!(t["pool_after"], t["pool_before"]);
    assert!(t["given"].as_u64().unwrap() <= 1);
    let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    assert_eq!(pool(2048), t["pool_before"].as_u64().unwrap());
}

fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/kernel/tracing"))
}

/// Starts `hugetune frag --events 60s` and waits for its tracefs instance:
/// whether tracefs was mounted before, the child, its pid and its instance.
fn events_session() -> (bool, std::process::Child, u32, std::path::PathBuf) {
    let before = {
        let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
        tracefs_mounted()
    };
    let child = common::signalable()
        .args(["frag", "--no-scan", "--events", "60s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until its instance exists (it may first wait for the lock).
    let inst = Path::new("/sys/kernel/tracing/instances").join(format!("hugetune-{pid}"));
    let t0 = std::time::Instant::now();
    while !inst.exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(inst.exists(), "the session started");
    (before, child, pid, inst)
}

#[test]
fn ctrl_c_during_events_restores_tracefs() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (before, child, pid, inst) = events_session();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("restored"), "{err}");
    assert!(!err.contains("could not"), "{err}");
    let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    assert_eq!(tracefs_mounted(), before, "tracefs mount state restored");
    assert!(!inst.exists(), "instance removed");
}

#[test]
fn a_killed_event_session_is_undone_by_hugetune_restore() {
    if !root() {
        eprintln!("SKIPPED: needs root");
        return;
    }
    let (before, mut child, pid, inst) = events_session();
    // A kill runs nothing of hugetune's: the instance (and a mount) stay.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert!(inst.exists());
    let (code, out, err) = run(&["restore"]);
    assert_eq!(code, 0, "{out}{err}");
    // Another test's hugetune may have undone it first (any user of the lock does).
    assert!(
        out.contains(&format!("left by hugetune process {pid}"))
            || out.contains("nothing to restore"),
        "{out}"
    );
    assert!(!inst.exists(), "instance removed: {out}");
    let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    assert_eq!(tracefs_mounted(), before, "tracefs mount state restored");
}
