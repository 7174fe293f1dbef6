//! Stage 2 for DAMON bundles: region access frequencies instead of a reference
//! stream (`record --refs damon`, `record --refs damon -p PID`), turned into the
//! same [`Analysis`] the planner reads, through `hugetune_model::frequency`.
//!
//! Regions are split among categories by the allocation log's objects (the
//! runtime library ran in record mode under DAMON, so objects, sites and
//! categories are known) or, for a process hugetune did not start, by the kinds
//! of its /proc/PID/maps. Every figure is a frequency estimate, not a TLB
//! model: walks and faults are lower bounds, and the analysis says so
//! (`Analysis::frequency`, docs/damon.md). Also here: monitoring a running
//! process (`record -p`), which only reads it.

use super::{note, Analysis};
use anyhow::{bail, Context, Result};
use hugetune_capture::damon::{self, DamonCapture, DamonOptions};
use hugetune_capture::elf;
use hugetune_capture::inputs::inputs_from_log;
use hugetune_format::alloclog::{AllocLog, MAGIC};
use hugetune_format::bundle::Section;
use hugetune_format::profile::{self, Bundle, ProfileMeta, Program};
use hugetune_host::procfs::{parse_maps, RunStats};
use hugetune_host::{kernel_state, machine};
use hugetune_model::categorize::{AllocStats, Categorizer};
use hugetune_model::category::{Category, PerCategory};
use hugetune_model::cost::CostModel;
use hugetune_model::frequency::{
    self, Extent, FrequencyInput, FrequencyResult, RegionObs, SnapshotObs,
};
use hugetune_model::plan::ProgramTraits;
use hugetune_model::rank;
use hugetune_model::stream::StreamSummary;
use hugetune_model::tlb::TlbGeometry;
use hugetune_render::bytes;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// glibc's default mmap threshold: anonymous mappings at least this large are
/// taken for heap-large where no allocation log says what they are.
const ANON_LARGE: u64 = 128 * 1024;

/// The bundle's `damon` section, decoded.
pub fn damon_capture(path: &Path, b: &Bundle) -> Result<Option<DamonCapture>> {
    let Some(s) = b.extra.iter().find(|x| x.name == "damon") else {
        return Ok(None);
    };
    let json = zstd::decode_all(&s.data[..])
        .with_context(|| format!("bundle {}: its 'damon' section is not zstd", path.display()))?;
    let text = String::from_utf8(json)
        .with_context(|| format!("bundle {}: its 'damon' section is not text", path.display()))?;
    DamonCapture::from_json(&text)
        .with_context(|| format!("bundle {}: its 'damon' section", path.display()))
        .map(Some)
}

/// Log time (ns) of every event sequence number, as ms since the log began
/// (about when DAMON began: the library starts with the process).
fn event_ms(log: &AllocLog) -> HashMap<u64, u64> {
    log.records
        .iter()
        .map(|r| {
            (
                r.seq,
                r.time_ns.saturating_sub(log.header.start_ns) / 1_000_000,
            )
        })
        .collect()
}

/// Extents from the allocation log: each object while live (rank 1), static
/// segments (2), malloc arenas (3), stacks (4); the library's own memory is
/// left out (rank 0). Also the allocation statistics, the heap-large peak,
/// the program's traits, the top sites and the threshold.
struct LogView {
    extents: Vec<Extent>,
    alloc_stats: PerCategory<AllocStats>,
    heap_large_peak_pages: u64,
    program: ProgramTraits,
    sites: Vec<super::SiteSummary>,
    threshold: u64,
}

fn from_log(log: &AllocLog) -> LogView {
    let inputs = inputs_from_log(log);
    let mut cat = Categorizer::new(inputs.space.clone(), inputs.threshold);
    for ev in &inputs.events {
        cat.apply(ev);
    }
    let times = event_ms(log);
    let at = |seq: u64| times.get(&seq).copied();
    let mut extents = Vec::new();
    for o in cat
        .objects()
        .iter()
        .filter(|o| o.via.is_some() && o.len > 0)
    {
        extents.push(Extent {
            start: o.start,
            end: o.start.saturating_add(o.len),
            category: Some(o.category),
            rank: 1,
            live_from_ms: at(o.alloc_seq).unwrap_or(0),
            live_to_ms: o.free_seq.and_then(at).unwrap_or(u64::MAX),
        });
    }
    let space = &inputs.space;
    for s in &space.static_segments {
        extents.push(Extent::always(s.start, s.end, Some(Category::Static), 2));
    }
    for &(lo, hi) in &space.heap_ranges {
        extents.push(Extent::always(lo, hi, Some(Category::HeapSmall), 3));
    }
    for &(lo, hi) in &space.stack_ranges {
        extents.push(Extent::always(lo, hi, Some(Category::Stack), 4));
    }
    for &(lo, hi) in &space.excluded_ranges {
        extents.push(Extent::always(lo, hi, None, 0));
    }
    if inputs.markers.1 > 0 {
        let (b, s) = inputs.markers;
        extents.push(Extent::always(b, b.saturating_add(s), None, 0));
    }
    LogView {
        extents,
        alloc_stats: cat.stats().clone(),
        heap_large_peak_pages: cat.peak_owned_frames(),
        program: inputs.traits(),
        sites: super::sites(&cat, &inputs.modules),
        threshold: inputs.threshold,
    }
}

/// The category of one /proc/PID/maps line where no allocation log exists:
/// `[heap]` is glibc's brk heap (heap-small), `[stack]` the main stack,
/// private writable file mappings and the anonymous mapping right after one
/// (.bss) static data, other anonymous mappings of at least 128 KiB heap-large
/// (glibc's large chunks; thread arenas, thread stacks and the program's own
/// mmaps look the same without the log), the rest other.
pub fn maps_category(e: &hugetune_host::procfs::MapEntry, after_data_of: bool) -> Category {
    let writable = e.perms.as_bytes().get(1) == Some(&b'w');
    let private = e.perms.as_bytes().get(3) == Some(&b'p');
    match e.path.as_str() {
        "[heap]" => Category::HeapSmall,
        p if p.starts_with("[stack") => Category::Stack,
        p if p.starts_with('[') => Category::Other,
        "" if writable && after_data_of => Category::Static,
        "" if writable && e.end - e.start >= ANON_LARGE => Category::HeapLarge,
        "" => Category::Other,
        _ if writable && private => Category::Static,
        _ => Category::Other,
    }
}

/// Extents from the maps kept with the snapshots, each version live from its
/// snapshot to the next version's (the first from the start).
fn from_maps(cap: &DamonCapture) -> Vec<Extent> {
    let versions: Vec<(u64, &str)> = cap
        .snapshots
        .iter()
        .filter_map(|s| s.maps.as_deref().map(|m| (s.t_ms, m)))
        .collect();
    let mut out = Vec::new();
    for (i, &(t, text)) in versions.iter().enumerate() {
        let from = if i == 0 { 0 } else { t };
        let to = versions.get(i + 1).map_or(u64::MAX, |v| v.0);
        let maps = parse_maps(text);
        for (j, e) in maps.iter().enumerate() {
            let after_data = j > 0 && {
                let p = &maps[j - 1];
                p.end == e.start
                    && !p.path.is_empty()
                    && !p.path.starts_with('[')
                    && p.perms.starts_with("rw")
            };
            out.push(Extent {
                start: e.start,
                end: e.end,
                category: Some(maps_category(e, after_data)),
                rank: 1,
                live_from_ms: from,
                live_to_ms: to,
            });
        }
    }
    out
}

fn observations(cap: &DamonCapture) -> Vec<SnapshotObs> {
    cap.snapshots
        .iter()
        .map(|s| SnapshotObs {
            t_ms: s.t_ms,
            regions: s
                .regions
                .iter()
                .map(|r| RegionObs {
                    start: r.start,
                    end: r.end,
                    nr_accesses: r.nr_accesses,
                    age: r.age,
                })
                .collect(),
        })
        .collect()
}

/// The analysis of a DAMON bundle: per-category frequencies, verdicts, and
/// predictions whose walks and faults are lower bounds priced by `cost`.
pub fn analyze_damon(
    path: &Path,
    b: Bundle,
    geometry: &TlbGeometry,
    cost: &CostModel,
) -> Result<Analysis> {
    let Some(cap) = damon_capture(path, &b)? else {
        bail!(
            "bundle {}: no reference stream and no 'damon' section: nothing to analyze",
            path.display()
        );
    };
    if cap.snapshots.is_empty() {
        bail!(
            "bundle {}: DAMON took no snapshot (it monitored the process for {:.1} s, a snapshot is taken every {} ms): monitor a longer run",
            path.display(),
            cap.duration_ms as f64 / 1e3,
            cap.snapshot_every_ms
        );
    }
    let log = AllocLog::parse(&b.alloc_log, path)?;
    let with_maps = cap.snapshots.iter().any(|s| s.maps.is_some());
    let view = if with_maps {
        let extents = from_maps(&cap);
        let peak = cap
            .snapshots
            .iter()
            .filter_map(|s| s.maps.as_deref())
            .map(|m| {
                let maps = parse_maps(m);
                maps.iter()
                    .enumerate()
                    .filter(|(_, e)| maps_category(e, false) == Category::HeapLarge)
                    .map(|(_, e)| (e.end - e.start).div_ceil(hugetune_model::page::SIZE_2M))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        LogView {
            extents,
            alloc_stats: Default::default(),
            heap_large_peak_pages: peak,
            program: ProgramTraits::default(),
            sites: vec![],
            threshold: log.header.threshold.max(1),
        }
    } else {
        from_log(&log)
    };
    let snaps = observations(&cap);
    let f = frequency::estimate(
        &FrequencyInput {
            snapshots: &snaps,
            max_nr_accesses: cap.max_nr_accesses,
            sample_us: cap.attrs.sample_us,
            extents: &view.extents,
        },
        geometry,
    );
    // The monitored span stands for the run: walks are per second of it.
    let seconds = b.meta.native.wall_s;
    let result = frequency::analysis_result(
        &f,
        geometry,
        seconds,
        view.heap_large_peak_pages,
        view.alloc_stats,
    );
    let predictions = rank::predictions(&result, cost, seconds);
    // The calibration's spread over the lower-bound counts (docs/model.md
    // §4.1; no sampling error: DAMON's counts are bounds, not samples).
    let intervals = rank::prediction_intervals(&result, cost, seconds, &[]);
    let mut significance = rank::significance(&result, seconds);
    significance.source = format!("damon: {} (lower bounds)", frequency::BASIS);
    Ok(Analysis {
        pool: None,
        meta: b.meta,
        stream: StreamSummary::default(),
        result,
        predictions,
        significance,
        cost: cost.clone(),
        threshold: view.threshold,
        sites: view.sites,
        program: view.program,
        mrc: vec![],
        errors: vec![],
        intervals,
        frequency: Some(f),
    })
}

/// What `analyze` and `optimize` print about a frequency estimate of the run
/// of `command` (monitored for `seconds`).
pub fn frequency_lines(
    command: &[String],
    seconds: f64,
    tlb_source: &str,
    sig: &hugetune_model::rank::Significance,
    f: &FrequencyResult,
) -> Vec<String> {
    let mut out = vec![
        format!(
            "profile    {} (DAMON region access frequencies, {} snapshots over {:.1} s)",
            command.join(" "),
            f.snapshots,
            seconds
        ),
        format!(
            "basis      {}: DAMON sees how often regions are accessed, not the order of the accesses, so walks and faults below are lower bounds (docs/damon.md)",
            f.basis
        ),
        format!(
            "reach      last TLB level ({tlb_source}): 4 KB pages reach {} ({} entries), 2 MB pages {} ({} entries)",
            bytes(f.reach.bytes_4k),
            f.reach.entries_4k,
            bytes(f.reach.bytes_2m),
            f.reach.entries_2m
        ),
    ];
    let us = f.sample_us;
    let rows: Vec<Vec<String>> = f
        .categories
        .iter()
        .filter(|c| c.monitored_bytes > 0)
        .map(|c| {
            let cat = c.category.unwrap_or(Category::Other);
            let v = f.verdicts.iter().find(|v| v.category == cat);
            vec![
                cat.name().to_string(),
                bytes(c.monitored_bytes),
                bytes(c.hot_bytes),
                bytes(c.touched_bytes),
                format!("{:.0}", c.pages_4k),
                format!("{:.1}", c.frames_2m),
                format!("{:.1}", c.mean_age),
                match v {
                    Some(v) if v.back => "back".into(),
                    Some(_) => "leave".into(),
                    None => "(4 KB only)".into(),
                },
            ]
        })
        .collect();
    out.push(format!(
        "\ncategories (means over the snapshots; hot = bytes touched per {} µs sample interval)",
        us
    ));
    out.push(hugetune_render::table(
        &[
            "category",
            "monitored",
            "hot",
            "touched",
            "4 KB pages/τ",
            "2 MB frames/τ",
            "age",
            "verdict",
        ],
        &rows,
    ));
    for v in &f.verdicts {
        if f.categories[v.category.index()].monitored_bytes > 0 {
            out.push(format!("  {}: {}", v.category, v.why));
        }
    }
    out.push(format!(
        "significance  at least {} TLB misses/s, {} faults/s with 4 KB pages ({}): {}",
        hugetune_render::count(sig.tlb_misses_per_s),
        hugetune_render::count(sig.faults_per_s),
        f.basis,
        if sig.passes {
            "passes"
        } else {
            "fails: huge pages cannot help much as far as DAMON sees"
        }
    ));
    out
}

/// A version-1 allocation log of no records (docs/formats.md §2): what a
/// bundle holds for a process that ran without the runtime library.
fn empty_log(pid: u32, threshold: u64) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&64u32.to_le_bytes());
    b[16..20].copy_from_slice(&pid.to_le_bytes());
    b[48..56].copy_from_slice(&threshold.to_le_bytes());
    b
}

/// `record --refs damon -p PID`: monitors a running process hugetune did not
/// start for up to `duration` (Ctrl-C or the process's exit end it early; the
/// bundle is written with what was seen), categorizing its regions from its
/// maps. The process is only read.
pub fn record_running(
    pid: u32,
    out: &Path,
    duration: Duration,
    tlb_override: Option<&Path>,
) -> Result<ProfileMeta> {
    if duration.is_zero() {
        bail!("--duration must be more than 0");
    }
    if !damon::pid_alive(pid) {
        bail!("-p {pid}: no such running process");
    }
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let path = std::fs::read_link(&exe).with_context(|| {
        format!(
            "-p {pid}: reading {} (monitoring another user's process needs root)",
            exe.display()
        )
    })?;
    let build_id = elf::build_id(&exe).unwrap_or(None);
    let command: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let command = if command.is_empty() {
        vec![path.display().to_string()]
    } else {
        command
    };
    let mut opts = DamonOptions::from_env();
    opts.max_duration = Some(duration);
    opts.capture_maps = true;
    damon::available(&opts.root)
        .map_err(|why| anyhow::anyhow!("DAMON cannot monitor process {pid} here: {why}"))?;
    note(format!(
        "monitoring pid {pid} (`{}`) with DAMON for up to {:.1} s; Ctrl-C ends it early and still writes the bundle",
        command.join(" "),
        duration.as_secs_f64()
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let guard = kernel_state::sigint_sets(stop.clone());
    let cap = damon::record_pid_until(pid, &opts, &stop)?;
    drop(guard);
    let secs = cap.duration_ms as f64 / 1e3;
    if stop.load(Ordering::SeqCst) {
        note(format!(
            "interrupted after {secs:.1} s: writing what was monitored"
        ));
    } else if !damon::pid_alive(pid) {
        note(format!(
            "process {pid} ended after {secs:.1} s of monitoring"
        ));
    }
    if cap.snapshots.is_empty() {
        bail!(
            "no DAMON snapshot of process {pid} in {secs:.1} s (one every {} ms): nothing to write",
            cap.snapshot_every_ms
        );
    }
    let meta = ProfileMeta {
        format: profile::FORMAT.into(),
        version: profile::META_VERSION,
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command,
        program: Program {
            path: path.display().to_string(),
            build_id,
        },
        ref_source: profile::DAMON_SOURCE.into(),
        ref_sampling: "regions".into(),
        refs: 0,
        instructions: 0,
        capture_s: secs,
        pid,
        // No run of its own: the monitored span stands for the run time.
        native: RunStats {
            wall_s: secs,
            ..Default::default()
        },
        machine: machine::machine(tlb_override)?,
        runtime_summary: None,
        ref_stream: None,
        // DAMON gives no reference stream: nothing to place on cores.
        affinity: None,
    };
    let section = Section {
        name: "damon".into(),
        data: zstd::encode_all(&serde_json::to_vec(&cap)?[..], 3)?,
    };
    Ok(profile::write(
        out,
        &meta,
        &empty_log(pid, ANON_LARGE),
        None,
        vec![section],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_host::procfs::MapEntry;

    #[test]
    fn the_empty_log_parses() {
        let l = AllocLog::parse(&empty_log(77, ANON_LARGE), Path::new("x")).unwrap();
        assert_eq!((l.header.pid, l.header.threshold), (77, ANON_LARGE));
        assert!(l.records.is_empty());
    }

    #[test]
    fn maps_kinds_become_categories() {
        let e = |s: u64, e: u64, perms: &str, path: &str| MapEntry {
            start: s,
            end: e,
            perms: perms.into(),
            offset: 0,
            path: path.into(),
        };
        use Category::*;
        assert_eq!(
            maps_category(&e(0, 1 << 20, "rw-p", "[heap]"), false),
            HeapSmall
        );
        assert_eq!(
            maps_category(&e(0, 1 << 20, "rw-p", "[stack]"), false),
            Stack
        );
        assert_eq!(maps_category(&e(0, 4096, "r--p", "[vvar]"), false), Other);
        assert_eq!(maps_category(&e(0, 1 << 30, "rw-p", ""), false), HeapLarge);
        assert_eq!(maps_category(&e(0, 8192, "rw-p", ""), false), Other);
        assert_eq!(maps_category(&e(0, 8192, "rw-p", ""), true), Static);
        assert_eq!(
            maps_category(&e(0, 8192, "rw-p", "/usr/bin/x"), false),
            Static
        );
        assert_eq!(
            maps_category(&e(0, 8192, "rw-s", "/data/file"), false),
            Other
        );
        assert_eq!(
            maps_category(&e(0, 8192, "r-xp", "/usr/bin/x"), false),
            Other
        );
        assert_eq!(maps_category(&e(0, 1 << 30, "---p", ""), false), Other);
    }
}
