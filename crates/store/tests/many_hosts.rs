//! Many hosts writing to one store at once (issue 20, item 3), on both engines:
//! hosts (threads, each with its own connection and host id) insert runs,
//! record validations of one shared directive, store profiles of the same
//! program and import the same export all at the same moment (the program's
//! row is then locked by every profile and validation: its generation
//! triggers); afterwards nothing is lost (every run and validation is
//! there, the directive counted every validation and its confidence is the
//! combination of every host's) and nothing is duplicated (one row per unique
//! id, one program per build, one machine per host, one class).

#[path = "support/pg.rs"]
mod pg;

use hugetune_store::db::{Db, NewDirective, NewRun};
use hugetune_store::identity::HostSpec;
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};

const HOSTS: usize = 8;
const EACH: usize = 30;

fn machine() -> serde_json::Value {
    json!({
        "hostname": "h", "kernel": "6.1.0",
        "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "brand": "Xeon", "hypervisor": null},
        "tlb": {"geometry": {"levels": [{"name": "L1 DTLB", "arrays": [{"sizes": ["4k"], "entries": 64, "ways": 4}]}]}},
        "pools": [{"page_kb": 2048}], "mthp": [],
    })
}

fn directive() -> NewDirective {
    NewDirective {
        mapping: "heap-large:hugetlb".into(),
        assignments: json!([["heap-large", "hugetlb-2m"]]),
        base: true,
        saving_ns: 1e6,
        pmb: 100.0,
        predicted_speedup: 1.3,
        hugetlb_pages: 16,
        thp_pages: 0,
        details: json!({}),
        confidence: 1.0,
        validations: 0,
        lost: false,
    }
}

fn count(db: &Db, sql: &str) -> i64 {
    db.query_sql(sql, &[]).unwrap()[0].int(0).unwrap()
}

fn many_hosts_at_once(location: PathBuf) {
    // The profile every host validates, stored by the first host.
    let mut first = Db::open(&location).unwrap();
    first.set_host_id("host-0").unwrap();
    let spec = |i: usize| HostSpec {
        hostname: format!("host-{i}"),
        cpu: "Xeon".into(),
        kernel: "6.1.0".into(),
        details: machine(),
    };
    let h0 = first.register_host(&spec(0)).unwrap();
    let program = first.upsert_program("/bin/app", Some("b1d")).unwrap();
    let profile = first
        .insert_profile(
            program,
            Some(h0.machine_id),
            &["app".into()],
            None,
            &json!({}),
            &[directive()],
        )
        .unwrap();
    // An export every host imports at the same time as the others.
    let doc = {
        let mut other = Db::open_in_memory().unwrap();
        let p = other.upsert_program("/opt/lib/tool", Some("t00l")).unwrap();
        other
            .insert_profile(p, None, &["tool".into()], None, &json!({}), &[directive()])
            .unwrap();
        other.export().unwrap()
    };
    drop(first);

    let start = Arc::new(Barrier::new(HOSTS));
    let threads: Vec<_> = (0..HOSTS)
        .map(|i| {
            let (location, start, doc, spec) =
                (location.clone(), start.clone(), doc.clone(), spec(i));
            std::thread::spawn(move || {
                let mut db = Db::open(&location).unwrap();
                db.set_host_id(&format!("host-{i}")).unwrap();
                start.wait();
                db.register_host(&spec).unwrap();
                // The same program under another path on each host: one program.
                let p = db
                    .upsert_program(&format!("/srv/{i}/app"), Some("b1d"))
                    .unwrap();
                assert_eq!(p, program);
                for k in 0..EACH {
                    db.insert_run(&NewRun {
                        program_id: p,
                        mapping: "heap-large:hugetlb".into(),
                        profile_id: Some(profile),
                        machine_id: None,
                        args: vec!["app".into(), format!("{k}")],
                        plan: json!({}),
                        baseline_s: vec![1.0],
                        optimized_s: vec![0.8],
                        speedup: Some(1.25),
                        huge_bytes_backed: 1 << 25,
                        verdict: "gain".into(),
                        details: json!({}),
                    })
                    .unwrap();
                    db.record_validation(profile, "heap-large:hugetlb", 0.9, false)
                        .unwrap();
                    if k % 10 == 0 {
                        db.import(&doc).unwrap();
                    }
                    if k == EACH / 2 {
                        // A profile of the program for this host, amid the
                        // others' validations of its first profile's directive.
                        let machine = db.host().unwrap().unwrap().machine_id;
                        db.insert_profile(
                            p,
                            Some(machine),
                            &["app".into(), format!("{i}")],
                            None,
                            &json!({}),
                            &[directive()],
                        )
                        .unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }

    let db = Db::open(&location).unwrap();
    let n = (HOSTS * EACH) as i64;
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), n);
    assert_eq!(count(&db, "SELECT count(DISTINCT uid) FROM runs"), n);
    assert_eq!(count(&db, "SELECT count(*) FROM validations"), n);
    assert_eq!(count(&db, "SELECT count(*) FROM machines"), HOSTS as i64);
    assert_eq!(count(&db, "SELECT count(*) FROM machine_classes"), 1);
    assert_eq!(
        count(&db, "SELECT count(*) FROM programs"),
        2,
        "app and the imported tool"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM profiles"),
        2 + HOSTS as i64
    );
    // Every write to the program's profiles and directives moved its
    // generation once, none lost: the first profile and its directive, each
    // host's, and per validation the directive's count and its confidence.
    assert_eq!(
        count(
            &db,
            &format!("SELECT generation FROM programs WHERE id = {program}")
        ),
        2 + 2 * HOSTS as i64 + 2 * n
    );
    // Every host's runs are attributed to it.
    let per_host = db
        .query_sql(
            "SELECT m.fingerprint, count(*) FROM runs r JOIN machines m ON m.id = r.machine_id
             GROUP BY m.fingerprint ORDER BY 1",
            &[],
        )
        .unwrap();
    assert_eq!(per_host.len(), HOSTS);
    assert!(per_host.iter().all(|r| r.int(1).unwrap() == EACH as i64));
    let d = &db.directives(profile).unwrap()[0];
    assert_eq!(d.validations, n as u64, "every validation counted");
    // Each host moved its own confidence EACH times toward 0.9: the mean of equal hosts.
    let per_host: f64 = (0..EACH).fold(1.0, |c, _| 0.5 * c + 0.45);
    assert!((d.confidence - per_host).abs() < 1e-9, "{}", d.confidence);
    let pv = db.provenance(profile, Some("heap-large:hugetlb")).unwrap();
    assert_eq!(pv.validated_by.len(), HOSTS);
    assert!(pv.validated_by.iter().all(|h| h.validations == EACH as u64));
}

#[test]
fn many_hosts_at_once_lose_and_duplicate_nothing_sqlite() {
    let d = tempfile::tempdir().unwrap();
    many_hosts_at_once(d.path().join("fleet.db"));
}

#[test]
fn many_hosts_at_once_lose_and_duplicate_nothing_postgres() {
    many_hosts_at_once(PathBuf::from(pg::fresh_database()));
}

/// The lock order on PostgreSQL: a transaction that holds the program's row
/// (as one storing a profile does: its generation trigger's lock) and then
/// updates a directive (as an import joining a validation to it does) must
/// not deadlock with a validation of that directive started meanwhile. The
/// validation takes the program's row before the directive's, so it waits
/// holding nothing; taking the directive's first, it would hold what the
/// other waits for (here that wait gives up after 500 ms, before the server's
/// deadlock check at 1 s would abort one of the two).
#[test]
fn a_validation_takes_the_program_row_before_the_directive_postgres() {
    let location = PathBuf::from(pg::fresh_database());
    let mut db = Db::open(&location).unwrap();
    let program = db.upsert_program("/bin/app", Some("b1d")).unwrap();
    let profile = db
        .insert_profile(
            program,
            None,
            &["app".into()],
            None,
            &json!({}),
            &[directive()],
        )
        .unwrap();
    let other = Db::open(&location).unwrap();
    other.execute_sql("BEGIN", &[]).unwrap();
    other
        .execute_sql("SET LOCAL lock_timeout = '500ms'", &[])
        .unwrap();
    other
        .execute_sql(
            "UPDATE programs SET generation = generation + 1 WHERE id = ?1",
            &[program.into()],
        )
        .unwrap();
    let validation = std::thread::spawn(move || {
        db.record_validation(profile, "heap-large:hugetlb", 0.9, false)
            .unwrap();
        db
    });
    // The validation is waiting by now (on a loaded machine perhaps not yet:
    // the test then passes either way).
    std::thread::sleep(std::time::Duration::from_millis(300));
    other
        .execute_sql(
            "UPDATE directives SET validations = validations + 1 WHERE profile_id = ?1",
            &[profile.into()],
        )
        .expect("the directive's row is free while the validation waits for the program's");
    other.execute_sql("COMMIT", &[]).unwrap();
    let db = validation.join().unwrap();
    assert_eq!(db.directives(profile).unwrap()[0].validations, 2);
}
