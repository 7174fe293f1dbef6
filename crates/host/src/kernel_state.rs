//! Changes to kernel state (hugetlb pools, THP modes, sysfs knobs, tracefs) are
//! always undone: on drop, on panic (unwinding runs drops) and on
//! SIGINT/SIGTERM/SIGHUP, which a watcher thread turns into "stop the children,
//! restore, exit"; and after a kill that runs none of that, through the journal
//! (`journal`): each change is journaled before it is made, and whoever next
//! takes the kernel-state lock undoes what a dead hugetune left.
//!
//! Every change is made under an advisory lock shared with the test suite and
//! held for as long as the change lasts, so two hugetune processes never change
//! pools at once: the second waits (and says so) until the first has restored,
//! and neither restores away nor takes the other's reservation.

pub use crate::journal::Undo;
use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

pub const LOCK_PATH: &str = "/run/lock/hugetune-kernel-state.lock";

type Restorer = Box<dyn FnMut() + Send>;
/// Restorers by id, each marked whether it puts back kernel state (the
/// interrupt says "kernel settings restored" only when one did) or only
/// cleans up after hugetune (a scratch directory).
static RESTORERS: Mutex<Vec<(u64, bool, Restorer)>> = Mutex::new(Vec::new());
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Set before the children are stopped: a child registered afterwards (spawned
/// while the interrupt was being handled) is stopped at once.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Children being started (between `begin_spawn` and `track_child`).
static SPAWNING: AtomicUsize = AtomicUsize::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static INSTALL: Once = Once::new();

fn restorers() -> std::sync::MutexGuard<'static, Vec<(u64, bool, Restorer)>> {
    RESTORERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Set by `forward_signals`: signals go to the tracked children, hugetune waits.
static FORWARD: AtomicBool = AtomicBool::new(false);
/// Set by `sigint_sets`: the next SIGINT sets this flag instead of interrupting.
static SIGINT_FLAG: Mutex<Option<std::sync::Arc<AtomicBool>>> = Mutex::new(None);

/// While the guard lives, the first SIGINT (Ctrl-C) sets `flag` instead of
/// interrupting hugetune: for work that Ctrl-C ends early and that still
/// finishes properly (`record -p` writes what it monitored). Further SIGINTs,
/// and every other signal, interrupt as usual.
pub fn sigint_sets(flag: std::sync::Arc<AtomicBool>) -> SigintGuard {
    install_signal_guard();
    *SIGINT_FLAG.lock().unwrap_or_else(|p| p.into_inner()) = Some(flag);
    SigintGuard(())
}

pub struct SigintGuard(());

impl Drop for SigintGuard {
    fn drop(&mut self) {
        *SIGINT_FLAG.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// For a wrapper that must behave as the program it runs (`hugetune run` under
/// a service manager): from now on SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1,
/// SIGUSR2 and SIGWINCH are passed to the running children, and hugetune goes
/// on waiting for them (their end decides its exit status). With no child
/// running, a signal interrupts hugetune as usual.
pub fn forward_signals() {
    install_signal_guard();
    FORWARD.store(true, Ordering::SeqCst);
}

/// Whether `sig`'s disposition is SIG_IGN now.
fn ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one
    // into `old`, a zeroed sigaction we own.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Start the watcher that restores kernel state when hugetune is interrupted.
pub fn install_signal_guard() {
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
        // A signal ignored when hugetune started stays ignored (`nohup`, a
        // background job of a script): caught here it would end hugetune, and
        // the programs it runs or becomes (`run --exec`) would no longer
        // inherit SIG_IGN.
        let wanted: Vec<i32> = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH]
            .into_iter()
            .filter(|&sig| !ignored(sig))
            .collect();
        let Ok(mut signals) = signal_hook::iterator::Signals::new(wanted) else {
            return;
        };
        std::thread::spawn(move || {
            for sig in signals.forever() {
                if FORWARD.load(Ordering::SeqCst) {
                    // A child just started may not be tracked yet (it can
                    // run, and be signalled, before its parent registers it).
                    let t0 = std::time::Instant::now();
                    while SPAWNING.load(Ordering::SeqCst) > 0
                        && t0.elapsed() < std::time::Duration::from_secs(1)
                    {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    let children = CHILDREN.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    if !children.is_empty() {
                        for pid in children {
                            // SAFETY: kill has no memory effects; the pid is our child.
                            unsafe { libc::kill(pid as i32, sig) };
                        }
                        continue;
                    }
                }
                if sig == SIGWINCH {
                    continue; // its default is to be ignored
                }
                if sig == SIGINT {
                    let flag = SIGINT_FLAG.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let Some(f) = flag {
                        f.store(true, Ordering::SeqCst);
                        continue;
                    }
                }
                INTERRUPTED.store(true, Ordering::SeqCst);
                // A child being started now is tracked (and stopped) before we go
                // on: none outlives us (at most a second's wait).
                let t0 = std::time::Instant::now();
                while SPAWNING.load(Ordering::SeqCst) > 0
                    && t0.elapsed() < std::time::Duration::from_secs(1)
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                for &pid in CHILDREN.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    // SAFETY: kill has no memory effects; the pid is our child.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                }
                let mut r = restorers();
                let kernel = r.iter().any(|(_, k, _)| *k);
                for (_, _, f) in r.iter_mut() {
                    f();
                }
                r.clear();
                if kernel {
                    eprintln!("hugetune: interrupted; kernel settings restored");
                }
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Runs its action once, when dropped or when hugetune is interrupted.
pub struct Restore {
    id: u64,
}

pub fn on_restore(f: impl FnMut() + Send + 'static) -> Restore {
    register(true, Box::new(f))
}

/// Like [`on_restore`] for clean-up that is not kernel state (files hugetune
/// made): an interrupt runs it too, without claiming to restore settings.
pub fn on_interrupt(f: impl FnMut() + Send + 'static) -> Restore {
    register(false, Box::new(f))
}

fn register(kernel: bool, f: Restorer) -> Restore {
    install_signal_guard();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    restorers().push((id, kernel, f));
    Restore { id }
}

/// A scratch directory that is removed when dropped and also when hugetune
/// is interrupted (the interrupt exits the process, and a `TempDir` is never
/// dropped then: traces and logs of a stopped run would stay in /tmp).
pub struct Scratch {
    // Declared first so it drops first: the directory goes, then `TempDir`'s
    // own removal finds nothing left (which it ignores).
    _cleanup: Restore,
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A new directory `prefix` + random suffix under the temporary directory.
    pub fn new(prefix: &str) -> Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .with_context(|| {
                format!(
                    "creating a scratch directory {prefix}* in {}",
                    std::env::temp_dir().display()
                )
            })?;
        let path = dir.path().to_path_buf();
        let _cleanup = on_interrupt(move || {
            let _ = std::fs::remove_dir_all(&path);
        });
        Ok(Scratch { _cleanup, dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let mut r = restorers();
        if let Some(i) = r.iter().position(|(id, _, _)| *id == self.id) {
            let (_, _, mut f) = r.remove(i);
            f();
        }
    }
}

/// A child about to be started: hold it from before the spawn until the child
/// is tracked, so an interrupt waits for it. Refused once an interrupt began.
pub struct SpawnGuard(());

pub fn begin_spawn() -> Result<SpawnGuard> {
    SPAWNING.fetch_add(1, Ordering::SeqCst);
    if INTERRUPTED.load(Ordering::SeqCst) {
        SPAWNING.fetch_sub(1, Ordering::SeqCst);
        bail!("interrupted: no new run is started");
    }
    Ok(SpawnGuard(()))
}

impl Drop for SpawnGuard {
    fn drop(&mut self) {
        SPAWNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Registers a child so an interrupt stops it before settings are restored.
pub struct ChildGuard(u32);

pub fn track_child(pid: u32) -> ChildGuard {
    CHILDREN.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
    if INTERRUPTED.load(Ordering::SeqCst) {
        // SAFETY: kill has no memory effects; the pid is our child.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    ChildGuard(pid)
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        CHILDREN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&p| p != self.0);
    }
}

/// Exclusive advisory lock over kernel huge page state (pools, THP settings).
pub struct KernelStateLock {
    _file: std::sync::Arc<File>,
}

thread_local! {
    /// The lock this thread holds, if any (`lock_kernel_state_here`).
    static HELD_HERE: std::cell::RefCell<std::sync::Weak<File>> =
        const { std::cell::RefCell::new(std::sync::Weak::new()) };
}

impl KernelStateLock {
    /// Another handle on the same lock (the same open file description, so the
    /// lock is held until every handle is dropped): lets one user hold two guards
    /// at once, e.g. an emptied pool and THP `never`, without waiting on itself.
    pub fn try_clone(&self) -> Result<KernelStateLock> {
        Ok(KernelStateLock {
            _file: self._file.clone(),
        })
    }

    fn held_here(file: File) -> KernelStateLock {
        let file = std::sync::Arc::new(file);
        HELD_HERE.with(|h| *h.borrow_mut() = std::sync::Arc::downgrade(&file));
        KernelStateLock { _file: file }
    }
}

/// Takes the lock, saying so on stderr when it has to wait for another user
/// (`announce`).
fn take_lock(announce: bool) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .with_context(|| format!("opening lock file {LOCK_PATH}"))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if announce {
            eprintln!("hugetune: waiting for another user of the huge page pools ({LOCK_PATH})");
        }
        // SAFETY: as above, blocking this time.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context("locking kernel state");
        }
    }
    Ok(file)
}

fn lock_kernel_state_quietly() -> Result<KernelStateLock> {
    Ok(KernelStateLock::held_here(take_lock(false)?))
}

/// The lock this thread already holds (another handle on it), else the lock
/// taken as `lock_kernel_state` does. For a change made inside work that may
/// or may not hold the lock already (a plan's per-size THP controls set for
/// one run of `optimize`, which holds it for its pools): taking it again from
/// the same process would wait on itself. Other threads still wait.
pub fn lock_kernel_state_here() -> Result<KernelStateLock> {
    if let Some(f) = HELD_HERE.with(|h| h.borrow().upgrade()) {
        return Ok(KernelStateLock { _file: f });
    }
    lock_kernel_state()
}

pub fn lock_kernel_state() -> Result<KernelStateLock> {
    let file = take_lock(true)?;
    let lock = KernelStateLock::held_here(file);
    // What a hugetune that was killed outright left in force is undone first.
    if unsafe { libc::geteuid() } == 0 {
        for m in crate::journal::Journal::system().recover().lines() {
            eprintln!("hugetune: {m}");
        }
    }
    Ok(lock)
}

/// Journals a change about to be made (refusing it when the journal cannot be
/// written: a change nobody could undo after a kill is not made).
fn journal(what: &str, undo: Vec<crate::journal::Undo>) -> Result<crate::journal::Recorded> {
    crate::journal::Journal::system()
        .record(what, undo)
        .with_context(|| format!("journaling {what} before making it"))
}

/// Undoes every change a dead hugetune left (`hugetune restore`): takes the
/// kernel-state lock (which waits for a live user) and returns what was done.
pub fn recover_journal() -> Result<crate::journal::Recovery> {
    check_root(Path::new(crate::journal::JOURNAL_DIR))?;
    let _lock = lock_kernel_state_quietly()?;
    Ok(crate::journal::Journal::system().recover())
}

fn nr_path(page_kb: u64) -> PathBuf {
    Path::new(crate::machine::HUGEPAGES_SYSFS).join(format!("hugepages-{page_kb}kB/nr_hugepages"))
}

fn read_nr(path: &Path) -> Result<u64> {
    crate::procfs::read_u64(path).with_context(|| format!("reading {}", path.display()))
}

fn write_nr(path: &Path, n: u64) -> Result<()> {
    std::fs::write(path, format!("{n}\n"))
        .with_context(|| format!("writing {n} to {}", path.display()))
}

/// A hugetlb pool changed for as long as the value lives: dropping it (or an
/// interrupt) puts the old size back. It holds the kernel-state lock meanwhile, so
/// nobody else changes pools in between.
pub struct PoolChange {
    pub page_kb: u64,
    pub previous: u64,
    /// What the kernel actually gave (fragmentation can make it fewer than asked):
    /// the pool's size, less the pages others held when it was set
    /// (`set_hugetlb_pool`; 0 for the other changes).
    pub now: u64,
    /// The persistent pool size put back when the change ends (`previous` less
    /// the surplus pages, which a write cannot keep).
    pub restores_to: u64,
    _restore: Restore,
    _lock: KernelStateLock,
}

impl PoolChange {
    pub fn added(&self) -> u64 {
        self.now.saturating_sub(self.previous)
    }

    /// The kernel-state lock this change holds (for `set_thp_enabled_holding`).
    pub fn lock(&self) -> &KernelStateLock {
        &self._lock
    }
}

/// Refuses a pool change that cannot work before any lock is taken.
fn check_pool_request(page_kb: u64) -> Result<()> {
    check_root(&nr_path(page_kb))
}

fn check_root(path: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "changing kernel huge page state needs root (writing {})",
            path.display()
        );
    }
    Ok(())
}

fn change_pool(
    lock: KernelStateLock,
    page_kb: u64,
    target: impl FnOnce(u64) -> u64,
    taken: u64,
) -> Result<PoolChange> {
    let path = nr_path(page_kb);
    let previous = read_nr(&path)?;
    // nr_hugepages reads the pool with its surplus pages (overcommitted, or
    // leaked reservations) but a write sets the persistent pool: putting back
    // what was read would turn the surplus into persistent pages. Restore the
    // persistent part.
    let surplus = crate::machine::pool(page_kb).map_or(0, |p| p.surplus);
    let persistent = previous.saturating_sub(surplus);
    let restore = restore_value(
        &format!("the {page_kb} kB hugetlb pool"),
        &path,
        &persistent.to_string(),
    )?;
    write_nr(&path, target(previous))?;
    let now = read_nr(&path)?.saturating_sub(taken);
    Ok(PoolChange {
        page_kb,
        previous,
        now,
        restores_to: persistent,
        _restore: restore,
        _lock: lock,
    })
}

/// Grows the `page_kb` pool by `extra` pages.
pub fn reserve_hugetlb(page_kb: u64, extra: u64) -> Result<PoolChange> {
    check_pool_request(page_kb)?;
    change_pool(
        lock_kernel_state()?,
        page_kb,
        |previous| previous + extra,
        0,
    )
}

/// `reserve_hugetlb` for a caller that already holds the kernel-state lock (e.g.
/// `calibrate`, which holds it for its whole run and changes two pools in turn):
/// shares that lock instead of waiting for it.
pub fn reserve_hugetlb_holding(
    lock: &KernelStateLock,
    page_kb: u64,
    extra: u64,
) -> Result<PoolChange> {
    check_pool_request(page_kb)?;
    change_pool(lock.try_clone()?, page_kb, |previous| previous + extra, 0)
}

/// Pages of the `page_kb` pool that are not ours to use (`HugetlbPool::taken`).
fn taken_pages(page_kb: u64) -> u64 {
    crate::machine::pool(page_kb).map_or(0, |p| p.taken())
}

/// Sets the `page_kb` pool so that `pages` pages are free for new mappings: that
/// many, plus those in use or reserved by others (tests). On a machine where
/// nobody else holds huge pages the pool is exactly `pages`. `now` counts the
/// caller's pages only.
pub fn set_hugetlb_pool(page_kb: u64, pages: u64) -> Result<PoolChange> {
    check_pool_request(page_kb)?;
    let lock = lock_kernel_state()?;
    let taken = taken_pages(page_kb);
    change_pool(lock, page_kb, |_| pages + taken, taken)
}

/// Sets the `page_kb` pool to exactly `pages` for a caller that already holds the
/// kernel-state lock and counts what others hold itself (`HugetlbPool::taken`).
pub fn set_hugetlb_pool_holding(
    lock: &KernelStateLock,
    page_kb: u64,
    pages: u64,
) -> Result<PoolChange> {
    check_pool_request(page_kb)?;
    change_pool(lock.try_clone()?, page_kb, |_| pages, 0)
}

/// One mTHP size's control (`hugepages-<kb>kB/enabled`) changed for as long as
/// the value lives, restored on drop and on interrupt; needs the lock held.
pub fn set_mthp_enabled_holding(lock: &KernelStateLock, kb: u64, mode: &str) -> Result<ThpChange> {
    if !matches!(mode, "always" | "madvise" | "inherit" | "never") {
        bail!("unknown mTHP mode {mode:?} (always, inherit, madvise or never)");
    }
    let path = Path::new(crate::machine::THP_SYSFS)
        .join(format!("hugepages-{kb}kB"))
        .join("enabled");
    if !path.exists() {
        bail!(
            "this kernel has no {kb} kB THP size ({} is missing)",
            path.display()
        );
    }
    check_root(&path)?;
    change_thp(lock.try_clone()?, path, mode)
}

/// A plan's per-size THP controls (`(kB, mode)`: `hugepages-<kB>kB/enabled`)
/// set for as long as the value lives (one run), restored on drop, on
/// interrupt and, after a kill, through the journal; under the lock this
/// thread holds, or taken for the run.
pub fn set_thp_controls(controls: &[(u64, String)]) -> Result<Vec<ThpChange>> {
    if controls.is_empty() {
        return Ok(vec![]);
    }
    let lock = lock_kernel_state_here()?;
    let mut out = Vec::with_capacity(controls.len());
    for (kb, mode) in controls {
        // On an error the changes made so far are restored as `out` drops.
        out.push(set_mthp_enabled_holding(&lock, *kb, mode)?);
    }
    Ok(out)
}

fn thp_enabled_path() -> PathBuf {
    Path::new(crate::machine::THP_SYSFS).join("enabled")
}

fn read_thp_enabled(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    crate::procfs::selected_choice(&text)
        .with_context(|| format!("no selected value in {}: {:?}", path.display(), text.trim()))
}

/// THP's system-wide mode (`/sys/kernel/mm/transparent_hugepage/enabled`) changed
/// for as long as the value lives: dropping it (or an interrupt) puts the old mode
/// back. It holds the kernel-state lock meanwhile, like `PoolChange`.
pub struct ThpChange {
    /// The mode before the change (`always`, `madvise` or `never`).
    pub previous: String,
    /// The mode the kernel reports after the change.
    pub now: String,
    _restore: Restore,
    _lock: KernelStateLock,
}

/// Refuses what cannot work before any lock is taken.
fn check_thp_request(mode: &str) -> Result<PathBuf> {
    if !matches!(mode, "always" | "madvise" | "never") {
        bail!("unknown THP mode {mode:?} (always, madvise or never)");
    }
    let path = thp_enabled_path();
    check_root(&path)?;
    Ok(path)
}

/// Writes `old` back to the sysfs or procfs file `path` on drop and on
/// interrupt, and journals that (as `what`) before the caller changes it.
fn restore_value(what: &str, path: &Path, old: &str) -> Result<Restore> {
    let mut entry = Some(journal(
        what,
        vec![crate::journal::Undo::Write {
            path: path.to_path_buf(),
            value: old.to_string(),
        }],
    )?);
    let path = path.to_path_buf();
    let old = old.to_string();
    Ok(on_restore(move || match std::fs::write(&path, &old) {
        Ok(()) => {
            if let Some(e) = entry.take() {
                e.done();
            }
        }
        Err(e) => eprintln!(
            "hugetune: could not restore {} to {old}: {e}",
            path.display()
        ),
    }))
}

/// `on_restore` for a change that is also journaled with `undo` (for a kill):
/// the entry goes once `f` has run.
pub fn on_restore_journaled(
    what: &str,
    undo: Vec<crate::journal::Undo>,
    mut f: impl FnMut() + Send + 'static,
) -> Result<Restore> {
    let mut entry = Some(journal(what, undo)?);
    Ok(on_restore(move || {
        f();
        if let Some(e) = entry.take() {
            e.done();
        }
    }))
}

fn change_thp(lock: KernelStateLock, path: PathBuf, mode: &str) -> Result<ThpChange> {
    let previous = read_thp_enabled(&path)?;
    let restore = restore_value(&path.display().to_string(), &path, &previous)?;
    std::fs::write(&path, mode).with_context(|| format!("writing {mode} to {}", path.display()))?;
    let now = read_thp_enabled(&path)?;
    if now != mode {
        bail!("{} reads {now} after writing {mode}", path.display());
    }
    Ok(ThpChange {
        previous,
        now,
        _restore: restore,
        _lock: lock,
    })
}

/// Sets THP's system-wide mode (`always`, `madvise`, `never`) under the
/// kernel-state lock, restored on drop and on interrupt (tests: THP `never`).
pub fn set_thp_enabled(mode: &str) -> Result<ThpChange> {
    let path = check_thp_request(mode)?;
    change_thp(lock_kernel_state()?, path, mode)
}

/// `set_thp_enabled` for a caller that already holds the kernel-state lock (e.g.
/// through a `PoolChange`): shares that lock instead of waiting for it. Drop the
/// `ThpChange` first if it must be restored before the pool.
pub fn set_thp_enabled_holding(lock: &KernelStateLock, mode: &str) -> Result<ThpChange> {
    let path = check_thp_request(mode)?;
    change_thp(lock.try_clone()?, path, mode)
}

/// A plain sysfs value changed for as long as the value lives (restored on drop
/// and on interrupt), while holding the kernel-state lock.
pub struct SysfsChange {
    pub path: PathBuf,
    pub previous: String,
    _restore: Restore,
    _lock: KernelStateLock,
}

fn change_sysfs(lock: &KernelStateLock, path: &Path, value: &str) -> Result<SysfsChange> {
    check_root(path)?;
    let previous = std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_string();
    let restore = restore_value(&path.display().to_string(), path, &previous)?;
    std::fs::write(path, value)
        .with_context(|| format!("writing {value} to {}", path.display()))?;
    Ok(SysfsChange {
        path: path.to_path_buf(),
        previous,
        _restore: restore,
        _lock: lock.try_clone()?,
    })
}

/// A `/proc/sys/vm` setting (e.g. `overcommit_memory`) changed for as long as
/// the value lives, restored on drop and on interrupt and journaled, while
/// holding the kernel-state lock (tests: strict overcommit).
pub fn set_vm_sysctl_holding(
    lock: &KernelStateLock,
    name: &str,
    value: &str,
) -> Result<SysfsChange> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("{name:?} is not a vm sysctl name");
    }
    change_sysfs(lock, &Path::new("/proc/sys/vm").join(name), value)
}

const PAGE_REPORTING: &str = "/sys/module/page_reporting/parameters";

/// Holds off free page reporting (virtio-balloon: the guest hands free memory back
/// to its host, and the next first touch of such memory costs several times a
/// fault) for as long as the value lives, so that timed runs of different
/// configurations all start on memory the host backs. Where the kernel has a
/// minimum free time before reporting (`min_free_ms`), it is raised to a minute;
/// otherwise only the largest free blocks are reported (`page_reporting_order` at
/// the largest order). `Ok(None)`: the kernel does not report free pages.
pub fn hold_page_reporting(lock: &KernelStateLock) -> Result<Option<SysfsChange>> {
    let dir = Path::new(PAGE_REPORTING);
    let min_free = dir.join("min_free_ms");
    if min_free.exists() {
        return change_sysfs(lock, &min_free, "60000").map(Some);
    }
    let order = dir.join("page_reporting_order");
    if order.exists() {
        // MAX_PAGE_ORDER: 10 on x86-64 with 4 KB pages; the kernel refuses more.
        return change_sysfs(lock, &order, "10").map(Some);
    }
    Ok(None)
}

/// Whether this kernel hands free 2 MB blocks back to its host soon enough
/// that a program started right after another one faults on memory the host
/// took back (docs/model.md §4, "Host state"): a virtio balloon that offers
/// free page reporting (feature bit 5, `VIRTIO_BALLOON_F_REPORTING`), blocks of
/// 2 MB reported (`page_reporting_order` at most 9, its default), and no
/// minimum free time of 10 s or more (`min_free_ms`, where the kernel has it;
/// `hold_page_reporting` sets a minute). `Some(why)`, said for people.
pub fn free_page_reporting() -> Option<String> {
    let dir = Path::new(PAGE_REPORTING);
    if !dir.exists() {
        return None;
    }
    let features = std::fs::read_dir("/sys/bus/virtio/devices")
        .ok()?
        .flatten()
        .find(|d| {
            std::fs::read_to_string(d.path().join("device")).is_ok_and(|v| v.trim() == "0x0005")
        })
        .and_then(|d| std::fs::read_to_string(d.path().join("features")).ok());
    let num = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    reporting_from(
        features.as_deref(),
        num("page_reporting_order"),
        num("min_free_ms"),
    )
}

/// [`free_page_reporting`] from what it read: the balloon's feature bits
/// (`None`: no balloon), the reporting order and the minimum free time.
pub fn reporting_from(
    balloon_features: Option<&str>,
    order: Option<u64>,
    min_free_ms: Option<u64>,
) -> Option<String> {
    // Feature bits as sysfs prints them: one character per bit, bit 0 first.
    const F_REPORTING: usize = 5;
    if balloon_features?.trim().as_bytes().get(F_REPORTING) != Some(&b'1') {
        return None;
    }
    let order = order.unwrap_or(9);
    if order > 9 {
        return None;
    }
    match min_free_ms {
        Some(ms) if ms >= 10_000 => None,
        Some(ms) => Some(format!(
            "virtio-balloon free page reporting of blocks of order {order} and up, after {ms} ms free"
        )),
        None => Some(format!(
            "virtio-balloon free page reporting of blocks of order {order} and up"
        )),
    }
}

/// Reads a pool's persistent size under the lock: the resting value, not a
/// test's temporary one. Surplus pages are not counted: pages still in use when
/// a pool is shrunk stay as surplus until their process has freed them (an
/// interrupted run's child may take a moment to go), and others' overcommitted
/// or leaked reservations are surplus too (docs/testing.md).
pub fn resting_pool_size(page_kb: u64) -> Result<u64> {
    let _lock = lock_kernel_state()?;
    let nr = read_nr(&nr_path(page_kb))?;
    let surplus = crate::machine::pool(page_kb).map_or(0, |p| p.surplus);
    Ok(nr.saturating_sub(surplus))
}

/// Serializes this crate's tests that take the kernel-state lock: any taker
/// undoes what the journal holds of dead processes, so a test that kills a
/// process on purpose must not have its entries undone by a neighbour.
#[cfg(test)]
pub(crate) fn test_serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Reporting counts only with the balloon's reporting feature, 2 MB
    /// blocks reported, and no long minimum free time (a held one: none).
    #[test]
    fn free_page_reporting_from_the_balloon_and_its_parameters() {
        let on = "0110010100000000000000000000000010";
        let off = "0110000100000000000000000000000010";
        assert!(
            reporting_from(Some(on), Some(9), Some(0)).is_some_and(|s| s.contains("after 0 ms"))
        );
        assert!(reporting_from(Some(on), None, None).is_some());
        assert_eq!(
            reporting_from(Some(off), Some(9), Some(0)),
            None,
            "feature off"
        );
        assert_eq!(reporting_from(None, Some(9), Some(0)), None, "no balloon");
        assert_eq!(
            reporting_from(Some(on), Some(10), Some(0)),
            None,
            "only 4 MB blocks"
        );
        assert_eq!(reporting_from(Some(on), Some(9), Some(60000)), None, "held");
        assert_eq!(
            reporting_from(Some("01"), Some(9), Some(0)),
            None,
            "short bits"
        );
    }

    #[test]
    fn thp_guard_refuses_unknown_modes_without_locking() {
        let e = set_thp_enabled("sometimes").err().unwrap();
        assert!(format!("{e:#}").contains("unknown THP mode"), "{e:#}");
    }

    #[test]
    fn restore_runs_once_on_drop() {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        let r = on_restore(move || {
            m.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(n.load(Ordering::SeqCst), 0);
        drop(r);
        assert_eq!(n.load(Ordering::SeqCst), 1);
        assert!(restorers().iter().all(|(id, _, _)| *id != 0));
    }

    /// A scratch directory goes when dropped, with what it holds.
    #[test]
    fn scratch_is_removed_on_drop() {
        let s = Scratch::new("hugetune-test-scratch.").unwrap();
        let p = s.path().to_path_buf();
        std::fs::write(p.join("f"), b"x").unwrap();
        assert!(p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("hugetune-test-scratch."));
        drop(s);
        assert!(!p.exists());
        assert!(Scratch::new("no/such/dir/x.").is_err());
    }

    /// The child of `an_interrupt_removes_scratch_directories`: makes a
    /// scratch directory under `TMPDIR`, says so, and waits to be stopped.
    #[test]
    #[ignore]
    fn scratch_holder() {
        if std::env::var_os("HUGETUNE_TEST_SCRATCH_HOLDER").is_none() {
            return;
        }
        let s = Scratch::new("hugetune-test-scratch.").unwrap();
        std::fs::write(s.path().join("trace"), b"x").unwrap();
        println!("ready");
        std::thread::sleep(std::time::Duration::from_secs(120));
    }

    /// SIGTERM exits without dropping anything: the scratch directory is
    /// removed by its restorer, and nothing claims kernel settings were
    /// restored when none were changed.
    #[test]
    fn an_interrupt_removes_scratch_directories() {
        use std::io::BufRead;
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "kernel_state::tests::scratch_holder",
                "--nocapture",
            ])
            .env("HUGETUNE_TEST_SCRATCH_HOLDER", "1")
            .env("TMPDIR", tmp.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while out.read_line(&mut line).unwrap() > 0 && !line.contains("ready") {
            line.clear();
        }
        assert!(line.contains("ready"), "the holder never started");
        let held: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
        assert_eq!(held.len(), 1, "{held:?}");
        // SAFETY: kill has no memory effects; the pid is our child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{err}");
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        assert!(!err.contains("kernel settings restored"), "{err}");
    }

    /// The child of `a_killed_pool_reservation_is_undone_by_the_next_user`:
    /// grows the 2 MB pool and holds it until killed.
    #[test]
    #[ignore]
    fn pool_holder() {
        if std::env::var_os("HUGETUNE_TEST_POOL_HOLDER").is_none() {
            return;
        }
        let _r = reserve_hugetlb(2048, 3).unwrap();
        std::thread::sleep(std::time::Duration::from_secs(120));
    }

    #[test]
    fn a_killed_pool_reservation_is_undone_by_the_next_user() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || crate::machine::pool(2048).is_none() {
            eprintln!("SKIPPED: needs root and a 2 MB hugetlb pool");
            return;
        }
        let _serial = test_serial();
        let persistent =
            || crate::procfs::read_u64(Path::new("/proc/sys/vm/nr_hugepages")).unwrap();
        let before = {
            let _l = lock_kernel_state().unwrap();
            persistent()
        };
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "kernel_state::tests::pool_holder"])
            .env("HUGETUNE_TEST_POOL_HOLDER", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        // The holder is a thread of the test harness's process: its pid is the child's.
        let t0 = std::time::Instant::now();
        let entry = loop {
            let mine = std::fs::read_dir(crate::journal::JOURNAL_DIR)
                .into_iter()
                .flatten()
                .flatten()
                .find(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{pid}-"))
                });
            if let Some(e) = mine {
                // Entry first, then the write: wait for the pool to have grown.
                if crate::procfs::read_u64(&nr_path(2048)).unwrap()
                    > crate::machine::pool(2048).unwrap().surplus + before
                {
                    break e.path();
                }
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(60),
                "the holder never grew the pool"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        child.wait().unwrap();
        assert!(entry.exists(), "a kill runs no destructor: the entry stays");
        // At least the 3 pages (more where the write made leaked surplus pages
        // persistent: docs/testing.md).
        assert!(persistent() >= before + 3, "the kill left the pool grown");
        let said = recover_journal().unwrap();
        assert_eq!(persistent(), before, "{said:?}");
        assert!(!entry.exists());
        assert!(
            said.undone
                .iter()
                .any(|s| s.contains("2048 kB hugetlb pool") && s.contains(&pid.to_string())),
            "{said:?}"
        );
    }
}
