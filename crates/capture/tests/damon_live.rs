//! DAMON on the real kernel (root, /sys/kernel/mm/damon/admin). Skips with a
//! printed reason where DAMON cannot monitor a process here (no DAMON sysfs, not
//! root, a kdamond that someone else runs, a kernel without vaddr monitoring);
//! `HUGETUNE_REQUIRE_DAMON=1` turns that skip into a failure, for machines where
//! it must run. The session holds the kernel-state lock, so parallel tests and
//! other hugetune users never collide.

use hugetune_capture::damon::{self, DamonOptions, DAMON_ADMIN};
use hugetune_host::kernel_state::lock_kernel_state;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> &'static Path {
    Path::new(DAMON_ADMIN)
}

/// `nr_kdamonds` at rest: read under the lock, so not in the middle of a session.
fn resting_nr_kdamonds() -> Option<String> {
    let _lock = lock_kernel_state().unwrap();
    std::fs::read_to_string(root().join("kdamonds/nr_kdamonds"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// `Some(reason)` when the test must skip.
fn skip_reason() -> Option<String> {
    let reason = {
        let _lock = lock_kernel_state().unwrap();
        damon::available(root()).err()
    }?;
    if std::env::var_os("HUGETUNE_REQUIRE_DAMON").is_some_and(|v| v == "1") {
        panic!("HUGETUNE_REQUIRE_DAMON=1 but DAMON is unavailable: {reason}");
    }
    eprintln!("skipping the live DAMON test: {reason}");
    Some(reason)
}

fn workload() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("release/hugetune-work")
}

/// Whatever `available` says about this machine, a session that it refuses
/// changes nothing.
#[test]
fn damon_refusal_on_this_machine_changes_nothing() {
    let before = resting_nr_kdamonds();
    let verdict = {
        let _lock = lock_kernel_state().unwrap();
        damon::available(root())
    };
    eprintln!("DAMON here: {verdict:?}");
    if let Err(reason) = verdict {
        assert!(!reason.is_empty());
        let e = damon::record_pid(std::process::id(), &DamonOptions::default()).unwrap_err();
        assert!(format!("{e:#}").contains("DAMON unavailable"), "{e:#}");
    }
    assert_eq!(resting_nr_kdamonds(), before);
}

#[test]
fn damon_live_randmem_256m_regions_are_seen_and_state_restored() {
    if skip_reason().is_some() {
        return;
    }
    let bin = workload();
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --release` in the workspace first",
        bin.display()
    );
    let before = resting_nr_kdamonds();
    let mut cmd = Command::new(&bin);
    cmd.args(["randmem", "--size", "256M", "--iters", "20"])
        .stdout(Stdio::null());
    let (cap, status) = damon::record_command(cmd, &DamonOptions::default()).unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(resting_nr_kdamonds(), before);
    assert!(!cap.snapshots.is_empty(), "no snapshot taken");
    for s in &cap.snapshots {
        eprintln!(
            "t={:>6} ms regions={:>4} monitored={:>6} MiB accessed={:>6} MiB",
            s.t_ms,
            s.summary.nr_regions,
            s.summary.bytes >> 20,
            s.summary.bytes_accessed >> 20
        );
    }
    let best = cap
        .snapshots
        .iter()
        .map(|s| s.summary.bytes_accessed)
        .max()
        .unwrap();
    // The 256 MiB buffer is accessed at random throughout: every region inside
    // it sees accesses, so at least about 256 MiB must show nr_accesses > 0.
    assert!(
        best >= 240 << 20,
        "at most {} MiB seen accessed in {} snapshots",
        best >> 20,
        cap.snapshots.len()
    );
    let json = serde_json::to_string(&cap).unwrap();
    assert_eq!(damon::DamonCapture::from_json(&json).unwrap(), cap);
}
