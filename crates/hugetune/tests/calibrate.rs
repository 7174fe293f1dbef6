//! `hugetune calibrate --quick`: the structure and sanity of what it measures, never
//! its timings. The tool takes the kernel-state lock itself (other tests that
//! change pools or THP wait for it), and puts the pools back.

mod common;
use serde_json::Value;
use std::process::Command;

const HUGETUNE: &str = env!("CARGO_BIN_EXE_hugetune");

fn positive(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Free page reporting's delay, which calibrate holds off while it measures.
const REPORTING: &str = "/sys/module/page_reporting/parameters/min_free_ms";

/// (hugetlb pool directory, nr_hugepages) pairs, the THP mode and free page
/// reporting's delay.
type KernelState = (Vec<(String, String)>, Option<String>, Option<String>);

/// Pool sizes, the THP mode and free page reporting at rest: read under the
/// kernel-state lock, so a concurrent test's temporary values are not seen.
fn resting_state() -> Option<KernelState> {
    if !is_root() {
        return None;
    }
    let _lock = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    Some((
        pools(),
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok(),
        std::fs::read_to_string(REPORTING).ok(),
    ))
}

fn pools() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/kernel/mm/hugepages")
        .into_iter()
        .flatten()
        .flatten()
    {
        let nr = std::fs::read_to_string(e.path().join("nr_hugepages")).unwrap_or_default();
        out.push((e.file_name().to_string_lossy().into_owned(), nr));
    }
    out.sort();
    out
}

#[test]
fn quick_calibration_is_complete_and_sane() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let out_file = d.path().join("cal.json");
    let before = resting_state();
    let out = Command::new(HUGETUNE)
        .arg("--db")
        .arg(&db)
        .args([
            "calibrate",
            "--quick",
            "--spread",
            "5s",
            "--no-db",
            "--json",
            "--out",
        ])
        .arg(&out_file)
        .output()
        .expect("run hugetune");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "calibrate failed:\n{stderr}");
    let c: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    // --out wrote the same thing; --no-db stored nothing.
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(written, c);
    assert!(!db.exists(), "--no-db created the database");

    let l2 = c["l2_hit_ns"].as_array().expect("l2_hit_ns");
    assert_eq!(l2.len(), 3);
    for (i, v) in l2.iter().enumerate() {
        positive(v, &format!("l2_hit_ns[{i}]"));
    }
    let curves = c["walk_curve"].as_array().expect("walk_curve");
    assert_eq!(curves.len(), 3);
    for (i, curve) in curves.iter().enumerate() {
        let pts = curve.as_array().unwrap();
        assert!(!pts.is_empty(), "walk curve {i} is empty");
        let xs: Vec<f64> = pts
            .iter()
            .map(|p| {
                positive(&p[1], &format!("walk_curve[{i}] cost"));
                positive(&p[0], &format!("walk_curve[{i}] page-table bytes"))
            })
            .collect();
        assert!(
            xs.windows(2).all(|w| w[0] < w[1]),
            "walk curve {i} not sorted: {xs:?}"
        );
    }
    let faults: Vec<(String, f64)> = c["fault_ns"]
        .as_array()
        .expect("fault_ns")
        .iter()
        .map(|e| {
            let name = e[0].as_str().expect("backing name").to_string();
            let v = positive(&e[1], &name);
            (name, v)
        })
        .collect();
    let fault = |n: &str| faults.iter().find(|(k, _)| k == n).map(|&(_, v)| v);
    let base = fault("4k").expect("the 4 KB fault cost is always measured");
    // A 2 MB fault zeroes 512 times the memory of a 4 KB one.
    for big in ["thp-2m", "hugetlb-2m"] {
        if let Some(v) = fault(big) {
            assert!(v > base, "{big} fault {v} ns not above 4k fault {base} ns");
        }
    }
    let sources = c["sources"].as_array().expect("sources");
    for kind in [
        "l2-hit 4k",
        "walk 4k",
        "walk 1g",
        "fault 4k",
        "walk overlap",
    ] {
        assert!(
            sources
                .iter()
                .any(|s| s.as_str().unwrap_or("").starts_with(kind)),
            "no source line for {kind}: {sources:?}"
        );
    }
    // The source line of one figure, by its kind and what.
    let source = |prefix: &str| {
        sources
            .iter()
            .filter_map(|s| s.as_str())
            .find(|s| s.starts_with(prefix))
            .unwrap()
    };
    // A fault's figure is its first touch and its unmap (a program pays both
    // within its run); the source gives the unmap's share, part of the whole.
    let f4k = source("fault 4k");
    assert!(f4k.contains("first touch and unmap of"), "{f4k}");
    let unmap_us: f64 = f4k
        .split("the unmap ")
        .nth(1)
        .and_then(|t| t.split(" µs").next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no unmap figure in {f4k}"));
    assert!(
        unmap_us > 0.0 && unmap_us * 1e3 < base,
        "unmap {unmap_us} µs against the whole fault's {base} ns"
    );
    // The walk overlap's ends: measured (a chase hides nothing behind itself,
    // so the loads' overlap is at least 1) or said why not.
    match &c["overlap"] {
        Value::Null => assert!(
            sources.iter().any(|s| s
                .as_str()
                .unwrap_or("")
                .starts_with("walk overlap: not measured")),
            "{sources:?}"
        ),
        o => {
            assert!(o["walk_concurrency"].as_f64() >= Some(1.0), "{o}");
            positive(&o["independent_ns_per_walk"], "independent_ns_per_walk");
            positive(&o["dependent_walk"]["median"], "the chase's walk");
            positive(&o["independent_walk"]["median"], "the loads' saving");
        }
    }
    assert!(!c["machine"].as_str().unwrap_or("").is_empty());
    assert!(c["created"].as_str().unwrap_or("").ends_with('Z'));
    assert_eq!(c["quick"], Value::Bool(true));
    // --spread: the walk curve's footprints measured in two rounds or more,
    // each figure the median of every round's repetitions.
    assert_eq!(c["spread_s"].as_f64(), Some(5.0));
    // The 4 KB walks and the overlap on fresh memory, a child process per
    // repetition (the default; `--same-process` turns it off).
    assert_eq!(c["fresh_memory"], Value::Bool(true));
    let walk4k = source("walk 4k");
    assert!(walk4k.contains(" rounds over "), "{walk4k}");
    for f in c["figures"].as_array().unwrap() {
        if f["kind"] == "walk" && f["what"] == "4k" && !f["ns"].is_null() {
            assert!(f["ns"]["reps"].as_u64() >= Some(10), "{f}");
        }
    }
    for m in c["raw"].as_array().expect("raw") {
        assert!(m["reps"].as_u64().unwrap() >= 5, "{m}");
        assert!(m["min"].as_f64() <= m["median"].as_f64());
        assert!(m["median"].as_f64() <= m["max"].as_f64());
    }

    // Free page reporting was held off while measuring (where this kernel has
    // it), and pools, THP mode and reporting are as before.
    if is_root() && std::path::Path::new(REPORTING).exists() {
        assert!(
            stderr.contains("free page reporting held off while measuring"),
            "{stderr}"
        );
    }
    assert_eq!(resting_state(), before);
}

/// A calibration whose figures carry their repetitions' spread gives every
/// prediction of `analyze` an interval (docs/model.md §4.1) that holds its
/// speedup, and the huge mappings a wide one where the 4 KB walk cost ranges
/// over 3× between repetitions; one without spreads gives none. Skipped
/// without qemu-x86_64 (the profile is recorded).
#[test]
fn a_calibrations_spread_gives_each_prediction_an_interval() {
    if hugetune_capture::qemu::find_qemu().is_none() {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh installs it)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let bundle = d.path().join("r.htb");
    let run = |args: &[&str]| common::hugetune(&db, args);
    let (code, _, err) = run(&[
        "record",
        "--refs",
        "qemu",
        "-o",
        bundle.to_str().unwrap(),
        "--",
        common::WORK,
        "randmem",
        "--random-pct",
        "100",
        "--accesses",
        "400000",
        "--size",
        "32M",
        "--place",
        "heap-large",
    ]);
    assert_eq!(code, 0, "record failed: {err}");
    let mut cal = common::spread_calibration();
    common::store_calibration(&db, &cal);
    let analyze = |json: bool| {
        let mut args = vec!["analyze", "--no-db", bundle.to_str().unwrap()];
        if json {
            args.insert(1, "--json");
        }
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "analyze failed: {err}");
        out
    };
    let v: Value = serde_json::from_str(&analyze(true)).unwrap();
    let intervals = v["intervals"].as_array().expect("intervals");
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(intervals.len(), preds.len());
    for p in preds {
        let i = intervals
            .iter()
            .find(|i| i["label"] == p["label"])
            .unwrap_or_else(|| panic!("no interval for {}", p["label"]));
        let f = |k: &str| i[k].as_f64().unwrap();
        let x = p["predicted_speedup"].as_f64().unwrap();
        assert!(
            f("low") <= f("calibration_low")
                && f("calibration_low") <= x
                && x <= f("calibration_high")
                && f("calibration_high") <= f("high"),
            "{p} {i}"
        );
    }
    let best = &preds[0];
    assert!(
        best["label"].as_str().unwrap().contains("heap-large"),
        "{best}"
    );
    let i = intervals
        .iter()
        .find(|i| i["label"] == best["label"])
        .unwrap();
    let x = best["predicted_speedup"].as_f64().unwrap();
    assert!(
        i["calibration_low"].as_f64().unwrap() < x && x < i["calibration_high"].as_f64().unwrap(),
        "{best} {i}"
    );
    assert!(analyze(false).contains("interval (speedup with every calibrated figure"));
    // Without spreads: no intervals, and the table is not printed.
    cal["figures"] = serde_json::json!([]);
    cal["created"] = "2026-12-07T01:00:00Z".into();
    common::store_calibration(&db, &cal);
    let v: Value = serde_json::from_str(&analyze(true)).unwrap();
    assert!(v.get("intervals").is_none(), "{}", v["intervals"]);
    assert!(!analyze(false).contains("interval (speedup"));
}

#[test]
fn a_stored_calibration_reads_back_and_a_corrupt_one_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let run = |args: &[&str]| common::hugetune(&db, args);
    let (code, _, err) = run(&["calibrate", "--show"]);
    assert_eq!(code, 1);
    assert!(err.contains("no calibration of this machine"), "{err}");
    // A spread that is no duration, or longer than an hour: clear errors,
    // before anything is measured.
    for (bad, says) in [
        ("5 minutes", "unit is ms, s, m or h"),
        ("2h", "at most an hour"),
    ] {
        let (code, _, err) = run(&["calibrate", "--quick", "--no-db", "--spread", bad]);
        assert!(code == 1 || code == 2, "{code}: {err}");
        assert!(err.contains(says), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let cal = serde_json::json!({
        "l2_hit_ns": [2.0, 15.0, 15.0],
        "walk_curve": [[[131072.0, 7.0], [2097152.0, 95.0]], [[131072.0, 7.0]], [[131072.0, 7.0]]],
        "fault_ns": [["4k", 2000.0], ["thp-2m", 90000.0]],
        "sources": ["by hand"],
        "machine": "test",
        "created": "2025-01-01T00:00:00Z"
    });
    common::store_calibration(&db, &cal);
    let (code, out, err) = run(&["calibrate", "--show", "--json"]);
    assert_eq!(code, 0, "{err}");
    let back: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(back["walk_curve"], cal["walk_curve"]);
    let (code, out, _) = run(&["calibrate", "--show"]);
    assert_eq!(code, 0);
    assert!(out.contains("95.0 ns") && out.contains("by hand"), "{out}");
    // Unusable figures: a clear error, not a panic or a silent default.
    let bad = serde_json::json!({
        "l2_hit_ns": [2.0, -1.0, 15.0],
        "walk_curve": [[[131072.0, 7.0]], [[131072.0, 7.0]], [[131072.0, 7.0]]],
        "fault_ns": [], "sources": [], "machine": "x", "created": "x"
    });
    common::store_calibration(&db, &bad);
    let (code, _, err) = run(&["calibrate", "--show"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("stored calibration") && err.contains("L2-hit"),
        "{err}"
    );
}
