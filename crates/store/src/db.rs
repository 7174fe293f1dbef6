//! The database: machines, programs, profiles, directives, runs and the
//! machines' measured costs (calibrations), in embedded
//! SQLite. The schema is versioned (`PRAGMA user_version`) and migrated forward on
//! open; WAL and a busy timeout let several hugetune processes write at once.

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Each entry migrates from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE machines (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    hostname TEXT NOT NULL,
    cpu TEXT NOT NULL,
    kernel TEXT NOT NULL,
    details TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE TABLE programs (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    build_id TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
    UNIQUE (path, build_id)
);
CREATE TABLE profiles (
    id INTEGER PRIMARY KEY,
    program_id INTEGER NOT NULL REFERENCES programs(id) ON DELETE CASCADE,
    machine_id INTEGER REFERENCES machines(id),
    args TEXT NOT NULL,
    bundle TEXT,
    summary TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE TABLE directives (
    id INTEGER PRIMARY KEY,
    profile_id INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
    mapping TEXT NOT NULL,
    assignments TEXT NOT NULL,
    base INTEGER NOT NULL,
    saving_ns REAL NOT NULL,
    pmb REAL NOT NULL,
    predicted_speedup REAL NOT NULL,
    hugetlb_pages INTEGER NOT NULL,
    thp_pages INTEGER NOT NULL,
    confidence REAL NOT NULL DEFAULT 1.0,
    details TEXT NOT NULL
);
CREATE INDEX directives_profile ON directives(profile_id);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    program_id INTEGER NOT NULL REFERENCES programs(id) ON DELETE CASCADE,
    profile_id INTEGER REFERENCES profiles(id) ON DELETE SET NULL,
    machine_id INTEGER REFERENCES machines(id),
    args TEXT NOT NULL,
    plan TEXT NOT NULL,
    baseline_s TEXT NOT NULL,
    optimized_s TEXT NOT NULL,
    speedup REAL,
    huge_bytes_backed INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    details TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
"#,
    r#"
CREATE TABLE calibrations (
    id INTEGER PRIMARY KEY,
    machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
    data TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE INDEX calibrations_machine ON calibrations(machine_id);
"#,
    // Version 3: profiles keyed by their input as well (a training input can serve
    // a reference input, seed 001 §5.3.3, but the same input is preferred);
    // directives learn from validations; runs name the mapping they applied.
    r#"
ALTER TABLE profiles ADD COLUMN input_signature TEXT NOT NULL DEFAULT '';
ALTER TABLE directives ADD COLUMN validations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE directives ADD COLUMN lost INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN mapping TEXT NOT NULL DEFAULT '';
CREATE INDEX profiles_program ON profiles(program_id, input_signature);
CREATE INDEX runs_program ON runs(program_id, mapping);
"#,
];

pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

pub struct Db {
    /// Crate-visible so that read-only queries can live in their own modules.
    pub(crate) conn: Connection,
    path: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewDirective {
    pub mapping: String,
    /// JSON list of [category, backing] pairs.
    pub assignments: serde_json::Value,
    pub base: bool,
    pub saving_ns: f64,
    pub pmb: f64,
    pub predicted_speedup: f64,
    pub hugetlb_pages: u64,
    pub thp_pages: u64,
    pub details: serde_json::Value,
    /// How far validations have borne the prediction out (1: fully; new directives start there).
    #[serde(default = "full_confidence")]
    pub confidence: f64,
    /// Validations recorded against this directive.
    #[serde(default)]
    pub validations: u64,
    /// A validation measured a loss: never applied again automatically.
    #[serde(default)]
    pub lost: bool,
}

fn full_confidence() -> f64 {
    1.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    pub program_id: i64,
    /// The applied mapping's name (a directive's `mapping`); empty when none.
    #[serde(default)]
    pub mapping: String,
    pub profile_id: Option<i64>,
    pub machine_id: Option<i64>,
    pub args: Vec<String>,
    pub plan: serde_json::Value,
    pub baseline_s: Vec<f64>,
    pub optimized_s: Vec<f64>,
    pub speedup: Option<f64>,
    pub huge_bytes_backed: u64,
    pub verdict: String,
    pub details: serde_json::Value,
}

/// A profile as the online agent reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredProfile {
    pub id: i64,
    pub args: Vec<String>,
    pub summary: serde_json::Value,
    /// Taken with the same arguments as the run being planned.
    pub same_input: bool,
}

/// What identifies a program's input: its arguments after the program itself
/// (FNV-1a over them, NUL-separated; stable across hugetune versions).
pub fn input_signature(args: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for a in args.iter().skip(1) {
        for b in a.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// One row for `hugetune db ls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    pub table: String,
    pub id: i64,
    pub created: String,
    pub what: String,
}

impl Db {
    /// `$XDG_DATA_HOME/hugetune/hugetune.db` (usually ~/.local/share/hugetune/).
    pub fn default_path() -> PathBuf {
        dirs::data_dir()
            .unwrap_or_else(|| PathBuf::from("."))
            .join("hugetune")
            .join("hugetune.db")
    }

    /// Opens the default database (default_path), creating its directory.
    pub fn open_default() -> Result<Db> {
        let path = Db::default_path();
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Db::open(&path)
    }

    /// Opens (or creates) the database file at `path`. Its directory must exist
    /// (a mistyped `--db` is an error, not a new tree of directories); an existing
    /// file must be an SQLite database that is hugetune's or empty: another
    /// program's database is refused, never given hugetune's tables.
    pub fn open(path: &Path) -> Result<Db> {
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !dir.is_dir() {
                bail!(
                    "the database {}: its directory {} does not exist",
                    path.display(),
                    dir.display()
                );
            }
        }
        if path.is_dir() {
            bail!(
                "the database {} is a directory: give a file",
                path.display()
            );
        }
        // A new database is created 0600 by us (O_EXCL), never through a symlink
        // planted at the name (a root hugetune would otherwise write a database
        // into whatever file it points to); SQLite then refuses symlinks too.
        {
            use std::os::unix::fs::OpenOptionsExt;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("creating database {}", path.display()))
                }
            }
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "the database {} is a symbolic link: give the file's real path",
                path.display()
            );
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .with_context(|| format!("opening database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        let not_ours = || {
            format!(
                "{} is not a hugetune database (SQLite cannot read it as a database)",
                path.display()
            )
        };
        let version: u32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .with_context(not_ours)?;
        if version == 0 {
            // Version 0 is a new file, or another program's database.
            let mut st = conn
                .prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 6",
                )
                .with_context(not_ours)?;
            let tables: Vec<String> = st
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            drop(st);
            if !tables.is_empty() {
                bail!(
                    "{} is an SQLite database, but not hugetune's (its tables: {}); give another --db",
                    path.display(),
                    tables.join(", ")
                );
            }
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .with_context(not_ours)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let mut db = Db {
            conn,
            path: path.to_path_buf(),
        };
        db.migrate()
            .with_context(|| format!("database {}", path.display()))?;
        Ok(db)
    }

    /// A database in memory, with the same schema: nothing on disk (fuzzing the
    /// import, tests).
    pub fn open_in_memory() -> Result<Db> {
        let conn = Connection::open_in_memory()?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let mut db = Db {
            conn,
            path: PathBuf::from(":memory:"),
        };
        db.migrate()?;
        Ok(db)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn migrate(&mut self) -> Result<()> {
        let v: u32 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        if v > SCHEMA_VERSION {
            bail!("schema version {v} is newer than this hugetune understands ({SCHEMA_VERSION}); upgrade hugetune");
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(v as usize) {
            let tx = self.conn.transaction()?;
            tx.execute_batch(sql)
                .with_context(|| format!("migrating schema to version {}", i + 1))?;
            tx.pragma_update(None, "user_version", (i + 1) as u32)?;
            tx.commit()?;
        }
        Ok(())
    }

    pub fn schema_version(&self) -> Result<u32> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    pub fn upsert_machine(
        &self,
        fingerprint: &str,
        hostname: &str,
        cpu: &str,
        kernel: &str,
        details: &serde_json::Value,
    ) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO machines (fingerprint, hostname, cpu, kernel, details) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (fingerprint) DO UPDATE SET details = excluded.details",
            params![fingerprint, hostname, cpu, kernel, details.to_string()],
        )?;
        Ok(self.conn.query_row(
            "SELECT id FROM machines WHERE fingerprint = ?1",
            [fingerprint],
            |r| r.get(0),
        )?)
    }

    pub fn upsert_program(&self, path: &str, build_id: Option<&str>) -> Result<i64> {
        let bid = build_id.unwrap_or("");
        self.conn.execute(
            "INSERT OR IGNORE INTO programs (path, build_id) VALUES (?1, ?2)",
            params![path, bid],
        )?;
        Ok(self.conn.query_row(
            "SELECT id FROM programs WHERE path = ?1 AND build_id = ?2",
            params![path, bid],
            |r| r.get(0),
        )?)
    }

    /// Stores a profile and its directives atomically.
    pub fn insert_profile(
        &mut self,
        program_id: i64,
        machine_id: Option<i64>,
        args: &[String],
        bundle: Option<&Path>,
        summary: &serde_json::Value,
        directives: &[NewDirective],
    ) -> Result<i64> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO profiles (program_id, machine_id, args, bundle, summary, input_signature) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                program_id,
                machine_id,
                serde_json::to_string(args)?,
                bundle.map(|b| b.to_string_lossy().into_owned()),
                summary.to_string(),
                input_signature(args)
            ],
        )?;
        let pid = tx.last_insert_rowid();
        for d in directives {
            tx.execute(
                "INSERT INTO directives (profile_id, mapping, assignments, base, saving_ns, pmb, predicted_speedup, hugetlb_pages, thp_pages, details, confidence, validations, lost)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    pid,
                    d.mapping,
                    d.assignments.to_string(),
                    d.base,
                    d.saving_ns,
                    d.pmb,
                    d.predicted_speedup,
                    d.hugetlb_pages as i64,
                    d.thp_pages as i64,
                    d.details.to_string(),
                    d.confidence.clamp(0.0, 1.0),
                    d.validations as i64,
                    d.lost
                ],
            )?;
        }
        tx.commit()?;
        Ok(pid)
    }

    /// A profile's directives, best saving first.
    pub fn directives(&self, profile_id: i64) -> Result<Vec<NewDirective>> {
        Ok(self
            .directives_by_id(profile_id)?
            .into_iter()
            .map(|(_, d)| d)
            .collect())
    }

    /// A profile's directives with their row ids, best saving first.
    pub fn directives_by_id(&self, profile_id: i64) -> Result<Vec<(i64, NewDirective)>> {
        let mut st = self.conn.prepare(
            "SELECT id, mapping, assignments, base, saving_ns, pmb, predicted_speedup, hugetlb_pages, thp_pages,
                    details, confidence, validations, lost
             FROM directives WHERE profile_id = ?1 ORDER BY saving_ns DESC, id",
        )?;
        let rows = st.query_map([profile_id], |r| {
            Ok((
                (
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, bool>(3)?,
                ),
                (
                    r.get::<_, f64>(4)?,
                    r.get::<_, f64>(5)?,
                    r.get::<_, f64>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, i64>(8)?,
                ),
                (
                    r.get::<_, String>(9)?,
                    r.get::<_, f64>(10)?,
                    r.get::<_, i64>(11)?,
                    r.get::<_, bool>(12)?,
                ),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let ((id, mapping, a, base), (saving_ns, pmb, sp, h, t), (d, confidence, n, lost)) =
                row?;
            let corrupt =
                |what: &str| format!("directive {id}'s {what} in the database are corrupt");
            out.push((
                id,
                NewDirective {
                    mapping,
                    assignments: serde_json::from_str(&a)
                        .with_context(|| corrupt("assignments"))?,
                    base,
                    saving_ns,
                    pmb,
                    predicted_speedup: sp,
                    hugetlb_pages: h.max(0) as u64,
                    thp_pages: t.max(0) as u64,
                    details: serde_json::from_str(&d).with_context(|| corrupt("details"))?,
                    confidence,
                    validations: n.max(0) as u64,
                    lost,
                },
            ));
        }
        Ok(out)
    }

    pub fn insert_run(&self, r: &NewRun) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO runs (program_id, profile_id, machine_id, args, plan, baseline_s, optimized_s, speedup, huge_bytes_backed, verdict, details, mapping)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                r.program_id,
                r.profile_id,
                r.machine_id,
                serde_json::to_string(&r.args)?,
                r.plan.to_string(),
                serde_json::to_string(&r.baseline_s)?,
                serde_json::to_string(&r.optimized_s)?,
                r.speedup,
                r.huge_bytes_backed as i64,
                r.verdict,
                r.details.to_string(),
                r.mapping
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The profile to plan a run of `args` with: the newest one taken with the
    /// same input if there is one, else the program's newest (a training input
    /// serves a reference input, seed 001 §5.3.3).
    pub fn profile_for_input(
        &self,
        program_id: i64,
        args: &[String],
    ) -> Result<Option<StoredProfile>> {
        let row = self
            .conn
            .query_row(
                "SELECT id, args, summary, input_signature = ?2 FROM profiles WHERE program_id = ?1
                 ORDER BY input_signature = ?2 DESC, id DESC LIMIT 1",
                params![program_id, input_signature(args)],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, bool>(3)?,
                    ))
                },
            )
            .optional()?;
        let Some((id, a, summary, same_input)) = row else {
            return Ok(None);
        };
        Ok(Some(StoredProfile {
            id,
            args: serde_json::from_str(&a)
                .with_context(|| format!("profile {id}: arguments in the database are corrupt"))?,
            summary: serde_json::from_str(&summary)
                .with_context(|| format!("profile {id}: summary in the database is corrupt"))?,
            same_input,
        }))
    }

    /// Records a validation of a directive: `agreement` (0..=1) is how well the
    /// measured gain matched the predicted one; the confidence moves halfway to
    /// it. A measured loss marks the directive lost (confidence 0): it is never
    /// applied again automatically. Returns the new confidence.
    pub fn record_validation(
        &self,
        profile_id: i64,
        mapping: &str,
        agreement: f64,
        lost: bool,
    ) -> Result<f64> {
        let a = if agreement.is_finite() {
            agreement.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let n = self.conn.execute(
            "UPDATE directives SET validations = validations + 1,
                    lost = lost OR ?3,
                    confidence = CASE WHEN ?3 THEN 0.0 ELSE 0.5 * confidence + 0.5 * ?4 END
             WHERE profile_id = ?1 AND mapping = ?2",
            params![profile_id, mapping, lost, a],
        )?;
        if n == 0 {
            bail!("profile {profile_id} has no directive for mapping '{mapping}'");
        }
        Ok(self.conn.query_row(
            "SELECT confidence FROM directives WHERE profile_id = ?1 AND mapping = ?2",
            params![profile_id, mapping],
            |r| r.get(0),
        )?)
    }

    /// Mappings that lost in a validation of any profile of the program.
    pub fn lost_mappings(&self, program_id: i64) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(
            "SELECT DISTINCT d.mapping FROM directives d JOIN profiles p ON p.id = d.profile_id
             WHERE p.program_id = ?1 AND d.lost ORDER BY 1",
        )?;
        let v = st
            .query_map([program_id], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(v)
    }

    /// Removes one entry; a program or profile takes what hangs off it along.
    /// The bundle files of the profiles that removing `kind` `id` removes (a
    /// profile's own, or every profile of a program), that no other profile
    /// names.
    pub fn bundles_removed_with(&self, kind: &str, id: i64) -> Result<Vec<PathBuf>> {
        let sql = match kind {
            "profile" => "SELECT bundle FROM profiles WHERE id = ?1 AND bundle IS NOT NULL",
            "program" => "SELECT bundle FROM profiles WHERE program_id = ?1 AND bundle IS NOT NULL",
            _ => return Ok(Vec::new()),
        };
        let mut st = self.conn.prepare(sql)?;
        let bundles: Vec<String> = st
            .query_map([id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::new();
        for b in bundles {
            let others: i64 = self.conn.query_row(
                &format!(
                    "SELECT COUNT(*) FROM profiles WHERE bundle = ?1 AND {}",
                    if kind == "profile" {
                        "id != ?2"
                    } else {
                        "program_id != ?2"
                    }
                ),
                params![b, id],
                |r| r.get(0),
            )?;
            if others == 0 && !out.contains(&PathBuf::from(&b)) {
                out.push(PathBuf::from(b));
            }
        }
        Ok(out)
    }

    pub fn remove(&self, kind: &str, id: i64) -> Result<()> {
        let sql = match kind {
            "program" => "DELETE FROM programs WHERE id = ?1",
            "profile" => "DELETE FROM profiles WHERE id = ?1",
            "run" => "DELETE FROM runs WHERE id = ?1",
            "calibration" => "DELETE FROM calibrations WHERE id = ?1",
            other => bail!(
                "unknown entry kind '{other}' (expected program, profile, run or calibration)"
            ),
        };
        if self.conn.execute(sql, [id])? == 0 {
            bail!("no {kind} with id {id}");
        }
        Ok(())
    }

    /// The newest profile of a program, with its arguments and summary.
    pub fn latest_profile(
        &self,
        program_id: i64,
    ) -> Result<Option<(i64, Vec<String>, serde_json::Value)>> {
        let row = self
            .conn
            .query_row(
                "SELECT id, args, summary FROM profiles WHERE program_id = ?1 ORDER BY id DESC LIMIT 1",
                [program_id],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)),
            )
            .optional()?;
        let Some((id, args, summary)) = row else {
            return Ok(None);
        };
        Ok(Some((
            id,
            serde_json::from_str(&args).context("profile arguments in the database are corrupt")?,
            serde_json::from_str(&summary).context("profile summary in the database is corrupt")?,
        )))
    }

    /// Stores a machine's measured costs (`hugetune calibrate`'s result, as JSON).
    pub fn insert_calibration(&self, machine_id: i64, data: &serde_json::Value) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO calibrations (machine_id, data) VALUES (?1, ?2)",
            params![machine_id, data.to_string()],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest calibration of a machine, as stored.
    pub fn latest_calibration(&self, machine_id: i64) -> Result<Option<serde_json::Value>> {
        let row = self
            .conn
            .query_row(
                "SELECT id, data FROM calibrations WHERE machine_id = ?1 ORDER BY id DESC LIMIT 1",
                [machine_id],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
            )
            .optional()?;
        let Some((id, data)) = row else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_str(&data).with_context(|| {
            format!("calibration {id} in the database is corrupt (not JSON)")
        })?))
    }

    pub fn list(&self) -> Result<Vec<Listing>> {
        let mut out = Vec::new();
        let mut st = self.conn.prepare(
            "SELECT 'profile', p.id, p.created, pr.path || ' ' || p.args FROM profiles p JOIN programs pr ON pr.id = p.program_id
             UNION ALL
             SELECT 'run', r.id, r.created, pr.path || ' ' || r.args || ' -> ' || r.verdict ||
                    CASE WHEN r.speedup IS NULL THEN '' ELSE printf(' (%.2fx)', r.speedup) END FROM runs r JOIN programs pr ON pr.id = r.program_id
             UNION ALL
             SELECT 'calibration', c.id, c.created, m.hostname || ' ' || m.cpu || ' ' || m.kernel
                    FROM calibrations c JOIN machines m ON m.id = c.machine_id
             ORDER BY 3, 2",
        )?;
        for row in st.query_map([], |r| {
            Ok(Listing {
                table: r.get(0)?,
                id: r.get(1)?,
                created: r.get(2)?,
                what: r.get(3)?,
            })
        })? {
            out.push(row?);
        }
        Ok(out)
    }

    /// Everything stored about a profile or a run, as JSON.
    pub fn show(&self, table: &str, id: i64) -> Result<serde_json::Value> {
        let sql = match table {
            "profile" => "SELECT json_object('id', id, 'program_id', program_id, 'args', json(args), 'bundle', bundle, 'created', created, 'summary', json(summary)) FROM profiles WHERE id = ?1",
            "run" => "SELECT json_object('id', id, 'program_id', program_id, 'profile_id', profile_id, 'args', json(args), 'plan', json(plan), 'baseline_s', json(baseline_s), 'optimized_s', json(optimized_s), 'speedup', speedup, 'huge_bytes_backed', huge_bytes_backed, 'verdict', verdict, 'details', json(details), 'created', created) FROM runs WHERE id = ?1",
            "calibration" => "SELECT json_object('id', id, 'machine_id', machine_id, 'created', created, 'data', json(data)) FROM calibrations WHERE id = ?1",
            other => bail!("unknown entry kind '{other}' (expected profile, run or calibration)"),
        };
        let text: Option<String> = self.conn.query_row(sql, [id], |r| r.get(0)).optional()?;
        let Some(text) = text else {
            bail!("no {table} with id {id}")
        };
        let mut v: serde_json::Value = serde_json::from_str(&text)?;
        if table == "profile" {
            v["directives"] = serde_json::to_value(self.directives(id)?)?;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directive(name: &str, saving: f64) -> NewDirective {
        NewDirective {
            mapping: name.into(),
            assignments: serde_json::json!([["heap-large", "hugetlb-2m"]]),
            base: true,
            saving_ns: saving,
            pmb: 100.0,
            predicted_speedup: 1.4,
            hugetlb_pages: 512,
            thp_pages: 0,
            details: serde_json::json!({}),
            confidence: 1.0,
            validations: 0,
            lost: false,
        }
    }

    #[test]
    fn databases_are_created_private_and_never_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.db");
        Db::open(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let victim = d.path().join("victim");
        std::fs::write(&victim, "").unwrap();
        let link = d.path().join("planted.db");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = format!("{:#}", Db::open(&link).err().unwrap());
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(
            std::fs::metadata(&victim).unwrap().len(),
            0,
            "nothing written"
        );
    }

    #[test]
    fn store_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        // A directory that does not exist is an error, not created.
        let e = Db::open(&d.path().join("sub/h.db")).err().unwrap();
        assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
        assert!(!d.path().join("sub").exists());
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let mut db = Db::open(&d.path().join("sub/h.db")).unwrap();
        assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
        let m = db
            .upsert_machine("fp", "host", "cpu", "6.18", &serde_json::json!({"x": 1}))
            .unwrap();
        assert_eq!(
            db.upsert_machine("fp", "host", "cpu", "6.18", &serde_json::json!({"x": 2}))
                .unwrap(),
            m
        );
        let p = db.upsert_program("/bin/x", Some("abcd")).unwrap();
        assert_eq!(db.upsert_program("/bin/x", Some("abcd")).unwrap(), p);
        assert_ne!(db.upsert_program("/bin/x", None).unwrap(), p);
        let args = vec!["x".to_string(), "--size".into(), "1G".into()];
        let prof = db
            .insert_profile(
                p,
                Some(m),
                &args,
                None,
                &serde_json::json!({"refs": 5}),
                &[directive("a", 1.0), directive("b", 5.0)],
            )
            .unwrap();
        let ds = db.directives(prof).unwrap();
        assert_eq!(
            ds.iter().map(|d| d.mapping.as_str()).collect::<Vec<_>>(),
            vec!["b", "a"]
        );
        let (id, a, s) = db.latest_profile(p).unwrap().unwrap();
        assert_eq!((id, a, s["refs"].as_u64()), (prof, args.clone(), Some(5)));
        let run = db
            .insert_run(&NewRun {
                program_id: p,
                mapping: "a".into(),
                profile_id: Some(prof),
                machine_id: Some(m),
                args,
                plan: serde_json::json!({"heap-large": "hugetlb-2m"}),
                baseline_s: vec![1.0, 1.1],
                optimized_s: vec![0.7, 0.72],
                speedup: Some(1.45),
                huge_bytes_backed: 1 << 30,
                verdict: "gain".into(),
                details: serde_json::json!({}),
            })
            .unwrap();
        let l = db.list().unwrap();
        assert_eq!(l.len(), 2);
        assert!(l[1].what.contains("gain (1.45x)"));
        assert_eq!(db.show("run", run).unwrap()["speedup"].as_f64(), Some(1.45));
        assert_eq!(
            db.show("profile", prof).unwrap()["directives"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert!(db.show("bogus", 1).is_err());
        assert!(db
            .show("run", 999)
            .unwrap_err()
            .to_string()
            .contains("no run with id 999"));
    }

    #[test]
    fn calibrations_per_machine() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(&d.path().join("h.db")).unwrap();
        let a = db
            .upsert_machine("a", "host-a", "cpu", "6.18", &serde_json::json!({}))
            .unwrap();
        let b = db
            .upsert_machine("b", "host-b", "cpu", "6.18", &serde_json::json!({}))
            .unwrap();
        assert_eq!(db.latest_calibration(a).unwrap(), None);
        let first = db
            .insert_calibration(a, &serde_json::json!({"l2_hit_ns": [2.0, 2.0, 2.0]}))
            .unwrap();
        let second = db
            .insert_calibration(a, &serde_json::json!({"l2_hit_ns": [3.0, 2.5, 2.5]}))
            .unwrap();
        assert!(second > first);
        assert_eq!(
            db.latest_calibration(a).unwrap().unwrap()["l2_hit_ns"][0].as_f64(),
            Some(3.0)
        );
        assert_eq!(db.latest_calibration(b).unwrap(), None);
        assert!(db.insert_calibration(999, &serde_json::json!({})).is_err());
        let l = db.list().unwrap();
        assert_eq!(l.len(), 2);
        assert!(l
            .iter()
            .all(|e| e.table == "calibration" && e.what.contains("host-a")));
        assert_eq!(
            db.show("calibration", second).unwrap()["data"]["l2_hit_ns"][1].as_f64(),
            Some(2.5)
        );
        // A corrupt row gives an error naming it, not a panic.
        db.conn
            .execute(
                "UPDATE calibrations SET data = '{oops' WHERE id = ?1",
                [second],
            )
            .unwrap();
        let e = db.latest_calibration(a).unwrap_err();
        assert!(
            format!("{e:#}").contains(&format!("calibration {second}")),
            "{e:#}"
        );
    }

    /// A database left at every earlier schema version, with rows in it,
    /// migrates to the current one and keeps its rows usable.
    #[test]
    fn migrates_every_earlier_schema() {
        for from in 1..SCHEMA_VERSION {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("h.db");
            {
                let c = Connection::open(&p).unwrap();
                for sql in &MIGRATIONS[..from as usize] {
                    c.execute_batch(sql).unwrap();
                }
                c.pragma_update(None, "user_version", from).unwrap();
                c.execute_batch(
                    "INSERT INTO machines (fingerprint, hostname, cpu, kernel, details) VALUES ('fp', 'h', 'c', 'k', '{}');
                     INSERT INTO programs (path, build_id) VALUES ('/bin/w', '');
                     INSERT INTO profiles (program_id, machine_id, args, summary) VALUES (1, 1, '[\"w\",\"x\"]', '{\"refs\": 1}');
                     INSERT INTO directives (profile_id, mapping, assignments, base, saving_ns, pmb, predicted_speedup, hugetlb_pages, thp_pages, details)
                         VALUES (1, 'heap-large', '[]', 1, 5.0, 100.0, 1.2, 3, 0, '{}');
                     INSERT INTO runs (program_id, profile_id, args, plan, baseline_s, optimized_s, huge_bytes_backed, verdict, details)
                         VALUES (1, 1, '[]', '{}', '[1.0]', '[0.9]', 0, 'gain', '{}');",
                )
                .unwrap();
            }
            let db = Db::open(&p).unwrap();
            assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION, "from {from}");
            let m = db
                .upsert_machine("fp", "h", "c", "k", &serde_json::json!({}))
                .unwrap();
            assert_eq!(m, 1);
            db.insert_calibration(m, &serde_json::json!({"x": 1}))
                .unwrap();
            let ds = db.directives(1).unwrap();
            assert_eq!(
                (ds[0].confidence, ds[0].validations, ds[0].lost),
                (1.0, 0, false)
            );
            // Old profiles have no input signature: they serve any input.
            let sp = db
                .profile_for_input(1, &["w".into(), "x".into()])
                .unwrap()
                .unwrap();
            assert_eq!((sp.id, sp.same_input), (1, false));
            assert_eq!(
                db.record_validation(1, "heap-large", 0.5, false).unwrap(),
                0.75
            );
            assert_eq!(db.list().unwrap().len(), 3, "from {from}");
            drop(db);
            // Opening again migrates nothing and keeps the rows.
            assert_eq!(Db::open(&p).unwrap().list().unwrap().len(), 3);
        }
    }

    #[test]
    fn the_same_input_is_preferred_and_any_input_serves() {
        let d = tempfile::tempdir().unwrap();
        let mut db = Db::open(&d.path().join("h.db")).unwrap();
        let p = db.upsert_program("/bin/w", None).unwrap();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let train = db
            .insert_profile(
                p,
                None,
                &s(&["w", "small"]),
                None,
                &serde_json::json!({}),
                &[],
            )
            .unwrap();
        let reference = db
            .insert_profile(
                p,
                None,
                &s(&["w", "large"]),
                None,
                &serde_json::json!({}),
                &[],
            )
            .unwrap();
        let get = |args: &[&str]| db.profile_for_input(p, &s(args)).unwrap().unwrap();
        assert_eq!(
            (get(&["w", "small"]).id, get(&["w", "small"]).same_input),
            (train, true)
        );
        assert_eq!(
            (
                get(&["/path/to/w", "large"]).id,
                get(&["w", "large"]).same_input
            ),
            (reference, true)
        );
        // A new input is served by the newest profile.
        assert_eq!(
            (get(&["w", "huge"]).id, get(&["w", "huge"]).same_input),
            (reference, false)
        );
        assert_ne!(
            input_signature(&s(&["w", "a b"])),
            input_signature(&s(&["w", "a", "b"]))
        );
        assert!(db.profile_for_input(999, &s(&["w"])).unwrap().is_none());
    }

    #[test]
    fn validations_move_confidence_and_losses_stick() {
        let d = tempfile::tempdir().unwrap();
        let mut db = Db::open(&d.path().join("h.db")).unwrap();
        let p = db.upsert_program("/bin/w", None).unwrap();
        let args = vec!["w".to_string()];
        let first = db
            .insert_profile(
                p,
                None,
                &args,
                None,
                &serde_json::json!({}),
                &[directive("a", 1.0), directive("b", 2.0)],
            )
            .unwrap();
        assert_eq!(db.record_validation(first, "a", 0.0, false).unwrap(), 0.5);
        assert_eq!(db.record_validation(first, "a", 1.0, false).unwrap(), 0.75);
        assert_eq!(
            db.record_validation(first, "a", f64::NAN, false).unwrap(),
            0.375
        );
        assert!(db.lost_mappings(p).unwrap().is_empty());
        assert_eq!(db.record_validation(first, "b", 1.0, true).unwrap(), 0.0);
        // A later good validation does not clear a loss.
        assert_eq!(db.record_validation(first, "b", 1.0, false).unwrap(), 0.5);
        // A newer profile's directive of the same mapping is still lost for the program.
        db.insert_profile(
            p,
            None,
            &args,
            None,
            &serde_json::json!({}),
            &[directive("b", 2.0)],
        )
        .unwrap();
        assert_eq!(db.lost_mappings(p).unwrap(), vec!["b".to_string()]);
        let ds = db.directives(first).unwrap();
        assert!(ds
            .iter()
            .any(|d| d.mapping == "b" && d.lost && d.validations == 2));
        assert!(db.record_validation(first, "zzz", 1.0, false).is_err());
    }

    #[test]
    fn remove_takes_dependants_along() {
        let d = tempfile::tempdir().unwrap();
        let mut db = Db::open(&d.path().join("h.db")).unwrap();
        let p = db.upsert_program("/bin/w", None).unwrap();
        let prof = db
            .insert_profile(
                p,
                None,
                &["w".into()],
                None,
                &serde_json::json!({}),
                &[directive("a", 1.0)],
            )
            .unwrap();
        assert!(db
            .remove("profile", 999)
            .unwrap_err()
            .to_string()
            .contains("no profile with id 999"));
        assert!(db.remove("table", 1).is_err());
        db.remove("profile", prof).unwrap();
        assert!(db.directives(prof).unwrap().is_empty());
        db.remove("program", p).unwrap();
        assert!(db.list().unwrap().is_empty());
    }

    #[test]
    fn refuses_a_newer_schema() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.db");
        drop(Db::open(&p).unwrap());
        let c = Connection::open(&p).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        assert!(format!("{:#}", Db::open(&p).err().unwrap()).contains("newer"));
    }

    #[test]
    fn concurrent_writers_do_not_lose_rows() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.db");
        drop(Db::open(&p).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let db = Db::open(&p).unwrap();
                    for i in 0..25 {
                        db.upsert_program(&format!("/bin/{t}-{i}"), None).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let db = Db::open(&p).unwrap();
        let n: i64 = db
            .conn
            .query_row("SELECT count(*) FROM programs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 100);
    }
}
