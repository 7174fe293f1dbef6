//! The loop closing itself: `optimize` once, then the online agent (`run`),
//! `validate` feeding confidence back, `plan --explain`, `size`, and the
//! database's export/import/rm, all on `hugetune-work` without profiling again.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const HUGETUNE: &str = env!("CARGO_BIN_EXE_hugetune");
const WORK: &str = env!("HUGETUNE_BUILT_WORK");

fn hugetune(db: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(HUGETUNE)
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("run hugetune");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok_json(db: &Path, args: &[&str]) -> Value {
    let (code, out, err) = hugetune(db, args);
    assert_eq!(code, 0, "hugetune {args:?} failed:\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"))
}

const REFERENCE: [&str; 5] = ["chase", "--size", "32M", "--place", "heap-large"];

fn with_cmd<'a>(head: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.push("--");
    v.push(WORK);
    v.extend_from_slice(&REFERENCE);
    v
}

#[test]
fn optimize_once_then_the_agent_plans_runs_validates_and_sizes_from_the_database() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let bundle = d.path().join("p.htb");
    let train = format!("{WORK} chase --size 4M --place heap-large");
    let r = ok_json(
        &db,
        &with_cmd(&[
            "optimize",
            "--runs",
            "1",
            "--max-runs",
            "1",
            "--json",
            "--bundle",
            bundle.to_str().unwrap(),
            "--profile-cmd",
            &train,
        ]),
    );
    assert!(
        !r["plan"]["assignments"].as_array().unwrap().is_empty(),
        "{}",
        r["plan"]
    );

    // The online agent: the stored plan, no profiling (no record step), same output.
    let (code, out, err) = hugetune(&db, &with_cmd(&["run"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("applying") && err.contains("(profile #1)"),
        "{err}"
    );
    assert!(!err.contains("record"), "the agent profiled again:\n{err}");
    let plain = Command::new(WORK).args(REFERENCE).output().unwrap();
    let checksum = |s: &str| serde_json::from_str::<Value>(s.trim()).unwrap()["checksum"].clone();
    assert_eq!(
        checksum(&out),
        checksum(&String::from_utf8_lossy(&plain.stdout))
    );
    let run = ok_json(&db, &["db", "show", "run", "2"]);
    let mapping = run["plan"]["mapping"].as_str().unwrap().to_string();
    assert!(!mapping.is_empty(), "{run}");

    // The profile came from another input: the plan says so.
    let (code, out, err) = hugetune(&db, &with_cmd(&["plan", "--explain"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("taken with other arguments"), "{out}");
    // A budget of no hugetlb pages rules every hugetlb mapping out, and says why.
    let (code, out, err) = hugetune(&db, &with_cmd(&["plan", "--budget", "0", "--explain"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hugetlb 2 MB pages, 0 available"), "{out}");

    // validate: a fixed count of pairs, an interval, and the directive learns.
    let v = ok_json(
        &db,
        &with_cmd(&["validate", "--runs", "2", "--max-runs", "2", "--json"]),
    );
    assert_eq!(v["validation"]["runs"], 2, "{v}");
    let (lo, hi) = (
        v["validation"]["speedup_ci"][0].as_f64().unwrap(),
        v["validation"]["speedup_ci"][1].as_f64().unwrap(),
    );
    assert!(lo <= hi && lo > 0.0, "{v}");
    let c = v["confidence"].as_f64();
    let profile = ok_json(&db, &["db", "show", "profile", "1"]);
    let learned = profile["directives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["mapping"] == v["mapping"])
        .unwrap_or_else(|| panic!("no directive {} in {profile}", v["mapping"]));
    assert!(learned["validations"].as_u64().unwrap() >= 1, "{learned}");
    assert_eq!(learned["confidence"].as_f64(), c);

    // size: the predicted curve from the stored profile, its knee and the commands.
    let page = d.path().join("size.html");
    let s = ok_json(
        &db,
        &with_cmd(&[
            "size",
            "--steps",
            "4",
            "--json",
            "--html",
            page.to_str().unwrap(),
        ]),
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<svg") && html.contains("predicted") && html.contains("nr_hugepages"));
    assert_eq!(s["pages_needed"], 16, "32 MiB of heap-large data: {s}");
    assert_eq!(s["predicted"].as_array().unwrap().len(), 5);
    let rec = s["recommended"].as_u64().unwrap();
    assert!(rec <= 16, "{s}");
    assert!(
        s["commands_now"][0]
            .as_str()
            .unwrap()
            .contains("hugepages-2048kB/nr_hugepages"),
        "{s}"
    );
    assert!(s["commands_boot"][0]
        .as_str()
        .unwrap()
        .contains("hugepagesz=2M"));

    // Export, import elsewhere (twice: nothing doubles), remove.
    let export = d.path().join("e.json");
    let (code, _, err) = hugetune(&db, &["db", "export", "-o", export.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let other = d.path().join("o.db");
    for _ in 0..2 {
        let (code, _, err) = hugetune(&other, &["db", "import", export.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
    }
    let ls = |p: &Path| {
        ok_json(p, &["db", "ls", "--json"])
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(ls(&db), ls(&other));
    let (code, _, _) = hugetune(&other, &["db", "rm", "run", "1"]);
    assert_eq!(code, 0);
    assert_eq!(ls(&other), ls(&db) - 1);
    std::fs::write(&export, "{\"format\": \"something else\"}").unwrap();
    let (code, _, err) = hugetune(&other, &["db", "import", export.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("not a hugetune database export"), "{err}");
    let (code, _, err) = hugetune(&other, &["db", "rm", "run", "999"]);
    assert_ne!(code, 0);
    assert!(err.contains("no run with id 999"), "{err}");
}

#[test]
fn the_agent_runs_an_unknown_program_unchanged() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let (code, out, err) = hugetune(&db, &["run", "--", WORK, "chase", "--size", "1M"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("running it unchanged") && err.contains("hugetune optimize"),
        "{err}"
    );
    assert!(out.contains("checksum"));
    let (code, _, err) = hugetune(&db, &["size", "--", WORK, "chase", "--size", "1M"]);
    assert_ne!(code, 0);
    assert!(err.contains("no profile of"), "{err}");
}
