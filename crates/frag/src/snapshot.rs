//! Everything `hugetune frag` reads at one moment, and what it derives: per zone
//! and order the kernel's indices, pageblocks per migratetype, watermarks, 2 MB
//! pages allocatable now (the order-9 watermark check of `__zone_watermark_ok`),
//! and with a kpageflags scan, 2 MB pages after perfect compaction and clean 1 GB
//! ranges. `build` is pure (texts in, snapshot out); `read_live` does the I/O.

use crate::index::{self, OrderMetrics};
use crate::parse::{self, PageTypeInfo, ZoneInfo};
use crate::scan::{self, Scan, StateCounts};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// x86-64 defaults, used when pagetypeinfo (root only) does not say.
pub const DEFAULT_PAGEBLOCK_ORDER: u32 = 9;
/// Order of a 2 MB page and of a 1 GB page with 4 KB base pages.
pub const ORDER_2M: u32 = 9;
pub const ORDER_1G: u32 = 18;

/// The raw texts a snapshot is built from (a live machine or a fixture folder).
#[derive(Debug, Clone, Default)]
pub struct Texts {
    pub buddyinfo: String,
    pub zoneinfo: String,
    pub vmstat: String,
    /// Root only (mode 0400).
    pub pagetypeinfo: Option<String>,
    pub extfrag_threshold: Option<String>,
    pub kernel: Option<String>,
    pub pools: Vec<PoolState>,
    /// What could not be read, and why (shown in the report).
    pub skipped: Vec<String>,
}

/// One hugetlb pool (`/sys/kernel/mm/hugepages/hugepages-<kb>kB`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolState {
    pub page_kb: u64,
    pub nr: u64,
    pub free: u64,
    pub reserved: u64,
    pub surplus: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
    pub boost: Option<u64>,
    /// `lowmem_reserve` for allocations that may use every zone up to ZONE_MOVABLE
    /// (huge pages for user memory): added to the watermark in this zone.
    pub lowmem_reserve: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TypeFreeRow {
    pub migratetype: String,
    pub free: Vec<u64>,
    pub capped: bool,
}

/// 2 MB (order 9) pages the zone can give now.
#[derive(Debug, Clone, Serialize)]
pub struct Now2M {
    /// Σ_{o≥9} nr_free[o]·2^(o−9) over every migratetype (buddyinfo).
    pub free_blocks: u64,
    /// The same without HighAtomic and Isolate lists (pagetypeinfo; else = free_blocks).
    pub usable_blocks: u64,
    /// Free pages the watermark check discounts (free HighAtomic pages).
    pub unusable_free_pages: u64,
    /// How many successive order-9 allocations pass the low / min watermark check.
    pub by_low_watermark: u64,
    pub by_min_watermark: u64,
    /// min(usable_blocks, by_low_watermark): what a normal allocation gets now.
    pub allocatable: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ZoneScanSummary {
    pub pageblocks: StateCounts,
    /// Pageblocks with unmovable pages among movable ones.
    pub tainted_fraction: f64,
    pub pages_free: u64,
    pub pages_movable: u64,
    pub pages_thp: u64,
    pub pages_hugetlb: u64,
    pub pages_unmovable: u64,
    pub pages_hole: u64,
    /// Free pages the scan found in buddy blocks vs the zone's nr_free_pages.
    pub inferred_free_pages: u64,
    pub free_blocks_by_order: Vec<u64>,
    /// Free + clean pageblocks: 2 MB pages perfect compaction could make.
    pub clean_pageblocks: u64,
    /// min(clean_pageblocks, what the free pages allow above the low watermark).
    pub after_compaction_2m: u64,
    pub gb_ranges: u64,
    pub gb_ranges_clean: u64,
    pub gb_ranges_free: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ZoneReport {
    pub node: u32,
    pub zone: String,
    pub zone_idx: usize,
    pub start_pfn: Option<u64>,
    pub spanned: u64,
    pub present: u64,
    pub managed: u64,
    pub free_pages: u64,
    pub watermarks: Watermarks,
    pub orders: Vec<OrderMetrics>,
    pub free_by_type: Vec<TypeFreeRow>,
    /// Pageblocks per migratetype (pagetypeinfo column order).
    pub pageblocks: BTreeMap<String, u64>,
    pub mixed_pageblocks: Option<BTreeMap<String, u64>>,
    pub now_2m: Now2M,
    /// Fragmentation index at order 9 interpreted under vm.extfrag_threshold.
    pub order9_verdict: index::ThresholdVerdict,
    pub scan: Option<ZoneScanSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Counters {
    /// compact_*, thp_*, pgmigrate_*, htlb_* and extfrag counters present.
    pub vmstat: BTreeMap<String, u64>,
    /// thp_fault_fallback / (thp_fault_alloc + thp_fault_fallback).
    pub thp_fault_failure_rate: Option<f64>,
    /// (thp_fault_fallback − thp_fault_fallback_charge) / (alloc + fallback):
    /// fallbacks not caused by memcg charge limits.
    pub thp_fragmentation_failure_rate: Option<f64>,
    /// compact_success / compact_stall and compact_fail / compact_stall.
    pub compact_success_rate: Option<f64>,
    pub compact_fail_rate: Option<f64>,
}

impl Counters {
    pub fn from_vmstat(all: &BTreeMap<String, u64>) -> Counters {
        let g = |k: &str| all.get(k).copied();
        let ratio = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
            _ => None,
        };
        let alloc = g("thp_fault_alloc");
        let fb = g("thp_fault_fallback");
        let denom = match (alloc, fb) {
            (Some(a), Some(f)) => Some(a + f),
            _ => None,
        };
        let frag_fb = fb.map(|f| f.saturating_sub(g("thp_fault_fallback_charge").unwrap_or(0)));
        Counters {
            vmstat: all
                .iter()
                .filter(|(k, _)| parse::vmstat_relevant(k))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            thp_fault_failure_rate: ratio(fb, denom),
            thp_fragmentation_failure_rate: ratio(frag_fb, denom),
            compact_success_rate: ratio(g("compact_success"), g("compact_stall")),
            compact_fail_rate: ratio(g("compact_fail"), g("compact_stall")),
        }
    }

    /// Counter increases since `earlier` (for `--watch` and `--try`).
    pub fn delta(&self, earlier: &Counters) -> BTreeMap<String, i64> {
        self.vmstat
            .iter()
            .map(|(k, v)| {
                let e = earlier.vmstat.get(k).copied().unwrap_or(0);
                (k.clone(), *v as i64 - e as i64)
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    pub allocatable_2m_now: u64,
    pub free_2m_blocks: u64,
    pub after_compaction_2m: Option<u64>,
    pub clean_pageblocks: Option<u64>,
    pub tainted_pageblocks: Option<u64>,
    pub gb_ranges_clean: Option<u64>,
    pub gb_ranges_free: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScanInfo {
    pub seconds: f64,
    pub read_seconds: f64,
    pub pfns: u64,
    pub bytes_read: u64,
    pub pages_per_block: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Version of the JSON layout (docs/frag.md).
    pub format: u32,
    pub kernel: Option<String>,
    pub pageblock_order: u32,
    pub max_order: u32,
    /// Migratetype columns of pagetypeinfo, in kernel number order.
    pub migratetypes: Vec<String>,
    pub extfrag_threshold: Option<u32>,
    pub zones: Vec<ZoneReport>,
    pub counters: Counters,
    pub hugetlb_pools: Vec<PoolState>,
    pub totals: Totals,
    pub scan: Option<ScanInfo>,
    /// What was not read, and why (e.g. not root).
    pub skipped: Vec<String>,
    #[serde(skip)]
    pub scan_data: Option<Scan>,
}

/// Successive order-`order` allocations that pass `__zone_watermark_ok`:
/// the k-th needs `free − (k−1)·2^order − (2^order − 1) − unusable > mark`.
pub fn watermark_allocations(free: u64, unusable: u64, mark: u64, order: u32) -> u64 {
    let size = 1u64 << order;
    // free − k·size + 1 − unusable > mark  ⇔  k·size < free + 1 − unusable − mark
    let x = (free + 1) as i128 - unusable as i128 - mark as i128;
    if x <= 0 {
        0
    } else {
        ((x - 1) / size as i128) as u64
    }
}

fn pages_of(free: &[u64]) -> u64 {
    free.iter()
        .enumerate()
        .map(|(o, &n)| n.saturating_mul(1u64 << o.min(63)))
        .fold(0u64, u64::saturating_add)
}

fn blocks_at_least(free: &[u64], order: u32) -> u64 {
    free.iter()
        .enumerate()
        .skip(order as usize)
        .map(|(o, &n)| n.saturating_mul(1u64 << (o as u32 - order).min(63)))
        .fold(0u64, u64::saturating_add)
}

/// Builds the snapshot from texts; `scan` is the optional kpageflags scan.
pub fn build(t: &Texts, scan: Option<Scan>) -> Result<Snapshot> {
    let buddy = parse::parse_buddyinfo(&t.buddyinfo, "/proc/buddyinfo")?;
    let zinfo = parse::parse_zoneinfo(&t.zoneinfo, "/proc/zoneinfo")?;
    let vm = parse::parse_vmstat(&t.vmstat, "/proc/vmstat")?;
    let pti: Option<PageTypeInfo> = t
        .pagetypeinfo
        .as_deref()
        .map(|s| parse::parse_pagetypeinfo(s, "/proc/pagetypeinfo"))
        .transpose()?;
    let threshold = t
        .extfrag_threshold
        .as_deref()
        .map(|s| parse::parse_threshold(s, "/proc/sys/vm/extfrag_threshold"))
        .transpose()?;
    let pageblock_order = pti
        .as_ref()
        .map(|p| p.pageblock_order)
        .unwrap_or(DEFAULT_PAGEBLOCK_ORDER);
    let max_order = buddy
        .iter()
        .map(|b| b.free.len().saturating_sub(1) as u32)
        .max()
        .unwrap_or(10);
    let mut zones = Vec::new();
    for b in &buddy {
        let z: Option<&ZoneInfo> = zinfo.iter().find(|z| z.node == b.node && z.name == b.zone);
        let Some(z) = z else {
            anyhow::bail!(
                "/proc/buddyinfo has node {} zone {} that /proc/zoneinfo lacks",
                b.node,
                b.zone
            );
        };
        // Highest zone index user huge pages may use: ZONE_MOVABLE's position when
        // zoneinfo lists it (4.12+ print every zone), else the last protection entry
        // (MAX_NR_ZONES − 1: Movable or Device, whose reserves equal Movable's).
        let hi_idx = zinfo
            .iter()
            .filter(|x| x.node == z.node)
            .position(|x| x.name == "Movable")
            .unwrap_or(z.protection.len().saturating_sub(1));
        let reserve = z.protection.get(hi_idx).copied().unwrap_or(0);
        let (free_by_type, usable_blocks, unusable_free) = match &pti {
            Some(p) => {
                let rows: Vec<TypeFreeRow> = p
                    .free_of(b.node, &b.zone)
                    .map(|f| TypeFreeRow {
                        migratetype: f.migratetype.clone(),
                        free: f.free.clone(),
                        capped: f.capped,
                    })
                    .collect();
                let excluded = |m: &str| matches!(m, "HighAtomic" | "Isolate" | "Reserve");
                let usable = if rows.is_empty() {
                    blocks_at_least(&b.free, ORDER_2M)
                } else {
                    rows.iter()
                        .filter(|r| !excluded(&r.migratetype))
                        .map(|r| blocks_at_least(&r.free, ORDER_2M))
                        .sum()
                };
                let ha: u64 = rows
                    .iter()
                    .filter(|r| r.migratetype == "HighAtomic")
                    .map(|r| pages_of(&r.free))
                    .sum();
                (rows, usable, ha)
            }
            None => (Vec::new(), blocks_at_least(&b.free, ORDER_2M), 0),
        };
        let by_low = watermark_allocations(z.free, unusable_free, z.low + reserve, ORDER_2M);
        let by_min = watermark_allocations(z.free, unusable_free, z.min + reserve, ORDER_2M);
        let now = Now2M {
            free_blocks: blocks_at_least(&b.free, ORDER_2M),
            usable_blocks,
            unusable_free_pages: unusable_free,
            by_low_watermark: by_low,
            by_min_watermark: by_min,
            allocatable: usable_blocks.min(by_low),
        };
        let orders = index::zone_metrics(&b.free, max_order);
        let fi9 = orders
            .get(ORDER_2M as usize)
            .map(|m| m.fragmentation_index)
            .unwrap_or(0);
        let named = |counts: &[u64], cols: &[String]| -> BTreeMap<String, u64> {
            cols.iter().cloned().zip(counts.iter().copied()).collect()
        };
        let (pageblocks, mixed) = match &pti {
            Some(p) => (
                p.blocks_of(b.node, &b.zone)
                    .map(|zb| named(&zb.counts, &p.block_types))
                    .unwrap_or_default(),
                p.mixed.as_ref().map(|m| {
                    m.iter()
                        .find(|zb| zb.node == b.node && zb.zone == b.zone)
                        .map(|zb| named(&zb.counts, &p.block_types))
                        .unwrap_or_default()
                }),
            ),
            None => (BTreeMap::new(), None),
        };
        let zscan = scan.as_ref().and_then(|s| {
            s.zones
                .iter()
                .find(|x| x.node == b.node && x.zone == b.zone)
                .map(|x| {
                    let st = x.blocks_by_state;
                    let in_zone = st.free + st.clean + st.huge + st.tainted + st.unmovable;
                    let clean = st.free + st.clean;
                    ZoneScanSummary {
                        pageblocks: st,
                        tainted_fraction: if in_zone > 0 {
                            st.tainted as f64 / in_zone as f64
                        } else {
                            0.0
                        },
                        pages_free: x.pages.free as u64,
                        pages_movable: x.pages.movable as u64,
                        pages_thp: x.pages.thp as u64,
                        pages_hugetlb: x.pages.hugetlb as u64,
                        pages_unmovable: x.pages.unmovable as u64,
                        pages_hole: x.pages.hole as u64,
                        inferred_free_pages: x.pages.free as u64,
                        free_blocks_by_order: x.free_blocks_by_order.clone(),
                        clean_pageblocks: clean,
                        after_compaction_2m: clean.min(by_low),
                        gb_ranges: x.gb_ranges,
                        gb_ranges_clean: x.gb_ranges_clean,
                        gb_ranges_free: x.gb_ranges_free,
                    }
                })
        });
        zones.push(ZoneReport {
            node: b.node,
            zone: b.zone.clone(),
            zone_idx: z.zone_idx,
            start_pfn: z.start_pfn,
            spanned: z.spanned,
            present: z.present,
            managed: z.managed,
            free_pages: z.free,
            watermarks: Watermarks {
                min: z.min,
                low: z.low,
                high: z.high,
                boost: z.boost,
                lowmem_reserve: reserve,
            },
            orders,
            free_by_type,
            pageblocks,
            mixed_pageblocks: mixed,
            now_2m: now,
            order9_verdict: index::threshold_verdict(ORDER_2M, fi9, threshold.unwrap_or(500)),
            scan: zscan,
        });
    }
    let sum = |f: &dyn Fn(&ZoneReport) -> u64| zones.iter().map(f).sum::<u64>();
    let scanned = scan.is_some();
    let opt = |f: &dyn Fn(&ZoneScanSummary) -> u64| {
        scanned.then(|| {
            zones
                .iter()
                .filter_map(|z| z.scan.as_ref())
                .map(f)
                .sum::<u64>()
        })
    };
    let totals = Totals {
        allocatable_2m_now: sum(&|z| z.now_2m.allocatable),
        free_2m_blocks: sum(&|z| z.now_2m.free_blocks),
        after_compaction_2m: opt(&|s| s.after_compaction_2m),
        clean_pageblocks: opt(&|s| s.clean_pageblocks),
        tainted_pageblocks: opt(&|s| s.pageblocks.tainted),
        gb_ranges_clean: opt(&|s| s.gb_ranges_clean),
        gb_ranges_free: opt(&|s| s.gb_ranges_free),
    };
    Ok(Snapshot {
        format: 1,
        kernel: t.kernel.clone(),
        pageblock_order,
        max_order,
        migratetypes: pti
            .as_ref()
            .map(|p| p.block_types.clone())
            .unwrap_or_default(),
        extfrag_threshold: threshold,
        zones,
        counters: Counters::from_vmstat(&vm),
        hugetlb_pools: t.pools.clone(),
        totals,
        scan: scan.as_ref().map(|s| ScanInfo {
            seconds: s.seconds,
            read_seconds: s.read_seconds,
            pfns: s.pfns_scanned,
            bytes_read: s.bytes_read,
            pages_per_block: s.pages_per_block,
        }),
        skipped: t.skipped.clone(),
        scan_data: scan,
    })
}

/// Where the live files are (overridable for tests).
pub struct Paths {
    pub proc: PathBuf,
    pub sys: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            proc: "/proc".into(),
            sys: "/sys".into(),
        }
    }
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn read_pools(sys: &Path) -> Vec<PoolState> {
    let dir = sys.join("kernel/mm/hugepages");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(kb) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let g = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.push(PoolState {
            page_kb: kb,
            nr: g("nr_hugepages"),
            free: g("free_hugepages"),
            reserved: g("resv_hugepages"),
            surplus: g("surplus_hugepages"),
        });
    }
    out.sort_by_key(|p| p.page_kb);
    out
}

/// Reads the live files; what is unreadable (pagetypeinfo without root) is listed
/// in `skipped` instead of failing.
pub fn read_live(paths: &Paths) -> Result<Texts> {
    let mut t = Texts {
        buddyinfo: read(&paths.proc.join("buddyinfo"))?,
        zoneinfo: read(&paths.proc.join("zoneinfo"))?,
        vmstat: read(&paths.proc.join("vmstat"))?,
        ..Default::default()
    };
    match read(&paths.proc.join("pagetypeinfo")) {
        Ok(s) => t.pagetypeinfo = Some(s),
        Err(e) => t.skipped.push(format!(
            "per-migratetype free lists and pageblock counts: {e:#}{}",
            if is_root() { "" } else { " (needs root)" }
        )),
    }
    match read(&paths.proc.join("sys/vm/extfrag_threshold")) {
        Ok(s) => t.extfrag_threshold = Some(s),
        Err(e) => t.skipped.push(format!("extfrag_threshold: {e:#}")),
    }
    t.kernel = read(&paths.proc.join("sys/kernel/osrelease"))
        .ok()
        .map(|s| s.trim().to_string());
    t.pools = read_pools(&paths.sys);
    Ok(t)
}

/// Zone spans for the kpageflags scan: every populated zone with a start_pfn.
pub fn scan_spans(zoneinfo_text: &str) -> Result<Vec<scan::Span>> {
    let z = parse::parse_zoneinfo(zoneinfo_text, "/proc/zoneinfo")?;
    Ok(z.iter()
        .filter(|z| z.populated())
        .filter_map(|z| Some((z.node, z.name.clone(), z.start_pfn?, z.end_pfn()?)))
        .collect())
}

/// Reads everything; scans kpageflags when `want_scan` (root), else notes why not.
pub fn take(paths: &Paths, want_scan: bool) -> Result<Snapshot> {
    let mut t = read_live(paths)?;
    let mut s = None;
    if want_scan {
        let kpf = paths.proc.join("kpageflags");
        if !is_root() {
            t.skipped
                .push("kpageflags scan (tainted pageblocks, 2 MB after compaction, 1 GB ranges): needs root".into());
        } else {
            let spans = scan_spans(&t.zoneinfo)?;
            let order = t
                .pagetypeinfo
                .as_deref()
                .and_then(|p| parse::parse_pagetypeinfo(p, "/proc/pagetypeinfo").ok())
                .map(|p| p.pageblock_order)
                .unwrap_or(DEFAULT_PAGEBLOCK_ORDER);
            let max_order = parse::parse_buddyinfo(&t.buddyinfo, "/proc/buddyinfo")?
                .iter()
                .map(|b| b.free.len().saturating_sub(1) as u32)
                .max()
                .unwrap_or(10);
            match scan::scan_kpageflags(&kpf, &spans, order, max_order) {
                Ok(sc) => s = Some(sc),
                Err(e) => t.skipped.push(format!("kpageflags scan: {e:#}")),
            }
        }
    }
    build(&t, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_count() {
        // free 2048, no reserve, mark 0: k-th order-9 alloc needs 2048−(k−1)·512−511 > 0:
        // k=1: 1537, k=2: 1025, k=3: 513, k=4: 1 > 0 → 4 allocations.
        assert_eq!(watermark_allocations(2048, 0, 0, 9), 4);
        // mark 1: k=4 gives 1 > 1 false → 3.
        assert_eq!(watermark_allocations(2048, 0, 1, 9), 3);
        assert_eq!(watermark_allocations(100, 0, 1000, 9), 0);
        assert_eq!(watermark_allocations(512, 0, 0, 9), 1);
        assert_eq!(watermark_allocations(511, 0, 0, 9), 0);
    }

    fn fixture(name: &str) -> Texts {
        let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let r = |f: &str| std::fs::read_to_string(d.join(f)).ok();
        Texts {
            buddyinfo: r("buddyinfo").unwrap(),
            zoneinfo: r("zoneinfo").unwrap(),
            vmstat: "thp_fault_alloc 1\n".into(),
            pagetypeinfo: r("pagetypeinfo"),
            ..Default::default()
        }
    }

    #[test]
    fn highatomic_blocks_and_lowmem_reserve_are_not_allocatable() {
        // 5.10 fixture, Normal: the only order >= 9 blocks are two HighAtomic
        // order-9 blocks: free_blocks 2, usable 0, and their 1024 pages are
        // discounted from the watermark check.
        let s = build(&fixture("5.10-nocma-pageowner"), None).unwrap();
        let n = &s.zones[2].now_2m;
        assert_eq!((n.free_blocks, n.usable_blocks, n.allocatable), (2, 0, 0));
        assert_eq!(n.unusable_free_pages, 1024);
        // DMA: 7 free 2 MB blocks (1 order-9 + 3 order-10), but the lowmem reserve
        // for ZONE_MOVABLE (31831 pages) exceeds the zone: none for user pages.
        let d = &s.zones[0];
        assert_eq!(d.watermarks.lowmem_reserve, 31831);
        assert_eq!((d.now_2m.free_blocks, d.now_2m.allocatable), (7, 0));
        // DMA32: 3 + 2·661 = 1325 free 2 MB blocks; the watermark allows
        // (free + 1 − 0 − low − reserve − 1) / 512 allocations (low 2000,
        // reserve 28878).
        let z = &s.zones[1];
        let want = (z.free_pages - 2000 - 28878) / 512;
        assert_eq!(z.now_2m.by_low_watermark, want);
        assert_eq!(z.now_2m.allocatable, want.min(1325));
        // 4.4 fixture (zoneinfo lists populated zones only): the reserve is the
        // last protection entry.
        let s4 = build(&fixture("4.4-numa-cma"), None).unwrap();
        assert_eq!(s4.zones[1].watermarks.lowmem_reserve, 13005);
        assert_eq!(s4.zones[3].node, 1);
    }

    #[test]
    fn rates() {
        let mut m = BTreeMap::new();
        m.insert("thp_fault_alloc".to_string(), 90);
        m.insert("thp_fault_fallback".to_string(), 10);
        m.insert("thp_fault_fallback_charge".to_string(), 4);
        m.insert("compact_stall".to_string(), 8);
        m.insert("compact_fail".to_string(), 2);
        m.insert("compact_success".to_string(), 6);
        m.insert("nr_free_pages".to_string(), 6);
        let c = Counters::from_vmstat(&m);
        assert_eq!(c.thp_fault_failure_rate, Some(0.1));
        assert_eq!(c.thp_fragmentation_failure_rate, Some(0.06));
        assert_eq!(c.compact_fail_rate, Some(0.25));
        assert!(!c.vmstat.contains_key("nr_free_pages"));
    }
}
