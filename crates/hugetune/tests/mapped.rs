//! Memory the program maps itself (issue 19, item 1): a workload whose hot buffer
//! is its own anonymous mmap (`--place mmap`) is profiled, planned, backed at mmap
//! time by the runtime library and proven huge, with the program's output the same
//! as a plain run's.

mod common;
use common::hugetune;

use serde_json::Value;
use std::process::Command;

const WORK: &str = env!("HUGETUNE_BUILT_WORK");

fn checksum(out: &[u8]) -> String {
    let v: Value = serde_json::from_slice(out)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)));
    v["checksum"].as_str().unwrap().to_string()
}

#[test]
fn optimize_backs_the_programs_own_mapping() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("m.db");
    let bundle = d.path().join("m.htb");
    let work = [
        "chase",
        "--size",
        "16M",
        "--place",
        "mmap",
        "--accesses",
        "2000000",
    ];
    let mut args = vec![
        "optimize",
        "--runs",
        "1",
        "--max-runs",
        "1",
        "--json",
        "--bundle",
        bundle.to_str().unwrap(),
        "--",
        WORK,
    ];
    args.extend_from_slice(&work);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "optimize failed:\n{err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    // The mapping is heap-large by its call site, and the plan backs it.
    let cats: Vec<&str> = r["plan"]["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a[0].as_str().unwrap())
        .collect();
    assert!(cats.contains(&"heap-large"), "plan: {}", r["plan"]);
    assert!(r["validation"]["exit_codes_match"].as_bool().unwrap());
    // The runtime library backed it at mmap time and proved it (smaps / hugetlb).
    let summaries = r["validation"]["runtime_summaries"].as_array().unwrap();
    let mapped = summaries
        .iter()
        .flat_map(|s| s.as_array().cloned().unwrap_or_else(|| vec![s.clone()]))
        .map(|s| s["mapped"]["mappings"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert!(mapped >= 1, "no mapping backed: {summaries:?}");
    assert!(
        r["huge_bytes_backed"].as_u64().unwrap() >= 8 << 20,
        "{}",
        r["validation"]
    );

    // The plan in the database applied by `run`: the same output as a plain run.
    let plain = Command::new(WORK).args(work).output().unwrap();
    assert!(plain.status.success());
    let mut run_args = vec!["run", "--"];
    run_args.push(WORK);
    run_args.extend_from_slice(&work);
    let (code, out, err) = hugetune(&db, &run_args);
    assert_eq!(code, 0, "run failed:\n{err}");
    let line = out
        .lines()
        .find(|l| l.contains("\"checksum\""))
        .unwrap_or("");
    assert_eq!(checksum(line.as_bytes()), checksum(&plain.stdout), "{out}");
}
