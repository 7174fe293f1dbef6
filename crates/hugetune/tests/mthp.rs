//! mTHP end to end (issue 23, item 2): `optimize` on a program whose heap-large
//! blocks are 1 MiB each (below one 2 MB page, so 2 MB backings give them
//! nothing; first-touch bound, so folios of 1 MB or 64 KB save most of its
//! faults). The planner picks an mTHP size whose control reads `never` here,
//! the optimized runs set it (and PMD THP `never`) for each run only, the
//! kernel's per-size counters prove the folios, and every control reads as
//! before once `optimize` returned. Root; skipped where the kernel has no mTHP
//! sysfs. The kernel-state lock is taken to read the controls at rest, never
//! while `hugetune` runs (it takes the lock itself for each optimized run).

mod common;

use common::{build_blocks, hugetune, is_root};
use hugetune_host::kernel_state::lock_kernel_state;
use std::path::Path;

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// Every per-size control and the top-level mode, read at rest (lock held).
fn controls_at_rest() -> Vec<(String, String)> {
    let _l = lock_kernel_state().unwrap();
    let mut v: Vec<(String, String)> = std::fs::read_dir(THP)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("hugepages-"))
        // (Sizes for file memory only have no `enabled`.)
        .filter_map(|e| {
            let p = e.path().join("enabled");
            Some((p.display().to_string(), std::fs::read_to_string(&p).ok()?))
        })
        .collect();
    let top = format!("{THP}/enabled");
    v.push((top.clone(), std::fs::read_to_string(&top).unwrap()));
    v.sort();
    v
}

#[test]
fn optimize_plans_mthp_sets_the_control_per_run_and_restores_it() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to set the per-size THP controls");
        return;
    }
    if !Path::new(&format!("{THP}/hugepages-64kB/enabled")).exists() {
        eprintln!("SKIPPED: this kernel has no mTHP sysfs (hugepages-64kB)");
        return;
    }
    let before = controls_at_rest();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_blocks(dir.path());
    let db = dir.path().join("db.sqlite");
    let (code, out, err) = hugetune(
        &db,
        &[
            "optimize",
            "--json",
            "--runs",
            "3",
            "--max-runs",
            "3",
            // Sizes whose control is `never` only when asked (they change
            // system-wide controls for the runs).
            "--mthp",
            "64k,1m",
            "--",
            exe.to_str().unwrap(),
            "512",
            "1048576",
            "1",
            "simple",
        ],
    );
    let after = controls_at_rest();
    assert_eq!(before, after, "every control reads as before\n{err}");
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plan = &r["plan"];
    let backing = plan["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a[0] == "heap-large")
        .and_then(|a| a[1].as_str())
        .unwrap_or_else(|| panic!("heap-large planned: {plan}"))
        .to_string();
    let b: hugetune_model::Backing = backing.parse().unwrap();
    assert!(b.is_mthp(), "an mTHP size for 1 MiB blocks: {plan}");
    let kb = b.folio_bytes() >> 10;
    let controls = plan["thp_controls"].as_array().unwrap();
    assert!(
        controls
            .iter()
            .any(|c| c["kb"] == kb && c["mode"] == "madvise"),
        "{plan}"
    );
    if std::fs::read_to_string(format!("{THP}/hugepages-2048kB/enabled"))
        .unwrap()
        .contains("[never]")
    {
        eprintln!("PMD THP is off here: no 2048 kB control to set");
    } else {
        assert!(
            controls
                .iter()
                .any(|c| c["kb"] == 2048 && c["mode"] == "never"),
            "{plan}"
        );
    }
    // The proof: the kernel's per-size fault counter of that size, per
    // optimized run (one folio per 1 MiB block for thp-1m, 16 for thp-64k;
    // most blocks at least).
    let v = &r["validation"];
    let per_run = v["folio_faults_per_run"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[0] == kb)
        .and_then(|e| e[1].as_u64())
        .unwrap_or(0);
    let per_block = (1024 / kb).max(1);
    assert!(per_run >= 256 * per_block, "{kb} kB folios per run: {v}");
    // The library's pagemap census (freed blocks within its verification
    // budget of 256 frees): mTHP bytes count as huge.
    assert!(
        v["huge_bytes_runtime"].as_u64().unwrap() >= 128 << 20,
        "{v}"
    );
}
