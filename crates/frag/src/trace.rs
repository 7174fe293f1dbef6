//! kmem tracepoints through tracefs: counting `mm_page_alloc_extfrag` (fallback)
//! events, and recording `mm_page_alloc` / `mm_page_free` into the
//! `hugetune-pagealloc v1` file format (docs/frag.md).
//!
//! State: the session takes the kernel-state lock, mounts tracefs at
//! `/sys/kernel/tracing` if it is not mounted, and works in a private **instance**
//! (`instances/hugetune-<pid>`: its own ring buffer, clock and event switches), so
//! the global enable switches, buffer size and clock are never changed. At the end
//! — on return, on error, and on Ctrl-C through `kernel_state::on_restore` — the
//! instance's events are disabled, the instance removed, and tracefs unmounted if
//! this session mounted it.

use anyhow::{bail, Context, Result};
use hugetune_host::kernel_state::{self, KernelStateLock, Restore};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const TRACEFS: &str = "/sys/kernel/tracing";

// ---------------------------------------------------------------- text parsing

/// One parsed trace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<'a> {
    /// Timestamp in ns (the text format prints microseconds).
    pub ts_ns: u64,
    pub name: &'a str,
    pub fields: Vec<(&'a str, &'a str)>,
}

impl Event<'_> {
    pub fn field(&self, k: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }
    /// Integer field; `0x…` is hexadecimal (6.x prints pfn=0x…, 4.x pfn=…).
    pub fn int(&self, k: &str) -> Option<i64> {
        let v = self.field(k)?;
        if let Some(h) = v.strip_prefix("0x") {
            i64::from_str_radix(h, 16)
                .ok()
                .or_else(|| u64::from_str_radix(h, 16).ok().map(|x| x as i64))
        } else {
            v.parse::<i64>().ok()
        }
    }
}

/// Parses `"secs.usecs"` into nanoseconds.
fn parse_ts(s: &str) -> Option<u64> {
    let (a, b) = s.split_once('.')?;
    let secs: u64 = a.parse().ok()?;
    if b.is_empty() || b.len() > 9 || !b.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let frac: u64 = b.parse().ok()?;
    let scale = 10u64.pow(9 - b.len() as u32);
    secs.checked_mul(1_000_000_000)?.checked_add(frac * scale)
}

/// Parses a `trace`/`trace_pipe` text line for one of `names`:
/// `  task-pid  [cpu] flags  12345.678901: mm_page_alloc: page=… pfn=0x… order=0 …`.
/// Returns None for other events, comments and malformed lines.
pub fn parse_line<'a>(line: &'a str, names: &[&'a str]) -> Option<Event<'a>> {
    for &name in names {
        let pat_len = name.len() + 3;
        let mut from = 0;
        while let Some(p) = line[from..].find(name) {
            let at = from + p;
            from = at + 1;
            // Must be " name: " exactly (not a prefix of a longer event name).
            if at == 0 || line.as_bytes()[at - 1] != b' ' {
                continue;
            }
            if !line[at + name.len()..].starts_with(": ") {
                continue;
            }
            let prefix = line[..at].trim_end();
            let ts_tok = prefix
                .rsplit(char::is_whitespace)
                .next()?
                .strip_suffix(':')?;
            let ts_ns = parse_ts(ts_tok)?;
            let rest = &line[(at + pat_len - 1).min(line.len())..];
            let fields = rest
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .collect();
            return Some(Event {
                ts_ns,
                name,
                fields,
            });
        }
    }
    None
}

// ---------------------------------------------------------------- extfrag counts

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PairCounts {
    pub events: u64,
    /// fallback_order < pageblock_order: the event mixed a pageblock.
    pub fragmenting: u64,
    /// The whole pageblock changed to the allocation's migratetype.
    pub change_ownership: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ExtfragCounts {
    pub seconds: f64,
    pub events: u64,
    pub fragmenting: u64,
    pub change_ownership: u64,
    /// Keyed "alloc_migratetype->fallback_migratetype" by kernel number.
    pub by_migratetype: BTreeMap<String, PairCounts>,
    /// Events the ring buffer lost (overrun), and lines that did not parse.
    pub lost: u64,
    pub unparsed: u64,
}

impl ExtfragCounts {
    /// Counts one `mm_page_alloc_extfrag` event; false when its fields are missing.
    pub fn add(&mut self, e: &Event) -> bool {
        let (Some(a), Some(f)) = (e.int("alloc_migratetype"), e.int("fallback_migratetype")) else {
            return false;
        };
        let frag = match e.int("fragmenting") {
            Some(v) => v != 0,
            None => match (e.int("fallback_order"), e.int("pageblock_order")) {
                (Some(fo), Some(po)) => fo < po,
                _ => return false,
            },
        };
        let own = e.int("change_ownership").unwrap_or(0) != 0;
        self.events += 1;
        self.fragmenting += frag as u64;
        self.change_ownership += own as u64;
        let p = self.by_migratetype.entry(format!("{a}->{f}")).or_default();
        p.events += 1;
        p.fragmenting += frag as u64;
        p.change_ownership += own as u64;
        true
    }
}

// ---------------------------------------------------------------- record format

/// A zone line of the record header (from zoneinfo).
pub fn zone_header_lines(zoneinfo: &str) -> Result<Vec<String>> {
    let z = crate::parse::parse_zoneinfo(zoneinfo, "/proc/zoneinfo")?;
    Ok(z.iter()
        .filter(|z| z.populated())
        .map(|z| {
            format!(
                "# zone node={} name={} start_pfn={} spanned={} present={} managed={}",
                z.node,
                z.name,
                z.start_pfn.unwrap_or(0),
                z.spanned,
                z.present,
                z.managed
            )
        })
        .collect())
}

/// Turns trace lines into `hugetune-pagealloc v1` event lines.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Trace time of the start; None: taken from the first event (when the
    /// instance could not use the `mono` clock).
    pub start_ns: Option<u64>,
    /// Events the kernel reported lost in the stream (`CPU:n [LOST k EVENTS]`).
    pub lost: u64,
    pub allocs: u64,
    pub frees: u64,
    pub failed: u64,
    pub unparsed: u64,
}

/// `CPU:1 [LOST 123 EVENTS]`, which trace_pipe prints where the ring buffer overflowed.
pub fn lost_events(line: &str) -> Option<u64> {
    let r = line.split_once("[LOST ")?.1;
    r.split_once(" EVENTS]")?.0.trim().parse().ok()
}

const RECORD_EVENTS: [&str; 2] = ["mm_page_alloc", "mm_page_free"];

impl Recorder {
    /// Writes the event line for one trace line (if it is an alloc/free event).
    pub fn line(&mut self, line: &str, out: &mut dyn Write) -> std::io::Result<()> {
        let Some(e) = parse_line(line, &RECORD_EVENTS) else {
            if let Some(n) = lost_events(line) {
                self.lost += n;
            } else if line.contains(" mm_page_alloc: ") || line.contains(" mm_page_free: ") {
                self.unparsed += 1;
            }
            return Ok(());
        };
        let start = *self.start_ns.get_or_insert(e.ts_ns);
        let t = e.ts_ns.saturating_sub(start);
        let (pfn, order) = (e.int("pfn"), e.int("order"));
        match (e.name, pfn, order) {
            ("mm_page_alloc", Some(pfn), Some(order)) => {
                if pfn <= 0
                    || e.field("page")
                        .is_some_and(|p| p.contains("nil") || p.contains("null"))
                {
                    self.failed += 1;
                    return Ok(());
                }
                let Some(mt) = e.int("migratetype") else {
                    self.unparsed += 1;
                    return Ok(());
                };
                self.allocs += 1;
                writeln!(out, "{t} A {pfn} {order} {mt}")
            }
            ("mm_page_free", Some(pfn), Some(order)) => {
                if pfn <= 0 {
                    self.failed += 1;
                    return Ok(());
                }
                self.frees += 1;
                writeln!(out, "{t} F {pfn} {order}")
            }
            _ => {
                self.unparsed += 1;
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RecordSummary {
    pub path: PathBuf,
    pub seconds: f64,
    pub allocs: u64,
    pub frees: u64,
    pub failed: u64,
    /// Ring-buffer overruns plus unparsable lines.
    pub dropped: u64,
}

// ---------------------------------------------------------------- tracefs session

fn mounted_at(mountpoint: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(mountpoint))
        })
        .unwrap_or(false)
}

fn write_file(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("writing {v:?} to {}", p.display()))
}

/// A private tracefs instance with some kmem events enabled; everything is
/// undone on drop and on interrupt.
pub struct Session {
    pub dir: PathBuf,
    fd: Arc<AtomicI32>,
    /// Monotonic time (ns, CLOCK_MONOTONIC = trace clock "mono") when enabled.
    pub start_ns: u64,
    /// The instance's trace clock is `mono` (timestamps comparable with start_ns).
    pub mono: bool,
    events: Vec<String>,
    _restore: Restore,
    _lock: KernelStateLock,
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn teardown(dir: &Path, fd: &AtomicI32, events: &[String], unmount: bool) {
    // The session's thread may be opening trace_pipe while an interrupt tears the
    // session down: close whatever descriptor it has stored, on every attempt.
    let close_fd = || {
        let f = fd.swap(-1, Ordering::SeqCst);
        if f >= 0 {
            // SAFETY: the descriptor was opened by the session and is closed once.
            unsafe { libc::close(f) };
        }
    };
    close_fd();
    for e in events {
        let _ = std::fs::write(dir.join("events/kmem").join(e).join("enable"), "0");
    }
    if dir.exists() {
        let mut ok = false;
        for _ in 0..100 {
            close_fd();
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !ok {
            eprintln!(
                "hugetune: could not remove the tracefs instance {}",
                dir.display()
            );
        }
    }
    if unmount {
        if let Ok(c) = CString::new(TRACEFS) {
            // EBUSY can be a moment's: the instance's last reader is still
            // closing (seen once in the suite). Tried for up to 2 s.
            let mut err = None;
            for _ in 0..100 {
                // SAFETY: umount2 with a valid C string.
                if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
                    err = None;
                    break;
                }
                let e = std::io::Error::last_os_error();
                let busy = e.raw_os_error() == Some(libc::EBUSY);
                err = Some(e);
                if !busy {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(e) = err {
                eprintln!("hugetune: could not unmount {TRACEFS}: {e}");
            }
        }
    }
}

impl Session {
    /// Starts tracing `events` (kmem event names) with `buffer_kb` per CPU.
    pub fn start(events: &[&str], buffer_kb: u64) -> Result<Session> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("tracing kmem events needs root (tracefs at {TRACEFS})");
        }
        let lock = kernel_state::lock_kernel_state()?;
        let mount = !mounted_at(TRACEFS);
        let dir = Path::new(TRACEFS)
            .join("instances")
            .join(format!("hugetune-{}", std::process::id()));
        // Journaled before anything is made, undone by the next hugetune after a
        // kill: the instance removed (its events go with it), then the unmount.
        let mut undo = vec![kernel_state::Undo::RemoveDir { path: dir.clone() }];
        if mount {
            undo.push(kernel_state::Undo::Unmount {
                path: TRACEFS.into(),
            });
        }
        let fd = Arc::new(AtomicI32::new(-1));
        let events: Vec<String> = events.iter().map(|s| s.to_string()).collect();
        let restore = {
            let (dir, fd, events) = (dir.clone(), fd.clone(), events.clone());
            kernel_state::on_restore_journaled(
                &format!("the tracefs instance {}", dir.display()),
                undo,
                move || teardown(&dir, &fd, &events, mount),
            )?
        };
        if mount {
            let (src, tgt, ty) = (
                CString::new("nodev")?,
                CString::new(TRACEFS)?,
                CString::new("tracefs")?,
            );
            // SAFETY: mount with valid C strings and no data.
            if unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) }
                != 0
            {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("mounting tracefs at {TRACEFS}"));
            }
        }
        let s = Session {
            dir: dir.clone(),
            fd,
            start_ns: 0,
            mono: false,
            events,
            _restore: restore,
            _lock: lock,
        };
        std::fs::create_dir(&dir)
            .with_context(|| format!("creating tracefs instance {}", dir.display()))?;
        for e in &s.events {
            if !dir.join("events/kmem").join(e).exists() {
                bail!("this kernel has no kmem:{e} tracepoint");
            }
        }
        let mono = write_file(&dir.join("trace_clock"), "mono").is_ok();
        write_file(&dir.join("buffer_size_kb"), &buffer_kb.to_string())?;
        let pipe = dir.join("trace_pipe");
        let c = CString::new(pipe.as_os_str().as_encoded_bytes())?;
        // SAFETY: open with a valid path; the fd is owned by the session.
        let f = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if f < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("opening {}", pipe.display()));
        }
        s.fd.store(f, Ordering::SeqCst);
        let mut s = s;
        s.mono = mono;
        s.start_ns = mono_ns();
        for e in &s.events {
            write_file(&dir.join("events/kmem").join(e).join("enable"), "1")?;
        }
        Ok(s)
    }

    /// Reads what is there now (non-blocking); 0 when nothing.
    fn read_some(&self, buf: &mut [u8]) -> Result<usize> {
        let f = self.fd.load(Ordering::SeqCst);
        if f < 0 {
            bail!("trace session closed");
        }
        // SAFETY: reading into a buffer we own from our descriptor.
        let r = unsafe { libc::read(f, buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::EINTR) {
                return Ok(0);
            }
            return Err(e).context("reading trace_pipe");
        }
        Ok(r as usize)
    }

    /// Feeds complete lines to `f` for `duration`, then disables the events and
    /// drains what is left.
    pub fn pump(&self, duration: Duration, mut f: impl FnMut(&str) -> Result<()>) -> Result<f64> {
        let t0 = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        let mut pending: Vec<u8> = Vec::new();
        let mut enabled = true;
        let mut idle_after_disable = 0;
        loop {
            let n = self.read_some(&mut buf)?;
            if n > 0 {
                pending.extend_from_slice(&buf[..n]);
                if let Some(last_nl) = pending.iter().rposition(|&b| b == b'\n') {
                    let text = String::from_utf8_lossy(&pending[..last_nl]);
                    for l in text.lines() {
                        f(l)?;
                    }
                    pending.drain(..=last_nl);
                }
            } else if enabled {
                std::thread::sleep(Duration::from_millis(20));
            } else {
                idle_after_disable += 1;
                if idle_after_disable >= 3 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if enabled && t0.elapsed() >= duration {
                self.disable()?;
                enabled = false;
            }
        }
        let secs = t0
            .elapsed()
            .as_secs_f64()
            .min(duration.as_secs_f64().max(0.0));
        if !pending.is_empty() {
            f(&String::from_utf8_lossy(&pending))?;
        }
        Ok(secs)
    }

    pub fn disable(&self) -> Result<()> {
        for e in &self.events {
            write_file(&self.dir.join("events/kmem").join(e).join("enable"), "0")?;
        }
        Ok(())
    }

    /// Events the ring buffer lost (per-CPU `overrun` + `dropped events`).
    pub fn lost(&self) -> u64 {
        let mut n = 0;
        let Ok(rd) = std::fs::read_dir(self.dir.join("per_cpu")) else {
            return 0;
        };
        for e in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(e.path().join("stats")) {
                for l in s.lines() {
                    if let Some((k, v)) = l.split_once(':') {
                        if k.trim() == "overrun" || k.trim() == "dropped events" {
                            n += v.trim().parse::<u64>().unwrap_or(0);
                        }
                    }
                }
            }
        }
        n
    }
}

/// `--events DURATION`: counts `kmem:mm_page_alloc_extfrag` events.
pub fn count_extfrag(duration: Duration) -> Result<ExtfragCounts> {
    let s = Session::start(&["mm_page_alloc_extfrag"], 4096)?;
    let mut c = ExtfragCounts::default();
    let mut unparsed = 0;
    let mut lost_lines = 0;
    let secs = s.pump(duration, |l| {
        lost_lines += lost_events(l).unwrap_or(0);
        let counted = match parse_line(l, &["mm_page_alloc_extfrag"]) {
            Some(e) => c.add(&e),
            None => !l.contains("mm_page_alloc_extfrag"),
        };
        unparsed += u64::from(!counted);
        Ok(())
    })?;
    c.seconds = secs;
    c.unparsed = unparsed;
    c.lost = s.lost().max(lost_lines);
    Ok(c)
}

enum Out {
    Plain(std::io::BufWriter<std::fs::File>),
    Zstd(zstd::stream::write::Encoder<'static, std::io::BufWriter<std::fs::File>>),
}

impl Out {
    fn w(&mut self) -> &mut dyn Write {
        match self {
            Out::Plain(w) => w,
            Out::Zstd(w) => w,
        }
    }
    fn finish(self) -> Result<()> {
        match self {
            Out::Plain(mut w) => w.flush()?,
            Out::Zstd(w) => {
                w.finish()?.flush()?;
            }
        }
        Ok(())
    }
}

/// Writes the record header (format line and zone lines).
pub fn write_header(out: &mut dyn Write, zoneinfo: &str, kernel: Option<&str>) -> Result<()> {
    writeln!(out, "# hugetune-pagealloc v1")?;
    if let Some(k) = kernel {
        writeln!(out, "# kernel {k}")?;
    }
    for l in zone_header_lines(zoneinfo)? {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// `--record FILE --duration D`: `mm_page_alloc` + `mm_page_free` into FILE
/// (zstd-compressed when FILE ends in `.zst`).
pub fn record(path: &Path, duration: Duration) -> Result<RecordSummary> {
    let zoneinfo = std::fs::read_to_string("/proc/zoneinfo").context("reading /proc/zoneinfo")?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let bw = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut out = if path.extension().is_some_and(|e| e == "zst") {
        Out::Zstd(zstd::stream::write::Encoder::new(bw, 3)?)
    } else {
        Out::Plain(bw)
    };
    write_header(out.w(), &zoneinfo, kernel.as_deref())?;
    // Big buffers: alloc/free events come at hundreds of thousands per second.
    let s = Session::start(&RECORD_EVENTS, 65536)?;
    let mut rec = Recorder {
        start_ns: s.mono.then_some(s.start_ns),
        ..Default::default()
    };
    let secs = s.pump(duration, |l| {
        rec.line(l, out.w())
            .with_context(|| format!("writing {}", path.display()))
    })?;
    // The per-CPU overrun counters and the LOST markers count the same events.
    let lost = s.lost().max(rec.lost);
    drop(s);
    let dropped = lost + rec.unparsed;
    writeln!(out.w(), "# dropped={dropped} failed={}", rec.failed)?;
    out.finish()
        .with_context(|| format!("finishing {}", path.display()))?;
    Ok(RecordSummary {
        path: path.to_path_buf(),
        seconds: secs,
        allocs: rec.allocs,
        frees: rec.frees,
        failed: rec.failed,
        dropped,
    })
}

/// Parses a duration: `10`, `10s`, `500ms`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("duration {s:?}: expected e.g. 10s, 500ms, 2m"))?;
    let secs = v * mult;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86400.0) {
        bail!("duration {s:?} must be more than 0 and at most a day");
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXTFRAG_6: &str = "     kworker/u8:3-2211    [001] d..2.  4471.103617: mm_page_alloc_extfrag: page=000000003f2c4a9e pfn=0x2a8e00 alloc_order=0 fallback_order=9 pageblock_order=9 alloc_migratetype=0 fallback_migratetype=1 fragmenting=0 change_ownership=1";
    const EXTFRAG_4: &str = "            bash-1203  [000] ....   812.413322: mm_page_alloc_extfrag: page=ffffea0004b37000 pfn=1232320 alloc_order=0 fallback_order=3 pageblock_order=9 alloc_migratetype=2 fallback_migratetype=1 fragmenting=1 change_ownership=0";
    const ALLOC: &str = "   cc1-5123    [000] ..... 15331.000002: mm_page_alloc: page=00000000b1c0e9f5 pfn=0x13f2a1 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_ZERO";
    const ALLOC_FAIL: &str = "   cc1-5123    [000] ..... 15331.000003: mm_page_alloc: page=0000000000000000 pfn=0x0 order=9 migratetype=1 gfp_flags=GFP_TRANSHUGE";
    const FREE: &str = "   <idle>-0       [001] ..s1. 15331.000010: mm_page_free: page=00000000a22c9a2b pfn=0x1a0b7c order=2";

    #[test]
    fn parses_event_lines_of_both_formats() {
        let e = parse_line(EXTFRAG_6, &["mm_page_alloc_extfrag"]).unwrap();
        assert_eq!(e.ts_ns, 4_471_103_617_000);
        assert_eq!(e.int("pfn"), Some(0x2a8e00));
        assert_eq!(e.int("fallback_migratetype"), Some(1));
        let e4 = parse_line(EXTFRAG_4, &["mm_page_alloc_extfrag"]).unwrap();
        assert_eq!(e4.int("pfn"), Some(1232320));
        // mm_page_alloc must not match mm_page_alloc_extfrag lines.
        assert!(parse_line(EXTFRAG_6, &["mm_page_alloc"]).is_none());
        assert!(parse_line("# tracer: nop", &["mm_page_alloc"]).is_none());
        assert!(parse_line("garbage mm_page_alloc: x", &["mm_page_alloc"]).is_none());
    }

    #[test]
    fn extfrag_counts_split_by_migratetype_and_flags() {
        let mut c = ExtfragCounts::default();
        for l in [EXTFRAG_6, EXTFRAG_4, EXTFRAG_6] {
            assert!(c.add(&parse_line(l, &["mm_page_alloc_extfrag"]).unwrap()));
        }
        assert_eq!((c.events, c.fragmenting, c.change_ownership), (3, 1, 2));
        assert_eq!(c.by_migratetype["0->1"].events, 2);
        assert_eq!(c.by_migratetype["2->1"].fragmenting, 1);
        // Without the fragmenting field it is derived from the orders.
        let l = EXTFRAG_4.replace(" fragmenting=1", "");
        let mut d = ExtfragCounts::default();
        assert!(d.add(&parse_line(&l, &["mm_page_alloc_extfrag"]).unwrap()));
        assert_eq!(d.fragmenting, 1);
    }

    #[test]
    fn recorder_writes_the_v1_lines() {
        let mut r = Recorder {
            start_ns: Some(15_331_000_000_000),
            ..Default::default()
        };
        let mut out = Vec::new();
        for l in [ALLOC, ALLOC_FAIL, FREE, "junk", EXTFRAG_6] {
            r.line(l, &mut out).unwrap();
        }
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            format!("2000 A {} 0 1\n10000 F {} 2\n", 0x13f2a1, 0x1a0b7c)
        );
        assert_eq!((r.allocs, r.frees, r.failed, r.unparsed), (1, 1, 1, 0));
        // Without a known start, times count from the first event.
        let mut r = Recorder::default();
        let mut out = Vec::new();
        for l in [FREE, "CPU:1 [LOST 17 EVENTS]", ALLOC] {
            r.line(l, &mut out).unwrap();
        }
        assert!(String::from_utf8(out).unwrap().starts_with("0 F "));
        assert_eq!(r.lost, 17);
        assert_eq!(lost_events("CPU:0 [LOST 3 EVENTS]"), Some(3));
    }

    #[test]
    fn record_header_lists_populated_zones() {
        let zi = include_str!("../tests/fixtures/6.18-live/zoneinfo");
        let l = zone_header_lines(zi).unwrap();
        assert_eq!(l.len(), 3);
        assert!(l[0].starts_with("# zone node=0 name=DMA start_pfn=1 spanned=4095 present="));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
