//! The kernel's fragmentation metrics, with its exact integer arithmetic
//! (`mm/vmstat.c`: `fill_contig_page_info`, `unusable_free_index`,
//! `__fragmentation_index`; `mm/compaction.c`: `extfrag_for_order`,
//! `compaction_suitable`). Inputs are a zone's free block counts per order
//! (`zone->free_area[o].nr_free`, i.e. a `/proc/buddyinfo` line).

use serde::Serialize;

/// `struct contig_page_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct ContigPageInfo {
    pub free_pages: u64,
    pub free_blocks_total: u64,
    pub free_blocks_suitable: u64,
}

/// `fill_contig_page_info(zone, suitable_order, info)`: free blocks of every
/// migratetype, free base pages, and how many `suitable_order` blocks the free
/// blocks of that order or larger make.
pub fn fill_contig_page_info(free: &[u64], suitable_order: u32) -> ContigPageInfo {
    let mut info = ContigPageInfo::default();
    for (order, &blocks) in free.iter().enumerate() {
        let order = order as u32;
        info.free_blocks_total = info.free_blocks_total.wrapping_add(blocks);
        info.free_pages = info.free_pages.wrapping_add(shl(blocks, order));
        if order >= suitable_order {
            info.free_blocks_suitable = info
                .free_blocks_suitable
                .wrapping_add(shl(blocks, order - suitable_order));
        }
    }
    info
}

/// `x << s` as the kernel's unsigned long would compute it (wrapping).
fn shl(x: u64, s: u32) -> u64 {
    if s >= 64 {
        0
    } else {
        x.wrapping_shl(s)
    }
}

/// `unusable_free_index(order, info)`: the share of free memory (×1000) that sits in
/// blocks smaller than `order`. 0 = none, 1000 = all (or no free memory).
pub fn unusable_free_index(order: u32, info: &ContigPageInfo) -> i64 {
    if info.free_pages == 0 {
        return 1000;
    }
    // div_u64((free_pages - (free_blocks_suitable << order)) * 1000ULL, free_pages)
    let num = info
        .free_pages
        .wrapping_sub(shl(info.free_blocks_suitable, order))
        .wrapping_mul(1000);
    (num / info.free_pages) as i64
}

/// `__fragmentation_index(order, info)`: −1000 when an allocation of `order` would
/// succeed (a suitable block exists, watermarks permitting); otherwise 0..1000,
/// near 0 = failure for lack of memory, near 1000 = failure from fragmentation.
/// `max_order` is `MAX_PAGE_ORDER` (10 on x86-64); beyond it the kernel warns and
/// returns 0.
pub fn fragmentation_index(order: u32, info: &ContigPageInfo, max_order: u32) -> i64 {
    if order > max_order || order >= 64 {
        return 0;
    }
    if info.free_blocks_total == 0 {
        return 0;
    }
    if info.free_blocks_suitable != 0 {
        return -1000;
    }
    let requested = 1u64 << order;
    // 1000 - div_u64((1000 + div_u64(info->free_pages * 1000ULL, requested)), free_blocks_total)
    let inner = 1000u64.wrapping_add(info.free_pages.wrapping_mul(1000) / requested);
    1000 - (inner / info.free_blocks_total) as i64
}

/// `extfrag_for_order(zone, order)`: the unusable share as a percentage 0..100, and
/// 0 (not 100) when the zone has no free page. Proactive compaction scores zones
/// with it at order 9 (`fragmentation_score_zone`).
pub fn extfrag_for_order(order: u32, info: &ContigPageInfo) -> u64 {
    if info.free_pages == 0 {
        return 0;
    }
    info.free_pages
        .wrapping_sub(shl(info.free_blocks_suitable, order))
        .wrapping_mul(100)
        / info.free_pages
}

/// How debugfs prints an index: `unusable_index` uses `"%d.%03d"`, `extfrag_index`
/// `"%2d.%03d"` of `index / 1000, index % 1000` (C division truncates toward zero,
/// so −1000 prints as `-1.000`).
pub fn format_index(index: i64) -> String {
    let (q, r) = (index / 1000, (index % 1000).abs());
    if index < 0 && q == 0 {
        // The kernel would print "0.-500"-like text for −999..−1; it never
        // produces such values, so print them readably.
        format!("-0.{r:03}")
    } else {
        format!("{q}.{r:03}")
    }
}

/// Parses a debugfs index value (`0.930`, `-1.000`, ` 0.996`) back to ×1000.
pub fn parse_index(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (a, b) = s.split_once('.')?;
    if b.len() != 3 {
        return None;
    }
    let v = a.parse::<i64>().ok()? * 1000 + b.parse::<i64>().ok()?;
    Some(if neg { -v } else { v })
}

/// What `compaction_suitable()` concludes from the fragmentation index for a
/// costly order (> `PAGE_ALLOC_COSTLY_ORDER` = 3) under `vm.extfrag_threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThresholdVerdict {
    /// The allocation would succeed without compaction (index −1000).
    WouldSucceed,
    /// 0 ≤ index ≤ threshold: failure is for lack of memory; the kernel skips
    /// compaction of this zone (COMPACT_NOT_SUITABLE_ZONE) and prefers reclaim.
    ReclaimNotCompaction,
    /// index > threshold: failure is from fragmentation; compaction may run.
    CompactionSuitable,
    /// Orders ≤ 3 ignore the index.
    NotCostly,
}

pub const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;

pub fn threshold_verdict(order: u32, fragindex: i64, threshold: u32) -> ThresholdVerdict {
    if order <= PAGE_ALLOC_COSTLY_ORDER {
        ThresholdVerdict::NotCostly
    } else if fragindex == -1000 {
        ThresholdVerdict::WouldSucceed
    } else if fragindex >= 0 && fragindex <= threshold as i64 {
        ThresholdVerdict::ReclaimNotCompaction
    } else {
        ThresholdVerdict::CompactionSuitable
    }
}

/// One order's metrics for a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OrderMetrics {
    pub order: u32,
    pub free_blocks: u64,
    /// Blocks of this order that the free memory makes (free_blocks_suitable).
    pub suitable_blocks: u64,
    /// ×1000 (debugfs `unusable_index`).
    pub unusable_index: i64,
    /// ×1000 (debugfs `extfrag_index`), −1000 = would succeed.
    pub fragmentation_index: i64,
    pub extfrag_percent: u64,
}

/// All orders of one zone's buddyinfo line.
pub fn zone_metrics(free: &[u64], max_order: u32) -> Vec<OrderMetrics> {
    (0..free.len() as u32)
        .map(|o| {
            let info = fill_contig_page_info(free, o);
            OrderMetrics {
                order: o,
                free_blocks: free[o as usize],
                suitable_blocks: info.free_blocks_suitable,
                unusable_index: unusable_free_index(o, &info),
                fragmentation_index: fragmentation_index(o, &info, max_order),
                extfrag_percent: extfrag_for_order(o, &info),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// REF-fragmentation §4, worked by hand:
    /// buddyinfo 1000 500 200 100 50 20 10 5 2 1 0 (orders 0..10).
    #[test]
    fn worked_example() {
        let free = [1000, 500, 200, 100, 50, 20, 10, 5, 2, 1, 0];
        // free_pages = 1000·1 + 500·2 + 200·4 + 100·8 + 50·16 + 20·32 + 10·64
        //            + 5·128 + 2·256 + 1·512 + 0·1024
        //            = 1000 + 1000 + 800 + 800 + 800 + 640 + 640 + 640 + 512 + 512
        //            = 7344
        // free_blocks_total = 1000+500+200+100+50+20+10+5+2+1+0 = 1888
        let i9 = fill_contig_page_info(&free, 9);
        assert_eq!(i9.free_pages, 7344);
        assert_eq!(i9.free_blocks_total, 1888);
        // Order 9: one order-9 block (order 10 has none): suitable = 1.
        assert_eq!(i9.free_blocks_suitable, 1);
        // unusable = (7344 − 1·512)·1000 / 7344 = 6832000 / 7344 = 930 (930.28…)
        assert_eq!(unusable_free_index(9, &i9), 930);
        assert_eq!(format_index(930), "0.930");
        assert_eq!(fragmentation_index(9, &i9, 10), -1000);
        assert_eq!(format_index(-1000), "-1.000");
        // extfrag% = 6832·100 / 7344 = 93
        assert_eq!(extfrag_for_order(9, &i9), 93);

        // Order 10: no suitable block: unusable = 7344000/7344 = 1000;
        // fragindex = 1000 − (1000 + 7344·1000/1024)/1888
        //           = 1000 − (1000 + 7171)/1888 = 1000 − 8171/1888 = 1000 − 4 = 996.
        let i10 = fill_contig_page_info(&free, 10);
        assert_eq!(i10.free_blocks_suitable, 0);
        assert_eq!(unusable_free_index(10, &i10), 1000);
        assert_eq!(fragmentation_index(10, &i10, 10), 996);
        assert_eq!(format_index(996), "0.996");

        // Order 4: suitable = 50 + 20·2 + 10·4 + 5·8 + 2·16 + 1·32 = 234 blocks of 16
        // pages = 3744 pages; unusable = (7344 − 3744)·1000/7344 = 3600000/7344 = 490.
        let i4 = fill_contig_page_info(&free, 4);
        assert_eq!(i4.free_blocks_suitable, 234);
        assert_eq!(unusable_free_index(4, &i4), 490);
    }

    #[test]
    fn edge_cases() {
        let none = fill_contig_page_info(&[0; 11], 0);
        assert_eq!(unusable_free_index(0, &none), 1000);
        assert_eq!(extfrag_for_order(0, &none), 0);
        assert_eq!(fragmentation_index(3, &none, 10), 0);
        // Order beyond MAX_PAGE_ORDER: the kernel warns and returns 0.
        let some = fill_contig_page_info(&[4, 0, 0], 11);
        assert_eq!(fragmentation_index(11, &some, 10), 0);
        // Only order-0 pages, asking order 1: 1000 − (1000 + 4·1000/2)/4 = 1000 − 750 = 250.
        let i1 = fill_contig_page_info(&[4, 0, 0], 1);
        assert_eq!(fragmentation_index(1, &i1, 10), 250);
        // Huge counts do not panic.
        let big = fill_contig_page_info(&[u64::MAX; 12], 5);
        let _ = (
            unusable_free_index(5, &big),
            fragmentation_index(5, &big, 10),
        );
    }

    #[test]
    fn index_text_round_trips() {
        for v in [-1000, 0, 1, 65, 930, 996, 1000] {
            assert_eq!(parse_index(&format_index(v)), Some(v));
        }
        assert_eq!(parse_index(" 0.996"), Some(996));
        assert_eq!(parse_index("x"), None);
    }

    #[test]
    fn threshold_interpretation() {
        use ThresholdVerdict::*;
        assert_eq!(threshold_verdict(9, -1000, 500), WouldSucceed);
        assert_eq!(threshold_verdict(9, 300, 500), ReclaimNotCompaction);
        assert_eq!(threshold_verdict(9, 500, 500), ReclaimNotCompaction);
        assert_eq!(threshold_verdict(9, 501, 500), CompactionSuitable);
        assert_eq!(threshold_verdict(3, 900, 500), NotCostly);
    }
}
