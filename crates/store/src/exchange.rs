//! `hugetune db export|import`: the whole database as one JSON document, and
//! back. Import merges: machines and programs are matched by identity, ids are
//! renumbered, and rows already present (same owner, creation time and content)
//! are skipped, so importing the same export twice adds nothing.

use crate::db::{Db, SCHEMA_VERSION};
use anyhow::{bail, Context, Result};
use rusqlite::types::Value as Sql;
use serde_json::{Map, Value};
use std::collections::HashMap;

pub const EXPORT_FORMAT: &str = "hugetune-db-export";

/// Tables in dependency order, with the columns an export carries (besides `id`),
/// the foreign keys among them, and the columns that identify a duplicate.
struct Table {
    name: &'static str,
    columns: &'static [&'static str],
    /// (column, referenced table)
    refs: &'static [(&'static str, &'static str)],
    /// Columns that, together, identify a row already present.
    identity: &'static [&'static str],
}

const TABLES: &[Table] = &[
    Table {
        name: "machines",
        columns: &[
            "fingerprint",
            "hostname",
            "cpu",
            "kernel",
            "details",
            "created",
        ],
        refs: &[],
        identity: &["fingerprint"],
    },
    Table {
        name: "programs",
        columns: &["path", "build_id", "created"],
        refs: &[],
        identity: &["path", "build_id"],
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
        ],
        refs: &[("program_id", "programs"), ("machine_id", "machines")],
        identity: &["program_id", "created", "args", "summary"],
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
        identity: &["profile_id", "mapping"],
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
        ],
        refs: &[
            ("program_id", "programs"),
            ("profile_id", "profiles"),
            ("machine_id", "machines"),
        ],
        identity: &["program_id", "created", "args", "plan", "optimized_s"],
    },
    Table {
        name: "calibrations",
        columns: &["machine_id", "data", "created"],
        refs: &[("machine_id", "machines")],
        identity: &["machine_id", "created", "data"],
    },
];

fn to_json(v: Sql) -> Value {
    match v {
        Sql::Null => Value::Null,
        Sql::Integer(i) => i.into(),
        Sql::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Sql::Text(t) => t.into(),
        Sql::Blob(b) => b.iter().map(|&x| Value::from(x)).collect(),
    }
}

fn to_sql(v: &Value, what: &str) -> Result<Sql> {
    Ok(match v {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(*b as i64),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Sql::Integer(i),
            None => Sql::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Sql::Text(s.clone()),
        _ => bail!("{what}: expected a number, a string or null"),
    })
}

/// Counts of rows an import added and skipped, per table.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct ImportCounts {
    pub added: Vec<(String, u64)>,
    pub skipped: Vec<(String, u64)>,
}

impl Db {
    /// Every row of every table, as JSON.
    pub fn export(&self) -> Result<Value> {
        let mut doc = Map::new();
        doc.insert("format".into(), EXPORT_FORMAT.into());
        doc.insert("schema_version".into(), SCHEMA_VERSION.into());
        for t in TABLES {
            let sql = format!(
                "SELECT id, {} FROM {} ORDER BY id",
                t.columns.join(", "),
                t.name
            );
            let mut st = self.conn.prepare(&sql)?;
            let rows = st.query_map([], |r| {
                let mut o = Map::new();
                o.insert("id".into(), to_json(r.get(0)?));
                for (i, c) in t.columns.iter().enumerate() {
                    o.insert((*c).into(), to_json(r.get(i + 1)?));
                }
                Ok(Value::Object(o))
            })?;
            let rows = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            doc.insert(t.name.into(), Value::Array(rows));
        }
        Ok(Value::Object(doc))
    }

    /// Merges an export into this database, in one transaction: on any error
    /// nothing is imported.
    pub fn import(&mut self, doc: &Value) -> Result<ImportCounts> {
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
        let tx = self.conn.transaction()?;
        let mut ids: HashMap<&str, HashMap<i64, i64>> = HashMap::new();
        let mut counts = ImportCounts::default();
        for t in TABLES {
            let rows = match &doc[t.name] {
                Value::Null => continue,
                Value::Array(a) => a,
                _ => bail!("export: \"{}\" is not a list", t.name),
            };
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
                let mut cols = Vec::new();
                let mut vals = Vec::new();
                for c in t.columns {
                    // Columns a newer schema added are absent from older exports:
                    // the table's defaults apply.
                    let Some(v) = o.get(*c) else { continue };
                    let mut v = to_sql(v, &format!("{what}, column {c}"))?;
                    if let Some((_, target)) = t.refs.iter().find(|(rc, _)| rc == c) {
                        if let Sql::Integer(old) = v {
                            v = match ids.get(target).and_then(|m| m.get(&old)) {
                                Some(&new) => Sql::Integer(new),
                                None => bail!(
                                    "{what}: {c} {old} refers to no {target} row of the export"
                                ),
                            };
                        }
                    }
                    cols.push(*c);
                    vals.push(v);
                }
                let find = |tx: &rusqlite::Transaction| -> Result<Option<i64>> {
                    let mut cond = Vec::new();
                    let mut args = Vec::new();
                    for k in t.identity {
                        let Some(i) = cols.iter().position(|c| c == k) else {
                            return Ok(None);
                        };
                        cond.push(format!("{k} IS ?{}", args.len() + 1));
                        args.push(vals[i].clone());
                    }
                    let sql = format!(
                        "SELECT id FROM {} WHERE {} LIMIT 1",
                        t.name,
                        cond.join(" AND ")
                    );
                    Ok(tx
                        .query_row(&sql, rusqlite::params_from_iter(args), |r| r.get(0))
                        .map(Some)
                        .or_else(|e| match e {
                            rusqlite::Error::QueryReturnedNoRows => Ok(None),
                            e => Err(e),
                        })?)
                };
                let new_id = match find(&tx)? {
                    Some(id) => {
                        skipped += 1;
                        id
                    }
                    None => {
                        let marks: Vec<String> =
                            (1..=cols.len()).map(|i| format!("?{i}")).collect();
                        let sql = format!(
                            "INSERT INTO {} ({}) VALUES ({})",
                            t.name,
                            cols.join(", "),
                            marks.join(", ")
                        );
                        tx.execute(&sql, rusqlite::params_from_iter(vals.iter()))
                            .with_context(|| what.clone())?;
                        added += 1;
                        tx.last_insert_rowid()
                    }
                };
                ids.entry(t.name).or_default().insert(old_id, new_id);
            }
            counts.added.push((t.name.into(), added));
            counts.skipped.push((t.name.into(), skipped));
        }
        tx.commit()?;
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{NewDirective, NewRun};

    fn filled(path: &std::path::Path) -> Db {
        let mut db = Db::open(path).unwrap();
        let m = db
            .upsert_machine("fp", "host", "cpu", "6.18", &serde_json::json!({}))
            .unwrap();
        db.insert_calibration(m, &serde_json::json!({"l2_hit_ns": [2.0, 3.0, 4.0]}))
            .unwrap();
        let p = db.upsert_program("/bin/w", Some("b1d")).unwrap();
        let args = vec!["w".to_string(), "chase".into()];
        let d = NewDirective {
            mapping: "heap-large".into(),
            assignments: serde_json::json!([["heap-large", "hugetlb-2m"]]),
            base: true,
            saving_ns: 5e8,
            pmb: 100.0,
            predicted_speedup: 1.5,
            hugetlb_pages: 512,
            thp_pages: 0,
            details: serde_json::json!({"x": 1}),
            confidence: 0.75,
            validations: 1,
            lost: false,
        };
        let prof = db
            .insert_profile(
                p,
                Some(m),
                &args,
                None,
                &serde_json::json!({"refs": 3}),
                &[d],
            )
            .unwrap();
        db.insert_run(&NewRun {
            program_id: p,
            mapping: "heap-large".into(),
            profile_id: Some(prof),
            machine_id: Some(m),
            args,
            plan: serde_json::json!({"assignments": []}),
            baseline_s: vec![1.0],
            optimized_s: vec![0.7],
            speedup: Some(1.43),
            huge_bytes_backed: 1 << 30,
            verdict: "gain".into(),
            details: serde_json::json!({}),
        })
        .unwrap();
        db
    }

    #[test]
    fn export_import_round_trip_is_idempotent() {
        let d = tempfile::tempdir().unwrap();
        let a = filled(&d.path().join("a.db"));
        let doc = a.export().unwrap();
        let mut b = Db::open(&d.path().join("b.db")).unwrap();
        // Something already in the target keeps its id; the import renumbers around it.
        b.upsert_program("/bin/other", None).unwrap();
        let c = b.import(&doc).unwrap();
        assert!(c.added.iter().all(|(_, n)| *n == 1), "{c:?}");
        let again = b.import(&doc).unwrap();
        assert!(again.added.iter().all(|(_, n)| *n == 0), "{again:?}");
        let mut e = b.export().unwrap();
        // Same content as the source, up to ids: compare the rows without them.
        let strip = |v: &mut Value| {
            for t in TABLES {
                for r in v[t.name].as_array_mut().unwrap() {
                    let o = r.as_object_mut().unwrap();
                    o.remove("id");
                    for (c, _) in t.refs {
                        o.remove(*c);
                    }
                }
            }
        };
        let mut src = doc.clone();
        strip(&mut src);
        strip(&mut e);
        e["programs"].as_array_mut().unwrap().remove(0);
        assert_eq!(src, e);
        let prog = b.upsert_program("/bin/w", Some("b1d")).unwrap();
        let ds = b
            .directives(b.latest_profile(prog).unwrap().unwrap().0)
            .unwrap();
        assert_eq!((ds[0].confidence, ds[0].validations), (0.75, 1));
    }

    #[test]
    fn bad_exports_are_refused_whole() {
        let d = tempfile::tempdir().unwrap();
        let doc = filled(&d.path().join("a.db")).export().unwrap();
        let mut b = Db::open(&d.path().join("b.db")).unwrap();
        let err = |b: &mut Db, v: &Value| format!("{:#}", b.import(v).unwrap_err());
        assert!(
            err(&mut b, &serde_json::json!({"x": 1})).contains("not a hugetune database export")
        );
        let mut newer = doc.clone();
        newer["schema_version"] = 99.into();
        assert!(err(&mut b, &newer).contains("newer"));
        let mut dangling = doc.clone();
        dangling["runs"][0]["program_id"] = 4242.into();
        assert!(err(&mut b, &dangling).contains("refers to no programs row"));
        let mut wrong = doc.clone();
        wrong["profiles"][0]["summary"] = serde_json::json!([1, 2]);
        assert!(err(&mut b, &wrong).contains("profiles row 1, column summary"));
        // Each failure rolled back everything, machines included.
        assert_eq!(b.export().unwrap()["machines"], serde_json::json!([]));
    }

    #[test]
    fn a_version_2_export_imports_with_defaults() {
        let d = tempfile::tempdir().unwrap();
        let mut doc = filled(&d.path().join("a.db")).export().unwrap();
        doc["schema_version"] = 2.into();
        for r in doc["profiles"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("input_signature");
        }
        for r in doc["directives"].as_array_mut().unwrap() {
            let o = r.as_object_mut().unwrap();
            o.remove("validations");
            o.remove("lost");
        }
        let mut b = Db::open(&d.path().join("b.db")).unwrap();
        b.import(&doc).unwrap();
        let prog = b.upsert_program("/bin/w", Some("b1d")).unwrap();
        let ds = b
            .directives(b.latest_profile(prog).unwrap().unwrap().0)
            .unwrap();
        assert_eq!((ds[0].validations, ds[0].lost), (0, false));
    }
}
