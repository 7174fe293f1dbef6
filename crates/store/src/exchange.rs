//! `hugetune db export|import|sync`: the database as one JSON document, and
//! back. Import merges: rows are matched by identity (a class by its key, a
//! machine by its host id, a program by its build-id, a profile, run,
//! calibration or validation by its unique id; rows of exports older than
//! schema 4 by their owner, time and content), ids are renumbered, and rows
//! already present are skipped, so importing the same export twice adds
//! nothing. Validations that join a directive already present move its
//! confidence as if recorded here.
//!
//! Invariants: an export reads one snapshot (rows committed meanwhile by other
//! hosts are all in it or all out); an import is one transaction (any bad row:
//! nothing imported);
//! many hosts importing into one server at once neither fail on each other's
//! rows nor duplicate them (insert-or-skip on the unique keys, then look-up).

use crate::backend::{Conn, Val};
use crate::db::{carry_state, lock_program, refresh_directive, Db, NewDirective, SCHEMA_VERSION};
use crate::identity::new_uid;
use crate::schema::{columns_with_kinds, Kind};
use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap, HashSet};

pub const EXPORT_FORMAT: &str = "hugetune-db-export";

/// How a row already present is recognized.
enum Identity {
    Columns(&'static [&'static str]),
    /// By `uid`; rows of older exports (no uid) by these columns.
    UidOr(&'static [&'static str]),
    /// By build-id when it has one, else by path.
    Program,
}

/// Tables in dependency order, with the columns an export carries (besides `id`)
/// and the foreign keys among them.
struct Table {
    name: &'static str,
    columns: &'static [&'static str],
    /// (column, referenced table): the referenced row must be in the export.
    refs: &'static [(&'static str, &'static str)],
    /// (column, referenced table): kept when in the export, else left empty.
    soft_refs: &'static [(&'static str, &'static str)],
    identity: Identity,
    /// The rows of one class (`db sync`'s pull), `?1` the class id; None: none.
    of_class: Option<&'static str>,
}

/// The machines a class's rows name: its hosts, and those that analyzed or validated for it.
const MACHINES_OF_CLASS: &str = "SELECT id FROM machines WHERE class_id = ?1
    UNION SELECT machine_id FROM profiles WHERE class_id = ?1
    UNION SELECT v.machine_id FROM validations v JOIN directives d ON d.id = v.directive_id
          JOIN profiles p ON p.id = d.profile_id WHERE p.class_id = ?1";

const TABLES: &[Table] = &[
    Table {
        name: "machine_classes",
        columns: &["key", "summary", "created"],
        refs: &[],
        soft_refs: &[],
        identity: Identity::Columns(&["key"]),
        of_class: Some("id = ?1 OR id IN (SELECT class_id FROM machines WHERE id IN (MACHINES))"),
    },
    Table {
        name: "machines",
        columns: &[
            "fingerprint",
            "hostname",
            "cpu",
            "kernel",
            "details",
            "created",
            "class_id",
        ],
        refs: &[],
        soft_refs: &[("class_id", "machine_classes")],
        identity: Identity::Columns(&["fingerprint"]),
        of_class: Some("id IN (MACHINES)"),
    },
    Table {
        name: "programs",
        columns: &["path", "build_id", "created"],
        refs: &[],
        soft_refs: &[],
        identity: Identity::Program,
        of_class: Some("id IN (SELECT program_id FROM profiles WHERE class_id = ?1)"),
    },
    Table {
        name: "profiles",
        columns: &[
            "program_id",
            "machine_id",
            "args",
            "bundle",
            "summary",
            "created",
            "input_signature",
            "class_id",
            "origin_id",
            "uid",
        ],
        refs: &[("program_id", "programs"), ("machine_id", "machines")],
        soft_refs: &[("class_id", "machine_classes"), ("origin_id", "profiles")],
        identity: Identity::UidOr(&["program_id", "created", "args", "summary"]),
        of_class: Some("class_id = ?1"),
    },
    Table {
        name: "directives",
        columns: &[
            "profile_id",
            "mapping",
            "assignments",
            "base",
            "saving_ns",
            "pmb",
            "predicted_speedup",
            "hugetlb_pages",
            "thp_pages",
            "confidence",
            "details",
            "validations",
            "lost",
        ],
        refs: &[("profile_id", "profiles")],
        soft_refs: &[],
        identity: Identity::Columns(&["profile_id", "mapping"]),
        of_class: Some("profile_id IN (SELECT id FROM profiles WHERE class_id = ?1)"),
    },
    Table {
        name: "runs",
        columns: &[
            "program_id",
            "profile_id",
            "machine_id",
            "args",
            "plan",
            "baseline_s",
            "optimized_s",
            "speedup",
            "huge_bytes_backed",
            "verdict",
            "details",
            "created",
            "mapping",
            "uid",
        ],
        refs: &[
            ("program_id", "programs"),
            ("profile_id", "profiles"),
            ("machine_id", "machines"),
        ],
        soft_refs: &[],
        identity: Identity::UidOr(&["program_id", "created", "args", "plan", "optimized_s"]),
        of_class: None,
    },
    Table {
        name: "calibrations",
        columns: &["machine_id", "data", "created", "uid"],
        refs: &[("machine_id", "machines")],
        soft_refs: &[],
        identity: Identity::UidOr(&["machine_id", "created", "data"]),
        of_class: Some("machine_id IN (SELECT id FROM machines WHERE class_id = ?1)"),
    },
    Table {
        name: "validations",
        columns: &[
            "uid",
            "directive_id",
            "machine_id",
            "agreement",
            "lost",
            "carried",
            "created",
            "lifts",
        ],
        refs: &[("directive_id", "directives"), ("machine_id", "machines")],
        soft_refs: &[],
        identity: Identity::UidOr(&[]),
        of_class: Some(
            "directive_id IN (SELECT d.id FROM directives d JOIN profiles p ON p.id = d.profile_id WHERE p.class_id = ?1)",
        ),
    },
];

fn to_json(v: Val) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Int(i) => i.into(),
        Val::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Val::Text(t) => t.into(),
        Val::Blob(b) => b.iter().map(|&x| Value::from(x)).collect(),
    }
}

fn to_val(v: &Value, what: &str) -> Result<Val> {
    Ok(match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Int(*b as i64),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Val::Int(i),
            None => Val::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Val::Text(s.clone()),
        _ => bail!("{what}: expected a number, a string or null"),
    })
}

/// Columns that hold JSON text: an import checks that they parse, so that no
/// row it stores is one the readers call corrupt.
const JSON_COLUMNS: &[&str] = &[
    "machine_classes.key",
    "machines.details",
    "profiles.args",
    "profiles.summary",
    "directives.assignments",
    "directives.details",
    "runs.args",
    "runs.plan",
    "runs.baseline_s",
    "runs.optimized_s",
    "runs.details",
    "calibrations.data",
];

/// Checks a value against its column's kind (SQLite would store text in a REAL
/// column; PostgreSQL would refuse it: the same error on both).
fn check_kind(v: &Val, kind: Kind, table: &str, column: &str, what: &str) -> Result<()> {
    let ok = match (v, kind) {
        (Val::Null, _) => true,
        (Val::Int(_), Kind::Int | Kind::Real) => true,
        (Val::Real(f), Kind::Real) => f.is_finite(),
        (Val::Text(t), Kind::Text) => {
            if JSON_COLUMNS.contains(&format!("{table}.{column}").as_str())
                && serde_json::from_str::<Value>(t).is_err()
            {
                bail!("{what}, column {column}: not JSON text");
            }
            !t.contains('\0')
        }
        _ => false,
    };
    if !ok {
        bail!("{what}, column {column}: {v:?} does not fit a {kind:?} column");
    }
    Ok(())
}

/// Counts of rows an import added and skipped, per table.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct ImportCounts {
    pub added: Vec<(String, u64)>,
    pub skipped: Vec<(String, u64)>,
}

impl ImportCounts {
    /// Rows added, all tables together.
    pub fn total_added(&self) -> u64 {
        self.added.iter().map(|(_, n)| n).sum()
    }
}

fn export_rows(c: &mut Conn, class: Option<i64>) -> Result<Value> {
    let mut doc = Map::new();
    doc.insert("format".into(), EXPORT_FORMAT.into());
    doc.insert("schema_version".into(), SCHEMA_VERSION.into());
    for t in TABLES {
        let (filter, params) = match class {
            None => (String::new(), vec![]),
            Some(k) => match t.of_class {
                Some(f) => (
                    format!(" WHERE {}", f.replace("MACHINES", MACHINES_OF_CLASS)),
                    vec![Val::Int(k)],
                ),
                None => continue,
            },
        };
        let sql = format!(
            "SELECT id, {} FROM {}{filter} ORDER BY id",
            t.columns.join(", "),
            t.name
        );
        let rows = c.query(&sql, &params)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut o = Map::new();
            o.insert("id".into(), to_json(r.val(0)?));
            for (i, col) in t.columns.iter().enumerate() {
                o.insert((*col).into(), to_json(r.val(i + 1)?));
            }
            out.push(Value::Object(o));
        }
        doc.insert(t.name.into(), Value::Array(out));
    }
    Ok(Value::Object(doc))
}

/// The id of a row equal to `cols`/`vals` by the table's identity, if any.
fn find(c: &mut Conn, t: &Table, cols: &[&str], vals: &[Val]) -> Result<Option<i64>> {
    let get = |k: &str| cols.iter().position(|c| *c == k).map(|i| vals[i].clone());
    let present = |k: &str| !matches!(get(k), None | Some(Val::Null));
    // The identities to try, in order; each only where the row has all its columns.
    let alternatives: Vec<&[&str]> = match &t.identity {
        Identity::Columns(k) => vec![k],
        Identity::UidOr(old) if present("uid") => {
            let mut v: Vec<&[&str]> = vec![&["uid"]];
            // One class's re-analysis of one profile, made on two hosts apart,
            // is the same analysis (a unique key).
            if t.name == "profiles" && present("origin_id") && present("class_id") {
                v.push(&["origin_id", "class_id"]);
            }
            v
        }
        Identity::UidOr(old) => vec![old],
        Identity::Program => match get("build_id") {
            Some(Val::Text(b)) if !b.is_empty() => vec![&["build_id"]],
            _ => vec![&["path", "build_id"]],
        },
    };
    for keys in alternatives {
        if keys.is_empty() || !keys.iter().all(|k| get(k).is_some()) {
            // The export lacks a column of the identity: never a duplicate.
            continue;
        }
        let mut cond = Vec::new();
        let mut args = Vec::new();
        for k in keys {
            args.push(get(k).unwrap_or(Val::Null));
            cond.push(format!("{k} IS NOT DISTINCT FROM ?{}", args.len()));
        }
        let sql = format!(
            "SELECT id FROM {} WHERE {} ORDER BY id LIMIT 1",
            t.name,
            cond.join(" AND ")
        );
        if let Some(r) = c.query_opt(&sql, &args)? {
            return Ok(Some(r.int(0)?));
        }
    }
    Ok(None)
}

fn import_rows(c: &mut Conn, doc: &Value) -> Result<ImportCounts> {
    if doc["format"] != EXPORT_FORMAT {
        bail!("not a hugetune database export (\"format\" is not \"{EXPORT_FORMAT}\")");
    }
    let version = doc["schema_version"]
        .as_u64()
        .context("the export has no schema_version")?;
    if version > SCHEMA_VERSION as u64 {
        bail!(
            "the export is from schema version {version}, newer than this hugetune's {SCHEMA_VERSION}; upgrade hugetune"
        );
    }
    let mut ids: HashMap<&str, HashMap<i64, i64>> = HashMap::new();
    let mut counts = ImportCounts::default();
    // Directives this import created (their aggregate came with them), and
    // those already here that new validations joined (to be recomputed).
    let mut fresh_directives: HashSet<i64> = HashSet::new();
    let mut touched: BTreeSet<i64> = BTreeSet::new();
    for t in TABLES {
        let rows = match &doc[t.name] {
            Value::Null => continue,
            Value::Array(a) => a,
            _ => bail!("export: \"{}\" is not a list", t.name),
        };
        let kinds: HashMap<String, Kind> = columns_with_kinds(c, t.name)?.into_iter().collect();
        let (mut added, mut skipped) = (0, 0);
        for (n, row) in rows.iter().enumerate() {
            let what = format!("export: {} row {}", t.name, n + 1);
            let Value::Object(o) = row else {
                bail!("{what} is not an object");
            };
            let old_id = o
                .get("id")
                .and_then(Value::as_i64)
                .with_context(|| format!("{what} has no integer id"))?;
            let mut cols: Vec<&str> = Vec::new();
            let mut vals: Vec<Val> = Vec::new();
            for col in t.columns {
                // Columns a newer schema added are absent from older exports:
                // the table's defaults apply.
                let Some(v) = o.get(*col) else { continue };
                let mut v = to_val(v, &format!("{what}, column {col}"))?;
                if let Some(&k) = kinds.get(*col) {
                    check_kind(&v, k, t.name, col, &what)?;
                }
                let hard = t.refs.iter().find(|(rc, _)| rc == col);
                let soft = t.soft_refs.iter().find(|(rc, _)| rc == col);
                if let (Some((_, target)), Val::Int(old)) = (hard.or(soft), &v) {
                    v = match ids.get(target).and_then(|m| m.get(old)) {
                        Some(&new) => Val::Int(new),
                        None if soft.is_some() => Val::Null,
                        None => {
                            bail!("{what}: {col} {old} refers to no {target} row of the export")
                        }
                    };
                }
                cols.push(col);
                vals.push(v);
            }
            // A row of an older export is recognized by its old identity and
            // gets its unique id here.
            let found = find(c, t, &cols, &vals)?;
            if t.columns.contains(&"uid") && !cols.contains(&"uid") {
                cols.push("uid");
                vals.push(Val::Text(new_uid()));
            }
            let (new_id, inserted) = match found {
                Some(id) => (id, false),
                None => insert_or_skip(c, t, &cols, &vals, &what)?,
            };
            if !inserted {
                skipped += 1;
            } else {
                added += 1;
                match t.name {
                    "directives" => {
                        fresh_directives.insert(new_id);
                        if version < 4 {
                            carry_exported_state(c, o, new_id)?;
                        }
                    }
                    "validations" => {
                        let d = c
                            .query_one(
                                "SELECT directive_id FROM validations WHERE id = ?1",
                                &[new_id.into()],
                                "a validation just stored",
                            )?
                            .int(0)?;
                        if !fresh_directives.contains(&d) {
                            touched.insert(d);
                            // The program's row lock before the directive's
                            // (`lock_program`): no cycle with a validation.
                            lock_program(
                                c,
                                "SELECT p.program_id FROM directives d JOIN profiles p ON p.id = d.profile_id
                                 WHERE d.id = ?1",
                                d,
                            )?;
                            c.exec(
                                "UPDATE directives SET validations = validations + 1 WHERE id = ?1",
                                &[d.into()],
                            )?;
                        }
                    }
                    _ => {}
                }
            }
            ids.entry(t.name).or_default().insert(old_id, new_id);
        }
        counts.added.push((t.name.into(), added));
        counts.skipped.push((t.name.into(), skipped));
    }
    for d in touched {
        refresh_directive(c, d)?;
    }
    Ok(counts)
}

/// A directive from an export older than the validations table carries its
/// validated state as one row.
fn carry_exported_state(c: &mut Conn, o: &Map<String, Value>, id: i64) -> Result<()> {
    let d = NewDirective {
        mapping: String::new(),
        assignments: Value::Null,
        base: false,
        saving_ns: 0.0,
        pmb: 0.0,
        predicted_speedup: 0.0,
        hugetlb_pages: 0,
        thp_pages: 0,
        details: Value::Null,
        confidence: o.get("confidence").and_then(Value::as_f64).unwrap_or(1.0),
        validations: o.get("validations").and_then(Value::as_u64).unwrap_or(0),
        lost: o
            .get("lost")
            .and_then(|v| v.as_i64().or(v.as_bool().map(i64::from)))
            .unwrap_or(0)
            != 0,
    };
    carry_state(c, id, &d)
}

/// Inserts the row unless a unique key has it already (another host's import
/// at the same moment): its id, and whether it was inserted.
fn insert_or_skip(
    c: &mut Conn,
    t: &Table,
    cols: &[&str],
    vals: &[Val],
    what: &str,
) -> Result<(i64, bool)> {
    let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING RETURNING id",
        t.name,
        cols.join(", "),
        marks.join(", ")
    );
    if let Some(r) = c.query_opt(&sql, vals).with_context(|| what.to_string())? {
        return Ok((r.int(0)?, true));
    }
    match find(c, t, cols, vals)? {
        Some(id) => Ok((id, false)),
        None => bail!(
            "{what} conflicts with a row already stored (a unique key) that is not the same row"
        ),
    }
}

impl Db {
    /// Every row of every table, as JSON.
    pub fn export(&self) -> Result<Value> {
        self.conn.borrow_mut().snapshot(|c| export_rows(c, None))
    }

    /// What a host of class `class_id` pulls (`db sync`): the class's profiles,
    /// directives and validations, the programs and machines they name, and
    /// the calibrations of the class's hosts; no runs.
    pub fn export_class(&self, class_id: i64) -> Result<Value> {
        self.conn
            .borrow_mut()
            .snapshot(|c| export_rows(c, Some(class_id)))
    }

    /// Merges an export into this database, in one transaction: on any error
    /// nothing is imported.
    pub fn import(&mut self, doc: &Value) -> Result<ImportCounts> {
        self.tx(|c| import_rows(c, doc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::tests::{as_host, directive};
    use crate::db::NewRun;
    use crate::testing::engine_tests;
    use serde_json::json;

    fn fill(db: &mut Db) {
        let m = db
            .upsert_machine("fp", "host", "cpu", "6.18", &crate::db::tests::machine(64))
            .unwrap();
        db.insert_calibration(m, &json!({"l2_hit_ns": [2.0, 3.0, 4.0]}))
            .unwrap();
        let p = db.upsert_program("/bin/w", Some("b1d")).unwrap();
        let args = vec!["w".to_string(), "chase".into()];
        let mut d = directive("heap-large", 5e8);
        d.details = json!({"x": 1});
        let prof = db
            .insert_profile(p, Some(m), &args, None, &json!({"refs": 3}), &[d])
            .unwrap();
        db.record_validation(prof, "heap-large", 0.5, false)
            .unwrap();
        db.insert_run(&NewRun {
            program_id: p,
            mapping: "heap-large".into(),
            profile_id: Some(prof),
            machine_id: Some(m),
            args,
            plan: json!({"assignments": []}),
            baseline_s: vec![1.0],
            optimized_s: vec![0.7],
            speedup: Some(1.43),
            huge_bytes_backed: 1 << 30,
            verdict: "gain".into(),
            details: json!({}),
        })
        .unwrap();
    }

    /// An export without row ids and references (they are renumbered).
    fn strip(mut v: Value) -> Value {
        for t in TABLES {
            for r in v[t.name].as_array_mut().unwrap() {
                let o = r.as_object_mut().unwrap();
                o.remove("id");
                for (c, _) in t.refs.iter().chain(t.soft_refs) {
                    o.remove(*c);
                }
            }
        }
        v
    }

    fn added(c: &ImportCounts, table: &str) -> u64 {
        c.added.iter().find(|(t, _)| t == table).unwrap().1
    }

    engine_tests! {
        fn export_import_round_trip_is_idempotent(fresh) {
            let mut a = fresh();
            fill(&mut a);
            let doc = a.export().unwrap();
            let mut b = fresh();
            // Something already in the target keeps its id; the import renumbers around it.
            b.upsert_program("/bin/other", None).unwrap();
            let c = b.import(&doc).unwrap();
            assert!(c.added.iter().all(|(_, n)| *n == 1), "{c:?}");
            let again = b.import(&doc).unwrap();
            assert_eq!(again.total_added(), 0, "{again:?}");
            let mut e = strip(b.export().unwrap());
            e["programs"].as_array_mut().unwrap().remove(0);
            assert_eq!(strip(doc.clone()), e);
            let prog = b.upsert_program("/bin/w", Some("b1d")).unwrap();
            let ds = b.directives(b.latest_profile(prog).unwrap().unwrap().0).unwrap();
            assert_eq!((ds[0].confidence, ds[0].validations), (0.75, 1));
            // Across engines too: SQLite to PostgreSQL and back read the same.
            let mut lite = crate::testing::Fresh::new(false).db();
            lite.import(&doc).unwrap();
            assert_eq!(strip(lite.export().unwrap()), strip(doc.clone()));
            let mut pg = crate::testing::Fresh::new(true).db();
            pg.import(&lite.export().unwrap()).unwrap();
            assert_eq!(strip(pg.export().unwrap()), strip(doc));
        }

        fn bad_exports_are_refused_whole(fresh) {
            let mut a = fresh();
            fill(&mut a);
            let doc = a.export().unwrap();
            let mut b = fresh();
            let err = |b: &mut Db, v: &Value| format!("{:#}", b.import(v).unwrap_err());
            assert!(err(&mut b, &json!({"x": 1})).contains("not a hugetune database export"));
            let mut newer = doc.clone();
            newer["schema_version"] = 99.into();
            assert!(err(&mut b, &newer).contains("newer"));
            let mut dangling = doc.clone();
            dangling["runs"][0]["program_id"] = 4242.into();
            assert!(err(&mut b, &dangling).contains("refers to no programs row"));
            let mut wrong = doc.clone();
            wrong["profiles"][0]["summary"] = json!([1, 2]);
            assert!(err(&mut b, &wrong).contains("profiles row 1, column summary"));
            let mut not_a_number = doc.clone();
            not_a_number["directives"][0]["pmb"] = "lots".into();
            assert!(b.import(&not_a_number).is_err());
            // Each failure rolled back everything, machines and classes included.
            let e = b.export().unwrap();
            assert_eq!(e["machines"], json!([]));
            assert_eq!(e["machine_classes"], json!([]));
        }

        fn older_exports_import_with_defaults_and_twice_add_nothing(fresh) {
            let mut a = fresh();
            fill(&mut a);
            // As versions 2 and 3 wrote them: no classes, uids or validations.
            let mut doc = a.export().unwrap();
            doc["schema_version"] = 3.into();
            let o = doc.as_object_mut().unwrap();
            o.remove("machine_classes");
            o.remove("validations");
            for t in ["machines", "profiles", "runs", "calibrations"] {
                for r in doc[t].as_array_mut().unwrap() {
                    let r = r.as_object_mut().unwrap();
                    for c in ["uid", "class_id", "origin_id"] {
                        r.remove(c);
                    }
                }
            }
            let mut v2 = doc.clone();
            v2["schema_version"] = 2.into();
            for r in v2["profiles"].as_array_mut().unwrap() {
                r.as_object_mut().unwrap().remove("input_signature");
            }
            for r in v2["directives"].as_array_mut().unwrap() {
                let o = r.as_object_mut().unwrap();
                o.remove("validations");
                o.remove("lost");
            }
            let mut b = fresh();
            b.import(&v2).unwrap();
            let prog = b.upsert_program("/bin/w", Some("b1d")).unwrap();
            let ds = b.directives(b.latest_profile(prog).unwrap().unwrap().0).unwrap();
            assert_eq!((ds[0].validations, ds[0].lost), (0, false));

            let mut c = fresh();
            let first = c.import(&doc).unwrap();
            assert_eq!(added(&first, "profiles"), 1);
            let second = c.import(&doc).unwrap();
            assert_eq!(second.total_added(), 0, "{second:?}");
            // The validated state came along as one carried row, and moves on.
            let prog = c.upsert_program("/bin/w", Some("b1d")).unwrap();
            let pid = c.latest_profile(prog).unwrap().unwrap().0;
            let ds = c.directives(pid).unwrap();
            assert_eq!((ds[0].confidence, ds[0].validations), (0.75, 1));
            assert_eq!(c.record_validation(pid, "heap-large", 1.0, false).unwrap(), 0.875);
        }

        fn reanalyses_made_apart_by_two_hosts_of_a_class_merge_into_one(fresh) {
            let mut fleet = fresh();
            let h = as_host(&mut fleet, "host-a", 64);
            let p = fleet.upsert_program("/bin/w", Some("b1")).unwrap();
            fleet
                .insert_profile(p, Some(h.machine_id), &["w".into()], None, &json!({}),
                    &[directive("m", 1.0)])
                .unwrap();
            let doc = fleet.export().unwrap();
            let mut offline = |host: &str| {
                let mut db = fresh();
                db.import(&doc).unwrap();
                let me = as_host(&mut db, host, 32);
                let prog = db.find_program("/x", Some("b1")).unwrap().unwrap();
                let origin = db.latest_profile(prog).unwrap().unwrap().0;
                let again = db
                    .store_profile(&crate::db::NewProfile {
                        program_id: prog,
                        machine_id: Some(me.machine_id),
                        args: &["w".into()],
                        bundle: None,
                        summary: &json!({"by": host}),
                        directives: &[directive("m", 2.0)],
                        origin_id: Some(origin),
                    })
                    .unwrap();
                db.record_validation(again, "m", 1.0, false).unwrap();
                db
            };
            let (c1, c2) = (offline("host-c1"), offline("host-c2"));
            fleet.import(&c1.export().unwrap()).unwrap();
            let second = fleet.import(&c2.export().unwrap()).unwrap();
            assert_eq!(added(&second, "profiles"), 0, "{second:?}");
            assert_eq!(added(&second, "validations"), 1, "{second:?}");
            let n = fleet.query_sql("SELECT count(*) FROM profiles", &[]).unwrap()[0].int(0).unwrap();
            assert_eq!(n, 2, "the original and one re-analysis for the class");
            let re = fleet
                .query_sql("SELECT id FROM profiles WHERE origin_id IS NOT NULL", &[])
                .unwrap()[0]
                .int(0)
                .unwrap();
            assert_eq!(fleet.directives(re).unwrap()[0].validations, 2);
        }

        fn validations_from_two_databases_merge_and_move_confidence(fresh) {
            let mut a = fresh();
            let h = as_host(&mut a, "host-a", 64);
            let p = a.upsert_program("/bin/w", Some("b1")).unwrap();
            let prof = a
                .insert_profile(p, Some(h.machine_id), &["w".into()], None, &json!({}),
                    &[directive("m", 1.0)])
                .unwrap();
            let mut b = fresh();
            b.import(&a.export().unwrap()).unwrap();
            let bprof = b.latest_profile(b.find_program("/x", Some("b1")).unwrap().unwrap()).unwrap().unwrap().0;
            as_host(&mut b, "host-b", 64);
            // Both validate at once, apart.
            assert_eq!(a.record_validation(prof, "m", 0.5, false).unwrap(), 0.75);
            assert_eq!(b.record_validation(bprof, "m", 1.0, true).unwrap(), 0.0);
            // Merged either way: the same rows, the same combined confidence.
            let into_a = a.import(&b.export().unwrap()).unwrap();
            assert_eq!(added(&into_a, "validations"), 1);
            let into_b = b.import(&a.export().unwrap()).unwrap();
            assert_eq!(added(&into_b, "validations"), 1);
            let da = &a.directives(prof).unwrap()[0];
            let db_ = &b.directives(bprof).unwrap()[0];
            assert_eq!((da.confidence, da.validations, da.lost), (0.375, 2, true));
            assert_eq!((db_.confidence, db_.validations, db_.lost), (0.375, 2, true));
            assert_eq!(a.import(&b.export().unwrap()).unwrap().total_added(), 0);
            assert_eq!(a.directives(prof).unwrap()[0].confidence, 0.375);
        }
    }
}
