//! A database the version-3 code really made (`hugetune optimize` of
//! `hugetune-work chase --size 4M` on the development VM, before fleets:
//! `fixtures/v3-optimize.db`) migrates to the current schema: its machine gets
//! its class from the description stored with it, its profile that class, its
//! validated directive keeps its state, every row a unique id; the host that
//! made it, registering with its id, adopts its machine row and finds its plan
//! without re-analysis; the file passes SQLite's integrity check throughout.

use hugetune_store::db::{Db, PlanSource, SCHEMA_VERSION};
use hugetune_store::identity::HostSpec;
use rusqlite::Connection;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v3-optimize.db");

fn one(db: &Db, sql: &str) -> hugetune_store::backend::Row {
    db.query_sql(sql, &[]).unwrap()[0].clone()
}

fn integrity(path: &std::path::Path) {
    let c = Connection::open(path).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn a_database_made_by_the_version_3_code_migrates_and_keeps_serving() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("h.db");
    std::fs::copy(FIXTURE, &path).unwrap();
    let v: u32 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 3, "the fixture is a version-3 database");

    let mut db = Db::open(&path).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    integrity(&path);
    assert_eq!(
        one(&db, "SELECT count(*) FROM machine_classes")
            .int(0)
            .unwrap(),
        1
    );
    assert!(one(&db, "SELECT class_id FROM profiles WHERE id = 1")
        .opt_int(0)
        .unwrap()
        .is_some());
    assert_eq!(
        one(&db, "SELECT count(*) FROM profiles WHERE uid IS NULL")
            .int(0)
            .unwrap()
            + one(&db, "SELECT count(*) FROM runs WHERE uid IS NULL")
                .int(0)
                .unwrap(),
        0
    );
    let class = one(&db, "SELECT summary FROM machine_classes")
        .text(0)
        .unwrap();
    assert!(class.starts_with("AuthenticAMD "), "{class}");
    // The validated directive keeps its state, carried as one row.
    let ds = db.directives(1).unwrap();
    assert_eq!(ds.len(), 24);
    let validated: Vec<_> = ds.iter().filter(|d| d.validations > 0).collect();
    assert_eq!(validated.len(), 1);
    assert_eq!(
        (validated[0].confidence, validated[0].validations),
        (0.5, 1)
    );
    assert_eq!(
        one(&db, "SELECT count(*) FROM validations WHERE carried")
            .int(0)
            .unwrap(),
        1
    );

    // The host that made it registers with its id and the same description.
    let m = one(
        &db,
        "SELECT hostname, cpu, kernel, details FROM machines WHERE id = 1",
    );
    db.set_host_id("3d1219c7c4c5404aaa1f6d2a48adfda4").unwrap();
    let host = db
        .register_host(&HostSpec {
            hostname: m.text(0).unwrap(),
            cpu: m.text(1).unwrap(),
            kernel: m.text(2).unwrap(),
            details: serde_json::from_str(&m.text(3).unwrap()).unwrap(),
        })
        .unwrap();
    assert_eq!(host.machine_id, 1, "the old row is this host's");
    let program = db
        .find_program(
            "/elsewhere/hugetune-work",
            Some("57f10f17dc73d3c92c2eea5a7fd1270e7f1672fe"),
        )
        .unwrap()
        .unwrap();
    let args: Vec<String> = serde_json::from_str(
        &one(&db, "SELECT args FROM profiles WHERE id = 1")
            .text(0)
            .unwrap(),
    )
    .unwrap();
    match db.plan_source(program, &args).unwrap() {
        PlanSource::Class(p) => assert_eq!((p.id, p.same_input), (1, true)),
        other => panic!("{other:?}"),
    }
    // It learns on, and its export imports elsewhere twice without doubling.
    let mapping = validated[0].mapping.clone();
    assert_eq!(db.record_validation(1, &mapping, 1.0, false).unwrap(), 0.75);
    let doc = db.export().unwrap();
    let mut other = Db::open(&d.path().join("o.db")).unwrap();
    other.import(&doc).unwrap();
    assert_eq!(other.import(&doc).unwrap().total_added(), 0);
    drop(db);
    integrity(&path);
}
