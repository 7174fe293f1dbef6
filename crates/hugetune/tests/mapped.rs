//! Memory the program maps itself (issue 19, item 1): a workload whose hot buffer
//! is its own anonymous mmap (`--place mmap`) is profiled, planned, backed at mmap
//! time by the runtime library and proven huge, with the program's output the same
//! as a plain run's. A program hot on memory no directive can back (a file
//! mapping) gets an empty plan that says so, with the share of its misses there.

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
    // The mechanism is under test, not the gain bar: on a loaded machine the
    // native run (the bar's base) can take ten times as long.
    let mut args = vec![
        "optimize",
        "--min-gain",
        "0.0001",
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

/// Hot on a file mapping (category `other`): 2 M random byte updates over 32 MiB.
const FILEHOT_C: &str = r#"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    size_t len = 32u << 20;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
        return 3;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 4;
    uint64_t x = 88172645463325252ull, sum = 0;
    for (long i = 0; i < 2000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        sum += p[x % len]++;
    }
    printf("{\"sum\":%llu}\n", (unsigned long long)sum);
    return 0;
}
"#;

#[test]
fn an_empty_plan_names_the_share_of_misses_it_cannot_back() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("filehot.c");
    std::fs::write(&src, FILEHOT_C).unwrap();
    let exe = d.path().join("filehot");
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let db = d.path().join("f.db");
    let bundle = d.path().join("f.htb");
    let data = d.path().join("data");
    let (exe, bundle, data) = (
        exe.to_str().unwrap(),
        bundle.to_str().unwrap(),
        data.to_str().unwrap(),
    );
    let (code, _, err) = hugetune(&db, &["record", "-o", bundle, "--", exe, data]);
    assert_eq!(code, 0, "record failed:\n{err}");
    let (code, out, err) = hugetune(&db, &["analyze", bundle]);
    assert_eq!(code, 0, "analyze failed:\n{err}");
    let share = |text: &str| -> f64 {
        let at = text
            .find("other: ")
            .unwrap_or_else(|| panic!("no share of 'other': {text}"));
        let rest = &text[at + 7..];
        rest[..rest.find(' ').unwrap()].parse().unwrap()
    };
    let line = out.lines().find(|l| l.starts_with("misses")).unwrap_or("");
    assert!(line.contains("in memory hugetune cannot back"), "{out}");
    assert!(share(line) > 90.0, "{line}");
    // `plan` (no --explain) shows the verdict with the reason.
    let (code, out, err) = hugetune(&db, &["plan", "--", exe, data]);
    assert_eq!(code, 0, "plan failed:\n{err}");
    assert!(out.contains("plan: nothing (run unchanged)"), "{out}");
    assert!(out.contains("file-backed") && share(&out) > 90.0, "{out}");
}
