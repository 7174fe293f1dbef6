//! A `/proc/kpageflags` scan (root): every PFN of every zone is classified, and
//! per 2 MB pageblock the free, movable, unmovable and huge pages are counted.
//!
//! Method (see docs/frag.md): the kernel marks only the **head** page of a free
//! buddy block (`KPF_BUDDY`); the block's order (page_private) is not exported. A
//! free block at a `BUDDY` head `p` is taken to cover 2^k pages, k the largest order
//! ≤ `MAX_PAGE_ORDER` such that `p` is aligned to 2^k and every following page of
//! the block has no flag at all (pages inside a free block have none). Limit: a
//! flagless *allocated* page (vmalloc, kernel stacks, raw `alloc_pages`) right after
//! a free block, within its alignment, is counted as free too, so the inferred free
//! memory is an upper bound; the report compares it with the zone's `nr_free_pages`.
//! Free pages on the per-CPU lists are not `BUDDY` and look like flagless
//! allocated pages (counted unmovable).

use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// Bits of `/proc/kpageflags` (`include/uapi/linux/kernel-page-flags.h`, and the
/// kernel-internal ones exported after bit 32).
pub mod kpf {
    pub const LOCKED: u32 = 0;
    pub const LRU: u32 = 5;
    pub const SLAB: u32 = 7;
    pub const BUDDY: u32 = 10;
    pub const MMAP: u32 = 11;
    pub const ANON: u32 = 12;
    pub const SWAPCACHE: u32 = 13;
    pub const SWAPBACKED: u32 = 14;
    pub const COMPOUND_HEAD: u32 = 15;
    pub const COMPOUND_TAIL: u32 = 16;
    pub const HUGE: u32 = 17;
    pub const UNEVICTABLE: u32 = 18;
    pub const HWPOISON: u32 = 19;
    pub const NOPAGE: u32 = 20;
    pub const KSM: u32 = 21;
    pub const THP: u32 = 22;
    pub const OFFLINE: u32 = 23;
    pub const ZERO_PAGE: u32 = 24;
    pub const IDLE: u32 = 25;
    pub const PGTABLE: u32 = 26;
    pub const RESERVED: u32 = 32;
}

const fn bit(b: u32) -> u64 {
    1u64 << b
}

/// What one page is, for fragmentation purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PageClass {
    /// No `struct page` (`KPF_NOPAGE`), or outside the zone.
    Hole,
    /// In a free buddy block.
    Free,
    /// Can be migrated by compaction: LRU pages (anon, file), mapped, KSM, swap cache.
    Movable,
    /// Transparent huge page (movable).
    Thp,
    /// hugetlb page (movable for larger targets when the kernel supports it).
    Hugetlb,
    /// Slab, reserved, page tables, poisoned, offline, and every allocated page
    /// with no LRU/mapping flag (kernel allocations).
    Unmovable,
}

/// Classifies a page that is not part of an inferred free block.
pub fn classify(f: u64) -> PageClass {
    if f & bit(kpf::NOPAGE) != 0 {
        PageClass::Hole
    } else if f & bit(kpf::HUGE) != 0 {
        PageClass::Hugetlb
    } else if f
        & (bit(kpf::SLAB)
            | bit(kpf::RESERVED)
            | bit(kpf::PGTABLE)
            | bit(kpf::HWPOISON)
            | bit(kpf::OFFLINE)
            | bit(kpf::ZERO_PAGE))
        != 0
    {
        PageClass::Unmovable
    } else if f & bit(kpf::THP) != 0 {
        PageClass::Thp
    } else if f
        & (bit(kpf::LRU)
            | bit(kpf::ANON)
            | bit(kpf::MMAP)
            | bit(kpf::KSM)
            | bit(kpf::SWAPCACHE)
            | bit(kpf::SWAPBACKED))
        != 0
    {
        PageClass::Movable
    } else {
        PageClass::Unmovable
    }
}

/// Page counts of one 2 MB pageblock (or any range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Counts {
    pub free: u32,
    pub movable: u32,
    pub thp: u32,
    pub hugetlb: u32,
    pub unmovable: u32,
    pub hole: u32,
}

impl Counts {
    fn add(&mut self, c: PageClass, n: u32) {
        match c {
            PageClass::Hole => self.hole += n,
            PageClass::Free => self.free += n,
            PageClass::Movable => self.movable += n,
            PageClass::Thp => self.thp += n,
            PageClass::Hugetlb => self.hugetlb += n,
            PageClass::Unmovable => self.unmovable += n,
        }
    }
    pub fn total(&self) -> u64 {
        self.free as u64
            + self.movable as u64
            + self.thp as u64
            + self.hugetlb as u64
            + self.unmovable as u64
            + self.hole as u64
    }
}

/// A pageblock's state for the summary and the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Every page free.
    Free,
    /// No unmovable page, no hole: compaction could make it a free 2 MB page.
    Clean,
    /// Already one huge page (hugetlb, or a PMD-size THP).
    Huge,
    /// Unmovable pages mixed with movable (or THP/hugetlb) ones: tainted.
    Tainted,
    /// Unmovable and free pages only.
    Unmovable,
    /// Partly outside the zone or with holes.
    Hole,
}

pub fn block_state(c: &Counts, pages_per_block: u32) -> BlockState {
    if c.hole > 0 {
        BlockState::Hole
    } else if c.free == pages_per_block {
        BlockState::Free
    } else if c.unmovable > 0 {
        if c.movable + c.thp + c.hugetlb > 0 {
            BlockState::Tainted
        } else {
            BlockState::Unmovable
        }
    } else if c.hugetlb > 0 || c.thp == pages_per_block {
        BlockState::Huge
    } else {
        BlockState::Clean
    }
}

/// The scan of one zone.
#[derive(Debug, Clone, Serialize)]
pub struct ZoneScan {
    pub node: u32,
    pub zone: String,
    pub start_pfn: u64,
    pub end_pfn: u64,
    /// Pages per class over the zone's span.
    pub pages: Counts,
    /// Inferred free buddy blocks per order (compare with buddyinfo).
    pub free_blocks_by_order: Vec<u64>,
    /// PFN of the first pageblock (aligned down) and one `Counts` per pageblock.
    pub first_block_pfn: u64,
    #[serde(skip)]
    pub blocks: Vec<Counts>,
    pub blocks_by_state: StateCounts,
    /// Aligned 1 GB ranges inside the zone: total, with no unmovable page nor hole
    /// (assemblable by perfect compaction), and entirely free now.
    pub gb_ranges: u64,
    pub gb_ranges_clean: u64,
    pub gb_ranges_free: u64,
    pub buddy_marking: BuddyMarking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct StateCounts {
    pub free: u64,
    pub clean: u64,
    pub huge: u64,
    pub tainted: u64,
    pub unmovable: u64,
    pub hole: u64,
}

impl StateCounts {
    fn add(&mut self, s: BlockState) {
        match s {
            BlockState::Free => self.free += 1,
            BlockState::Clean => self.clean += 1,
            BlockState::Huge => self.huge += 1,
            BlockState::Tainted => self.tainted += 1,
            BlockState::Unmovable => self.unmovable += 1,
            BlockState::Hole => self.hole += 1,
        }
    }
}

impl ZoneScan {
    pub fn block_states(&self, pages_per_block: u32) -> impl Iterator<Item = BlockState> + '_ {
        self.blocks
            .iter()
            .map(move |c| block_state(c, pages_per_block))
    }
}

/// How the kernel marks free buddy blocks in kpageflags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuddyMarking {
    /// Only the head page has `KPF_BUDDY`; the others have no flag (older kernels).
    HeadOnly,
    /// Every page of a free block has `KPF_BUDDY` (seen on 6.18).
    EveryPage,
}

/// Decides the marking from the flags: with head-only marking, an even PFN and
/// the next one cannot both be `BUDDY` heads (they would have merged), so many
/// such pairs mean every page is marked.
pub fn buddy_marking(start_pfn: u64, flags: &[u64]) -> BuddyMarking {
    let b = bit(kpf::BUDDY);
    let (mut buddies, mut pairs) = (0u64, 0u64);
    for (i, w) in flags.windows(2).enumerate() {
        if w[0] & b != 0 {
            buddies += 1;
            if (start_pfn + i as u64) & 1 == 0 && w[1] & b != 0 {
                pairs += 1;
            }
        }
    }
    if pairs * 10 > buddies {
        BuddyMarking::EveryPage
    } else {
        BuddyMarking::HeadOnly
    }
}

/// Classes of every page of `[start_pfn, start_pfn + flags.len())`. Pages outside
/// `ram` (PFN ranges of "System RAM" in /proc/iomem, when known) are holes.
pub fn classify_pages(
    start_pfn: u64,
    flags: &[u64],
    max_order: u32,
    ram: Option<&[(u64, u64)]>,
) -> Vec<PageClass> {
    let n = flags.len();
    let marking = buddy_marking(start_pfn, flags);
    let mut class = vec![PageClass::Hole; n];
    let mut i = 0usize;
    while i < n {
        let f = flags[i];
        let pfn = start_pfn + i as u64;
        if f & bit(kpf::BUDDY) != 0 && f & bit(kpf::NOPAGE) == 0 {
            let mut k = 0u32;
            if marking == BuddyMarking::HeadOnly {
                while k < max_order {
                    let size = 1usize << (k + 1);
                    if pfn & (size as u64 - 1) != 0 || i + size > n {
                        break;
                    }
                    let half = 1usize << k;
                    if flags[i + half..i + size].iter().any(|&g| g != 0) {
                        break;
                    }
                    k += 1;
                }
            }
            let size = 1usize << k;
            for c in &mut class[i..i + size] {
                *c = PageClass::Free;
            }
            i += size;
        } else {
            class[i] = classify(f);
            i += 1;
        }
    }
    if let Some(ram) = ram {
        let end = start_pfn + n as u64;
        let mut p = start_pfn;
        let mut sorted: Vec<(u64, u64)> = ram.to_vec();
        sorted.sort();
        for &(a, b) in &sorted {
            let (a, b) = (a.max(start_pfn), b.min(end));
            if a >= b {
                continue;
            }
            if a > p {
                for c in &mut class[(p - start_pfn) as usize..(a - start_pfn) as usize] {
                    *c = PageClass::Hole;
                }
            }
            p = p.max(b);
        }
        if p < end {
            for c in &mut class[(p - start_pfn) as usize..] {
                *c = PageClass::Hole;
            }
        }
    }
    class
}

/// PFN ranges `[start, end)` of top-level "System RAM" in `/proc/iomem`; None
/// when the addresses are hidden (not root: all zeros) or there is none.
pub fn parse_iomem_ram(text: &str) -> Option<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for l in text.lines() {
        if l.starts_with(' ') {
            continue;
        }
        let Some((range, name)) = l.split_once(" : ") else {
            continue;
        };
        if name.trim() != "System RAM" {
            continue;
        }
        let (a, b) = range.trim().split_once('-')?;
        let a = u64::from_str_radix(a, 16).ok()?;
        let b = u64::from_str_radix(b, 16).ok()?;
        if b <= a {
            continue;
        }
        out.push((a.div_ceil(4096), (b.saturating_add(1)) / 4096));
    }
    if out.is_empty() || out.iter().all(|&(a, b)| a == 0 && b == 0) {
        None
    } else {
        Some(out)
    }
}

/// Analyses the flags of the zone `[start_pfn, start_pfn + flags.len())`.
/// `ram`: System RAM PFN ranges (pages outside are holes), when known.
/// `block_order` is `pageblock_order` (9), `max_order` is `MAX_PAGE_ORDER` (10),
/// `gb_order` the gigantic page order (18 for 1 GB on x86-64).
#[allow(clippy::too_many_arguments)]
pub fn analyse_zone(
    node: u32,
    zone: &str,
    start_pfn: u64,
    flags: &[u64],
    block_order: u32,
    max_order: u32,
    gb_order: u32,
    ram: Option<&[(u64, u64)]>,
) -> ZoneScan {
    let n = flags.len();
    let end_pfn = start_pfn + n as u64;
    let ppb = 1u64 << block_order;
    let first_block_pfn = start_pfn & !(ppb - 1);
    let nblocks = if n == 0 {
        0
    } else {
        ((end_pfn - first_block_pfn).div_ceil(ppb)) as usize
    };
    let mut blocks = vec![Counts::default(); nblocks];
    // Pages of the first and last blocks outside the zone are holes.
    if nblocks > 0 {
        blocks[0].hole += (start_pfn - first_block_pfn) as u32;
        let tail = (first_block_pfn + nblocks as u64 * ppb) - end_pfn;
        blocks[nblocks - 1].hole += tail as u32;
    }
    let mut pages = Counts::default();
    let mut class = classify_pages(start_pfn, flags, max_order, ram);
    let marking = buddy_marking(start_pfn, flags);
    // Free buddy blocks per order: maximal runs of free pages cut into naturally
    // aligned blocks, as the buddy allocator merges them.
    let mut by_order = vec![0u64; max_order as usize + 1];
    let mut i = 0usize;
    while i < n {
        if class[i] != PageClass::Free {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < n && class[j] == PageClass::Free {
            j += 1;
        }
        let mut p = i;
        while p < j {
            let pfn = start_pfn + p as u64;
            let mut k = 0u32;
            while k < max_order {
                let size = 1u64 << (k + 1);
                if pfn & (size - 1) != 0 || p as u64 + size > j as u64 {
                    break;
                }
                k += 1;
            }
            by_order[k as usize] += 1;
            p += 1usize << k;
        }
        i = j;
    }
    let class = std::mem::take(&mut class);
    for (j, &c) in class.iter().enumerate() {
        let b = ((start_pfn + j as u64 - first_block_pfn) / ppb) as usize;
        blocks[b].add(c, 1);
        pages.add(c, 1);
    }
    let mut states = StateCounts::default();
    for c in &blocks {
        states.add(block_state(c, ppb as u32));
    }
    // 1 GB ranges: naturally aligned, wholly inside the zone.
    let gb = 1u64 << gb_order;
    let (mut gb_total, mut gb_clean, mut gb_free) = (0, 0, 0);
    let mut r = start_pfn.div_ceil(gb) * gb;
    while r + gb <= end_pfn {
        gb_total += 1;
        let s = (r - start_pfn) as usize;
        let range = &class[s..s + gb as usize];
        let blocked = range
            .iter()
            .any(|c| matches!(c, PageClass::Unmovable | PageClass::Hole));
        let all_hugetlb = range.iter().all(|c| *c == PageClass::Hugetlb);
        if !blocked && !all_hugetlb {
            gb_clean += 1;
            if range.iter().all(|c| *c == PageClass::Free) {
                gb_free += 1;
            }
        }
        r += gb;
    }
    ZoneScan {
        node,
        zone: zone.to_string(),
        start_pfn,
        end_pfn,
        pages,
        free_blocks_by_order: by_order,
        first_block_pfn,
        blocks,
        blocks_by_state: states,
        gb_ranges: gb_total,
        gb_ranges_clean: gb_clean,
        gb_ranges_free: gb_free,
        buddy_marking: marking,
    }
}

/// Reads the kpageflags words of `[start, end)` with large preads (4 MiB).
/// PFNs beyond the file's end read as `KPF_NOPAGE`.
pub fn read_flags(file: &File, start: u64, end: u64, path: &Path) -> anyhow::Result<Vec<u64>> {
    use anyhow::Context;
    const CHUNK: usize = 4 << 20;
    let n = end.saturating_sub(start) as usize;
    let mut out = vec![0u64; n];
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0usize;
    while done < n {
        let want = ((n - done) * 8).min(CHUNK);
        let off = (start + done as u64) * 8;
        let mut got = 0usize;
        while got < want {
            let r = file
                .read_at(&mut buf[got..want], off + got as u64)
                .with_context(|| format!("reading {} at PFN {}", path.display(), off / 8))?;
            if r == 0 {
                break;
            }
            got += r;
        }
        let words = got / 8;
        for (k, w) in buf[..words * 8].chunks_exact(8).enumerate() {
            out[done + k] = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        }
        for o in &mut out[done + words..done + want / 8] {
            *o = bit(kpf::NOPAGE);
        }
        done += want / 8;
        if words < want / 8 {
            // End of the file: the rest is beyond max_pfn.
            for o in &mut out[done..] {
                *o = bit(kpf::NOPAGE);
            }
            break;
        }
    }
    Ok(out)
}

/// The scan of every populated zone, with its cost.
#[derive(Debug, Clone, Serialize)]
pub struct Scan {
    pub zones: Vec<ZoneScan>,
    pub pages_per_block: u32,
    pub pfns_scanned: u64,
    pub bytes_read: u64,
    /// Wall time of the whole scan (reading and classifying).
    pub seconds: f64,
    /// Of which reading /proc/kpageflags (the kernel's work).
    pub read_seconds: f64,
}

/// Zone spans to scan: (node, name, start_pfn, end_pfn).
pub type Span = (u32, String, u64, u64);

pub fn scan_kpageflags(
    path: &Path,
    spans: &[Span],
    block_order: u32,
    max_order: u32,
) -> anyhow::Result<Scan> {
    use anyhow::Context;
    let t0 = Instant::now();
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let ram = std::fs::read_to_string(path.with_file_name("iomem"))
        .ok()
        .and_then(|t| parse_iomem_ram(&t));
    let mut zones = Vec::new();
    let mut pfns = 0;
    let mut read_seconds = 0.0;
    for (node, name, s, e) in spans {
        let tr = Instant::now();
        let flags = read_flags(&f, *s, *e, path)?;
        read_seconds += tr.elapsed().as_secs_f64();
        pfns += flags.len() as u64;
        zones.push(analyse_zone(
            *node,
            name,
            *s,
            &flags,
            block_order,
            max_order,
            18,
            ram.as_deref(),
        ));
    }
    Ok(Scan {
        zones,
        pages_per_block: 1 << block_order,
        pfns_scanned: pfns,
        bytes_read: pfns * 8,
        seconds: t0.elapsed().as_secs_f64(),
        read_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LRU: u64 = 1 << kpf::LRU;
    const BUDDY: u64 = 1 << kpf::BUDDY;
    const SLAB: u64 = 1 << kpf::SLAB;

    #[test]
    fn buddy_blocks_are_inferred_from_alignment_and_empty_tails() {
        // 16 pages at PFN 0: free order-2 block at 0, LRU page at 4, free order-0 at 5,
        // slab at 6, flagless at 7, free order-3 at 8.
        let mut f = vec![0u64; 16];
        f[0] = BUDDY;
        f[4] = LRU;
        f[5] = BUDDY;
        f[6] = SLAB;
        f[7] = 0; // allocated, flagless: unmovable
        f[8] = BUDDY;
        let z = analyse_zone(0, "T", 0, &f, 3, 10, 4, None);
        assert_eq!(z.free_blocks_by_order[..4], [1, 0, 1, 1]);
        assert_eq!(z.pages.free, 4 + 1 + 8);
        assert_eq!(z.pages.movable, 1);
        assert_eq!(z.pages.unmovable, 2);
        // Blocks of 8 pages: block 0 tainted (LRU + slab), block 1 free.
        assert_eq!(block_state(&z.blocks[0], 8), BlockState::Tainted);
        assert_eq!(block_state(&z.blocks[1], 8), BlockState::Free);
        // One "1 GB" range (order 4 = 16 pages here): has unmovable pages.
        assert_eq!((z.gb_ranges, z.gb_ranges_clean), (1, 0));
    }

    #[test]
    fn adjacent_buddy_heads_are_not_merged_and_zone_edges_are_holes() {
        // Zone starts at PFN 2 (unaligned): two order-1 free blocks at 2 and 4.
        let mut f = vec![0u64; 6];
        f[0] = BUDDY; // PFN 2
        f[2] = BUDDY; // PFN 4
        f[4] = LRU; // PFN 6
        f[5] = LRU;
        let z = analyse_zone(0, "T", 2, &f, 2, 10, 20, None);
        assert_eq!(z.free_blocks_by_order[..3], [0, 2, 0]);
        assert_eq!(z.first_block_pfn, 0);
        assert_eq!(z.blocks.len(), 2);
        assert_eq!(z.blocks[0].hole, 2);
        assert_eq!(block_state(&z.blocks[0], 4), BlockState::Hole);
        assert_eq!(block_state(&z.blocks[1], 4), BlockState::Clean);
        assert_eq!(z.gb_ranges, 0);
    }

    #[test]
    fn every_page_marking_uses_runs() {
        // 6.18 marks every page of a free block: a run of 6 free pages at PFN 8..14
        // is an order-2 block (8..12) and an order-1 block (12..14); the flagless
        // page at 14 is not absorbed.
        let mut f = vec![LRU; 32];
        f[8..14].fill(BUDDY);
        f[14] = 0;
        f[16..32].fill(BUDDY);
        assert_eq!(buddy_marking(0, &f), BuddyMarking::EveryPage);
        let z = analyse_zone(0, "T", 0, &f, 3, 10, 5, None);
        assert_eq!(z.free_blocks_by_order[..5], [0, 1, 1, 0, 1]);
        assert_eq!(z.pages.free, 6 + 16);
        assert_eq!(z.pages.unmovable, 1);
        assert_eq!(
            buddy_marking(0, &[BUDDY, 0, BUDDY, 0]),
            BuddyMarking::HeadOnly
        );
    }

    #[test]
    fn iomem_holes() {
        let t = "00000000-00000fff : Reserved\n00001000-0009fbff : System RAM\n  00100000-001fffff : Kernel code\n00100000-bfffffff : System RAM\n100000000-63fffffff : System RAM\n";
        let r = parse_iomem_ram(t).unwrap();
        assert_eq!(r, vec![(1, 0x9f), (0x100, 0xc0000), (0x100000, 0x640000)]);
        assert!(parse_iomem_ram("00000000-00000000 : System RAM\n").is_none());
        // PFNs 0x9f..0x100 of a zone from PFN 1 are holes.
        let f = vec![LRU; 0x200];
        let c = classify_pages(1, &f, 10, Some(&r));
        assert_eq!(c[0x9e - 1], PageClass::Movable);
        assert_eq!(c[0x9f - 1], PageClass::Hole);
        assert_eq!(c[0xff - 1], PageClass::Hole);
        assert_eq!(c[0x100 - 1], PageClass::Movable);
    }

    #[test]
    fn classes() {
        assert_eq!(classify(1 << kpf::NOPAGE), PageClass::Hole);
        assert_eq!(
            classify((1 << kpf::HUGE) | (1 << kpf::COMPOUND_TAIL)),
            PageClass::Hugetlb
        );
        assert_eq!(classify((1 << kpf::THP) | LRU), PageClass::Thp);
        assert_eq!(classify(1 << kpf::ANON), PageClass::Movable);
        assert_eq!(classify(1 << kpf::PGTABLE), PageClass::Unmovable);
        assert_eq!(classify(1 << kpf::RESERVED), PageClass::Unmovable);
        assert_eq!(classify(0), PageClass::Unmovable);
    }

    #[test]
    fn clean_gb_ranges() {
        // Order-4 "gigantic" ranges over 32 pages: the first all LRU, the second
        // with a slab page; order-2 "pageblocks".
        let mut f = vec![LRU; 32];
        f[20] = SLAB;
        let z = analyse_zone(0, "T", 0, &f, 2, 2, 4, None);
        assert_eq!(
            (z.gb_ranges, z.gb_ranges_clean, z.gb_ranges_free),
            (2, 1, 0)
        );
        assert_eq!(z.blocks_by_state.clean, 7);
        assert_eq!(z.blocks_by_state.tainted, 1);
    }
}
