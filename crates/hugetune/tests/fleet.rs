//! A fleet end to end (issue 20, item 5), on a PostgreSQL store of its own:
//! host A `optimize`s a small program; host B, another host of the same
//! machine class, `run`s it with A's plan and profiles nothing; host C, of
//! another class (its own TLB geometry through `--tlb`), gets a re-analysis of
//! A's profile for its class, not A's predictions; `run --json` says where each
//! plan came from. An offline host with its own SQLite file `db sync`s with the
//! fleet store: it gets its class's plan, its runs go up, and syncing again
//! changes nothing on either side.

mod common;
#[path = "../../store/tests/support/pg.rs"]
mod pg;

use common::{hugetune_at, WORK};
use serde_json::Value;
use std::path::Path;

const COMMAND: [&str; 5] = ["chase", "--size", "8M", "--place", "heap-large"];

/// `hugetune --db DB --host-id HOST ARGS -- WORK COMMAND`: (code, stdout, stderr).
fn on(db: &str, host: &str, head: &[&str], command: bool) -> (i32, String, String) {
    let mut args = vec!["--db", db, "--host-id", host];
    args.extend_from_slice(head);
    if command {
        args.push("--");
        args.push(WORK);
        args.extend_from_slice(&COMMAND);
    }
    hugetune_at(None, &args)
}

/// The JSON object `run --json` prints last.
fn run_json(db: &str, host: &str, extra: &[&str]) -> (Value, String) {
    let mut head = extra.to_vec();
    head.extend_from_slice(&["run", "--json"]);
    let (code, out, err) = on(db, host, &head, true);
    assert_eq!(code, 0, "run on {host} failed:\n{err}");
    let last = out.lines().last().unwrap_or_default();
    let v = serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"));
    (v, err)
}

fn ok(db: &str, host: &str, args: &[&str]) -> String {
    let (code, out, err) = on(db, host, args, false);
    assert_eq!(code, 0, "{args:?} on {host} failed:\n{err}");
    out
}

#[test]
fn hosts_share_plans_by_class_and_a_new_class_gets_a_reanalysis() {
    let d = tempfile::tempdir().unwrap();
    let fleet = pg::fresh_database();
    let bundle = d.path().join("p.htb");
    let train = format!("{WORK} chase --size 4M --place heap-large");
    let (code, out, err) = on(
        &fleet,
        "host-a",
        &[
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
        ],
        true,
    );
    assert_eq!(code, 0, "optimize on host A failed:\n{err}");
    let a: Value = serde_json::from_str(&out).unwrap();
    let profile = a["profile_id"].as_i64().unwrap();

    // B: same class, A's plan, nothing profiled or analyzed.
    let (b, err) = run_json(&fleet, "host-b", &[]);
    assert!(
        !err.contains("record") && !err.contains("analyzing"),
        "B profiled:\n{err}"
    );
    let src = &b["source"];
    assert_eq!(src["profile_id"].as_i64(), Some(profile), "{b}");
    assert_eq!(src["analyzed_on"], "host-a", "{b}");
    assert_eq!(src["origin_profile_id"], Value::Null);
    assert_eq!(b["host"], "host-b");
    let class = src["class"].as_str().unwrap().to_string();
    // A validated the plan it applied: B's source names A as its validator.
    if b["plan"]["mapping"] != "all-small" {
        let hosts: Vec<&str> = src["validated_by"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|h| h["host"].as_str())
            .collect();
        assert_eq!(hosts, ["host-a"], "{b}");
    }
    assert_eq!(b["exit_code"], 0);

    // C: another class (a smaller TLB), a re-analysis of A's profile for it,
    // from the copy of the bundle the store keeps (the file is not on C).
    let moved = d.path().join("elsewhere.htb");
    std::fs::rename(&bundle, &moved).unwrap();
    let tlb = d.path().join("small-tlb.json");
    std::fs::write(
        &tlb,
        r#"{"levels": [
            {"name": "L1 DTLB", "arrays": [{"sizes": ["4k", "2m", "1g"], "entries": 16}]},
            {"name": "L2 DTLB", "arrays": [{"sizes": ["4k", "2m"], "entries": 256, "ways": 4}]}]}"#,
    )
    .unwrap();
    let (c, err) = run_json(&fleet, "host-c", &["--tlb", tlb.to_str().unwrap()]);
    assert!(
        err.contains(&format!("analyzing profile #{profile}")) && err.contains("from the database"),
        "{err}"
    );
    let csrc = &c["source"];
    assert_eq!(csrc["origin_profile_id"].as_i64(), Some(profile), "{c}");
    let reanalysis = csrc["profile_id"].as_i64().unwrap();
    assert_ne!(reanalysis, profile);
    assert_eq!(csrc["analyzed_on"], "host-c");
    assert_ne!(csrc["class"].as_str().unwrap(), class);
    let shown: Value = serde_json::from_str(&ok(
        &fleet,
        "host-c",
        &["db", "show", "profile", &reanalysis.to_string()],
    ))
    .unwrap();
    assert_eq!(
        shown["summary"]["tlb"]["levels"][0]["arrays"][0]["entries"], 16,
        "analyzed with C's geometry"
    );
    assert_eq!(shown["origin_id"].as_i64(), Some(profile));
    // A second run on C uses the stored re-analysis.
    let (c2, err) = run_json(&fleet, "host-c", &["--tlb", tlb.to_str().unwrap()]);
    assert!(!err.contains("analyzing"), "{err}");
    assert_eq!(c2["source"]["profile_id"].as_i64(), Some(reanalysis));

    // D: offline, its own SQLite file; sync brings its class's plan.
    let local = d.path().join("d.db");
    let local = local.to_str().unwrap();
    let (code, _, err) = on(local, "host-d", &["db", "sync", "--to", &fleet], false);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("pulled for this host's class"), "{err}");
    let (dj, err) = run_json(local, "host-d", &[]);
    assert!(!err.contains("analyzing"), "{err}");
    assert_eq!(dj["source"]["analyzed_on"], "host-a", "{dj}");
    // Its run goes up; then a sync changes nothing, on either side.
    let sync = |what: &str| -> Value {
        serde_json::from_str(&ok(
            local,
            "host-d",
            &["db", "sync", "--to", &fleet, "--json"],
        ))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    let first = sync("first");
    let added = |side: &Value, table: &str| {
        side["added"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t[0] == table)
            .map_or(0, |t| t[1].as_u64().unwrap())
    };
    assert_eq!(added(&first["pushed"], "runs"), 1, "{first}");
    let before = (
        ok(local, "host-d", &["db", "export"]),
        ok(&fleet, "host-d", &["db", "export"]),
    );
    let again = sync("again");
    for side in ["pushed", "pulled"] {
        assert!(
            again[side]["added"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t[1] == 0),
            "{again}"
        );
    }
    let after = (
        ok(local, "host-d", &["db", "export"]),
        ok(&fleet, "host-d", &["db", "export"]),
    );
    assert!(before == after, "a second sync changed a database");
    assert!(Path::new(local).exists());
}

/// `bench store` measures look-ups and inserts from several clients, and
/// refuses a database holding profiles that are not its own.
#[test]
fn the_store_benchmark_prints_figures_and_keeps_to_its_own_database() {
    let db = pg::fresh_database();
    let (code, out, err) = hugetune_at(
        None,
        &[
            "--db",
            &db,
            "bench",
            "store",
            "--clients",
            "3",
            "--seconds",
            "1",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let f: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(f["engine"], "postgres");
    assert_eq!(f["clients"], 3);
    assert!(f["starts"].as_u64().unwrap() > 3, "{f}");
    assert_eq!(f["starts"], f["writes"]);
    for part in ["fresh", "confirmed", "first", "background", "write"] {
        if f[part]["n"].as_u64() == Some(0) {
            continue; // a short run: no start of this kind yet
        }
        let p99 = f[part]["p99_ms"].as_f64().unwrap_or(f64::NAN);
        assert!(p99 > 0.0 && p99 < 60_000.0, "{part}: {f}");
    }
    // Its rows are its own: a second run reuses them.
    let (code, _, err) = hugetune_at(
        None,
        &[
            "--db",
            &db,
            "bench",
            "store",
            "--clients",
            "1",
            "--seconds",
            "1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let mut store = hugetune_store::db::Db::open(Path::new(&db)).unwrap();
    let p = store.upsert_program("/usr/bin/real", None).unwrap();
    store
        .insert_profile(p, None, &["real".into()], None, &serde_json::json!({}), &[])
        .unwrap();
    let (code, _, err) = hugetune_at(
        None,
        &[
            "--db",
            &db,
            "bench",
            "store",
            "--clients",
            "1",
            "--seconds",
            "1",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("not the benchmark's"), "{err}");
}
