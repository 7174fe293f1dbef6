//! Stage 3, plan: what the machine can give now (pools, THP/mTHP), the
//! record-mode sizing run that counts the pages this input needs, and the
//! training profile's predictions scaled to it.

use super::session_why;
use crate::artifacts::Artifacts;
use anyhow::{bail, Result};
use hugetune_capture::inputs::inputs_from_log;
use hugetune_capture::runner::{self, RunSpec};
use hugetune_capture::session::Driver;
use hugetune_format::alloclog::AllocLog;
use hugetune_format::env;
use hugetune_host::machine;
use hugetune_model::analysis::AnalysisResult;
use hugetune_model::categorize::Categorizer;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::page::SIZE_2M;
use hugetune_model::plan::{Availability, ProgramTraits, ThpMode};
use hugetune_model::pool::{PoolScope, PoolTrace, TraceBuilder};
use hugetune_model::rank::Prediction;
use hugetune_model::stream::AnalysisOptions;
use hugetune_model::tlb::TlbGeometry;
use std::ffi::OsString;
use std::path::Path;

pub fn availability_now() -> Availability {
    Availability {
        hugetlb_2m_free: machine::pool(2048).map_or(0, |p| p.available()),
        hugetlb_2m_total: machine::pool(2048).map_or(0, |p| p.nr),
        hugetlb_1g_free: machine::pool(1 << 20).map_or(0, |p| p.available()),
        thp: machine::thp_mode(Path::new(machine::THP_SYSFS)).unwrap_or(ThpMode::Never),
        mthp: machine::mthp_usable(Path::new(machine::THP_SYSFS)),
        thp_settable: machine::thp_settable(Path::new(machine::THP_SYSFS)),
        // Free 2 MB blocks within the watermarks (/proc/buddyinfo, zoneinfo): no
        // scan, no root; unknown when the files cannot be read.
        thp_2m_allocatable: frag::snapshot::take(&Default::default(), false)
            .ok()
            .map(|s| s.totals.allocatable_2m_now),
    }
}

/// What the fragmentation doctor (`hugetune frag --scan`) says about 1 GB
/// pages now, before a pool is grown for them: the kernel assembles a 1 GB page
/// from an aligned 1 GB range by migrating what is in it, so only ranges with no
/// unmovable page nor hole can become one, and only while free memory lasts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GiganticEstimate {
    /// Aligned 1 GB ranges with no unmovable page nor hole (compaction could
    /// assemble them); None without the kpageflags scan (it needs root).
    pub assemblable: Option<u64>,
    /// Of those, ranges entirely free now.
    pub free_now: Option<u64>,
    /// `MemAvailable`, bytes.
    pub mem_available: u64,
    /// 1 GB pages worth asking the kernel for now: the assemblable ranges, at
    /// most what the available memory holds beyond `GIGANTIC_HEADROOM`.
    pub obtainable: u64,
}

/// Memory left to everything else when 1 GB pages are counted as obtainable:
/// the program's other memory and the rest of the machine.
pub const GIGANTIC_HEADROOM: u64 = 1 << 30;

impl GiganticEstimate {
    pub fn new(assemblable: Option<u64>, free_now: Option<u64>, mem_available: u64) -> Self {
        GiganticEstimate {
            assemblable,
            free_now,
            mem_available,
            obtainable: assemblable.unwrap_or(0).min(by_memory(mem_available)),
        }
    }

    /// The 1 GB pages the available memory holds beyond `GIGANTIC_HEADROOM`:
    /// the most worth asking the kernel for, however clean memory is.
    pub fn by_memory(&self) -> u64 {
        by_memory(self.mem_available)
    }

    /// The line printed before the pool is grown.
    pub fn text(&self) -> String {
        let mem = format!(
            "{} available (1 GiB kept for the rest)",
            hugetune_render::bytes(self.mem_available)
        );
        match self.assemblable {
            Some(a) => format!(
                "fragmentation doctor: aligned 1 GB ranges with no unmovable page: {a} ({} \
                 entirely free now); {mem}: 1 GB pages obtainable now: about {}",
                self.free_now.unwrap_or(0),
                self.obtainable
            ),
            None => format!(
                "fragmentation doctor: 1 GB ranges not scanned (the kpageflags scan needs root); \
                 {mem}: no 1 GB page counted as obtainable"
            ),
        }
    }
}

fn by_memory(mem_available: u64) -> u64 {
    mem_available.saturating_sub(GIGANTIC_HEADROOM) >> 30
}

/// The fragmentation doctor's estimate of the 1 GB pages obtainable now (a
/// /proc/kpageflags scan: about a second per 16 GiB).
pub fn gigantic_estimate() -> Result<GiganticEstimate> {
    let snap = frag::snapshot::take(&Default::default(), true)?;
    Ok(GiganticEstimate::new(
        snap.totals.gb_ranges_clean,
        snap.totals.gb_ranges_free,
        machine::mem_available_kb().unwrap_or(0) << 10,
    ))
}

/// The mappings worth evaluating on this machine: heap-large on 1 GB pages when
/// the kernel has them; every category on the mTHP sizes usable now (`mthp_sizes`).
pub fn analysis_options(simulate: bool, geometry: &TlbGeometry) -> AnalysisOptions {
    AnalysisOptions {
        gigantic: machine::pool(1 << 20).is_some(),
        mthp: mthp_sizes(geometry, false),
        simulate,
        sites: vec![],
        threads: 0,
        ..Default::default()
    }
}

/// The mTHP sizes the analysis evaluates: of those usable now — and, with
/// `settable`, those hugetune can set for a run (root) — the geometry's
/// coalescing sizes, 64 KB and the largest below 2 MB
/// (`machine::mthp_evaluated`). `analyze`, `plan` and `optimize` leave
/// `settable` off unless asked (`--mthp`): a run with an mTHP size changes
/// system-wide controls while it lasts (PMD THP off included) for every
/// process on the machine, which the user must ask for; `rank`, which
/// measures every mapping, turns it on.
pub fn mthp_sizes(geometry: &TlbGeometry, settable: bool) -> Vec<u8> {
    let root = Path::new(machine::THP_SYSFS);
    let mut offered = machine::mthp_usable(root);
    if settable {
        offered.extend(
            machine::thp_settable(root)
                .into_iter()
                .filter(|s| (14..=20).contains(s)),
        );
    }
    let coalesce: Vec<u64> = geometry.levels.iter().filter_map(|l| l.coalesce).collect();
    machine::mthp_evaluated(&offered, &coalesce)
}

/// `--mthp 64k,1m`: folio shifts of mTHP sizes (16 KB .. 1 MB); `none`.
pub fn parse_mthp(list: &str) -> Result<Vec<u8>> {
    if list == "none" {
        return Ok(vec![]);
    }
    list.split(',')
        .map(|t| {
            let b: Backing = format!("thp-{}", t.trim())
                .parse()
                .map_err(|_| anyhow::anyhow!("--mthp: {t:?} is no mTHP size (16k .. 1m)"))?;
            match b {
                Backing::Thp(s) if b.is_mthp() => Ok(s),
                _ => bail!("--mthp: {t:?} is no mTHP size (16k .. 1m)"),
            }
        })
        .collect()
}

/// Peak 2 MB pages the runtime library will hold for heap-large objects when
/// `argv` runs, measured by one record-mode run (no reference tracing). It also
/// warms the machine up before timed runs.
pub fn sizing_run(art: &Artifacts, argv: &[OsString], driver: Option<&Driver>) -> Result<Sizing> {
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-size.")?;
    let log = dir.path().join("alloc.%p.log");
    let mut spec = RunSpec::new(argv.to_vec());
    spec.env = env::record_env(&env::RecordEnv {
        lib: &art.runtime_lib,
        log: Some(&log),
        summary: None,
        markers: false,
    });
    if hugetune_capture::launcher::launcher_of(argv).is_some() {
        // The launcher's own processes are not the program (docs/launchers.md).
        let follow_log = dir.path().join("follow.log");
        spec.env = env::follow_env(std::mem::take(&mut spec.env), "record", &follow_log, &[]);
    }
    spec.driver = driver.cloned();
    let bar = crate::progress::Progress::spinner("sizing run");
    let stats = runner::run(&spec)?;
    bar.set_message("reading the allocation logs");
    if stats.exit_code != 0 {
        bail!(
            "the command exited with status {} in the sizing run{}",
            stats.exit_code,
            session_why(&stats)
        );
    }
    let mut out = Sizing {
        heap_large_pages: 0,
        heap_small_peak_bytes: 0,
        program: ProgramTraits::default(),
        pool: Vec::new(),
    };
    // One log per process and image: children forked by the program add their own
    // peaks (they run at the same time as the parent in the worst case).
    for e in std::fs::read_dir(dir.path())?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("alloc.") {
            continue;
        }
        let l = AllocLog::read(&e.path())?;
        let inputs = inputs_from_log(&l);
        let mut c = Categorizer::new(inputs.space, inputs.threshold);
        for ev in &inputs.events {
            c.apply(ev);
        }
        out.heap_large_pages += c.peak_owned_frames();
        out.heap_small_peak_bytes += c.stats()[Category::HeapSmall.index()].peak_live_bytes;
        out.program.forks |= inputs.forks;
        out.program.fork_children += inputs.children.len() as u64;
        out.program.mapping_cuts += inputs.mapping_cuts;
        out.program.jvm |= inputs
            .modules
            .iter()
            .any(|m| hugetune_model::plan::is_jvm_module(m));
        out.pool.push(pool_trace(&l));
    }
    Ok(out)
}

/// The blocks a shared pool could hold, from one process's allocation log:
/// allocations of at least one 2 MB page, their frees and reallocs, with the
/// threads of the process (hugetune_model::pool).
pub fn pool_trace(log: &AllocLog) -> PoolTrace {
    use hugetune_format::alloclog::{Kind, PF_X};
    // The caller's module and offset (a plan's sites name them so).
    let site = |caller: u64| {
        log.modules.iter().find_map(|m| {
            m.segments
                .iter()
                .any(|s| {
                    let lo = m.bias.wrapping_add(s.vaddr);
                    s.flags & PF_X != 0 && caller >= lo && caller < lo.wrapping_add(s.memsz)
                })
                .then(|| (m.path.clone(), caller.wrapping_sub(m.bias)))
        })
    };
    let mut b = TraceBuilder::default();
    for r in &log.records {
        match r.kind {
            k if k.is_malloc_alloc() => {
                let s = if r.size >= SIZE_2M {
                    site(r.caller)
                } else {
                    None
                };
                b.alloc(r.tid, r.addr, r.size, k == Kind::Calloc, s);
            }
            Kind::Realloc | Kind::Reallocarray => {
                let s = if r.size >= SIZE_2M {
                    site(r.caller)
                } else {
                    None
                };
                b.realloc(r.tid, r.arg, r.addr, r.size, s);
            }
            Kind::Free => b.free(r.tid, r.addr),
            _ => b.thread(r.tid),
        }
    }
    b.finish()
}

/// What the untimed record-mode run of the reference input showed.
pub struct Sizing {
    /// Peak 2 MB pages the runtime library would hold for heap-large blocks.
    pub heap_large_pages: u64,
    /// Peak live bytes of heap-small objects (malloc below the threshold).
    pub heap_small_peak_bytes: u64,
    /// Whether the reference input forks (an input the profile did not see may).
    pub program: ProgramTraits,
    /// Per process, the blocks a shared pool could hold (plan `pool`).
    pub pool: Vec<PoolTrace>,
}

impl Sizing {
    /// Pool pages `pool hugetlb-2m N` would take (all processes) if every
    /// heap-large block went on `hugetlb-2m`: what `--reserve` may have to add.
    pub fn heap_large_pool_pages(&self, threshold: u64) -> u64 {
        let scope = PoolScope {
            heap_large: true,
            threshold,
            ..PoolScope::default()
        };
        hugetune_model::pool::profile(&self.pool, &scope).all_pool_pages()
    }

    /// Pool pages the heap-small arena needs on the reference input: its peak
    /// live bytes at the training profile's pages per byte (`training`: its
    /// heap-small peak live bytes and the pages its `heap-small:hugetlb`
    /// prediction needs; the ratio includes the arena's chunk spacing and
    /// per-thread regions), else at one page per 2 MB plus an eighth.
    pub fn heap_small_pages(&self, training: Option<(u64, u64)>) -> u64 {
        if self.heap_small_peak_bytes == 0 {
            return 0;
        }
        let frame = 2.0 * 1024.0 * 1024.0;
        let per_byte = match training {
            Some((bytes, pages)) if bytes > 0 && pages > 0 => {
                (pages as f64 / bytes as f64).max(1.0 / frame)
            }
            _ => 1.125 / frame,
        };
        (self.heap_small_peak_bytes as f64 * per_byte).ceil() as u64
    }
}

/// The training profile's heap-small peak live bytes and the pool pages its
/// `heap-small:hugetlb` prediction needs (for `Sizing::heap_small_pages`).
pub fn heap_small_training(result: &AnalysisResult, preds: &[Prediction]) -> Option<(u64, u64)> {
    let pages = preds
        .iter()
        .find(|p| p.assignments == [(Category::HeapSmall, Backing::Hugetlb2m)])?
        .hugetlb_pages;
    Some((
        result.alloc_stats[Category::HeapSmall.index()].peak_live_bytes,
        pages,
    ))
}

/// Adjusts predictions of a training profile to the pool pages the reference
/// run needs: heap-large's from the sizing run's peak, heap-small's arena pages
/// from `heap_small_pages` (`Sizing::heap_small_pages`).
pub fn with_reference_pages(
    preds: &[Prediction],
    heap_large_pages: u64,
    heap_small_pages: u64,
) -> Vec<Prediction> {
    preds
        .iter()
        .cloned()
        .map(|mut p| {
            let has = |c, b| p.assignments.contains(&(c, b));
            let large_2m = has(Category::HeapLarge, Backing::Hugetlb2m);
            let large_1g = has(Category::HeapLarge, Backing::Hugetlb1g);
            let small = has(Category::HeapSmall, Backing::Hugetlb2m);
            if !(large_2m || large_1g || small) {
                return p;
            }
            // Static data's pages do not change with the input.
            let mut pages = p.static_pages_1g.1;
            p.hugetlb_1g_pages = p.static_pages_1g.0;
            if large_2m {
                pages += heap_large_pages;
            }
            // On 1 GB pages: whole gigabytes, the rest on 2 MB pages (the
            // library's 1 GB layout), from the reference input's 2 MB count.
            if large_1g {
                p.hugetlb_1g_pages += heap_large_pages / 512;
                pages += heap_large_pages % 512;
            }
            if small {
                pages += heap_small_pages;
            }
            p.hugetlb_pages = pages;
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 1 GB pages counted as obtainable: the assemblable ranges, bounded by
    /// the available memory less the headroom; none without a scan.
    #[test]
    fn obtainable_gigantic_pages_are_bounded_by_ranges_and_memory() {
        let gib = 1u64 << 30;
        let e = GiganticEstimate::new(Some(9), Some(2), 14 * gib + 5);
        assert_eq!(e.obtainable, 9);
        assert!(
            e.text()
                .contains("aligned 1 GB ranges with no unmovable page: 9 (2 entirely free now)")
                && e.text().ends_with("1 GB pages obtainable now: about 9"),
            "{}",
            e.text()
        );
        // Memory binds: 3.5 GiB available, 1 GiB kept: 2 pages.
        assert_eq!(
            GiganticEstimate::new(Some(9), None, 7 * gib / 2).obtainable,
            2
        );
        assert_eq!(GiganticEstimate::new(Some(9), None, gib / 2).obtainable, 0);
        // No scan (not root): nothing counted, and the line says why.
        let e = GiganticEstimate::new(None, None, 14 * gib);
        assert_eq!(e.obtainable, 0);
        assert!(e.text().contains("needs root"), "{}", e.text());
    }
}
