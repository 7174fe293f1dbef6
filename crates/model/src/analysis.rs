//! Page resolution and page-locality analysis for a set of mappings (seed 001 §3.2).
//!
//! For every mapping of categories to page sizes, each reference is resolved to the
//! page it would touch under that mapping, *with the runtime library's real
//! placement*: heap-large objects get fresh, 2 MB-aligned whole pages; static data
//! only its 2 MB-aligned .bss interior; the THP-backed heap its 2 MB frames. The
//! page stream feeds exact reuse-distance engines, from which TLB misses (eq. 1)
//! and first-touch faults follow.
//!
//! Unlike the seed, which evaluates only base mappings and assumes benefits add up,
//! every subset of the mappable categories present is evaluated exactly (at most 8);
//! the base mappings are flagged, and additivity can be checked.

use crate::categorize::{AllocStats, ObjectInfo, StaticSegment};
use crate::category::{Category, PerCategory};
use crate::page::{key_4k, PageSize, SHIFT_2M, TAG_2M, TAG_OWNED, TAG_STATIC};
use crate::reuse::{Histogram, ReuseEngine};
use crate::tlb::TlbGeometry;
use serde::{Deserialize, Serialize};

/// A mapping: the set of categories placed on 2 MB pages; all else on 4 KB pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub huge: Vec<Category>,
    /// True when `huge` holds every mappable category the program references.
    pub all_present: bool,
}

impl Mapping {
    pub fn name(&self) -> String {
        match self.huge.len() {
            0 => "all-small".into(),
            1 => self.huge[0].name().into(),
            _ if self.all_present => "all-large".into(),
            _ => self
                .huge
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join("+"),
        }
    }

    /// A base mapping (seed 001): all small, one category large, or all large.
    pub fn is_base(&self) -> bool {
        self.huge.len() <= 1 || self.all_present
    }

    fn mask(&self) -> PerCategory<bool> {
        let mut m = [false; 5];
        for c in &self.huge {
            m[c.index()] = true;
        }
        m
    }

    /// Every subset of `present` (mappable categories the program references).
    pub fn all_subsets(present: &[Category]) -> Vec<Mapping> {
        let present: Vec<Category> = Category::MAPPABLE
            .iter()
            .copied()
            .filter(|c| present.contains(c))
            .collect();
        (0u32..(1 << present.len()))
            .map(|bits| Mapping {
                all_present: bits + 1 == 1 << present.len(),
                huge: present
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, &c)| c)
                    .collect(),
            })
            .collect()
    }
}

/// TLB and fault counts of the references of one category at one page size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeStats {
    pub refs: u64,
    pub l1_misses: u64,
    /// L2 DTLB misses: page walks.
    pub walks: u64,
    /// First touches of a page: page faults.
    pub faults: u64,
}

impl SizeStats {
    fn add(&mut self, o: &SizeStats) {
        self.refs += o.refs;
        self.l1_misses += o.l1_misses;
        self.walks += o.walks;
        self.faults += o.faults;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MappingResult {
    pub mapping: Mapping,
    pub name: String,
    pub base: bool,
    /// `stats[category][page size]`.
    pub stats: PerCategory<[SizeStats; 2]>,
    /// Reuse-distance histogram of the whole page stream (one array for all sizes),
    /// when the geometry needs it.
    pub hist_mixed: Option<Histogram>,
    /// Per page size histograms, when the geometry has per-size arrays.
    pub hist_split: [Option<Histogram>; 2],
}

impl MappingResult {
    pub fn total(&self) -> SizeStats {
        let mut t = SizeStats::default();
        for per in &self.stats {
            for s in per {
                t.add(s);
            }
        }
        t
    }

    pub fn category(&self, c: Category, size: PageSize) -> SizeStats {
        self.stats[c.index()][size.index()]
    }
}

struct MappingState {
    mask: PerCategory<bool>,
    /// Page size the previous reference resolved to under this mapping.
    last_size: PageSize,
    mixed: Option<ReuseEngine>,
    split: [Option<ReuseEngine>; 2],
    result: MappingResult,
}

/// Streaming analyzer: feed it categorized references in program order.
pub struct Analyzer {
    geometry: TlbGeometry,
    static_segments: Vec<StaticSegment>,
    mappings: Vec<MappingState>,
    refs: u64,
    /// (object, 4 KB page) of the previous reference.
    last: (u32, u64),
}

/// The key of the 2 MB page a reference to `addr` in `obj` lands on when the
/// object's category is placed on huge pages, or `None` when that address stays on
/// 4 KB pages even then (static data outside the 2 MB-aligned .bss interior).
fn huge_key(obj: &ObjectInfo, seg: Option<&StaticSegment>, addr: u64) -> Option<u64> {
    match obj.category {
        Category::HeapLarge => {
            // The head is on huge pages; the tail stays on 4 KB pages.
            let off = addr - obj.start;
            (off < obj.head_len())
                .then_some(TAG_2M | TAG_OWNED | (obj.frame_base + (off >> SHIFT_2M)))
        }
        Category::Static => {
            let seg = seg?;
            if !seg.main_program {
                return None;
            }
            let (lo, hi) = seg.huge_interior_vaddr();
            let vaddr = addr.wrapping_sub(seg.bias);
            (vaddr >= lo && vaddr < hi)
                .then_some(TAG_2M | TAG_STATIC | ((seg.module as u64) << 40) | (vaddr >> SHIFT_2M))
        }
        Category::HeapSmall => Some(TAG_2M | (addr >> SHIFT_2M)),
        Category::Stack | Category::Other => None,
    }
}

impl Analyzer {
    pub fn new(
        geometry: TlbGeometry,
        static_segments: Vec<StaticSegment>,
        mappings: Vec<Mapping>,
    ) -> Self {
        let mixed = geometry.needs_mixed();
        let split = geometry.needs_split();
        let mappings = mappings
            .into_iter()
            .map(|m| MappingState {
                mask: m.mask(),
                last_size: PageSize::P4k,
                mixed: mixed.then(ReuseEngine::new),
                split: [split.then(ReuseEngine::new), split.then(ReuseEngine::new)],
                result: MappingResult {
                    name: m.name(),
                    base: m.is_base(),
                    mapping: m,
                    stats: Default::default(),
                    hist_mixed: mixed.then(Histogram::default),
                    hist_split: [
                        split.then(Histogram::default),
                        split.then(Histogram::default),
                    ],
                },
            })
            .collect();
        Analyzer {
            geometry,
            static_segments,
            mappings,
            refs: 0,
            last: (u32::MAX, u64::MAX),
        }
    }

    /// One data reference to `addr`, which lies in `obj`.
    pub fn feed(&mut self, obj: &ObjectInfo, addr: u64) {
        self.refs += 1;
        let k4 = key_4k(addr);
        let cat = obj.category.index();
        // Same object, same 4 KB page as the previous reference: the same page under
        // every mapping, reuse distance 0, a hit everywhere. Exact, and it skips the
        // engines for the bulk of sequential traffic.
        if self.last == (obj.id, k4) {
            for m in &mut self.mappings {
                m.result.stats[cat][m.last_size.index()].refs += 1;
                if let Some(h) = m.result.hist_mixed.as_mut() {
                    h.record(Some(0));
                }
                if let Some(h) = m.result.hist_split[m.last_size.index()].as_mut() {
                    h.record(Some(0));
                }
            }
            return;
        }
        self.last = (obj.id, k4);
        let seg = obj
            .segment
            .and_then(|i| self.static_segments.get(i as usize));
        let k2 = huge_key(obj, seg, addr);
        for m in &mut self.mappings {
            let (size, key) = match k2 {
                Some(k) if m.mask[cat] => (PageSize::P2m, k),
                _ => (PageSize::P4k, k4),
            };
            m.last_size = size;
            let dm = m.mixed.as_mut().map(|e| e.access(key));
            let ds = m.split[size.index()].as_mut().map(|e| e.access(key));
            if let (Some(h), Some(d)) = (m.result.hist_mixed.as_mut(), dm) {
                h.record(d);
            }
            if let (Some(h), Some(d)) = (m.result.hist_split[size.index()].as_mut(), ds) {
                h.record(d);
            }
            let dm = dm.flatten();
            let ds = ds.flatten();
            let cold = dm.or(ds).is_none();
            let (l1, l2) = self.geometry.classify(size, dm, ds);
            let s = &mut m.result.stats[cat][size.index()];
            s.refs += 1;
            s.l1_misses += l1 as u64;
            s.walks += l2 as u64;
            s.faults += cold as u64;
        }
    }

    pub fn refs(&self) -> u64 {
        self.refs
    }

    pub fn finish(self) -> Vec<MappingResult> {
        self.mappings.into_iter().map(|m| m.result).collect()
    }
}

/// Everything the model derived from one profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalysisResult {
    pub mappings: Vec<MappingResult>,
    /// References analysed (the measuring tools' own excluded).
    pub refs: u64,
    /// Peak 2 MB pages the runtime library holds for heap-large objects at once.
    pub heap_large_peak_pages: u64,
    pub alloc_stats: PerCategory<AllocStats>,
    pub geometry: TlbGeometry,
}

impl AnalysisResult {
    pub fn mapping(&self, name: &str) -> Option<&MappingResult> {
        self.mappings.iter().find(|m| m.name == name)
    }
    pub fn all_small(&self) -> &MappingResult {
        self.mappings
            .iter()
            .find(|m| m.mapping.huge.is_empty())
            .expect("all-small is always analysed")
    }
    /// Categories with references.
    pub fn present(&self) -> Vec<Category> {
        let base = self.all_small();
        Category::ALL
            .iter()
            .copied()
            .filter(|c| base.stats[c.index()].iter().any(|s| s.refs > 0))
            .collect()
    }
}

/// What a caller needs to run a whole analysis over an in-memory stream.
pub struct AnalysisInput<'a> {
    pub geometry: TlbGeometry,
    pub static_segments: Vec<StaticSegment>,
    pub objects: &'a [ObjectInfo],
    /// (object id, address) in program order.
    pub refs: &'a [(u32, u64)],
    pub heap_large_peak_pages: u64,
    pub alloc_stats: PerCategory<AllocStats>,
}

/// Convenience for in-memory streams (tests, small traces): evaluates every subset
/// of the mappable categories present in `refs`.
pub fn analyze(input: AnalysisInput<'_>) -> AnalysisResult {
    let mut present = Vec::new();
    for &(id, _) in input.refs {
        let c = input.objects[id as usize].category;
        if !present.contains(&c) {
            present.push(c);
        }
    }
    let mut a = Analyzer::new(
        input.geometry.clone(),
        input.static_segments,
        Mapping::all_subsets(&present),
    );
    for &(id, addr) in input.refs {
        a.feed(&input.objects[id as usize], addr);
    }
    AnalysisResult {
        refs: a.refs(),
        mappings: a.finish(),
        heap_large_peak_pages: input.heap_large_peak_pages,
        alloc_stats: input.alloc_stats,
        geometry: input.geometry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::categorize::{AddressSpace, AllocEvent, AllocOp, AllocVia, Categorizer};
    use crate::tlb::TlbLevel;

    fn geometry() -> TlbGeometry {
        TlbGeometry {
            l1: TlbLevel {
                entries_4k: 64,
                entries_2m: 64,
                shared: true,
            },
            l2: TlbLevel {
                entries_4k: 1024,
                entries_2m: 1024,
                shared: true,
            },
            source: "test".into(),
        }
    }

    /// A random walk over a 64 MiB heap-large buffer: 16 K pages of 4 KB (beyond
    /// the 1024-entry L2) but 32 pages of 2 MB.
    #[test]
    fn huge_pages_remove_walks_of_a_large_random_buffer() {
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let base = 0x7f00_0000_0000u64;
        let size = 64u64 << 20;
        cat.apply(&AllocEvent {
            seq: 1,
            op: AllocOp::Alloc {
                addr: base,
                size,
                via: AllocVia::Malloc,
                site: None,
            },
        });
        let mut refs = Vec::new();
        let mut x = 12345u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = base + (x % size);
            refs.push((cat.classify(addr).unwrap(), addr));
        }
        let r = analyze(AnalysisInput {
            geometry: geometry(),
            static_segments: vec![],
            objects: cat.objects(),
            refs: &refs,
            heap_large_peak_pages: cat.peak_owned_frames(),
            alloc_stats: cat.stats().clone(),
        });
        assert_eq!(r.mappings.len(), 2);
        let small = r.all_small().total();
        let large = r.mapping("heap-large").unwrap().total();
        assert!(small.walks > 150_000, "4 KB walks {}", small.walks);
        assert_eq!(large.walks, 32, "only cold misses remain");
        assert_eq!(large.faults, 32);
        assert_eq!(r.heap_large_peak_pages, 32);
        assert_eq!(small.faults as usize, {
            let mut p: Vec<u64> = refs.iter().map(|&(_, a)| a >> 12).collect();
            p.sort_unstable();
            p.dedup();
            p.len()
        });
    }

    /// The runtime library's head+tail layout: a 3 MiB block is one 2 MB page and
    /// 256 pages of 4 KB; touching all of it faults 1 huge page and 256 small ones.
    #[test]
    fn heap_large_blocks_have_a_huge_head_and_a_small_tail() {
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let base = 0x7f00_0000_0000u64;
        cat.apply(&AllocEvent {
            seq: 1,
            op: AllocOp::Alloc {
                addr: base,
                size: 3 << 20,
                via: AllocVia::Malloc,
                site: None,
            },
        });
        let refs: Vec<(u32, u64)> = (0..(3u64 << 20) / 4096)
            .map(|p| base + p * 4096)
            .map(|a| (cat.classify(a).unwrap(), a))
            .collect();
        let r = analyze(AnalysisInput {
            geometry: geometry(),
            static_segments: vec![],
            objects: cat.objects(),
            refs: &refs,
            heap_large_peak_pages: cat.peak_owned_frames(),
            alloc_stats: cat.stats().clone(),
        });
        let m = r.mapping("heap-large").unwrap();
        assert_eq!(m.category(Category::HeapLarge, PageSize::P2m).faults, 1);
        assert_eq!(m.category(Category::HeapLarge, PageSize::P4k).faults, 256);
        assert_eq!(
            r.all_small()
                .category(Category::HeapLarge, PageSize::P4k)
                .faults,
            768
        );
        assert_eq!(r.heap_large_peak_pages, 1);
    }

    /// The same-page shortcut must give exactly what the engines give.
    #[test]
    fn repeated_page_shortcut_is_exact() {
        use crate::reuse::ReuseEngine;
        let mut cat = Categorizer::new(AddressSpace::default(), 1 << 30);
        cat.apply(&AllocEvent {
            seq: 1,
            op: AllocOp::Alloc {
                addr: 0x100000,
                size: 1 << 24,
                via: AllocVia::Malloc,
                site: None,
            },
        });
        let mut refs = Vec::new();
        let mut x = 7u64;
        for i in 0..50_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Runs of 1..4 references to one page, pages random over 4 K pages.
            let page = (x >> 33) % 4096;
            for j in 0..(1 + i % 4) {
                let addr = 0x100000 + page * 4096 + j * 64;
                refs.push((cat.classify(addr).unwrap(), addr));
            }
        }
        let r = analyze(AnalysisInput {
            geometry: geometry(),
            static_segments: vec![],
            objects: cat.objects(),
            refs: &refs,
            heap_large_peak_pages: 0,
            alloc_stats: Default::default(),
        });
        let mut e = ReuseEngine::new();
        let mut h = crate::reuse::Histogram::default();
        for &(_, a) in &refs {
            h.record(e.access(a >> 12));
        }
        let got = r.all_small().hist_mixed.clone().unwrap();
        assert_eq!(got, h);
        let s = r.all_small().total();
        assert_eq!(s.refs, refs.len() as u64);
        assert_eq!(s.walks, h.misses(1024));
        assert_eq!(s.l1_misses, h.misses(64));
    }

    #[test]
    fn subsets_and_names() {
        let m = Mapping::all_subsets(&[Category::HeapLarge, Category::Stack, Category::Static]);
        let names: Vec<String> = m.iter().map(|m| m.name()).collect();
        assert_eq!(
            names,
            vec!["all-small", "static", "heap-large", "all-large"]
        );
        assert!(m.iter().all(|m| m.is_base()));
        let three = Mapping::all_subsets(&Category::MAPPABLE);
        assert_eq!(three.len(), 8);
        assert_eq!(three.iter().filter(|m| m.is_base()).count(), 5);
        assert_eq!(three[3].name(), "static+heap-small");
    }
}
