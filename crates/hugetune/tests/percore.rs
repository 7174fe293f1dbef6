//! Per-core TLBs end to end: `hugetune record` keeps the CPUs the command may
//! use (its affinity) in the bundle, and `analyze` places the program's threads
//! on that many cores (docs/model.md §3, "Per-core TLBs").

mod common;

use common::{qemu_or_skip, HUGETUNE, LIB, PLUGIN, WORK};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Records a 2-thread cg under qemu, with `taskset -c CPUS` when given, and
/// returns `analyze --json` of the bundle.
fn record_and_analyze(dir: &Path, taskset: Option<&str>) -> Value {
    let bundle = dir.join("cg.htb");
    let db = dir.join("h.db");
    let mut c = match taskset {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus, HUGETUNE]);
            c
        }
        None => Command::new(HUGETUNE),
    };
    let o = c
        .arg("--db")
        .arg(&db)
        .args(["record", "--refs", "qemu", "-o"])
        .arg(&bundle)
        .args([
            "--",
            WORK,
            "cg",
            "--size",
            "1M",
            "--threads",
            "2",
            "--iters",
            "1",
        ])
        .env("HUGETUNE_RUNTIME_LIB", LIB)
        .env("HUGETUNE_QEMU_PLUGIN", PLUGIN)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(HUGETUNE)
        .arg("--db")
        .arg(&db)
        .args(["analyze", "--no-db", "--json"])
        .arg(&bundle)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(err.contains("2 threads over "), "{err}");
    v
}

fn cpus_here() -> Vec<usize> {
    hugetune_capture::runner::allowed_cpus()
}

#[test]
fn two_threads_run_on_two_cores_with_per_core_walks() {
    let Some(_) = qemu_or_skip() else { return };
    if cpus_here().len() < 2 {
        eprintln!(
            "SKIPPED: this test needs two CPUs (it has {:?})",
            cpus_here()
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let v = record_and_analyze(d.path(), None);
    let n = cpus_here().len() as u64;
    assert_eq!(v["meta"]["affinity"].as_array().unwrap().len() as u64, n);
    let c = &v["result"]["cores"];
    assert_eq!(c["threads"], 2, "{c}");
    assert_eq!(c["cpus"], n, "{c}");
    assert!(
        c["source"].as_str().unwrap().starts_with("affinity "),
        "{c}"
    );
    let refs = c["refs"].as_array().unwrap();
    assert_eq!(refs.len(), 2, "two cores: {c}");
    assert!(refs.iter().all(|r| r.as_u64().unwrap() > 10_000), "{c}");
    // The work spread over both cores; how much their savings overlap is at
    // most what the native run kept busy (this machine may be loaded).
    let spread = c["refs_concurrency"].as_f64().unwrap();
    assert!(spread > 1.0 && spread <= 2.0, "{c}");
    let busy = c["busy_cpus"].as_f64().unwrap();
    let k = c["concurrency"].as_f64().unwrap();
    assert!(busy > 0.0, "{c}");
    assert!((k - spread.min(busy).max(1.0)).abs() < 1e-9, "{c}");
    // Every mapping has each core's counts, and they add up to its total.
    for m in v["result"]["mappings"].as_array().unwrap() {
        let pc = m["per_core"].as_array().unwrap();
        assert_eq!(pc.len(), 2, "{}", m["name"]);
        let walks: u64 = pc.iter().map(|x| x["walks"].as_u64().unwrap()).sum();
        let cells: u64 = m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["walks"].as_u64().unwrap())
            .sum();
        assert_eq!(walks, cells, "{}", m["name"]);
    }
}

#[test]
fn under_taskset_one_cpu_both_threads_share_one_core() {
    let Some(_) = qemu_or_skip() else { return };
    let cpu = cpus_here()[0].to_string();
    let d = tempfile::tempdir().unwrap();
    let v = record_and_analyze(d.path(), Some(&cpu));
    assert_eq!(v["meta"]["affinity"], serde_json::json!([cpus_here()[0]]));
    let c = &v["result"]["cores"];
    assert_eq!(c["threads"], 2, "{c}");
    assert_eq!(c["cpus"], 1, "{c}");
    assert_eq!(c["source"], format!("affinity {cpu}"));
    assert_eq!(c["refs"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(c["concurrency"], 1.0);
    for m in v["result"]["mappings"].as_array().unwrap() {
        assert!(m.get("per_core").is_none(), "one TLB: {}", m["name"]);
    }
}
