//! A fleet end to end (issue 20, item 5), on a PostgreSQL store of its own:
//! host A `optimize`s a small program; host B, another host of the same
//! machine class, `run`s it with A's plan and profiles nothing; host C, of
//! another class (its own TLB geometry through `--tlb`), gets a re-analysis of
//! A's profile for its class, not A's predictions; `run --json` says where each
//! plan came from. An offline host with its own SQLite file `db sync`s with the
//! fleet store: it gets its class's plan, its runs go up, and syncing again
//! changes nothing on either side. A loss another host measures bars a plan
//! for the class: a start from `run`'s start-up cache applies it for at most
//! the TTL after the store last confirmed the entry; planted or corrupt
//! entries are refused; `validate --revalidate` lifts the bar for every host
//! of the class unless it measures a loss.

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

// ------------------------------------------------------------------ bars

/// `sh`, the program of the bar tests: a binary with a build-id everywhere,
/// whose runs take milliseconds, so the plan a run applies is what is tested.
const SH: &str = "/bin/sh";

/// `hugetune --db DB --host-id HOST ARGS`, with the start-up cache in `cache`
/// (`HUGETUNE_START_CACHE`): (code, stdout, stderr).
fn at(db: &str, host: &str, cache: &Path, args: &[&str]) -> (i32, String, String) {
    let o = std::process::Command::new(common::HUGETUNE)
        .args(["--db", db, "--host-id", host])
        .args(args)
        .env("HUGETUNE_RUNTIME_LIB", common::LIB)
        .env("HUGETUNE_QEMU_PLUGIN", common::PLUGIN)
        .env("HUGETUNE_START_CACHE", cache)
        .output()
        .expect("run hugetune");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `run --json [extra] -- sh -c 'exit 0'` on `host`: (the mapping applied,
/// where the plan came from at start-up, stderr).
fn sh_run(db: &str, host: &str, cache: &Path, extra: &[&str]) -> (String, String, String) {
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", SH, "-c", "exit 0"]);
    let (code, out, err) = at(db, host, cache, &args);
    assert_eq!(code, 0, "run on {host} failed:\n{err}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"));
    assert_eq!(v["exit_code"], 0, "{v}");
    (
        v["plan"]["mapping"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        v["start"]["plan"].as_str().unwrap_or_default().to_string(),
        err,
    )
}

/// The store as `host` (this machine, registered under that id).
fn store_as(db: &str, host: &str) -> hugetune_store::db::Db {
    let mut s = hugetune_store::db::Db::open(Path::new(db)).unwrap();
    s.set_host_id(host).unwrap();
    let m = hugetune_host::machine::machine(None).unwrap();
    s.register_host(&hugetune_store::identity::HostSpec {
        hostname: m.hostname.clone(),
        cpu: m.cpu.brand.clone(),
        kernel: m.kernel.clone(),
        details: serde_json::to_value(&m).unwrap(),
    })
    .unwrap();
    s
}

/// Stores, as host A (this machine's class), a profile of `sh` with two
/// transparent-huge-page plans, the better first; returns (profile, better
/// mapping, second mapping).
fn sh_profile(db: &str) -> (i64, String, String) {
    use hugetune_model::category::Category;
    use hugetune_model::page::Backing;
    use hugetune_model::rank::Prediction;
    let mut s = store_as(db, "host-a");
    let machine = s.host().unwrap().unwrap().machine_id;
    let path = hugetune_capture::elf::resolve_program(std::ffi::OsStr::new(SH)).unwrap();
    let build = hugetune_capture::elf::build_id(&path).unwrap();
    assert!(build.is_some(), "{} has no build-id", path.display());
    let program = s
        .upsert_program(&path.display().to_string(), build.as_deref())
        .unwrap();
    // The second saves far less: the first stays the planner's choice at the
    // confidence a loss and a lifted bar leave it (the mean over hosts).
    let plans = [(Category::HeapLarge, 1.30), (Category::Static, 1.02)];
    let directives: Vec<_> = plans
        .iter()
        .map(|&(c, speedup)| {
            let assignments = vec![(c, Backing::Thp2m)];
            let label = hugetune_model::rank::label(&assignments);
            let saving = (speedup - 1.0) * 5e7;
            let p = Prediction {
                mapping: label.clone(),
                label: label.clone(),
                base: true,
                assignments,
                miss_time_ns: 2.0 * saving,
                saving_ns: saving,
                pmb: 50.0,
                predicted_seconds: 0.05 / speedup,
                predicted_speedup: speedup,
                hugetlb_pages: 0,
                hugetlb_1g_pages: 0,
                static_pages_1g: (0, 0),
                thp_pages: 4,
                sites: vec![],
                walks: 1000,
                faults: 100,
            };
            hugetune_store::db::NewDirective {
                mapping: label,
                assignments: serde_json::to_value(&p.assignments).unwrap(),
                base: true,
                saving_ns: saving,
                pmb: p.pmb,
                predicted_speedup: speedup,
                hugetlb_pages: 0,
                thp_pages: 4,
                details: serde_json::to_value(&p).unwrap(),
                confidence: 1.0,
                validations: 0,
                lost: false,
            }
        })
        .collect();
    let summary = serde_json::json!({
        "native_s": 0.05,
        "threshold": common::THRESHOLD,
        "significance": {"tlb_misses_per_s": 1e6, "faults_per_s": 1e4, "passes": true, "source": "model"},
        "program": {"forks": false, "fork_children": 0},
    });
    let profile = s
        .insert_profile(
            program,
            Some(machine),
            &[SH.into(), "-c".into(), "exit 0".into()],
            None,
            &summary,
            &directives,
        )
        .unwrap();
    (
        profile,
        directives[0].mapping.clone(),
        directives[1].mapping.clone(),
    )
}

/// The entries of the start-up cache directory.
fn entries(cache: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(cache)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Issue 20's start-up cache against the fleet store: host A's run starts
/// from a fresh entry; host B's loss bars the plan for the class; A applies
/// the barred plan for at most the TTL after the store last confirmed its
/// entry, then no more. Planted or corrupt entries are refused with a note
/// (the run goes on), and `--no-cache` neither reads nor writes one.
#[test]
fn a_loss_on_another_host_reaches_a_cached_start_within_the_ttl() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("start");
    let fleet = pg::fresh_database();
    let (profile, best, second) = sh_profile(&fleet);

    // The first start looks the plan up and writes the entry; the next is
    // served from it.
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &[]);
    assert_eq!((m.as_str(), how.as_str()), (best.as_str(), "looked up"));
    assert_eq!(entries(&cache).len(), 1, "{:?}", entries(&cache));
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &[]);
    assert_eq!((m.as_str(), how.as_str()), (best.as_str(), "cached"));

    // Host B (same class) measures a loss: the plan is barred for the class.
    let b = store_as(&fleet, "host-b");
    b.record_validation(profile, &best, 0.0, true).unwrap();
    let program = b
        .query_sql(
            "SELECT program_id FROM profiles WHERE id = ?1",
            &[profile.into()],
        )
        .unwrap()[0]
        .int(0)
        .unwrap();
    assert_eq!(b.lost_mappings(program).unwrap(), vec![best.clone()]);

    // Past the TTL the store is asked first: the bar applies at once.
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "0"]);
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "looked up"));
    // The entry now holds the bar: a fresh start does not apply the plan.
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &[]);
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "cached"));

    // B measures the plan again without a loss: no longer barred. Within the
    // TTL A still starts under its entry (the documented bound), whose
    // confirmation meanwhile finds the store changed and rewrites it: the
    // next start applies the plan again.
    b.record_validation(profile, &best, 1.0, false).unwrap();
    assert!(b.lost_mappings(program).unwrap().is_empty());
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "3600"]);
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "cached"));
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "3600"]);
    assert_eq!((m.as_str(), how.as_str()), (best.as_str(), "cached"));
    // A loss again, with a short TTL and a wait past it: not applied.
    b.record_validation(profile, &best, 0.0, true).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (m, how, _) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "2"]);
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "looked up"));

    // A corrupt entry: refused with a note, the run looks the plan up.
    let [entry] = &entries(&cache)[..] else {
        panic!("{:?}", entries(&cache))
    };
    std::fs::write(entry, b"{\"format\": 1, \"key\": ").unwrap();
    let (m, how, err) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "3600"]);
    assert!(err.contains("ignoring the start-up cache entry"), "{err}");
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "looked up"));
    // A valid entry planted where others may write it: refused too, even one
    // that still holds the barred plan (saved before the bar).
    let good = std::fs::read(entry).unwrap();
    let planted: Value = serde_json::from_slice(&good).unwrap();
    let mut old = planted.clone();
    old["plan"]["lost"] = serde_json::json!([]);
    std::fs::write(entry, serde_json::to_vec(&old).unwrap()).unwrap();
    std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (m, how, err) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "3600"]);
    assert!(err.contains("others may read or write it"), "{err}");
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "looked up"));
    // A symbolic link in the entry's place: refused.
    let elsewhere = d.path().join("elsewhere.json");
    std::fs::rename(entry, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, entry).unwrap();
    let (m, how, err) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "3600"]);
    assert!(err.contains("ignoring the start-up cache entry"), "{err}");
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "looked up"));
    // The look-up replaced it with a good entry of this user.
    let meta = std::fs::symlink_metadata(entry).unwrap();
    assert!(meta.is_file() && meta.permissions().mode() & 0o077 == 0);
    let (_, how, _) = sh_run(&fleet, "host-a", &cache, &["--cache-ttl", "3600"]);
    assert_eq!(how, "cached");

    // --no-cache: no entry read or written.
    for e in entries(&cache) {
        std::fs::remove_file(e).unwrap();
    }
    let (m, how, err) = sh_run(&fleet, "host-a", &cache, &["--no-cache"]);
    assert_eq!((m.as_str(), how.as_str()), (second.as_str(), "looked up"));
    assert!(!err.contains("start-up cache"), "{err}");
    assert!(entries(&cache).is_empty(), "{:?}", entries(&cache));
}

/// `validate --revalidate` on a plan another host's loss barred: no loss
/// measured lifts the bar for every host of the class (both apply the plan
/// again); a loss (here a plan that breaks the program: it exits otherwise
/// under the runtime library) keeps it.
#[test]
fn revalidation_lifts_a_bar_for_the_class_unless_it_loses() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("start");
    let fleet = pg::fresh_database();
    let (profile, best, second) = sh_profile(&fleet);
    let b = store_as(&fleet, "host-b");
    b.record_validation(profile, &best, 0.0, true).unwrap();
    for h in ["host-a", "host-c"] {
        let (m, _, _) = sh_run(&fleet, h, &cache, &["--no-cache"]);
        assert_eq!(m, second, "barred on {h}");
    }
    let revalidate = |script: &str| {
        at(
            &fleet,
            "host-a",
            &cache,
            &[
                "validate",
                "--revalidate",
                &best,
                "--runs",
                "1",
                "--max-runs",
                "1",
                "--json",
                "--",
                SH,
                "-c",
                script,
            ],
        )
    };
    // Revalidating a plan that is not barred is refused.
    let (code, _, err) = at(
        &fleet,
        "host-a",
        &cache,
        &[
            "validate",
            "--revalidate",
            &second,
            "--",
            SH,
            "-c",
            "exit 0",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("is not barred"), "{err}");

    // No loss (one pair can never be significant): lifted for A and C alike,
    // though B's own latest validation is still its loss.
    let (code, out, err) = revalidate("exit 0");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("its bar is lifted"), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["mapping"], best.as_str(), "{v}");
    for h in ["host-a", "host-c", "host-b"] {
        let (m, _, _) = sh_run(&fleet, h, &cache, &["--no-cache"]);
        assert_eq!(m, best, "still barred on {h}");
    }

    // B loses again; A's revalidation breaks the program: the bar stays.
    b.record_validation(profile, &best, 0.0, true).unwrap();
    let (code, _, err) = revalidate("test -z \"$HUGETUNE_MODE\"");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("stays barred"), "{err}");
    for h in ["host-a", "host-c"] {
        let (m, _, _) = sh_run(&fleet, h, &cache, &["--no-cache"]);
        assert_eq!(m, second, "not barred on {h}");
    }
}
