//! Read-only queries for the views (`hugetune report`): a profile with its program
//! and machine, its directives with their ids and confidence, the runs of a
//! profile. Nothing here writes; everything is the same on SQLite and PostgreSQL.

use crate::backend::Row;
use crate::db::{json, Db, NewDirective, NewRun};
use anyhow::Result;
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
    /// Its validations per host (the spread of their confidences, `hugetune report`).
    #[serde(default)]
    pub hosts: Vec<crate::db::HostValidations>,
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

const RUN_COLUMNS: &str =
    "r.id, r.program_id, pr.path, r.profile_id, r.machine_id, r.args, r.plan, \
     r.baseline_s, r.optimized_s, r.speedup, r.huge_bytes_backed, r.verdict, r.details, r.created, r.mapping";

fn run_row(r: &Row) -> Result<RunRow> {
    let id = r.int(0)?;
    let what = |field: &str| format!("run {id}'s {field}");
    Ok(RunRow {
        id,
        program_path: r.text(2)?,
        created: r.text(13)?,
        run: NewRun {
            program_id: r.int(1)?,
            mapping: r.text(14)?,
            profile_id: r.opt_int(3)?,
            machine_id: r.opt_int(4)?,
            args: json(&r.text(5)?, &what("arguments"))?,
            plan: json(&r.text(6)?, &what("plan"))?,
            baseline_s: json(&r.text(7)?, &what("baseline times"))?,
            optimized_s: json(&r.text(8)?, &what("optimized times"))?,
            speedup: r.opt_real(9)?,
            huge_bytes_backed: r.int(10)?.max(0) as u64,
            verdict: r.text(11)?,
            details: json(&r.text(12)?, &what("details"))?,
        },
    })
}

impl Db {
    /// The profile `id` with its program and machine; `None` if there is none.
    pub fn profile(&self, id: i64) -> Result<Option<ProfileRow>> {
        let row = self.conn.borrow_mut().query_opt(
            "SELECT p.id, p.program_id, pr.path, pr.build_id, p.args, p.bundle, p.summary, p.created,
                    m.id, m.hostname, m.cpu, m.kernel
             FROM profiles p JOIN programs pr ON pr.id = p.program_id
             LEFT JOIN machines m ON m.id = p.machine_id WHERE p.id = ?1",
            &[id.into()],
        )?;
        let Some(r) = row else { return Ok(None) };
        let machine = match (
            r.opt_int(8)?,
            r.opt_text(9)?,
            r.opt_text(10)?,
            r.opt_text(11)?,
        ) {
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
            program_id: r.int(1)?,
            program_path: r.text(2)?,
            build_id: r.text(3)?,
            machine,
            args: json(&r.text(4)?, &format!("profile {id}'s arguments"))?,
            bundle: r.opt_text(5)?,
            summary: json(&r.text(6)?, &format!("profile {id}'s summary"))?,
            created: r.text(7)?,
        }))
    }

    /// The newest profile of a program, if it has one.
    pub fn newest_profile_id(&self, program_id: i64) -> Result<Option<i64>> {
        self.conn
            .borrow_mut()
            .query_opt(
                "SELECT id FROM profiles WHERE program_id = ?1 ORDER BY id DESC LIMIT 1",
                &[program_id.into()],
            )?
            .map(|r| r.int(0))
            .transpose()
    }

    /// A profile's directives, best saving first (as `directives`), with ids and confidence.
    pub fn directive_rows(&self, profile_id: i64) -> Result<Vec<DirectiveRow>> {
        self.directives_by_id(profile_id)?
            .into_iter()
            .map(|(id, directive)| {
                Ok(DirectiveRow {
                    id,
                    hosts: self.directive_hosts(id)?,
                    directive,
                })
            })
            .collect()
    }

    /// The run `id`; `None` if there is none.
    pub fn run(&self, id: i64) -> Result<Option<RunRow>> {
        let row = self.conn.borrow_mut().query_opt(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs r JOIN programs pr ON pr.id = r.program_id WHERE r.id = ?1"
            ),
            &[id.into()],
        )?;
        row.as_ref().map(run_row).transpose()
    }

    /// The runs made with a profile's directives, oldest first.
    pub fn runs_of_profile(&self, profile_id: i64) -> Result<Vec<RunRow>> {
        let rows = self.conn.borrow_mut().query(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs r JOIN programs pr ON pr.id = r.program_id
                 WHERE r.profile_id = ?1 ORDER BY r.id"
            ),
            &[profile_id.into()],
        )?;
        rows.iter().map(run_row).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::db::{NewDirective, NewRun};
    use crate::testing::engine_tests;

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

    engine_tests! {
        fn profiles_directives_and_runs_read_back(fresh) {
            let mut db = fresh();
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

        fn corrupt_rows_are_errors_naming_the_row(fresh) {
            let db = fresh();
            let p = db.upsert_program("/bin/x", None).unwrap();
            let r = db.insert_run(&run(p, None, "gain")).unwrap();
            db.execute_sql("UPDATE runs SET baseline_s = '[1,' WHERE id = ?1", &[r.into()])
                .unwrap();
            let e = format!("{:#}", db.run(r).unwrap_err());
            assert!(e.contains(&format!("run {r}'s baseline times")), "{e}");
        }
    }
}
