//! The thesis's metrics (REF §2.13, §4): tainted pageblocks, the unusable
//! free space index and fragmentation index with the kernel's integer
//! formulas, huge page success, compaction effort, fallbacks.

use crate::sim::{Sim, Stats};
use crate::{Mt, NR_MT, NR_ORDERS, PB_ORDER};

/// `fill_contig_page_info`: (free_pages, free_blocks_total, free_blocks_suitable).
pub fn contig_info(buddyinfo: &[u64; NR_ORDERS], order: u8) -> (u64, u64, u64) {
    let (mut pages, mut total, mut suitable) = (0u64, 0u64, 0u64);
    for (o, &blocks) in buddyinfo.iter().enumerate() {
        total += blocks;
        pages += blocks << o;
        if o >= order as usize {
            suitable += blocks << (o - order as usize);
        }
    }
    (pages, total, suitable)
}

/// `unusable_free_index` (0..1000; 1000 when nothing is free).
pub fn unusable_index(buddyinfo: &[u64; NR_ORDERS], order: u8) -> i64 {
    let (pages, _, suitable) = contig_info(buddyinfo, order);
    if pages == 0 {
        return 1000;
    }
    ((pages - (suitable << order)) * 1000 / pages) as i64
}

/// `__fragmentation_index` (−1000 when the order is available, else 0..1000).
pub fn fragmentation_index(buddyinfo: &[u64; NR_ORDERS], order: u8) -> i64 {
    let (pages, total, suitable) = contig_info(buddyinfo, order);
    if total == 0 {
        return 0;
    }
    if suitable > 0 {
        return -1000;
    }
    1000 - ((1000 + pages * 1000 / (1u64 << order)) / total) as i64
}

/// One point of the time series.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Allocation and free events so far.
    pub events: u64,
    pub phase: String,
    pub free_pages: u64,
    /// Pageblocks holding both kernel and movable pages (thesis definition).
    pub tainted: u64,
    /// pagetypeinfo's mixed blocks (an allocated page's type differs from the block's).
    pub mixed: u64,
    /// Pageblocks per type: Unmovable, Movable, Reclaimable, Mixed.
    pub blocks: [u64; NR_MT],
    /// Unusable free space index at order 9 over all zones' summed buddyinfo, 0..1000.
    pub ufsi9: i64,
    pub fragindex9: i64,
    /// 2 MB blocks free now.
    pub free_hp: u64,
    /// Pageblocks with no kernel page: 2 MB pages after perfect compaction.
    pub potential_hp: u64,
    pub fallbacks: u64,
    pub fragmenting_fallbacks: u64,
    pub migrate_scanned: u64,
    pub free_scanned: u64,
    pub migrated: u64,
    pub reclaimed: u64,
    pub alloc_fail: u64,
    /// THP-like attempts and successes so far.
    pub thp_attempts: u64,
    pub thp_success: u64,
}

impl Sample {
    pub fn take(sim: &Sim, events: u64, phase: &str) -> Sample {
        let mut bi = [0u64; NR_ORDERS];
        let (mut tainted, mut mixed, mut potential) = (0, 0, 0);
        let mut blocks = [0u64; NR_MT];
        for z in &sim.zones {
            for (o, n) in z.buddyinfo().iter().enumerate() {
                bi[o] += n;
            }
            for b in &z.blocks {
                blocks[b.mt as usize] += 1;
                tainted += b.tainted() as u64;
                mixed += b.mixed() as u64;
                potential += (b.kernel() == 0) as u64;
            }
        }
        let (_, _, suitable) = contig_info(&bi, PB_ORDER);
        let s = &sim.stats;
        Sample {
            events,
            phase: phase.to_string(),
            free_pages: sim.free_pages(),
            tainted,
            mixed,
            blocks,
            ufsi9: unusable_index(&bi, PB_ORDER),
            fragindex9: fragmentation_index(&bi, PB_ORDER),
            free_hp: suitable,
            potential_hp: potential,
            fallbacks: s.fallbacks,
            fragmenting_fallbacks: s.fragmenting_fallbacks,
            migrate_scanned: s.migrate_scanned,
            free_scanned: s.free_scanned,
            migrated: s.migrated + s.aaf_migrated,
            reclaimed: s.reclaimed,
            alloc_fail: s.alloc_fail,
            thp_attempts: s.thp_attempts,
            thp_success: s.thp_success,
        }
    }

    pub const CSV_HEADER: &'static str = "policy,events,phase,free_pages,tainted,mixed,blocks_unmovable,blocks_movable,blocks_reclaimable,blocks_mixed,ufsi9,fragindex9,free_hp,potential_hp,fallbacks,fragmenting_fallbacks,migrate_scanned,free_scanned,migrated,reclaimed,alloc_fail,thp_attempts,thp_success";

    pub fn csv_row(&self, policy: &str) -> String {
        format!(
            "{policy},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.events,
            self.phase,
            self.free_pages,
            self.tainted,
            self.mixed,
            self.blocks[Mt::Unmovable as usize],
            self.blocks[Mt::Movable as usize],
            self.blocks[Mt::Reclaimable as usize],
            self.blocks[Mt::Mixed as usize],
            self.ufsi9,
            self.fragindex9,
            self.free_hp,
            self.potential_hp,
            self.fallbacks,
            self.fragmenting_fallbacks,
            self.migrate_scanned,
            self.free_scanned,
            self.migrated,
            self.reclaimed,
            self.alloc_fail,
            self.thp_attempts,
            self.thp_success
        )
    }
}

/// Order-9 attempts of one stress-highalloc pass.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Pass {
    pub name: String,
    pub attempts: u64,
    pub success: u64,
    /// Compaction pages scanned (migrate + free) and migrated during the pass.
    pub scanned: u64,
    pub migrated: u64,
}

impl Pass {
    pub fn rate(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.success as f64 / self.attempts as f64
        }
    }
}

/// What one policy's run produced.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub policy: String,
    pub workload: String,
    pub seed: u64,
    pub pages: u64,
    pub events: u64,
    /// At the end of the workload (before any final compaction).
    pub end: Sample,
    /// After a full `compact_memory` at the end, when run.
    pub after_compaction: Option<Sample>,
    /// Compaction effort of that final full compaction: pages scanned, migrated.
    pub final_compaction: Option<(u64, u64)>,
    pub passes: Vec<Pass>,
    pub stats: Stats,
    pub series: Vec<Sample>,
    /// Replay only: frees of pages allocated before the recording started.
    pub ignored_frees: u64,
    pub unmatched_frees: u64,
}

impl Summary {
    /// The whole time series as CSV (one header, rows for every summary).
    pub fn csv(all: &[Summary]) -> String {
        let mut s = String::from(Sample::CSV_HEADER);
        s.push('\n');
        for r in all {
            for p in &r.series {
                s.push_str(&p.csv_row(&r.policy));
                s.push('\n');
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_formulas_match_ref_example() {
        // REF §4.3 worked example.
        let bi = [1000, 500, 200, 100, 50, 20, 10, 5, 2, 1, 0];
        assert_eq!(contig_info(&bi, 9), (7344, 1888, 1));
        assert_eq!(unusable_index(&bi, 9), 930);
        assert_eq!(fragmentation_index(&bi, 9), -1000);
        assert_eq!(unusable_index(&bi, 10), 1000);
        assert_eq!(fragmentation_index(&bi, 10), 996);
        assert_eq!(unusable_index(&bi, 4), 490);
        assert_eq!(unusable_index(&[0; 11], 9), 1000);
        assert_eq!(fragmentation_index(&[0; 11], 9), 0);
    }
}
