//! `hugetune run`'s start-up cache for fleet stores (issue 20, item 6): per
//! host and user, one file per (store, host, program build, argument
//! signature) holding this host's registration (machine id, class, its
//! description, with a fingerprint of what the description depends on) and
//! the plan look-up's result (`Stored`) with the program's store generation
//! (`programs.generation`, moved by every write to its profiles and
//! directives). A start within the TTL of the entry's last confirmation uses
//! it without asking the store (the store is asked after the program started,
//! and the entry refreshed for the next start); later, one indexed query
//! (`Db::plan_generation`) confirms it before the start; a changed generation
//! or registration means the full look-up, whose result replaces the entry.
//!
//! Invariants: the store stays the truth: an entry is used unconfirmed for at
//! most the TTL after the store last confirmed it (a bar another host's loss
//! set reaches this host within the TTL); an entry is read only from a
//! regular file (no symlink) owned by this user and readable by nobody else,
//! in a directory of this user's that nobody else may write, in the exact
//! format and for the exact key asked for: anything else is refused (noted,
//! then replaced); entries are written whole (a temporary file renamed).

use super::{note, program_of, Stored};
use anyhow::{bail, Context, Result};
use hugetune_model::plan::ProgramTraits;
use hugetune_model::rank::{Prediction, Significance};
use hugetune_store::db::{input_signature, Db, Host};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long an entry serves unconfirmed after the store last confirmed it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The entry format; another is refused (and replaced).
const FORMAT: u32 = 1;

/// Entries larger than this are refused (a real one is tens of KiB).
const MAX_BYTES: u64 = 4 << 20;

/// What an entry is for: all of it must match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// The store (`--db`, its password taken out).
    pub store: String,
    pub host_id: String,
    /// The program's build-id, or its path when it has none.
    pub program: String,
    pub input: String,
    /// What this host's description (hence its class) depends on.
    pub host_fingerprint: String,
}

impl Key {
    pub fn new(store: &Path, host_id: &str, tlb: Option<&Path>, argv: &[OsString]) -> Result<Key> {
        let program = program_of(argv)?;
        Ok(Key {
            store: store.display().to_string(),
            host_id: host_id.to_string(),
            program: match &program.build_id {
                Some(b) if !b.is_empty() => format!("build-id:{b}"),
                _ => format!("path:{}", program.path),
            },
            input: input_signature(&super::strings(argv)),
            host_fingerprint: host_fingerprint(tlb),
        })
    }

    fn file_name(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        format!("{:016x}.json", fnv(text.as_bytes()))
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What this host's machine description, and so its class, depends on, read
/// in well under a millisecond: the boot (CPU, kernel and the hugetlb page
/// sizes cannot change without one), the kernel release, the host name, the
/// mTHP sizes enabled now, the `--tlb` file's contents, hugetune's version.
pub fn host_fingerprint(tlb: Option<&Path>) -> String {
    let mut text = String::new();
    let mut add = |name: &str, v: &str| {
        text.push_str(name);
        text.push('=');
        text.push_str(v.trim());
        text.push('\n');
    };
    add("version", env!("CARGO_PKG_VERSION"));
    for f in [
        "/proc/sys/kernel/random/boot_id",
        "/proc/sys/kernel/osrelease",
        "/proc/sys/kernel/hostname",
    ] {
        add(f, &std::fs::read_to_string(f).unwrap_or_default());
    }
    let mut mthp: Vec<String> = std::fs::read_dir("/sys/kernel/mm/transparent_hugepage")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("hugepages-"))
        .map(|e| {
            let enabled = std::fs::read_to_string(e.path().join("enabled")).unwrap_or_default();
            format!("{}:{}", e.file_name().to_string_lossy(), enabled.trim())
        })
        .collect();
    mthp.sort();
    add("mthp", &mthp.join(","));
    if let Some(t) = tlb {
        let bytes = std::fs::read(t).unwrap_or_default();
        add("tlb", &format!("{}:{:016x}", t.display(), fnv(&bytes)));
    }
    format!("{:016x}", fnv(text.as_bytes()))
}

/// The host as registered, with its description.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedHost {
    host: Host,
    details: serde_json::Value,
}

/// `Stored`, as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedPlan {
    program_id: i64,
    profile_id: i64,
    same_input: bool,
    predictions: Vec<Prediction>,
    significance: Significance,
    native_s: f64,
    threshold: u64,
    program: ProgramTraits,
    lost: Vec<String>,
    confidence: Vec<(String, f64)>,
    /// Entries written before these were kept read as none and the defaults.
    #[serde(default)]
    pool: Option<hugetune_model::pool::PoolProfile>,
    #[serde(default)]
    cost: hugetune_model::cost::CostModel,
}

impl CachedPlan {
    fn of(st: &Stored) -> CachedPlan {
        CachedPlan {
            program_id: st.program_id,
            profile_id: st.profile_id,
            same_input: st.same_input,
            predictions: st.predictions.clone(),
            significance: st.significance.clone(),
            native_s: st.native_s,
            threshold: st.threshold,
            program: st.program,
            lost: st.lost.clone(),
            confidence: st.confidence.clone(),
            pool: st.pool.clone(),
            cost: st.cost.clone(),
        }
    }

    fn stored(&self) -> Stored {
        Stored {
            program_id: self.program_id,
            profile_id: self.profile_id,
            same_input: self.same_input,
            predictions: self.predictions.clone(),
            significance: self.significance.clone(),
            native_s: self.native_s,
            threshold: self.threshold,
            program: self.program,
            lost: self.lost.clone(),
            confidence: self.confidence.clone(),
            pool: self.pool.clone(),
            cost: self.cost.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    format: u32,
    key: Key,
    /// When the store last confirmed it (seconds since the epoch).
    confirmed_unix_s: f64,
    generation: i64,
    host: CachedHost,
    plan: CachedPlan,
}

/// A usable entry, as read.
pub struct Cached {
    entry: Entry,
    path: PathBuf,
}

impl Cached {
    /// The plan it holds.
    pub fn stored(&self) -> Stored {
        self.entry.plan.stored()
    }

    /// Seconds since the store last confirmed it.
    pub fn age(&self) -> Duration {
        Duration::from_secs_f64((now_s() - self.entry.confirmed_unix_s).max(0.0))
    }

    /// This host's registration as the entry holds it.
    pub fn host(&self) -> Host {
        let mut h = self.entry.host.host.clone();
        h.details = self.entry.host.details.clone();
        h
    }

    /// One query: the program's generation and this host's registration are
    /// what the entry holds. Adopts the registration into `db` when they are
    /// (no description, no registration), and marks the entry confirmed now.
    pub fn confirm(&self, db: &Db) -> Result<bool> {
        let h = &self.entry.host.host;
        let ok = db.plan_generation(self.entry.plan.program_id, h.machine_id, h.class_id)?
            == Some((self.entry.generation, true));
        if ok {
            db.adopt_host(self.host());
            let mut e = self.entry.clone();
            e.confirmed_unix_s = now_s();
            write_entry(&self.path, &e)?;
        }
        Ok(ok)
    }
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The cache directory: `$HUGETUNE_START_CACHE`, else `~/.cache/hugetune/start`
/// (the temporary directory's `hugetune-<uid>/start` without a home);
/// created 0700, used only when it is this user's and nobody else may write it.
pub fn cache_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("HUGETUNE_START_CACHE").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => match dirs::cache_dir() {
            Some(c) => c.join("hugetune").join("start"),
            None => {
                // SAFETY: getuid has no preconditions.
                let uid = unsafe { libc::getuid() };
                std::env::temp_dir()
                    .join(format!("hugetune-{uid}"))
                    .join("start")
            }
        },
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating the start-up cache {}", dir.display()))?;
    let m = std::fs::symlink_metadata(&dir)
        .with_context(|| format!("checking the start-up cache {}", dir.display()))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !(m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0) {
        bail!(
            "the start-up cache {} is not a private directory of this user (a symlink, another owner, \
             or writable by others): refusing it",
            dir.display()
        );
    }
    Ok(dir)
}

/// The entry for `key`: None when there is none; a file that is not a valid
/// entry of this user for this key is refused with a note (and replaced by the
/// next look-up).
pub fn read(dir: &Path, key: &Key) -> Option<Cached> {
    let path = dir.join(key.file_name());
    match read_entry(&path, key) {
        Ok(e) => e.map(|entry| Cached { entry, path }),
        Err(e) => {
            note(format!(
                "ignoring the start-up cache entry {}: {e:#}",
                path.display()
            ));
            None
        }
    }
}

fn read_entry(path: &Path, key: &Key) -> Result<Option<Entry>> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("cannot open it (a symbolic link?)"),
    };
    let m = f.metadata()?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !m.is_file() {
        bail!("not a regular file");
    }
    if m.uid() != uid {
        bail!("owned by uid {}, not this user ({uid})", m.uid());
    }
    if m.mode() & 0o077 != 0 {
        bail!("mode {:o}: others may read or write it", m.mode() & 0o777);
    }
    if m.len() > MAX_BYTES {
        bail!("{} bytes: larger than any entry", m.len());
    }
    let mut text = String::new();
    f.read_to_string(&mut text).context("not text")?;
    let e: Entry = serde_json::from_str(&text).context("not an entry")?;
    if e.format != FORMAT {
        bail!("format {}, not {FORMAT}", e.format);
    }
    if e.key != *key {
        bail!("written for another store, host, program, input or machine description");
    }
    if !e.confirmed_unix_s.is_finite() {
        bail!("its time is not a number");
    }
    Ok(Some(e))
}

fn write_entry(path: &Path, e: &Entry) -> Result<()> {
    let dir = path.parent().context("an entry has a directory")?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    hugetune_host::journal::write_private_replacing(
        &tmp,
        path,
        serde_json::to_string(e)?.as_bytes(),
        false,
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// The full look-up (`stored_predictions`), its result written as the entry
/// for `key` when this host's class has a plan. The generation is read before
/// the look-up: a write in between makes the entry look older than it is
/// (confirmed again next time), never newer.
pub fn look_up(
    db: &Db,
    dir: Option<&Path>,
    key: &Key,
    argv: &[OsString],
) -> Result<Option<Stored>> {
    let program = program_of(argv)?;
    let before = match db.find_program(&program.path, program.build_id.as_deref())? {
        Some(id) => db.program_generation(id)?,
        None => None,
    };
    let Some(st) = super::stored_predictions(db, argv)? else {
        return Ok(None);
    };
    let generation = match before {
        Some(g) => g,
        // A program new to the store: its generation now (possibly past the
        // look-up: confirmed again next time, see above).
        None => return Ok(Some(st)),
    };
    if let (Some(dir), Some(host)) = (dir, db.host()?) {
        let e = Entry {
            format: FORMAT,
            key: key.clone(),
            confirmed_unix_s: now_s(),
            generation,
            host: CachedHost {
                details: host.details.clone(),
                host,
            },
            plan: CachedPlan::of(&st),
        };
        if let Err(err) = write_entry(&dir.join(key.file_name()), &e) {
            note(format!("the start-up cache was not written: {err:#}"));
        }
    }
    Ok(Some(st))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key() -> Key {
        Key {
            store: "postgresql://u@h/db".into(),
            host_id: "h1".into(),
            program: "build-id:abc".into(),
            input: "0".into(),
            host_fingerprint: "f".into(),
        }
    }

    fn entry(k: &Key) -> Entry {
        Entry {
            format: FORMAT,
            key: k.clone(),
            confirmed_unix_s: now_s(),
            generation: 3,
            host: CachedHost {
                host: Host {
                    host_id: "h1".into(),
                    machine_id: 1,
                    class_id: Some(2),
                    details: serde_json::Value::Null,
                },
                details: serde_json::json!({"cpu": "x"}),
            },
            plan: CachedPlan {
                program_id: 1,
                profile_id: 2,
                same_input: true,
                predictions: vec![],
                significance: Significance {
                    tlb_misses_per_s: 1.0,
                    faults_per_s: 1.0,
                    passes: true,
                    source: "model".into(),
                    walks_by_category: vec![],
                },
                native_s: 1.0,
                threshold: 4096,
                program: ProgramTraits::default(),
                lost: vec!["a".into()],
                confidence: vec![],
                pool: None,
                cost: Default::default(),
            },
        }
    }

    #[test]
    fn an_entry_is_read_back_for_its_key_only() {
        let d = tempfile::tempdir().unwrap();
        let k = key();
        write_entry(&d.path().join(k.file_name()), &entry(&k)).unwrap();
        let c = read(d.path(), &k).unwrap();
        assert_eq!(c.stored().lost, ["a"]);
        assert_eq!(c.host().details["cpu"], "x");
        assert!(c.age() < Duration::from_secs(5));
        let mode = std::fs::metadata(d.path().join(k.file_name()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Another class of host (its fingerprint), another file name: a miss.
        let mut other = k.clone();
        other.host_fingerprint = "g".into();
        assert!(read(d.path(), &other).is_none());
        // An entry planted under this key's name for another key: refused.
        std::fs::copy(
            d.path().join(k.file_name()),
            d.path().join(other.file_name()),
        )
        .unwrap();
        let e = read_entry(&d.path().join(other.file_name()), &other).unwrap_err();
        assert!(e.to_string().contains("another store"), "{e}");
    }

    #[test]
    fn corrupt_open_or_linked_entries_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let k = key();
        let p = d.path().join(k.file_name());
        std::fs::write(&p, b"{not json").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_entry(&p, &k).unwrap_err();
        assert!(format!("{e:#}").contains("not an entry"), "{e:#}");
        // Readable by others: refused whatever it holds.
        write_entry(&p, &entry(&k)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_entry(&p, &k).unwrap_err();
        assert!(e.to_string().contains("others may read"), "{e}");
        // A symbolic link to a valid entry: refused.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let real = d.path().join("real.json");
        std::fs::rename(&p, &real).unwrap();
        std::os::unix::fs::symlink(&real, &p).unwrap();
        assert!(read_entry(&p, &k).is_err());
        assert!(read(d.path(), &k).is_none());
        // Another format: refused.
        std::fs::remove_file(&p).unwrap();
        let mut e = entry(&k);
        e.format = FORMAT + 1;
        write_entry(&p, &e).unwrap();
        assert!(read_entry(&p, &k)
            .unwrap_err()
            .to_string()
            .contains("format"));
    }

    #[test]
    fn the_fingerprint_follows_the_tlb_file() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tlb.json");
        std::fs::write(&t, "{}").unwrap();
        let a = host_fingerprint(Some(&t));
        assert_eq!(a, host_fingerprint(Some(&t)));
        std::fs::write(&t, "{\"levels\": []}").unwrap();
        assert_ne!(a, host_fingerprint(Some(&t)));
        assert_ne!(a, host_fingerprint(None));
    }
}
