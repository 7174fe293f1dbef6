//! Parsers for the kernel's memory state files. Pure functions over text: the
//! caller passes the file's name for error messages. Every malformed input gives a
//! `ParseError` naming the file and the line (1-based); nothing here panics.
//!
//! Formats (`mm/vmstat.c`): buddyinfo `frag_show_print`, pagetypeinfo
//! `pagetypeinfo_show*`, zoneinfo `zoneinfo_show_print`, vmstat `vmstat_show`,
//! as printed by 4.x, 5.x and 6.x kernels (see `tests/fixtures/README.md`).

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct ParseError {
    pub file: String,
    /// 1-based; 0 when the problem is the file as a whole (e.g. empty).
    pub line: usize,
    pub msg: String,
}

fn err(file: &str, line: usize, msg: impl Into<String>) -> ParseError {
    ParseError {
        file: file.to_string(),
        line,
        msg: msg.into(),
    }
}

fn num(file: &str, line: usize, tok: &str, what: &str) -> Result<u64, ParseError> {
    tok.parse::<u64>().map_err(|_| {
        err(
            file,
            line,
            format!("{what}: expected a number, found {tok:?}"),
        )
    })
}

/// Parses `"Node 0, zone   Normal"` at the start of `s`; returns (node, zone, rest).
fn node_zone<'a>(
    file: &str,
    line: usize,
    s: &'a str,
) -> Result<(u32, String, &'a str), ParseError> {
    let bad = || {
        err(
            file,
            line,
            format!("expected \"Node N, zone NAME\", found {s:?}"),
        )
    };
    let rest = s.trim_start().strip_prefix("Node").ok_or_else(bad)?;
    let (node, rest) = rest.split_once(',').ok_or_else(bad)?;
    let node = node
        .trim()
        .parse::<u32>()
        .map_err(|_| err(file, line, format!("bad node number {:?}", node.trim())))?;
    let rest = rest.trim_start().strip_prefix("zone").ok_or_else(bad)?;
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(rest.len());
    let zone = &rest[..end];
    if zone.is_empty() {
        return Err(bad());
    }
    Ok((node, zone.to_string(), &rest[end..]))
}

// ---------------------------------------------------------------- buddyinfo

/// One line of `/proc/buddyinfo`: free blocks per order (index = order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuddyZone {
    pub node: u32,
    pub zone: String,
    pub free: Vec<u64>,
}

pub fn parse_buddyinfo(text: &str, file: &str) -> Result<Vec<BuddyZone>, ParseError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let ln = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let (node, zone, rest) = node_zone(file, ln, l)?;
        let free = rest
            .split_whitespace()
            .map(|t| num(file, ln, t, "free block count"))
            .collect::<Result<Vec<_>, _>>()?;
        if free.is_empty() || free.len() > 64 {
            return Err(err(
                file,
                ln,
                format!("{} order columns (1..64 expected)", free.len()),
            ));
        }
        out.push(BuddyZone { node, zone, free });
    }
    if out.is_empty() {
        return Err(err(file, 0, "no zones"));
    }
    Ok(out)
}

// ---------------------------------------------------------------- pagetypeinfo

/// Free blocks per order of one migratetype in one zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeFree {
    pub node: u32,
    pub zone: String,
    pub migratetype: String,
    pub free: Vec<u64>,
    /// Some counts were printed as `>100000` (5.5+ caps them) and hold 100000.
    pub capped: bool,
}

/// Pageblocks per migratetype (or mixed blocks) in one zone; `counts` follows the
/// column list of its table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZoneBlocks {
    pub node: u32,
    pub zone: String,
    pub counts: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct PageTypeInfo {
    pub pageblock_order: u32,
    pub pages_per_block: u64,
    pub free: Vec<TypeFree>,
    /// Migratetype names of the "Number of blocks type" table, in kernel number order.
    pub block_types: Vec<String>,
    pub blocks: Vec<ZoneBlocks>,
    /// "Number of mixed blocks" (only with `CONFIG_PAGE_OWNER` and `page_owner=on`).
    pub mixed: Option<Vec<ZoneBlocks>>,
}

impl PageTypeInfo {
    pub fn blocks_of(&self, node: u32, zone: &str) -> Option<&ZoneBlocks> {
        self.blocks
            .iter()
            .find(|b| b.node == node && b.zone == zone)
    }

    pub fn free_of<'a>(
        &'a self,
        node: u32,
        zone: &'a str,
    ) -> impl Iterator<Item = &'a TypeFree> + 'a {
        self.free
            .iter()
            .filter(move |f| f.node == node && f.zone == zone)
    }
}

fn header_after<'a>(l: &'a str, key: &str) -> Option<&'a str> {
    l.trim_start().strip_prefix(key)
}

pub fn parse_pagetypeinfo(text: &str, file: &str) -> Result<PageTypeInfo, ParseError> {
    #[derive(PartialEq)]
    enum Sec {
        Top,
        Free,
        Blocks,
        Mixed,
    }
    let mut p = PageTypeInfo::default();
    let (mut have_order, mut have_ppb) = (false, false);
    let mut sec = Sec::Top;
    let mut n_orders = 0usize;
    let mut mixed_types: Vec<String> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let ln = i + 1;
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(v) = header_after(t, "Page block order:") {
            p.pageblock_order = num(file, ln, v.trim(), "page block order")? as u32;
            if p.pageblock_order > 40 {
                return Err(err(file, ln, "page block order out of range"));
            }
            have_order = true;
        } else if let Some(v) = header_after(t, "Pages per block:") {
            p.pages_per_block = num(file, ln, v.trim(), "pages per block")?;
            have_ppb = true;
        } else if let Some(v) = header_after(t, "Free pages count per migrate type at order") {
            let orders = v
                .split_whitespace()
                .map(|o| num(file, ln, o, "order"))
                .collect::<Result<Vec<_>, _>>()?;
            if orders.is_empty() || orders.iter().enumerate().any(|(i, &o)| o != i as u64) {
                return Err(err(file, ln, "orders must be 0, 1, 2, …"));
            }
            n_orders = orders.len();
            sec = Sec::Free;
        } else if let Some(v) = header_after(t, "Number of blocks type") {
            p.block_types = v.split_whitespace().map(str::to_string).collect();
            if p.block_types.is_empty() {
                return Err(err(file, ln, "no migratetype columns"));
            }
            sec = Sec::Blocks;
        } else if let Some(v) = header_after(t, "Number of mixed blocks") {
            mixed_types = v.split_whitespace().map(str::to_string).collect();
            p.mixed = Some(Vec::new());
            sec = Sec::Mixed;
        } else if t.starts_with("Node") {
            match sec {
                Sec::Top => return Err(err(file, ln, "zone line before any table header")),
                Sec::Free => {
                    let (node, zone, rest) = node_zone(file, ln, t)?;
                    let rest = rest
                        .trim_start()
                        .strip_prefix(',')
                        .map(str::trim_start)
                        .and_then(|r| r.strip_prefix("type"))
                        .ok_or_else(|| err(file, ln, "expected \", type NAME\" after the zone"))?;
                    let mut toks = rest.split_whitespace();
                    let mt = toks
                        .next()
                        .ok_or_else(|| err(file, ln, "missing migratetype"))?
                        .to_string();
                    let mut capped = false;
                    let mut free = Vec::with_capacity(n_orders);
                    for tok in toks {
                        if let Some(v) = tok.strip_prefix('>') {
                            capped = true;
                            free.push(num(file, ln, v, "free count")?);
                        } else {
                            free.push(num(file, ln, tok, "free count")?);
                        }
                    }
                    if free.len() != n_orders {
                        return Err(err(
                            file,
                            ln,
                            format!("{} counts for {n_orders} orders", free.len()),
                        ));
                    }
                    p.free.push(TypeFree {
                        node,
                        zone,
                        migratetype: mt,
                        free,
                        capped,
                    });
                }
                Sec::Blocks | Sec::Mixed => {
                    let (node, zone, rest) = node_zone(file, ln, t)?;
                    let counts = rest
                        .split_whitespace()
                        .map(|c| num(file, ln, c, "block count"))
                        .collect::<Result<Vec<_>, _>>()?;
                    let want = if sec == Sec::Blocks {
                        p.block_types.len()
                    } else {
                        mixed_types.len()
                    };
                    if counts.len() != want {
                        return Err(err(
                            file,
                            ln,
                            format!("{} counts for {want} migratetype columns", counts.len()),
                        ));
                    }
                    let zb = ZoneBlocks { node, zone, counts };
                    if sec == Sec::Blocks {
                        p.blocks.push(zb);
                    } else if let Some(m) = p.mixed.as_mut() {
                        m.push(zb);
                    }
                }
            }
        } else {
            return Err(err(file, ln, format!("unexpected line {t:?}")));
        }
    }
    if !have_order || !have_ppb {
        return Err(err(
            file,
            0,
            "missing \"Page block order\" / \"Pages per block\"",
        ));
    }
    if p.block_types.is_empty() {
        return Err(err(file, 0, "missing the \"Number of blocks type\" table"));
    }
    Ok(p)
}

// ---------------------------------------------------------------- zoneinfo

/// One zone of `/proc/zoneinfo` (all values in 4 KB pages).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ZoneInfo {
    pub node: u32,
    pub name: String,
    /// Position among the node's zones as printed (the kernel's zone index).
    pub zone_idx: usize,
    /// "pages free" (NR_FREE_PAGES).
    pub free: u64,
    pub min: u64,
    pub low: u64,
    pub high: u64,
    /// Watermark boost (4.20+), promo watermark (6.x NUMA tiering), when printed.
    pub boost: Option<u64>,
    pub promo: Option<u64>,
    pub spanned: u64,
    pub present: u64,
    pub managed: u64,
    pub cma: Option<u64>,
    /// `lowmem_reserve[]`: pages this zone keeps back from allocations whose
    /// highest usable zone is the index.
    pub protection: Vec<u64>,
    /// Absent from very old kernels and from unpopulated zones.
    pub start_pfn: Option<u64>,
    pub nr_free_pages: Option<u64>,
    /// Every other `name value` counter of the zone (nr_free_cma, nr_zone_*, …).
    pub stats: BTreeMap<String, u64>,
}

impl ZoneInfo {
    pub fn populated(&self) -> bool {
        self.present > 0
    }
    pub fn end_pfn(&self) -> Option<u64> {
        self.start_pfn.map(|s| s.saturating_add(self.spanned))
    }
}

pub fn parse_zoneinfo(text: &str, file: &str) -> Result<Vec<ZoneInfo>, ParseError> {
    let mut zones: Vec<ZoneInfo> = Vec::new();
    let mut seen: Vec<(usize, [bool; 6])> = Vec::new(); // header line, have free/min/low/high/spanned/present
    let mut in_node_stats = false;
    let mut in_pagesets = false;
    for (i, l) in text.lines().enumerate() {
        let ln = i + 1;
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with("Node") {
            let (node, name, rest) = node_zone(file, ln, t)?;
            if !rest.trim().is_empty() {
                return Err(err(
                    file,
                    ln,
                    format!("unexpected text after the zone name: {:?}", rest.trim()),
                ));
            }
            let zone_idx = zones.iter().filter(|z| z.node == node).count();
            zones.push(ZoneInfo {
                node,
                name,
                zone_idx,
                ..Default::default()
            });
            seen.push((ln, [false; 6]));
            in_node_stats = false;
            in_pagesets = false;
            continue;
        }
        let Some(z) = zones.last_mut() else {
            return Err(err(
                file,
                ln,
                "data before the first \"Node N, zone NAME\" line",
            ));
        };
        let have = &mut seen.last_mut().expect("pushed with the zone").1;
        if t == "per-node stats" {
            in_node_stats = true;
            continue;
        }
        if t == "pagesets" {
            in_pagesets = true;
            in_node_stats = false;
            continue;
        }
        if let Some(v) = t.strip_prefix("pages free") {
            z.free = num(file, ln, v.trim(), "pages free")?;
            have[0] = true;
            in_node_stats = false;
            in_pagesets = false;
            continue;
        }
        if let Some(v) = t.strip_prefix("protection:") {
            let v = v.trim();
            let inner = v
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or_else(|| {
                    err(
                        file,
                        ln,
                        format!("protection: expected (a, b, …), found {v:?}"),
                    )
                })?;
            z.protection = inner
                .split(',')
                .map(|x| num(file, ln, x.trim(), "protection"))
                .collect::<Result<Vec<_>, _>>()?;
            continue;
        }
        if let Some((k, v)) = t.split_once(':') {
            // `start_pfn:`, `node_unreclaimable:`, pageset lines (`cpu: 0`, `count: 3`,
            // `vm stats threshold: 4`, …): only start_pfn matters here.
            if k.trim() == "start_pfn" {
                z.start_pfn = Some(num(file, ln, v.trim(), "start_pfn")?);
            }
            continue;
        }
        if in_pagesets || in_node_stats {
            continue;
        }
        let mut toks = t.split_whitespace();
        let (Some(k), Some(v), None) = (toks.next(), toks.next(), toks.next()) else {
            return Err(err(
                file,
                ln,
                format!("expected \"name value\", found {t:?}"),
            ));
        };
        let v = num(file, ln, v, k)?;
        match k {
            "min" => (z.min, have[1]) = (v, true),
            "low" => (z.low, have[2]) = (v, true),
            "high" => (z.high, have[3]) = (v, true),
            "spanned" => (z.spanned, have[4]) = (v, true),
            "present" => (z.present, have[5]) = (v, true),
            "managed" => z.managed = v,
            "boost" => z.boost = Some(v),
            "promo" => z.promo = Some(v),
            "cma" => z.cma = Some(v),
            "nr_free_pages" => z.nr_free_pages = Some(v),
            _ => {
                z.stats.entry(k.to_string()).or_insert(v);
            }
        }
    }
    if zones.is_empty() {
        return Err(err(file, 0, "no zones"));
    }
    const NAMES: [&str; 6] = ["pages free", "min", "low", "high", "spanned", "present"];
    for (z, (ln, have)) in zones.iter().zip(&seen) {
        if let Some(k) = have.iter().position(|h| !h) {
            return Err(err(
                file,
                *ln,
                format!(
                    "zone {} of node {} has no \"{}\" line",
                    z.name, z.node, NAMES[k]
                ),
            ));
        }
    }
    Ok(zones)
}

// ---------------------------------------------------------------- vmstat

/// `/proc/vmstat`: every `name value` line.
pub fn parse_vmstat(text: &str, file: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    let mut m = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let ln = i + 1;
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        let mut toks = t.split_whitespace();
        let (Some(k), Some(v), None) = (toks.next(), toks.next(), toks.next()) else {
            return Err(err(
                file,
                ln,
                format!("expected \"name value\", found {t:?}"),
            ));
        };
        // Counters are unsigned, but a few gauges can transiently print negative.
        let v = match v.parse::<i64>() {
            Ok(x) if x < 0 => 0,
            _ => num(file, ln, v, k)?,
        };
        m.insert(k.to_string(), v);
    }
    if m.is_empty() {
        return Err(err(file, 0, "no counters"));
    }
    Ok(m)
}

/// The vmstat counters the report shows, in order (absent ones are skipped).
pub const VMSTAT_KEYS: [&str; 24] = [
    "compact_stall",
    "compact_fail",
    "compact_success",
    "compact_migrate_scanned",
    "compact_free_scanned",
    "compact_isolated",
    "compact_daemon_wake",
    "compact_daemon_migrate_scanned",
    "compact_daemon_free_scanned",
    "pgmigrate_success",
    "pgmigrate_fail",
    "htlb_buddy_alloc_success",
    "htlb_buddy_alloc_fail",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_fault_fallback_charge",
    "thp_collapse_alloc",
    "thp_collapse_alloc_failed",
    "thp_split_page",
    "thp_split_page_failed",
    "thp_deferred_split_page",
    "thp_migration_success",
    "thp_migration_fail",
    "extfrag_events",
];

/// Does `name` belong to the families the report keeps (compact_*, thp_*,
/// pgmigrate_*, htlb_*, extfrag counters)?
pub fn vmstat_relevant(name: &str) -> bool {
    [
        "compact_",
        "thp_",
        "pgmigrate_",
        "htlb_",
        "extfrag",
        "kcompactd",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// `/proc/sys/vm/extfrag_threshold` (0..1000).
pub fn parse_threshold(text: &str, file: &str) -> Result<u32, ParseError> {
    let v = num(file, 1, text.trim(), "extfrag_threshold")?;
    if v > 1000 {
        return Err(err(
            file,
            1,
            format!("extfrag_threshold {v} is outside 0..1000"),
        ));
    }
    Ok(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddyinfo_lines() {
        let b = parse_buddyinfo(
            "Node 0, zone      DMA      1      1      0 \nNode 1, zone   Normal   4539   2033    923 \n",
            "/proc/buddyinfo",
        )
        .unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[1].node, 1);
        assert_eq!(b[1].zone, "Normal");
        assert_eq!(b[1].free, vec![4539, 2033, 923]);
    }

    #[test]
    fn buddyinfo_errors_name_file_and_line() {
        let e =
            parse_buddyinfo("Node 0, zone DMA 1 2\nNode 0, zone Normal 1 x\n", "bi").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().starts_with("bi:2: "), "{e}");
        assert!(parse_buddyinfo("", "bi").is_err());
        assert!(parse_buddyinfo("Nodes 0 zone", "bi").unwrap_err().line == 1);
    }

    #[test]
    fn pagetypeinfo_capped_counts() {
        let t = "Page block order: 9\nPages per block:  512\n\n\
Free pages count per migrate type at order       0      1\n\
Node    0, zone   Normal, type    Unmovable  >100000      3 \n\
Node    0, zone   Normal, type      Movable      5      0 \n\n\
Number of blocks type     Unmovable      Movable\n\
Node 0, zone   Normal          10          20 \n";
        let p = parse_pagetypeinfo(t, "pti").unwrap();
        assert!(p.free[0].capped && !p.free[1].capped);
        assert_eq!(p.free[0].free, vec![100000, 3]);
        assert_eq!(p.blocks[0].counts, vec![10, 20]);
        let bad = t.replace("     5      0", "     5");
        let e = parse_pagetypeinfo(&bad, "pti").unwrap_err();
        assert_eq!(e.line, 6, "{e}");
    }

    #[test]
    fn zoneinfo_minimal_and_errors() {
        let t = "Node 0, zone   Normal\n  pages free     10\n        min      1\n        low      2\n        high     3\n        spanned  100\n        present  90\n        managed  80\n        protection: (0, 0)\n      nr_free_pages 10\n  pagesets\n    cpu: 0\n              high:  99\n  start_pfn:           4096\n";
        let z = parse_zoneinfo(t, "zi").unwrap();
        assert_eq!(
            z[0].high, 3,
            "pageset 'high:' must not overwrite the watermark"
        );
        assert_eq!(z[0].start_pfn, Some(4096));
        assert_eq!(z[0].protection, vec![0, 0]);
        let e = parse_zoneinfo(&t.replace("        low      2\n", ""), "zi").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.msg.contains("\"low\""), "{e}");
        let e = parse_zoneinfo(&t.replace("(0, 0)", "(0, x)"), "zi").unwrap_err();
        assert_eq!(e.line, 9);
    }

    #[test]
    fn vmstat_and_threshold() {
        let m = parse_vmstat("compact_stall 3\nthp_fault_alloc 7\n", "vs").unwrap();
        assert_eq!(m["thp_fault_alloc"], 7);
        assert_eq!(parse_vmstat("a 1\nb\n", "vs").unwrap_err().line, 2);
        assert_eq!(parse_threshold("500\n", "t").unwrap(), 500);
        assert!(parse_threshold("1001", "t").is_err());
    }
}
