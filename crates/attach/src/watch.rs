//! The outside applier's loop: look at the process (one smaps read), collapse
//! the planned pieces it has populated, verify, and — in watch mode — do it
//! again every `poll` until the process exits, the duration passes or the
//! caller stops it.
//!
//! The population rule: a 2 MiB piece is collapsed only once the program has
//! populated at least half of its 4 KiB pages (pagemap: present or swapped).
//! MADV_COLLAPSE fills the absent pages of a piece with zeroes, so collapsing an
//! untouched range would allocate memory the program never used; at half, a
//! collapse at most doubles the piece's resident memory, which the program was
//! filling anyway (a piece at the fill front). Without pagemap access the rule
//! is the mapping's: Rss at least half of it. A mapping already all huge
//! (AnonHugePages = its interior) is not looked into.
//!
//! Invariants: a piece is collapsed at most `MAX_TRIES` times (a range the
//! kernel keeps refusing, or one the program keeps splitting, is not hammered);
//! ESRCH ends the application (the process is gone); ENOMEM (no free huge
//! page, after the kernel's compaction tried) ends the look, since the next
//! pieces would pay for a failing compaction too; any other refusal is counted
//! and the next piece is tried; EPERM before any success is the permission
//! error, named.

use crate::plan::OutsidePlan;
use crate::process::{errno_name, pieces as piece_states, AttachError, Collapse, Process};
use crate::ranges::{self, Skip};
use crate::report::Report;
use crate::{BASE, HUGE};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The default pause between looks. A look costs one smaps read (well under a
/// millisecond for a program of a few hundred mappings); a program filling
/// memory on 4 KiB pages here populates 50–250 MiB per 100 ms, so at 50 ms a
/// newly filled piece waits about 25 ms on average before it is collapsed, and
/// the looks cost well under 2 % of a CPU (docs/attach.md).
pub const DEFAULT_POLL: Duration = Duration::from_millis(50);
/// Collapse attempts per 2 MiB piece.
pub const MAX_TRIES: u8 = 3;
/// 2 MiB pieces per MADV_COLLAPSE call (32 MiB). Each call begins with the
/// kernel draining every CPU's LRU caches (`lru_add_drain_all`, a wait on a
/// worker of each CPU): on a loaded machine that wait, not the copy, dominated
/// 2 MiB calls (0.1–0.3 GiB/s against 2+ GiB/s at 32 MiB, docs/attach.md). A
/// call stops at its first ENOMEM, and a process that exits or remaps mid-way
/// costs one call.
pub const CALL_PIECES: u64 = 16;
/// Populated 4 KiB pages a 2 MiB piece needs before it is collapsed.
pub const MIN_PRESENT: u32 = (HUGE / BASE / 2) as u32;

#[derive(Debug, Clone)]
pub struct Options {
    /// Pause between looks (watch mode).
    pub poll: Duration,
    /// Look once (false: watch).
    pub once: bool,
    /// Watch at most this long (None: until the process exits or `stop`).
    pub duration: Option<Duration>,
    /// Make every `every`-th collapse fail with `errno` without asking the kernel
    /// (`HUGETUNE_ATTACH_INJECT=ERRNO[:EVERY]`, for tests of the refusal paths).
    pub inject: Option<(i32, u64)>,
    /// Leave mappings advised MADV_HUGEPAGE (`hg`) to the kernel when at
    /// least 3/4 of their resident memory is huge: the fault-time tracer
    /// advised them, so their faults take huge pages and khugepaged collapses
    /// the rest; looking into them (pagemap, a whole read per look) would only
    /// cost the program CPU time. Advised mappings that are mostly not huge
    /// (grown in small steps) are collapsed as any other.
    pub leave_advised: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            poll: DEFAULT_POLL,
            once: false,
            duration: None,
            inject: None,
            leave_advised: false,
        }
    }
}

impl Options {
    /// Reads `HUGETUNE_ATTACH_INJECT` (`ENOMEM`, `EAGAIN`, `EINVAL`, `ESRCH` or
    /// a number, then optionally `:EVERY`).
    pub fn with_env_injection(mut self) -> Result<Options, String> {
        let Ok(v) = std::env::var("HUGETUNE_ATTACH_INJECT") else {
            return Ok(self);
        };
        let (e, every) = v.split_once(':').unwrap_or((&v, "1"));
        let errno = match e {
            "ENOMEM" => libc::ENOMEM,
            "EAGAIN" => libc::EAGAIN,
            "EINVAL" => libc::EINVAL,
            "ESRCH" => libc::ESRCH,
            n => n
                .parse::<i32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("HUGETUNE_ATTACH_INJECT: '{e}' is not an errno"))?,
        };
        let every = every
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("HUGETUNE_ATTACH_INJECT: '{every}' is not a positive count"))?;
        self.inject = Some((errno, every));
        Ok(self)
    }
}

/// Per-piece state across looks.
#[derive(Default)]
struct Pieces {
    tries: HashMap<u64, u8>,
    /// Pieces collapsed (skipped while their mapping stays as huge as they say).
    done: HashSet<u64>,
}

/// Applies `plan` to the process `p` from outside; returns what became huge.
/// `stop` ends watching at the next look.
pub fn attach(
    p: &Process,
    plan: &OutsidePlan,
    opt: &Options,
    stop: Option<&AtomicBool>,
) -> Result<Report, AttachError> {
    let t0 = Instant::now();
    let mut r = Report {
        pid: p.pid,
        categories: plan.categories().iter().map(|s| s.to_string()).collect(),
        notes: plan.notes.clone(),
        ..Default::default()
    };
    let Some(exe) = p.exe()? else {
        r.ended = "exited".into();
        return Ok(r);
    };
    r.program = exe.clone();
    let pagemap = p.pagemap();
    if pagemap.is_none() {
        r.notes
            .push("pagemap unreadable: a mapping is collapsed once its Rss is half of it".into());
    }
    let mut st = Pieces::default();
    let mut calls = 0u64;
    r.ended = loop {
        match look(
            p,
            plan,
            opt,
            &exe,
            pagemap.as_ref(),
            &mut st,
            &mut r,
            &mut calls,
        )? {
            false => break "exited",
            true if opt.once => break "once",
            true => {}
        }
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            break "stopped";
        }
        let wait = match opt.duration {
            Some(d) => match d.checked_sub(t0.elapsed()) {
                Some(left) if !left.is_zero() => left.min(opt.poll),
                _ => break "duration",
            },
            None => opt.poll,
        };
        if p.exited_within(wait) {
            break "exited";
        }
    }
    .into();
    r.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// One look: smaps, collapses, verification. False once the process is gone.
#[allow(clippy::too_many_arguments)]
fn look(
    p: &Process,
    plan: &OutsidePlan,
    opt: &Options,
    exe: &str,
    pagemap: Option<&std::fs::File>,
    st: &mut Pieces,
    r: &mut Report,
    calls: &mut u64,
) -> Result<bool, AttachError> {
    let Some(vmas) = p.smaps()? else {
        return Ok(false);
    };
    r.passes += 1;
    let (targets, skipped) = ranges::targets(&vmas, exe, plan);
    verify(&vmas, &targets, r);
    let nohuge = skipped
        .iter()
        .filter(|(_, w)| *w == Skip::NoHugepage)
        .count() as u64;
    if nohuge > 0 {
        // The most seen at one look.
        let n = r
            .skipped
            .entry("MADV_NOHUGEPAGE mappings".into())
            .or_default();
        *n = (*n).max(nohuge);
    }
    let mut collapsed_any = false;
    let mut advised = 0u64;
    'targets: for t in &targets {
        let v = &vmas[t.vma];
        let huge_now = if t.file { v.file_pmd } else { v.anon_huge };
        let interior = t.end - t.start;
        let pieces: Vec<u64> = (0..interior / HUGE).map(|i| t.start + i * HUGE).collect();
        // Pieces marked done but no longer huge (split by the program or the
        // kernel): look at them again.
        let done_here = pieces.iter().filter(|a| st.done.contains(a)).count() as u64;
        if done_here * HUGE > huge_now {
            for a in &pieces {
                st.done.remove(a);
            }
        }
        // An advised mapping whose resident memory is mostly huge got its
        // pages at fault time: leave it. One that is not (memory grown in
        // steps smaller than a huge page, as a brk heap is: its faults came
        // before the mapping held whole 2 MiB ranges) is collapsed as usual.
        if opt.leave_advised
            && v.flags.iter().any(|f| f == "hg")
            && huge_now.saturating_mul(4) >= v.rss.saturating_mul(3)
        {
            advised += 1;
            r.range_mut(t.kind, v.start).unpopulated_bytes = 0;
            continue;
        }
        if huge_now >= interior || v.rss == 0 {
            r.range_mut(t.kind, v.start).unpopulated_bytes =
                if huge_now >= interior { 0 } else { interior };
            continue;
        }
        let counts = pagemap.and_then(|pm| piece_states(pm, t.start, t.end));
        let mut unpopulated = 0u64;
        let mut due = vec![];
        for (i, &a) in pieces.iter().enumerate() {
            let enough = match &counts {
                // Huge already (at fault time, under the tracer's advice):
                // nothing to collapse.
                Some(c) if c[i].1 => continue,
                Some(c) => c[i].0 >= MIN_PRESENT,
                None => v.rss >= v.len() / 2,
            };
            if !enough {
                unpopulated += HUGE;
                continue;
            }
            if st.done.contains(&a) || st.tries.get(&a).copied().unwrap_or(0) >= MAX_TRIES {
                continue;
            }
            due.push(a);
        }
        r.range_mut(t.kind, v.start).unpopulated_bytes = unpopulated;
        // Runs of adjacent due pieces, at most CALL_PIECES per call.
        let mut runs: Vec<(u64, u64)> = vec![];
        for a in due {
            match runs.last_mut() {
                Some((s, e)) if *e == a && (*e - *s) / HUGE < CALL_PIECES => *e += HUGE,
                _ => runs.push((a, a + HUGE)),
            }
        }
        'runs: for (n, (s, e)) in runs.into_iter().enumerate() {
            // Verified after each call (one smaps read per 32 MiB, small beside
            // the copy): what was made huge is on record even when the process
            // exits in the middle of a long look.
            if n > 0 && !reverify(p, plan, exe, r)? {
                return Ok(false);
            }
            for a in (s..e).step_by(HUGE as usize) {
                *st.tries.entry(a).or_default() += 1;
            }
            *calls += 1;
            r.collapse_calls += 1;
            let c0 = Instant::now();
            let out = match opt.inject {
                Some((e, every)) if (*calls).is_multiple_of(every) => Collapse::Failed(e),
                _ => p.collapse(s, e),
            };
            r.collapse_s += c0.elapsed().as_secs_f64();
            let run = (s, e);
            match out {
                Collapse::Done => {
                    st.done.extend((s..e).step_by(HUGE as usize));
                    r.collapsed_bytes += e - s;
                    r.range_mut(t.kind, v.start).collapsed_bytes += e - s;
                    collapsed_any = true;
                }
                Collapse::Failed(libc::ESRCH) => {
                    r.fail(t.kind, v.start, "ESRCH");
                    return Ok(false);
                }
                Collapse::Failed(libc::EPERM) if r.collapsed_bytes == 0 && opt.inject.is_none() => {
                    return Err(p.permission_error());
                }
                Collapse::Failed(libc::EINVAL) if t.file && opt.inject.is_none() => {
                    // The executable's writable segment is a private file
                    // mapping: its written pages are anonymous copies, not
                    // page cache, and the kernel refuses to collapse it
                    // (measured on 6.18, docs/attach.md). Not a failure: it
                    // is left alone for good.
                    for a in pieces.iter() {
                        st.tries.insert(*a, MAX_TRIES);
                    }
                    *r.skipped
                        .entry(
                            "writable file segments the kernel does not collapse (EINVAL)".into(),
                        )
                        .or_default() += 1;
                    break 'runs;
                }
                Collapse::Failed(e) => {
                    // Pieces before the refused one may be huge now (a 32 MiB
                    // call refused with EAGAIN part way had collapsed 12 MiB):
                    // pagemap says which, so that they are counted as this
                    // call's work; smaps verifies the total anyway.
                    collapsed_any = true;
                    let now = pagemap.and_then(|pm| piece_states(pm, run.0, run.1));
                    for (i, _) in now.iter().flatten().enumerate().filter(|(_, x)| x.1) {
                        if st.done.insert(run.0 + i as u64 * HUGE) {
                            r.collapsed_bytes += HUGE;
                            r.range_mut(t.kind, v.start).collapsed_bytes += HUGE;
                        }
                    }
                    let mut why = errno_name(e);
                    if opt.inject.is_some_and(|(ie, _)| ie == e) {
                        why.push_str(" (injected)");
                    }
                    r.fail(t.kind, v.start, &why);
                    if e == libc::ENOMEM {
                        // No huge page to be had now (the kernel's compaction
                        // failed): the next look tries again.
                        break 'targets;
                    }
                }
            }
        }
    }
    if advised > 0 {
        // The most seen at one look.
        let n = r
            .skipped
            .entry("mappings advised MADV_HUGEPAGE, left to the kernel".into())
            .or_default();
        *n = (*n).max(advised);
    }
    // What the collapses made: read back, the proof that counts.
    if collapsed_any && !reverify(p, plan, exe, r)? {
        return Ok(false);
    }
    Ok(true)
}

/// Reads smaps again and records what is huge; false once the process is gone.
fn reverify(
    p: &Process,
    plan: &OutsidePlan,
    exe: &str,
    r: &mut Report,
) -> Result<bool, AttachError> {
    match p.smaps()? {
        Some(vmas) => {
            let (targets, _) = ranges::targets(&vmas, exe, plan);
            verify(&vmas, &targets, r);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Records what smaps says of the planned ranges now.
fn verify(vmas: &[crate::maps::Vma], targets: &[ranges::Target], r: &mut Report) {
    let (mut planned, mut huge) = (0u64, 0u64);
    for t in targets {
        let v = &vmas[t.vma];
        let h = if t.file { v.file_pmd } else { v.anon_huge }.min(t.end - t.start);
        r.fold_merged(t.kind, v.start, t.start, t.end);
        let x = r.range_mut(t.kind, v.start);
        x.mapping_end = v.end;
        x.start = t.start;
        x.end = t.end;
        x.rss = v.rss;
        x.huge_bytes = x.huge_bytes.max(h);
        planned += t.end - t.start;
        huge += h;
    }
    r.planned_bytes = r.planned_bytes.max(planned);
    r.huge_bytes = r.huge_bytes.max(huge);
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_model::category::Category;
    use hugetune_model::page::Backing;

    /// A child that maps 64 MiB, touches its first 40 MiB and waits: a look
    /// collapses the touched part only (the population rule), the contents
    /// stay, and the report says what smaps verified.
    #[test]
    fn a_look_collapses_what_the_program_populated_and_nothing_else() {
        // up: child → parent ("ready", then its verdict); down: parent → child.
        let (mut up, mut down) = ([0i32; 2], [0i32; 2]);
        // SAFETY: two pipes of our own.
        assert_eq!(unsafe { libc::pipe(up.as_mut_ptr()) }, 0);
        assert_eq!(unsafe { libc::pipe(down.as_mut_ptr()) }, 0);
        let len = 64usize << 20;
        // SAFETY: the child only makes system calls and writes its own memory
        // before it waits to be killed (no allocation, no locks).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                ) as *mut u8;
                for i in 0..(40usize << 20) {
                    *p.add(i) = (i % 251) as u8;
                }
                libc::write(up[1], b"r".as_ptr().cast(), 1);
                // Wait for the look, then check the contents and say so.
                let mut b = [0u8; 1];
                libc::read(down[0], b.as_mut_ptr().cast(), 1);
                let ok = (0..(40usize << 20)).all(|i| *p.add(i) == (i % 251) as u8);
                libc::write(up[1], if ok { b"y" } else { b"n" }.as_ptr().cast(), 1);
                libc::pause();
                libc::_exit(0);
            }
        }
        let mut b = [0u8; 1];
        // SAFETY: reading one byte from our pipe.
        assert_eq!(unsafe { libc::read(up[0], b.as_mut_ptr().cast(), 1) }, 1);
        assert_eq!(b[0], b'r');
        let p = Process::open(pid as u32).unwrap();
        let plan = OutsidePlan::from_assignments(&[(Category::HeapLarge, Backing::Thp2m)], 1 << 20);
        let opt = Options {
            once: true,
            ..Default::default()
        };
        let r = attach(&p, &plan, &opt, None);
        // SAFETY: let the child check its memory, read its answer, end it.
        unsafe {
            libc::write(down[1], b"g".as_ptr().cast(), 1);
            libc::read(up[0], b.as_mut_ptr().cast(), 1);
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            for fd in up.into_iter().chain(down) {
                libc::close(fd);
            }
        }
        let r = match r {
            Ok(r) => r,
            // Without CAP_SYS_NICE the error must say so.
            Err(e) => {
                assert!(!crate::process::has_cap_sys_nice(), "{e}");
                assert!(e.to_string().contains("CAP_SYS_NICE"), "{e}");
                return;
            }
        };
        assert_eq!(b[0], b'y', "the child's memory changed");
        assert_eq!(r.ended, "once");
        let big = r
            .ranges
            .iter()
            .find(|x| x.planned_bytes() >= 60 << 20)
            .expect("the 64 MiB range");
        // The 40 MiB touched start at an unaligned address: 19 or 20 whole
        // pieces populated; the rest of the mapping untouched and left alone.
        assert!(
            big.huge_bytes >= 38 << 20 && big.huge_bytes <= 40 << 20,
            "{r:#?}"
        );
        assert!(big.unpopulated_bytes >= 20 << 20, "{r:#?}");
        assert_eq!(r.failures.len(), 0, "{r:#?}");
        assert!(r.huge_bytes >= big.huge_bytes);
    }
}
