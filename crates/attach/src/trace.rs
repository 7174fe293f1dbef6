//! Fault-time advice for a program the runtime library cannot enter (issue 19,
//! item 2; docs/attach.md "At fault time"): the program is started under a
//! seccomp filter that stops only its mmap, mprotect, mremap and brk calls
//! (`SECCOMP_RET_TRACE`; every other call is allowed without a stop), and a
//! tracer thread of hugetune (`PTRACE_SEIZE`, following threads, forks, vforks
//! and execs) runs each stopped call to its exit; when the call made memory of a
//! planned category (the rules of `ranges`, applied to the call), it injects
//! `madvise(start, len, MADV_HUGEPAGE)` into the stopped thread, so the
//! program's later faults there take huge pages, as THP `always` would give,
//! for this program's planned ranges only.
//!
//! Invariants:
//! - The program behaves as untraced: every signal is delivered unchanged
//!   (signal-delivery stops resume with their signal), group-stops are kept
//!   with PTRACE_LISTEN, its exit status is the one reaped here, and an
//!   injection leaves the thread's registers and signal mask as they were
//!   (signals are blocked during it, so no handler ever sees the injected
//!   state; what arrives meanwhile stays pending and is delivered after).
//! - A tracee under the filter is never detached (its traced calls would then
//!   fail with ENOSYS): the tracer serves every descendant until none is left,
//!   and PTRACE_O_EXITKILL ends them if hugetune itself dies.
//! - Only the tracer thread waits for the tracees (`__WNOTHREAD`), and only for
//!   its tracees: other children of hugetune are never reaped here. Exits are
//!   not reaped until the child's spawn has returned (std reaps a child whose
//!   exec failed).
//! - When the tracer cannot be set up (`why_not`, a refused PTRACE_SEIZE, a
//!   filter the kernel refuses) the program runs as it would without it, and
//!   the report says why in one line.
//! - Only MADV_HUGEPAGE is injected, only into processes running the planned
//!   executable, and never on a mapping the program marked MADV_NOHUGEPAGE or
//!   on a stack (`MAP_STACK`, `MAP_GROWSDOWN`).

use crate::plan::OutsidePlan;
use crate::process::has_cap;
use crate::ranges::Kind;
use crate::report::TraceReport;
use crate::{BASE, HUGE};

/// One traced system call, as its arguments name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Mmap { len: u64, prot: u64, flags: u64 },
    Mprotect { addr: u64, len: u64, prot: u64 },
    Mremap { new_len: u64 },
    Brk,
}

const SYS_MMAP: u64 = 9;
const SYS_MPROTECT: u64 = 10;
const SYS_BRK: u64 = 12;
const SYS_MREMAP: u64 = 25;
const SYS_MADVISE: u64 = 28;
const MADV_HUGEPAGE: u64 = 14;
/// linux/capability.h.
const CAP_SYS_PTRACE: u32 = 19;

impl Call {
    /// The call of system call `nr` with arguments `a` (x86-64 numbers).
    pub fn from_regs(nr: u64, a: [u64; 6]) -> Option<Call> {
        Some(match nr {
            SYS_MMAP => Call::Mmap {
                len: a[1],
                prot: a[2],
                flags: a[3],
            },
            SYS_MPROTECT => Call::Mprotect {
                addr: a[0],
                len: a[1],
                prot: a[2],
            },
            SYS_MREMAP => Call::Mremap { new_len: a[2] },
            SYS_BRK => Call::Brk,
            _ => return None,
        })
    }
}

fn page_up(x: u64) -> u64 {
    x.saturating_add(BASE - 1) & !(BASE - 1)
}

fn rw(prot: u64) -> bool {
    let want = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    prot & want == want
}

/// The category of a private anonymous read-write region of `len` bytes (the
/// rules of `ranges::targets`): heap-large from the plan's threshold,
/// heap-small from 2 MiB below it; None when that category is not planned.
pub fn kind_of(len: u64, plan: &OutsidePlan) -> Option<Kind> {
    if len >= plan.threshold {
        plan.heap_large.then_some(Kind::HeapLarge)
    } else if len >= HUGE {
        plan.heap_small.then_some(Kind::HeapSmall)
    } else {
        None
    }
}

/// Whether [start, end) holds a whole 2 MiB-aligned page (only such a region
/// can fault huge, as `ranges` requires of a target).
fn holds_huge(start: u64, end: u64) -> bool {
    start
        .checked_add(HUGE - 1)
        .map(|s| s & !(HUGE - 1))
        .is_some_and(|s| s + HUGE <= end & !(HUGE - 1))
}

/// Whether a call could make planned memory: those are run to their exit and
/// looked at, the others resume at once.
pub fn follow(c: &Call, plan: &OutsidePlan) -> bool {
    // Below 2 MiB (in whole pages) a region holds no huge page.
    let sized = |len: u64| page_up(len) >= HUGE && kind_of(page_up(len), plan).is_some();
    match *c {
        Call::Brk => plan.heap_small,
        Call::Mmap { len, prot, flags } => {
            let f = flags as i32;
            f & 0x0f == libc::MAP_PRIVATE
                && f & libc::MAP_ANONYMOUS != 0
                && f & (libc::MAP_STACK | libc::MAP_GROWSDOWN | libc::MAP_HUGETLB) == 0
                && rw(prot)
                && sized(len)
        }
        Call::Mprotect { len, prot, .. } => rw(prot) && sized(len),
        Call::Mremap { new_len } => sized(new_len),
    }
}

/// What to advise after a followed call returned `result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    pub kind: Kind,
    pub start: u64,
    pub end: u64,
    /// The call changed an existing mapping (mprotect, mremap): its flags and
    /// kind are checked in smaps first (`vma_check`).
    pub check_vma: bool,
}

/// The advice a followed call's result asks for; `brk` is the process's last
/// known break (updated here).
pub fn advice(c: &Call, result: u64, brk: &mut Option<u64>, plan: &OutsidePlan) -> Option<Advice> {
    let failed = (result as i64) < 0 && (result as i64) > -4096;
    let sized = |kind: Option<Kind>, start: u64, end: u64, check_vma: bool| {
        let kind = kind?;
        holds_huge(start, end).then_some(Advice {
            kind,
            start,
            end,
            check_vma,
        })
    };
    match *c {
        Call::Brk => {
            // brk returns the break, the old one when it refused to move it.
            let prev = brk.replace(result)?;
            (plan.heap_small && result > prev).then_some(Advice {
                kind: Kind::HeapSmall,
                start: prev & !(BASE - 1),
                end: page_up(result),
                check_vma: false,
            })
        }
        _ if failed => None,
        Call::Mmap { len, .. } => {
            let len = page_up(len);
            sized(kind_of(len, plan), result, result.checked_add(len)?, false)
        }
        Call::Mprotect { addr, len, .. } => {
            let len = page_up(len);
            if result != 0 {
                return None;
            }
            sized(kind_of(len, plan), addr, addr.checked_add(len)?, true)
        }
        Call::Mremap { new_len } => {
            let len = page_up(new_len);
            sized(kind_of(len, plan), result, result.checked_add(len)?, true)
        }
    }
}

/// Why a changed mapping is not advised (None: advise it). `vmas` is the
/// process's smaps read after the call.
pub fn vma_check(vmas: &[crate::maps::Vma], start: u64) -> Option<&'static str> {
    let Some(v) = vmas.iter().find(|v| v.start <= start && start < v.end) else {
        return Some("mapping gone before the advice");
    };
    let flag = |f: &str| v.flags.iter().any(|x| x == f);
    if !(v.anonymous() && v.private() && v.readable() && v.writable()) || v.name == "[stack]" {
        Some("not private anonymous read-write memory")
    } else if flag("nh") {
        Some("MADV_NOHUGEPAGE mappings")
    } else if flag("gd") {
        Some("stacks")
    } else if flag("hg") {
        Some("already advised")
    } else {
        None
    }
}

/// What decides whether tracing may be tried at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The executable is setuid or setgid, or has file capabilities: a traced
    /// exec of it would not gain them (and NO_NEW_PRIVS forbids it), which
    /// would change the program.
    pub privileged_exe: bool,
    /// /proc/sys/kernel/yama/ptrace_scope, where Yama is present.
    pub ptrace_scope: Option<u32>,
    pub cap_sys_ptrace: bool,
    /// `HUGETUNE_ATTACH_TRACE=0`.
    pub turned_off: bool,
    /// The tracer injects x86-64 system calls.
    pub x86_64: bool,
}

/// Why the program is not traced, in one line; None: try.
pub fn why_not(f: &Facts) -> Option<String> {
    if f.turned_off {
        return Some("turned off (HUGETUNE_ATTACH_TRACE=0)".into());
    }
    if !f.x86_64 {
        return Some("fault-time advice is implemented for x86-64 only".into());
    }
    if f.privileged_exe {
        return Some(
            "the program is setuid, setgid or has file capabilities: traced, it would run \
             without them"
                .into(),
        );
    }
    match f.ptrace_scope {
        Some(3) => Some("ptrace is disabled on this machine (Yama ptrace_scope 3)".into()),
        Some(2) if !f.cap_sys_ptrace => {
            Some("Yama ptrace_scope 2 allows ptrace only with CAP_SYS_PTRACE".into())
        }
        _ => None,
    }
}

/// The seccomp filter for `plan`: SECCOMP_RET_TRACE for the x86-64 calls that
/// could make planned memory (a superset of `follow`, so the calls it lets
/// through never stop): mmap of private anonymous read-write memory of at
/// least 2 MiB (in whole pages) that is not a stack or hugetlb, mprotect to
/// read-write of at least 2 MiB, mremap to at least 2 MiB, and brk when heap-small is planned.
/// SECCOMP_RET_ALLOW for everything else, other architectures' and x32
/// numbers included (they never match).
pub fn filter(plan: &OutsidePlan) -> Vec<libc::sock_filter> {
    #[derive(Clone, Copy, PartialEq)]
    enum L {
        Next,
        Allow,
        Trace,
        Mmap,
        Mprotect,
        Mremap,
    }
    enum Op {
        Ld(u32),
        And(u32),
        Jeq(u32, L, L),
        Jge(u32, L, L),
        Ret(u32),
        Label(L),
    }
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    // seccomp_data: nr at 0, arch at 4, args from 16 (64-bit, low word first).
    let lo = |i: u32| 16 + 8 * i;
    let hi = |i: u32| 20 + 8 * i;
    // The kernel rounds a length up to whole pages.
    let min = (HUGE - BASE + 1) as u32;
    let len_at_least_2m = |i: u32| {
        [
            Op::Ld(hi(i)),
            Op::Jeq(0, L::Next, L::Trace),
            Op::Ld(lo(i)),
            Op::Jge(min, L::Trace, L::Allow),
        ]
    };
    let flags_mask =
        (0x0f | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_GROWSDOWN | libc::MAP_HUGETLB)
            as u32;
    let flags_want = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u32;
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u32;
    let brk = if plan.heap_small { L::Trace } else { L::Allow };
    let mut ops = vec![
        Op::Ld(4),
        Op::Jeq(AUDIT_ARCH_X86_64, L::Next, L::Allow),
        Op::Ld(0),
        Op::Jeq(SYS_MMAP as u32, L::Mmap, L::Next),
        Op::Jeq(SYS_MPROTECT as u32, L::Mprotect, L::Next),
        Op::Jeq(SYS_MREMAP as u32, L::Mremap, L::Next),
        Op::Jeq(SYS_BRK as u32, brk, L::Allow),
        Op::Label(L::Mmap),
        Op::Ld(lo(3)),
        Op::And(flags_mask),
        Op::Jeq(flags_want, L::Next, L::Allow),
        Op::Ld(lo(2)),
        Op::And(rw),
        Op::Jeq(rw, L::Next, L::Allow),
    ];
    ops.extend(len_at_least_2m(1));
    ops.extend([
        Op::Label(L::Mprotect),
        Op::Ld(lo(2)),
        Op::And(rw),
        Op::Jeq(rw, L::Next, L::Allow),
    ]);
    ops.extend(len_at_least_2m(1));
    ops.push(Op::Label(L::Mremap));
    ops.extend(len_at_least_2m(2));
    ops.extend([
        Op::Label(L::Allow),
        Op::Ret(libc::SECCOMP_RET_ALLOW),
        Op::Label(L::Trace),
        Op::Ret(libc::SECCOMP_RET_TRACE),
    ]);
    // Labels to instruction indices (BPF jumps go forward, by offset).
    let mut at = vec![];
    let mut pc = 0usize;
    for op in &ops {
        match op {
            Op::Label(l) => at.push((*l, pc)),
            _ => pc += 1,
        }
    }
    let off = |pc: usize, l: L| -> u8 {
        if l == L::Next {
            return 0;
        }
        let to = at
            .iter()
            .find(|(x, _)| *x == l)
            .expect("every label is placed")
            .1;
        u8::try_from(to - pc - 1).expect("a short forward jump")
    };
    let ins = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let mut out = vec![];
    for op in &ops {
        let pc = out.len();
        out.push(match *op {
            Op::Label(_) => continue,
            Op::Ld(k) => ins(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, k),
            Op::And(k) => ins(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, k),
            Op::Jeq(k, t, f) => ins(
                libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                off(pc, t),
                off(pc, f),
                k,
            ),
            Op::Jge(k, t, f) => ins(
                libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
                off(pc, t),
                off(pc, f),
                k,
            ),
            Op::Ret(k) => ins(libc::BPF_RET | libc::BPF_K, 0, 0, k),
        });
    }
    out
}

#[cfg(target_arch = "x86_64")]
pub use imp::launch;

/// What `launch` gives the runner: the child and, when the tracer reaps it,
/// its end (wait status, rusage, when).
pub type Reaped = (i32, libc::rusage, std::time::Instant);

/// Elsewhere the program runs untraced, the report saying why.
#[cfg(not(target_arch = "x86_64"))]
pub fn launch(
    mut cmd: std::process::Command,
    _plan: std::sync::Arc<OutsidePlan>,
    _exe: Option<&std::path::Path>,
    report: std::sync::Arc<std::sync::Mutex<TraceReport>>,
) -> std::io::Result<(
    std::process::Child,
    Option<std::sync::mpsc::Receiver<Reaped>>,
)> {
    report.lock().unwrap_or_else(|p| p.into_inner()).why_not =
        Some("fault-time advice is implemented for x86-64 only".into());
    Ok((cmd.spawn()?, None))
}

impl Facts {
    /// This machine's facts for the executable `exe`.
    pub fn gather(exe: Option<&std::path::Path>) -> Facts {
        use std::os::unix::fs::MetadataExt;
        let privileged_exe = exe.is_some_and(|p| {
            let setid = std::fs::metadata(p).is_ok_and(|m| m.mode() & 0o6000 != 0);
            setid || has_file_caps(p)
        });
        let ptrace_scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .ok()
            .and_then(|s| s.trim().parse().ok());
        Facts {
            privileged_exe,
            ptrace_scope,
            cap_sys_ptrace: has_cap(CAP_SYS_PTRACE),
            turned_off: std::env::var("HUGETUNE_ATTACH_TRACE").is_ok_and(|v| v == "0"),
            x86_64: cfg!(target_arch = "x86_64"),
        }
    }
}

fn has_file_caps(p: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a size query (null buffer, size 0) on a valid C string.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::*;
    use std::collections::HashMap;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};
    use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    const PTRACE_PEEKTEXT: u32 = 1;
    const PTRACE_CONT: u32 = 7;
    const PTRACE_GETREGS: u32 = 12;
    const PTRACE_SETREGS: u32 = 13;
    const PTRACE_SYSCALL: u32 = 24;
    const PTRACE_GETEVENTMSG: u32 = 0x4201;
    const PTRACE_SEIZE: u32 = 0x4206;
    const PTRACE_LISTEN: u32 = 0x4208;
    const PTRACE_GETSIGMASK: u32 = 0x420a;
    const PTRACE_SETSIGMASK: u32 = 0x420b;
    const OPTIONS: i32 = libc::PTRACE_O_TRACESYSGOOD
        | libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_TRACESECCOMP
        | libc::PTRACE_O_EXITKILL;
    /// CAP_SYS_ADMIN may install a filter without NO_NEW_PRIVS (then a
    /// setuid program the traced one starts keeps working as before).
    const CAP_SYS_ADMIN: u32 = 21;

    fn errno() -> i32 {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }

    /// ptrace(req, tid, addr, data); Err(errno) on failure.
    fn pt(req: u32, tid: i32, addr: usize, data: usize) -> Result<i64, i32> {
        // SAFETY: the callers pass addresses of live buffers of the sizes the
        // requests write (regs, a sigset, an event message) or plain values.
        let r = unsafe {
            libc::ptrace(
                req as _,
                tid,
                addr as *mut libc::c_void,
                data as *mut libc::c_void,
            )
        };
        if r < 0 {
            Err(errno())
        } else {
            Ok(r)
        }
    }

    fn getregs(tid: i32) -> Result<libc::user_regs_struct, i32> {
        // SAFETY: all-zero registers are a valid value to be overwritten.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        pt(PTRACE_GETREGS, tid, 0, &mut r as *mut _ as usize)?;
        Ok(r)
    }

    fn setregs(tid: i32, r: &libc::user_regs_struct) -> Result<(), i32> {
        pt(PTRACE_SETREGS, tid, 0, r as *const _ as usize).map(|_| ())
    }

    fn getsigmask(tid: i32) -> Result<u64, i32> {
        let mut m = 0u64;
        pt(PTRACE_GETSIGMASK, tid, 8, &mut m as *mut u64 as usize)?;
        Ok(m)
    }

    fn setsigmask(tid: i32, m: u64) -> Result<(), i32> {
        pt(PTRACE_SETSIGMASK, tid, 8, &m as *const u64 as usize).map(|_| ())
    }

    fn eventmsg(tid: i32) -> Option<u64> {
        let mut m: libc::c_ulong = 0;
        pt(PTRACE_GETEVENTMSG, tid, 0, &mut m as *mut _ as usize).ok()?;
        Some(m)
    }

    /// The 8 bytes at `addr` of the tracee (PEEKTEXT returns the word itself,
    /// so errors show only in errno).
    fn peek(tid: i32, addr: u64) -> Option<u64> {
        // SAFETY: errno is this thread's; PEEKTEXT writes nothing here.
        unsafe { *libc::__errno_location() = 0 };
        let r = unsafe {
            libc::ptrace(
                PTRACE_PEEKTEXT as _,
                tid,
                addr as *mut libc::c_void,
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        (r != -1 || errno() == 0).then_some(r as u64)
    }

    /// A wait status: (tid, wait4-style status, rusage). Only stops unless
    /// `exits`; None when nothing is ready (`block` false).
    fn wait_event(block: bool, exits: bool) -> io::Result<Option<(i32, i32, libc::rusage)>> {
        // SAFETY: zeroed siginfo and rusage are valid to be overwritten; the
        // raw waitid takes the rusage pointer as its fifth argument.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = libc::__WALL
            | libc::__WNOTHREAD
            | libc::WSTOPPED
            | if exits { libc::WEXITED } else { 0 }
            | if block { 0 } else { libc::WNOHANG };
        let r = unsafe {
            libc::syscall(
                libc::SYS_waitid,
                libc::P_ALL,
                0,
                &mut info as *mut libc::siginfo_t,
                flags,
                &mut ru as *mut libc::rusage,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed).
        let (pid, st) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        let status = match info.si_code {
            libc::CLD_EXITED => (st & 0xff) << 8,
            libc::CLD_KILLED => st & 0x7f,
            libc::CLD_DUMPED => (st & 0x7f) | 0x80,
            // CLD_TRAPPED, CLD_STOPPED: the whole stop code (signal and
            // ptrace event), as wait4 would give it.
            _ => (st << 8) | 0x7f,
        };
        Ok(Some((pid, status, ru)))
    }

    #[derive(Clone)]
    struct ProcState {
        /// Runs the planned executable.
        planned: bool,
        brk: Option<u64>,
    }

    struct Inject {
        saved: libc::user_regs_struct,
        mask: u64,
        kind: Kind,
        len: u64,
    }

    enum State {
        Running,
        /// Resumed from a seccomp stop to the call's exit.
        Syscall(Call),
        /// madvise set up at the call's exit, waiting for its entry.
        InjectEnter(Box<Inject>),
        InjectExit(Box<Inject>),
    }

    struct Thread {
        tgid: i32,
        state: State,
    }

    struct Tracer {
        leader: i32,
        plan: Arc<OutsidePlan>,
        report: Arc<Mutex<TraceReport>>,
        ended: Option<Sender<Reaped>>,
        threads: HashMap<i32, Thread>,
        procs: HashMap<i32, ProcState>,
        /// The planned executable: /proc/PID/exe at the leader's first exec.
        program: Option<std::path::PathBuf>,
    }

    fn exe_of(pid: i32) -> Option<std::path::PathBuf> {
        std::fs::read_link(format!("/proc/{pid}/exe")).ok()
    }

    /// Whether the clone `parent` just made (stopped at its clone event) is a
    /// thread: CLONE_THREAD in the flags of its clone (rdi) or clone3 (the
    /// first word of the clone_args rdi points to); else what /proc says.
    fn is_thread_clone(parent: i32, new: i32) -> bool {
        const SYS_CLONE: u64 = 56;
        const SYS_CLONE3: u64 = 435;
        let flags = getregs(parent).ok().and_then(|r| match r.orig_rax {
            SYS_CLONE => Some(r.rdi),
            SYS_CLONE3 => peek(parent, r.rdi),
            _ => None,
        });
        match flags {
            Some(f) => f & libc::CLONE_THREAD as u64 != 0,
            None => tgid_of(new) == tgid_of(parent),
        }
    }

    fn tgid_of(tid: i32) -> i32 {
        std::fs::read_to_string(format!("/proc/{tid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(tid)
    }

    impl Tracer {
        fn rep(&self) -> std::sync::MutexGuard<'_, TraceReport> {
            self.report.lock().unwrap_or_else(|p| p.into_inner())
        }

        fn thread(&mut self, tid: i32) -> &mut Thread {
            self.threads.entry(tid).or_insert_with(|| Thread {
                tgid: tgid_of(tid),
                state: State::Running,
            })
        }

        fn proc_of(&mut self, tgid: i32) -> &mut ProcState {
            if !self.procs.contains_key(&tgid) {
                let planned = self.program.is_some() && exe_of(tgid) == self.program;
                self.procs.insert(tgid, ProcState { planned, brk: None });
            }
            self.procs.get_mut(&tgid).expect("inserted above")
        }

        /// Resumes `tid` (with `sig` at a signal-delivery stop): to its next
        /// system-call stop while an injection or a followed call is under way.
        fn resume(&mut self, tid: i32, sig: i32) {
            let req = match self.thread(tid).state {
                State::Running => PTRACE_CONT,
                _ => PTRACE_SYSCALL,
            };
            // ESRCH: it was killed meanwhile; its exit comes next.
            let _ = pt(req, tid, 0, sig as usize);
        }

        fn handle(&mut self, tid: i32, status: i32, ru: libc::rusage) {
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.threads.remove(&tid);
                self.procs.remove(&tid);
                if tid == self.leader {
                    if let Some(tx) = self.ended.take() {
                        let _ = tx.send((status, ru, Instant::now()));
                    }
                }
                return;
            }
            if !libc::WIFSTOPPED(status) {
                return;
            }
            let t0 = Instant::now();
            let sig = (status >> 8) & 0xff;
            let event = (status >> 16) & 0xff;
            if sig == libc::SIGTRAP | 0x80 {
                self.syscall_stop(tid);
            } else if sig == libc::SIGTRAP && event != 0 {
                match event {
                    libc::PTRACE_EVENT_SECCOMP => self.seccomp_stop(tid),
                    libc::PTRACE_EVENT_FORK
                    | libc::PTRACE_EVENT_VFORK
                    | libc::PTRACE_EVENT_CLONE => {
                        if let Some(new) = eventmsg(tid) {
                            let thread = event == libc::PTRACE_EVENT_CLONE
                                && is_thread_clone(tid, new as i32);
                            self.new_task(tid, new as i32, thread);
                        }
                        self.resume(tid, 0);
                    }
                    libc::PTRACE_EVENT_EXEC => {
                        self.exec(tid);
                        self.resume(tid, 0);
                    }
                    // PTRACE_EVENT_STOP of a new tracee, VFORK_DONE, EXIT.
                    _ => self.resume(tid, 0),
                }
            } else if event == libc::PTRACE_EVENT_STOP {
                // A group-stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU): it stays
                // stopped until SIGCONT, as untraced.
                let _ = pt(PTRACE_LISTEN, tid, 0, 0);
            } else {
                // A signal-delivery stop: delivered unchanged.
                self.resume(tid, sig);
            }
            self.rep().handling_s += t0.elapsed().as_secs_f64();
        }

        fn new_task(&mut self, parent: i32, new: i32, thread: bool) {
            let ptgid = self.thread(parent).tgid;
            // A new process's id is its thread group's.
            let tgid = if thread { ptgid } else { new };
            // Its own first stops may have come first (and a call of its be
            // under way): only its process is set here.
            self.threads
                .entry(new)
                .or_insert(Thread {
                    tgid,
                    state: State::Running,
                })
                .tgid = tgid;
            if !thread {
                let st = self.proc_of(ptgid).clone();
                self.procs.insert(tgid, st);
                self.rep().processes += 1;
            } else {
                self.rep().threads += 1;
            }
        }

        fn exec(&mut self, tid: i32) {
            // After an exec the thread is its process's only one, with the
            // process's id; the others are gone.
            let gone: Vec<i32> = self
                .threads
                .iter()
                .filter(|(&t, th)| t != tid && th.tgid == tid)
                .map(|(&t, _)| t)
                .collect();
            for t in gone {
                self.threads.remove(&t);
            }
            self.threads.insert(
                tid,
                Thread {
                    tgid: tid,
                    state: State::Running,
                },
            );
            if tid == self.leader && self.program.is_none() {
                self.program = exe_of(tid);
            }
            let planned = self.program.is_some() && exe_of(tid) == self.program;
            if !planned {
                self.rep().skip("processes running another program");
            }
            self.procs.insert(tid, ProcState { planned, brk: None });
        }

        fn seccomp_stop(&mut self, tid: i32) {
            self.rep().stops += 1;
            let Ok(r) = getregs(tid) else {
                return self.resume(tid, 0);
            };
            let tgid = self.thread(tid).tgid;
            if !self.proc_of(tgid).planned {
                return self.resume(tid, 0);
            }
            let call = Call::from_regs(r.orig_rax, [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9]);
            match call {
                Some(c) if follow(&c, &self.plan) => {
                    self.thread(tid).state = State::Syscall(c);
                    let _ = pt(PTRACE_SYSCALL, tid, 0, 0);
                }
                _ => self.resume(tid, 0),
            }
        }

        fn syscall_stop(&mut self, tid: i32) {
            let state = std::mem::replace(&mut self.thread(tid).state, State::Running);
            match state {
                State::Running => self.resume(tid, 0),
                State::Syscall(c) => {
                    let Ok(r) = getregs(tid) else {
                        return self.resume(tid, 0);
                    };
                    let tgid = self.thread(tid).tgid;
                    let plan = self.plan.clone();
                    let Some(a) = advice(&c, r.rax, &mut self.proc_of(tgid).brk, &plan) else {
                        return self.resume(tid, 0);
                    };
                    if a.check_vma {
                        let why = match std::fs::read_to_string(format!("/proc/{tid}/smaps"))
                            .ok()
                            .and_then(|t| crate::maps::parse_smaps(&t).ok())
                        {
                            Some(v) => vma_check(&v, a.start),
                            None => Some("smaps unreadable"),
                        };
                        if let Some(why) = why {
                            self.rep().skip(why);
                            return self.resume(tid, 0);
                        }
                    }
                    self.inject(tid, r, a);
                }
                State::InjectEnter(inj) => match getregs(tid) {
                    Ok(r) if r.orig_rax == SYS_MADVISE => {
                        self.thread(tid).state = State::InjectExit(inj);
                        let _ = pt(PTRACE_SYSCALL, tid, 0, 0);
                    }
                    _ => {
                        self.rep().fail(inj.kind, "the injected call did not start");
                        self.restore(tid, &inj);
                    }
                },
                State::InjectExit(inj) => {
                    match getregs(tid).map(|r| r.rax as i64) {
                        Ok(0) => {
                            let mut rep = self.rep();
                            let e = rep.advised.entry(inj.kind.name().into()).or_default();
                            e.calls += 1;
                            e.bytes += inj.len;
                        }
                        Ok(e) => self.rep().fail(
                            inj.kind,
                            &format!("madvise {}", crate::process::errno_name(-e as i32)),
                        ),
                        Err(_) => self.rep().fail(inj.kind, "registers unreadable"),
                    }
                    self.restore(tid, &inj);
                }
            }
        }

        /// Sets up `madvise(a.start, len, MADV_HUGEPAGE)` in `tid`, stopped at
        /// the exit of the call whose registers are `r`: back onto its
        /// `syscall` instruction, signals blocked until `restore`.
        fn inject(&mut self, tid: i32, r: libc::user_regs_struct, a: Advice) {
            let at = r.rip.wrapping_sub(2);
            if peek(tid, at).is_none_or(|w| w & 0xffff != 0x050f) {
                self.rep()
                    .fail(a.kind, "no syscall instruction before the stop");
                return self.resume(tid, 0);
            }
            let Ok(mask) = getsigmask(tid) else {
                self.rep().fail(a.kind, "signal mask unreadable");
                return self.resume(tid, 0);
            };
            if setsigmask(tid, !0).is_err() {
                self.rep().fail(a.kind, "signal mask not settable");
                return self.resume(tid, 0);
            }
            let mut m = r;
            m.rax = SYS_MADVISE;
            // No restart logic may act on the injected state.
            m.orig_rax = u64::MAX;
            m.rdi = a.start;
            m.rsi = a.end - a.start;
            m.rdx = MADV_HUGEPAGE;
            m.rip = at;
            let inj = Box::new(Inject {
                saved: r,
                mask,
                kind: a.kind,
                len: a.end - a.start,
            });
            if setregs(tid, &m).is_err() {
                self.rep().fail(a.kind, "registers not settable");
                return self.restore(tid, &inj);
            }
            self.thread(tid).state = State::InjectEnter(inj);
            let _ = pt(PTRACE_SYSCALL, tid, 0, 0);
        }

        /// The thread as it was at its call's exit; it runs on.
        fn restore(&mut self, tid: i32, inj: &Inject) {
            if setregs(tid, &inj.saved).is_err() || setsigmask(tid, inj.mask).is_err() {
                // Only a thread being killed refuses: nothing runs on.
                self.rep()
                    .fail(inj.kind, "registers not restored (thread ending)");
            }
            self.thread(tid).state = State::Running;
            self.resume(tid, 0);
        }
    }

    fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills two descriptors that are ours alone.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just opened.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// The child's half of the start, between fork and exec (only
    /// async-signal-safe calls): say its pid, wait for the tracer's word,
    /// install the filter when told to, say how that went.
    fn child_side(fds: [i32; 4], filter: &[libc::sock_filter], nnp: bool) {
        let [up_r, up_w, down_r, down_w] = fds;
        // SAFETY: descriptors inherited from the parent; plain system calls
        // on buffers of this frame.
        unsafe {
            libc::close(up_r);
            libc::close(down_w);
            let pid = libc::getpid().to_ne_bytes();
            libc::write(up_w, pid.as_ptr().cast(), 4);
            let mut b = 0u8;
            let n = loop {
                let n = libc::read(down_r, (&mut b as *mut u8).cast(), 1);
                if n < 0 && errno() == libc::EINTR {
                    continue;
                }
                break n;
            };
            if n == 1 && b == 1 {
                let mut err = 0i32;
                if nnp && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    err = errno();
                }
                if err == 0 {
                    let prog = libc::sock_fprog {
                        len: filter.len() as u16,
                        filter: filter.as_ptr() as *mut libc::sock_filter,
                    };
                    if libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0,
                        &prog as *const libc::sock_fprog,
                    ) != 0
                    {
                        err = errno();
                    }
                }
                let e = err.to_ne_bytes();
                libc::write(up_w, e.as_ptr().cast(), 4);
            }
            libc::close(up_w);
            libc::close(down_r);
        }
    }

    /// Starts `cmd` under the tracer (fault-time advice of `plan`), or
    /// untraced when tracing cannot be set up (`report.why_not` says why).
    /// Returns the child and, when traced, the receiver of its end: the
    /// tracer reaps it, so the caller must not wait for it.
    pub fn launch(
        mut cmd: Command,
        plan: Arc<OutsidePlan>,
        exe: Option<&std::path::Path>,
        report: Arc<Mutex<TraceReport>>,
    ) -> io::Result<(Child, Option<Receiver<Reaped>>)> {
        let set = |why: String| {
            report.lock().unwrap_or_else(|p| p.into_inner()).why_not = Some(why);
        };
        if let Some(why) = why_not(&Facts::gather(exe)) {
            set(why);
            return Ok((cmd.spawn()?, None));
        }
        let (up_r, up_w) = pipe()?;
        let (down_r, down_w) = pipe()?;
        let fds = [
            up_r.as_raw_fd(),
            up_w.as_raw_fd(),
            down_r.as_raw_fd(),
            down_w.as_raw_fd(),
        ];
        let filter = filter(&plan);
        let nnp = !has_cap(CAP_SYS_ADMIN);
        // SAFETY: child_side makes only async-signal-safe calls and allocates
        // nothing (the filter was built before the fork).
        unsafe {
            cmd.pre_exec(move || {
                child_side(fds, &filter, nnp);
                Ok(())
            });
        }
        let (spawned_tx, spawned_rx) = mpsc::channel::<bool>();
        let (traced_tx, traced_rx) = mpsc::channel::<bool>();
        let (ended_tx, ended_rx) = mpsc::channel::<Reaped>();
        let rep = report.clone();
        std::thread::Builder::new()
            .name("hugetune-trace".into())
            .spawn(move || tracer(up_r, down_w, spawned_rx, traced_tx, ended_tx, plan, rep))?;
        let r = cmd.spawn();
        // The child's ends: it has its own copies (closed at its exec).
        drop(up_w);
        drop(down_r);
        match r {
            Err(e) => {
                let _ = spawned_tx.send(false);
                Err(e)
            }
            Ok(child) => {
                let _ = spawned_tx.send(true);
                let traced = traced_rx.recv().unwrap_or(false);
                Ok((child, traced.then_some(ended_rx)))
            }
        }
    }

    /// Reads up to `buf.len()` bytes from `fd` within `ms`; 0 at EOF, None
    /// when nothing came.
    fn read_ready(fd: &OwnedFd, buf: &mut [u8], ms: i32) -> Option<usize> {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a read into our buffer.
        unsafe {
            if libc::poll(&mut p, 1, ms) <= 0 {
                return None;
            }
            let n = libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len());
            (n >= 0).then_some(n as usize)
        }
    }

    /// The tracer thread: the handshake, then every stop of every tracee
    /// until none is left.
    fn tracer(
        up_r: OwnedFd,
        down_w: OwnedFd,
        spawned: Receiver<bool>,
        traced: Sender<bool>,
        ended: Sender<Reaped>,
        plan: Arc<OutsidePlan>,
        report: Arc<Mutex<TraceReport>>,
    ) {
        let set = |why: String| {
            report.lock().unwrap_or_else(|p| p.into_inner()).why_not = Some(why);
        };
        // 1. The child's pid (before its exec, which waits for our word).
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match read_ready(&up_r, &mut buf[got..], 10) {
                Some(0) => {
                    set("the program ended before it started".into());
                    let _ = traced.send(false);
                    return;
                }
                Some(n) => got += n,
                None => {
                    if let Ok(false) | Err(TryRecvError::Disconnected) = spawned.try_recv() {
                        let _ = traced.send(false);
                        return;
                    }
                }
            }
        }
        let pid = i32::from_ne_bytes(buf);
        // 2. Seize it, then tell it whether to install the filter.
        let seized = pt(PTRACE_SEIZE, pid, 0, OPTIONS as usize);
        let word = [seized.is_ok() as u8];
        // SAFETY: one byte into an empty pipe of ours.
        unsafe { libc::write(down_w.as_raw_fd(), word.as_ptr().cast(), 1) };
        drop(down_w);
        if let Err(e) = seized {
            set(format!(
                "PTRACE_SEIZE refused ({}): the program is already traced (a debugger, strace), \
                 or this user may not trace it",
                crate::process::errno_name(e)
            ));
            let _ = traced.send(false);
            return;
        }
        let mut t = Tracer {
            leader: pid,
            plan,
            report: report.clone(),
            ended: Some(ended),
            threads: HashMap::new(),
            procs: HashMap::new(),
            program: None,
        };
        {
            let mut r = t.rep();
            r.processes = 1;
            r.threads = 1;
        }
        // 3. Until its spawn returned: its stops are served (a signal may stop
        //    it before its exec) but no exit is reaped (std reaps a child
        //    whose exec failed). The filter's word comes before its exec.
        let mut settled = false;
        let settle = |t: &Tracer, word: Option<i32>| {
            match word {
                Some(0) => t.rep().ran = true,
                Some(e) => set(format!(
                    "the seccomp filter was refused ({}): only the collapse watcher applies \
                     the plan",
                    crate::process::errno_name(e)
                )),
                None => set("the program ended before its filter was installed".into()),
            }
            // Traced either way: its stops must be served.
            let _ = traced.send(true);
        };
        let mut got = 0;
        loop {
            while let Ok(Some((tid, st, ru))) = wait_event(false, false) {
                t.handle(tid, st, ru);
            }
            if !settled {
                let word = match read_ready(&up_r, &mut buf[got..], 1) {
                    Some(0) => Some(None),
                    Some(n) => {
                        got += n;
                        (got == 4).then(|| Some(i32::from_ne_bytes(buf)))
                    }
                    None => None,
                };
                if let Some(w) = word {
                    settle(&t, w);
                    settled = true;
                }
            }
            match spawned.try_recv() {
                Ok(true) => {
                    if !settled {
                        // Written before the exec: there, or never coming.
                        let t0 = Instant::now();
                        while got < 4 && t0.elapsed() < Duration::from_secs(1) {
                            match read_ready(&up_r, &mut buf[got..], 10) {
                                Some(0) => break,
                                Some(n) => got += n,
                                None => {}
                            }
                        }
                        settle(&t, (got == 4).then(|| i32::from_ne_bytes(buf)));
                    }
                    break;
                }
                Ok(false) | Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => {}
            }
        }
        drop(up_r);
        // 4. Every stop and exit of every tracee, until none is left.
        loop {
            match wait_event(true, true) {
                Ok(Some((tid, st, ru))) => t.handle(tid, st, ru),
                Ok(None) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => break, // ECHILD: no tracee left
            }
        }
        // Were the leader's end never seen, dropping its sender tells the
        // runner rather than leaving it waiting.
        drop(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_model::category::Category;
    use hugetune_model::page::Backing;

    fn plan(a: &[(Category, Backing)], threshold: u64) -> OutsidePlan {
        OutsidePlan::from_assignments(a, threshold)
    }

    const RW: u64 = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    const ANON: u64 = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;

    #[test]
    fn calls_are_followed_and_advised_by_category() {
        let large = plan(&[(Category::HeapLarge, Backing::Thp2m)], 64 << 20);
        let both = plan(
            &[
                (Category::HeapLarge, Backing::Thp2m),
                (Category::HeapSmall, Backing::Thp2m),
            ],
            64 << 20,
        );
        let m = |len: u64, prot: u64, flags: u64| Call::Mmap { len, prot, flags };
        // heap-large: at least the threshold.
        assert!(follow(&m(64 << 20, RW, ANON), &large));
        assert!(
            !follow(&m(8 << 20, RW, ANON), &large),
            "heap-small not planned"
        );
        assert!(follow(&m(8 << 20, RW, ANON), &both));
        assert!(!follow(&m(1 << 20, RW, ANON), &both), "below 2 MiB");
        // Not private anonymous read-write, a stack, hugetlb: never.
        assert!(!follow(&m(64 << 20, libc::PROT_NONE as u64, ANON), &large));
        assert!(!follow(
            &m(
                64 << 20,
                RW,
                libc::MAP_SHARED as u64 | libc::MAP_ANONYMOUS as u64
            ),
            &large
        ));
        assert!(!follow(&m(64 << 20, RW, libc::MAP_PRIVATE as u64), &large));
        for extra in [libc::MAP_STACK, libc::MAP_GROWSDOWN, libc::MAP_HUGETLB] {
            assert!(!follow(&m(64 << 20, RW, ANON | extra as u64), &large));
        }
        // MAP_FIXED over a reservation (Go's heap) is followed.
        assert!(follow(
            &m(64 << 20, RW, ANON | libc::MAP_FIXED as u64),
            &large
        ));
        assert!(!follow(&Call::Brk, &large));
        assert!(follow(&Call::Brk, &both));

        let mut brk = None;
        // The mapping's whole range is advised when it holds a 2 MiB page.
        let a = advice(&m(64 << 20, RW, ANON), 0x7f00_0000_1000, &mut brk, &large).unwrap();
        assert_eq!(
            (a.kind, a.start, a.end, a.check_vma),
            (Kind::HeapLarge, 0x7f00_0000_1000, 0x7f00_0400_1000, false)
        );
        // A failed call, or one too small to hold a 2 MiB page: nothing.
        assert_eq!(
            advice(&m(64 << 20, RW, ANON), -12i64 as u64, &mut brk, &large),
            None
        );
        assert_eq!(
            advice(&m(3 << 20, RW, ANON), 0x7f00_0028_0000, &mut brk, &both),
            None,
            "3 MiB from 2.5 MiB past an aligned address: 4 to 6 MiB is not inside"
        );
        // brk: the first answer is the break; growth is heap-small.
        assert_eq!(advice(&Call::Brk, 0x4c8123, &mut brk, &both), None);
        let a = advice(&Call::Brk, 0x4c8123 + (3 << 20), &mut brk, &both).unwrap();
        assert_eq!(
            (a.kind, a.start, a.end),
            (Kind::HeapSmall, 0x4c8000, 0x7c9000)
        );
        assert_eq!(brk, Some(0x4c8123 + (3 << 20)));
        // A refused or shrinking break: nothing.
        assert_eq!(advice(&Call::Brk, 0x4c8123, &mut brk, &both), None);
        // mprotect and mremap change a mapping: checked in smaps first.
        let p = Call::Mprotect {
            addr: 0x00c0_0000_0000,
            len: 4 << 20,
            prot: RW,
        };
        assert!(follow(&p, &both));
        let a = advice(&p, 0, &mut brk, &both).unwrap();
        assert!(a.check_vma && a.kind == Kind::HeapSmall);
        assert_eq!(advice(&p, -22i64 as u64, &mut brk, &both), None);
        let r = Call::Mremap { new_len: 128 << 20 };
        let a = advice(&r, 0x7e00_0000_0000, &mut brk, &large).unwrap();
        assert_eq!(
            (a.start, a.end, a.check_vma),
            (0x7e00_0000_0000, 0x7e00_0800_0000, true)
        );
        // The system-call numbers.
        assert_eq!(
            Call::from_regs(9, [0, 4096, RW, ANON, u64::MAX, 0]),
            Some(m(4096, RW, ANON))
        );
        assert_eq!(Call::from_regs(12, [0; 6]), Some(Call::Brk));
        assert_eq!(Call::from_regs(0, [0; 6]), None);
    }

    #[test]
    fn a_changed_mapping_is_advised_only_when_anonymous_and_not_refused() {
        let smaps = "\
7f0000000000-7f0000800000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me ac
7f1000000000-7f1000800000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me ac nh
7f2000000000-7f2000800000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me ac hg
7f3000000000-7f3000800000 rw-s 00000000 00:01 77 /dev/zero (deleted)
VmFlags: rd wr sh mr mw me
7ffd00000000-7ffd00800000 rw-p 00000000 00:00 0 [stack]
VmFlags: rd wr mr mw me gd ac
";
        let v = crate::maps::parse_smaps(smaps).unwrap();
        assert_eq!(vma_check(&v, 0x7f0000200000), None);
        assert_eq!(
            vma_check(&v, 0x7f1000000000),
            Some("MADV_NOHUGEPAGE mappings")
        );
        assert_eq!(vma_check(&v, 0x7f2000000000), Some("already advised"));
        assert_eq!(
            vma_check(&v, 0x7f3000000000),
            Some("not private anonymous read-write memory")
        );
        assert_eq!(
            vma_check(&v, 0x7ffd00000000),
            Some("not private anonymous read-write memory")
        );
        assert_eq!(
            vma_check(&v, 0x1000),
            Some("mapping gone before the advice")
        );
    }

    #[test]
    fn tracing_is_not_tried_where_it_cannot_work_and_says_why() {
        let ok = Facts {
            x86_64: true,
            ..Default::default()
        };
        assert_eq!(why_not(&ok), None);
        assert_eq!(
            why_not(&Facts {
                ptrace_scope: Some(1),
                ..ok.clone()
            }),
            None,
            "scope 1 allows a parent to trace its child"
        );
        let why = |f: Facts| why_not(&f).unwrap();
        assert!(why(Facts {
            ptrace_scope: Some(3),
            ..ok.clone()
        })
        .contains("ptrace_scope 3"));
        assert!(why(Facts {
            ptrace_scope: Some(2),
            ..ok.clone()
        })
        .contains("CAP_SYS_PTRACE"));
        assert_eq!(
            why_not(&Facts {
                ptrace_scope: Some(2),
                cap_sys_ptrace: true,
                ..ok.clone()
            }),
            None
        );
        assert!(why(Facts {
            privileged_exe: true,
            ..ok.clone()
        })
        .contains("setuid"));
        assert!(why(Facts {
            turned_off: true,
            ..ok.clone()
        })
        .contains("HUGETUNE_ATTACH_TRACE=0"));
        assert!(why(Facts::default()).contains("x86-64"));
        // A setuid file is seen as such.
        let d = std::env::temp_dir().join(format!("hugetune-trace-{}", std::process::id()));
        std::fs::write(&d, b"").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert!(Facts::gather(Some(&d)).privileged_exe);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!Facts::gather(Some(&d)).privileged_exe);
        std::fs::remove_file(&d).unwrap();
    }

    /// Runs the BPF program the way the kernel does, on a seccomp_data.
    fn run_filter(f: &[libc::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = f[pc];
            pc += 1;
            match i.code as u32 {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    acc = match i.k {
                        0 => nr,
                        4 => arch,
                        k if (16..64).contains(&k) => {
                            let a = args[(k as usize - 16) / 8];
                            if k % 8 == 0 {
                                a as u32
                            } else {
                                (a >> 32) as u32
                            }
                        }
                        k => panic!("load of offset {k}"),
                    }
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => acc &= i.k,
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += if acc == i.k { i.jt } else { i.jf } as usize
                }
                c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => {
                    pc += if acc >= i.k { i.jt } else { i.jf } as usize
                }
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
        }
    }

    #[test]
    fn the_filter_stops_exactly_the_calls_that_could_make_planned_memory() {
        let x86 = 0xc000_003e;
        let both = plan(
            &[
                (Category::HeapLarge, Backing::Thp2m),
                (Category::HeapSmall, Backing::Thp2m),
            ],
            1 << 20,
        );
        let large = plan(&[(Category::HeapLarge, Backing::Thp2m)], 1 << 20);
        let fb = filter(&both);
        let fl = filter(&large);
        assert_eq!(fb.len(), 30, "docs/attach.md gives its length");
        let stops = |f: &[libc::sock_filter], nr: u64, a: [u64; 6]| {
            run_filter(f, nr as u32, x86, a) == libc::SECCOMP_RET_TRACE
        };
        // Every call `follow` would look at is stopped, the others (mostly)
        // are not: a grid of lengths, protections and flags.
        // 2 MiB in whole pages.
        const MIN: u64 = (2 << 20) - 4095;
        let lens = [
            0u64,
            4096,
            MIN - 1,
            MIN,
            2 << 20,
            3 << 20,
            1 << 32,
            (1 << 32) + 5,
        ];
        let prots = [0u64, 1, 2, 3, 7];
        let flags = [
            ANON,
            ANON | libc::MAP_FIXED as u64,
            ANON | libc::MAP_STACK as u64,
            ANON | libc::MAP_GROWSDOWN as u64,
            ANON | libc::MAP_HUGETLB as u64,
            libc::MAP_PRIVATE as u64,
            (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64,
        ];
        for (f, p) in [(&fb, &both), (&fl, &large)] {
            for &len in &lens {
                for &prot in &prots {
                    for &fl in &flags {
                        let a = [0, len, prot, fl, u64::MAX, 0];
                        let c = Call::from_regs(SYS_MMAP, a).unwrap();
                        let not_stack =
                            (libc::MAP_STACK | libc::MAP_GROWSDOWN | libc::MAP_HUGETLB) as u64;
                        let want = fl & (0x2f | not_stack) == ANON && prot & 3 == 3 && len >= MIN;
                        assert_eq!(stops(f, SYS_MMAP, a), want, "mmap {a:x?}");
                        assert!(!follow(&c, p) || want, "follow {c:?} beyond the filter");
                    }
                    let a = [0x1000_0000, len, prot, 0, 0, 0];
                    let want = prot & 3 == 3 && len >= MIN;
                    assert_eq!(stops(f, SYS_MPROTECT, a), want, "mprotect {a:x?}");
                    let c = Call::from_regs(SYS_MPROTECT, a).unwrap();
                    assert!(!follow(&c, p) || want, "follow {c:?} beyond the filter");
                }
                let a = [0x1000_0000, 4096, len, 1, 0, 0];
                assert_eq!(stops(f, SYS_MREMAP, a), len >= MIN, "mremap {len}");
            }
        }
        assert!(stops(&fb, SYS_BRK, [0; 6]));
        assert!(!stops(&fl, SYS_BRK, [0; 6]), "heap-small not planned");
        // Other calls, other architectures and x32 numbers: never.
        let big = [0, 64 << 20, 3, ANON, u64::MAX, 0];
        for nr in [0u64, 1, 11, 28, 59, 60, 231, SYS_MMAP | 0x4000_0000] {
            assert!(!stops(&fb, nr, big), "{nr}");
        }
        assert_eq!(
            run_filter(&fb, SYS_MMAP as u32, 0x4000_0003, big),
            libc::SECCOMP_RET_ALLOW,
            "i386"
        );
    }
}
