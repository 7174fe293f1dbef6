//! The schema, per engine, and its versioned migrations. SQLite keeps its
//! version in `PRAGMA user_version` and migrates step by step from whatever
//! version a file was left at; PostgreSQL keeps it in `hugetune_schema` and,
//! having no databases older than version 4, creates version 4 at once, then
//! steps on from there.
//!
//! Invariants: both engines have the same tables with the same columns in the
//! same order at every version they share (`tests::both_engines_have_the_same_schema`);
//! a migration runs in one transaction with the version bump, so a database is
//! at a version whole or not at all; on PostgreSQL an advisory lock keeps two
//! hosts connecting at once from migrating twice.

use crate::backend::{Conn, Engine, Val};
use crate::identity::{new_uid, MachineClass};
use anyhow::{bail, Context, Result};

/// One step of the schema: SQL, then an optional fix-up in Rust (data the SQL
/// cannot compute, such as machine classes from stored machine descriptions).
pub(crate) struct Migration {
    pub sql: &'static str,
    pub fixup: Option<fn(&mut Conn) -> Result<()>>,
}

/// Each entry migrates an SQLite database from version `i` to `i + 1`.
pub(crate) const SQLITE: &[Migration] = &[
    Migration {
        sql: r#"
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
        fixup: None,
    },
    Migration {
        sql: r#"
CREATE TABLE calibrations (
    id INTEGER PRIMARY KEY,
    machine_id INTEGER NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
    data TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE INDEX calibrations_machine ON calibrations(machine_id);
"#,
        fixup: None,
    },
    // Version 3: profiles keyed by their input as well (a training input can serve
    // a reference input, seed 001 §5.3.3, but the same input is preferred);
    // directives learn from validations; runs name the mapping they applied.
    Migration {
        sql: r#"
ALTER TABLE profiles ADD COLUMN input_signature TEXT NOT NULL DEFAULT '';
ALTER TABLE directives ADD COLUMN validations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE directives ADD COLUMN lost INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN mapping TEXT NOT NULL DEFAULT '';
CREATE INDEX profiles_program ON profiles(program_id, input_signature);
CREATE INDEX runs_program ON runs(program_id, mapping);
"#,
        fixup: None,
    },
    // Version 4 (issue 20, fleets): machine classes, whose analyses profiles
    // are; a profile re-analyzed for another class names its origin; programs
    // are one per build-id whatever their path (the rows of one build under
    // several paths are merged into the oldest); validations are rows (which
    // host measured what), the directive's columns their aggregate (the
    // validated state so far is carried over as one row by no known host,
    // `carried`: a state, not one measurement); a fleet store keeps the profile
    // bundles themselves (`bundles`), for hosts that re-analyze; profiles, runs
    // and calibrations get unique ids that survive copying between databases.
    Migration {
        sql: r#"
CREATE TABLE machine_classes (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    summary TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
ALTER TABLE machines ADD COLUMN class_id INTEGER REFERENCES machine_classes(id);
ALTER TABLE profiles ADD COLUMN class_id INTEGER REFERENCES machine_classes(id);
ALTER TABLE profiles ADD COLUMN origin_id INTEGER REFERENCES profiles(id) ON DELETE SET NULL;
ALTER TABLE profiles ADD COLUMN uid TEXT;
ALTER TABLE runs ADD COLUMN uid TEXT;
ALTER TABLE calibrations ADD COLUMN uid TEXT;
UPDATE profiles SET uid = lower(hex(randomblob(16)));
UPDATE runs SET uid = lower(hex(randomblob(16)));
UPDATE calibrations SET uid = lower(hex(randomblob(16)));
CREATE UNIQUE INDEX profiles_uid ON profiles(uid);
CREATE UNIQUE INDEX runs_uid ON runs(uid);
CREATE UNIQUE INDEX calibrations_uid ON calibrations(uid);
CREATE INDEX profiles_class ON profiles(program_id, class_id);
CREATE UNIQUE INDEX profiles_reanalysis ON profiles(origin_id, class_id) WHERE origin_id IS NOT NULL;
CREATE TABLE validations (
    id INTEGER PRIMARY KEY,
    uid TEXT NOT NULL UNIQUE,
    directive_id INTEGER NOT NULL REFERENCES directives(id) ON DELETE CASCADE,
    machine_id INTEGER REFERENCES machines(id),
    agreement REAL NOT NULL,
    lost INTEGER NOT NULL,
    carried INTEGER NOT NULL DEFAULT 0,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE INDEX validations_directive ON validations(directive_id);
CREATE TABLE bundles (
    profile_uid TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
INSERT INTO validations (uid, directive_id, machine_id, agreement, lost, carried)
    SELECT lower(hex(randomblob(16))), id, NULL, confidence, lost, 1 FROM directives WHERE validations > 0;
UPDATE profiles SET program_id = (
    SELECT min(q.id) FROM programs q JOIN programs p ON p.build_id = q.build_id WHERE p.id = profiles.program_id)
    WHERE program_id IN (SELECT id FROM programs WHERE build_id != '');
UPDATE runs SET program_id = (
    SELECT min(q.id) FROM programs q JOIN programs p ON p.build_id = q.build_id WHERE p.id = runs.program_id)
    WHERE program_id IN (SELECT id FROM programs WHERE build_id != '');
DELETE FROM programs WHERE build_id != ''
    AND id NOT IN (SELECT min(id) FROM programs WHERE build_id != '' GROUP BY build_id);
CREATE UNIQUE INDEX programs_build ON programs(build_id) WHERE build_id != '';
"#,
        fixup: Some(classify_machines),
    },
    // Version 5: what `hugetune run`'s start-up cache validates with one query
    // (`programs.generation`, moved by triggers on every write to a program's
    // profiles and directives, whoever writes them: no code path can forget
    // it); a revalidation that lifts a bar for every host (`validations.lifts`);
    // bundles of any size, in chunks (`bundle_chunks`; `bundles.data` stays
    // for the whole bundles version 4 stored).
    Migration {
        sql: r#"
ALTER TABLE programs ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE validations ADD COLUMN lifts INTEGER NOT NULL DEFAULT 0;
CREATE TABLE bundle_chunks (
    profile_uid TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (profile_uid, seq)
);
CREATE TRIGGER profiles_generation_insert AFTER INSERT ON profiles BEGIN
    UPDATE programs SET generation = generation + 1 WHERE id = NEW.program_id;
END;
CREATE TRIGGER profiles_generation_update AFTER UPDATE ON profiles BEGIN
    UPDATE programs SET generation = generation + 1 WHERE id IN (OLD.program_id, NEW.program_id);
END;
CREATE TRIGGER profiles_generation_delete AFTER DELETE ON profiles BEGIN
    UPDATE programs SET generation = generation + 1 WHERE id = OLD.program_id;
END;
CREATE TRIGGER directives_generation_insert AFTER INSERT ON directives BEGIN
    UPDATE programs SET generation = generation + 1
        WHERE id = (SELECT program_id FROM profiles WHERE id = NEW.profile_id);
END;
CREATE TRIGGER directives_generation_update AFTER UPDATE ON directives BEGIN
    UPDATE programs SET generation = generation + 1
        WHERE id IN (SELECT program_id FROM profiles WHERE id IN (OLD.profile_id, NEW.profile_id));
END;
CREATE TRIGGER directives_generation_delete AFTER DELETE ON directives BEGIN
    UPDATE programs SET generation = generation + 1
        WHERE id = (SELECT program_id FROM profiles WHERE id = OLD.profile_id);
END;
"#,
        fixup: None,
    },
];

pub const SCHEMA_VERSION: u32 = SQLITE.len() as u32;

/// PostgreSQL at version 4, the same tables and columns in the same order as
/// SQLite's after its four steps (BIGINT for INTEGER, DOUBLE PRECISION for
/// REAL, BOOLEAN for the 0/1 columns, BIGSERIAL for the row ids).
const POSTGRES_V4: &str = r#"
CREATE TABLE machine_classes (
    id BIGSERIAL PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    summary TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (NOW_UTC)
);
CREATE TABLE machines (
    id BIGSERIAL PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    hostname TEXT NOT NULL,
    cpu TEXT NOT NULL,
    kernel TEXT NOT NULL,
    details TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (NOW_UTC),
    class_id BIGINT REFERENCES machine_classes(id)
);
CREATE TABLE programs (
    id BIGSERIAL PRIMARY KEY,
    path TEXT NOT NULL,
    build_id TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL DEFAULT (NOW_UTC),
    UNIQUE (path, build_id)
);
CREATE UNIQUE INDEX programs_build ON programs(build_id) WHERE build_id <> '';
CREATE TABLE profiles (
    id BIGSERIAL PRIMARY KEY,
    program_id BIGINT NOT NULL REFERENCES programs(id) ON DELETE CASCADE,
    machine_id BIGINT REFERENCES machines(id),
    args TEXT NOT NULL,
    bundle TEXT,
    summary TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (NOW_UTC),
    input_signature TEXT NOT NULL DEFAULT '',
    class_id BIGINT REFERENCES machine_classes(id),
    origin_id BIGINT REFERENCES profiles(id) ON DELETE SET NULL,
    uid TEXT
);
CREATE UNIQUE INDEX profiles_uid ON profiles(uid);
CREATE INDEX profiles_program ON profiles(program_id, input_signature);
CREATE INDEX profiles_class ON profiles(program_id, class_id);
CREATE UNIQUE INDEX profiles_reanalysis ON profiles(origin_id, class_id) WHERE origin_id IS NOT NULL;
CREATE TABLE directives (
    id BIGSERIAL PRIMARY KEY,
    profile_id BIGINT NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
    mapping TEXT NOT NULL,
    assignments TEXT NOT NULL,
    base BOOLEAN NOT NULL,
    saving_ns DOUBLE PRECISION NOT NULL,
    pmb DOUBLE PRECISION NOT NULL,
    predicted_speedup DOUBLE PRECISION NOT NULL,
    hugetlb_pages BIGINT NOT NULL,
    thp_pages BIGINT NOT NULL,
    confidence DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    details TEXT NOT NULL,
    validations BIGINT NOT NULL DEFAULT 0,
    lost BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX directives_profile ON directives(profile_id);
CREATE TABLE runs (
    id BIGSERIAL PRIMARY KEY,
    program_id BIGINT NOT NULL REFERENCES programs(id) ON DELETE CASCADE,
    profile_id BIGINT REFERENCES profiles(id) ON DELETE SET NULL,
    machine_id BIGINT REFERENCES machines(id),
    args TEXT NOT NULL,
    plan TEXT NOT NULL,
    baseline_s TEXT NOT NULL,
    optimized_s TEXT NOT NULL,
    speedup DOUBLE PRECISION,
    huge_bytes_backed BIGINT NOT NULL,
    verdict TEXT NOT NULL,
    details TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (NOW_UTC),
    mapping TEXT NOT NULL DEFAULT '',
    uid TEXT
);
CREATE UNIQUE INDEX runs_uid ON runs(uid);
CREATE INDEX runs_program ON runs(program_id, mapping);
CREATE TABLE calibrations (
    id BIGSERIAL PRIMARY KEY,
    machine_id BIGINT NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
    data TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (NOW_UTC),
    uid TEXT
);
CREATE UNIQUE INDEX calibrations_uid ON calibrations(uid);
CREATE INDEX calibrations_machine ON calibrations(machine_id);
CREATE TABLE validations (
    id BIGSERIAL PRIMARY KEY,
    uid TEXT NOT NULL UNIQUE,
    directive_id BIGINT NOT NULL REFERENCES directives(id) ON DELETE CASCADE,
    machine_id BIGINT REFERENCES machines(id),
    agreement DOUBLE PRECISION NOT NULL,
    lost BOOLEAN NOT NULL,
    carried BOOLEAN NOT NULL DEFAULT FALSE,
    created TEXT NOT NULL DEFAULT (NOW_UTC)
);
CREATE INDEX validations_directive ON validations(directive_id);
CREATE TABLE bundles (
    profile_uid TEXT PRIMARY KEY,
    size BIGINT NOT NULL,
    data BYTEA NOT NULL,
    created TEXT NOT NULL DEFAULT (NOW_UTC)
);
"#;

/// PostgreSQL's version 5 (see SQLite's): one trigger function for both tables.
const POSTGRES_V5: &str = r#"
ALTER TABLE programs ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE validations ADD COLUMN lifts BOOLEAN NOT NULL DEFAULT FALSE;
CREATE TABLE bundle_chunks (
    profile_uid TEXT NOT NULL,
    seq BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (profile_uid, seq)
);
CREATE FUNCTION hugetune_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_TABLE_NAME = 'profiles' THEN
        IF TG_OP = 'INSERT' THEN
            UPDATE programs SET generation = generation + 1 WHERE id = NEW.program_id;
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE programs SET generation = generation + 1 WHERE id = OLD.program_id;
        ELSE
            UPDATE programs SET generation = generation + 1 WHERE id IN (OLD.program_id, NEW.program_id);
        END IF;
    ELSE
        IF TG_OP = 'INSERT' THEN
            UPDATE programs SET generation = generation + 1
                WHERE id = (SELECT program_id FROM profiles WHERE id = NEW.profile_id);
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE programs SET generation = generation + 1
                WHERE id = (SELECT program_id FROM profiles WHERE id = OLD.profile_id);
        ELSE
            UPDATE programs SET generation = generation + 1
                WHERE id IN (SELECT program_id FROM profiles WHERE id IN (OLD.profile_id, NEW.profile_id));
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER profiles_generation AFTER INSERT OR UPDATE OR DELETE ON profiles
    FOR EACH ROW EXECUTE FUNCTION hugetune_bump_generation();
CREATE TRIGGER directives_generation AFTER INSERT OR UPDATE OR DELETE ON directives
    FOR EACH ROW EXECUTE FUNCTION hugetune_bump_generation();
"#;

/// The current time as SQLite's `strftime` default writes it, so rows read the
/// same whichever engine made them.
const POSTGRES_NOW: &str = r#"to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')"#;

/// PostgreSQL's steps: (the version it leads to, SQL). The first creates everything.
fn postgres_steps() -> Vec<(u32, String)> {
    vec![
        (4, POSTGRES_V4.replace("NOW_UTC", POSTGRES_NOW)),
        (5, POSTGRES_V5.to_string()),
    ]
}

/// The tables of the current schema (the tests compare the engines on them).
#[cfg(test)]
pub const TABLES: &[&str] = &[
    "machine_classes",
    "machines",
    "programs",
    "profiles",
    "directives",
    "runs",
    "calibrations",
    "validations",
    "bundles",
    "bundle_chunks",
];

/// Version 4's fix-up: the class of every machine whose stored description
/// allows it, and its profiles' class with it. A description that does not
/// (written by hand, or by a version that stored less) leaves the class empty:
/// such profiles serve every host, as before.
fn classify_machines(c: &mut Conn) -> Result<()> {
    for row in c.query("SELECT id, details FROM machines", &[])? {
        let (id, details) = (row.int(0)?, row.text(1)?);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&details) else {
            continue;
        };
        let Ok(class) = MachineClass::from_machine_json(&v) else {
            continue;
        };
        let cid = upsert_class(c, &class)?;
        c.exec(
            "UPDATE machines SET class_id = ?1 WHERE id = ?2",
            &[cid.into(), id.into()],
        )?;
    }
    c.exec(
        "UPDATE profiles SET class_id = (SELECT class_id FROM machines m WHERE m.id = profiles.machine_id)
         WHERE machine_id IS NOT NULL",
        &[],
    )?;
    Ok(())
}

/// The id of a class, created if new (by any number of hosts at once).
pub(crate) fn upsert_class(c: &mut Conn, class: &MachineClass) -> Result<i64> {
    let key = class.key();
    c.exec(
        "INSERT INTO machine_classes (key, summary) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
        &[key.clone().into(), class.summary().into()],
    )?;
    c.query_one(
        "SELECT id FROM machine_classes WHERE key = ?1",
        &[key.into()],
        "a machine class just stored",
    )?
    .int(0)
}

pub(crate) fn sqlite_version(c: &Conn) -> Result<u32> {
    let s = c.as_sqlite().context("not an SQLite database")?;
    Ok(s.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

/// Brings an SQLite database to `SCHEMA_VERSION`, one transaction per step.
pub(crate) fn migrate_sqlite(c: &mut Conn) -> Result<()> {
    let v = sqlite_version(c)?;
    if v > SCHEMA_VERSION {
        bail!("schema version {v} is newer than this hugetune understands ({SCHEMA_VERSION}); upgrade hugetune");
    }
    for (i, m) in SQLITE.iter().enumerate().skip(v as usize) {
        c.transaction(|c| {
            // Another process may have migrated since the version was read.
            if sqlite_version(c)? > i as u32 {
                return Ok(());
            }
            c.batch(m.sql)
                .with_context(|| format!("migrating schema to version {}", i + 1))?;
            if let Some(f) = m.fixup {
                f(c).with_context(|| format!("migrating data to schema version {}", i + 1))?;
            }
            c.batch(&format!("PRAGMA user_version = {}", i + 1))?;
            Ok(())
        })?;
    }
    Ok(())
}

/// An arbitrary constant naming hugetune's migration lock ("hugetune" in ASCII).
const PG_LOCK: i64 = 0x6875_6765_7475_6e65;

pub(crate) fn postgres_version(c: &mut Conn) -> Result<Option<u32>> {
    // pg_tables, read with this statement's snapshot: a table another host
    // created and committed while this one waited for the lock is seen (a name
    // look-up such as to_regclass may answer from this session's cache).
    let has = c
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_tables
             WHERE schemaname = current_schema() AND tablename = 'hugetune_schema'",
            &[],
            "the schema's tables",
        )?
        .int(0)?;
    if has == 0 {
        return Ok(None);
    }
    let v = c
        .query_one(
            "SELECT max(version) FROM hugetune_schema",
            &[],
            "the schema version",
        )?
        .opt_int(0)?
        .unwrap_or(0);
    Ok(Some(u32::try_from(v).unwrap_or(u32::MAX)))
}

/// Brings a PostgreSQL database to `SCHEMA_VERSION`. An empty database gets
/// hugetune's tables; one with other tables but not hugetune's is refused.
pub(crate) fn migrate_postgres(c: &mut Conn, name: &str) -> Result<()> {
    // The common case (every connection), in two simple queries without a
    // transaction or the lock: already current. (Asking for the version of a
    // table that is not there would work too, but log an error on the server.)
    let exists = c
        .pg_simple_first("SELECT to_regclass('hugetune_schema') IS NOT NULL")?
        .and_then(|v| v.into_iter().next().flatten())
        == Some("t".to_string());
    if exists {
        let current = c
            .pg_simple_first("SELECT max(version) FROM hugetune_schema")?
            .and_then(|v| v.into_iter().next().flatten())
            .and_then(|v| v.parse::<u32>().ok());
        if current == Some(SCHEMA_VERSION) {
            return Ok(());
        }
    }
    c.transaction(|c| {
        c.exec("SELECT pg_advisory_xact_lock(?1)", &[Val::Int(PG_LOCK)])?;
        let v = match postgres_version(c)? {
            Some(v) => v,
            None => {
                let others = c.query(
                    "SELECT table_name FROM information_schema.tables
                     WHERE table_schema = current_schema() ORDER BY 1 LIMIT 6",
                    &[],
                )?;
                if !others.is_empty() {
                    let names: Vec<String> =
                        others.iter().filter_map(|r| r.text(0).ok()).collect();
                    bail!(
                        "the PostgreSQL database {name} has tables, but not hugetune's ({}); give another database",
                        names.join(", ")
                    );
                }
                c.batch("CREATE TABLE hugetune_schema (version BIGINT NOT NULL); INSERT INTO hugetune_schema VALUES (0)")?;
                0
            }
        };
        if v > SCHEMA_VERSION {
            bail!("schema version {v} is newer than this hugetune understands ({SCHEMA_VERSION}); upgrade hugetune");
        }
        for (to, sql) in postgres_steps() {
            if to > v {
                c.batch(&sql)
                    .with_context(|| format!("creating schema version {to}"))?;
                c.exec(
                    "UPDATE hugetune_schema SET version = ?1",
                    &[Val::Int(to.into())],
                )?;
            }
        }
        Ok(())
    })
}

/// What a column holds, whatever the engine calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Integers and the 0/1 (boolean) columns.
    Int,
    Real,
    Text,
}

/// Columns of a table in order, with their kinds, as the engine reports them.
pub(crate) fn columns_with_kinds(c: &mut Conn, table: &str) -> Result<Vec<(String, Kind)>> {
    let rows = match c.engine() {
        Engine::Sqlite => c.query(
            "SELECT name, type FROM pragma_table_info(?1) ORDER BY cid",
            &[table.into()],
        )?,
        Engine::Postgres => c.query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = ?1 ORDER BY ordinal_position",
            &[table.into()],
        )?,
    };
    rows.iter()
        .map(|r| {
            let ty = r.text(1)?.to_ascii_lowercase();
            let kind = if ty.contains("int") || ty == "boolean" {
                Kind::Int
            } else if ty.contains("real") || ty.contains("double") {
                Kind::Real
            } else {
                Kind::Text
            };
            Ok((r.text(0)?, kind))
        })
        .collect()
}

/// Columns of a table in order.
#[cfg(test)]
pub(crate) fn columns(c: &mut Conn, table: &str) -> Result<Vec<String>> {
    Ok(columns_with_kinds(c, table)?
        .into_iter()
        .map(|(n, _)| n)
        .collect())
}

/// A fresh uid as a parameter.
pub(crate) fn uid() -> Val {
    Val::Text(new_uid())
}
