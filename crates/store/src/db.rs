//! The database: machine classes, machines (hosts), programs, profiles,
//! directives, runs, validations and the machines' measured costs
//! (calibrations), in embedded SQLite (a file: the default) or on a
//! PostgreSQL server (`postgresql://…`: a fleet's store). Both have the same
//! schema (`schema.rs`), versioned and migrated forward on open; every method
//! here is the same on both.
//!
//! Invariants: every write of more than one row is one transaction; a host's
//! identity is `identity::host_id()` (or `set_host_id`), its class derived from
//! the machine description it registers with; look-ups that plan a run see the
//! profiles of the host's class (and the class-less ones older versions
//! stored), never another class's predictions; a validation locks its
//! directive's row first, so validations from many hosts at once are all
//! counted; a file database is created 0600 and never through a symlink.

use crate::backend::{Conn, Engine, Row, Val};
use crate::identity::{self, HostSpec, MachineClass};
use crate::schema::{self, uid};
use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::path::{Path, PathBuf};

pub use crate::schema::SCHEMA_VERSION;

/// A host source: computes what the host registers with, when it is first needed.
type HostSource = Box<dyn Fn() -> Result<HostSpec> + Send>;

pub struct Db {
    /// Crate-visible so that queries can live in their own modules.
    pub(crate) conn: RefCell<Conn>,
    /// The file, or the server's URL without its password.
    path: PathBuf,
    host_id: String,
    host: RefCell<Option<Host>>,
    host_source: Option<HostSource>,
}

/// This host as the database knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub host_id: String,
    pub machine_id: i64,
    /// None when its description gave no class (then every profile serves it).
    pub class_id: Option<i64>,
    /// The description it registered with (`HostSpec::details`).
    #[serde(skip)]
    pub details: serde_json::Value,
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
    /// How far validations have borne the prediction out (1: fully; new directives
    /// start there): the mean over the hosts that validated it.
    #[serde(default = "full_confidence")]
    pub confidence: f64,
    /// Validations recorded against this directive.
    #[serde(default)]
    pub validations: u64,
    /// A validation measured a loss on some host, not yet revalidated there:
    /// never applied automatically.
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
    /// The host that ran it; None: this database's host, when it has registered.
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

/// A profile to store (`Db::store_profile`).
#[derive(Debug, Clone, Copy)]
pub struct NewProfile<'a> {
    pub program_id: i64,
    /// The host that analyzed it: the profile belongs to its class.
    pub machine_id: Option<i64>,
    pub args: &'a [String],
    pub bundle: Option<&'a Path>,
    pub summary: &'a serde_json::Value,
    pub directives: &'a [NewDirective],
    /// The profile this one analyzes again for another class.
    pub origin_id: Option<i64>,
}

/// What `put_bundle` did with a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Stored,
    /// The database had it already.
    Already,
    /// Over the size limit (its size): not kept.
    TooLarge(u64),
}

/// Bundles a fleet store keeps at most: well beyond the largest bundles
/// recorded (a few GiB); they are stored in `BUNDLE_CHUNK` pieces.
pub const BUNDLE_MAX: u64 = 64 << 30;

/// The size of one stored piece of a bundle: one row, one round trip, and the
/// memory a write or read of a bundle needs (PostgreSQL's values stay far
/// below their 1 GiB limit, and no bundle is ever whole in memory).
pub const BUNDLE_CHUNK: usize = 8 << 20;

/// A profile as the online agent reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredProfile {
    pub id: i64,
    pub args: Vec<String>,
    pub summary: serde_json::Value,
    /// Taken with the same arguments as the run being planned.
    pub same_input: bool,
    /// The machine class whose analysis it is (None: stored before classes).
    pub class_id: Option<i64>,
    /// The profile bundle it was analyzed from.
    pub bundle: Option<String>,
}

/// Where the plan for a run comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanSource {
    /// An analysis for this host's class (or one stored before classes).
    Class(StoredProfile),
    /// Only other classes have analyzed the program: their profile, to be
    /// analyzed again with this host's geometry.
    Foreign(StoredProfile),
    None,
}

/// One host's validations of a directive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostValidations {
    /// Its host id (None: validations stored before hosts were known).
    pub host: Option<String>,
    pub hostname: Option<String>,
    pub validations: u64,
    /// Its own confidence (each validation moves it halfway to the agreement).
    pub confidence: f64,
    /// Its latest validation measured a loss.
    pub lost: bool,
}

/// Where a plan came from: `hugetune run --json`'s `source`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub profile_id: i64,
    /// The profile this one re-analyzed for its class, if it is a re-analysis.
    pub origin_profile_id: Option<i64>,
    pub class: Option<String>,
    /// The host whose profile (or re-analysis) it is.
    pub analyzed_on: Option<String>,
    /// The mapping's validations, per host.
    pub validated_by: Vec<HostValidations>,
    /// The combined confidence and its spread across hosts (min, max).
    pub confidence: Option<f64>,
    pub spread: Option<(f64, f64)>,
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

/// Whether a `--db` value names a PostgreSQL server rather than a file.
pub fn is_url(s: &str) -> bool {
    s.starts_with("postgresql://") || s.starts_with("postgres://")
}

/// A URL with its password replaced by `***` (for messages and `db ls`).
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &url[..start],
                &authority[..colon],
                &url[start + at..]
            ),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `sslmode` in a `postgresql://` URL, with libpq's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it (libpq's default; a Unix socket never
    /// does), the certificate not checked.
    Prefer,
    /// TLS or no connection; the certificate checked only against an
    /// `sslrootcert` given (as libpq does when a root certificate exists).
    Require,
    /// TLS with a certificate signed by `sslrootcert`'s CA (else the system's).
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host of the URL.
    VerifyFull,
}

/// The TLS part of a URL: taken out of it before the client parses the rest
/// (the client knows neither `verify-*` nor `sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub root_cert: Option<PathBuf>,
}

impl TlsSettings {
    /// The URL without `sslmode` and `sslrootcert`, and what they said.
    pub fn from_url(url: &str) -> Result<(String, TlsSettings)> {
        let mut t = TlsSettings {
            mode: SslMode::Prefer,
            root_cert: None,
        };
        let Some(q) = url.find('?') else {
            return Ok((url.to_string(), t));
        };
        let mut kept = Vec::new();
        for pair in url[q + 1..].split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslmode" => {
                    t.mode = match v {
                        "disable" => SslMode::Disable,
                        "allow" | "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-ca" => SslMode::VerifyCa,
                        "verify-full" => SslMode::VerifyFull,
                        other => bail!(
                            "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                        ),
                    }
                }
                "sslrootcert" => {
                    let path = percent_decode(v);
                    if path.is_empty() {
                        bail!("sslrootcert is empty: give the file of the CA certificate (PEM)");
                    }
                    t.root_cert = Some(PathBuf::from(path));
                }
                _ => kept.push(pair),
            }
        }
        let rest = if kept.is_empty() {
            url[..q].to_string()
        } else {
            format!("{}?{}", &url[..q], kept.join("&"))
        };
        Ok((rest, t))
    }

    fn describe(&self) -> String {
        let mode = match self.mode {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        };
        match &self.root_cert {
            Some(p) => format!("sslmode={mode}, sslrootcert={}", p.display()),
            None => format!("sslmode={mode}, the system's CAs"),
        }
    }

    /// The connector: native-tls (the system's OpenSSL), checking what the
    /// mode asks for.
    fn connector(&self) -> Result<postgres_native_tls::MakeTlsConnector> {
        let mut b = native_tls::TlsConnector::builder();
        if let Some(p) = &self.root_cert {
            let pem = std::fs::read(p)
                .with_context(|| format!("sslrootcert {}: cannot read it", p.display()))?;
            let cert = native_tls::Certificate::from_pem(&pem)
                .with_context(|| format!("sslrootcert {}: not a PEM certificate", p.display()))?;
            b.add_root_certificate(cert);
        }
        let verify = matches!(self.mode, SslMode::VerifyCa | SslMode::VerifyFull)
            || (self.mode == SslMode::Require && self.root_cert.is_some());
        b.danger_accept_invalid_certs(!verify);
        b.danger_accept_invalid_hostnames(self.mode != SslMode::VerifyFull);
        let c = b.build().context("setting up TLS")?;
        Ok(postgres_native_tls::MakeTlsConnector::new(c))
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

static KEPT_PASSWORD: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A `--db` URL with its password taken out (kept for `Db::connect` in this
/// process only: no message shows it and no program hugetune runs inherits
/// it); a file or a URL without a password as it is.
pub fn hide_password(location: &Path) -> PathBuf {
    let Some(url) = location.to_str().filter(|s| is_url(s)) else {
        return location.to_path_buf();
    };
    // The client parses what it knows: not the TLS settings.
    let Some(cfg) = TlsSettings::from_url(url)
        .ok()
        .and_then(|(rest, _)| rest.parse::<postgres::Config>().ok())
    else {
        return location.to_path_buf();
    };
    let Some(pw) = cfg.get_password() else {
        return location.to_path_buf();
    };
    let _ = KEPT_PASSWORD.set(String::from_utf8_lossy(pw).into_owned());
    PathBuf::from(redact(url).replacen(":***@", "@", 1))
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).with_context(|| format!("{what} in the database is corrupt"))
}

/// Per-host folds of a directive's validations, in the order they were stored.
pub(crate) fn fold_validations(c: &mut Conn, directive_id: i64) -> Result<Vec<HostValidations>> {
    let rows = c.query(
        "SELECT v.machine_id, m.fingerprint, m.hostname, v.agreement, v.lost, v.carried, v.lifts
         FROM validations v LEFT JOIN machines m ON m.id = v.machine_id
         WHERE v.directive_id = ?1 ORDER BY v.id",
        &[directive_id.into()],
    )?;
    let mut hosts: Vec<(Option<i64>, HostValidations)> = Vec::new();
    for r in rows {
        let machine = r.opt_int(0)?;
        let i = match hosts.iter().position(|(m, _)| *m == machine) {
            Some(i) => i,
            None => {
                hosts.push((
                    machine,
                    HostValidations {
                        host: r.opt_text(1)?,
                        hostname: r.opt_text(2)?,
                        validations: 0,
                        confidence: 1.0,
                        lost: false,
                    },
                ));
                hosts.len() - 1
            }
        };
        let h = &mut hosts[i].1;
        let (agreement, lost, carried) = (r.real(3)?, r.bool(4)?, r.bool(5)?);
        h.confidence = if carried {
            agreement
        } else if lost {
            0.0
        } else {
            0.5 * h.confidence + 0.5 * agreement
        };
        h.lost = lost;
        h.validations += 1;
        // A revalidation that measured no loss lifts the bar for every host
        // (`hugetune validate --revalidate`): their earlier losses are
        // superseded; a later loss anywhere bars the plan again.
        if r.bool(6)? && !lost {
            for (_, other) in hosts.iter_mut() {
                other.lost = false;
            }
        }
    }
    Ok(hosts.into_iter().map(|(_, h)| h).collect())
}

/// Takes the row lock of the program `program_of` (a query of one program id,
/// given `id`) names, as the first write of a transaction that then writes its
/// profiles, directives or validations. The generation triggers lock that row
/// after every such write; a transaction that locked a directive first and
/// then, through its trigger, the program would wait in the opposite order to
/// one that stores a profile (the program first, then its directives) and
/// deadlock with it. On SQLite the writer holds the database lock already: a
/// no-op.
pub(crate) fn lock_program(c: &mut Conn, program_of: &str, id: i64) -> Result<()> {
    c.exec(
        &format!("UPDATE programs SET generation = generation WHERE id = ({program_of})"),
        &[id.into()],
    )?;
    Ok(())
}

/// Sets a directive's confidence (the mean over hosts) and lost flag (some
/// host's latest validation lost) from its validation rows; the confidence.
pub(crate) fn refresh_directive(c: &mut Conn, directive_id: i64) -> Result<f64> {
    let hosts = fold_validations(c, directive_id)?;
    if hosts.is_empty() {
        return c
            .query_one(
                "SELECT confidence FROM directives WHERE id = ?1",
                &[directive_id.into()],
                "a directive",
            )?
            .real(0);
    }
    let confidence = hosts.iter().map(|h| h.confidence).sum::<f64>() / hosts.len() as f64;
    let lost = hosts.iter().any(|h| h.lost);
    c.exec(
        "UPDATE directives SET confidence = ?1, lost = ?2 WHERE id = ?3",
        &[confidence.into(), lost.into(), directive_id.into()],
    )?;
    Ok(confidence)
}

/// A validated state without rows behind it (a directive from an older export,
/// or given with `validations > 0`) becomes one carried row by no known host.
pub(crate) fn carry_state(c: &mut Conn, directive_id: i64, d: &NewDirective) -> Result<()> {
    if d.validations > 0 || d.lost {
        c.exec(
            "INSERT INTO validations (uid, directive_id, machine_id, agreement, lost, carried)
             VALUES (?1, ?2, NULL, ?3, ?4, ?5)",
            &[
                uid(),
                directive_id.into(),
                d.confidence.clamp(0.0, 1.0).into(),
                d.lost.into(),
                true.into(),
            ],
        )?;
    }
    Ok(())
}

fn find_program_in(c: &mut Conn, path: &str, build_id: &str) -> Result<Option<i64>> {
    // A program is its build: the same binary under another path is the same
    // program. Without a build-id, the path is all there is.
    let row = if build_id.is_empty() {
        c.query_opt(
            "SELECT id FROM programs WHERE path = ?1 AND build_id = ''",
            &[path.into()],
        )?
    } else {
        c.query_opt(
            "SELECT id FROM programs WHERE build_id = ?1",
            &[build_id.into()],
        )?
    };
    row.map(|r| r.int(0)).transpose()
}

fn upsert_machine_in(
    c: &mut Conn,
    fingerprint: &str,
    hostname: &str,
    cpu: &str,
    kernel: &str,
    details: &serde_json::Value,
) -> Result<(i64, Option<i64>)> {
    let class_id = match MachineClass::from_machine_json(details) {
        Ok(class) => Some(schema::upsert_class(c, &class)?),
        Err(_) => None,
    };
    c.exec(
        "INSERT INTO machines (fingerprint, hostname, cpu, kernel, details, class_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (fingerprint) DO UPDATE SET hostname = excluded.hostname, cpu = excluded.cpu,
             kernel = excluded.kernel, details = excluded.details, class_id = excluded.class_id",
        &[
            fingerprint.into(),
            hostname.into(),
            cpu.into(),
            kernel.into(),
            details.to_string().into(),
            class_id.into(),
        ],
    )?;
    let id = c
        .query_one(
            "SELECT id FROM machines WHERE fingerprint = ?1",
            &[fingerprint.into()],
            "a machine just stored",
        )?
        .int(0)?;
    Ok((id, class_id))
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

    fn with_conn(conn: Conn, path: PathBuf) -> Db {
        Db {
            conn: RefCell::new(conn),
            path,
            host_id: identity::host_id(),
            host: RefCell::new(None),
            host_source: None,
        }
    }

    /// Whether the database `--db` names is there: a file that exists, or a
    /// server (asked when opened).
    pub fn exists(location: &Path) -> bool {
        location.to_str().is_some_and(is_url) || location.exists()
    }

    /// Opens (or creates) the database at `location`: a `postgresql://` URL
    /// (`Db::connect`), else an SQLite file. A file's directory must exist (a
    /// mistyped `--db` is an error, not a new tree of directories); an existing
    /// file must be an SQLite database that is hugetune's or empty: another
    /// program's database is refused, never given hugetune's tables.
    pub fn open(location: &Path) -> Result<Db> {
        if let Some(url) = location.to_str().filter(|s| is_url(s)) {
            return Db::connect(url);
        }
        let path = location;
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
        conn.busy_handler(Some(busy_wait))?;
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
        let db = Db::with_conn(Conn::sqlite(conn), path.to_path_buf());
        schema::migrate_sqlite(&mut db.conn.borrow_mut())
            .with_context(|| format!("database {}", path.display()))?;
        Ok(db)
    }

    /// Connects to a PostgreSQL server: `postgresql://user[:password]@host[:port]/dbname`
    /// (a host that starts with `/`, percent-encoded, is a socket directory).
    /// Without a password in the URL, `PGPASSWORD` gives it. The database must
    /// exist; hugetune's tables are created or migrated in it.
    pub fn connect(url: &str) -> Result<Db> {
        let shown = redact(url);
        let (url_rest, tls) = TlsSettings::from_url(url).with_context(|| shown.clone())?;
        let mut cfg: postgres::Config = url_rest
            .parse()
            .with_context(|| format!("{shown} is not a PostgreSQL URL"))?;
        if cfg.get_password().is_none() {
            if let Some(p) = KEPT_PASSWORD.get() {
                cfg.password(p);
            } else if let Ok(p) = std::env::var("PGPASSWORD") {
                cfg.password(p);
            }
        }
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(std::time::Duration::from_secs(10));
        }
        if cfg.get_application_name().is_none() {
            cfg.application_name("hugetune");
        }
        if cfg.get_options().is_none() {
            // As long as SQLite's busy timeout: a lock another host holds is
            // waited for, then an error, never a hang (set at connection: no
            // extra round trip).
            cfg.options("-c lock_timeout=30s");
        }
        let name = cfg.get_dbname().unwrap_or("(the user's)").to_string();
        // A Unix socket never speaks TLS: `prefer` there needs no connector
        // (building one loads the system's CAs: a tenth of a second).
        let tcp = cfg
            .get_hosts()
            .iter()
            .any(|h| matches!(h, postgres::config::Host::Tcp(_)));
        let client = match tls.mode {
            SslMode::Disable => {
                cfg.ssl_mode(postgres::config::SslMode::Disable);
                cfg.connect(postgres::NoTls)
            }
            SslMode::Prefer if !tcp => cfg.connect(postgres::NoTls),
            mode => {
                cfg.ssl_mode(if mode == SslMode::Prefer {
                    postgres::config::SslMode::Prefer
                } else {
                    postgres::config::SslMode::Require
                });
                cfg.connect(tls.connector()?)
            }
        }
        .map_err(|e| {
            let certificate = std::error::Error::source(&e)
                .is_some_and(|s| s.to_string().contains("certificate"));
            let e = anyhow::Error::from(e);
            if certificate {
                e.context(format!(
                    "connecting to {shown}: the server's TLS certificate was refused ({}); \
                     check sslrootcert (the CA that signed it) and the host name in the URL",
                    tls.describe()
                ))
            } else {
                e.context(format!("connecting to {shown}"))
            }
        })?;
        let mut conn = Conn::postgres(client);
        schema::migrate_postgres(&mut conn, &name).with_context(|| format!("database {shown}"))?;
        Ok(Db::with_conn(conn, PathBuf::from(shown)))
    }

    /// A database in memory, with the same schema: nothing on disk (fuzzing the
    /// import, tests).
    pub fn open_in_memory() -> Result<Db> {
        let conn = Connection::open_in_memory()?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let db = Db::with_conn(Conn::sqlite(conn), PathBuf::from(":memory:"));
        schema::migrate_sqlite(&mut db.conn.borrow_mut())?;
        Ok(db)
    }

    /// The file, or the server's URL without its password.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn engine(&self) -> Engine {
        self.conn.borrow().engine()
    }

    /// Runs `f` in one transaction (see `Conn::transaction`).
    pub(crate) fn tx<T>(&self, f: impl FnMut(&mut Conn) -> Result<T>) -> Result<T> {
        self.conn.borrow_mut().transaction(f)
    }

    pub fn schema_version(&self) -> Result<u32> {
        let mut c = self.conn.borrow_mut();
        match c.engine() {
            Engine::Sqlite => schema::sqlite_version(&c),
            Engine::Postgres => Ok(schema::postgres_version(&mut c)?.unwrap_or(0)),
        }
    }

    /// Raw SQL for tests, tools and benchmarks (`?N` placeholders): the rows.
    #[doc(hidden)]
    pub fn query_sql(&self, sql: &str, params: &[Val]) -> Result<Vec<Row>> {
        self.conn.borrow_mut().query(sql, params)
    }

    /// Raw SQL for tests and tools: the rows changed.
    #[doc(hidden)]
    pub fn execute_sql(&self, sql: &str, params: &[Val]) -> Result<u64> {
        self.conn.borrow_mut().exec(sql, params)
    }

    // ---------------------------------------------------------------- hosts

    /// This database's host id (`identity::host_id()` unless set).
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// Acts as another host from now on (tests; a process is one host).
    pub fn set_host_id(&mut self, id: &str) -> Result<()> {
        identity::check_host_id(id)?;
        self.host_id = id.to_string();
        *self.host.borrow_mut() = None;
        Ok(())
    }

    /// How to describe this host when a look-up first needs its class: the CLI
    /// gives `hugetune machine`'s description (with `--tlb`), computed only then.
    pub fn set_host_source(&mut self, f: impl Fn() -> Result<HostSpec> + Send + 'static) {
        self.host_source = Some(Box::new(f));
        *self.host.borrow_mut() = None;
    }

    /// Registers this host (its id, description and class), adopting the row
    /// an older hugetune stored for it under `hostname|cpu|kernel`.
    /// A host already known by the same name, CPU, kernel and class is read,
    /// not written: `hugetune run` starts without taking a write lock, and the
    /// row does not change with what varies between runs (free pool pages).
    pub fn register_host(&self, spec: &HostSpec) -> Result<Host> {
        let legacy = format!("{}|{}|{}", spec.hostname, spec.cpu, spec.kernel);
        let host_id = self.host_id.clone();
        let key = MachineClass::from_machine_json(&spec.details)
            .ok()
            .map(|c| c.key());
        let known = self.conn.borrow_mut().query_opt(
            "SELECT m.id, m.class_id, m.hostname, m.cpu, m.kernel, k.key FROM machines m
             LEFT JOIN machine_classes k ON k.id = m.class_id WHERE m.fingerprint = ?1",
            &[host_id.as_str().into()],
        )?;
        if let Some(r) = known {
            if (r.text(2)?, r.text(3)?, r.text(4)?, r.opt_text(5)?)
                == (
                    spec.hostname.clone(),
                    spec.cpu.clone(),
                    spec.kernel.clone(),
                    key,
                )
            {
                let h = Host {
                    host_id,
                    machine_id: r.int(0)?,
                    class_id: r.opt_int(1)?,
                    details: spec.details.clone(),
                };
                *self.host.borrow_mut() = Some(h.clone());
                return Ok(h);
            }
        }
        let (machine_id, class_id) = self.tx(|c| {
            let have = c.query_opt(
                "SELECT id FROM machines WHERE fingerprint = ?1",
                &[host_id.as_str().into()],
            )?;
            if have.is_none() {
                c.exec(
                    "UPDATE machines SET fingerprint = ?1 WHERE fingerprint = ?2",
                    &[host_id.as_str().into(), legacy.as_str().into()],
                )?;
            }
            upsert_machine_in(
                c,
                &host_id,
                &spec.hostname,
                &spec.cpu,
                &spec.kernel,
                &spec.details,
            )
        })?;
        let h = Host {
            host_id,
            machine_id,
            class_id,
            details: spec.details.clone(),
        };
        *self.host.borrow_mut() = Some(h.clone());
        Ok(h)
    }

    /// Takes `h` as this host's registration without asking the database
    /// (`hugetune run`'s start-up cache, whose registration `plan_generation`
    /// confirms): no description, no look-up.
    pub fn adopt_host(&self, h: Host) {
        *self.host.borrow_mut() = Some(h);
    }

    /// What a cached plan for `program_id` is checked against, in one indexed
    /// query: the program's generation (moved by every write to its profiles
    /// and directives, schema version 5) and whether machine `machine_id` is
    /// still this host with class `class_id`. None when the program is gone.
    pub fn plan_generation(
        &self,
        program_id: i64,
        machine_id: i64,
        class_id: Option<i64>,
    ) -> Result<Option<(i64, bool)>> {
        let r = self.conn.borrow_mut().query_opt(
            "SELECT p.generation, (SELECT count(*) FROM machines m WHERE m.id = ?2 AND m.fingerprint = ?3
                 AND m.class_id IS NOT DISTINCT FROM ?4)
             FROM programs p WHERE p.id = ?1",
            &[
                program_id.into(),
                machine_id.into(),
                self.host_id.as_str().into(),
                class_id.into(),
            ],
        )?;
        r.map(|r| Ok((r.int(0)?, r.int(1)? == 1))).transpose()
    }

    /// A program's generation (schema version 5): moved by every write to its
    /// profiles and directives. None when there is no such program.
    pub fn program_generation(&self, program_id: i64) -> Result<Option<i64>> {
        self.conn
            .borrow_mut()
            .query_opt(
                "SELECT generation FROM programs WHERE id = ?1",
                &[program_id.into()],
            )?
            .map(|r| r.int(0))
            .transpose()
    }

    /// This host, registered on first use through the host source; None when
    /// it has neither registered nor a source (tests, tools).
    pub fn host(&self) -> Result<Option<Host>> {
        if let Some(h) = self.host.borrow().clone() {
            return Ok(Some(h));
        }
        let Some(source) = &self.host_source else {
            return Ok(None);
        };
        let spec = source().context("describing this host for the database")?;
        self.register_host(&spec).map(Some)
    }

    /// The class of this host, if known.
    pub fn class_id(&self) -> Result<Option<i64>> {
        Ok(self.host()?.and_then(|h| h.class_id))
    }

    /// A class's one-line summary.
    pub fn class_summary(&self, class_id: i64) -> Result<Option<String>> {
        self.conn
            .borrow_mut()
            .query_opt(
                "SELECT summary FROM machine_classes WHERE id = ?1",
                &[class_id.into()],
            )?
            .map(|r| r.text(0))
            .transpose()
    }

    pub fn upsert_machine(
        &self,
        fingerprint: &str,
        hostname: &str,
        cpu: &str,
        kernel: &str,
        details: &serde_json::Value,
    ) -> Result<i64> {
        Ok(self
            .tx(|c| upsert_machine_in(c, fingerprint, hostname, cpu, kernel, details))?
            .0)
    }

    // ------------------------------------------------------------- programs

    /// The program of a build (`build_id`), or of a path when it has no build-id;
    /// created if new.
    pub fn upsert_program(&self, path: &str, build_id: Option<&str>) -> Result<i64> {
        let bid = build_id.unwrap_or("");
        // Most calls find it: a read, no write lock (every `hugetune run` asks).
        if let Some(id) = self.find_program(path, build_id)? {
            return Ok(id);
        }
        self.tx(|c| {
            c.exec(
                "INSERT INTO programs (path, build_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                &[path.into(), bid.into()],
            )?;
            find_program_in(c, path, bid)?.context("a program just stored is not there")
        })
    }

    /// A program's id by build-id (or path, without one), without creating it.
    pub fn find_program(&self, path: &str, build_id: Option<&str>) -> Result<Option<i64>> {
        find_program_in(&mut self.conn.borrow_mut(), path, build_id.unwrap_or(""))
    }

    // ------------------------------------------------------------- profiles

    /// Stores a profile and its directives atomically. Its class is its machine's.
    pub fn insert_profile(
        &mut self,
        program_id: i64,
        machine_id: Option<i64>,
        args: &[String],
        bundle: Option<&Path>,
        summary: &serde_json::Value,
        directives: &[NewDirective],
    ) -> Result<i64> {
        self.store_profile(&NewProfile {
            program_id,
            machine_id,
            args,
            bundle,
            summary,
            directives,
            origin_id: None,
        })
    }

    /// `insert_profile`, with an origin (a re-analysis for another class). On
    /// PostgreSQL an original profile's bundle file is kept in the store as
    /// well (up to `BUNDLE_MAX`, in pieces), for hosts of other classes that do not have
    /// the file; a profile stored without it (killed in between, too large)
    /// is still whole.
    pub fn store_profile(&self, p: &NewProfile) -> Result<i64> {
        let id = self.store_profile_rows(p)?;
        if let (Engine::Postgres, None, Some(file)) = (self.engine(), p.origin_id, p.bundle) {
            if file.is_file() {
                self.put_bundle(id, file, BUNDLE_MAX)?;
            }
        }
        Ok(id)
    }

    fn store_profile_rows(&self, p: &NewProfile) -> Result<i64> {
        let bundle = p.bundle.map(|b| b.to_string_lossy().into_owned());
        let args_text = serde_json::to_string(p.args)?;
        let summary_text = p.summary.to_string();
        let signature = input_signature(p.args);
        self.tx(|c| {
            let inserted = c.query_opt(
                    "INSERT INTO profiles (program_id, machine_id, args, bundle, summary, input_signature, uid, origin_id,
                         class_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, (SELECT class_id FROM machines WHERE id = ?2))
                     ON CONFLICT DO NOTHING RETURNING id",
                    &[
                        p.program_id.into(),
                        p.machine_id.into(),
                        args_text.as_str().into(),
                        bundle.clone().into(),
                        summary_text.as_str().into(),
                        signature.as_str().into(),
                        uid(),
                        p.origin_id.into(),
                    ],
                )?;
            let Some(pid) = inserted else {
                // Another host of the class re-analyzed the same profile first:
                // its analysis is this one.
                let origin = p.origin_id.context("a profile conflicts with one already stored")?;
                return c
                    .query_one(
                        "SELECT id FROM profiles WHERE origin_id = ?1
                         AND class_id = (SELECT class_id FROM machines WHERE id = ?2)",
                        &[origin.into(), p.machine_id.into()],
                        "the class's re-analysis",
                    )?
                    .int(0);
            };
            let pid = pid.int(0)?;
            for d in p.directives {
                let did = c
                    .query_one(
                        "INSERT INTO directives (profile_id, mapping, assignments, base, saving_ns, pmb, predicted_speedup,
                             hugetlb_pages, thp_pages, details, confidence, validations, lost)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING id",
                        &[
                            pid.into(),
                            d.mapping.as_str().into(),
                            d.assignments.to_string().into(),
                            d.base.into(),
                            d.saving_ns.into(),
                            d.pmb.into(),
                            d.predicted_speedup.into(),
                            d.hugetlb_pages.into(),
                            d.thp_pages.into(),
                            d.details.to_string().into(),
                            d.confidence.clamp(0.0, 1.0).into(),
                            d.validations.into(),
                            d.lost.into(),
                        ],
                        "a new directive",
                    )?
                    .int(0)?;
                carry_state(c, did, d)?;
            }
            Ok(pid)
        })
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
        let rows = self.conn.borrow_mut().query(
            "SELECT id, mapping, assignments, base, saving_ns, pmb, predicted_speedup, hugetlb_pages, thp_pages,
                    details, confidence, validations, lost
             FROM directives WHERE profile_id = ?1 ORDER BY saving_ns DESC, id",
            &[profile_id.into()],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let id = r.int(0)?;
            let corrupt =
                |what: &str| format!("directive {id}'s {what} in the database are corrupt");
            out.push((
                id,
                NewDirective {
                    mapping: r.text(1)?,
                    assignments: serde_json::from_str(&r.text(2)?)
                        .with_context(|| corrupt("assignments"))?,
                    base: r.bool(3)?,
                    saving_ns: r.real(4)?,
                    pmb: r.real(5)?,
                    predicted_speedup: r.real(6)?,
                    hugetlb_pages: r.int(7)?.max(0) as u64,
                    thp_pages: r.int(8)?.max(0) as u64,
                    details: serde_json::from_str(&r.text(9)?)
                        .with_context(|| corrupt("details"))?,
                    confidence: r.real(10)?,
                    validations: r.int(11)?.max(0) as u64,
                    lost: r.bool(12)?,
                },
            ));
        }
        Ok(out)
    }

    // ----------------------------------------------------------------- runs

    pub fn insert_run(&self, r: &NewRun) -> Result<i64> {
        let machine = match r.machine_id {
            Some(m) => Some(m),
            None => self.host()?.map(|h| h.machine_id),
        };
        self.conn
            .borrow_mut()
            .query_one(
                "INSERT INTO runs (program_id, profile_id, machine_id, args, plan, baseline_s, optimized_s, speedup,
                     huge_bytes_backed, verdict, details, mapping, uid)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING id",
                &[
                    r.program_id.into(),
                    r.profile_id.into(),
                    machine.into(),
                    serde_json::to_string(&r.args)?.into(),
                    r.plan.to_string().into(),
                    serde_json::to_string(&r.baseline_s)?.into(),
                    serde_json::to_string(&r.optimized_s)?.into(),
                    r.speedup.filter(|s| s.is_finite()).into(),
                    r.huge_bytes_backed.into(),
                    r.verdict.as_str().into(),
                    r.details.to_string().into(),
                    r.mapping.as_str().into(),
                    uid(),
                ],
                "a new run",
            )?
            .int(0)
    }

    // -------------------------------------------------------------- look-up

    fn stored_profile(r: &Row) -> Result<StoredProfile> {
        let id = r.int(0)?;
        Ok(StoredProfile {
            id,
            args: json(&r.text(1)?, &format!("profile {id}: arguments"))?,
            summary: json(&r.text(2)?, &format!("profile {id}: summary"))?,
            same_input: r.bool(3)?,
            class_id: r.opt_int(4)?,
            bundle: r.opt_text(5)?,
        })
    }

    /// Where the plan for running `args` comes from: the newest analysis for this
    /// host's class (or stored before classes) taken with the same input if there
    /// is one, else the newest of any input (a training input serves a reference
    /// input, seed 001 §5.3.3); failing those, another class's profile to analyze
    /// again. A host of no known class sees every profile, as before classes.
    pub fn plan_source(&self, program_id: i64, args: &[String]) -> Result<PlanSource> {
        let class = self.class_id()?;
        let sig = input_signature(args);
        let mut c = self.conn.borrow_mut();
        const COLUMNS: &str = "id, args, summary, input_signature = ?2, class_id, bundle";
        let own = match class {
            Some(class) => c.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM profiles WHERE program_id = ?1 AND (class_id = ?3 OR class_id IS NULL)
                     ORDER BY input_signature = ?2 DESC, class_id IS NULL, id DESC LIMIT 1"
                ),
                &[program_id.into(), sig.as_str().into(), class.into()],
            )?,
            None => c.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM profiles WHERE program_id = ?1
                     ORDER BY input_signature = ?2 DESC, id DESC LIMIT 1"
                ),
                &[program_id.into(), sig.as_str().into()],
            )?,
        };
        if let Some(r) = own {
            return Ok(PlanSource::Class(Db::stored_profile(&r)?));
        }
        if class.is_none() {
            return Ok(PlanSource::None);
        }
        // Only other classes' analyses: the original profiles (not re-analyses)
        // first, since their bundles were taken, not copied.
        let foreign = c.query_opt(
            &format!(
                "SELECT {COLUMNS} FROM profiles WHERE program_id = ?1 AND bundle IS NOT NULL
                 ORDER BY input_signature = ?2 DESC, origin_id IS NOT NULL, id DESC LIMIT 1"
            ),
            &[program_id.into(), sig.as_str().into()],
        )?;
        match foreign {
            Some(r) => Ok(PlanSource::Foreign(Db::stored_profile(&r)?)),
            None => Ok(PlanSource::None),
        }
    }

    /// The profile to plan a run of `args` with, for this host's class (see
    /// `plan_source`); None when only other classes have one.
    pub fn profile_for_input(
        &self,
        program_id: i64,
        args: &[String],
    ) -> Result<Option<StoredProfile>> {
        match self.plan_source(program_id, args)? {
            PlanSource::Class(p) => Ok(Some(p)),
            _ => Ok(None),
        }
    }

    /// Where a profile's plan for `mapping` came from and who validated it.
    pub fn provenance(&self, profile_id: i64, mapping: Option<&str>) -> Result<Provenance> {
        let mut c = self.conn.borrow_mut();
        let r = c
            .query_opt(
                "SELECT p.origin_id, k.summary, m.fingerprint FROM profiles p
                 LEFT JOIN machine_classes k ON k.id = p.class_id
                 LEFT JOIN machines m ON m.id = p.machine_id WHERE p.id = ?1",
                &[profile_id.into()],
            )?
            .with_context(|| format!("no profile with id {profile_id}"))?;
        let mut p = Provenance {
            profile_id,
            origin_profile_id: r.opt_int(0)?,
            class: r.opt_text(1)?,
            analyzed_on: r.opt_text(2)?,
            validated_by: vec![],
            confidence: None,
            spread: None,
        };
        if let Some(mapping) = mapping {
            let d = c.query_opt(
                "SELECT id, confidence FROM directives WHERE profile_id = ?1 AND mapping = ?2 ORDER BY id LIMIT 1",
                &[profile_id.into(), mapping.into()],
            )?;
            if let Some(d) = d {
                p.validated_by = fold_validations(&mut c, d.int(0)?)?;
                p.confidence = Some(d.real(1)?);
                p.spread = spread(&p.validated_by);
            }
        }
        Ok(p)
    }

    /// A directive's validations per host.
    pub fn directive_hosts(&self, directive_id: i64) -> Result<Vec<HostValidations>> {
        fold_validations(&mut self.conn.borrow_mut(), directive_id)
    }

    // -------------------------------------------------------------- bundles

    /// Keeps the bundle file of profile `profile_id` in the database, so that a
    /// host without the file can analyze the profile again for its class
    /// (fleet stores: the CLI stores bundles only on PostgreSQL, where the
    /// file is on another host). Bundles over `max_bytes` are not kept.
    /// Storing it again changes nothing.
    pub fn put_bundle(&self, profile_id: i64, file: &Path, max_bytes: u64) -> Result<Kept> {
        self.put_bundle_in_chunks(profile_id, file, max_bytes, BUNDLE_CHUNK)
    }

    /// `put_bundle` with pieces of `chunk` bytes: one transaction (a bundle is
    /// whole or absent, also when the writer is killed), the file read one
    /// piece at a time. A file that changes size while read is refused.
    pub fn put_bundle_in_chunks(
        &self,
        profile_id: i64,
        file: &Path,
        max_bytes: u64,
        chunk: usize,
    ) -> Result<Kept> {
        use std::io::Read;
        if chunk == 0 {
            bail!("a bundle's pieces must hold at least one byte");
        }
        let uid = self.profile_uid(profile_id)?;
        if self
            .conn
            .borrow_mut()
            .query_opt(
                "SELECT 1 FROM bundles WHERE profile_uid = ?1",
                &[uid.as_str().into()],
            )?
            .is_some()
        {
            return Ok(Kept::Already);
        }
        let len = std::fs::metadata(file)
            .with_context(|| format!("reading {}", file.display()))?
            .len();
        if len > max_bytes {
            return Ok(Kept::TooLarge(len));
        }
        self.tx(|c| {
            // The header row first: a second writer of the same bundle waits on
            // it, then skips (its insert changes nothing).
            let n = c.exec(
                "INSERT INTO bundles (profile_uid, size, data) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                &[uid.as_str().into(), len.into(), Val::Blob(Vec::new())],
            )?;
            if n == 0 {
                return Ok(Kept::Already);
            }
            let mut f =
                std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
            let (mut seq, mut total) = (0i64, 0u64);
            let mut buf = vec![0u8; chunk];
            loop {
                let mut filled = 0;
                while filled < chunk {
                    let k = f
                        .read(&mut buf[filled..])
                        .with_context(|| format!("reading {}", file.display()))?;
                    if k == 0 {
                        break;
                    }
                    filled += k;
                }
                if filled == 0 {
                    break;
                }
                total += filled as u64;
                if total > len {
                    break;
                }
                c.exec(
                    "INSERT INTO bundle_chunks (profile_uid, seq, data) VALUES (?1, ?2, ?3)",
                    &[
                        uid.as_str().into(),
                        seq.into(),
                        Val::Blob(buf[..filled].to_vec()),
                    ],
                )?;
                seq += 1;
            }
            if total != len {
                bail!(
                    "{} changed size while it was stored ({len} bytes, then {total}): not kept",
                    file.display()
                );
            }
            Ok(Kept::Stored)
        })
    }

    /// The bundle kept for profile `profile_id` (or for the profile it
    /// re-analyzed), if the database has it.
    pub fn bundle_bytes(&self, profile_id: i64) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.bundle_to(profile_id, &mut out)?.then_some(out))
    }

    /// Writes the bundle kept for profile `profile_id` (or for the profile it
    /// re-analyzed) to `out`, one piece at a time; false when the database has
    /// none. A bundle whose pieces do not add up to its size is an error.
    pub fn bundle_to(&self, profile_id: i64, out: &mut dyn std::io::Write) -> Result<bool> {
        let mut c = self.conn.borrow_mut();
        let Some(row) = c.query_opt(
            "SELECT b.profile_uid, b.size, length(b.data) FROM profiles p
             JOIN profiles o ON o.id = coalesce(p.origin_id, p.id)
             JOIN bundles b ON b.profile_uid IN (p.uid, o.uid) WHERE p.id = ?1 LIMIT 1",
            &[profile_id.into()],
        )?
        else {
            return Ok(false);
        };
        let (uid, size, inline) = (row.text(0)?, row.int(1)?, row.int(2)?);
        let written = if inline > 0 || size == 0 {
            // A whole bundle, as version 4 stored it.
            let b = c
                .query_one(
                    "SELECT data FROM bundles WHERE profile_uid = ?1",
                    &[uid.as_str().into()],
                    "a stored bundle",
                )?
                .blob(0)?;
            out.write_all(&b).context("writing the stored bundle")?;
            b.len() as i64
        } else {
            let mut n = 0i64;
            for seq in 0.. {
                let Some(r) = c.query_opt(
                    "SELECT data FROM bundle_chunks WHERE profile_uid = ?1 AND seq = ?2",
                    &[uid.as_str().into(), Val::Int(seq)],
                )?
                else {
                    break;
                };
                let b = r.blob(0)?;
                out.write_all(&b).context("writing the stored bundle")?;
                n += b.len() as i64;
            }
            n
        };
        if written != size {
            bail!(
                "the bundle the database keeps for profile {profile_id} is incomplete ({written} of {size} bytes)"
            );
        }
        Ok(true)
    }

    fn profile_uid(&self, profile_id: i64) -> Result<String> {
        self.conn
            .borrow_mut()
            .query_opt(
                "SELECT uid FROM profiles WHERE id = ?1",
                &[profile_id.into()],
            )?
            .with_context(|| format!("no profile with id {profile_id}"))?
            .text(0)
    }

    // ---------------------------------------------------------- validations

    /// Records a validation of a directive by this host: `agreement` (0..=1) is
    /// how well the measured gain matched the predicted one. Per host, the
    /// confidence moves halfway to it (a loss: 0); the directive's confidence
    /// is the mean over hosts, and a host whose latest validation lost bars the
    /// directive (`lost`) until that host measures it again without a loss.
    /// Returns the new confidence.
    pub fn record_validation(
        &self,
        profile_id: i64,
        mapping: &str,
        agreement: f64,
        lost: bool,
    ) -> Result<f64> {
        self.record_validation_as(profile_id, mapping, agreement, lost, false)
    }

    /// Records a deliberate revalidation of a barred directive by this host
    /// (`hugetune validate --revalidate`): as `record_validation`, and when it
    /// measured no loss the bar is lifted for every host of the class (their
    /// losses are superseded, their confidences kept). A loss keeps it barred.
    pub fn record_revalidation(
        &self,
        profile_id: i64,
        mapping: &str,
        agreement: f64,
        lost: bool,
    ) -> Result<f64> {
        self.record_validation_as(profile_id, mapping, agreement, lost, true)
    }

    fn record_validation_as(
        &self,
        profile_id: i64,
        mapping: &str,
        agreement: f64,
        lost: bool,
        lifts: bool,
    ) -> Result<f64> {
        let a = if agreement.is_finite() {
            agreement.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let machine = self.host()?.map(|h| h.machine_id);
        self.tx(|c| {
            // The program's row lock first (see `lock_program`), then the
            // directive's: validations of one directive by many hosts at once
            // are serialized, none lost.
            lock_program(c, "SELECT program_id FROM profiles WHERE id = ?1", profile_id)?;
            let d = c.query_opt(
                "UPDATE directives SET validations = validations + 1
                 WHERE id = (SELECT id FROM directives WHERE profile_id = ?1 AND mapping = ?2 ORDER BY id LIMIT 1)
                 RETURNING id",
                &[profile_id.into(), mapping.into()],
            )?;
            let Some(d) = d else {
                bail!("profile {profile_id} has no directive for mapping '{mapping}'");
            };
            let did = d.int(0)?;
            c.exec(
                "INSERT INTO validations (uid, directive_id, machine_id, agreement, lost, lifts)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                &[uid(), did.into(), machine.into(), a.into(), lost.into(), lifts.into()],
            )?;
            refresh_directive(c, did)
        })
    }

    /// Mappings of the program barred for this host's class: a validation of
    /// them lost on some host and was not measured again there (any class when
    /// the host's is unknown).
    pub fn lost_mappings(&self, program_id: i64) -> Result<Vec<String>> {
        let class = self.class_id()?;
        let mut c = self.conn.borrow_mut();
        let rows = match class {
            Some(class) => c.query(
                "SELECT DISTINCT d.mapping FROM directives d JOIN profiles p ON p.id = d.profile_id
                 WHERE p.program_id = ?1 AND d.lost AND (p.class_id = ?2 OR p.class_id IS NULL) ORDER BY 1",
                &[program_id.into(), class.into()],
            )?,
            None => c.query(
                "SELECT DISTINCT d.mapping FROM directives d JOIN profiles p ON p.id = d.profile_id
                 WHERE p.program_id = ?1 AND d.lost ORDER BY 1",
                &[program_id.into()],
            )?,
        };
        rows.iter().map(|r| r.text(0)).collect()
    }

    // --------------------------------------------------------------- remove

    /// The bundle files of the profiles that removing `kind` `id` removes (a
    /// profile's own, or every profile of a program), that no other profile
    /// names.
    pub fn bundles_removed_with(&self, kind: &str, id: i64) -> Result<Vec<PathBuf>> {
        let (sql, others) = match kind {
            "profile" => (
                "SELECT bundle FROM profiles WHERE id = ?1 AND bundle IS NOT NULL",
                "SELECT count(*) FROM profiles WHERE bundle = ?1 AND id <> ?2",
            ),
            "program" => (
                "SELECT bundle FROM profiles WHERE program_id = ?1 AND bundle IS NOT NULL",
                "SELECT count(*) FROM profiles WHERE bundle = ?1 AND program_id <> ?2",
            ),
            _ => return Ok(Vec::new()),
        };
        let mut c = self.conn.borrow_mut();
        let bundles = c.query(sql, &[id.into()])?;
        let mut out = Vec::new();
        for b in bundles {
            let b = b.text(0)?;
            let n = c
                .query_one(others, &[b.as_str().into(), id.into()], "a count")?
                .int(0)?;
            if n == 0 && !out.contains(&PathBuf::from(&b)) {
                out.push(PathBuf::from(b));
            }
        }
        Ok(out)
    }

    /// Removes one entry; a program or profile takes what hangs off it along.
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
        // Cascades remove many rows: one transaction, with the kept bundles.
        let bundles = match kind {
            "program" => Some("(SELECT uid FROM profiles WHERE program_id = ?1)"),
            "profile" => Some("(SELECT uid FROM profiles WHERE id = ?1)"),
            _ => None,
        };
        let n = self.tx(|c| {
            if kind == "profile" {
                // Its directives go with it: the program's row lock first.
                lock_program(c, "SELECT program_id FROM profiles WHERE id = ?1", id)?;
            }
            if let Some(uids) = bundles {
                for table in ["bundle_chunks", "bundles"] {
                    c.exec(
                        &format!("DELETE FROM {table} WHERE profile_uid IN {uids}"),
                        &[id.into()],
                    )?;
                }
            }
            c.exec(sql, &[id.into()])
        })?;
        if n == 0 {
            bail!("no {kind} with id {id}");
        }
        Ok(())
    }

    /// The newest profile of a program, with its arguments and summary.
    pub fn latest_profile(
        &self,
        program_id: i64,
    ) -> Result<Option<(i64, Vec<String>, serde_json::Value)>> {
        let row = self.conn.borrow_mut().query_opt(
            "SELECT id, args, summary FROM profiles WHERE program_id = ?1 ORDER BY id DESC LIMIT 1",
            &[program_id.into()],
        )?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some((
            r.int(0)?,
            json(&r.text(1)?, "profile arguments")?,
            json(&r.text(2)?, "profile summary")?,
        )))
    }

    // --------------------------------------------------------- calibrations

    /// Stores a machine's measured costs (`hugetune calibrate`'s result, as JSON).
    pub fn insert_calibration(&self, machine_id: i64, data: &serde_json::Value) -> Result<i64> {
        self.conn
            .borrow_mut()
            .query_one(
                "INSERT INTO calibrations (machine_id, data, uid) VALUES (?1, ?2, ?3) RETURNING id",
                &[machine_id.into(), data.to_string().into(), uid()],
                "a new calibration",
            )?
            .int(0)
    }

    /// The newest calibration of a machine, else the newest of another host of
    /// its class (the same hardware and kernel line: the same costs), as stored.
    pub fn latest_calibration(&self, machine_id: i64) -> Result<Option<serde_json::Value>> {
        let row = self.conn.borrow_mut().query_opt(
            "SELECT c.id, c.data FROM calibrations c JOIN machines m ON m.id = c.machine_id
             WHERE c.machine_id = ?1
                OR m.class_id = (SELECT class_id FROM machines WHERE id = ?1)
             ORDER BY c.machine_id = ?1 DESC, c.id DESC LIMIT 1",
            &[machine_id.into()],
        )?;
        let Some(r) = row else { return Ok(None) };
        let id = r.int(0)?;
        Ok(Some(serde_json::from_str(&r.text(1)?).with_context(
            || format!("calibration {id} in the database is corrupt (not JSON)"),
        )?))
    }

    // ---------------------------------------------------------------- views

    pub fn list(&self) -> Result<Vec<Listing>> {
        let rows = self.conn.borrow_mut().query(
            "SELECT 'profile', p.id, p.created, pr.path, p.args, NULL, NULL
                 FROM profiles p JOIN programs pr ON pr.id = p.program_id
             UNION ALL
             SELECT 'run', r.id, r.created, pr.path, r.args, r.verdict, r.speedup
                 FROM runs r JOIN programs pr ON pr.id = r.program_id
             UNION ALL
             SELECT 'calibration', c.id, c.created, m.hostname, m.cpu, m.kernel, NULL
                 FROM calibrations c JOIN machines m ON m.id = c.machine_id
             ORDER BY 3, 2",
            &[],
        )?;
        rows.iter()
            .map(|r| {
                let table = r.text(0)?;
                let mut what = format!("{} {}", r.text(3)?, r.text(4)?);
                if let Some(v) = r.opt_text(5)? {
                    if table == "run" {
                        what = format!("{what} -> {v}");
                        if let Some(s) = r.opt_real(6)? {
                            what = format!("{what} ({s:.2}x)");
                        }
                    } else {
                        what = format!("{what} {v}");
                    }
                }
                Ok(Listing {
                    table,
                    id: r.int(1)?,
                    created: r.text(2)?,
                    what,
                })
            })
            .collect()
    }

    /// Everything stored about a profile, a run or a calibration, as JSON.
    pub fn show(&self, table: &str, id: i64) -> Result<serde_json::Value> {
        use serde_json::{json as j, Value};
        let parse = |text: Option<String>, what: &str| -> Result<Value> {
            match text {
                Some(t) => json(&t, &format!("{table} {id}'s {what}")),
                None => Ok(Value::Null),
            }
        };
        let sql = match table {
            "profile" => {
                "SELECT p.id, p.program_id, p.args, p.bundle, p.created, p.summary, k.summary, p.origin_id, m.fingerprint
                 FROM profiles p LEFT JOIN machine_classes k ON k.id = p.class_id
                 LEFT JOIN machines m ON m.id = p.machine_id WHERE p.id = ?1"
            }
            "run" => {
                "SELECT r.id, r.program_id, r.profile_id, r.args, r.plan, r.baseline_s, r.optimized_s, r.speedup,
                        r.huge_bytes_backed, r.verdict, r.details, r.created, m.fingerprint
                 FROM runs r LEFT JOIN machines m ON m.id = r.machine_id WHERE r.id = ?1"
            }
            "calibration" => {
                "SELECT c.id, c.machine_id, c.created, c.data, m.fingerprint
                 FROM calibrations c JOIN machines m ON m.id = c.machine_id WHERE c.id = ?1"
            }
            other => bail!("unknown entry kind '{other}' (expected profile, run or calibration)"),
        };
        let row = self.conn.borrow_mut().query_opt(sql, &[id.into()])?;
        let Some(r) = row else {
            bail!("no {table} with id {id}")
        };
        Ok(match table {
            "profile" => {
                let mut directives = Vec::new();
                for (did, d) in self.directives_by_id(id)? {
                    let mut v = serde_json::to_value(&d)?;
                    v["hosts"] = serde_json::to_value(self.directive_hosts(did)?)?;
                    directives.push(v);
                }
                j!({
                    "id": r.int(0)?, "program_id": r.int(1)?, "args": parse(r.opt_text(2)?, "arguments")?,
                    "bundle": r.opt_text(3)?, "created": r.text(4)?, "summary": parse(r.opt_text(5)?, "summary")?,
                    "class": r.opt_text(6)?, "origin_id": r.opt_int(7)?, "host": r.opt_text(8)?,
                    "directives": directives,
                })
            }
            "run" => j!({
                "id": r.int(0)?, "program_id": r.int(1)?, "profile_id": r.opt_int(2)?,
                "args": parse(r.opt_text(3)?, "arguments")?, "plan": parse(r.opt_text(4)?, "plan")?,
                "baseline_s": parse(r.opt_text(5)?, "baseline times")?,
                "optimized_s": parse(r.opt_text(6)?, "optimized times")?,
                "speedup": r.opt_real(7)?, "huge_bytes_backed": r.int(8)?, "verdict": r.text(9)?,
                "details": parse(r.opt_text(10)?, "details")?, "created": r.text(11)?, "host": r.opt_text(12)?,
            }),
            _ => j!({
                "id": r.int(0)?, "machine_id": r.int(1)?, "created": r.text(2)?,
                "data": parse(r.opt_text(3)?, "data")?, "host": r.opt_text(4)?,
            }),
        })
    }
}

/// SQLite's busy handler: while another process holds the write lock, retry
/// every 0.5-1.5 ms (jittered per process), for up to about 30 s. SQLite's own
/// timeout backs off to 100 ms between tries, and a process that writes in a
/// loop then starves every other writer: its gaps between transactions are far
/// shorter than that.
fn busy_wait(attempt: i32) -> bool {
    const ATTEMPTS: i32 = 30_000;
    if attempt >= ATTEMPTS {
        return false;
    }
    let jitter =
        (u64::from(std::process::id()) ^ (attempt as u64).wrapping_mul(0x9e37_79b9)) % 1000;
    std::thread::sleep(std::time::Duration::from_micros(500 + jitter));
    true
}

/// (min, max) of the hosts' confidences; None without validations.
fn spread(hosts: &[HostValidations]) -> Option<(f64, f64)> {
    let lo = hosts.iter().map(|h| h.confidence).reduce(f64::min)?;
    let hi = hosts.iter().map(|h| h.confidence).reduce(f64::max)?;
    Some((lo, hi))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::engine_tests;
    use serde_json::json;

    #[test]
    fn tls_settings_are_taken_out_of_the_url() {
        let (rest, t) = TlsSettings::from_url(
            "postgresql://u@db.example:5432/h?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(rest, "postgresql://u@db.example:5432/h?application_name=x");
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        let (rest, t) = TlsSettings::from_url("postgresql://u@h/d?sslmode=disable").unwrap();
        assert_eq!(
            (rest.as_str(), t.mode),
            ("postgresql://u@h/d", SslMode::Disable)
        );
        let (_, t) = TlsSettings::from_url("postgresql://u@h/d").unwrap();
        assert_eq!(t.mode, SslMode::Prefer);
        let e = TlsSettings::from_url("postgresql://u@h/d?sslmode=always").unwrap_err();
        assert!(e.to_string().contains("verify-full"), "{e}");
        // A password stays hidden with TLS settings in the URL.
        let shown = hide_password(Path::new("postgresql://u:pw@h/d?sslmode=require"));
        assert!(
            !shown.to_string_lossy().contains("pw"),
            "{}",
            shown.display()
        );
        let e = Db::connect("postgresql://u@h/d?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
            .err()
            .unwrap();
        assert!(
            format!("{e:#}").contains("sslrootcert /nonexistent/ca.pem"),
            "{e:#}"
        );
    }

    pub(crate) fn directive(name: &str, saving: f64) -> NewDirective {
        NewDirective {
            mapping: name.into(),
            assignments: json!([["heap-large", "hugetlb-2m"]]),
            base: true,
            saving_ns: saving,
            pmb: 100.0,
            predicted_speedup: 1.4,
            hugetlb_pages: 512,
            thp_pages: 0,
            details: json!({}),
            confidence: 1.0,
            validations: 0,
            lost: false,
        }
    }

    /// A machine description as `hugetune machine` stores it; `l1` entries in
    /// its first TLB level make the class.
    pub(crate) fn machine(l1: u64) -> serde_json::Value {
        json!({
            "hostname": "h", "kernel": "6.1.0-18-amd64",
            "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "brand": "Xeon", "hypervisor": null},
            "tlb": {"geometry": {"levels": [{"name": "L1 DTLB", "arrays": [{"sizes": ["4k"], "entries": l1, "ways": 4}]}],
                                 "source": "test"}},
            "pools": [{"page_kb": 2048}], "mthp": [],
        })
    }

    /// `db` as host `id` of the class `l1` makes.
    pub(crate) fn as_host(db: &mut Db, id: &str, l1: u64) -> Host {
        db.set_host_id(id).unwrap();
        db.register_host(&HostSpec {
            hostname: id.into(),
            cpu: "Xeon".into(),
            kernel: "6.1.0".into(),
            details: machine(l1),
        })
        .unwrap()
    }

    impl Db {
        /// A profile with nothing in it.
        fn insert_profile_for_test(&self, program_id: i64) -> i64 {
            self.store_profile(&NewProfile {
                program_id,
                machine_id: None,
                args: &[],
                bundle: None,
                summary: &json!({}),
                directives: &[],
                origin_id: None,
            })
            .unwrap()
        }
    }

    fn run_of(program_id: i64, profile_id: Option<i64>) -> NewRun {
        NewRun {
            program_id,
            mapping: "a".into(),
            profile_id,
            machine_id: None,
            args: vec!["x".into()],
            plan: json!({"heap-large": "hugetlb-2m"}),
            baseline_s: vec![1.0, 1.1],
            optimized_s: vec![0.7, 0.72],
            speedup: Some(1.45),
            huge_bytes_backed: 1 << 30,
            verdict: "gain".into(),
            details: json!({}),
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
        // A directory that does not exist is an error, not created.
        let e = Db::open(&d.path().join("sub/h.db")).err().unwrap();
        assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
        assert!(!d.path().join("sub").exists());
    }

    #[test]
    fn urls_are_told_from_files_and_passwords_kept_out_of_messages() {
        assert!(is_url("postgresql://u@h/db") && is_url("postgres://h/db"));
        assert!(!is_url("/var/lib/h.db") && !is_url("postgresql.db"));
        assert_eq!(
            redact("postgresql://fleet:s3cret@db.example:5432/ht?sslmode=disable"),
            "postgresql://fleet:***@db.example:5432/ht?sslmode=disable"
        );
        assert_eq!(redact("postgres://fleet@db/ht"), "postgres://fleet@db/ht");
        assert_eq!(
            hide_password(Path::new("postgresql://fleet:s3cret@db:5432/ht")),
            PathBuf::from("postgresql://fleet@db:5432/ht")
        );
        assert_eq!(
            hide_password(Path::new("/a/b.db")),
            PathBuf::from("/a/b.db")
        );
        assert!(Db::exists(Path::new("postgresql://nowhere/x")));
        let e = format!(
            "{:#}",
            Db::connect("postgresql://u:pw@/x?port=notaport")
                .err()
                .unwrap()
        );
        assert!(
            e.contains("not a PostgreSQL URL") && !e.contains("pw"),
            "{e}"
        );
        // Nothing listens there: an error naming the server, not a hang.
        let e = format!(
            "{:#}",
            Db::connect("postgresql://u:pw@127.0.0.1:1/x?connect_timeout=2")
                .err()
                .unwrap()
        );
        assert!(
            e.contains("connecting to postgresql://u:***@127.0.0.1:1/x"),
            "{e}"
        );
    }

    engine_tests! {
        fn every_write_to_a_programs_plans_moves_its_generation(fresh) {
            let mut db = fresh();
            let h = as_host(&mut db, "h1", 64);
            let p = db.upsert_program("/bin/g", Some("g1")).unwrap();
            let other = db.upsert_program("/bin/o", Some("o1")).unwrap();
            let g = |db: &Db, id| db.program_generation(id).unwrap().unwrap();
            let (g0, o0) = (g(&db, p), g(&db, other));
            let prof = db
                .insert_profile(p, Some(h.machine_id), &["g".into()], None, &json!({}),
                    &[directive("a", 1.0), directive("b", 2.0)])
                .unwrap();
            let g1 = g(&db, p);
            assert!(g1 > g0);
            // A validation (from any host) moves it; one of another program not.
            db.record_validation(prof, "a", 0.5, true).unwrap();
            let g2 = g(&db, p);
            assert!(g2 > g1);
            assert_eq!(g(&db, other), o0);
            // The check `run`'s start-up cache makes: generation and registration.
            assert_eq!(db.plan_generation(p, h.machine_id, h.class_id).unwrap(), Some((g2, true)));
            assert_eq!(db.plan_generation(p, h.machine_id, Some(-1)).unwrap(), Some((g2, false)));
            // An import that adds a validation, and a removal, move it too.
            let doc = db.export().unwrap();
            let mut b = fresh();
            as_host(&mut b, "h2", 64);
            b.import(&doc).unwrap();
            let bp = b.find_program("/bin/g", Some("g1")).unwrap().unwrap();
            let bprof = b.plan_source(bp, &["g".into()]).unwrap();
            let PlanSource::Class(bprof) = bprof else { panic!("{bprof:?}") };
            let before = g(&b, bp);
            b.record_validation(bprof.id, "b", 1.0, false).unwrap();
            let after = g(&b, bp);
            assert!(after > before);
            b.remove("profile", bprof.id).unwrap();
            assert!(g(&b, bp) > after);
            assert_eq!(db.plan_generation(999_999, h.machine_id, h.class_id).unwrap(), None);
        }

        fn a_revalidation_without_loss_lifts_the_bar_for_every_host(fresh) {
            let mut db = fresh();
            let a = as_host(&mut db, "host-a", 64);
            let p = db.upsert_program("/bin/r", Some("r1")).unwrap();
            let prof = db
                .insert_profile(p, Some(a.machine_id), &["r".into()], None, &json!({}),
                    &[directive("m", 1.0)])
                .unwrap();
            db.record_validation(prof, "m", 0.8, false).unwrap();
            as_host(&mut db, "host-b", 64);
            db.record_validation(prof, "m", 0.0, true).unwrap();
            assert_eq!(db.lost_mappings(p).unwrap(), ["m"]);
            // An ordinary validation by a third host does not lift B's bar.
            as_host(&mut db, "host-c", 64);
            db.record_validation(prof, "m", 1.0, false).unwrap();
            assert_eq!(db.lost_mappings(p).unwrap(), ["m"]);
            // A revalidation that lost keeps it barred.
            db.record_revalidation(prof, "m", 0.0, true).unwrap();
            assert_eq!(db.lost_mappings(p).unwrap(), ["m"]);
            // One that measured no loss lifts it, for every host.
            db.record_revalidation(prof, "m", 0.9, false).unwrap();
            assert!(db.lost_mappings(p).unwrap().is_empty());
            let d = &db.directives(prof).unwrap()[0];
            assert!(!d.lost);
            assert_eq!(d.validations, 5);
            // The hosts' confidences stay what they measured.
            let hosts = db.directive_hosts(db.directives_by_id(prof).unwrap()[0].0).unwrap();
            assert_eq!(hosts.len(), 3);
            assert!(hosts.iter().all(|h| !h.lost));
            assert_eq!(hosts[1].confidence, 0.0);
            // It survives an export and import (the `lifts` column travels).
            let mut other = fresh();
            other.import(&db.export().unwrap()).unwrap();
            let op = other.find_program("/bin/r", Some("r1")).unwrap().unwrap();
            as_host(&mut other, "host-a", 64);
            assert!(other.lost_mappings(op).unwrap().is_empty());
            // A later loss anywhere bars it again.
            as_host(&mut db, "host-b", 64);
            db.record_validation(prof, "m", 0.0, true).unwrap();
            assert_eq!(db.lost_mappings(p).unwrap(), ["m"]);
        }

        fn bundles_are_kept_in_pieces_of_any_number(fresh) {
            let db = fresh();
            let dir = tempfile::tempdir().unwrap();
            let p = db.upsert_program("/bin/c", Some("c1")).unwrap();
            // 10 000 bytes in pieces of 999: eleven rows, the last one short.
            let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let file = dir.path().join("b.htb");
            std::fs::write(&file, &bytes).unwrap();
            let prof = db.insert_profile_for_test(p);
            assert_eq!(db.put_bundle_in_chunks(prof, &file, 1 << 20, 999).unwrap(), Kept::Stored);
            assert_eq!(db.put_bundle_in_chunks(prof, &file, 1 << 20, 999).unwrap(), Kept::Already);
            let rows = db.query_sql("SELECT count(*) FROM bundle_chunks", &[]).unwrap()[0].int(0).unwrap();
            assert_eq!(rows, 11);
            let mut out = Vec::new();
            assert!(db.bundle_to(prof, &mut out).unwrap());
            assert_eq!(out, bytes);
            // Exactly a multiple of the piece: no empty last row.
            let exact = dir.path().join("e.htb");
            std::fs::write(&exact, &bytes[..9_990]).unwrap();
            let prof2 = db.insert_profile_for_test(p);
            db.put_bundle_in_chunks(prof2, &exact, 1 << 20, 999).unwrap();
            assert_eq!(db.bundle_bytes(prof2).unwrap().unwrap(), &bytes[..9_990]);
            // A missing piece is an error, not a shorter bundle.
            db.execute_sql("DELETE FROM bundle_chunks WHERE seq = 3", &[]).unwrap();
            let e = db.bundle_bytes(prof).unwrap_err().to_string();
            assert!(e.contains("incomplete"), "{e}");
            // Removing the profile removes its pieces.
            db.remove("profile", prof2).unwrap();
            db.remove("profile", prof).unwrap();
            let rows = db.query_sql("SELECT count(*) FROM bundle_chunks", &[]).unwrap()[0].int(0).unwrap();
            assert_eq!(rows, 0);
            assert!(db.put_bundle_in_chunks(prof2, &file, 1 << 20, 0).is_err());
        }

        fn store_and_read_back(fresh) {
            let mut db = fresh();
            assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
            let m = db
                .upsert_machine("fp", "host", "cpu", "6.18", &json!({"x": 1}))
                .unwrap();
            assert_eq!(
                db.upsert_machine("fp", "host", "cpu", "6.18", &json!({"x": 2})).unwrap(),
                m
            );
            let p = db.upsert_program("/bin/x", Some("abcd")).unwrap();
            assert_eq!(db.upsert_program("/bin/x", Some("abcd")).unwrap(), p);
            assert_ne!(db.upsert_program("/bin/x", None).unwrap(), p);
            // A program is its build: a copy elsewhere is the same program.
            assert_eq!(db.upsert_program("/opt/copy/x", Some("abcd")).unwrap(), p);
            assert_eq!(db.find_program("/elsewhere", Some("abcd")).unwrap(), Some(p));
            let args = vec!["x".to_string(), "--size".into(), "1G".into()];
            let prof = db
                .insert_profile(
                    p,
                    Some(m),
                    &args,
                    None,
                    &json!({"refs": 5}),
                    &[directive("a", 1.0), directive("b", 5.0)],
                )
                .unwrap();
            let ds = db.directives(prof).unwrap();
            assert_eq!(
                ds.iter().map(|d| d.mapping.as_str()).collect::<Vec<_>>(),
                vec!["b", "a"]
            );
            assert_eq!(ds[0], directive("b", 5.0));
            let (id, a, s) = db.latest_profile(p).unwrap().unwrap();
            assert_eq!((id, a, s["refs"].as_u64()), (prof, args.clone(), Some(5)));
            let mut r = run_of(p, Some(prof));
            r.machine_id = Some(m);
            r.args = args;
            let run = db.insert_run(&r).unwrap();
            let l = db.list().unwrap();
            assert_eq!(l.len(), 2);
            assert!(l[1].what.contains("gain (1.45x)"), "{:?}", l[1]);
            assert!(l[0].what.starts_with("/bin/x [\"x\""), "{:?}", l[0]);
            let shown = db.show("run", run).unwrap();
            assert_eq!(shown["speedup"].as_f64(), Some(1.45));
            assert_eq!(shown["host"], "fp");
            assert_eq!(shown["baseline_s"], json!([1.0, 1.1]));
            assert_eq!(
                db.show("profile", prof).unwrap()["directives"].as_array().unwrap().len(),
                2
            );
            assert!(db.show("bogus", 1).is_err());
            assert!(db
                .show("run", 999)
                .unwrap_err()
                .to_string()
                .contains("no run with id 999"));
            // A corrupt row is an error naming it, not a panic.
            db.execute_sql("UPDATE runs SET plan = '{oops' WHERE id = ?1", &[run.into()])
                .unwrap();
            let e = format!("{:#}", db.show("run", run).unwrap_err());
            assert!(e.contains(&format!("run {run}'s plan")), "{e}");
        }

        fn calibrations_per_machine_and_class(fresh) {
            let db = fresh();
            let a = db.upsert_machine("a", "host-a", "cpu", "6.18", &json!({})).unwrap();
            let b = db.upsert_machine("b", "host-b", "cpu", "6.18", &json!({})).unwrap();
            assert_eq!(db.latest_calibration(a).unwrap(), None);
            let first = db
                .insert_calibration(a, &json!({"l2_hit_ns": [2.0, 2.0, 2.0]}))
                .unwrap();
            let second = db
                .insert_calibration(a, &json!({"l2_hit_ns": [3.0, 2.5, 2.5]}))
                .unwrap();
            assert!(second > first);
            assert_eq!(
                db.latest_calibration(a).unwrap().unwrap()["l2_hit_ns"][0].as_f64(),
                Some(3.0)
            );
            // b has no class: nothing to borrow.
            assert_eq!(db.latest_calibration(b).unwrap(), None);
            assert!(db.insert_calibration(999, &json!({})).is_err());
            let l = db.list().unwrap();
            assert_eq!(l.len(), 2);
            assert!(l
                .iter()
                .all(|e| e.table == "calibration" && e.what.contains("host-a")));
            assert_eq!(
                db.show("calibration", second).unwrap()["data"]["l2_hit_ns"][1].as_f64(),
                Some(2.5)
            );
            // Hosts of one class share their calibrations, their own first.
            let c1 = db.upsert_machine("c1", "c1", "cpu", "6.1", &machine(64)).unwrap();
            let c2 = db.upsert_machine("c2", "c2", "cpu", "6.1", &machine(64)).unwrap();
            let other = db.upsert_machine("d", "d", "cpu", "6.1", &machine(32)).unwrap();
            db.insert_calibration(c1, &json!({"of": "c1"})).unwrap();
            assert_eq!(db.latest_calibration(c2).unwrap().unwrap()["of"], "c1");
            assert_eq!(db.latest_calibration(other).unwrap(), None);
            db.insert_calibration(c2, &json!({"of": "c2"})).unwrap();
            db.insert_calibration(c1, &json!({"of": "c1 again"})).unwrap();
            assert_eq!(db.latest_calibration(c2).unwrap().unwrap()["of"], "c2");
            // A corrupt row gives an error naming it, not a panic.
            db.execute_sql(
                "UPDATE calibrations SET data = '{oops' WHERE id = ?1",
                &[second.into()],
            )
            .unwrap();
            let e = db.latest_calibration(a).unwrap_err();
            assert!(
                format!("{e:#}").contains(&format!("calibration {second}")),
                "{e:#}"
            );
        }

        fn the_same_input_is_preferred_and_any_input_serves(fresh) {
            let mut db = fresh();
            let p = db.upsert_program("/bin/w", None).unwrap();
            let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
            let train = db
                .insert_profile(p, None, &s(&["w", "small"]), None, &json!({}), &[])
                .unwrap();
            let reference = db
                .insert_profile(p, None, &s(&["w", "large"]), None, &json!({}), &[])
                .unwrap();
            let get = |args: &[&str]| db.profile_for_input(p, &s(args)).unwrap().unwrap();
            assert_eq!(
                (get(&["w", "small"]).id, get(&["w", "small"]).same_input),
                (train, true)
            );
            assert_eq!(
                (get(&["/path/to/w", "large"]).id, get(&["w", "large"]).same_input),
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

        fn validations_move_confidence_and_losses_bar_until_revalidated(fresh) {
            let mut db = fresh();
            let p = db.upsert_program("/bin/w", None).unwrap();
            let args = vec!["w".to_string()];
            let first = db
                .insert_profile(p, None, &args, None, &json!({}),
                    &[directive("a", 1.0), directive("b", 2.0)])
                .unwrap();
            assert_eq!(db.record_validation(first, "a", 0.0, false).unwrap(), 0.5);
            assert_eq!(db.record_validation(first, "a", 1.0, false).unwrap(), 0.75);
            assert_eq!(db.record_validation(first, "a", f64::NAN, false).unwrap(), 0.375);
            assert!(db.lost_mappings(p).unwrap().is_empty());
            assert_eq!(db.record_validation(first, "b", 1.0, true).unwrap(), 0.0);
            // A newer profile's directive of the same mapping is lost for the program too.
            db.insert_profile(p, None, &args, None, &json!({}), &[directive("b", 2.0)])
                .unwrap();
            assert_eq!(db.lost_mappings(p).unwrap(), vec!["b".to_string()]);
            let ds = db.directives(first).unwrap();
            assert!(ds.iter().any(|d| d.mapping == "b" && d.lost && d.validations == 1));
            // Revalidated without a loss (by the same, here unnamed, host): no longer barred.
            assert_eq!(db.record_validation(first, "b", 1.0, false).unwrap(), 0.5);
            assert!(db.lost_mappings(p).unwrap().is_empty());
            assert!(db.record_validation(first, "zzz", 1.0, false).is_err());
        }

        fn hosts_of_a_class_combine_their_validations(fresh) {
            let mut db = fresh();
            let a = as_host(&mut db, "host-a", 64);
            let p = db.upsert_program("/bin/w", Some("b1")).unwrap();
            let prof = db
                .insert_profile(p, Some(a.machine_id), &["w".into()], None, &json!({}),
                    &[directive("m", 1.0)])
                .unwrap();
            assert_eq!(db.record_validation(prof, "m", 0.5, false).unwrap(), 0.75);
            let b = as_host(&mut db, "host-b", 64);
            assert_eq!(a.class_id, b.class_id);
            // Mean over hosts: a at 0.75, b at 1.0 -> 0.875 after b agrees fully.
            assert_eq!(db.record_validation(prof, "m", 1.0, false).unwrap(), 0.875);
            let pv = db.provenance(prof, Some("m")).unwrap();
            assert_eq!(pv.analyzed_on.as_deref(), Some("host-a"));
            assert_eq!(pv.spread, Some((0.75, 1.0)));
            assert_eq!(
                pv.validated_by.iter().map(|h| h.host.clone().unwrap()).collect::<Vec<_>>(),
                ["host-a", "host-b"]
            );
            assert!(pv.class.unwrap().contains("GenuineIntel 6/85"));
            // A loss on b bars the plan for the class, a's gains notwithstanding...
            assert_eq!(db.record_validation(prof, "m", 1.0, true).unwrap(), 0.375);
            as_host(&mut db, "host-a", 64);
            db.record_validation(prof, "m", 1.0, false).unwrap();
            assert_eq!(db.lost_mappings(p).unwrap(), ["m"]);
            // ...for its class only: a host of another class is not barred by it.
            as_host(&mut db, "host-c", 32);
            assert!(db.lost_mappings(p).unwrap().is_empty());
            // ...until b measures it again without a loss.
            as_host(&mut db, "host-b", 64);
            db.record_validation(prof, "m", 0.8, false).unwrap();
            assert!(db.lost_mappings(p).unwrap().is_empty());
            let d = &db.directives(prof).unwrap()[0];
            assert_eq!((d.validations, d.lost), (5, false));
            let hosts = &db.show("profile", prof).unwrap()["directives"][0]["hosts"];
            assert_eq!(hosts.as_array().unwrap().len(), 2, "{hosts}");
        }

        fn a_host_sees_its_class_and_reanalyzes_for_a_new_one(fresh) {
            let mut db = fresh();
            let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
            let a = as_host(&mut db, "host-a", 64);
            let p = db.upsert_program("/bin/w", Some("b1")).unwrap();
            let prof = db
                .insert_profile(p, Some(a.machine_id), &s(&["w", "x"]), Some(Path::new("/b/p.htb")),
                    &json!({}), &[directive("m", 1.0)])
                .unwrap();
            match db.plan_source(p, &s(&["w", "x"])).unwrap() {
                PlanSource::Class(sp) => assert_eq!((sp.id, sp.class_id), (prof, a.class_id)),
                other => panic!("{other:?}"),
            }
            // Another host of the class: the same profile, no profiling.
            as_host(&mut db, "host-b", 64);
            assert_eq!(db.profile_for_input(p, &s(&["w", "y"])).unwrap().unwrap().id, prof);
            // A host of another class: the profile to re-analyze, not its directives.
            let c = as_host(&mut db, "host-c", 32);
            assert_ne!(c.class_id, a.class_id);
            let foreign = match db.plan_source(p, &s(&["w", "x"])).unwrap() {
                PlanSource::Foreign(sp) => sp,
                other => panic!("{other:?}"),
            };
            assert_eq!((foreign.id, foreign.bundle.as_deref()), (prof, Some("/b/p.htb")));
            assert!(db.profile_for_input(p, &s(&["w", "x"])).unwrap().is_none());
            let again = db
                .store_profile(&NewProfile {
                    program_id: p,
                    machine_id: Some(c.machine_id),
                    args: &s(&["w", "x"]),
                    bundle: Some(Path::new("/b/p.htb")),
                    summary: &json!({}),
                    directives: &[directive("m", 2.0)],
                    origin_id: Some(prof),
                })
                .unwrap();
            match db.plan_source(p, &s(&["w", "x"])).unwrap() {
                PlanSource::Class(sp) => assert_eq!(sp.id, again),
                other => panic!("{other:?}"),
            }
            // Another host of that class re-analyzing at the same time gets that one.
            as_host(&mut db, "host-c2", 32);
            let twin = db
                .store_profile(&NewProfile {
                    program_id: p,
                    machine_id: Some(db.host().unwrap().unwrap().machine_id),
                    args: &s(&["w", "x"]),
                    bundle: Some(Path::new("/b/p.htb")),
                    summary: &json!({}),
                    directives: &[directive("m", 2.0)],
                    origin_id: Some(prof),
                })
                .unwrap();
            assert_eq!(twin, again);
            assert_eq!(db.directives(again).unwrap().len(), 1);
            let pv = db.provenance(again, None).unwrap();
            assert_eq!((pv.origin_profile_id, pv.analyzed_on.as_deref()), (Some(prof), Some("host-c")));
            // The first class still sees its own.
            as_host(&mut db, "host-a", 64);
            assert_eq!(db.profile_for_input(p, &s(&["w", "x"])).unwrap().unwrap().id, prof);
            // A program nobody profiled has no source at all.
            let q = db.upsert_program("/bin/q", None).unwrap();
            assert_eq!(db.plan_source(q, &s(&["q"])).unwrap(), PlanSource::None);
        }

        fn a_host_registers_once_and_adopts_its_older_row(fresh) {
            let mut db = fresh();
            let old = db.upsert_machine("h|Xeon|6.1.0", "h", "Xeon", "6.1.0", &json!({})).unwrap();
            db.insert_calibration(old, &json!({"mine": true})).unwrap();
            db.set_host_id("3d1219c7c4c5404aaa1f6d2a48adfda4").unwrap();
            let h = db.register_host(&HostSpec {
                hostname: "h".into(), cpu: "Xeon".into(), kernel: "6.1.0".into(), details: machine(64),
            }).unwrap();
            assert_eq!(h.machine_id, old, "the row stored before host ids is this host's");
            assert!(h.class_id.is_some());
            assert_eq!(db.latest_calibration(h.machine_id).unwrap().unwrap()["mine"], true);
            // A host source is asked only when a look-up needs the class, then once.
            let asked = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
            let counter = asked.clone();
            db.set_host_source(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(HostSpec { hostname: "h".into(), cpu: "Xeon".into(), kernel: "6.1.0".into(), details: machine(64) })
            });
            assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0);
            let p = db.upsert_program("/bin/w", None).unwrap();
            db.lost_mappings(p).unwrap();
            let r = db.insert_run(&run_of(p, None)).unwrap();
            assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
            assert_eq!(db.show("run", r).unwrap()["host"], "3d1219c7c4c5404aaa1f6d2a48adfda4");
            assert!(db.set_host_id("not a host id").is_err());
        }

        fn a_store_keeps_bundles_for_hosts_without_the_file(fresh) {
            let db = fresh();
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("p.htb");
            std::fs::write(&file, b"HTB bundle bytes").unwrap();
            let p = db.upsert_program("/bin/w", Some("b1")).unwrap();
            let prof = db
                .store_profile(&NewProfile {
                    program_id: p,
                    machine_id: None,
                    args: &["w".into()],
                    bundle: Some(&file),
                    summary: &json!({}),
                    directives: &[],
                    origin_id: None,
                })
                .unwrap();
            // PostgreSQL (a fleet store) keeps it on its own; SQLite when asked.
            let expected = if db.engine() == Engine::Postgres { Kept::Already } else { Kept::Stored };
            assert_eq!(db.put_bundle(prof, &file, BUNDLE_MAX).unwrap(), expected);
            assert_eq!(db.put_bundle(prof, &file, BUNDLE_MAX).unwrap(), Kept::Already);
            let again = db
                .store_profile(&NewProfile {
                    program_id: p,
                    machine_id: None,
                    args: &["w".into()],
                    bundle: Some(&file),
                    summary: &json!({}),
                    directives: &[],
                    origin_id: Some(prof),
                })
                .unwrap();
            std::fs::remove_file(&file).unwrap();
            assert_eq!(db.bundle_bytes(prof).unwrap().unwrap(), b"HTB bundle bytes");
            // A re-analysis finds its origin's.
            assert_eq!(db.bundle_bytes(again).unwrap().unwrap(), b"HTB bundle bytes");
            let big = dir.path().join("big.htb");
            std::fs::write(&big, vec![0u8; 100]).unwrap();
            let other = db.insert_profile_for_test(p);
            assert_eq!(db.put_bundle(other, &big, 99).unwrap(), Kept::TooLarge(100));
            assert_eq!(db.bundle_bytes(other).unwrap(), None);
            assert!(db.put_bundle(other, &dir.path().join("gone"), BUNDLE_MAX).is_err());
            // A bundle goes with its profile; none is exported.
            assert!(db.export().unwrap().get("bundles").is_none());
            db.remove("profile", prof).unwrap();
            let n = db.query_sql("SELECT count(*) FROM bundles", &[]).unwrap()[0].int(0).unwrap();
            assert_eq!(n, 0);
        }

        fn remove_takes_dependants_along(fresh) {
            let mut db = fresh();
            let p = db.upsert_program("/bin/w", None).unwrap();
            let prof = db
                .insert_profile(p, None, &["w".into()], Some(Path::new("/tmp/x.htb")), &json!({}),
                    &[directive("a", 1.0)])
                .unwrap();
            db.record_validation(prof, "a", 1.0, false).unwrap();
            db.insert_run(&run_of(p, Some(prof))).unwrap();
            assert!(db
                .remove("profile", 999)
                .unwrap_err()
                .to_string()
                .contains("no profile with id 999"));
            assert!(db.remove("table", 1).is_err());
            assert_eq!(db.bundles_removed_with("profile", prof).unwrap(), [PathBuf::from("/tmp/x.htb")]);
            db.remove("profile", prof).unwrap();
            assert!(db.directives(prof).unwrap().is_empty());
            let left = db.query_sql("SELECT count(*) FROM validations", &[]).unwrap();
            assert_eq!(left[0].int(0).unwrap(), 0);
            db.remove("program", p).unwrap();
            assert!(db.list().unwrap().is_empty());
        }
    }

    /// The same tables, the same columns in the same order, on both engines.
    #[test]
    fn both_engines_have_the_same_schema() {
        let lite = crate::testing::Fresh::new(false).db();
        let pg = crate::testing::Fresh::new(true).db();
        for t in schema::TABLES {
            let a = schema::columns(&mut lite.conn.borrow_mut(), t).unwrap();
            let b = schema::columns(&mut pg.conn.borrow_mut(), t).unwrap();
            assert!(!a.is_empty(), "{t}");
            assert_eq!(a, b, "table {t}");
        }
        assert_eq!(pg.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn postgres_refuses_another_programs_database_and_a_newer_schema() {
        let url = crate::pg_support::fresh_database();
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute("CREATE TABLE accounts (id INT)").unwrap();
        let e = format!("{:#}", Db::connect(&url).err().unwrap());
        assert!(e.contains("not hugetune's (accounts)"), "{e}");
        c.batch_execute("DROP TABLE accounts").unwrap();
        drop(Db::connect(&url).unwrap());
        // Opening again migrates nothing.
        drop(Db::connect(&url).unwrap());
        c.batch_execute("UPDATE hugetune_schema SET version = 99")
            .unwrap();
        let e = format!("{:#}", Db::connect(&url).err().unwrap());
        assert!(e.contains("newer"), "{e}");
    }

    #[test]
    fn postgres_hosts_migrating_at_once_create_the_schema_once() {
        let url = crate::pg_support::fresh_database();
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let url = url.clone();
                std::thread::spawn(move || Db::connect(&url).map(|db| db.schema_version().unwrap()))
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap().unwrap(), SCHEMA_VERSION);
        }
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
                for m in &schema::SQLITE[..from as usize] {
                    c.execute_batch(m.sql).unwrap();
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
            let m = db.upsert_machine("fp", "h", "c", "k", &json!({})).unwrap();
            assert_eq!(m, 1);
            db.insert_calibration(m, &json!({"x": 1})).unwrap();
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

    /// Version 3 -> 4 on a database the version-3 code made: machines get their
    /// class from their stored description (and their profiles with them), one
    /// build under two paths becomes one program, a validated directive keeps
    /// its state (a loss included), and every row gets a unique id.
    #[test]
    fn version_3_databases_get_classes_merged_programs_and_carried_validations() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.db");
        {
            let c = Connection::open(&p).unwrap();
            for m in &schema::SQLITE[..3] {
                c.execute_batch(m.sql).unwrap();
            }
            c.pragma_update(None, "user_version", 3).unwrap();
            c.execute(
                "INSERT INTO machines (fingerprint, hostname, cpu, kernel, details) VALUES ('h|Xeon|6.1.0', 'h', 'Xeon', '6.1.0', ?1)",
                [machine(64).to_string()],
            )
            .unwrap();
            c.execute_batch(
                "INSERT INTO machines (fingerprint, hostname, cpu, kernel, details) VALUES ('by-hand', 'x', 'y', 'z', '{}');
                 INSERT INTO programs (path, build_id) VALUES ('/bin/w', 'b1'), ('/opt/w', 'b1'), ('/bin/q', '');
                 INSERT INTO profiles (program_id, machine_id, args, summary, input_signature) VALUES (1, 1, '[\"w\"]', '{}', ''), (2, 1, '[\"w\"]', '{}', ''), (3, 2, '[\"q\"]', '{}', '');
                 INSERT INTO directives (profile_id, mapping, assignments, base, saving_ns, pmb, predicted_speedup, hugetlb_pages, thp_pages, details, confidence, validations, lost)
                     VALUES (1, 'a', '[]', 1, 5.0, 100.0, 1.2, 3, 0, '{}', 0.6, 2, 0), (2, 'b', '[]', 1, 5.0, 100.0, 1.2, 3, 0, '{}', 0.0, 1, 1);
                 INSERT INTO runs (program_id, profile_id, args, plan, baseline_s, optimized_s, huge_bytes_backed, verdict, details)
                     VALUES (2, 2, '[]', '{}', '[1.0]', '[0.9]', 0, 'gain', '{}');",
            )
            .unwrap();
        }
        let mut db = Db::open(&p).unwrap();
        let rows = |sql: &str| db.query_sql(sql, &[]).unwrap();
        assert_eq!(rows("SELECT count(*) FROM programs")[0].int(0).unwrap(), 2);
        assert_eq!(
            rows("SELECT count(DISTINCT program_id) FROM profiles WHERE program_id IN (1, 2)")[0]
                .int(0)
                .unwrap(),
            1
        );
        assert_eq!(rows("SELECT program_id FROM runs")[0].int(0).unwrap(), 1);
        let classes = rows("SELECT id FROM profiles WHERE class_id IS NOT NULL ORDER BY id");
        assert_eq!(
            classes.len(),
            2,
            "the by-hand machine's profile has no class"
        );
        assert_eq!(
            rows("SELECT count(*) FROM profiles WHERE uid IS NULL")[0]
                .int(0)
                .unwrap(),
            0
        );
        let d = db.directives(1).unwrap();
        assert_eq!(
            (d[0].confidence, d[0].validations, d[0].lost),
            (0.6, 2, false)
        );
        // The carried state moves on from where it was.
        assert_eq!(db.record_validation(1, "a", 1.0, false).unwrap(), 0.8);
        // The old loss still bars b (for the host's class, which the migration gave).
        let h = as_host(&mut db, "new-host-id", 64);
        assert_eq!(db.lost_mappings(1).unwrap(), ["b"]);
        assert_eq!(
            db.query_sql(
                "SELECT class_id FROM machines WHERE fingerprint = 'new-host-id'",
                &[]
            )
            .unwrap()[0]
                .opt_int(0)
                .unwrap(),
            h.class_id
        );
        drop(db);
        assert_eq!(
            Db::open(&p).unwrap().schema_version().unwrap(),
            SCHEMA_VERSION
        );
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
        let n = db.query_sql("SELECT count(*) FROM programs", &[]).unwrap();
        assert_eq!(n[0].int(0).unwrap(), 100);
    }
}
