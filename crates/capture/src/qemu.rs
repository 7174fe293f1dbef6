//! Reference capture with QEMU user-mode emulation (`qemu-x86_64`) and hugetune's
//! TCG plugin (`qemu-plugin/`, `libhugetune-qemu.so`): every memory access of the
//! guest goes through the plugin, which keeps the references to sampled pages
//! (SHARDS, fixed-rate or fixed-size) or all of them, and writes a reference stream
//! version 2 (docs/formats.md §6) itself. Much faster than lackey: the plugin
//! encodes in-process, no text crosses a pipe.
//!
//! The runtime library runs *inside the guest* (`-E LD_PRELOAD=...`); the host
//! qemu process never preloads it. Its marker area is mapped at a fixed address
//! (`HUGETUNE_MARKER_ADDR`) that the plugin is told too (`markers=BASE:SPAN`), so
//! marker loads are always kept whatever the sampling.

use anyhow::{bail, Context, Result};
use hugetune_format::refstream::{RefReader, StreamHeader, Totals};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Where the runtime library maps its marker area under qemu (1 MiB, 1 MiB aligned,
/// far from where either the kernel or qemu-user put mappings by default).
pub const MARKER_ADDR: u64 = 0x2000_0000_0000;
/// The marker area of the plugin's own allocation record (`alloc=`,
/// formats.md §2.10): non-canonical addresses, which no guest access can have.
pub const ALLOC_MARKER_ADDR: u64 = 0x8000_0000_0000_0000;
/// The marker span of the runtime library (`HT_MARKER_SPAN`, formats.md §2.4).
pub const MARKER_SPAN: u64 = 1 << 20;

/// The modulus P of the plugin's hash space.
pub const MODULUS: u64 = 1 << 24;

pub const INSTALL_HINT: &str = "install it with `apt-get install qemu-user` (Debian/Ubuntu)";

/// How the plugin samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Every reference (like lackey).
    Complete,
    /// SHARDS fixed-rate: pages with `hash % P < rate * P`.
    Rate(f64),
    /// SHARDS fixed-size: at most this many sampled pages (starting at rate 1).
    MaxPages(u64),
    /// Fixed-size with a reference budget as well: the threshold also falls
    /// (halving the page sample) whenever the references the sample keeps pass
    /// `max_refs` (qemu-plugin/README.md), so a program's profile costs about the
    /// same whatever its reference rate. The threshold starts at `start_rate`
    /// (1: every page), so a program whose footprint is known to be large is not
    /// kept whole until its sample fills (docs/model.md §3.3).
    Budget {
        max_pages: u64,
        max_refs: u64,
        start_rate: f64,
    },
}

impl Sampling {
    /// The stream's `sampling` name (formats.md §6).
    pub fn name(&self) -> &'static str {
        match self {
            Sampling::Complete => "complete",
            Sampling::Rate(_) => "spatial-rate",
            Sampling::MaxPages(_) | Sampling::Budget { .. } => "spatial-size",
        }
    }

    /// The plugin's sampling arguments.
    fn plugin_args(&self) -> Result<Vec<String>> {
        Ok(match *self {
            Sampling::Complete => vec!["sampling=complete".into()],
            Sampling::Rate(r) => {
                if !(r > 0.0 && r <= 1.0) {
                    bail!("sampling rate {r} is not in (0, 1]");
                }
                let t = ((r * MODULUS as f64).round() as u64).clamp(1, MODULUS);
                vec![
                    "sampling=rate".into(),
                    format!("modulus={MODULUS}"),
                    format!("threshold={t}"),
                ]
            }
            Sampling::MaxPages(s) => {
                if s == 0 || s > 1 << 30 {
                    bail!("--max-pages {s} is not in 1..=2^30");
                }
                vec![
                    "sampling=size".into(),
                    format!("modulus={MODULUS}"),
                    format!("max_pages={s}"),
                ]
            }
            Sampling::Budget {
                max_pages,
                max_refs,
                start_rate,
            } => {
                if max_pages == 0 || max_pages > 1 << 30 {
                    bail!("--max-pages {max_pages} is not in 1..=2^30");
                }
                if max_refs == 0 {
                    bail!("a reference budget of 0");
                }
                if !(start_rate > 0.0 && start_rate <= 1.0) {
                    bail!("starting sampling rate {start_rate} is not in (0, 1]");
                }
                let t = ((start_rate * MODULUS as f64).round() as u64).clamp(1, MODULUS);
                vec![
                    "sampling=size".into(),
                    format!("modulus={MODULUS}"),
                    format!("threshold={t}"),
                    format!("max_pages={max_pages}"),
                    format!("max_refs={max_refs}"),
                ]
            }
        })
    }
}

/// `qemu-x86_64`: `HUGETUNE_QEMU` if set, else the first on PATH. `None` if absent.
pub fn find_qemu() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HUGETUNE_QEMU") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    crate::elf::resolve_program(OsStr::new("qemu-x86_64"))
}

/// The path of `qemu-x86_64`, or an error that says how to install it.
pub fn require_qemu() -> Result<PathBuf> {
    find_qemu().with_context(|| {
        format!("qemu-x86_64 (QEMU user-mode emulation) is not installed; {INSTALL_HINT}, or use --refs valgrind")
    })
}

/// Progress of a running capture, from the plugin's progress file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// References seen so far, sampled or not (all threads).
    pub refs_seen: u64,
    /// REF records written (or buffered).
    pub refs_written: u64,
    /// Pages in the sample now.
    pub pages: u64,
    /// The current threshold.
    pub threshold: u64,
}

/// Reads the plugin's progress file (`None` while it has none).
pub fn read_progress(path: &Path) -> Option<Progress> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    match v[..] {
        [refs_seen, refs_written, pages, threshold] => Some(Progress {
            refs_seen,
            refs_written,
            pages,
            threshold,
        }),
        _ => None,
    }
}

pub struct QemuRun {
    pub status: ExitStatus,
    pub header: StreamHeader,
    pub totals: Totals,
    /// Distinct sampled pages in the stream (markers excluded).
    pub pages: u64,
    /// The threshold at the end (spatial-size: after its last fall).
    pub final_threshold: Option<u64>,
    /// The stream's format version.
    pub version: u32,
    /// The marker area (`QemuSpec::markers` or `alloc`) and the references
    /// in it, counted by the scan that checked the stream.
    pub marker_area: Option<(u64, u64)>,
    pub marker_refs: u64,
    pub elapsed: Duration,
    /// The end of qemu's and the plugin's messages on stderr, for diagnostics.
    pub messages: Vec<String>,
    /// What the driver did, for a server.
    pub driver: Option<crate::session::DriverOutcome>,
}

fn no_comma(what: &str, s: &OsStr) -> Result<()> {
    if s.as_bytes().contains(&b',') {
        bail!(
            "{what} '{}' contains a comma, which qemu's option syntax cannot carry; use a path without one (TMPDIR for scratch files)",
            s.to_string_lossy()
        );
    }
    Ok(())
}

pub struct QemuSpec<'a> {
    pub qemu: &'a Path,
    pub plugin: &'a Path,
    pub argv: &'a [OsString],
    /// The guest's environment additions (the runtime library's, `LD_PRELOAD` included).
    pub guest_env: &'a [(String, String)],
    /// The raw stream the plugin writes.
    pub out: &'a Path,
    pub sampling: Sampling,
    pub seed: u64,
    /// Tell the plugin where the marker area is (the library maps it at MARKER_ADDR).
    pub markers: bool,
    /// A scratch directory for the progress file.
    pub scratch: &'a Path,
    /// The program is a server driven by this client (session.rs): qemu gets
    /// SIGTERM, which the guest's handler sees, when the driver ends.
    pub driver: Option<&'a crate::session::Driver>,
    /// The plugin writes the allocation record itself, from the guest's system
    /// calls, to this file (`alloc=`; formats.md §2.10): for programs the runtime
    /// library cannot enter. Excludes `markers`.
    pub alloc: Option<&'a Path>,
}

/// qemu's `-plugin` value: the plugin, its output stream `out`, the sampling,
/// the marker area and the progress file (paths may hold the runtime
/// library's `%p`, which it expands for a followed program: formats.md §1.1).
pub fn plugin_option(spec: &QemuSpec<'_>, out: &Path, progress: &Path) -> Result<OsString> {
    no_comma("the plugin path", spec.plugin.as_os_str())?;
    no_comma("the output path", out.as_os_str())?;
    no_comma("the scratch directory", progress.as_os_str())?;
    let mut plugin = OsString::from("file=");
    plugin.push(spec.plugin);
    plugin.push(",out=");
    plugin.push(out);
    for a in spec.sampling.plugin_args()? {
        plugin.push(",");
        plugin.push(a);
    }
    plugin.push(format!(",seed={}", spec.seed));
    if spec.markers && spec.alloc.is_some() {
        bail!(
            "the plugin's allocation record is for programs without the runtime library's markers"
        );
    }
    if spec.markers {
        plugin.push(format!(",markers={MARKER_ADDR:#x}:{MARKER_SPAN}"));
    }
    if let Some(a) = spec.alloc {
        no_comma("the allocation record's path", a.as_os_str())?;
        plugin.push(",alloc=");
        plugin.push(a);
    }
    plugin.push(",progress=");
    plugin.push(progress);
    Ok(plugin)
}

/// The qemu command line for a capture (without running it).
pub fn command(spec: &QemuSpec<'_>) -> Result<Command> {
    let Some(first) = spec.argv.first() else {
        bail!("no command to profile");
    };
    let program = crate::elf::resolve_program(first)
        .with_context(|| format!("cannot find the program '{}'", first.to_string_lossy()))?;
    // qemu-user loads ELF files only (it exits 1 without a word on a script).
    let mut head = [0u8; 4];
    let n = std::fs::File::open(&program)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .with_context(|| format!("reading {}", program.display()))?;
    if n >= 2 && head[..2] == *b"#!" {
        bail!(
            "{} is a script, and qemu-user runs ELF programs only; profile the program the script runs (a wrapper that execs it cannot be traced through), or use --refs valgrind for the interpreter itself",
            program.display()
        );
    }
    if n < 4 || head != *b"\x7fELF" {
        bail!(
            "{} is not an ELF program, which qemu-user needs",
            program.display()
        );
    }
    let plugin = plugin_option(spec, spec.out, &spec.scratch.join("qemu-progress"))?;

    let mut cmd = Command::new(spec.qemu);
    cmd.arg("-plugin").arg(plugin);
    // The guest's argv[0] as the user wrote it.
    cmd.arg("-0").arg(first);
    // The runtime library and its settings go to the guest only: the host qemu
    // process must not preload it. qemu's -E splits its value at commas.
    for (k, v) in spec.guest_env {
        no_comma(&format!("the value of {k}"), OsStr::new(v))?;
        cmd.arg("-E").arg(format!("{k}={v}"));
    }
    if spec.markers {
        cmd.arg("-E")
            .arg(format!("HUGETUNE_MARKER_ADDR={MARKER_ADDR:#x}"));
    }
    cmd.env_remove("LD_PRELOAD");
    // The guest inherits qemu's environment: drop what would preload or configure
    // the library behind -E's back.
    for (k, _) in std::env::vars_os() {
        if k.as_bytes().starts_with(b"HUGETUNE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.arg(program).args(&spec.argv[1..]);
    Ok(cmd)
}

/// Runs the capture; `progress` is called about four times a second.
pub fn capture(
    spec: &QemuSpec<'_>,
    stdout: Stdio,
    mut progress: impl FnMut(Progress, Duration),
) -> Result<QemuRun> {
    let mut cmd = command(spec)?;
    cmd.stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped());
    let (status, elapsed, messages, driver) = supervise(
        &mut cmd,
        &spec.qemu.display().to_string(),
        spec.driver,
        || read_progress(&spec.scratch.join("qemu-progress")),
        &mut progress,
    )?;
    // A program that died (or failed) under qemu is reported in its own terms,
    // before its cut-short stream could be blamed.
    if !status.success() {
        bail!(
            "{}",
            crate::record::command_failed("qemu", status, &messages)
        );
    }
    if !spec.out.exists() {
        bail!(
            "qemu wrote no reference stream ({status}); it said:\n{}",
            messages.join("\n")
        );
    }
    let markers = if spec.alloc.is_some() {
        Some((ALLOC_MARKER_ADDR, MARKER_SPAN))
    } else {
        spec.markers.then_some((MARKER_ADDR, MARKER_SPAN))
    };
    let scan = scan_stream(spec.out, markers).with_context(|| {
        format!(
            "the plugin's reference stream {} ({status}); qemu said:\n{}",
            spec.out.display(),
            messages.join("\n")
        )
    })?;
    Ok(QemuRun {
        status,
        header: scan.header,
        totals: scan.totals,
        pages: scan.pages,
        final_threshold: scan.threshold,
        version: scan.version,
        marker_area: markers,
        marker_refs: scan.marker_refs,
        elapsed,
        messages,
        driver,
    })
}

/// What [`supervise`] returns: the exit status, the run's time, the end of
/// its stderr (by line), what the driver did.
pub type Supervised = (
    ExitStatus,
    Duration,
    Vec<String>,
    Option<crate::session::DriverOutcome>,
);

/// Runs `cmd` (stderr piped through to ours, its end kept), calling
/// `progress` with `read()` about four times a second; a driver's failure is
/// an error. The child is tracked so that an interrupt stops it.
pub fn supervise(
    cmd: &mut Command,
    what: &str,
    driver: Option<&crate::session::Driver>,
    read: impl Fn() -> Option<Progress>,
    progress: &mut dyn FnMut(Progress, Duration),
) -> Result<Supervised> {
    cmd.stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    let _tracked = hugetune_host::kernel_state::track_child(child.id());
    let driver = driver.map(|d| crate::session::start(d, child.id()));
    // stderr is the program's and qemu's (and the plugin's): pass it on, keep the end.
    let mut err = child.stderr.take().context("qemu's stderr")?;
    let reader = std::thread::spawn(move || {
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        let mut stderr = std::io::stderr();
        loop {
            match err.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    use std::io::Write;
                    let _ = stderr.write_all(&buf[..n]);
                    tail.extend_from_slice(&buf[..n]);
                    if tail.len() > 1 << 16 {
                        tail.drain(..tail.len() - (1 << 15));
                    }
                }
            }
        }
        tail
    });
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        std::thread::sleep(Duration::from_millis(250));
        if let Some(p) = read() {
            progress(p, start.elapsed());
        }
    };
    let elapsed = start.elapsed();
    let driver = driver.map(|d| d.finish());
    if let Some(e) = driver.as_ref().and_then(|d| d.error.as_ref()) {
        bail!("the server's session under qemu failed: {e}");
    }
    let tail = reader.join().unwrap_or_default();
    let messages: Vec<String> = String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .map(str::to_string)
        .collect();
    Ok((status, elapsed, messages, driver))
}

/// A reference stream read to its end.
pub struct Scan {
    pub header: StreamHeader,
    pub totals: Totals,
    /// Distinct pages (markers excluded).
    pub pages: u64,
    pub threshold: Option<u64>,
    /// The stream's format version.
    pub version: u32,
    /// References inside the marker area given to the scan.
    pub marker_refs: u64,
}

/// Reads a stream to its end (checking it) and counts its distinct pages.
pub fn scan_stream(path: &Path, markers: Option<(u64, u64)>) -> Result<Scan> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut r = RefReader::new(std::io::BufReader::with_capacity(1 << 20, f))?;
    let shift = r.header().page_shift.unwrap_or(12);
    // Most references go to the page of the one before: only a change of page
    // is looked up (a complete stream has hundreds of millions of references,
    // and a SipHash insert each took longer than the capture itself).
    let mut pages = rustc_hash::FxHashSet::default();
    let mut last = u64::MAX;
    let mut marker_refs = 0u64;
    while let Some(x) = r.next_record()? {
        if markers.is_some_and(|(b, s)| x.addr.wrapping_sub(b) < s) {
            marker_refs += 1;
            continue;
        }
        let p = x.addr >> shift;
        if p != last {
            last = p;
            pages.insert(p);
        }
    }
    let totals = r
        .totals()
        .context("the stream has no END (qemu or the plugin did not finish)")?;
    Ok(Scan {
        header: r.header().clone(),
        totals,
        pages: pages.len() as u64,
        threshold: r.threshold(),
        version: r.version(),
        marker_refs,
    })
}

/// Compresses a raw stream into one zstd frame (what bundles store).
pub fn compress(raw: &Path, out: &Path) -> Result<()> {
    let input = std::fs::File::open(raw).with_context(|| format!("opening {}", raw.display()))?;
    let output =
        std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut enc = zstd::stream::Encoder::new(std::io::BufWriter::new(output), 3)?;
    // Every core compresses (zstd's own workers): writing a complete stream
    // must not take longer than capturing it.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    if workers > 1 {
        enc.multithread(workers)?;
    }
    std::io::copy(&mut std::io::BufReader::new(input), &mut enc)?;
    enc.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_arguments() {
        assert_eq!(
            Sampling::Rate(0.5).plugin_args().unwrap(),
            vec!["sampling=rate", "modulus=16777216", "threshold=8388608"]
        );
        assert_eq!(
            Sampling::Rate(1e-12).plugin_args().unwrap()[2],
            "threshold=1"
        );
        assert!(Sampling::Rate(0.0).plugin_args().is_err());
        assert!(Sampling::Rate(1.5).plugin_args().is_err());
        assert!(Sampling::Rate(f64::NAN).plugin_args().is_err());
        assert!(Sampling::MaxPages(0).plugin_args().is_err());
        assert_eq!(
            Sampling::MaxPages(100).plugin_args().unwrap()[2],
            "max_pages=100"
        );
        assert_eq!(Sampling::Complete.name(), "complete");
    }

    #[test]
    fn progress_file() {
        let d = std::env::temp_dir().join(format!("ht-qemu-progress-{}", std::process::id()));
        std::fs::write(&d, "10 2 1 4096\n").unwrap();
        assert_eq!(
            read_progress(&d),
            Some(Progress {
                refs_seen: 10,
                refs_written: 2,
                pages: 1,
                threshold: 4096
            })
        );
        std::fs::write(&d, "10 x").unwrap();
        assert_eq!(read_progress(&d), None);
        std::fs::write(&d, "1 2 3").unwrap();
        assert_eq!(read_progress(&d), None);
        let _ = std::fs::remove_file(&d);
    }

    #[test]
    fn commas_are_refused() {
        let argv = [OsString::from("/bin/true")];
        let spec = QemuSpec {
            qemu: Path::new("/usr/bin/qemu-x86_64"),
            plugin: Path::new("/tmp/a,b.so"),
            argv: &argv,
            guest_env: &[],
            out: Path::new("/tmp/out"),
            sampling: Sampling::Complete,
            seed: 0,
            markers: true,
            scratch: Path::new("/tmp"),
            driver: None,
            alloc: None,
        };
        let e = command(&spec).err().unwrap().to_string();
        assert!(e.contains("comma"), "{e}");
    }
}
