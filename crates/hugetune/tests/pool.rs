//! The shared pool end to end (seed 002): `optimize --reserve` on a
//! multithreaded kernel that allocates and frees its blocks over and over
//! (panels: 3-12 MiB panels, FIFO-freed, two OpenMP threads) weighs the pool
//! against per-allocation pages, writes `pool hugetlb-2m N` with N from the
//! allocation log, the runtime library serves the blocks from that pool, and
//! the 2 MB pool goes back to its resting size. The weighing itself has unit
//! tests that run everywhere (model::pool, model::plan).

mod common;
use common::{hugetune, is_root, qemu_or_skip, WORK};

use hugetune_host::kernel_state::{reserve_hugetlb, resting_pool_size};
use serde_json::Value;

/// Whether the kernel gives `n` 2 MB pages now (grown and given back at
/// once, under the kernel-state lock).
fn two_mb_pages_now(n: u64) -> bool {
    match reserve_hugetlb(2048, n) {
        Ok(r) => r.added() >= n,
        Err(e) => {
            eprintln!("cannot grow the 2 MB pool: {e:#}");
            false
        }
    }
}

/// `panels` (3-12 MiB panels allocated and freed over and over) with two threads.
const PANELS: [&str; 8] = [
    WORK,
    "panels",
    "--size",
    "24M",
    "--iters",
    "3",
    "--threads",
    "2",
];

/// The pool in a plan decision (`optimize --json`'s `plan`, `plan --json`'s
/// `decision`) of `panels` with two threads: heap-large on hugetlb-2m, the pool
/// chosen with N = first fit's extent (at least the peak of live pages) plus the
/// largest block (the threads' order changes from run to run), its pages
/// reused, `pool hugetlb-2m N` in the plan text and said in the reasons.
/// Returns N and the reasons.
fn chosen_pool(dec: &Value, text: &str) -> (u64, Vec<String>) {
    let reasons: Vec<String> = dec["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    let on_hugetlb = dec["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a[0] == "heap-large" && a[1] == "hugetlb-2m");
    assert!(on_hugetlb, "{reasons:?}");
    let w = &dec["pool"];
    assert_eq!(w["chosen"], true, "{reasons:?}");
    let n = w["pages"].as_u64().unwrap();
    let profile = &w["profile"];
    assert_eq!(profile["threads"], 2, "{profile}");
    assert!(
        profile["pages_taken"].as_u64() > Some(n),
        "no reuse: {profile}"
    );
    let peak = profile["peak_pages"].as_u64().unwrap();
    let ff = profile["first_fit_pages"].as_u64().unwrap();
    let largest = profile["largest_block_pages"].as_u64().unwrap();
    assert!(ff >= peak && peak > 0, "{profile}");
    assert_eq!(n, ff + largest, "{profile}");
    assert!(
        text.lines().any(|l| l == format!("pool hugetlb-2m {n}")),
        "{text}"
    );
    assert!(
        reasons.iter().any(
            |l| l.starts_with("pool vs per-allocation: shared pool chosen")
                && l.contains(&format!("`pool hugetlb-2m {n}`"))
        ),
        "{reasons:?}"
    );
    (n, reasons)
}

#[test]
fn optimize_plans_a_shared_pool_for_threads_that_churn_and_restores_it() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to reserve 2 MB pages");
        return;
    }
    if !two_mb_pages_now(64) {
        eprintln!("SKIPPED: the kernel gives no 64 x 2 MB hugetlb pages now");
        return;
    }
    let before = resting_pool_size(2048).unwrap();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let mut args = vec![
        "optimize",
        "--reserve",
        "--runs",
        "1",
        "--max-runs",
        "1",
        "--min-gain",
        "0",
        // The pool is weighed for hugetlb blocks; an mTHP size (which root
        // can set for the run) may beat hugetlb on these small blocks.
        "--mthp",
        "none",
        "--json",
        "--",
    ];
    args.extend(PANELS);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(resting_pool_size(2048).unwrap(), before, "{err}");
    let plan = &r["plan"];
    let (n, _) = chosen_pool(plan, plan["text"].as_str().unwrap());
    // The pool's pages count in what the plan needs (and --reserve grew).
    assert!(plan["hugetlb_pages"].as_u64() >= Some(n), "{plan}");
    // The runtime library mapped the pool and served blocks from it. The
    // program frees every panel before it exits, so the pages in use at exit
    // are 0: the peak shows the use.
    let pools: Vec<&Value> = r["validation"]["runtime_summaries"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run.as_array().into_iter().flatten())
        .map(|s| &s["pools"]["hugetlb-2m"])
        .filter(|p| !p.is_null())
        .collect();
    assert!(!pools.is_empty(), "no pool in the summaries\n{err}");
    for p in pools {
        assert_eq!(p["planned_pages"].as_u64(), Some(n), "{p}");
        assert_eq!(p["pages"].as_u64(), Some(n), "{p}\n{err}");
        assert!(p["allocations"].as_u64() > Some(0), "{p}");
        assert!(p["peak_used_pages"].as_u64() > Some(0), "{p}");
    }
}

/// Plans made later from the stored profile (`plan`, `run`, `validate`,
/// service units) weigh the pool too, from the profile's own allocation log:
/// `plan` writes `pool hugetlb-2m N` with the N optimize would, counts the
/// pool's pages in what the plan needs, and says so. Another input's profile
/// weighs none (its blocks are not this input's). No pool is changed:
/// `plan --budget` plans with pages it is told are there.
#[test]
fn a_plan_from_the_stored_profile_weighs_the_shared_pool() {
    if qemu_or_skip().is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let bundle = d.path().join("p.htb");
    let cmd = PANELS;
    let mut args = vec![
        "record",
        "--refs",
        "qemu",
        "-o",
        bundle.to_str().unwrap(),
        "--",
    ];
    args.extend(cmd);
    let (code, _, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = hugetune(&db, &["analyze", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--budget",
            "4096",
            "--min-gain",
            "0",
            "--json",
            "--",
        ];
        args.extend(cmd);
        args.extend(extra);
        let (code, out, err) = hugetune(&db, &args);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        v
    };
    let v = plan(&[]);
    let (_, reasons) = chosen_pool(&v["decision"], v["plan"].as_str().unwrap());
    // The decision's own reason is still the last one.
    assert!(
        !reasons
            .last()
            .unwrap()
            .starts_with("pool vs per-allocation"),
        "{reasons:?}"
    );
    // Another input (more iterations): the stored profile serves its ranking,
    // not its blocks.
    let v = plan(&["--iters", "4"]).to_string();
    assert!(!v.contains("pool hugetlb-2m"), "{v}");
    assert!(v.contains("no shared pool weighed"), "{v}");
}

/// Free pool pages another hugetune holds (a bench suite sized its pool for
/// its own runs) are not optimize's to take: optimize uses pool pages only
/// under the kernel-state lock, waits for it, and plans again with what is
/// free once it has it. CI once saw a suite's run charged with 10 pages that
/// a concurrent suite's optimize had taken from its pool without the lock.
#[test]
fn optimize_waits_for_pools_another_user_holds() {
    if !is_root() || qemu_or_skip().is_none() {
        eprintln!("SKIPPED: needs root (the lock, a pool) and qemu");
        return;
    }
    use hugetune_host::kernel_state::{lock_kernel_state, set_hugetlb_pool_holding};
    let lock = lock_kernel_state().unwrap();
    let taken = hugetune_host::machine::pool(2048).map_or(0, |p| p.taken());
    let pool = set_hugetlb_pool_holding(&lock, 2048, taken + 40).unwrap();
    let free = || hugetune_host::machine::pool(2048).map_or(0, |p| p.available());
    if pool.now < taken + 40 {
        eprintln!("SKIPPED: the kernel gives no 40 x 2 MB hugetlb pages now");
        return;
    }
    let free_before = free();
    let d = tempfile::tempdir().unwrap();
    let mut child = common::signalable()
        .arg("--db")
        .arg(d.path().join("h.db"))
        .args([
            "optimize",
            "--runs",
            "1",
            "--max-runs",
            "1",
            "--min-gain",
            "0",
            "--mthp",
            "none",
            "--json",
            "--",
            WORK,
            "randmem",
            "--size",
            "32M",
            "--random-pct",
            "100",
            "--accesses",
            "2000000",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (rx, reader) = common::follow_stderr(&mut child);
    let t0 = std::time::Instant::now();
    let mut waiting = false;
    while !waiting && t0.elapsed() < std::time::Duration::from_secs(300) {
        match rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(l) => waiting = l.contains("waiting for another user of the huge page pools"),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(_) => {}
        }
    }
    // What it did meanwhile: nothing with our pages.
    let free_waiting = free();
    // Our pool goes back to its resting size; optimize then finds none free.
    drop(pool);
    drop(lock);
    let mut out = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert!(waiting, "optimize did not wait for the pools:\n{err}");
    assert_eq!(
        free_waiting, free_before,
        "pages taken while waiting\n{err}"
    );
    assert!(
        matches!(status.code(), Some(0) | Some(2)),
        "{status:?}\n{err}"
    );
    let r: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let assigned_hugetlb = r["plan"]["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a[1] == "hugetlb-2m");
    assert!(
        !assigned_hugetlb || err.contains("planning again"),
        "a plan on pool pages nobody holds any more: {}\n{err}",
        r["plan"]
    );
}
