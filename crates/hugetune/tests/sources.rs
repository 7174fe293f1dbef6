//! `hugetune record --refs perf|damon|auto` on whatever this machine has: a bundle
//! where the source can run, a clear error naming why where it cannot (this
//! machine: no PMU, no DAMON for processes), and the kernel left as it was.

mod common;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

use common::{hugetune, HUGETUNE, WORK};

fn record(dir: &Path, refs: &str) -> (i32, String, std::path::PathBuf) {
    let out = dir.join(format!("{refs}.htb"));
    let o = out.to_str().unwrap();
    let args = [
        "record", "--refs", refs, "-o", o, "--", WORK, "chase", "--size", "2M", "--iters", "4",
    ];
    let (code, _, err) = hugetune(&dir.join("h.db"), &args);
    (code, err, out)
}

fn bundle_meta(p: &Path) -> Value {
    let s = hugetune_format::bundle::read(p).unwrap();
    serde_json::from_slice(hugetune_format::bundle::section(&s, "meta").unwrap()).unwrap()
}

fn analyze(dir: &Path, bundle: &Path) -> (i32, String) {
    let (code, _, err) = hugetune(&dir.join("h.db"), &["analyze", bundle.to_str().unwrap()]);
    (code, err)
}

#[test]
fn perf_records_where_the_pmu_samples_addresses_and_says_why_not_elsewhere() {
    let d = tempfile::tempdir().unwrap();
    let support = hugetune_capture::perf::sampling_support();
    let (code, err, out) = record(d.path(), "perf");
    match support.plan {
        None => {
            assert_ne!(code, 0);
            assert!(
                err.contains("perf cannot sample data addresses here"),
                "{err}"
            );
            assert!(!support.problems.is_empty());
            assert!(!out.exists());
        }
        Some(_) => {
            assert_eq!(code, 0, "{err}");
            let m = bundle_meta(&out);
            assert_eq!(m["ref_source"], "perf");
            assert_eq!(m["ref_stream"]["header"]["sampling"], "time");
            assert!(m["ref_stream"]["header"]["period"].as_u64().is_some());
            // Analysed under the independent reference model (docs/model.md §3.2).
            let (code, err) = analyze(d.path(), &out);
            assert_eq!(code, 0, "{err}");
            assert!(err.contains("time samples"), "{err}");
        }
    }
}

#[test]
fn damon_records_where_it_can_and_leaves_the_kernel_as_it_was() {
    let root = Path::new(hugetune_capture::damon::DAMON_ADMIN);
    let nr = root.join("kdamonds/nr_kdamonds");
    let before = std::fs::read_to_string(&nr).ok();
    let d = tempfile::tempdir().unwrap();
    let available = hugetune_capture::damon::available(root);
    let (code, err, out) = record(d.path(), "damon");
    match available {
        Err(why) => {
            assert_ne!(code, 0);
            assert!(
                err.contains("DAMON cannot monitor the program here"),
                "{err}"
            );
            eprintln!("DAMON here: {why}");
        }
        Ok(()) => {
            assert_eq!(code, 0, "{err}");
            let m = bundle_meta(&out);
            assert_eq!(m["ref_source"], "damon");
            let s = hugetune_format::bundle::read(&out).unwrap();
            assert!(hugetune_format::bundle::section(&s, "damon").is_ok());
            // Too short a run for a snapshot (one every 500 ms) is refused
            // by name; a longer one is a frequency estimate (tests/damon.rs).
            let (code, err) = analyze(d.path(), &out);
            assert!(code == 0 || err.contains("DAMON took no snapshot"), "{err}");
        }
    }
    assert_eq!(std::fs::read_to_string(&nr).ok(), before);
}

#[test]
fn auto_takes_the_best_source_this_machine_has() {
    let d = tempfile::tempdir().unwrap();
    let (code, err, out) = record(d.path(), "auto");
    assert_eq!(code, 0, "{err}");
    let want = if hugetune_capture::perf::sampling_support().plan.is_some() {
        "perf"
    } else if hugetune_capture::qemu::find_qemu().is_some() {
        "qemu"
    } else {
        "valgrind-lackey"
    };
    assert_eq!(bundle_meta(&out)["ref_source"], want, "{err}");
}

/// A wrapper script that execs the real program: valgrind cannot follow it, and
/// `record` says so (naming the qemu source, which follows launchers) instead of
/// matching one program's allocations with another's references; under qemu the
/// wrapper is followed into the program (docs/launchers.md).
#[test]
fn a_wrapper_script_is_refused_under_valgrind_and_followed_under_qemu() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("wrapper.sh");
    std::fs::write(&script, format!("#!/bin/sh\nexec {WORK} chase --size 1M\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |refs: &str| {
        let o = Command::new(HUGETUNE)
            .arg("--db")
            .arg(d.path().join("h.db"))
            .args(["record", "--refs", refs, "-o"])
            .arg(d.path().join(format!("{refs}.htb")))
            .arg("--")
            .arg(&script)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run("valgrind");
    assert_ne!(code, Some(0));
    assert!(
        err.contains("is a launcher") && err.contains("--refs qemu"),
        "{err}"
    );
    if hugetune_capture::qemu::find_qemu().is_some() {
        let (code, err) = run("qemu");
        assert_eq!(code, Some(0), "{err}");
        let out = d.path().join("qemu.htb");
        let program = bundle_meta(&out)["program"]["path"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(program.ends_with("hugetune-work"), "{program}: {err}");
    }
}
