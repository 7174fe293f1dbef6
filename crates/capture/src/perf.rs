//! Hardware-sampled data addresses through `perf`: Intel PEBS (`perf mem record`),
//! AMD IBS (`perf record -e ibs_op// -d`) and ARM SPE (`arm_spe_*`), read back with
//! `perf script -F tid,time,ip,addr,event[,data_page_size]`.
//!
//! This is a **time-sampled** source: perf keeps one memory operation every
//! period (or at a frequency), so consecutive samples are not consecutive
//! references. Stack distance over such a stream is meaningless; it needs a
//! StatStack-style reuse-time estimator. What it gives cheaply and exactly is the
//! page size that really backed each sampled address (`data_page_size`).
//!
//! Detection ([`sampling_support`]) says whether the machine can do any of this and
//! why not; most VMs (ours included) have no hardware PMU at all.

use anyhow::{bail, Context, Result};
use hugetune_host::kernel_state::track_child;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Samples and the parser
// ---------------------------------------------------------------------------

/// How a stream was sampled. Perf streams are always time-sampled: one operation
/// every `period` events, or a varying period that the kernel adjusts to reach
/// `frequency_hz` samples per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    Time {
        /// Fixed sampling period (`-c`), when every sampled event had the same one.
        period: Option<u64>,
        /// Target frequency (`-F`), when the events were sampled by frequency.
        frequency_hz: Option<u64>,
    },
}

/// One sampled memory operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfSample {
    /// Thread id; [`PerfSample::UNKNOWN_TID`] where perf printed -1 (ARM SPE
    /// without context packets).
    pub tid: u32,
    pub time_ns: u64,
    pub ip: u64,
    /// Data (virtual) address; never 0 (those samples are counted as dropped).
    pub addr: u64,
    /// From the event name: `mem-stores` → `Some(true)`, `mem-loads` →
    /// `Some(false)`; IBS, SPE and other events do not say → `None`.
    pub write: Option<bool>,
    /// Size in bytes of the page that backed `addr` when it was sampled; `None`
    /// where perf printed `N/A` or the field was not recorded.
    pub data_page_size: Option<u64>,
    /// The event name as perf printed it (shared between samples).
    pub event: Arc<str>,
}

impl PerfSample {
    pub const UNKNOWN_TID: u32 = u32::MAX;
}

/// A parsed `perf script` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfSamples {
    pub samples: Vec<PerfSample>,
    /// Samples whose address perf did not know (printed as 0), skipped.
    pub dropped: u64,
    /// Samples (kept and dropped) by event name.
    pub by_event: BTreeMap<String, u64>,
    pub sampling: Sampling,
}

impl PerfSamples {
    /// Every sample line seen, kept or dropped.
    pub fn total(&self) -> u64 {
        self.samples.len() as u64 + self.dropped
    }
}

/// A line of `perf script` output that is not a sample in the expected layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("perf script output, line {line}: {what}")]
pub struct ParseError {
    pub line: u64,
    pub what: String,
}

fn perr(line: u64, what: impl Into<String>) -> ParseError {
    ParseError {
        line,
        what: what.into(),
    }
}

/// Parses a page size as perf prints it (`unit_number__scnprintf`): a number and
/// one of B, K, M, G, where each step is 1024 and perf only moves to the next unit
/// above 1× — so 1 GiB pages print as `1024M` and 1 MiB as `1024K`. `N/A` (no
/// page backed the address when it was sampled) is `None`.
pub fn parse_page_size(s: &str) -> std::result::Result<Option<u64>, String> {
    if s == "N/A" {
        return Ok(None);
    }
    // The unit is the last character, which in a damaged file need not be ASCII
    // (found by fuzzing: splitting at len - 1 panicked inside a character).
    let unit_len = s.chars().next_back().map_or(0, char::len_utf8);
    let (num, unit) = s.split_at(s.len() - unit_len);
    let shift = match unit {
        "B" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("page size {s:?} does not end in B, K, M or G")),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("page size {s:?} is not a number with a unit"));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("page size {s:?} is too large"))?;
    let bytes = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("page size {s:?} is too large"))?;
    if bytes == 0 || !bytes.is_power_of_two() {
        return Err(format!("page size {s:?} is not a power of two"));
    }
    Ok(Some(bytes))
}

fn parse_hex(s: &str) -> Option<u64> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// `seconds.fraction` (perf prints 6 digits, 9 with `--ns`) → nanoseconds.
fn parse_time(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if secs.is_empty()
        || frac.len() > 9
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let mut ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        ns *= 10;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

/// `tid`, or `pid/tid` when perf was also asked for the pid; -1 is unknown.
fn parse_tid(s: &str) -> Option<u32> {
    let t = s.rsplit_once('/').map_or(s, |(_, t)| t);
    if t == "-1" {
        return Some(PerfSample::UNKNOWN_TID);
    }
    t.parse::<u32>()
        .ok()
        .filter(|&t| t != PerfSample::UNKNOWN_TID)
}

/// Load/store from the event name: Intel's `mem-loads`/`mem-stores` (any PMU
/// prefix and modifiers); anything else does not tell.
fn write_flag(event: &str) -> Option<bool> {
    if event.contains("mem-stores") {
        Some(true)
    } else if event.contains("mem-loads") {
        Some(false)
    } else {
        None
    }
}

/// What the `# event : name = ...` header line says about one recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeaderEvent {
    name: String,
    value: u64,
    freq: bool,
}

fn parse_header_event(line: &str) -> Option<HeaderEvent> {
    let rest = line.trim_start_matches('#').trim_start();
    let rest = rest.strip_prefix("event")?.trim_start().strip_prefix(':')?;
    let rest = rest.trim_start().strip_prefix("name = ")?;
    // Names have no ", " inside (`cpu/mem-loads,ldlat=30/P` has a bare comma).
    let (name, attrs) = rest.split_once(", ").unwrap_or((rest, ""));
    let key = "{ sample_period, sample_freq } = ";
    let value = attrs.find(key).and_then(|i| {
        let v = &attrs[i + key.len()..];
        let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
        v[..end].parse().ok()
    })?;
    let freq = attrs.split(", ").any(|a| a.trim() == "freq = 1");
    Some(HeaderEvent {
        name: name.trim().to_string(),
        value,
        freq,
    })
}

/// Sampling from the header's events: those that produced samples, or, when the
/// samples are synthesized under other names (ARM SPE's `memory`), every recorded
/// event but perf's sample-less `dummy` ones. Only a value they all share is kept.
fn sampling_from_header(events: &[HeaderEvent], seen: &BTreeMap<String, u64>) -> Sampling {
    let matched: Vec<&HeaderEvent> = events
        .iter()
        .filter(|e| seen.contains_key(&e.name))
        .collect();
    let used: Vec<&HeaderEvent> = if matched.is_empty() {
        events
            .iter()
            .filter(|e| !e.name.starts_with("dummy"))
            .collect()
    } else {
        matched
    };
    let shared = |freq: bool| -> Option<u64> {
        let first = used.first()?;
        used.iter()
            .all(|e| e.freq == freq && e.value == first.value)
            .then_some(first.value)
    };
    Sampling::Time {
        period: shared(false),
        frequency_hz: shared(true),
    }
}

/// The samples as a reference stream (docs/formats.md §6, sampling `time`): one REF
/// per sample, in perf's order, under its thread; `seq` = the sample's index in its
/// thread × the fixed period (× 1 where the period is not fixed, which a reuse-time
/// estimator must then scale by time instead); loads unflagged, stores flagged,
/// samples whose event does not say (IBS, SPE) as loads. Samples of an unknown
/// thread go under thread [`PerfSample::UNKNOWN_TID`].
pub fn write_stream<W: std::io::Write>(
    s: &PerfSamples,
    command: Option<Vec<String>>,
    w: W,
) -> Result<W> {
    use hugetune_format::refstream::{RefWriter, SamplingKind, StreamHeader};
    let Sampling::Time { period, .. } = s.sampling;
    let header = StreamHeader {
        sampling: SamplingKind::Time,
        period,
        command,
        ..StreamHeader::complete("perf")
    };
    let step = period.unwrap_or(1).max(1);
    let mut out = RefWriter::new(w, &header)?;
    let mut index: BTreeMap<u32, u64> = BTreeMap::new();
    for x in &s.samples {
        let k = index.entry(x.tid).or_insert(0);
        out.set_thread(x.tid);
        let seq = k
            .checked_mul(step)
            .context("perf samples: reference index overflows")?;
        out.push_seq(x.addr, x.write.unwrap_or(false), seq)?;
        *k += 1;
    }
    // Every sample stands for `step` events; dropped samples count as seen.
    let seen = s.total().saturating_mul(step);
    Ok(out.finish(seen)?)
}

/// Sample counts by the page size perf saw behind each address (`data_page_size`):
/// what really backed the memory while it ran.
pub fn page_size_counts(s: &PerfSamples) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for x in &s.samples {
        let k = match x.data_page_size {
            Some(b) if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
            Some(b) if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
            Some(b) => format!("{}K", b >> 10),
            None => "unknown".into(),
        };
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// Parses the output of `perf script -F tid,time,ip,addr,event[,data_page_size]`
/// (optionally with `--header` and `--ns`). Perf prints the fields in its own
/// order whatever the `-F` order: `tid time: event: addr ip [data_page_size]`, the
/// event name right-aligned to the longest name. Comment (`#`) and blank lines are
/// skipped; `# event :` header lines give the sampling period or frequency.
/// Samples with address 0 (unknown to the hardware) are counted in `dropped`.
pub fn parse_script(mut text: impl BufRead) -> std::result::Result<PerfSamples, ParseError> {
    let mut samples = Vec::new();
    let mut dropped = 0u64;
    let mut by_event: BTreeMap<String, u64> = BTreeMap::new();
    let mut names: BTreeMap<String, Arc<str>> = BTreeMap::new();
    let mut header_events = Vec::new();
    let mut buf = Vec::with_capacity(256);
    let mut n = 0u64;
    loop {
        buf.clear();
        let got = text
            .read_until(b'\n', &mut buf)
            .map_err(|e| perr(n + 1, format!("reading failed: {e}")))?;
        if got == 0 {
            break;
        }
        n += 1;
        let line = std::str::from_utf8(&buf).map_err(|e| perr(n, format!("not UTF-8 ({e})")))?;
        let line = line.trim_end_matches(['\n', '\r']);
        let body = line.trim_start();
        if body.is_empty() {
            continue;
        }
        if body.starts_with('#') {
            if let Some(ev) = parse_header_event(body) {
                header_events.push(ev);
            }
            continue;
        }
        let toks: Vec<&str> = body.split_whitespace().collect();
        if toks.len() < 3 {
            return Err(perr(
                n,
                format!(
                    "expected `tid time: event: addr ip [data_page_size]`, got {} field(s): {:?}",
                    toks.len(),
                    truncate(body)
                ),
            ));
        }
        let tid = parse_tid(toks[0])
            .ok_or_else(|| perr(n, format!("thread id {:?} is not a number", toks[0])))?;
        let time = toks[1]
            .strip_suffix(':')
            .ok_or_else(|| perr(n, format!("time {:?} does not end with ':'", toks[1])))?;
        let time_ns = parse_time(time)
            .ok_or_else(|| perr(n, format!("time {time:?} is not seconds.fraction")))?;
        // The event name ends at the first field ending with ':' (a name may hold
        // ':' itself, as in `cycles:u`, but perf adds one after it).
        let end = toks[2..]
            .iter()
            .position(|t| t.ends_with(':'))
            .map(|i| i + 2)
            .ok_or_else(|| perr(n, "no event name (a field ending with ':' after the time)"))?;
        let event = toks[2..=end].join(" ");
        let event = &event[..event.len() - 1];
        if event.is_empty() {
            return Err(perr(n, "empty event name"));
        }
        let rest = &toks[end + 1..];
        if rest.len() < 2 {
            return Err(perr(
                n,
                format!(
                    "missing addr and ip after event {event:?} (truncated line?): {:?}",
                    truncate(body)
                ),
            ));
        }
        if rest.len() > 3 {
            return Err(perr(
                n,
                format!("unexpected field {:?} after the page size", rest[3]),
            ));
        }
        let addr = parse_hex(rest[0])
            .ok_or_else(|| perr(n, format!("address {:?} is not hexadecimal", rest[0])))?;
        let ip = parse_hex(rest[1])
            .ok_or_else(|| perr(n, format!("ip {:?} is not hexadecimal", rest[1])))?;
        let data_page_size = match rest.get(2) {
            Some(p) => parse_page_size(p).map_err(|e| perr(n, e))?,
            None => None,
        };
        *by_event.entry(event.to_string()).or_default() += 1;
        if addr == 0 {
            dropped += 1;
            continue;
        }
        let name = names
            .entry(event.to_string())
            .or_insert_with(|| Arc::from(event))
            .clone();
        samples.push(PerfSample {
            tid,
            time_ns,
            ip,
            addr,
            write: write_flag(event),
            data_page_size,
            event: name,
        });
    }
    let sampling = sampling_from_header(&header_events, &by_event);
    Ok(PerfSamples {
        samples,
        dropped,
        by_event,
        sampling,
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}

// ---------------------------------------------------------------------------
// Detection
// ---------------------------------------------------------------------------

/// The hardware mechanism that can sample data addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// Intel PEBS load latency / precise stores through `perf mem record`; `pmu`
    /// is `cpu`, or `cpu_core` on hybrid parts.
    IntelPebs { pmu: String, stores: bool },
    /// AMD Instruction-Based Sampling, op side (`ibs_op//`).
    AmdIbs,
    /// ARM Statistical Profiling Extension (`arm_spe_N`).
    ArmSpe { pmu: String },
    /// Any event recorded with `perf record -d` (e.g. the `page-faults` software
    /// event, whose addresses are faulting addresses, not sampled references).
    /// Never chosen by detection; it lets the pipeline run on machines without a PMU.
    Generic { event: String },
}

impl Mechanism {
    pub fn describe(&self) -> String {
        match self {
            Mechanism::IntelPebs { pmu, stores } => format!(
                "Intel PEBS ({pmu}/mem-loads{})",
                if *stores {
                    " and mem-stores"
                } else {
                    ", no mem-stores"
                }
            ),
            Mechanism::AmdIbs => "AMD IBS (ibs_op)".into(),
            Mechanism::ArmSpe { pmu } => format!("ARM SPE ({pmu})"),
            Mechanism::Generic { event } => format!("perf record -d -e {event}"),
        }
    }
}

/// How to record with a mechanism: the perf command prefix and the options that
/// depend on the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfPlan {
    pub mechanism: Mechanism,
    /// The perf executable and any leading arguments (normally just `perf`).
    pub perf: Vec<OsString>,
    /// Whether to record `data_page_size` (perf and kernel ≥ 5.11; not with SPE,
    /// whose synthesized samples carry no page size).
    pub data_page_size: bool,
}

/// Recording options.
#[derive(Debug, Clone, Default)]
pub struct RecordOptions {
    /// Fixed sampling period (`-c`): one sample every N events (IBS: ops).
    pub period: Option<u64>,
    /// Sampling frequency (`-F`), used when no period is given.
    pub frequency_hz: Option<u64>,
    /// Load-latency threshold in cycles for Intel `mem-loads` (perf's default 30).
    pub ldlat: Option<u32>,
    /// Keep `perf.data` in this directory instead of a temporary one.
    pub keep_data_in: Option<PathBuf>,
}

/// The fixed period `hugetune record --refs perf` samples at: one memory
/// operation in 4 999 (prime, so that it does not beat with a loop's length).
/// The analysis needs a fixed period to know how many references a sample
/// stands for (docs/model.md §3.2); perf's default frequency mode varies it.
pub const MODEL_PERIOD: u64 = 4_999;

impl RecordOptions {
    /// Recording for the model: a fixed period ([`MODEL_PERIOD`]).
    pub fn for_model() -> Self {
        RecordOptions {
            period: Some(MODEL_PERIOD),
            ..Default::default()
        }
    }
}

impl PerfPlan {
    /// `perf record` (or `perf mem record`) arguments, without the perf prefix,
    /// up to and including `--`.
    pub fn record_args(&self, opts: &RecordOptions, out: &Path) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut s = |x: &str| a.push(x.into());
        match &self.mechanism {
            Mechanism::IntelPebs { stores, .. } => {
                s("mem");
                if self.data_page_size {
                    s("--data-page-size");
                }
                s("-t");
                s(if *stores { "load,store" } else { "load" });
                s("record");
                if let Some(l) = opts.ldlat {
                    s(&format!("--ldlat={l}"));
                }
            }
            Mechanism::AmdIbs => {
                s("record");
                s("-e");
                s("ibs_op//");
                s("-d");
            }
            Mechanism::ArmSpe { pmu } => {
                s("record");
                s("-e");
                s(&format!("{pmu}/ts_enable=1,load_filter=1,store_filter=1/"));
                s("-d");
            }
            Mechanism::Generic { event } => {
                s("record");
                s("-e");
                s(event);
                s("-d");
            }
        }
        let mem = matches!(self.mechanism, Mechanism::IntelPebs { .. });
        if self.data_page_size && !mem {
            a.push("--data-page-size".into());
        }
        // One token per option: `perf mem` passes what it does not know to
        // `perf record`, and a separate value could be taken for the command.
        if let Some(c) = opts.period {
            a.push(format!("--count={c}").into());
        } else if let Some(f) = opts.frequency_hz {
            a.push(format!("--freq={f}").into());
        }
        let mut o = OsString::from("--output=");
        o.push(out);
        a.push(o);
        a.push("--".into());
        a
    }

    /// `perf script` arguments, without the perf prefix.
    pub fn script_args(&self, input: &Path) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["script".into()];
        let mut i = OsString::from("--input=");
        i.push(input);
        a.push(i);
        a.push("--ns".into());
        a.push("--header".into());
        if matches!(self.mechanism, Mechanism::ArmSpe { .. }) {
            // One `memory` sample per sampled load/store, not one per cache/TLB
            // event the operation caused.
            a.push("--itrace=M".into());
        }
        let mut fields = String::from("tid,time,ip,addr,event");
        if self.data_page_size {
            fields.push_str(",data_page_size");
        }
        a.push("-F".into());
        a.push(fields.into());
        a
    }

    /// The record command line for showing to a user, with `<command>` standing
    /// for the program.
    pub fn command_line(&self, opts: &RecordOptions) -> String {
        let mut parts: Vec<OsString> = self.perf.clone();
        parts.extend(self.record_args(opts, Path::new("perf.data")));
        parts.push("<command>".into());
        show(&parts)
    }
}

fn show(parts: &[OsString]) -> String {
    parts
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a hardware event could be opened (`perf stat -e cycles`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwEvents {
    Open,
    NotSupported(String),
    Failed(String),
    NotChecked,
}

/// What detection found, and the plan or the reasons there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfSupport {
    /// `perf --version` output, e.g. `perf version 6.1.187`; `None` if perf
    /// could not be run.
    pub perf_version: Option<String>,
    pub paranoid: Option<i64>,
    pub privileged: bool,
    /// Kernel release from `osrelease`.
    pub kernel: Option<String>,
    pub mechanism: Option<Mechanism>,
    pub hardware_events: HwEvents,
    pub plan: Option<PerfPlan>,
    /// Why hardware sampling cannot be used here (empty when `plan` is set).
    pub problems: Vec<String>,
    /// Things that may go wrong but do not stop it.
    pub warnings: Vec<String>,
}

impl PerfSupport {
    pub fn usable(&self) -> bool {
        self.plan.is_some()
    }

    /// One sentence: the mechanism and command, or why not.
    pub fn summary(&self) -> String {
        match &self.plan {
            Some(p) => format!(
                "{}: {}",
                p.mechanism.describe(),
                p.command_line(&RecordOptions::default())
            ),
            None => format!(
                "no hardware data-address sampling: {}",
                self.problems.join("; ")
            ),
        }
    }
}

/// Where detection looks, so tests can point it at fake trees and a fake perf.
#[derive(Debug, Clone)]
pub struct ProbeEnv {
    /// Root of sysfs (`/sys`).
    pub sysfs: PathBuf,
    /// Root of procfs (`/proc`): `sys/kernel/perf_event_paranoid`, `sys/kernel/osrelease`.
    pub procfs: PathBuf,
    /// The perf command prefix (`["perf"]`).
    pub perf: Vec<OsString>,
    /// Root or CAP_PERFMON/CAP_SYS_ADMIN: `perf_event_paranoid` does not apply.
    pub privileged: bool,
}

impl ProbeEnv {
    pub fn system() -> ProbeEnv {
        ProbeEnv {
            sysfs: "/sys".into(),
            procfs: "/proc".into(),
            perf: vec!["perf".into()],
            privileged: privileged(),
        }
    }
}

/// Root, or holding CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in the effective set.
fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 38 | 1 << 21) != 0)
}

/// Detects hardware data-address sampling on this machine.
pub fn sampling_support() -> PerfSupport {
    sampling_support_in(&ProbeEnv::system())
}

/// `major.minor` from text such as `perf version 6.1.187` or `5.10.0-21-amd64`.
fn version_of(text: &str) -> Option<(u32, u32)> {
    let v = text
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let mut it = v.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

fn perf_command(perf: &[OsString], args: &[&str]) -> Option<Command> {
    let (prog, pre) = perf.split_first()?;
    let mut c = Command::new(prog);
    c.args(pre).args(args).stdin(Stdio::null());
    Some(c)
}

/// Finds the sampling mechanism in `devices` (`/sys/bus/event_source/devices`),
/// or says what is missing.
fn find_mechanism(devices: &Path) -> std::result::Result<Mechanism, String> {
    let mut names: Vec<String> = match std::fs::read_dir(devices) {
        Ok(d) => d
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => return Err(format!("cannot read {}: {e}", devices.display())),
    };
    names.sort();
    for pmu in ["cpu", "cpu_core"] {
        let ev = devices.join(pmu).join("events");
        if ev.join("mem-loads").exists() {
            return Ok(Mechanism::IntelPebs {
                pmu: pmu.into(),
                stores: ev.join("mem-stores").exists(),
            });
        }
    }
    if names.iter().any(|n| n == "ibs_op") {
        return Ok(Mechanism::AmdIbs);
    }
    if let Some(spe) = names.iter().find(|n| n.starts_with("arm_spe_")) {
        return Ok(Mechanism::ArmSpe { pmu: spe.clone() });
    }
    let core_pmu = names.iter().find(|n| {
        matches!(n.as_str(), "cpu" | "cpu_core" | "cpu_atom")
            || n.starts_with("armv8_")
            || n.starts_with("armv7_")
    });
    let listed = if names.is_empty() {
        "nothing".to_string()
    } else {
        names.join(", ")
    };
    Err(match core_pmu {
        None => format!(
            "no hardware PMU: {} lists only {listed} (no cpu, ibs_op or arm_spe_* device; \
             a VM without PMU passthrough?)",
            devices.display()
        ),
        Some(p) => format!(
            "the CPU PMU ({p}) offers no data-address sampling: no {p}/events/mem-loads \
             (Intel PEBS), no ibs_op (AMD IBS), no arm_spe_* (ARM SPE) in {}",
            devices.display()
        ),
    })
}

/// `perf stat -e cycles -x, -- true`: can a hardware event be opened at all?
fn probe_hw_events(perf: &[OsString]) -> HwEvents {
    let Some(mut c) = perf_command(perf, &["stat", "-e", "cycles", "-x,", "--", "true"]) else {
        return HwEvents::NotChecked;
    };
    let out = match c.stdout(Stdio::piped()).stderr(Stdio::piped()).output() {
        Ok(o) => o,
        Err(e) => return HwEvents::Failed(format!("running perf stat: {e}")),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let cycles: Vec<&str> = text.lines().filter(|l| l.contains("cycles")).collect();
    if let Some(l) = cycles.iter().find(|l| l.contains("<not supported>")) {
        return HwEvents::NotSupported(l.trim().to_string());
    }
    if !out.status.success() {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return HwEvents::Failed(format!(
            "perf stat exited with {}: {}",
            out.status,
            first.trim()
        ));
    }
    if cycles.iter().any(|l| {
        l.split(',')
            .next()
            .is_some_and(|v| v.trim().parse::<f64>().is_ok())
    }) {
        return HwEvents::Open;
    }
    if let Some(l) = cycles.first() {
        return HwEvents::Failed(format!("perf stat -e cycles counted nothing: {}", l.trim()));
    }
    HwEvents::Failed(format!(
        "perf stat printed no cycles line: {:?}",
        truncate(text.trim())
    ))
}

/// [`sampling_support`] over any sysfs/procfs roots and perf command.
pub fn sampling_support_in(env: &ProbeEnv) -> PerfSupport {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();

    let perf_version = match perf_command(&env.perf, &["--version"]).map(|mut c| c.output()) {
        None => {
            problems.push("no perf command given".to_string());
            None
        }
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            problems.push(format!(
                "perf is not installed ({} not found; apt install linux-perf, \
                 or linux-tools-$(uname -r) on Ubuntu)",
                env.perf[0].to_string_lossy()
            ));
            None
        }
        Some(Err(e)) => {
            problems.push(format!("cannot run {}: {e}", show(&env.perf)));
            None
        }
        Some(Ok(o)) if !o.status.success() => {
            problems.push(format!(
                "{} --version failed ({}): {}",
                show(&env.perf),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            None
        }
        Some(Ok(o)) => Some(String::from_utf8_lossy(&o.stdout).trim().to_string()),
    };
    let perf_v = perf_version.as_deref().and_then(version_of);

    let kernel_dir = env.procfs.join("sys/kernel");
    let paranoid = std::fs::read_to_string(kernel_dir.join("perf_event_paranoid"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok());
    match paranoid {
        None => warnings.push(format!(
            "cannot read {}",
            kernel_dir.join("perf_event_paranoid").display()
        )),
        Some(p) if p > 2 && !env.privileged => problems.push(format!(
            "perf_event_paranoid is {p}: unprivileged users may not use perf events \
             (needs 2 or less, or root/CAP_PERFMON)"
        )),
        _ => {}
    }
    let kernel = std::fs::read_to_string(kernel_dir.join("osrelease"))
        .ok()
        .map(|s| s.trim().to_string());
    let kernel_v = kernel.as_deref().and_then(version_of);

    let devices = env.sysfs.join("bus/event_source/devices");
    let mechanism = match find_mechanism(&devices) {
        Ok(m) => Some(m),
        Err(why) => {
            problems.push(why);
            None
        }
    };

    let hardware_events = if perf_version.is_some() {
        probe_hw_events(&env.perf)
    } else {
        HwEvents::NotChecked
    };
    match &hardware_events {
        HwEvents::NotSupported(l) => problems.push(format!(
            "hardware events cannot be opened (perf stat -e cycles: {l})"
        )),
        HwEvents::Failed(why) => problems.push(format!("hardware events cannot be opened: {why}")),
        HwEvents::Open | HwEvents::NotChecked => {}
    }

    if mechanism == Some(Mechanism::AmdIbs) && !env.privileged && paranoid.is_some_and(|p| p > 1) {
        warnings.push(
            "IBS may not be able to exclude the kernel: unprivileged recording can need \
             perf_event_paranoid ≤ 1"
                .into(),
        );
    }
    let new_enough = |v: Option<(u32, u32)>| v.is_some_and(|v| v >= (5, 11));
    let page_size_ok = new_enough(perf_v) && new_enough(kernel_v);
    if !page_size_ok && perf_v.is_some() {
        warnings.push(format!(
            "no data_page_size: needs perf and kernel 5.11 or newer (perf {}, kernel {})",
            perf_v.map_or("?".into(), |(a, b)| format!("{a}.{b}")),
            kernel.as_deref().unwrap_or("?")
        ));
    }
    if matches!(mechanism, Some(Mechanism::ArmSpe { .. })) && page_size_ok {
        warnings.push("ARM SPE samples are synthesized by perf and carry no data_page_size".into());
    }

    let plan = match (&mechanism, problems.is_empty()) {
        (Some(m), true) => Some(PerfPlan {
            mechanism: m.clone(),
            perf: env.perf.clone(),
            data_page_size: page_size_ok && !matches!(m, Mechanism::ArmSpe { .. }),
        }),
        _ => None,
    };
    PerfSupport {
        perf_version,
        paranoid,
        privileged: env.privileged,
        kernel,
        mechanism,
        hardware_events,
        plan,
        problems,
        warnings,
    }
}

// ---------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------

/// A finished recording.
#[derive(Debug)]
pub struct PerfRecording {
    pub samples: PerfSamples,
    /// Exit status of `perf record` (perf's own, which may reflect the program's).
    pub status: ExitStatus,
    pub record_command: String,
    pub script_command: String,
    /// The last lines perf (and the program) wrote to stderr while recording,
    /// then those of `perf script`.
    pub messages: Vec<String>,
    pub elapsed: Duration,
    /// Where `perf.data` was kept, when asked to keep it.
    pub data: Option<PathBuf>,
}

const STDERR_TAIL: usize = 64 * 1024;

/// Reads a stream to its end, keeping only the last `STDERR_TAIL` bytes.
fn tail_reader(r: Option<impl Read + Send + 'static>) -> Option<std::thread::JoinHandle<Vec<u8>>> {
    r.map(|mut r| {
        std::thread::spawn(move || {
            let mut keep = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        keep.extend_from_slice(&buf[..n]);
                        if keep.len() > 2 * STDERR_TAIL {
                            keep.drain(..keep.len() - STDERR_TAIL);
                        }
                    }
                }
            }
            if keep.len() > STDERR_TAIL {
                keep.drain(..keep.len() - STDERR_TAIL);
            }
            keep
        })
    })
}

fn lines_of(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| l.trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn last_lines(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Runs `argv` (with `env` added) under `perf record` as `plan` says, then reads
/// the samples back with `perf script`. The program's stdout goes to `stdout`;
/// its stderr is mixed with perf's and returned in `messages`.
pub fn record(
    plan: &PerfPlan,
    argv: &[OsString],
    env: &[(String, String)],
    stdout: Stdio,
    opts: &RecordOptions,
) -> Result<PerfRecording> {
    if argv.is_empty() {
        bail!("no command to profile");
    }
    if plan.perf.is_empty() {
        bail!("no perf command in the plan");
    }
    let tmp;
    let dir: &Path = match &opts.keep_data_in {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("hugetune-perf-")
                .tempdir()
                .context("creating a temporary directory for perf.data")?;
            tmp.path()
        }
    };
    let data = dir.join("perf.data");
    let start = Instant::now();

    let mut rec_args = plan.record_args(opts, &data);
    rec_args.extend(argv.iter().cloned());
    let mut rec_line: Vec<OsString> = plan.perf.clone();
    rec_line.extend(rec_args.iter().cloned());
    let record_command = show(&rec_line);
    let mut cmd = Command::new(&plan.perf[0]);
    cmd.args(&plan.perf[1..])
        .args(&rec_args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", plan.perf[0].to_string_lossy()))?;
    let status = {
        let _tracked = track_child(child.id());
        let err_t = tail_reader(child.stderr.take());
        let status = child.wait().context("waiting for perf record")?;
        let err = err_t
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        (status, lines_of(&err))
    };
    let (status, mut messages) = status;
    let data_ok = std::fs::metadata(&data).is_ok_and(|m| m.len() > 0);
    if !data_ok {
        bail!(
            "perf record wrote no {} (exit {status}): {}\n  command: {record_command}",
            data.display(),
            last_lines(&messages, 6)
        );
    }

    let sc_args = plan.script_args(&data);
    let mut sc_line: Vec<OsString> = plan.perf.clone();
    sc_line.extend(sc_args.iter().cloned());
    let script_command = show(&sc_line);
    let mut child = Command::new(&plan.perf[0])
        .args(&plan.perf[1..])
        .args(&sc_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {script_command}"))?;
    let parsed = {
        let _tracked = track_child(child.id());
        let err_t = tail_reader(child.stderr.take());
        let parsed = match child.stdout.take() {
            Some(out) => parse_script(BufReader::with_capacity(1 << 20, out)),
            None => Err(perr(0, "perf script has no stdout")),
        };
        if parsed.is_err() {
            // Stop perf script rather than wait for output nobody reads.
            let _ = child.kill();
        }
        let sc_status = child.wait().context("waiting for perf script")?;
        let err = lines_of(
            &err_t
                .map(|t| t.join().unwrap_or_default())
                .unwrap_or_default(),
        );
        let parsed = parsed.with_context(|| format!("reading the output of {script_command}"))?;
        if !sc_status.success() {
            bail!(
                "{script_command} failed ({sc_status}): {}",
                last_lines(&err, 6)
            );
        }
        messages.extend(err);
        parsed
    };
    let mut samples = parsed;
    if let Sampling::Time {
        period: None,
        frequency_hz: None,
    } = samples.sampling
    {
        // The header did not say (older perf); use what we asked for.
        samples.sampling = Sampling::Time {
            period: opts.period,
            frequency_hz: opts.period.is_none().then_some(opts.frequency_hz).flatten(),
        };
    }
    if samples.total() == 0 {
        bail!(
            "perf recorded no samples with data addresses ({}; perf record exit {status}): {}",
            plan.mechanism.describe(),
            last_lines(&messages, 4)
        );
    }
    Ok(PerfRecording {
        samples,
        status,
        record_command,
        script_command,
        messages,
        elapsed: start.elapsed(),
        data: opts.keep_data_in.as_ref().map(|_| data.clone()),
    })
}

/// Whether `perf` can be run at all (for tests and messages).
pub fn perf_available(perf: &[OsString]) -> bool {
    perf_command(perf, &["--version"])
        .map(|mut c| c.stdout(Stdio::null()).stderr(Stdio::null()).status())
        .is_some_and(|s| s.is_ok_and(|s| s.success()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_as_perf_prints_them() {
        assert_eq!(parse_page_size("4K"), Ok(Some(4096)));
        assert_eq!(parse_page_size("16K"), Ok(Some(16 << 10)));
        assert_eq!(parse_page_size("64K"), Ok(Some(64 << 10)));
        assert_eq!(parse_page_size("2M"), Ok(Some(2 << 20)));
        assert!(
            parse_page_size("4\u{331}").is_err(),
            "a last character of two bytes"
        );
        assert!(parse_page_size("").is_err());
        // perf's unit_number__scnprintf only moves up a unit above 1×.
        assert_eq!(parse_page_size("1024M"), Ok(Some(1 << 30)));
        assert_eq!(parse_page_size("1024K"), Ok(Some(1 << 20)));
        assert_eq!(parse_page_size("1G"), Ok(Some(1 << 30)));
        assert_eq!(parse_page_size("16G"), Ok(Some(16 << 30)));
        assert_eq!(parse_page_size("N/A"), Ok(None));
        for bad in [
            "",
            "K",
            "3M",
            "4KX",
            "x4K",
            "0K",
            "-4K",
            "99999999999999999999G",
        ] {
            assert!(parse_page_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn times_tids_and_write_flags() {
        assert_eq!(parse_time("12691.754833"), Some(12_691_754_833_000));
        assert_eq!(parse_time("12691.754833651"), Some(12_691_754_833_651));
        assert_eq!(parse_time("5"), Some(5_000_000_000));
        assert_eq!(parse_time("1.1234567890"), None);
        assert_eq!(parse_time(".5"), None);
        assert_eq!(parse_tid("2120"), Some(2120));
        assert_eq!(parse_tid("2118/2120"), Some(2120));
        assert_eq!(parse_tid("-1"), Some(PerfSample::UNKNOWN_TID));
        assert_eq!(parse_tid("x"), None);
        assert_eq!(write_flag("cpu/mem-loads,ldlat=30/P"), Some(false));
        assert_eq!(write_flag("cpu_core/mem-stores/P"), Some(true));
        assert_eq!(write_flag("ibs_op//"), None);
        assert_eq!(write_flag("memory"), None);
    }

    #[test]
    fn header_event_lines() {
        let l =
            "# event : name = cpu/mem-loads,ldlat=30/P, , id = { 1, 2 }, type = 4, size = 136, \
                 config = 0x1cd, { sample_period, sample_freq } = 4000, sample_type = IP|TID, \
                 disabled = 1, freq = 1, precise_ip = 2";
        assert_eq!(
            parse_header_event(l),
            Some(HeaderEvent {
                name: "cpu/mem-loads,ldlat=30/P".into(),
                value: 4000,
                freq: true
            })
        );
        let l = "# event : name = page-faults, , id = { 288, 289 }, type = 1, \
                 { sample_period, sample_freq } = 1, sample_type = IP|TID|TIME|ADDR";
        let e = parse_header_event(l).unwrap();
        assert_eq!(
            (e.name.as_str(), e.value, e.freq),
            ("page-faults", 1, false)
        );
        assert_eq!(parse_header_event("# event : name = x, , id = { 1 }"), None);
        assert_eq!(parse_header_event("# hostname : vm"), None);
    }

    #[test]
    fn lines_with_spaces_and_colons_in_event_names() {
        let t = "  7 1.000000001: cycles:u:     7f0000001000     55d000000010\n\
                 \x20 7 1.000000002: my event:     7f0000002000     55d000000010 2M\n";
        let s = parse_script(t.as_bytes()).unwrap();
        assert_eq!(s.samples.len(), 2);
        assert_eq!(&*s.samples[0].event, "cycles:u");
        assert_eq!(s.samples[0].data_page_size, None);
        assert_eq!(&*s.samples[1].event, "my event");
        assert_eq!(s.samples[1].data_page_size, Some(2 << 20));
        assert_eq!(
            s.sampling,
            Sampling::Time {
                period: None,
                frequency_hz: None
            }
        );
    }

    #[test]
    fn record_and_script_arguments() {
        let plan = |m, dps| PerfPlan {
            mechanism: m,
            perf: vec!["perf".into()],
            data_page_size: dps,
        };
        let opts = RecordOptions {
            period: Some(20011),
            ldlat: Some(50),
            ..Default::default()
        };
        let intel = plan(
            Mechanism::IntelPebs {
                pmu: "cpu".into(),
                stores: true,
            },
            true,
        );
        assert_eq!(
            intel.command_line(&opts),
            "perf mem --data-page-size -t load,store record --ldlat=50 --count=20011 \
             --output=perf.data -- <command>"
        );
        let amd = plan(Mechanism::AmdIbs, true);
        assert_eq!(
            amd.command_line(&RecordOptions::default()),
            "perf record -e ibs_op// -d --data-page-size --output=perf.data -- <command>"
        );
        let spe = plan(
            Mechanism::ArmSpe {
                pmu: "arm_spe_0".into(),
            },
            false,
        );
        let freq = RecordOptions {
            frequency_hz: Some(999),
            ..Default::default()
        };
        assert_eq!(
            spe.command_line(&freq),
            "perf record -e arm_spe_0/ts_enable=1,load_filter=1,store_filter=1/ -d \
             --freq=999 --output=perf.data -- <command>"
        );
        assert_eq!(
            show(&spe.script_args(Path::new("/t/perf.data"))),
            "script --input=/t/perf.data --ns --header --itrace=M -F tid,time,ip,addr,event"
        );
        assert_eq!(
            show(&amd.script_args(Path::new("/t/perf.data"))),
            "script --input=/t/perf.data --ns --header -F tid,time,ip,addr,event,data_page_size"
        );
    }

    #[test]
    fn versions() {
        assert_eq!(version_of("perf version 6.1.187"), Some((6, 1)));
        assert_eq!(version_of("5.10.0-21-amd64"), Some((5, 10)));
        assert_eq!(version_of("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(version_of("perf version"), None);
    }
}
