//! Database integrity under `kill -9` (issue 22, item 3), on both engines: a
//! writer process that stores profiles with their directives, runs,
//! validations and imports in a loop (on PostgreSQL also a `db sync` of a
//! local SQLite file into the server) is killed outright at random moments;
//! after every kill the databases open (SQLite: and pass `PRAGMA
//! integrity_check` and `foreign_key_check`; PostgreSQL checks its foreign
//! keys itself) and hold every write whole or not at all. Two writers at once
//! lose nothing.

#[path = "support/pg.rs"]
mod pg;

use hugetune_store::db::{Db, NewDirective, NewRun};
use rusqlite::Connection;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DIRECTIVES: usize = 40;
const IMPORTED: i64 = 5;
const IMPORTED_DIRECTIVES: i64 = 7;
/// Directives of each profile a writer's local database syncs to the server.
const LOCAL_DIRECTIVES: usize = 3;

fn directive(i: usize) -> NewDirective {
    NewDirective {
        mapping: format!("m{i}"),
        assignments: json!([["heap-large", "hugetlb-2m"]]),
        base: i.is_multiple_of(2),
        saving_ns: i as f64,
        pmb: 10.0,
        predicted_speedup: 1.1,
        hugetlb_pages: 3,
        thp_pages: 0,
        // Large enough that a write spans many pages.
        details: json!({ "pad": "x".repeat(2000) }),
        confidence: 1.0,
        validations: 0,
        lost: false,
    }
}

/// An export of a database holding `IMPORTED` programs with one profile each.
fn export_doc(dir: &Path) -> serde_json::Value {
    let mut src = Db::open(&dir.join("src.db")).unwrap();
    for p in 0..IMPORTED {
        let prog = src
            .upsert_program(&format!("/imported/p{p}"), None)
            .unwrap();
        let d: Vec<NewDirective> = (0..IMPORTED_DIRECTIVES as usize).map(directive).collect();
        src.insert_profile(prog, None, &[format!("{p}")], None, &json!({}), &d)
            .unwrap();
    }
    src.export().unwrap()
}

/// The child: writes until killed (`a_killed_writer_leaves_whole_writes_or_none`).
#[test]
#[ignore]
fn writer() {
    let Some(path) = std::env::var_os("HUGETUNE_TEST_DB_WRITER") else {
        return;
    };
    let export = std::env::var_os("HUGETUNE_TEST_DB_EXPORT").unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(export).unwrap()).unwrap();
    // A file or a postgresql:// URL.
    let mut db = Db::open(Path::new(&path)).unwrap();
    let tag = std::process::id();
    let mut local = std::env::var_os("HUGETUNE_TEST_DB_LOCAL_DIR")
        .filter(|d| !d.is_empty())
        .map(|dir| {
            let mut l = Db::open(&Path::new(&dir).join(format!("local-{tag}.db"))).unwrap();
            l.set_host_id(&format!("local-{tag}")).unwrap();
            l.register_host(&hugetune_store::identity::HostSpec {
                hostname: format!("local-{tag}"),
                cpu: "Xeon".into(),
                kernel: "6.1.0".into(),
                details: machine(),
            })
            .unwrap();
            l
        });
    let directives: Vec<NewDirective> = (0..DIRECTIVES).map(directive).collect();
    for i in 0u64.. {
        let prog = db
            .upsert_program(&format!("/bin/w{tag}-{i}"), None)
            .unwrap();
        let profile = db
            .insert_profile(prog, None, &[format!("{i}")], None, &json!({}), &directives)
            .unwrap();
        db.insert_run(&NewRun {
            program_id: prog,
            mapping: "m1".into(),
            profile_id: Some(profile),
            machine_id: None,
            args: vec![],
            plan: json!({}),
            baseline_s: vec![1.0],
            optimized_s: vec![0.5],
            speedup: Some(2.0),
            huge_bytes_backed: 1,
            verdict: "gain".into(),
            details: json!({}),
        })
        .unwrap();
        db.record_validation(profile, "m1", 0.5, i.is_multiple_of(3))
            .unwrap();
        db.import(&doc).unwrap();
        if let Some(local) = &mut local {
            // An offline host's history, synced to the server (push and pull).
            let prog = local
                .upsert_program(&format!("/local/w{tag}-{i}"), None)
                .unwrap();
            let host = local.host().unwrap().unwrap();
            let small: Vec<NewDirective> = (0..LOCAL_DIRECTIVES)
                .map(|k| NewDirective {
                    details: json!({}),
                    ..directive(k)
                })
                .collect();
            local
                .insert_profile(prog, Some(host.machine_id), &[], None, &json!({}), &small)
                .unwrap();
            hugetune_store::sync::sync(local, &mut db).unwrap();
        }
    }
}

/// A machine description of some class (the local databases register with it).
fn machine() -> serde_json::Value {
    json!({
        "kernel": "6.1.0",
        "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "hypervisor": null},
        "tlb": {"geometry": {"levels": [{"name": "L1 DTLB", "arrays": [{"sizes": ["4k"], "entries": 64}]}]}},
        "pools": [], "mthp": [],
    })
}

/// Where the writers write (a file, or a fresh PostgreSQL database's URL), and
/// the export they import, in a directory that lives as long as the test.
struct Target {
    dir: tempfile::TempDir,
    db: PathBuf,
    export: PathBuf,
    postgres: bool,
}

fn target(postgres: bool) -> Target {
    let d = tempfile::tempdir().unwrap();
    let export = d.path().join("h.export");
    std::fs::write(&export, serde_json::to_vec(&export_doc(d.path())).unwrap()).unwrap();
    let db = if postgres {
        PathBuf::from(pg::fresh_database())
    } else {
        d.path().join("h.db")
    };
    Target {
        dir: d,
        db,
        export,
        postgres,
    }
}

/// A writer process; its output goes to `NAME.out` in the target's directory
/// (`output` shows it when the writer stopped by itself).
fn spawn_writer(t: &Target, name: &str) -> std::process::Child {
    let out = std::fs::File::create(t.dir.path().join(format!("{name}.out"))).unwrap();
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "writer", "--test-threads", "1"])
        .env("HUGETUNE_TEST_DB_WRITER", &t.db)
        .env("HUGETUNE_TEST_DB_EXPORT", &t.export)
        .env(
            "HUGETUNE_TEST_DB_LOCAL_DIR",
            if t.postgres {
                t.dir.path().as_os_str()
            } else {
                "".as_ref()
            },
        )
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

fn output(t: &Target, name: &str) -> String {
    std::fs::read_to_string(t.dir.path().join(format!("{name}.out"))).unwrap_or_default()
}

fn count(db: &Db, sql: &str, params: &[hugetune_store::backend::Val]) -> i64 {
    db.query_sql(sql, params).unwrap()[0].int(0).unwrap()
}

/// Every check a database that survived a kill must pass; the number of
/// profiles the writers stored.
fn check(t: &Target) -> i64 {
    // Opening runs the migrations and takes the WAL over: it must work.
    let db = Db::open(&t.db).unwrap();
    let mut sqlite_files = vec![];
    if t.postgres {
        // The writers' local databases, which syncs pulled into.
        for e in std::fs::read_dir(t.dir.path()).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "db") {
                sqlite_files.push(p);
            }
        }
    } else {
        sqlite_files.push(t.db.clone());
    }
    for f in &sqlite_files {
        drop(Db::open(f).unwrap());
        let c = Connection::open(f).unwrap();
        let ok: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        let dangling: i64 = c
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(dangling, 0, "foreign keys that point nowhere");
    }
    // A synced profile arrived with all its directives or not at all.
    let partial = count(
        &db,
        "SELECT count(*) FROM profiles p JOIN programs g ON g.id = p.program_id
         WHERE g.path LIKE '/local/%'
           AND (SELECT count(*) FROM directives d WHERE d.profile_id = p.id) <> ?1",
        &[(LOCAL_DIRECTIVES as i64).into()],
    );
    assert_eq!(partial, 0, "a synced profile without all its directives");
    // A profile is stored with all its directives or not at all.
    let partial = count(
        &db,
        "SELECT count(*) FROM profiles p JOIN programs g ON g.id = p.program_id
         WHERE g.path LIKE '/bin/w%'
           AND (SELECT count(*) FROM directives d WHERE d.profile_id = p.id) <> ?1",
        &[(DIRECTIVES as i64).into()],
    );
    assert_eq!(partial, 0, "a profile without all its directives");
    // A validation is counted by its directive exactly when its row is there.
    let miscounted = count(
        &db,
        "SELECT count(*) FROM directives d
         WHERE d.validations <> (SELECT count(*) FROM validations v WHERE v.directive_id = d.id)",
        &[],
    );
    assert_eq!(miscounted, 0, "a validation half recorded");
    // An import is whole or absent.
    let imported = count(
        &db,
        "SELECT count(*) FROM profiles p JOIN programs g ON g.id = p.program_id
         WHERE g.path LIKE '/imported/%'",
        &[],
    );
    assert!(
        imported == 0 || imported == IMPORTED,
        "{imported} imported profiles"
    );
    let imported_directives = count(
        &db,
        "SELECT count(*) FROM directives d JOIN profiles p ON p.id = d.profile_id
         JOIN programs g ON g.id = p.program_id WHERE g.path LIKE '/imported/%'",
        &[],
    );
    assert_eq!(imported_directives, imported * IMPORTED_DIRECTIVES);
    count(
        &db,
        "SELECT count(*) FROM profiles p JOIN programs g ON g.id = p.program_id WHERE g.path LIKE '/bin/w%'",
        &[],
    )
}

#[test]
fn a_killed_writer_leaves_whole_writes_or_none_sqlite() {
    killed_writers(&target(false));
}

#[test]
fn a_killed_writer_leaves_whole_writes_or_none_postgres() {
    killed_writers(&target(true));
}

fn killed_writers(t: &Target) {
    let kills = std::env::var("HUGETUNE_DB_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12u64);
    let mut stored = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for k in 0..kills {
        let mut child = spawn_writer(t, "writer");
        // 20..420 ms: before, during and after the first import, in the middle of
        // profiles, runs and validations.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(20 + rng % 400));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let now = check(t);
        assert!(
            now >= stored,
            "kill {k}: stored profiles went from {stored} to {now}"
        );
        stored = now;
    }
    eprintln!("{kills} kills, {stored} profiles stored whole");
    assert!(stored > 0, "the writers never got a profile stored");
}

#[test]
fn two_writers_at_once_lose_nothing_sqlite() {
    two_writers(&target(false));
}

#[test]
fn two_writers_at_once_lose_nothing_postgres() {
    two_writers(&target(true));
}

fn two_writers(t: &Target) {
    Db::open(&t.db).unwrap();
    let mut a = spawn_writer(t, "a");
    let mut b = spawn_writer(t, "b");
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(50));
        // Neither died of a busy database.
        assert!(
            a.try_wait().unwrap().is_none(),
            "writer a stopped:\n{}",
            output(t, "a")
        );
        assert!(
            b.try_wait().unwrap().is_none(),
            "writer b stopped:\n{}",
            output(t, "b")
        );
    }
    a.kill().unwrap();
    b.kill().unwrap();
    a.wait().unwrap();
    b.wait().unwrap();
    let db = Db::open(&t.db).unwrap();
    // Every iteration a writer began after its program row holds a profile: the
    // per-writer sequence of programs has no gaps but possibly the last one.
    // (writer, profiles, programs), from program paths "/bin/w<pid>-<i>".
    let mut per_writer: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    let rows = db
        .query_sql(
            "SELECT g.path, count(p.id) FROM programs g LEFT JOIN profiles p ON p.program_id = g.id
             WHERE g.path LIKE '/bin/w%' GROUP BY g.id, g.path",
            &[],
        )
        .unwrap();
    for row in rows {
        let (path, profiles) = (row.text(0).unwrap(), row.int(1).unwrap());
        let w = path.split('-').next().unwrap().to_string();
        let e = per_writer.entry(w).or_default();
        e.0 += profiles;
        e.1 += 1;
    }
    assert_eq!(per_writer.len(), 2, "{per_writer:?}");
    for (w, (profiles, programs)) in &per_writer {
        assert!(*profiles > 0, "{w} stored nothing");
        assert!(
            programs - profiles <= 1,
            "{w}: {programs} programs, {profiles} profiles"
        );
    }
    check(t);
}
