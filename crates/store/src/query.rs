//! Read-only queries for the views (`hugetune report`): a profile with its program
//! and machine, its directives with their ids and confidence, the runs of a
//! profile, a program looked up without being created. Nothing here writes.

use crate::db::{Db, NewDirective, NewRun};
use anyhow::{Context, Result};
use rusqlite::{OptionalExtension, Row};
use serde::{Deserialize, Serialize};

/// A stored profile with what identifies it: program, machine, command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileRow {
    pub id: i64,
    pub program_id: i64,
    pub program_path: String,
    /// Empty when the executable had no build-id.
    pub build_id: String,
    pub machine: Option<MachineRow>,
    pub args: Vec<String>,
    pub bundle: Option<String>,
    /// `stages::store_analysis`'s summary (refs, significance, tlb, cost, ...).
    pub summary: serde_json::Value,
    pub created: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineRow {
    pub id: i64,
    pub hostname: String,
    pub cpu: String,
    pub kernel: String,
}

/// A directive as stored, with its row id (its fields read through `Deref`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectiveRow {
    pub id: i64,
    #[serde(flatten)]
    pub directive: NewDirective,
}

impl std::ops::Deref for DirectiveRow {
    type Target = NewDirective;
    fn deref(&self) -> &NewDirective {
        &self.directive
    }
}

/// A run as stored, with its row id, program path and time (its fields read
/// through `Deref`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: i64,
    pub program_path: String,
    pub created: String,
    #[serde(flatten)]
    pub run: NewRun,
}

impl std::ops::Deref for RunRow {
    type Target = NewRun;
    fn deref(&self) -> &NewRun {
        &self.run
    }
}

fn json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).with_context(|| format!("{what} in the database is corrupt"))
}

const RUN_COLUMNS: &str =
    "r.id, r.program_id, pr.path, r.profile_id, r.machine_id, r.args, r.plan, \
     r.baseline_s, r.optimized_s, r.speedup, r.huge_bytes_backed, r.verdict, r.details, r.created, r.mapping";

type RawRun = (
    (i64, i64, String, Option<i64>, Option<i64>),
    (String, String, String, String),
    (Option<f64>, i64, String, String, String, String),
);

fn raw_run(r: &Row) -> rusqlite::Result<RawRun> {
    Ok((
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
        (r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?),
        (
            r.get(9)?,
            r.get(10)?,
            r.get(11)?,
            r.get(12)?,
            r.get(13)?,
            r.get(14)?,
        ),
    ))
}

fn run_row(raw: RawRun) -> Result<RunRow> {
    let ((id, program_id, program_path, profile_id, machine_id), (args, plan, b, o), rest) = raw;
    let (speedup, huge, verdict, details, created, mapping) = rest;
    let what = |field: &str| format!("run {id}'s {field}");
    Ok(RunRow {
        id,
        program_path,
        created,
        run: NewRun {
            program_id,
            mapping,
            profile_id,
            machine_id,
            args: json(&args, &what("arguments"))?,
            plan: json(&plan, &what("plan"))?,
            baseline_s: json(&b, &what("baseline times"))?,
            optimized_s: json(&o, &what("optimized times"))?,
            speedup,
            huge_bytes_backed: huge.max(0) as u64,
            verdict,
            details: json(&details, &what("details"))?,
        },
    })
}

impl Db {
    /// A program's id by path and build-id, without creating it.
    pub fn find_program(&self, path: &str, build_id: Option<&str>) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM programs WHERE path = ?1 AND build_id = ?2",
                rusqlite::params![path, build_id.unwrap_or("")],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The profile `id` with its program and machine; `None` if there is none.
    pub fn profile(&self, id: i64) -> Result<Option<ProfileRow>> {
        let row = self
            .conn
            .query_row(
                "SELECT p.id, p.program_id, pr.path, pr.build_id, p.args, p.bundle, p.summary, p.created,
                        m.id, m.hostname, m.cpu, m.kernel
                 FROM profiles p JOIN programs pr ON pr.id = p.program_id
                 LEFT JOIN machines m ON m.id = p.machine_id WHERE p.id = ?1",
                [id],
                |r| {
                    Ok((
                        (
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, String>(3)?,
                        ),
                        (
                            r.get::<_, String>(4)?,
                            r.get::<_, Option<String>>(5)?,
                            r.get::<_, String>(6)?,
                            r.get::<_, String>(7)?,
                        ),
                        (
                            r.get::<_, Option<i64>>(8)?,
                            r.get::<_, Option<String>>(9)?,
                            r.get::<_, Option<String>>(10)?,
                            r.get::<_, Option<String>>(11)?,
                        ),
                    ))
                },
            )
            .optional()?;
        let Some(((id, program_id, program_path, build_id), (args, bundle, summary, created), m)) =
            row
        else {
            return Ok(None);
        };
        let machine = match m {
            (Some(id), Some(hostname), Some(cpu), Some(kernel)) => Some(MachineRow {
                id,
                hostname,
                cpu,
                kernel,
            }),
            _ => None,
        };
        Ok(Some(ProfileRow {
            id,
            program_id,
            program_path,
            build_id,
            machine,
            args: json(&args, &format!("profile {id}'s arguments"))?,
            bundle,
            summary: json(&summary, &format!("profile {id}'s summary"))?,
            created,
        }))
    }

    /// The newest profile of a program, if it has one.
    pub fn newest_profile_id(&self, program_id: i64) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM profiles WHERE program_id = ?1 ORDER BY id DESC LIMIT 1",
                [program_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// A profile's directives, best saving first (as `directives`), with ids and confidence.
    pub fn directive_rows(&self, profile_id: i64) -> Result<Vec<DirectiveRow>> {
        Ok(self
            .directives_by_id(profile_id)?
            .into_iter()
            .map(|(id, directive)| DirectiveRow { id, directive })
            .collect())
    }

    /// The run `id`; `None` if there is none.
    pub fn run(&self, id: i64) -> Result<Option<RunRow>> {
        let raw = self
            .conn
            .query_row(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs r JOIN programs pr ON pr.id = r.program_id WHERE r.id = ?1"
                ),
                [id],
                raw_run,
            )
            .optional()?;
        raw.map(run_row).transpose()
    }

    /// The runs made with a profile's directives, oldest first.
    pub fn runs_of_profile(&self, profile_id: i64) -> Result<Vec<RunRow>> {
        let mut st = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs r JOIN programs pr ON pr.id = r.program_id
             WHERE r.profile_id = ?1 ORDER BY r.id"
        ))?;
        let raws = st
            .query_map([profile_id], raw_run)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        raws.into_iter().map(run_row).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::db::{Db, NewDirective, NewRun};

    fn directive(name: &str, saving: f64) -> NewDirective {
        NewDirective {
            mapping: name.into(),
            assignments: serde_json::json!([["heap-large", "hugetlb-2m"]]),
            base: true,
            saving_ns: saving,
            pmb: 50.0,
            predicted_speedup: 1.2,
            hugetlb_pages: 8,
            thp_pages: 2,
            details: serde_json::json!({"mapping": name}),
            confidence: 1.0,
            validations: 0,
            lost: false,
        }
    }

    fn run(program_id: i64, profile_id: Option<i64>, verdict: &str) -> NewRun {
        NewRun {
            program_id,
            mapping: "heap-large".into(),
            profile_id,
            machine_id: None,
            args: vec!["x".into()],
            plan: serde_json::json!({"mapping": "heap-large"}),
            baseline_s: vec![1.0, 1.2],
            optimized_s: vec![0.8],
            speedup: Some(1.3),
            huge_bytes_backed: 4096,
            verdict: verdict.into(),
            details: serde_json::json!({}),
        }
    }

    #[test]
    fn profiles_directives_and_runs_read_back() {
        let d = tempfile::tempdir().unwrap();
        let mut db = Db::open(&d.path().join("h.db")).unwrap();
        assert_eq!(db.find_program("/bin/x", None).unwrap(), None);
        let m = db
            .upsert_machine("fp", "host", "cpu", "6.18", &serde_json::json!({}))
            .unwrap();
        let p = db.upsert_program("/bin/x", Some("ab")).unwrap();
        assert_eq!(db.find_program("/bin/x", Some("ab")).unwrap(), Some(p));
        assert_eq!(db.find_program("/bin/x", None).unwrap(), None);
        assert_eq!(db.newest_profile_id(p).unwrap(), None);
        let args = vec!["x".to_string(), "1G".into()];
        let first = db
            .insert_profile(p, None, &args, None, &serde_json::json!({}), &[])
            .unwrap();
        let prof = db
            .insert_profile(
                p,
                Some(m),
                &args,
                None,
                &serde_json::json!({"refs": 7}),
                &[directive("a", 1.0), directive("b", 5.0)],
            )
            .unwrap();
        assert_eq!(db.newest_profile_id(p).unwrap(), Some(prof));
        let row = db.profile(prof).unwrap().unwrap();
        assert_eq!(row.program_path, "/bin/x");
        assert_eq!(row.build_id, "ab");
        assert_eq!(row.args, args);
        assert_eq!(row.summary["refs"].as_u64(), Some(7));
        assert_eq!(row.machine.as_ref().unwrap().hostname, "host");
        assert!(db.profile(first).unwrap().unwrap().machine.is_none());
        assert!(db.profile(999).unwrap().is_none());

        let ds = db.directive_rows(prof).unwrap();
        assert_eq!(
            ds.iter().map(|d| d.mapping.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
        assert_eq!(ds[0].confidence, 1.0);
        assert_eq!(ds[0].details["mapping"], "b");

        let r1 = db.insert_run(&run(p, Some(prof), "gain")).unwrap();
        db.insert_run(&run(p, Some(first), "none")).unwrap();
        let r3 = db.insert_run(&run(p, Some(prof), "loss")).unwrap();
        let runs = db.runs_of_profile(prof).unwrap();
        assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [r1, r3]);
        assert_eq!(runs[1].verdict, "loss");
        let one = db.run(r1).unwrap().unwrap();
        assert_eq!(one.program_path, "/bin/x");
        assert_eq!(one.baseline_s, [1.0, 1.2]);
        assert_eq!(one.plan["mapping"], "heap-large");
        assert!(db.run(999).unwrap().is_none());
    }

    #[test]
    fn corrupt_rows_are_errors_naming_the_row() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(&d.path().join("h.db")).unwrap();
        let p = db.upsert_program("/bin/x", None).unwrap();
        let r = db.insert_run(&run(p, None, "gain")).unwrap();
        db.conn
            .execute("UPDATE runs SET baseline_s = '[1,' WHERE id = ?1", [r])
            .unwrap();
        let e = format!("{:#}", db.run(r).unwrap_err());
        assert!(e.contains(&format!("run {r}'s baseline times")), "{e}");
    }
}
