//! Real programs through `hugetune optimize` and `hugetune run` (issue 19), at
//! small sizes: a C program with its own mmap allocator, python3 with numpy
//! doing random gathers, and numpy started by `bash -c`. For each: optimize's
//! validation compares every run's stdout with the plain run's
//! (`--compare-output`), its plan backs the hot data (heap-large on huge
//! pages, proven by the runtime library's summary and by /proc), and `run`
//! applies the stored plan with the program printing what it prints alone.
//! `bench programs` is run once on the C program with a program it must skip.
//! The MPI program under `mpirun -np 2` is tested in launchers.rs (both ranks
//! backed, output unchanged); the static C, Go and Java programs belong to the
//! outside appliers' tests. The programs' sources are the bench's
//! (workloads/programs/). Skipped (with a message) where gcc, qemu-x86_64 or
//! python3's numpy is missing; scripts/setup.sh installs them.

mod common;
use common::{hugetune, need_program};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const MMAP_WALK_C: &str = include_str!("../../../workloads/programs/mmap_walk.c");
const GATHER_PY: &str = include_str!("../../../workloads/programs/gather.py");
const PYTHON: &str = "/usr/bin/python3";

fn qemu_present() -> bool {
    let ok = hugetune_capture::qemu::find_qemu().is_some();
    if !ok {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh installs it)");
    }
    ok
}

fn numpy_script(dir: &Path) -> Option<PathBuf> {
    let ok = Command::new(PYTHON)
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: numpy does not import in {PYTHON} (python3-numpy; scripts/setup.sh installs it)");
        return None;
    }
    let p = dir.join("gather.py");
    std::fs::write(&p, GATHER_PY).unwrap();
    Some(p)
}

fn mmap_walk(dir: &Path) -> Option<PathBuf> {
    need_program("gcc")?;
    let src = dir.join("mmap_walk.c");
    std::fs::write(&src, MMAP_WALK_C).unwrap();
    let exe = dir.join("mmap_walk");
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(exe)
}

/// `optimize --json --compare-output` with one A/B pair (the mechanism is
/// under test, not the gain bar: the tiny sizes gain little), its report.
fn optimize(db: &Path, bundle: &Path, cmd: &[&str]) -> Value {
    let mut args = vec![
        "optimize",
        "--runs",
        "1",
        "--max-runs",
        "1",
        "--min-gain",
        "0.0001",
        "--compare-output",
        "--json",
        "--bundle",
        bundle.to_str().unwrap(),
        "--",
    ];
    args.extend_from_slice(cmd);
    let (code, out, err) = hugetune(db, &args);
    assert_eq!(code, 0, "optimize failed:\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

/// The plan puts heap-large on huge pages, every run printed what the plain
/// run printed, and at least `hot` bytes were proven huge, by the runtime
/// library in each process that applied the plan and by /proc.
fn check_backed(r: &Value, hot: u64, processes: usize) {
    let large = r["plan"]["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a[0] == "heap-large")
        .unwrap_or_else(|| panic!("no heap-large in the plan: {}", r["plan"]));
    assert_ne!(large[1], "4k", "{}", r["plan"]);
    let v = &r["validation"];
    assert_eq!(v["run_count"]["compare_output"], true, "{v}");
    // A run whose stdout differed would be `broke`, with its run kept aside.
    assert_ne!(r["verdict"], "broke", "{v}");
    assert!(v["broken_run"].is_null(), "{v}");
    assert!(v["exit_codes_match"].as_bool().unwrap(), "{v}");
    assert!(r["huge_bytes_backed"].as_u64().unwrap() >= hot, "{v}");
    // /proc is sampled while the program runs (smaps_rollup every few tens of
    // ms): a run of 0.1 s with THP faulted in as it goes can end between two
    // samples of its peak. It must have seen huge pages; the amount is the
    // runtime library's, verified in the process (below).
    assert!(v["huge_bytes_proc"].as_u64().unwrap() > 0, "{v}");
    for run in v["runtime_summaries"].as_array().unwrap() {
        let procs = run.as_array().unwrap();
        assert_eq!(procs.len(), processes, "{run}");
        for s in procs {
            let huge = hugetune_format::summary::Summary::from_value(s)
                .unwrap()
                .huge_bytes();
            assert!(huge >= hot, "a process without its data on huge pages: {s}");
        }
    }
}

/// `hugetune run -- CMD` with the stored plan, and CMD alone: same stdout.
fn run_prints_the_same(db: &Path, cmd: &[&str]) {
    let plain = Command::new(cmd[0])
        .args(&cmd[1..])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(plain.status.success());
    let (code, out, err) = hugetune(db, &[&["run", "--"][..], cmd].concat());
    assert_eq!(code, 0, "run failed:\n{err}");
    assert!(!err.contains("no profile of this program"), "{err}");
    assert!(err.contains("on huge pages"), "{err}");
    assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{err}");
}

#[test]
fn own_mmap_allocator_is_backed_and_prints_the_same() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = mmap_walk(d.path()) else {
        return;
    };
    let db = d.path().join("h.db");
    // 48 MiB of records and 6 MiB of index: two of the allocator's 32 MiB chunks.
    let cmd = [exe.to_str().unwrap(), "48", "400000"];
    let r = optimize(&db, &d.path().join("b.htb"), &cmd);
    check_backed(&r, 48 << 20, 1);
    // Both chunks (the program's own mappings) backed at mmap time.
    for run in r["validation"]["runtime_summaries"].as_array().unwrap() {
        for s in run.as_array().unwrap() {
            assert_eq!(s["mapped"]["mappings"].as_u64(), Some(2), "{s}");
        }
    }
    run_prints_the_same(&db, &cmd);
}

#[test]
fn numpy_gathers_are_backed_and_print_the_same() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(script) = numpy_script(d.path()) else {
        return;
    };
    let db = d.path().join("h.db");
    let cmd = [PYTHON, script.to_str().unwrap(), "32", "600000"];
    let r = optimize(&db, &d.path().join("b.htb"), &cmd);
    // The 32 MiB array (numpy's malloc'd data) and the batch's index arrays.
    check_backed(&r, 32 << 20, 1);
    assert!(
        r["profile"]["refs_per_category"]["heap-large"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{}",
        r["profile"]
    );
    run_prints_the_same(&db, &cmd);
}

#[test]
fn numpy_behind_bash_c_is_followed_backed_and_prints_the_same() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(script) = numpy_script(d.path()) else {
        return;
    };
    let db = d.path().join("h.db");
    // `|| exit $?`: a list, so bash forks python3 instead of becoming it.
    let line = format!("{PYTHON} {} 32 600000 || exit $?", script.display());
    let cmd = ["bash", "-c", line.as_str()];
    let r = optimize(&db, &d.path().join("b.htb"), &cmd);
    // Backed in python3 (bash holds no plan): one summary per run.
    check_backed(&r, 32 << 20, 1);
    let launch = r["profile"]["bundle"].as_str().unwrap();
    let b = hugetune_format::profile::read(Path::new(launch)).unwrap();
    assert_eq!(
        b.meta.program.path,
        std::fs::canonicalize(PYTHON).unwrap().display().to_string()
    );
    run_prints_the_same(&db, &cmd);
}

#[test]
fn bench_programs_measures_what_runs_and_skips_what_cannot() {
    if !qemu_present() || !common::is_root() {
        eprintln!("SKIPPED: bench programs changes THP and pools (root)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    // A javac that fails: java is skipped with the reason, never measured.
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let javac = bin.join("javac");
    std::fs::write(
        &javac,
        "#!/bin/sh\necho 'javac: broken for the test' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&javac, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(common::HUGETUNE);
    c.arg("--db")
        .arg(&db)
        .args([
            "bench",
            "programs",
            "--only",
            "c-mmap,java",
            "--size",
            "16",
            "--reps",
            "1",
            "--json",
        ])
        .env("HUGETUNE_RUNTIME_LIB", common::LIB)
        .env("HUGETUNE_QEMU_PLUGIN", common::PLUGIN)
        .env("PATH", path);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["restored"].as_bool().unwrap(), "{}", r["kernel_after"]);
    let programs = r["extra"]["programs"].as_array().unwrap();
    let names: Vec<&str> = programs
        .iter()
        .map(|p| p["program"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c-mmap", "java"]);
    let java = &programs[1];
    assert!(
        java["skipped"]
            .as_str()
            .unwrap()
            .contains("javac failed (exit status: 1): javac: broken for the test"),
        "{java}"
    );
    assert!(java["measured"].is_null());
    let c = &programs[0];
    let opt = &c["optimize"];
    assert!(opt["to_plan_s"].as_f64().unwrap() > opt["native_s"].as_f64().unwrap());
    assert!(opt["huge_bytes"].as_u64().unwrap() >= 8 << 20, "{opt}");
    let m = &c["measured"];
    for config in ["plain", "hugetune", "thp-always", "glibc-hugetlb=2"] {
        assert_eq!(m[config]["ok"], true, "{config}: {m}");
    }
    // hugetune run applied the plan: the program's records on huge pages;
    // glibc's tunable cannot reach memory the program maps itself.
    assert!(
        m["hugetune"]["huge_bytes"].as_u64().unwrap() >= 8 << 20,
        "{m}"
    );
    assert!(
        m["glibc-hugetlb=2"]["huge_bytes"].as_u64().unwrap() < 8 << 20,
        "{m}"
    );
    // What `run` applied in the timed run, from the runs it recorded.
    let h = &c["hugetune_run"];
    assert_eq!(h["runs"], 1, "{h}");
    assert!(
        h["applied"][0].as_str().unwrap().contains("heap-large"),
        "{h}"
    );
    assert!(h["runtime_huge_bytes"].as_u64().unwrap() >= 8 << 20, "{h}");
}
