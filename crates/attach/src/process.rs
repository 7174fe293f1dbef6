//! The process, seen from outside: a pidfd (so a PID reused after the process
//! ended is never touched), its /proc files, which of its pages are populated
//! (pagemap), and `process_madvise(pidfd, MADV_COLLAPSE)`.
//!
//! Invariants: the only advice ever given is MADV_COLLAPSE (it keeps the
//! memory's contents; the kernel copies small pages into a huge one under the
//! mmap lock). A /proc read counts only when the pidfd says the process was
//! still alive after it (else the PID may already name another process).
//! Permission problems are told apart and named: CAP_SYS_NICE is needed to
//! advise another process, and ptrace read access to it (the same user, or
//! CAP_SYS_PTRACE; Yama's ptrace_scope may restrict more).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use thiserror::Error;

/// MADV_COLLAPSE (Linux 6.1+): synchronous collapse into huge pages.
pub const MADV_COLLAPSE: i32 = 25;
/// The capability bit of CAP_SYS_NICE (linux/capability.h).
const CAP_SYS_NICE: u32 = 23;

#[derive(Debug, Error)]
pub enum AttachError {
    #[error("no process {0}")]
    NoProcess(u32),
    #[error("cannot attach to process {pid}: {why}")]
    Permission { pid: u32, why: String },
    #[error("this kernel cannot apply plans from outside: {0}")]
    Unsupported(String),
    #[error("process {pid}: {what}: {source}")]
    Io {
        pid: u32,
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("process {pid}: {0}", pid = .1)]
    Maps(crate::maps::MapsError, u32),
}

/// A process held by a pidfd.
#[derive(Debug)]
pub struct Process {
    pub pid: u32,
    fd: OwnedFd,
}

/// The outcome of one MADV_COLLAPSE call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collapse {
    Done,
    /// Refused with this errno (the process is unharmed).
    Failed(i32),
}

impl Process {
    /// Opens the process `pid`; works on a process that already exited but was
    /// not yet reaped (it is then seen as exited).
    pub fn open(pid: u32) -> Result<Process, AttachError> {
        if pid == 0 || pid > i32::MAX as u32 {
            return Err(AttachError::NoProcess(pid));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) | Some(libc::EINVAL) => AttachError::NoProcess(pid),
                Some(libc::ENOSYS) => AttachError::Unsupported("no pidfd_open (Linux 5.3+)".into()),
                _ => AttachError::Io {
                    pid,
                    what: "pidfd_open".into(),
                    source: e,
                },
            });
        }
        // SAFETY: r is a descriptor pidfd_open just returned to us alone.
        let fd = unsafe { OwnedFd::from_raw_fd(r as i32) };
        Ok(Process { pid, fd })
    }

    /// Whether the process has exited, waiting up to `wait` for it to (a poll
    /// on the pidfd: the sleep between passes ends as soon as it exits, and
    /// when a signal arrives).
    pub fn exited_within(&self, wait: std::time::Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd. A signal (EINTR) ends the wait early, as
        // "not exited": the caller looks again and sees its stop flag.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }

    pub fn exited(&self) -> bool {
        self.exited_within(std::time::Duration::ZERO)
    }

    /// Reads /proc/PID/NAME; None when the process exited before or during the
    /// read (the text may then be another process's).
    pub fn read(&self, name: &str) -> Result<Option<String>, AttachError> {
        let path = format!("/proc/{}/{name}", self.pid);
        let r = std::fs::read(&path);
        if self.exited() {
            return Ok(None);
        }
        match r {
            Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(AttachError::Permission {
                pid: self.pid,
                why: format!(
                    "{path} cannot be read: no ptrace access to the process (another user's, or \
                     one this user may not trace: run as its user or as root)"
                ),
            }),
            Err(e) => Err(AttachError::Io {
                pid: self.pid,
                what: format!("reading {path}"),
                source: e,
            }),
        }
    }

    /// The process's mappings with their smaps figures; None once it exited.
    pub fn smaps(&self) -> Result<Option<Vec<crate::maps::Vma>>, AttachError> {
        match self.read("smaps")? {
            None => Ok(None),
            Some(t) => crate::maps::parse_smaps(&t)
                .map(Some)
                .map_err(|e| AttachError::Maps(e, self.pid)),
        }
    }

    /// The path /proc/PID/exe links to, as maps names the executable.
    pub fn exe(&self) -> Result<Option<String>, AttachError> {
        let path = format!("/proc/{}/exe", self.pid);
        let r = std::fs::read_link(&path);
        if self.exited() {
            return Ok(None);
        }
        match r {
            Ok(p) => Ok(Some(p.to_string_lossy().into_owned())),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(AttachError::Permission {
                pid: self.pid,
                why: format!(
                    "{path} cannot be read: no ptrace access to the process (another user's, or \
                     one this user may not trace: run as its user or as root)"
                ),
            }),
            // A kernel thread has no executable.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(AttachError::Io {
                pid: self.pid,
                what: format!("reading {path}"),
                source: e,
            }),
        }
    }

    /// Opens /proc/PID/pagemap (None without access: the population rule then
    /// uses the mapping's Rss).
    pub fn pagemap(&self) -> Option<File> {
        File::open(format!("/proc/{}/pagemap", self.pid)).ok()
    }

    /// MADV_COLLAPSE on [start, end) of the process.
    pub fn collapse(&self, start: u64, end: u64) -> Collapse {
        let iov = libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: (end - start) as usize,
        };
        // SAFETY: the iovec names the other process's memory, which the kernel
        // reads through its mm; nothing in this process is touched.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                self.fd.as_raw_fd(),
                &iov as *const libc::iovec,
                1usize,
                MADV_COLLAPSE,
                0u32,
            )
        };
        if r < 0 {
            Collapse::Failed(
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            )
        } else {
            Collapse::Done
        }
    }

    /// Why an EPERM from process_madvise: the capability or the access.
    pub fn permission_error(&self) -> AttachError {
        let why = if !has_cap_sys_nice() {
            "advising another process's memory needs CAP_SYS_NICE (run as root, or grant \
             hugetune cap_sys_nice)"
                .to_string()
        } else {
            "no ptrace read access to it (another user's process, or Yama's ptrace_scope: \
             run as that user or as root)"
                .to_string()
        };
        AttachError::Permission { pid: self.pid, why }
    }
}

/// Whether this process holds CAP_SYS_NICE in its effective set.
pub fn has_cap_sys_nice() -> bool {
    has_cap(CAP_SYS_NICE)
}

/// Whether this process holds capability `bit` (linux/capability.h) in its
/// effective set.
pub fn has_cap(bit: u32) -> bool {
    let mut s = String::new();
    if File::open("/proc/self/status")
        .and_then(|mut f| f.read_to_string(&mut s))
        .is_err()
    {
        return false;
    }
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

/// The errno's name, for reports (`ENOMEM`, …).
pub fn errno_name(e: i32) -> String {
    match e {
        libc::ESRCH => "ESRCH".into(),
        libc::ENOMEM => "ENOMEM".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::EAGAIN => "EAGAIN".into(),
        libc::EPERM => "EPERM".into(),
        libc::EFAULT => "EFAULT".into(),
        libc::EBUSY => "EBUSY".into(),
        libc::EBADF => "EBADF".into(),
        libc::ENOSYS => "ENOSYS".into(),
        e => format!("errno {e}"),
    }
}

/// Pages present (or swapped) per 2 MiB piece of [start, end), from pagemap
/// (bit 63 present, bit 62 swapped); None when it cannot be read.
pub fn populated(pagemap: &File, start: u64, end: u64) -> Option<Vec<u32>> {
    Some(
        pieces(pagemap, start, end)?
            .into_iter()
            .map(|p| p.0)
            .collect(),
    )
}

/// Per 2 MiB piece of [start, end): pages present (or swapped), and whether
/// the piece is one huge page already: all 512 present on consecutive frames
/// from a 2 MiB-aligned one (pagemap shows frame numbers to CAP_SYS_ADMIN
/// only; without them no piece is seen huge). A huge piece needs no collapse
/// (the kernel gives it at fault time where the program's memory was advised
/// MADV_HUGEPAGE: crate::trace).
pub fn pieces(pagemap: &File, start: u64, end: u64) -> Option<Vec<(u32, bool)>> {
    const PER: usize = (crate::HUGE / crate::BASE) as usize;
    const PFN: u64 = (1 << 55) - 1;
    let pieces = ((end - start) / crate::HUGE) as usize;
    let mut out = Vec::with_capacity(pieces);
    // 16 pieces (32 MiB, 64 KiB of pagemap) per read.
    let mut buf = vec![0u8; PER * 8 * 16];
    let mut at = 0usize;
    while at < pieces {
        let n = (pieces - at).min(16);
        let bytes = &mut buf[..n * PER * 8];
        let off = (start / crate::BASE + (at * PER) as u64).checked_mul(8)?;
        pagemap.read_exact_at(bytes, off).ok()?;
        for piece in bytes.chunks_exact(PER * 8) {
            let entries = piece
                .chunks_exact(8)
                .map(|e| u64::from_ne_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]));
            let (mut present, mut huge, mut first) = (0u32, true, 0u64);
            for (i, v) in entries.enumerate() {
                if v & (3 << 62) != 0 {
                    present += 1;
                }
                let pfn = if v & (1 << 63) != 0 { v & PFN } else { 0 };
                if i == 0 {
                    first = pfn;
                    huge = pfn != 0 && pfn % PER as u64 == 0;
                } else if huge && pfn != first + i as u64 {
                    huge = false;
                }
            }
            out.push((present, huge));
        }
        at += n;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_process_is_named() {
        // PID numbers above pid_max never exist.
        match Process::open(i32::MAX as u32) {
            Err(AttachError::NoProcess(p)) => assert_eq!(p, i32::MAX as u32),
            other => panic!("{other:?}"),
        }
        assert!(matches!(Process::open(0), Err(AttachError::NoProcess(0))));
    }

    #[test]
    fn this_process_pages_are_counted_and_an_ended_child_is_seen() {
        // Our own pagemap: a 4 MiB aligned buffer touched in its first 2 MiB only.
        let len = 8usize << 20;
        // SAFETY: an anonymous private mapping of our own, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let a = (p as u64 + crate::HUGE - 1) & !(crate::HUGE - 1);
        // SAFETY: [a, a + 2 MiB) lies inside the mapping.
        unsafe { std::ptr::write_bytes(a as *mut u8, 1, crate::HUGE as usize) };
        let me = Process::open(std::process::id()).unwrap();
        let pm = me.pagemap().expect("own pagemap");
        let counts = populated(&pm, a, a + 2 * crate::HUGE).unwrap();
        assert_eq!(counts, [512, 0]);
        // Small pages are not a huge piece; a piece advised MADV_HUGEPAGE
        // before its first touch is (seen through frame numbers: root only).
        let st = pieces(&pm, a, a + 2 * crate::HUGE).unwrap();
        assert!(!st[0].1 && !st[1].1, "{st:?}");
        let b = a + crate::HUGE;
        // SAFETY: [b, b + 2 MiB) lies inside the mapping, untouched so far.
        let advised = unsafe {
            libc::madvise(
                b as *mut libc::c_void,
                crate::HUGE as usize,
                libc::MADV_HUGEPAGE,
            ) == 0
        };
        unsafe { std::ptr::write_bytes(b as *mut u8, 1, crate::HUGE as usize) };
        let st = pieces(&pm, a, a + 2 * crate::HUGE).unwrap();
        assert_eq!(st[1].0, 512);
        let root = unsafe { libc::geteuid() } == 0;
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|m| !m.contains("[never]"));
        let huge_now = std::fs::read_to_string("/proc/self/smaps")
            .ok()
            .and_then(|t| crate::maps::parse_smaps(&t).ok())
            .and_then(|v| v.into_iter().find(|v| v.start <= b && b < v.end))
            .is_some_and(|v| v.anon_huge >= crate::HUGE);
        if root && thp && advised {
            assert_eq!(st[1].1, huge_now, "{st:?} (smaps says huge: {huge_now})");
        }
        assert!(!st[0].1);
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(p, len) };
        assert!(!me.exited());

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pr = Process::open(child.id()).unwrap();
        assert!(pr.exited_within(std::time::Duration::from_secs(10)));
        assert_eq!(
            pr.collapse(0x400000, 0x600000),
            Collapse::Failed(libc::ESRCH)
        );
        child.wait().unwrap();
        assert!(
            pr.smaps().unwrap().is_none(),
            "an exited process has no smaps to trust"
        );
    }
}
