//! The journal of kernel changes (`/run/hugetune/journal`): an entry that says how
//! to undo a change is written and synced *before* the change is made, and removed
//! once the change is undone. A hugetune killed outright (`kill -9`, the OOM
//! killer, a crash that runs no destructor) leaves its entries behind; the next
//! hugetune that takes the kernel-state lock, and `hugetune restore`, undo what a
//! dead process left and say so.
//!
//! Invariants:
//! - An entry belongs to one process, named by its pid *and* its start time (a
//!   reused pid is another process): entries of a live process are never touched.
//! - Entries are untrusted on reading: only regular files owned by this user are
//!   read (never through a symlink), and an undo may only write under /sys or
//!   /proc/sys, remove a tracefs instance directory, or unmount a tracefs mount.
//!   Anything else is refused and reported, and the entry is left for a person.
//! - A process's entries are undone newest first, so two changes of one value
//!   end at the value before the first.
//! - Files are created with `O_EXCL | O_NOFOLLOW`, mode 0600, in a directory of
//!   mode 0700 that must be ours and not a symlink.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub const JOURNAL_DIR: &str = "/run/hugetune/journal";
const VERSION: u32 = 1;
static SEQ: AtomicU64 = AtomicU64::new(1);

/// How to undo one change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "kebab-case")]
pub enum Undo {
    /// Write `value` to the sysfs or procfs file `path`.
    Write { path: PathBuf, value: String },
    /// Remove the tracefs instance directory `path`.
    RemoveDir { path: PathBuf },
    /// Unmount the tracefs mounted at `path`.
    Unmount { path: PathBuf },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    version: u32,
    pid: u32,
    /// The process's start time (clock ticks after boot, /proc/PID/stat field 22).
    start: u64,
    seq: u64,
    /// What was changed, for the message that undoes it.
    what: String,
    /// Undone in this order.
    undo: Vec<Undo>,
}

/// A journal directory (the system's, or a test's).
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

/// An entry written for a change still in force; `done` once it is undone.
#[derive(Debug)]
pub struct Recorded {
    file: PathBuf,
}

impl Recorded {
    /// The change was undone: its entry goes.
    pub fn done(self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A process's start time, or `None` when it does not exist.
pub fn start_time(pid: u32) -> Option<u64> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &t[t.rfind(')')? + 1..];
    // After ')': state is field 3, so starttime (field 22) is the 20th here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn own_start() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| start_time(std::process::id()).unwrap_or(0))
}

fn alive(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

impl Journal {
    pub fn system() -> Journal {
        Journal::at(Path::new(JOURNAL_DIR))
    }

    pub fn at(dir: &Path) -> Journal {
        Journal {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory, created 0700 if missing; refused when it is a symlink or
    /// someone else's.
    fn ensure_dir(&self) -> Result<()> {
        if let Some(parent) = self.dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", self.dir.display())),
        }
        self.check_dir()
    }

    fn check_dir(&self) -> Result<()> {
        let m = std::fs::symlink_metadata(&self.dir)
            .with_context(|| format!("reading {}", self.dir.display()))?;
        if !m.is_dir() {
            bail!(
                "the kernel-change journal {} is not a directory (a symlink?)",
                self.dir.display()
            );
        }
        if m.uid() != euid() || m.mode() & 0o022 != 0 {
            bail!(
                "the kernel-change journal {} is owned by uid {} with mode {:o}: it must be ours and writable by us only",
                self.dir.display(),
                m.uid(),
                m.mode() & 0o7777
            );
        }
        Ok(())
    }

    /// Writes (and syncs) the entry for a change about to be made.
    pub fn record(&self, what: &str, undo: Vec<Undo>) -> Result<Recorded> {
        self.ensure_dir()?;
        let e = Entry {
            version: VERSION,
            pid: std::process::id(),
            start: own_start(),
            seq: SEQ.fetch_add(1, Ordering::SeqCst),
            what: what.to_string(),
            undo,
        };
        let name = format!("{}-{}-{:06}.json", e.pid, e.start, e.seq);
        let file = self.dir.join(&name);
        // Written under a dot name and renamed into place: another hugetune
        // reading the journal at that moment sees the whole entry or none
        // (it read an empty file and reported "not a journal entry" — found by
        // the suite, two tests changing kernel state at once).
        let tmp = self.dir.join(format!(".{name}.tmp"));
        write_private_replacing(&tmp, &file, &serde_json::to_vec(&e)?, true)
            .with_context(|| format!("writing {}", file.display()))?;
        // The entry's name must survive a crash too.
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(Recorded { file })
    }

    /// The entries, oldest process first and each process's newest change first;
    /// files that are not ours or not entries are reported.
    fn entries(&self) -> (Vec<(PathBuf, Entry)>, Vec<String>) {
        let mut out = Vec::new();
        let mut problems = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return (out, problems);
        };
        for de in rd.flatten() {
            // An entry being written (its change not made yet), or one whose
            // writer was killed before the rename (nor was its change made).
            if de.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let p = de.path();
            let read = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)
                .and_then(|f| {
                    let m = f.metadata()?;
                    if !m.is_file() || m.uid() != euid() {
                        return Err(std::io::Error::other("not a regular file of ours"));
                    }
                    std::io::read_to_string(f)
                });
            match read.map_err(|e| e.to_string()).and_then(|t| {
                serde_json::from_str::<Entry>(&t).map_err(|e| format!("not a journal entry: {e}"))
            }) {
                Ok(e) if e.version == VERSION => out.push((p, e)),
                Ok(e) => problems.push(format!(
                    "{}: journal entry version {} (this hugetune reads {VERSION}): left alone",
                    p.display(),
                    e.version
                )),
                Err(why) => problems.push(format!("{}: {why}: left alone", p.display())),
            }
        }
        out.sort_by(|a, b| {
            (a.1.start, a.1.pid, std::cmp::Reverse(a.1.seq)).cmp(&(
                b.1.start,
                b.1.pid,
                std::cmp::Reverse(b.1.seq),
            ))
        });
        (out, problems)
    }

    /// Undoes every change that a process no longer running left in force.
    pub fn recover(&self) -> Recovery {
        let mut r = Recovery::default();
        if self.check_dir().is_err() {
            if self.dir.exists() {
                r.problems.push(format!(
                    "the kernel-change journal {} is not ours or not a directory: nothing undone from it",
                    self.dir.display()
                ));
            }
            return r;
        }
        // Empty entries of dead processes: versions before the dot-name write
        // created the file, then wrote it; one killed in between left it empty,
        // and its change was never made (the entry comes first).
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for de in rd.flatten() {
                let p = de.path();
                let empty = std::fs::symlink_metadata(&p)
                    .is_ok_and(|m| m.is_file() && m.len() == 0 && m.uid() == euid());
                let name_owner = |n: &str| {
                    let mut f = n.strip_suffix(".json")?.splitn(3, '-');
                    Some((
                        f.next()?.parse::<u32>().ok()?,
                        f.next()?.parse::<u64>().ok()?,
                    ))
                };
                // A writer killed before its rename left its dot name: its
                // change was never made either; once it is gone, so is the file.
                let tmp_owner = de
                    .file_name()
                    .to_str()
                    .and_then(|n| name_owner(n.strip_prefix('.')?.strip_suffix(".tmp")?));
                let ours =
                    std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file() && m.uid() == euid());
                if let (true, Some((pid, start))) = (ours, tmp_owner) {
                    if !alive(pid, start) {
                        let _ = std::fs::remove_file(&p);
                    }
                    continue;
                }
                let owner = de.file_name().to_str().and_then(name_owner);
                if let (true, Some((pid, start))) = (empty, owner) {
                    if !alive(pid, start) && std::fs::remove_file(&p).is_ok() {
                        r.undone.push(format!(
                            "removed the empty journal entry {} of hugetune process {pid}, killed before it wrote it (its change was never made)",
                            p.display()
                        ));
                    }
                }
            }
        }
        let (entries, problems) = self.entries();
        r.problems.extend(problems);
        for (file, e) in entries {
            if alive(e.pid, e.start) {
                continue;
            }
            let mut ok = true;
            let mut done = Vec::new();
            for u in &e.undo {
                match undo(u) {
                    Ok(text) => done.push(text),
                    Err(why) => {
                        ok = false;
                        r.problems.push(format!(
                            "could not undo {} left by hugetune process {} (no longer running): {why:#}; the entry stays in {}",
                            e.what,
                            e.pid,
                            file.display()
                        ));
                    }
                }
            }
            if ok {
                let _ = std::fs::remove_file(&file);
                r.undone.push(format!(
                    "undid {} left by hugetune process {} that is no longer running: {}",
                    e.what,
                    e.pid,
                    done.join(", ")
                ));
            }
        }
        r
    }
}

/// What `Journal::recover` did, one line each.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Changes of dead processes undone.
    pub undone: Vec<String>,
    /// Entries refused or that could not be undone (they stay for a person),
    /// and files in the journal that are not entries.
    pub problems: Vec<String>,
}

impl Recovery {
    /// Every line, what was undone first.
    pub fn lines(&self) -> impl Iterator<Item = &String> {
        self.undone.iter().chain(&self.problems)
    }
}

/// Whether `path` is where a tracefs is mounted now.
fn tracefs_mounted_at(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 2 && Path::new(f[1]) == path && f[2] == "tracefs"
            })
        })
        .unwrap_or(false)
}

fn plain(path: &Path) -> bool {
    path.is_absolute()
        && path.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        })
}

/// Carries out one undo, checked against what an entry may ask; its description.
fn undo(u: &Undo) -> Result<String> {
    match u {
        Undo::Write { path, value } => {
            if !plain(path) || !(path.starts_with("/sys") || path.starts_with("/proc/sys")) {
                bail!(
                    "refusing to write {}: not a sysfs or procfs file",
                    path.display()
                );
            }
            if value.len() > 256 || value.contains('\0') {
                bail!("refusing to write an odd value to {}", path.display());
            }
            std::fs::write(path, value)
                .with_context(|| format!("writing {value} to {}", path.display()))?;
            Ok(format!("{} = {}", path.display(), value.trim()))
        }
        Undo::RemoveDir { path } => {
            let parent_is_instances = path
                .parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n == "instances");
            let in_tracefs = path
                .parent()
                .and_then(|p| p.parent())
                .is_some_and(tracefs_mounted_at);
            if !plain(path) || !parent_is_instances || !in_tracefs {
                bail!(
                    "refusing to remove {}: not a tracefs instance",
                    path.display()
                );
            }
            match std::fs::remove_dir(path) {
                Ok(()) => Ok(format!("removed {}", path.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Ok(format!("{} was already gone", path.display()))
                }
                Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
            }
        }
        Undo::Unmount { path } => {
            if !plain(path) {
                bail!("refusing to unmount {}", path.display());
            }
            if !tracefs_mounted_at(path) {
                return Ok(format!("{} was no longer mounted", path.display()));
            }
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
                .context("a path with a NUL byte")?;
            // SAFETY: umount2 with a valid C string.
            if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("unmounting {}", path.display()));
            }
            Ok(format!("unmounted {}", path.display()))
        }
    }
}

/// Writes `bytes` to `tmp` (created 0600, never through a symlink, never over an
/// existing file) and renames it to `dest`: readers see the whole file or none.
/// `sync`: on disk before the rename. `tmp` is removed on failure.
pub fn write_private_replacing(
    tmp: &Path,
    dest: &Path,
    bytes: &[u8],
    sync: bool,
) -> std::io::Result<()> {
    let r = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            if sync {
                f.sync_all()?;
            }
            std::fs::rename(tmp, dest)
        });
    if r.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that has exited (its pid and a start time nobody has).
    fn dead_process() -> (u32, u64) {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        (pid, u64::MAX - 1)
    }

    fn plant(j: &Journal, pid: u32, start: u64, seq: u64, undo: Vec<Undo>) -> PathBuf {
        j.ensure_dir().unwrap();
        let e = Entry {
            version: VERSION,
            pid,
            start,
            seq,
            what: format!("change {seq}"),
            undo,
        };
        let p = j.dir.join(format!("{pid}-{start}-{seq:06}.json"));
        std::fs::write(&p, serde_json::to_vec(&e).unwrap()).unwrap();
        p
    }

    #[test]
    fn an_entry_being_written_is_never_read_half() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::at(&d.path().join("journal"));
        j.ensure_dir().unwrap();
        // What a writer killed before its rename leaves: ignored, not
        // reported, and removed once its process is gone.
        let (gone, gone_start) = dead_process();
        let tmp = j.dir.join(format!(".{gone}-{gone_start}-000001.json.tmp"));
        std::fs::write(&tmp, b"{").unwrap();
        let live_tmp = j.dir.join(format!(
            ".{}-{}-999999.json.tmp",
            std::process::id(),
            own_start()
        ));
        std::fs::write(&live_tmp, b"").unwrap();
        // What an older version killed between create and write left: removed
        // by recovery when its process is gone, left alone while it runs.
        let (dead, start) = dead_process();
        let old = j.dir.join(format!("{dead}-{start}-000001.json"));
        std::fs::write(&old, b"").unwrap();
        let live = j.dir.join(format!(
            "{}-{}-000009.json",
            std::process::id(),
            own_start()
        ));
        std::fs::write(&live, b"").unwrap();
        let r = j.recover();
        assert!(!old.exists() && live.exists(), "{r:?}");
        assert!(!tmp.exists() && live_tmp.exists(), "{r:?}");
        assert!(
            r.undone
                .iter()
                .any(|l| l.contains("killed before it wrote it")),
            "{r:?}"
        );
        std::fs::remove_file(&live).unwrap();
        // Entries recorded while another thread reads the journal: every file it
        // finds is a whole entry.
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for i in 0..40 {
                    j.record(&format!("change {i}"), vec![]).unwrap();
                }
            });
            for _ in 0..2000 {
                let (_, problems) = j.entries();
                assert!(problems.is_empty(), "{problems:?}");
            }
        });
        let (entries, problems) = j.entries();
        assert_eq!(entries.len(), 40);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn start_times_name_processes() {
        let me = start_time(std::process::id()).unwrap();
        assert!(me > 0);
        assert_eq!(own_start(), me);
        assert!(alive(std::process::id(), me));
        assert!(
            !alive(std::process::id(), me + 1),
            "a reused pid is another process"
        );
        let (pid, start) = dead_process();
        assert!(!alive(pid, start));
    }

    #[test]
    fn entries_of_live_processes_stay_and_refused_undos_are_reported() {
        let d = tempfile::tempdir().unwrap();
        let j = Journal::at(&d.path().join("journal"));
        // Ours (alive): recorded and left alone.
        let mine = j
            .record(
                "a test change",
                vec![Undo::Write {
                    path: "/sys/nonexistent".into(),
                    value: "1".into(),
                }],
            )
            .unwrap();
        // A dead process asking for what no entry may do.
        let (pid, start) = dead_process();
        let target = d.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        let bad = plant(
            &j,
            pid,
            start,
            1,
            vec![Undo::Write {
                path: target.clone(),
                value: "owned".into(),
            }],
        );
        let said = j.recover();
        assert!(
            said.problems
                .iter()
                .any(|s| s.contains("refusing to write")),
            "{said:?}"
        );
        assert!(said.undone.is_empty(), "{said:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(bad.exists(), "a refused entry stays for a person");
        assert!(mine.file.exists());
        mine.done();
        // Garbage and symlinks are reported, never followed.
        std::fs::write(j.dir.join("junk.json"), "{").unwrap();
        std::os::unix::fs::symlink(&target, j.dir.join("link.json")).unwrap();
        let said = j.recover().problems;
        assert!(said.iter().any(|s| s.contains("junk.json")), "{said:?}");
        assert!(said.iter().any(|s| s.contains("link.json")), "{said:?}");
    }

    #[test]
    fn a_planted_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("elsewhere");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("journal");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let j = Journal::at(&link);
        let e = j.record("x", vec![]).unwrap_err();
        assert!(format!("{e:#}").contains("not a directory"), "{e:#}");
        assert!(std::fs::read_dir(&real).unwrap().next().is_none());
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let e = Journal::at(&open).record("x", vec![]).unwrap_err();
        assert!(format!("{e:#}").contains("writable by us only"), "{e:#}");
    }

    #[test]
    fn a_dead_processs_changes_are_undone_newest_first() {
        // Needs a file under /proc/sys to write: root only.
        if euid() != 0 {
            eprintln!("SKIPPED: needs root");
            return;
        }
        let _serial = crate::kernel_state::test_serial();
        let _lock = crate::kernel_state::lock_kernel_state().unwrap();
        // A harmless knob with a range of valid values, restored after the test.
        let knob = Path::new("/proc/sys/vm/stat_interval");
        let before = std::fs::read_to_string(knob).unwrap();
        let d = tempfile::tempdir().unwrap();
        let j = Journal::at(&d.path().join("journal"));
        let (pid, start) = dead_process();
        // Two changes: 1 → 2 (seq 1, undo to "1") then 2 → 3 (seq 2, undo to "2").
        let write = |v: &str| {
            vec![Undo::Write {
                path: knob.into(),
                value: v.into(),
            }]
        };
        plant(&j, pid, start, 1, write("1"));
        plant(&j, pid, start, 2, write("2"));
        std::fs::write(knob, "3").unwrap();
        let said = j.recover();
        assert!(said.problems.is_empty(), "{said:?}");
        let said = said.undone;
        let now = std::fs::read_to_string(knob).unwrap();
        std::fs::write(knob, &before).unwrap();
        assert_eq!(now.trim(), "1", "{said:?}");
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("change 2") && said[1].contains("change 1"));
        assert!(std::fs::read_dir(&j.dir).unwrap().next().is_none());
    }
}
