//! `hugetune rank`: one small workload end to end (profile with the QEMU plugin,
//! predictions, interleaved runs of every base mapping). Checks the report's
//! structure and its arithmetic, never its timings. Skipped (with a message) where
//! qemu-x86_64 is not installed; scripts/setup.sh installs it.

use serde_json::Value;
use std::process::Command;

const HUGETUNE: &str = env!("CARGO_BIN_EXE_hugetune");
const WORK: &str = env!("HUGETUNE_BUILT_WORK");

fn qemu_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("qemu-x86_64").is_file()))
}

#[test]
fn rank_reports_predicted_and_measured_pmb_for_every_base_mapping() {
    if !qemu_installed() {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh does)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let o = Command::new(HUGETUNE)
        .arg("--db")
        .arg(&db)
        .args([
            "rank",
            "--runs",
            "2",
            "--max-runs",
            "4",
            "--pmb-ci",
            "0.001",
            "--cpu",
            &last_cpu().to_string(),
            "--simulate",
            "--json",
            "--name",
            "t",
            "--",
        ])
        .arg(WORK)
        .args(["randmem", "--size", "16M", "--accesses", "200000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["name"], "t");
    // 2 rounds at least, more while a measured PMB is uncertain, 4 at most
    let runs = r["runs"].as_u64().unwrap();
    assert!((2..=4).contains(&runs), "{runs}");
    assert_eq!(r["cpu"].as_u64(), Some(last_cpu() as u64));
    let maps = r["mappings"].as_array().unwrap();
    assert_eq!(maps[0]["label"], "all-small", "all-small comes first");
    assert!(
        maps.iter()
            .any(|m| m["label"] == "heap-large:hugetlb" || m["label"] == "heap-large:thp"),
        "{maps:?}"
    );
    // mTHP sizes are measured too where hugetune may set their controls for
    // the runs (root): 64 KB folios really backed the block.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root
        && std::path::Path::new("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled")
            .exists()
    {
        assert!(
            maps.iter().any(|m| m["label"] == "heap-large:thp-64k"
                && m["huge_bytes"].as_u64().unwrap_or(0) >= 8 << 20),
            "{maps:?}"
        );
    }
    let mut pairs = Vec::new();
    for m in maps {
        for k in ["predicted_pmb", "measured_pmb"] {
            let v = m[k].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&v), "{k} = {v}");
        }
        let (lo, med, hi) = (
            m["measured_min_s"].as_f64().unwrap(),
            m["measured_median_s"].as_f64().unwrap(),
            m["measured_max_s"].as_f64().unwrap(),
        );
        assert!(lo > 0.0 && lo <= med && med <= hi, "{lo} {med} {hi}");
        // The exact simulation ran and sees the same references.
        assert!(m["sim_walks"].as_u64().is_some(), "{m}");
        pairs.push((
            m["predicted_pmb"].as_f64().unwrap(),
            m["measured_pmb"].as_f64().unwrap(),
        ));
    }
    assert_eq!(maps[0]["predicted_pmb"], 0.0);
    assert_eq!(maps[0]["measured_pmb"], 0.0);
    assert!(maps.iter().any(|m| m["predicted_pmb"] == 100.0));
    let mean = pairs.iter().map(|(p, m)| (p - m).abs()).sum::<f64>() / pairs.len() as f64;
    let err = r["ranking_error"].as_f64().unwrap();
    assert!((err - mean).abs() < 1e-9, "{err} vs {mean}");
    // the bootstrap intervals hold the point estimates
    let u = &r["uncertainty"];
    let ci = u["pmb_ci"].as_array().unwrap();
    assert_eq!(ci.len(), maps.len());
    for (m, c) in maps.iter().zip(ci) {
        let (lo, hi) = (c[0].as_f64().unwrap(), c[1].as_f64().unwrap());
        let v = m["measured_pmb"].as_f64().unwrap();
        assert!(lo <= v + 1e-9 && v <= hi + 1e-9, "{lo} {v} {hi}");
    }
    let (lo, hi) = (
        u["error_ci"][0].as_f64().unwrap(),
        u["error_ci"][1].as_f64().unwrap(),
    );
    assert!(lo <= hi && lo >= 0.0, "{u}");
}

/// The last CPU this process may run on (the rank command pins runs there).
fn last_cpu() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = s
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let last = list.rsplit([',', '-']).next().unwrap();
    last.parse().unwrap()
}

#[test]
fn rank_refuses_bad_arguments_before_profiling() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["--pmb-ci", "0"], "--pmb-ci"),
        (vec!["--pmb-ci", "nan"], "--pmb-ci"),
        (vec!["--cpu", "100000"], "--cpu 100000"),
    ] {
        let o = Command::new(HUGETUNE)
            .arg("--db")
            .arg(dir.path().join("h.db"))
            .arg("rank")
            .args(&args)
            .arg("--")
            .arg(WORK)
            .args(["randmem", "--size", "16M"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn rank_refuses_a_program_without_mappable_data() {
    if !qemu_installed() {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh does)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(HUGETUNE)
        .arg("--db")
        .arg(dir.path().join("h.db"))
        .args(["rank", "--runs", "1", "--"])
        .arg("/bin/true")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("hugetune: error:"), "{e}");
}
