//! Launchers followed into the real program (docs/launchers.md): `record` behind
//! `bash -c`, `env`, `nice`, `taskset`, `timeout` profiles the program (its
//! heap-large buffer is in the bundle, the bundle's program is the program's
//! executable), `optimize` behind `bash -c` backs the program and leaves its
//! output unchanged, `mpirun -np 2` is recorded and applied on both ranks, and
//! what cannot be followed (a launcher that clears the environment, an
//! unknown wrapper) is an error that says so. Skipped (with a message) where
//! qemu-x86_64, or for the MPI test mpicc/mpirun, is not installed;
//! scripts/setup.sh installs them.

mod common;
use common::{hugetune, HUGETUNE, LIB, PLUGIN, WORK};

use hugetune_format::alloclog::AllocLog;
use hugetune_format::profile;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn qemu_present() -> bool {
    let ok = hugetune_capture::qemu::find_qemu().is_some();
    if !ok {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh installs it)");
    }
    ok
}

fn canonical(p: &str) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

/// The bundle's program, its largest malloc'd block and its `launch` section.
fn bundle_facts(bundle: &Path) -> (String, u64, Value) {
    let b = profile::read(bundle).unwrap();
    let log = AllocLog::parse(&b.alloc_log, bundle).unwrap();
    let largest = log
        .records
        .iter()
        .filter(|r| r.kind.is_malloc_alloc())
        .map(|r| r.size)
        .max()
        .unwrap_or(0);
    let launch = b
        .extra
        .iter()
        .find(|s| s.name == "launch")
        .map(|s| serde_json::from_slice(&zstd::decode_all(&s.data[..]).unwrap()).unwrap())
        .unwrap_or(Value::Null);
    (b.meta.program.path, largest, launch)
}

const CHASE: &str = "chase --size 8M --place heap-large";

#[test]
fn record_follows_shell_env_nice_taskset_and_timeout_into_the_program() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let work: Vec<&str> = std::iter::once(WORK).chain(CHASE.split(' ')).collect();
    let shell = format!("{WORK} {CHASE}; true");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("bash -c", vec!["bash", "-c", &shell]),
        ("sh -c", vec!["sh", "-c", &shell]),
        ("env", [&["env", "A=1"][..], &work].concat()),
        ("nice", [&["nice", "-n", "1"][..], &work].concat()),
        ("taskset", [&["taskset", "-c", "0"][..], &work].concat()),
        ("timeout", [&["timeout", "60"][..], &work].concat()),
    ];
    for (what, cmd) in cases {
        let bundle = d.path().join(format!("{}.htb", what.replace(' ', "_")));
        let mut args = vec!["record", "-o", bundle.to_str().unwrap(), "--"];
        args.extend_from_slice(&cmd);
        let (code, _, err) = hugetune(&db, &args);
        assert_eq!(code, 0, "{what}: {err}");
        let (program, largest, launch) = bundle_facts(&bundle);
        // The program's profile, not the launcher's: its 8 MiB buffer is there.
        assert_eq!(program, canonical(WORK), "{what}: {err}");
        assert!(largest >= 8 << 20, "{what}: largest block {largest}");
        assert_eq!(
            launch["program"].as_str(),
            Some(program.as_str()),
            "{launch}"
        );
        assert_eq!(launch["ranks"].as_array().unwrap().len(), 1, "{launch}");
        assert!(err.contains("followed"), "{what}: {err}");
    }
}

/// The plan gives heap-large a huge backing.
fn plans_heap_large(r: &Value) -> bool {
    r["plan"]["assignments"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x[0] == "heap-large"))
}

/// The `checksum` of hugetune-work's JSON line: what the run computed.
fn checksum(stdout: &str) -> String {
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    v["checksum"].as_str().unwrap().to_string()
}

#[test]
fn optimize_behind_bash_backs_the_program_and_keeps_its_output() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let bundle = d.path().join("b.htb");
    let shell = format!("{WORK} chase --size 32M --iters 2 --place heap-large; true");
    let (code, out, err) = hugetune(
        &db,
        &[
            "optimize",
            "--runs",
            "1",
            "--max-runs",
            "1",
            "--min-gain",
            "0.0001",
            "--json",
            "--bundle",
            bundle.to_str().unwrap(),
            "--",
            "bash",
            "-c",
            &shell,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert!(plans_heap_large(&r), "{}", r["plan"]);
    // Backed in the program (bash holds no plan): one summary per run, the
    // program's, with its buffer on huge pages.
    let v = &r["validation"];
    assert!(v["huge_bytes_runtime"].as_u64().unwrap() >= 16 << 20, "{v}");
    // One summary per run (a list per run, one entry per process that
    // applied the plan): the program's; bash stayed inert.
    let runs = v["runtime_summaries"].as_array().unwrap();
    assert!(!runs.is_empty(), "{v}");
    for run in runs {
        assert_eq!(run.as_array().map(Vec::len), Some(1), "{run}");
    }
    // `run` finds the stored plan through the same command, and the program
    // computes what it computes without hugetune.
    let plain = Command::new("bash").args(["-c", &shell]).output().unwrap();
    let (code, out, err) = hugetune(&db, &["run", "--", "bash", "-c", &shell]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no profile of this program"), "{err}");
    assert_eq!(
        checksum(&out),
        checksum(&String::from_utf8_lossy(&plain.stdout)),
        "{err}"
    );
}

fn mpi_walk(dir: &Path) -> Option<PathBuf> {
    for p in ["mpicc", "mpirun"] {
        if hugetune_capture::elf::resolve_program(std::ffi::OsStr::new(p)).is_none() {
            eprintln!("SKIPPED: {p} is not installed (openmpi-bin, libopenmpi-dev; scripts/setup.sh installs them)");
            return None;
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads/mpi/mpi_walk.c");
    let bin = dir.join("mpi_walk");
    let o = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(bin)
}

#[test]
fn mpirun_ranks_are_recorded_and_applied() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(bin) = mpi_walk(d.path()) else {
        return;
    };
    let db = d.path().join("h.db");
    let bundle = d.path().join("b.htb");
    let bin = bin.to_str().unwrap();
    let mpirun = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        bin,
        "32",
        "2000000",
    ];
    let mut args = vec![
        "optimize",
        "--runs",
        "1",
        "--max-runs",
        "1",
        "--min-gain",
        "0.0001",
        // Every reference: the ranks' tiny gain (1 ms) is below what the
        // automatic sample resolves on a 32 MiB buffer; this test is about
        // following mpirun into both ranks.
        "--exact",
        "--json",
        "--bundle",
        bundle.to_str().unwrap(),
        "--",
    ];
    args.extend_from_slice(&mpirun);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{err}");
    // Both ranks profiled, each with its own stream.
    let (program, largest, launch) = bundle_facts(&bundle);
    assert_eq!(program, canonical(bin));
    assert!(largest >= 32 << 20, "largest block {largest}");
    let ranks = launch["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{launch}");
    let pids: std::collections::BTreeSet<u64> =
        ranks.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 2, "{launch}");
    for r in ranks {
        assert_eq!(r["path"].as_str(), Some(program.as_str()), "{launch}");
        assert!(r["refs_seen"].as_u64().unwrap() > 300_000, "{launch}");
        assert!(r["largest_block"].as_u64().unwrap() >= 32 << 20, "{launch}");
    }
    // The ranks ran at once: their streams grew over spans that overlap, and
    // the analysis costs the walks at both ranks' page tables (each touched
    // its own 32 MiB: about twice the analysed one's).
    let spans: Vec<(f64, f64)> = ranks
        .iter()
        .map(|r| {
            let a = r["active_s"].as_array().expect("a span per rank");
            (a[0].as_f64().unwrap(), a[1].as_f64().unwrap())
        })
        .collect();
    for &(s, e) in &spans {
        assert!(0.0 <= s && s <= e, "{launch}");
    }
    assert!(
        spans[0].0 <= spans[1].1 && spans[1].0 <= spans[0].1,
        "{launch}"
    );
    let (code, an, err) = hugetune(
        &db,
        &["analyze", "--json", "--no-db", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let an: Value = serde_json::from_str(&an).unwrap();
    let along = &an["result"]["alongside"];
    assert_eq!(along["processes"], 2, "{along}");
    let f = along["page_tables"].as_f64().unwrap();
    assert!((1.5..2.5).contains(&f), "{along}");
    assert!(
        err.contains("2 processes of the program ran at once"),
        "{err}"
    );
    // The plan backed both ranks: two summaries per optimized run (mpirun
    // and its helpers hold none), each with huge bytes.
    let r: Value = serde_json::from_str(&out).unwrap();
    assert!(plans_heap_large(&r), "{}", r["plan"]);
    let runs = r["validation"]["runtime_summaries"].as_array().unwrap();
    assert!(!runs.is_empty());
    for run in runs {
        let procs = run.as_array().unwrap();
        assert_eq!(procs.len(), 2, "{run}");
        let pids: std::collections::BTreeSet<u64> =
            procs.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
        assert_eq!(pids.len(), 2, "{run}");
    }
    for s in runs.iter().flat_map(|r| r.as_array().unwrap()) {
        let huge = hugetune_format::summary::Summary::from_value(s)
            .unwrap()
            .huge_bytes();
        assert!(huge >= 16 << 20, "a rank without huge pages: {s}");
    }
    // Same output as without hugetune.
    let plain = Command::new(mpirun[0]).args(&mpirun[1..]).output().unwrap();
    let (code, out, err) = hugetune(&db, &[&["run", "--"][..], &mpirun].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), String::from_utf8_lossy(&plain.stdout).trim());
}

#[test]
fn what_cannot_be_followed_is_an_error() {
    if !qemu_present() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let bundle = d.path().join("b.htb");
    let b = bundle.to_str().unwrap();
    // A launcher that clears the environment: the program runs without the
    // library, and the error says so.
    let work: Vec<&str> = std::iter::once(WORK).chain(CHASE.split(' ')).collect();
    let (code, _, err) = hugetune(
        &db,
        &[&["record", "-o", b, "--", "env", "-i"][..], &work].concat(),
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot follow") && err.contains("without LD_PRELOAD"),
        "{err}"
    );
    assert!(!bundle.exists());
    // A shell that runs no program at all.
    let (code, _, err) = hugetune(&db, &["record", "-o", b, "--", "bash", "-c", "true"]);
    assert_ne!(code, 0);
    assert!(err.contains("ran no program"), "{err}");
    // An unknown wrapper (xargs forks and execs the program, which qemu does
    // not follow): an error, never the wrapper's profile; named in
    // HUGETUNE_LAUNCHERS it is followed.
    let run = |launchers: Option<&str>| {
        let mut c = Command::new(HUGETUNE);
        c.arg("--db")
            .arg(&db)
            .args(["record", "-o", b, "--", "xargs"])
            .args(&work)
            .env("HUGETUNE_RUNTIME_LIB", LIB)
            .env("HUGETUNE_QEMU_PLUGIN", PLUGIN)
            .env_remove("HUGETUNE_LAUNCHERS");
        if let Some(l) = launchers {
            c.env("HUGETUNE_LAUNCHERS", l);
        }
        c.output().unwrap()
    };
    let o = run(None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("HUGETUNE_LAUNCHERS=xargs"), "{err}");
    let o = run(Some("xargs"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let (program, largest, _) = bundle_facts(&bundle);
    assert_eq!(program, canonical(WORK));
    assert!(largest >= 8 << 20);
}
