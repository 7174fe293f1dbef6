//! Page resolution and page-locality analysis for a set of mappings (seed 001 §3.2).
//!
//! For every mapping of categories to page sizes, each reference is resolved to the
//! page it would touch under that mapping, *with the runtime library's real
//! placement*: heap-large objects get fresh, aligned whole pages of their backing
//! (head+tail layout; `hugetlb-1g` blocks 1 GB pages, then 2 MB pages, then 4 KB);
//! static data only its 2 MB-aligned (mTHP: size-aligned) .bss interior; the
//! THP-backed heap its 2 MB (mTHP-sized) frames. Each TLB level then sees the
//! translation it would cache: the leaf size, smashed to a smaller entry where
//! the level has no array for it, and coalesced where the level merges contiguous 4 KB entries of one folio (so mTHP folios only
//! extend TLB reach there; elsewhere they only save faults). The translations feed
//! exact reuse-distance engines (fully associative LRU per array, eq. 1) and,
//! optionally, an exact set-associative simulation of the same hierarchy.
//!
//! Unlike the seed, which evaluates only base mappings and assumes benefits add up,
//! every subset of the mappable categories present is evaluated exactly at 2 MB
//! (at most 8), plus heap-large's subsets on 1 GB pages, and on each mTHP size
//! asked for every category alone and all together (static data then on the
//! size-aligned .bss interior, the heap on frames of that size); base mappings
//! are flagged, and additivity can be checked.
//!
//! **Sampled streams** ([`Analyzer::with_sampling`], `sampled.rs`): each reference
//! comes with its group and its weight 1/R; the engines estimate the complete
//! stream's distances, every count is weighted (a fault of a 1 GB folio, seen
//! whenever its page is referenced at all, weighs 1), and the counts are also kept
//! per bucket of groups for the error bars. With every group sampled (a complete
//! stream) the counts are the exact ones, as integers.

use crate::categorize::{head_pages_1g, AllocStats, AllocVia, ObjectInfo, Site, StaticSegment};
use crate::category::{Category, PerCategory};
use crate::page::{
    align_down, align_up, key, key_4k, size_name, Backing, PageSize, BACKINGS, MTHP_SHIFTS,
    SHIFT_2M, SIZE_1G, SIZE_2M, TAG_OWNED, TAG_STATIC,
};
use crate::sampled::{bucket_of, Layer, SampledEngine, BUCKETS};
use crate::tlb::{TlbGeometry, TlbSim};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// A mapping: the categories placed on huge pages, each with the page resolution
/// it gets (`thp-2m` stands for every 2 MB backing, `hugetlb-1g` for the 1 GB
/// layout, `thp-64k` etc. for mTHP folios); all else on 4 KB pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub huge: Vec<(Category, Backing)>,
    /// True when `huge` holds every mappable category the program references.
    pub all_present: bool,
    /// Per-site mapping: the heap-large objects of these allocation sites on huge
    /// pages (the runtime library's `site` directive), nothing else.
    #[serde(default)]
    pub sites: Vec<(Site, Backing)>,
}

impl Mapping {
    pub fn name(&self) -> String {
        let size = |b: Backing| {
            if b.folio_shift() == SHIFT_2M {
                String::new()
            } else {
                format!(":{}", size_name(b.folio_bytes()))
            }
        };
        if !self.sites.is_empty() {
            return self
                .sites
                .iter()
                .map(|(st, b)| format!("site {}+{:#x}{}", st.module, st.offset, size(*b)))
                .collect::<Vec<_>>()
                .join("+");
        }
        match self.huge.len() {
            0 => "all-small".into(),
            _ if self.all_present && self.huge.len() > 1 => {
                // Heap-large alone on 1 GB pages, or every category on one
                // mTHP size: the size that differs from 2 MB names it.
                let odd = self.huge.iter().find(|(_, b)| b.folio_shift() != SHIFT_2M);
                format!(
                    "all-large{}",
                    odd.map(|&(_, b)| size(b)).unwrap_or_default()
                )
            }
            _ => self
                .huge
                .iter()
                .map(|&(c, b)| format!("{}{}", category_name(c), size(b)))
                .collect::<Vec<_>>()
                .join("+"),
        }
    }

    /// A base mapping (seed 001): all small, one category large, or all large.
    pub fn is_base(&self) -> bool {
        self.sites.is_empty() && (self.huge.len() <= 1 || self.all_present) && !self.is_jvm_heap()
    }

    /// The JVM's heap on huge pages through the JVM's own switch
    /// (`AnalysisOptions::jvm`): category `other` on 2 MB THP. Predicted, never
    /// applied as a directive (stages/jvm.rs plans it).
    pub fn is_jvm_heap(&self) -> bool {
        self.huge.iter().any(|&(c, _)| c == Category::Other)
    }

    /// Everything on 4 KB pages.
    pub fn is_all_small(&self) -> bool {
        self.huge.is_empty() && self.sites.is_empty()
    }

    /// The THP size memory the program advises itself gets in this mapping's
    /// run: 2 MB, unless the mapping puts a category on an mTHP size and none
    /// on 2 MB THP; its run then turns PMD THP off so that advised ranges get
    /// that size (`plan::thp_controls`), the program's own included.
    pub fn self_advice(&self) -> Backing {
        let thp = self.huge.iter().map(|&(_, b)| b);
        let sites = self.sites.iter().map(|&(_, b)| b);
        let all: Vec<Backing> = thp.chain(sites).collect();
        if all.contains(&Backing::Thp2m) {
            return Backing::Thp2m;
        }
        all.into_iter()
            .find(|b| b.is_mthp())
            .unwrap_or(Backing::Thp2m)
    }

    pub fn categories(&self) -> Vec<Category> {
        self.huge.iter().map(|&(c, _)| c).collect()
    }

    pub(crate) fn resolution(&self) -> PerCategory<Option<Backing>> {
        let mut m = [None; 5];
        for &(c, b) in &self.huge {
            m[c.index()] = Some(b);
        }
        m
    }

    /// Every subset of `present` (mappable categories the program references) at 2 MB.
    pub fn all_subsets(present: &[Category]) -> Vec<Mapping> {
        Self::subsets(present, None)
    }

    /// Subsets of `present`, every category at 2 MB except heap-large and
    /// static at `gigantic` when given (the 1 GB layout; then only subsets
    /// holding one of them).
    fn subsets(present: &[Category], gigantic: Option<Backing>) -> Vec<Mapping> {
        let on_1g = |c: Category| matches!(c, Category::HeapLarge | Category::Static);
        let present: Vec<Category> = Category::MAPPABLE
            .iter()
            .copied()
            .filter(|c| present.contains(c))
            .collect();
        (0u32..(1 << present.len()))
            .map(|bits| Mapping {
                sites: vec![],
                all_present: bits + 1 == 1 << present.len(),
                huge: present
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, &c)| match gigantic {
                        Some(b) if on_1g(c) => (c, b),
                        _ => (c, Backing::Thp2m),
                    })
                    .collect(),
            })
            .filter(|m| gigantic.is_none() || m.huge.iter().any(|&(c, _)| on_1g(c)))
            .collect()
    }

    /// The mappings the model evaluates: every subset at 2 MB; with heap-large
    /// or static present, also every subset holding one of them with both on
    /// the 1 GB layout (when `gigantic`: `static:1g`, `heap-large:1g`,
    /// `all-large:1g`); with heap-large present, the heap-large objects of each site in `sites` alone on 2 MB pages;
    /// for each mTHP size in `mthp` (folio shifts 14..=20), each mappable
    /// category present alone on it and, with more than one present, all of
    /// them on it (`heap-small:64k`, `all-large:64k`). Only one THP size per
    /// mapping: the per-size controls are system-wide, so a run cannot give one
    /// category 2 MB folios and another 64 KB ones (docs/model.md, "mTHP").
    pub fn candidates(
        present: &[Category],
        gigantic: bool,
        mthp: &[u8],
        sites: &[Site],
        jvm: bool,
    ) -> Vec<Mapping> {
        let mut v = Self::subsets(present, None);
        if jvm {
            // HotSpot's -XX:+UseTransparentHugePages: the memory the JVM maps
            // itself (its heap: category other) on 2 MB THP (stages/jvm.rs).
            v.push(Mapping {
                huge: vec![(Category::Other, Backing::Thp2m)],
                all_present: false,
                sites: vec![],
            });
        }
        if gigantic
            && (present.contains(&Category::HeapLarge) || present.contains(&Category::Static))
        {
            v.extend(Self::subsets(present, Some(Backing::Hugetlb1g)));
        }
        let mappable: Vec<Category> = Category::MAPPABLE
            .iter()
            .copied()
            .filter(|c| present.contains(c))
            .collect();
        for &s in mthp.iter().filter(|&&s| MTHP_SHIFTS.contains(&s)) {
            for &c in &mappable {
                v.push(Mapping {
                    huge: vec![(c, Backing::Thp(s))],
                    all_present: mappable.len() == 1,
                    sites: vec![],
                });
            }
            if mappable.len() > 1 {
                v.push(Mapping {
                    huge: mappable.iter().map(|&c| (c, Backing::Thp(s))).collect(),
                    all_present: true,
                    sites: vec![],
                });
            }
        }
        if present.contains(&Category::HeapLarge) {
            for &site in sites {
                v.push(Mapping {
                    huge: vec![],
                    all_present: false,
                    sites: vec![(site, Backing::Thp2m)],
                });
            }
        }
        v
    }
}

/// TLB and fault counts of the references of one category on one backing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeStats {
    pub refs: u64,
    /// First-level DTLB misses (fully associative LRU approximation).
    pub l1_misses: u64,
    /// Misses of every level: page walks (approximation).
    pub walks: u64,
    /// Walks whose 4 KB page the program writes before its next walk (the
    /// read-modify-write of a random line): the access after such a walk
    /// dirties its line, which costs more than a load (docs/model.md §4,
    /// "Writes"). 0 where the stream has no write bits (time-sampled, DAMON).
    #[serde(default)]
    pub dirty_walks: u64,
    /// First touches of a folio: page faults.
    pub faults: u64,
    /// The same two counts from the exact set-associative simulation, when run.
    #[serde(default)]
    pub sim_l1_misses: u64,
    #[serde(default)]
    pub sim_walks: u64,
}

/// [`SizeStats`] while counting: weighted sums (estimates of a sampled stream's
/// complete counts; exact integers for a complete stream).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Weighted {
    refs: f64,
    l1_misses: f64,
    walks: f64,
    dirty_walks: f64,
    faults: f64,
    sim_l1_misses: f64,
    sim_walks: f64,
}

impl Weighted {
    fn add(&mut self, o: &Weighted) {
        self.refs += o.refs;
        self.l1_misses += o.l1_misses;
        self.walks += o.walks;
        self.dirty_walks += o.dirty_walks;
        self.faults += o.faults;
        self.sim_l1_misses += o.sim_l1_misses;
        self.sim_walks += o.sim_walks;
    }

    /// Rounded to counts, every count times `scale`.
    fn counts(&self, scale: f64) -> SizeStats {
        let r = |x: f64| (x * scale).round().max(0.0) as u64;
        SizeStats {
            refs: r(self.refs),
            l1_misses: r(self.l1_misses),
            walks: r(self.walks),
            dirty_walks: r(self.dirty_walks),
            faults: r(self.faults),
            sim_l1_misses: r(self.sim_l1_misses),
            sim_walks: r(self.sim_walks),
        }
    }
}

impl SizeStats {
    fn add(&mut self, o: &SizeStats) {
        self.refs += o.refs;
        self.l1_misses += o.l1_misses;
        self.walks += o.walks;
        self.dirty_walks += o.dirty_walks;
        self.faults += o.faults;
        self.sim_l1_misses += o.sim_l1_misses;
        self.sim_walks += o.sim_walks;
    }
}

/// The counts of one (category, backing) pair under a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub category: Category,
    /// The resolution backing (`thp-2m` for every 2 MB backing).
    pub backing: Backing,
    #[serde(flatten)]
    pub stats: SizeStats,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MappingResult {
    pub mapping: Mapping,
    pub name: String,
    pub base: bool,
    /// Non-empty (category, backing) cells.
    pub cells: Vec<Cell>,
    /// Whether the `sim_*` counts were computed.
    #[serde(default)]
    pub simulated: bool,
    /// Sampled streams: the same cells per bucket of groups, each estimating the
    /// complete stream on its own (times [`BUCKETS`]), for the error bars
    /// (`rank::sampling_errors`); empty for complete streams. Not serialized: the
    /// error bars are.
    #[serde(skip)]
    pub buckets: Vec<Vec<Cell>>,
    /// Per-core TLBs ([`Analyzer::with_cores`]) with more than one core used:
    /// each core's counts, summed over categories (the cells hold the sums over
    /// cores). Empty with one TLB.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_core: Vec<SizeStats>,
}

impl MappingResult {
    pub fn total(&self) -> SizeStats {
        let mut t = SizeStats::default();
        for c in &self.cells {
            t.add(&c.stats);
        }
        t
    }

    /// Counts of category `c` on resolution backing `b`.
    pub fn cell(&self, c: Category, b: Backing) -> SizeStats {
        self.cells
            .iter()
            .find(|x| x.category == c && x.backing == b)
            .map(|x| x.stats)
            .unwrap_or_default()
    }

    /// Counts of category `c` over every backing.
    pub fn category_total(&self, c: Category) -> SizeStats {
        let mut t = SizeStats::default();
        for x in self.cells.iter().filter(|x| x.category == c) {
            t.add(&x.stats);
        }
        t
    }

    /// Counts of every category whose pages end in leaf size `s`.
    pub fn leaf_total(&self, s: PageSize) -> SizeStats {
        let mut t = SizeStats::default();
        for x in self.cells.iter().filter(|x| x.backing.leaf() == s) {
            t.add(&x.stats);
        }
        t
    }
}

/// Per backing, per TLB level: the engine, key shift and entries of its array.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    pub(crate) engine: usize,
    pub(crate) shift: u32,
    pub(crate) entries: u64,
    pub(crate) array: usize,
}

/// The TLB state of one core under one mapping: its reuse engines and its
/// set-associative simulation (TLBs are per core; faults are per process).
struct CoreTlb {
    engines: Vec<SampledEngine>,
    sim: Option<TlbSim>,
}

impl CoreTlb {
    fn new(n: usize, geometry: &TlbGeometry, simulate: bool, sampled: bool) -> Self {
        CoreTlb {
            engines: (0..n)
                .map(|_| {
                    if sampled {
                        SampledEngine::estimating()
                    } else {
                        SampledEngine::exact()
                    }
                })
                .collect(),
            sim: simulate.then(|| TlbSim::new(geometry)),
        }
    }
}

struct MappingState {
    res: PerCategory<Option<Backing>>,
    /// [`Mapping::self_advice`].
    self_thp: Backing,
    sites: Vec<(Site, Backing)>,
    /// `routes[backing][level]`.
    routes: Vec<Vec<Option<Route>>>,
    /// Per backing: an engine keyed at folio granularity, whose cold misses are the
    /// faults; `None`: a set of touched folios counts them. With several cores a
    /// cold miss is a fault only when no other core touched the folio first (the
    /// touched set, kept for every backing then).
    fault_engine: Vec<Option<usize>>,
    /// Per core, created when the core's first reference comes (index: core).
    cores: Vec<CoreTlb>,
    /// Engines per core.
    n_engines: usize,
    simulate: bool,
    sampled: bool,
    scratch: Vec<Option<Option<u64>>>,
    touched: FxHashSet<u64>,
    /// Per-core totals (several cores only).
    core_totals: Vec<Weighted>,
    /// Cell of the previous reference (its bucket included), and its weight
    /// there (0: not in this mapping's sample).
    last_cell: usize,
    last_w: f64,
    /// The last walk not yet known to dirty its page: (4 KB page key, cell,
    /// weight, core). A write to that page before the next walk makes it a
    /// dirty walk.
    open_walk: Option<(u64, usize, f64, usize)>,
    /// `cells[bucket * CELLS + category * BACKINGS + backing]`; one bucket for
    /// complete streams.
    cells: Vec<Weighted>,
    result: MappingResult,
}

impl MappingState {
    /// A store to 4 KB page `k4`: the open walk, if it was of that page, is a
    /// dirty walk.
    #[inline]
    fn dirty(&mut self, k4: u64, multi: bool) {
        if let Some((k, cell, w, core)) = self.open_walk {
            if k == k4 {
                self.cells[cell].dirty_walks += w;
                if multi {
                    self.core_totals[core].dirty_walks += w;
                }
                self.open_walk = None;
            }
        }
    }
}

/// Cells of one bucket: (category, backing).
const CELLS: usize = 5 * BACKINGS;

/// The sample units of a reference (`sampled.rs`) and which are in the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefUnits {
    /// Its captured 4 KB page.
    pub page: u64,
    /// The page that decides a 4 KB page of the runtime library's placement
    /// holding it ([`crate::sampled::page_unit`]).
    pub placed_page: u64,
    /// Its group ([`crate::sampled::group_of`]).
    pub group: u64,
    /// `PAGE`, `PLACED_PAGE`, `REGION`: which units are in the sample.
    pub flags: u8,
}

impl RefUnits {
    pub const PAGE: u8 = 1;
    pub const PLACED_PAGE: u8 = 2;
    pub const REGION: u8 = 4;
    /// The reference is a store (not a sample decision: the previous-page test
    /// leaves it out).
    pub const WRITE: u8 = 8;
    /// A reference of a complete stream: in every sample.
    pub const ALL: RefUnits = RefUnits {
        page: 0,
        placed_page: 0,
        group: 0,
        flags: 7,
    };
}

/// Streaming analyzer: feed it categorized references in program order.
pub struct Analyzer {
    static_segments: Vec<StaticSegment>,
    mappings: Vec<MappingState>,
    levels: usize,
    /// References fed, and their weight (estimated references).
    refs: u64,
    weight: f64,
    /// (object, 4 KB page, sample decisions) of the previous reference.
    last: (u32, u64, u8),
    /// Whether references come from a sampled stream (estimating engines,
    /// buckets).
    sampled: bool,
    geometry: TlbGeometry,
    /// Whether the program's own `MADV_HUGEPAGE` counts (`with_self_advice`).
    advised: bool,
    /// Per-core TLBs ([`Analyzer::with_cores`]): whether there may be more
    /// than one core, the core of the references fed now, and each core's
    /// references (their weight).
    multi: bool,
    core: usize,
    core_weight: Vec<f64>,
}

/// The backing a reference to `addr` in `obj` lands on when the object's category
/// has resolution `res`, with the placement space and address it has there.
///
/// `advised`: the program's own `MADV_HUGEPAGE` counts (`ObjectInfo::self_thp`),
/// with the THP size the mapping's run gives advised memory
/// ([`Mapping::self_advice`]: 2 MB, or the mTHP size of a mapping that turns
/// PMD THP off for its run): an advised object whose category is not planned
/// has the aligned interior on folios of that size where it lies.
pub(crate) fn resolve(
    obj: &ObjectInfo,
    seg: Option<&StaticSegment>,
    addr: u64,
    res: Option<Backing>,
    advised: Option<Backing>,
) -> (Backing, u64, u64) {
    let small = (Backing::Base4k, 0, addr);
    let Some(res) = res else {
        if let Some(b) = advised.filter(|_| obj.self_thp) {
            let p = b.folio_bytes();
            if addr >= align_up(obj.start, p) && addr < align_down(obj.start + obj.len, p) {
                return (b, 0, addr);
            }
        }
        return small;
    };
    match obj.category {
        Category::HeapLarge => {
            let off = addr - obj.start;
            let pa = obj.virt_base + off;
            if res == Backing::Hugetlb1g {
                let (g, m) = head_pages_1g(obj.len);
                if off < g * SIZE_1G {
                    (Backing::Hugetlb1g, TAG_OWNED, pa)
                } else if off < g * SIZE_1G + m * SIZE_2M {
                    (Backing::Hugetlb2m, TAG_OWNED, pa)
                } else {
                    (Backing::Base4k, TAG_OWNED, pa)
                }
            } else {
                let p = res.folio_bytes();
                if off < obj.len / p * p {
                    (res, TAG_OWNED, pa)
                } else {
                    (Backing::Base4k, TAG_OWNED, pa)
                }
            }
        }
        Category::Static => {
            let Some(seg) = seg.filter(|s| s.main_program) else {
                return small;
            };
            // The runtime library's placement: the interior aligned to the
            // folio size (2 MB, or 64 KB for `static thp-64k`); on
            // `hugetlb-1g` its whole gigabytes on 1 GB pages, the rest of the
            // 2 MB interior on 2 MB pages (link-time alignment, as for 2 MB).
            let (lo, hi) = seg.interior_vaddr(res.folio_bytes().min(SIZE_2M));
            let vaddr = addr.wrapping_sub(seg.bias);
            if vaddr < lo || vaddr >= hi {
                return small;
            }
            let tagged = vaddr | ((seg.module as u64) << 44);
            if res != Backing::Hugetlb1g {
                return (res, TAG_STATIC, tagged);
            }
            let (glo, ghi) = seg.gigantic_interior_vaddr();
            if vaddr >= glo && vaddr < ghi {
                (Backing::Hugetlb1g, TAG_STATIC, tagged)
            } else {
                (Backing::Hugetlb2m, TAG_STATIC, tagged)
            }
        }
        Category::HeapSmall => (res, 0, addr),
        // Only the JVM's mapping puts `other` on huge pages: the JVM advises
        // the heap it reserved 2 MB-aligned, so every 2 MB region of it is a
        // THP folio (docs/runtimes.md, "Predicted"). Files and shared memory
        // it maps are not its heap: the switch leaves them as they were.
        Category::Other if obj.via == Some(AllocVia::MmapFile) => small,
        Category::Other => (res, 0, addr),
        Category::Stack => small,
    }
}

/// A category's name in mapping names and labels: `other` on huge pages is
/// the JVM's heap ([`Mapping::is_jvm_heap`]), named `jvm` as its plan is.
pub fn category_name(c: Category) -> &'static str {
    match c {
        Category::Other => "jvm",
        c => c.name(),
    }
}

/// `routes[backing][level]` of mapping `m` and how many engines they use: two
/// arrays share an engine when they see the same translations with the same
/// keys for every backing the mapping uses (shared with `timesampled.rs`).
/// `advised`: objects the program advised itself land on THP in any mapping
/// (`resolve`), so 2 MB translations are routed in every one.
pub(crate) fn routes_of(
    m: &Mapping,
    geometry: &TlbGeometry,
    advised: bool,
) -> (Vec<Vec<Option<Route>>>, usize) {
    let mut used = vec![Backing::Base4k];
    if advised {
        used.push(m.self_advice());
    }
    let huge = m.huge.iter().map(|&(_, b)| b);
    for b in huge.chain(m.sites.iter().map(|&(_, b)| b)) {
        used.push(b);
        if b == Backing::Hugetlb1g {
            used.push(Backing::Hugetlb2m);
        }
    }
    // Two arrays share an engine when they see the same translations with the
    // same keys for every backing this mapping uses (e.g. AMD's L1 and L2
    // without 1 GB pages): one reuse stack answers both capacities.
    let mut signatures: Vec<Vec<Option<u32>>> = Vec::new();
    let mut routes = vec![vec![None; geometry.levels.len()]; BACKINGS];
    for (li, level) in geometry.levels.iter().enumerate() {
        for (ai, array) in level.arrays.iter().enumerate() {
            let sig: Vec<Option<u32>> = used
                .iter()
                .map(|b| {
                    level
                        .slot(b.leaf(), b.folio_shift())
                        .filter(|s| s.array == ai)
                        .map(|s| s.shift)
                })
                .collect();
            if sig.iter().all(Option::is_none) {
                continue;
            }
            let engine = match signatures.iter().position(|s| *s == sig) {
                Some(e) => e,
                None => {
                    signatures.push(sig.clone());
                    signatures.len() - 1
                }
            };
            for (b, shift) in used.iter().zip(&sig) {
                if let Some(shift) = *shift {
                    routes[b.index()][li] = Some(Route {
                        engine,
                        shift,
                        entries: array.entries,
                        array: ai,
                    });
                }
            }
        }
    }
    let n = signatures.len();
    (routes, n)
}

impl MappingState {
    fn new(
        m: Mapping,
        geometry: &TlbGeometry,
        simulate: bool,
        sampled: bool,
        advised: bool,
    ) -> Self {
        let res = m.resolution();
        let (routes, n) = routes_of(&m, geometry, advised);
        let fault_engine = (0..BACKINGS)
            .map(|bi| {
                let b = Backing::all()[bi];
                routes[bi]
                    .iter()
                    .flatten()
                    .find(|r| r.shift == b.folio_shift())
                    .map(|r| r.engine)
            })
            .collect();
        MappingState {
            res,
            self_thp: m.self_advice(),
            sites: m.sites.clone(),
            routes,
            fault_engine,
            cores: vec![CoreTlb::new(n, geometry, simulate, sampled)],
            n_engines: n,
            simulate,
            sampled,
            scratch: vec![None; n],
            touched: FxHashSet::default(),
            core_totals: Vec::new(),
            last_cell: 0,
            last_w: 0.0,
            open_walk: None,
            cells: vec![Weighted::default(); CELLS * if sampled { BUCKETS } else { 1 }],
            result: MappingResult {
                name: m.name(),
                base: m.is_base(),
                mapping: m,
                cells: Vec::new(),
                simulated: simulate,
                buckets: Vec::new(),
                per_core: Vec::new(),
            },
        }
    }

    /// Makes sure core `c` has its TLB state (and its totals with `multi`).
    fn ensure_core(&mut self, c: usize, geometry: &TlbGeometry, multi: bool) {
        while self.cores.len() <= c {
            let t = CoreTlb::new(self.n_engines, geometry, self.simulate, self.sampled);
            self.cores.push(t);
        }
        if multi && self.core_totals.len() <= c {
            self.core_totals.resize(c + 1, Weighted::default());
        }
    }
}

impl Analyzer {
    pub fn new(
        geometry: TlbGeometry,
        static_segments: Vec<StaticSegment>,
        mappings: Vec<Mapping>,
    ) -> Self {
        Self::with_simulation(geometry, static_segments, mappings, false)
    }

    /// `simulate`: also run the exact set-associative simulation (slower; ground
    /// truth for the approximation's error).
    pub fn with_simulation(
        geometry: TlbGeometry,
        static_segments: Vec<StaticSegment>,
        mappings: Vec<Mapping>,
        simulate: bool,
    ) -> Self {
        Self::build(geometry, static_segments, mappings, simulate, false)
    }

    /// An analyzer for a spatially sampled stream (`sampled.rs`): references
    /// come through [`Analyzer::feed_sampled`]. The set-associative simulation
    /// needs every reference and is not available.
    pub fn with_sampling(
        geometry: TlbGeometry,
        static_segments: Vec<StaticSegment>,
        mappings: Vec<Mapping>,
    ) -> Self {
        Self::build(geometry, static_segments, mappings, false, true)
    }

    fn build(
        geometry: TlbGeometry,
        static_segments: Vec<StaticSegment>,
        mappings: Vec<Mapping>,
        simulate: bool,
        sampled: bool,
    ) -> Self {
        let levels = geometry.levels.len();
        Analyzer {
            mappings: mappings
                .into_iter()
                .map(|m| MappingState::new(m, &geometry, simulate, sampled, false))
                .collect(),
            static_segments,
            levels,
            refs: 0,
            weight: 0.0,
            last: (u32::MAX, u64::MAX, 0),
            sampled,
            geometry,
            advised: false,
            multi: false,
            core: 0,
            core_weight: vec![0.0],
        }
    }

    /// Per-core TLBs: the references may come from several cores
    /// ([`Analyzer::set_core`]), each with TLBs of its own; a folio still
    /// faults once, on the core that touches it first. Call before the first
    /// reference. With one core used, the counts are those of one TLB.
    pub fn with_cores(mut self) -> Self {
        self.multi = true;
        for m in &mut self.mappings {
            m.core_totals = vec![Weighted::default()];
        }
        self
    }

    /// The references fed from now on run on core `c` (0-based; with
    /// [`Analyzer::with_cores`] only).
    pub fn set_core(&mut self, c: usize) {
        debug_assert!(self.multi || c == 0, "set_core without with_cores");
        if c == self.core {
            return;
        }
        self.core = c;
        // The previous reference was another core's: its page is not this
        // core's most recent entry.
        self.last = (u32::MAX, u64::MAX, 0);
        if self.core_weight.len() <= c {
            self.core_weight.resize(c + 1, 0.0);
        }
        for m in &mut self.mappings {
            m.ensure_core(c, &self.geometry, self.multi);
        }
    }

    /// Each core's references (their weight), for the cores used so far.
    pub fn core_weights(&self) -> &[f64] {
        &self.core_weight
    }

    /// The program advises `MADV_HUGEPAGE` itself (`AllocOp::Advise`): the
    /// objects it advised are on THP in every mapping that leaves their category
    /// alone, all-small included, as in the run without hugetune. Call before
    /// the first reference.
    pub fn with_self_advice(mut self) -> Self {
        let (geometry, sampled, multi) = (self.geometry.clone(), self.sampled, self.multi);
        self.mappings = std::mem::take(&mut self.mappings)
            .into_iter()
            .map(|s| {
                let mut n =
                    MappingState::new(s.result.mapping, &geometry, s.simulate, sampled, true);
                if multi {
                    n.core_totals = vec![Weighted::default()];
                }
                n
            })
            .collect();
        self.advised = true;
        self
    }

    /// Whether this analyzer estimates from a sampled stream.
    pub fn is_sampled(&self) -> bool {
        self.sampled
    }

    /// One data reference to `addr`, which lies in `obj` (a complete stream).
    #[inline]
    pub fn feed(&mut self, obj: &ObjectInfo, addr: u64) {
        self.feed_inner(obj, addr, &RefUnits::ALL, 1.0, 1.0);
    }

    /// [`Analyzer::feed`] of a load (`write` false) or a store.
    #[inline]
    pub fn feed_access(&mut self, obj: &ObjectInfo, addr: u64, write: bool) {
        let mut u = RefUnits::ALL;
        u.flags |= RefUnits::WRITE * write as u8;
        self.feed_inner(obj, addr, &u, 1.0, 1.0);
    }

    /// One reference of a sampled stream, with its units and which of them are
    /// in the sample ([`RefUnits`]); the page sample at rate `1 / inv_page`, the
    /// region sample at `1 / inv_region` now. Each mapping counts it in the
    /// sample of the page it resolves to (4 KB: pages; larger: regions) when that
    /// holds it.
    #[inline]
    pub fn feed_sampled(
        &mut self,
        obj: &ObjectInfo,
        addr: u64,
        units: &RefUnits,
        inv_page: f64,
        inv_region: f64,
    ) {
        self.feed_inner(obj, addr, units, inv_page, inv_region);
    }

    /// Fixed-size sampling lowered the threshold: the pages and groups for which
    /// `page_left` and `group_left` hold are no longer in the sample.
    pub fn evict(
        &mut self,
        page_left: impl Fn(u64) -> bool + Copy,
        group_left: impl Fn(u64) -> bool + Copy,
    ) {
        for m in &mut self.mappings {
            for e in m.cores.iter_mut().flat_map(|c| &mut c.engines) {
                e.evict(page_left, group_left);
            }
        }
        // The previous reference's page may have left.
        self.last = (u32::MAX, u64::MAX, 0);
    }

    #[inline(always)]
    fn feed_inner(
        &mut self,
        obj: &ObjectInfo,
        addr: u64,
        u: &RefUnits,
        inv_page: f64,
        inv_region: f64,
    ) {
        self.refs += 1;
        if u.flags & RefUnits::PAGE != 0 {
            self.weight += inv_page;
            self.core_weight[self.core] += inv_page;
        }
        let k4 = key_4k(addr);
        // Same object, same 4 KB page (and the same sample decisions) as the
        // previous reference: the same page under every mapping, the most recent
        // entry of every array, a hit everywhere (also in the simulation, where
        // it sits at the front of its set). Exact, and it skips the engines for
        // the bulk of sequential traffic. (In a sampled stream, the previous
        // *sampled* reference: no sampled key came between, so every estimated
        // distance is 0 as well.)
        let write = u.flags & RefUnits::WRITE != 0;
        let decisions = u.flags & !RefUnits::WRITE;
        if self.last == (obj.id, k4, decisions) {
            for m in &mut self.mappings {
                if write {
                    m.dirty(k4, self.multi);
                }
                if m.last_w > 0.0 {
                    m.cells[m.last_cell].refs += m.last_w;
                    if self.multi {
                        m.core_totals[self.core].refs += m.last_w;
                    }
                }
            }
            return;
        }
        self.last = (obj.id, k4, decisions);
        let seg = obj
            .segment
            .and_then(|i| self.static_segments.get(i as usize));
        let cat = obj.category.index();
        let mut slots = [None; 4];
        let core = self.core;
        for m in &mut self.mappings {
            let res = match obj.site {
                Some(site) if !m.sites.is_empty() && obj.category == Category::HeapLarge => {
                    m.sites.iter().find(|(s, _)| *s == site).map(|&(_, b)| b)
                }
                _ => m.res[cat],
            };
            let (b, space, pa) = resolve(obj, seg, addr, res, self.advised.then_some(m.self_thp));
            // Which sample this reference is in for this mapping (sampled.rs).
            let (layer, unit, w) = if b == Backing::Base4k {
                let (unit, bit) = if space == TAG_OWNED {
                    (u.placed_page, RefUnits::PLACED_PAGE)
                } else {
                    (u.page, RefUnits::PAGE)
                };
                (
                    Layer::Page,
                    unit,
                    if u.flags & bit != 0 { inv_page } else { 0.0 },
                )
            } else {
                let in_sample = u.flags & RefUnits::REGION != 0;
                (
                    Layer::Region,
                    u.group,
                    if in_sample { inv_region } else { 0.0 },
                )
            };
            m.last_w = w;
            if w == 0.0 {
                continue;
            }
            let bi = b.index();
            m.scratch.iter_mut().for_each(|d| *d = None);
            let mut hit_level = self.levels;
            for (l, route) in m.routes[bi].iter().enumerate() {
                let Some(r) = route else {
                    slots[l] = None;
                    continue;
                };
                let k = key(space, r.shift, pa);
                slots[l] = Some((r.array, k));
                let d = match m.scratch[r.engine] {
                    Some(d) => d,
                    None => {
                        let (kl, ku) = if r.shift > SHIFT_2M {
                            (Layer::Coarse, u.group)
                        } else {
                            (layer, unit)
                        };
                        let d =
                            m.cores[core].engines[r.engine].access(k, kl, ku, inv_page, inv_region);
                        m.scratch[r.engine] = Some(d);
                        d
                    }
                };
                if hit_level == self.levels && d.is_some_and(|d| d < r.entries) {
                    hit_level = l;
                }
            }
            let fault = match m.fault_engine[bi] {
                // With several cores, a folio another core touched first is
                // this core's cold miss but no fault.
                Some(e) if self.multi => {
                    m.scratch[e] == Some(None) && m.touched.insert(key(space, b.folio_shift(), pa))
                }
                Some(e) => m.scratch[e] == Some(None),
                None => m.touched.insert(key(space, b.folio_shift(), pa)),
            };
            let bucket = if self.sampled { bucket_of(unit) } else { 0 };
            let cell = bucket * CELLS + cat * BACKINGS + bi;
            m.last_cell = cell;
            let mut one = Weighted {
                refs: w,
                ..Weighted::default()
            };
            if hit_level > 0 {
                one.l1_misses = w;
            }
            if hit_level == self.levels {
                one.walks = w;
                if write {
                    one.dirty_walks = w;
                    m.open_walk = None;
                } else {
                    m.open_walk = Some((k4, cell, w, core));
                }
            } else if write {
                m.dirty(k4, self.multi);
            }
            if fault {
                // A 1 GB folio is seen whenever its page is referenced at all
                // (sampled.rs): its fault is counted once, not scaled.
                one.faults = if b.folio_shift() > SHIFT_2M { 1.0 } else { w };
            }
            if let Some(sim) = m.cores[core].sim.as_mut() {
                let h = sim.access(&slots[..self.levels]);
                if h > 0 {
                    one.sim_l1_misses = w;
                }
                if h == self.levels {
                    one.sim_walks = w;
                }
            }
            m.cells[cell].add(&one);
            if self.multi {
                m.core_totals[core].add(&one);
            }
        }
    }

    /// References fed.
    pub fn refs(&self) -> u64 {
        self.refs
    }

    /// Their weight: the references of the complete stream they stand for.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Splits the mappings into `n` analyzers of consecutive mappings (at least
    /// one each, fewer analyzers when there are fewer mappings). Every mapping's
    /// state is its own, so each part can be fed the same references on a thread
    /// of its own; [`Analyzer::join`] puts them back in order.
    pub fn split(self, n: usize) -> Vec<Analyzer> {
        let n = n.clamp(1, self.mappings.len().max(1));
        let per = self.mappings.len().div_ceil(n).max(1);
        let mut rest = self.mappings;
        let mut parts = Vec::with_capacity(n);
        while !rest.is_empty() {
            let tail = rest.split_off(per.min(rest.len()));
            parts.push(Analyzer {
                static_segments: self.static_segments.clone(),
                mappings: rest,
                levels: self.levels,
                refs: self.refs,
                weight: self.weight,
                last: self.last,
                sampled: self.sampled,
                geometry: self.geometry.clone(),
                advised: self.advised,
                multi: self.multi,
                core: self.core,
                core_weight: self.core_weight.clone(),
            });
            rest = tail;
        }
        if parts.is_empty() {
            parts.push(Analyzer {
                static_segments: self.static_segments,
                mappings: Vec::new(),
                levels: self.levels,
                refs: self.refs,
                weight: self.weight,
                last: self.last,
                sampled: self.sampled,
                geometry: self.geometry,
                advised: self.advised,
                multi: self.multi,
                core: self.core,
                core_weight: self.core_weight,
            });
        }
        parts
    }

    /// The parts of [`Analyzer::split`], fed the same references, as one analyzer.
    pub fn join(parts: Vec<Analyzer>) -> Analyzer {
        let mut it = parts.into_iter();
        let mut first = it.next().expect("split gives at least one part");
        for p in it {
            debug_assert_eq!(p.refs, first.refs, "parts fed different streams");
            first.mappings.extend(p.mappings);
        }
        first
    }

    pub fn finish(self) -> Vec<MappingResult> {
        let all = Backing::all();
        let cells = |w: &[Weighted], scale: f64| -> Vec<Cell> {
            w.iter()
                .enumerate()
                .filter(|(_, s)| s.refs > 0.0)
                .map(|(i, s)| Cell {
                    category: Category::ALL[i / BACKINGS],
                    backing: all[i % BACKINGS],
                    stats: s.counts(scale),
                })
                .collect()
        };
        self.mappings
            .into_iter()
            .map(|mut m| {
                let mut total = vec![Weighted::default(); CELLS];
                for b in m.cells.chunks(CELLS) {
                    for (t, x) in total.iter_mut().zip(b) {
                        t.add(x);
                    }
                }
                m.result.cells = cells(&total, 1.0);
                if m.core_totals.len() > 1 {
                    m.result.per_core = m.core_totals.iter().map(|w| w.counts(1.0)).collect();
                }
                if m.cells.len() > CELLS {
                    m.result.buckets = m
                        .cells
                        .chunks(CELLS)
                        .map(|b| cells(b, BUCKETS as f64))
                        .collect();
                }
                m.result
            })
            .collect()
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
    /// The same for heap-large on `hugetlb-1g`: peak 1 GB pages, peak 2 MB pages.
    #[serde(default)]
    pub heap_large_peak_pages_1g: (u64, u64),
    /// 1 GB pages and 2 MB pages static data takes on `static hugetlb-1g`
    /// (`Categorizer::static_pages_1g`).
    #[serde(default)]
    pub static_pages_1g: (u64, u64),
    /// Peak 2 MB pages of the heap-large objects of each site evaluated alone.
    #[serde(default)]
    pub site_peak_pages: Vec<(Site, u64)>,
    pub alloc_stats: PerCategory<AllocStats>,
    pub geometry: TlbGeometry,
    /// How the stream was sampled; `None` for a complete stream analysed whole
    /// (exact counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingSummary>,
    /// How the threads were placed on cores (per-core TLBs); `None`: one TLB
    /// for every reference (a single-threaded stream, or analyses before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<CoreSummary>,
    /// The program's other processes that ran alongside this one (MPI
    /// ranks); `None`: it ran alone, or the bundle does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alongside: Option<Alongside>,
}

/// Processes of one program that ran at once, each with page tables of its
/// own (MPI ranks; docs/model.md §4, "Processes side by side"). Each has its
/// core's TLBs, but the caches a walk reads are shared, so a walk costs what it
/// costs at their page tables together: the analysed process's page-table
/// working set is multiplied by `page_tables`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alongside {
    /// Processes that ran at once, the analysed one included (at most the
    /// CPUs the run could use).
    pub processes: u64,
    /// Their pages together over the analysed one's (at least 1).
    pub page_tables: f64,
}

/// The threads of a stream and the cores their references were given to
/// (docs/model.md §3, "Per-core TLBs").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreSummary {
    /// Threads seen in the stream.
    pub threads: u64,
    /// The CPUs the run could use (`cpus` CPUs: the bundle's affinity, or this
    /// machine's when the bundle has none); threads go round-robin over
    /// min(threads, cpus) cores in the order they first appear.
    pub cpus: u64,
    /// Where `cpus` came from, for people: `affinity 0-1`, `this machine's CPUs`.
    pub source: String,
    /// Each core's references (estimated for a sampled stream).
    pub refs: Vec<u64>,
    /// References over the busiest core's: how many cores the work kept busy
    /// at once if they all ran side by side.
    pub refs_concurrency: f64,
    /// CPU time over wall time of the native run (user + system over wall),
    /// when known: how many CPUs it really kept busy at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_cpus: Option<f64>,
    /// How many cores' savings overlap on the wall clock: `refs_concurrency`,
    /// at most `busy_cpus` (at least 1); every saving of the cores together
    /// is divided by it (docs/model.md §3, "Wall-clock time").
    pub concurrency: f64,
}

impl CoreSummary {
    /// The summary of `threads` threads over `cpus` CPUs whose cores ran
    /// `weights` references each.
    pub fn new(threads: u64, cpus: u64, source: String, weights: &[f64]) -> Self {
        let total: f64 = weights.iter().sum();
        let max = weights.iter().copied().fold(0.0f64, f64::max);
        let k = if max > 0.0 {
            (total / max).max(1.0)
        } else {
            1.0
        };
        CoreSummary {
            threads,
            cpus,
            source,
            refs: weights.iter().map(|w| w.round() as u64).collect(),
            refs_concurrency: k,
            busy_cpus: None,
            concurrency: k,
        }
    }

    /// The native run took `cpu_s` of CPU time (user + system) in `wall_s`:
    /// the cores overlap no more than the CPUs it kept busy (threads that
    /// waited on each other, serial phases, an oversubscribed machine where
    /// they took turns). Unknown times (0) change nothing.
    pub fn with_native_run(mut self, cpu_s: f64, wall_s: f64) -> Self {
        if cpu_s > 0.0 && wall_s > 0.0 && cpu_s.is_finite() && wall_s.is_finite() {
            let busy = cpu_s / wall_s;
            self.busy_cpus = Some(busy);
            self.concurrency = self.refs_concurrency.min(busy).max(1.0);
        }
        self
    }

    /// Cores the threads ran on.
    pub fn cores(&self) -> u64 {
        self.refs.len() as u64
    }

    /// "4 threads over 2 cores (affinity 0-1): per-core TLBs".
    pub fn describe(&self) -> String {
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        let how = if self.cores() > 1 {
            let busy = self.busy_cpus.map_or(String::new(), |b| {
                format!(", the native run kept {b:.2} CPUs busy")
            });
            format!(
                "per-core TLBs; their savings overlap {:.2}x (the references spread over {:.2} cores{busy})",
                self.concurrency, self.refs_concurrency
            )
        } else {
            "one TLB".into()
        };
        format!(
            "{} over {} ({}): {how}",
            plural(self.threads, "thread"),
            plural(self.cores(), "core"),
            self.source
        )
    }
}

fn one() -> f64 {
    1.0
}

/// What a sampled analysis estimated from (docs/model.md §3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingSummary {
    /// `spatial-rate` or `spatial-size` (the capture sampled), or `analysis`
    /// (a complete stream sampled by the analysis, `analyze --rate`).
    pub kind: String,
    pub seed: u64,
    pub modulus: u64,
    /// The threshold at the end of the stream (fixed-size: after its last fall).
    pub threshold: u64,
    /// The rate at the end, threshold / modulus.
    pub rate: f64,
    /// The realized rate of the sampled regions over `rate` (1: unknown or
    /// exactly nominal); the weights were 1 / (R × this).
    #[serde(default = "one")]
    pub realized: f64,
    /// References in the sample, which the counts were estimated from.
    pub refs_sampled: u64,
    /// Sampled 2 MB groups the analysis saw (at the end of the stream).
    pub groups: u64,
}

impl AnalysisResult {
    pub fn mapping(&self, name: &str) -> Option<&MappingResult> {
        self.mappings.iter().find(|m| m.name == name)
    }
    pub fn all_small(&self) -> &MappingResult {
        self.mappings
            .iter()
            .find(|m| m.mapping.is_all_small())
            .expect("all-small is always analysed")
    }
    /// What the page-table working set of a walk is multiplied by
    /// ([`Alongside::page_tables`]); 1 for a process that ran alone.
    pub fn page_table_factor(&self) -> f64 {
        self.alongside
            .as_ref()
            .map(|a| a.page_tables)
            .filter(|f| f.is_finite() && *f > 1.0)
            .unwrap_or(1.0)
    }

    /// How many cores ran at once on average ([`CoreSummary::concurrency`]);
    /// 1 with one TLB.
    pub fn concurrency(&self) -> f64 {
        self.cores.as_ref().map_or(1.0, |c| c.concurrency)
    }

    /// Categories with references.
    pub fn present(&self) -> Vec<Category> {
        let base = self.all_small();
        Category::ALL
            .iter()
            .copied()
            .filter(|&c| base.category_total(c).refs > 0)
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
    if input.objects.iter().any(|o| o.self_thp) {
        a = a.with_self_advice();
    }
    for &(id, addr) in input.refs {
        a.feed(&input.objects[id as usize], addr);
    }
    AnalysisResult {
        refs: a.refs(),
        mappings: a.finish(),
        heap_large_peak_pages: input.heap_large_peak_pages,
        heap_large_peak_pages_1g: (0, 0),
        static_pages_1g: (0, 0),
        site_peak_pages: vec![],
        alloc_stats: input.alloc_stats,
        geometry: input.geometry,
        sampling: None,
        cores: None,
        alongside: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::categorize::{AddressSpace, AllocEvent, AllocOp, AllocVia, Categorizer};
    use crate::tlb::{TlbArray, TlbLevel};
    use PageSize::*;

    fn geometry() -> TlbGeometry {
        TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m, P1g], 1024, 0)], None),
            ],
            source: "test".into(),
        }
    }

    /// `n` xorshift-random references into `[base, base + size)`, aligned down to
    /// `align` bytes, each with the object `cat` places there.
    pub(super) fn random_refs(
        cat: &mut Categorizer,
        base: u64,
        size: u64,
        n: usize,
        seed: u64,
        align: u64,
    ) -> Vec<(u32, u64)> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let a = base + (x % size) / align * align;
                (cat.classify(a).unwrap(), a)
            })
            .collect()
    }

    /// Every candidate of the test geometry over `refs`, with `cat`'s objects.
    fn analyze_all(cat: &Categorizer, refs: &[(u32, u64)]) -> AnalysisResult {
        analyze(AnalysisInput {
            geometry: geometry(),
            static_segments: vec![],
            objects: cat.objects(),
            refs,
            heap_large_peak_pages: cat.peak_owned_frames(),
            alloc_stats: cat.stats().clone(),
        })
    }

    /// The same walk over a buffer the program advised `MADV_HUGEPAGE` itself
    /// (numpy): its baseline is THP already, and planning heap-large gains no
    /// walks. A 3 MB advice over the first 4 MB of a 64 MB buffer marks nothing.
    #[test]
    fn a_buffer_the_program_advised_itself_is_on_thp_in_the_baseline() {
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let base = 0x7f00_0000_0000u64;
        let size = 64u64 << 20;
        let ev = |seq, op| AllocEvent { seq, op };
        cat.apply(&ev(
            1,
            AllocOp::Alloc {
                addr: base,
                size,
                via: AllocVia::Malloc,
                site: None,
            },
        ));
        let id = cat.classify(base).unwrap();
        cat.apply(&ev(
            2,
            AllocOp::Advise {
                addr: base,
                len: 3 << 20,
                huge: true,
            },
        ));
        assert!(!cat.object(id).self_thp, "a small part is not the object");
        cat.apply(&ev(
            3,
            AllocOp::Advise {
                addr: base,
                len: size,
                huge: true,
            },
        ));
        assert!(cat.object(id).self_thp);
        let refs = random_refs(&mut cat, base, size, 200_000, 12345, 1);
        let r = analyze_all(&cat, &refs);
        let small = r.all_small().total();
        let large = r.mapping("heap-large").unwrap().total();
        assert_eq!(small.walks, 32, "the program's own THP: cold misses only");
        assert_eq!(small.faults, 32);
        assert_eq!(small.walks, large.walks);
        assert_eq!(r.all_small().leaf_total(PageSize::P2m).refs, 200_000);
        // MADV_NOHUGEPAGE over part of it takes the advice back, and a moved
        // mapping keeps its advice.
        cat.apply(&ev(
            4,
            AllocOp::Advise {
                addr: base + (8 << 20),
                len: 4096,
                huge: false,
            },
        ));
        assert!(!cat.object(id).self_thp);
        cat.apply(&ev(
            5,
            AllocOp::Advise {
                addr: base,
                len: size,
                huge: true,
            },
        ));
        cat.apply(&ev(
            6,
            AllocOp::Mremap {
                old: base,
                addr: base + (1 << 30),
                len: size,
            },
        ));
        let moved = cat.classify(base + (1 << 30)).unwrap();
        assert_ne!(moved, id);
        assert!(cat.object(moved).self_thp);
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
        let refs = random_refs(&mut cat, base, size, 200_000, 12345, 1);
        let r = analyze_all(&cat, &refs);
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
        assert_eq!(m.cell(Category::HeapLarge, Backing::Thp2m).faults, 1);
        assert_eq!(m.cell(Category::HeapLarge, Backing::Base4k).faults, 256);
        assert_eq!(
            r.all_small()
                .cell(Category::HeapLarge, Backing::Base4k)
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
        let s = r.all_small().total();
        assert_eq!(s.refs, refs.len() as u64);
        assert_eq!(s.walks, h.misses(1024));
        assert_eq!(s.l1_misses, h.misses(64));
    }

    #[test]
    fn subsets_and_names() {
        let m = Mapping::all_subsets(&[Category::HeapLarge, Category::Stack, Category::Static]);
        let site = Site {
            module: 0,
            offset: 0x1a2b,
        };
        let c = Mapping::candidates(
            &[Category::HeapLarge, Category::Static],
            true,
            &[16],
            &[site],
            false,
        );
        let cn: Vec<String> = c.iter().map(|m| m.name()).collect();
        assert_eq!(
            cn,
            vec![
                "all-small",
                "static",
                "heap-large",
                "all-large",
                "static:1g",
                "heap-large:1g",
                "all-large:1g",
                "static:64k",
                "heap-large:64k",
                "all-large:64k",
                "site 0+0x1a2b"
            ]
        );
        // Every category present on the mTHP size, all together on it: one
        // THP size per mapping (the controls are system-wide).
        let all64 = &c[c.len() - 2];
        assert!(all64.all_present && all64.is_base());
        assert_eq!(
            all64.huge,
            vec![
                (Category::Static, Backing::Thp(16)),
                (Category::HeapLarge, Backing::Thp(16))
            ]
        );
        assert_eq!(all64.self_advice(), Backing::Thp(16));
        assert_eq!(c[3].self_advice(), Backing::Thp2m);
        // Sizes outside 16 KB .. 1 MB are no mTHP candidates.
        let one = Mapping::candidates(&[Category::HeapSmall], false, &[12, 21, 20], &[], false);
        let on: Vec<String> = one.iter().map(|m| m.name()).collect();
        assert_eq!(on, vec!["all-small", "heap-small", "heap-small:1m"]);
        assert!(!c.last().unwrap().is_base() && !c.last().unwrap().is_all_small());
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

#[cfg(test)]
mod page_size_tests {
    use super::*;
    use crate::categorize::{AddressSpace, AllocEvent, AllocOp, AllocVia, Categorizer};
    use crate::tlb::{TlbArray, TlbLevel};
    use PageSize::*;

    /// One heap-large block of `size` bytes, `n` uniformly random references.
    fn random_block(size: u64, n: usize) -> (Categorizer, Vec<(u32, u64)>) {
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let base = 0x7f00_0000_0000u64;
        cat.apply(&AllocEvent {
            seq: 1,
            op: AllocOp::Alloc {
                addr: base,
                size,
                via: AllocVia::Malloc,
                site: None,
            },
        });
        let refs = super::tests::random_refs(&mut cat, base, size, n, 777, 64);
        (cat, refs)
    }

    fn run(
        g: &TlbGeometry,
        mappings: Vec<Mapping>,
        simulate: bool,
        size: u64,
    ) -> Vec<MappingResult> {
        let (cat, refs) = random_block(size, 200_000);
        let mut a = Analyzer::with_simulation(g.clone(), vec![], mappings, simulate);
        for &(id, addr) in &refs {
            a.feed(cat.object(id), addr);
        }
        a.finish()
    }

    fn single(b: Backing) -> Mapping {
        Mapping {
            huge: vec![(Category::HeapLarge, b)],
            all_present: false,
            sites: vec![],
        }
    }

    fn nothing_huge() -> Mapping {
        Mapping {
            huge: vec![],
            all_present: false,
            sites: vec![],
        }
    }

    fn zen_like(coalesce: Option<u64>) -> TlbGeometry {
        TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], coalesce),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 2048, 8)], coalesce),
            ],
            source: "test".into(),
        }
    }

    /// 1 GB + 6 MB block on hugetlb-1g: one 1 GB page, three 2 MB pages; the L2
    /// holds the 1 GB page as 2 MB entries, so it still never walks here.
    #[test]
    fn gigantic_layout_and_smashing() {
        let size = (1 << 30) + (6 << 20) + 100;
        let r = run(
            &zen_like(None),
            vec![single(Backing::Hugetlb1g)],
            true,
            size,
        );
        let m = &r[0];
        let g = m.cell(Category::HeapLarge, Backing::Hugetlb1g);
        let two = m.cell(Category::HeapLarge, Backing::Hugetlb2m);
        let tail = m.cell(Category::HeapLarge, Backing::Base4k);
        assert_eq!(g.faults, 1);
        assert_eq!(two.faults, 3);
        assert!(tail.faults <= 1);
        // 512 + 3 2 MB entries fit the 2048-entry L2: only cold walks.
        assert_eq!(g.walks + two.walks, 4);
        assert_eq!(m.name, "heap-large:1g");
    }

    /// mTHP folios cut faults; they extend TLB reach only where the level coalesces.
    #[test]
    fn mthp_reach_needs_coalescing() {
        // 16 K pages of 4 KB overflow the 2048-entry L2; 1 K entries of 64 KB fit.
        let size = 64 << 20;
        let ms = || vec![nothing_huge(), single(Backing::Thp(16))];
        let plain = run(&zen_like(None), ms(), false, size);
        let small = plain[0].total();
        let m64 = plain[1].total();
        assert_eq!(
            m64.walks, small.walks,
            "no coalescing: the same 4 KB entries"
        );
        assert!(
            m64.faults * 8 < small.faults,
            "{} vs {}",
            m64.faults,
            small.faults
        );
        let co = run(&zen_like(Some(64 << 10)), ms(), false, size);
        assert!(
            co[1].total().walks * 2 < co[0].total().walks,
            "64 KB entries: {} walks vs {}",
            co[1].total().walks,
            co[0].total().walks
        );
    }

    /// The simulation of fully associative arrays is the reuse-distance rule;
    /// set associativity only adds conflict misses.
    #[test]
    fn simulation_agrees_with_the_approximation_on_random_pages() {
        let fa = TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m, P1g], 2048, 0)], None),
            ],
            source: "fa".into(),
        };
        let size = 16 << 20;
        let all_small = || vec![nothing_huge()];
        let r = run(&fa, all_small(), true, size);
        let t = r[0].total();
        assert_eq!(t.l1_misses, t.sim_l1_misses);
        // The simulated L2 is not refreshed by L1 hits, the independent stack is:
        // the only difference, and a small one here.
        let diff = t.walks.abs_diff(t.sim_walks) as f64;
        assert!(
            diff <= t.walks as f64 * 1e-3,
            "{} vs {}",
            t.walks,
            t.sim_walks
        );
        let mut sa = fa.clone();
        sa.levels[1].arrays[0].ways = 4;
        let r = run(&sa, all_small(), true, size);
        let t = r[0].total();
        // Uniformly random pages spread evenly over the sets: associativity changes
        // little (tlb.rs tests the conflict case).
        let diff = t.walks.abs_diff(t.sim_walks) as f64;
        assert!(
            diff <= t.walks as f64 * 0.01,
            "{} vs {}",
            t.walks,
            t.sim_walks
        );
    }
}

#[cfg(test)]
mod site_tests {
    use super::*;
    use crate::categorize::{AddressSpace, AllocEvent, AllocOp, AllocVia, Categorizer};
    use crate::cost::CostModel;
    use crate::rank::predictions;
    use crate::stream::top_sites;
    use crate::tlb::{TlbArray, TlbLevel};
    use PageSize::*;

    /// Two heap-large blocks from two sites: a hot one walked at random, a cold one
    /// barely touched. The hot site's own mapping saves more than heap-large as a
    /// whole, with half the pool pages.
    #[test]
    fn per_site_mapping_finds_the_hot_site() {
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let hot = Site {
            module: 0,
            offset: 0x100,
        };
        let cold = Site {
            module: 0,
            offset: 0x200,
        };
        let (a, b) = (0x7f00_0000_0000u64, 0x7e00_0000_0000u64);
        let size = 64u64 << 20;
        for (seq, addr, site) in [(1, a, hot), (2, b, cold)] {
            cat.apply(&AllocEvent {
                seq,
                op: AllocOp::Alloc {
                    addr,
                    size,
                    via: AllocVia::Malloc,
                    site: Some(site),
                },
            });
        }
        let sites = top_sites(&cat);
        assert_eq!(sites.len(), 2);
        // Tracking starts with the second pass, as in `analyze_stream`.
        let mut cat2 = Categorizer::new(AddressSpace::default(), 128 * 1024);
        cat2.track_sites(&sites);
        for (seq, addr, site) in [(1, a, hot), (2, b, cold)] {
            cat2.apply(&AllocEvent {
                seq,
                op: AllocOp::Alloc {
                    addr,
                    size,
                    via: AllocVia::Malloc,
                    site: Some(site),
                },
            });
        }
        let g = TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 1024, 0)], None),
            ],
            source: "t".into(),
        };
        let mut an = Analyzer::new(
            g.clone(),
            vec![],
            Mapping::candidates(&[Category::HeapLarge], false, &[], &sites, false),
        );
        let mut x = 5u64;
        // The cold block: one line per 2 MB, where a huge page costs more to fault
        // than the 4 KB page it replaces.
        for p in 0..size / (2 << 20) {
            let addr = b + p * (2 << 20);
            let id = cat2.classify(addr).unwrap();
            an.feed(cat2.object(id), addr);
        }
        for _ in 0..300_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = a + (x % size) / 64 * 64;
            let id = cat2.classify(addr).unwrap();
            an.feed(cat2.object(id), addr);
        }
        let result = AnalysisResult {
            refs: an.refs(),
            mappings: an.finish(),
            heap_large_peak_pages: cat2.peak_owned_frames(),
            heap_large_peak_pages_1g: (0, 0),
            static_pages_1g: (0, 0),
            site_peak_pages: sites
                .iter()
                .map(|&s| (s, cat2.peak_site_frames(s)))
                .collect(),
            alloc_stats: Default::default(),
            geometry: g,
            sampling: None,
            cores: None,
            alongside: None,
        };
        let preds = predictions(&result, &CostModel::default(), 1.0);
        let find = |f: &dyn Fn(&crate::rank::Prediction) -> bool| {
            preds.iter().find(|p| f(p)).unwrap().clone()
        };
        let whole = find(&|p| p.assignments == vec![(Category::HeapLarge, Backing::Hugetlb2m)]);
        let hot_only = find(&|p| {
            p.sites.len() == 1 && p.sites[0].site == hot && p.sites[0].backing == Backing::Hugetlb2m
        });
        let cold_only = find(&|p| p.sites.len() == 1 && p.sites[0].site == cold);
        assert_eq!(whole.hugetlb_pages, 64);
        assert_eq!(hot_only.hugetlb_pages, 32);
        assert!(
            hot_only.saving_ns > 0.8 * whole.saving_ns,
            "{} vs {}",
            hot_only.saving_ns,
            whole.saving_ns
        );
        assert!(cold_only.saving_ns < 0.2 * whole.saving_ns);
        assert!(
            hot_only.label.starts_with("site 0+0x100:hugetlb"),
            "{}",
            hot_only.label
        );
    }

    /// `static hugetlb-1g`: the whole gigabytes of the link-time 2 MB interior
    /// on 1 GB pages (one fault, one walk for 300 frames referenced), the rest
    /// on 2 MB pages; the pool needs counted; candidates name it `static:1g`.
    #[test]
    fn static_data_on_the_gigantic_layout() {
        // .bss from link-time 0x3000 to 2 GiB + 7 MiB + 4 KB: 2 MB interior
        // [0x200000, 0x80600000), 1 GB interior [0x40000000, 0x80000000).
        let bias = 0x5555_0000_0000u64;
        let seg = StaticSegment {
            module: 0,
            start: bias + 0x1000,
            end: bias + (2 << 30) + (7 << 20) + 0x1000,
            bias,
            anon_start_vaddr: 0x3000,
            main_program: true,
        };
        assert_eq!(seg.gigantic_interior_vaddr(), (0x4000_0000, 0x8000_0000));
        // One 1 GB page; 1 GB + 4 MB of 2 MB pages around it.
        assert_eq!(seg.pages_1g(), (1, 514));
        let lib = StaticSegment {
            main_program: false,
            ..seg.clone()
        };
        assert_eq!(
            lib.pages_1g(),
            (0, 0),
            "the library places the main program's only"
        );
        let small = StaticSegment {
            end: bias + (1 << 30) + 0x1000,
            ..seg.clone()
        };
        assert_eq!(small.gigantic_interior_vaddr(), (0, 0));
        assert_eq!(small.pages_1g(), (0, 511));
        let space = AddressSpace {
            static_segments: vec![seg.clone()],
            ..AddressSpace::default()
        };
        let mut cat = Categorizer::new(space, 128 * 1024);
        assert_eq!(cat.static_pages_1g(), (1, 514));
        let at = |cat: &mut Categorizer, vaddr: u64| {
            let id = cat.classify(bias + vaddr).unwrap();
            let obj = cat.object(id).clone();
            resolve(
                &obj,
                Some(&seg),
                bias + vaddr,
                Some(Backing::Hugetlb1g),
                None,
            )
            .0
        };
        assert_eq!(at(&mut cat, 0x100000), Backing::Base4k, "below 2 MB");
        assert_eq!(at(&mut cat, 0x200000), Backing::Hugetlb2m);
        assert_eq!(at(&mut cat, 0x3fff_f000), Backing::Hugetlb2m);
        assert_eq!(at(&mut cat, 0x4000_0000), Backing::Hugetlb1g);
        assert_eq!(at(&mut cat, 0x7fff_f000), Backing::Hugetlb1g);
        assert_eq!(at(&mut cat, 0x8000_0000), Backing::Hugetlb2m);
        assert_eq!(at(&mut cat, 0x8060_0000), Backing::Base4k, "the tail");

        let names: Vec<String> = Mapping::candidates(&[Category::Static], true, &[], &[], false)
            .iter()
            .map(Mapping::name)
            .collect();
        assert_eq!(names, vec!["all-small", "static", "static:1g"]);
        let none: Vec<String> = Mapping::candidates(&[Category::Static], false, &[], &[], false)
            .iter()
            .map(Mapping::name)
            .collect();
        assert_eq!(none, vec!["all-small", "static"]);

        // 300 distinct 2 MB frames of the 1 GB part, twice, and 3 frames of
        // the 2 MB part: one fault and one walk for the gigabyte.
        let g = TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m, P1g], 1024, 0)], None),
            ],
            source: "t".into(),
        };
        let one = |b| Mapping {
            huge: vec![(Category::Static, b)],
            all_present: true,
            sites: vec![],
        };
        let mut a = Analyzer::with_simulation(
            g,
            vec![seg.clone()],
            vec![one(Backing::Hugetlb1g), one(Backing::Thp2m)],
            false,
        );
        let mut refs: Vec<u64> = Vec::new();
        for _ in 0..2 {
            refs.extend((0..300u64).map(|i| 0x4000_0000 + i * SIZE_2M + 0x40));
        }
        refs.extend((0..3u64).map(|i| 0x8000_0000 + i * SIZE_2M));
        for &v in &refs {
            let id = cat.classify(bias + v).unwrap();
            let obj = cat.object(id).clone();
            a.feed(&obj, bias + v);
        }
        let r = a.finish();
        assert_eq!(r[0].name, "static:1g");
        let giga = r[0].cell(Category::Static, Backing::Hugetlb1g);
        let two = r[0].cell(Category::Static, Backing::Hugetlb2m);
        assert_eq!((giga.refs, giga.faults, giga.walks), (600, 1, 1));
        assert_eq!((two.refs, two.faults, two.walks), (3, 3, 3));
        let thp = r[1].cell(Category::Static, Backing::Thp2m);
        assert_eq!((thp.faults, thp.walks), (303, 303));
    }

    /// Small objects: heap-small on 2 MB pages comes as THP (glibc's heap or the
    /// arena on THP) and as the arena on pool pages, one page per 2 MB frame the
    /// objects touch.
    #[test]
    fn static_and_heap_small_resolve_to_size_aligned_mthp_folios() {
        // .bss from link-time 0x3000 to 0x501000 (5 MB + 4 KB): 2 MB interior
        // [0x200000, 0x400000), 64 KB interior [0x10000, 0x500000).
        let bias = 0x5555_0020_0000u64;
        let seg = StaticSegment {
            module: 0,
            start: bias + 0x1000,
            end: bias + 0x1000 + (5 << 20),
            bias,
            anon_start_vaddr: 0x3000,
            main_program: true,
        };
        assert_eq!(seg.interior_vaddr(64 << 10), (0x10000, 0x500000));
        let space = AddressSpace {
            static_segments: vec![seg.clone()],
            ..AddressSpace::default()
        };
        let mut cat = Categorizer::new(space, 128 * 1024);
        let at = |cat: &mut Categorizer, vaddr: u64, b: Backing| {
            let id = cat.classify(bias + vaddr).unwrap();
            let obj = cat.object(id).clone();
            assert_eq!(obj.category, Category::Static);
            resolve(&obj, Some(&seg), bias + vaddr, Some(b), None).0
        };
        let k64 = Backing::Thp(16);
        assert_eq!(at(&mut cat, 0x8000, k64), Backing::Base4k, "below 64 KB");
        assert_eq!(at(&mut cat, 0x10000, k64), k64);
        assert_eq!(at(&mut cat, 0x10000, Backing::Thp2m), Backing::Base4k);
        assert_eq!(at(&mut cat, 0x4f0000, k64), k64);
        assert_eq!(at(&mut cat, 0x4f0000, Backing::Thp2m), Backing::Base4k);
        assert_eq!(at(&mut cat, 0x200000, Backing::Thp2m), Backing::Thp2m);
        assert_eq!(at(&mut cat, 0x500800, k64), Backing::Base4k, "the tail");

        // Heap-small on 64 KB frames: one fault per 64 KB frame touched, no
        // reach gained without coalescing; the program's own advice under the
        // mapping gets the mapping's size (its run turns PMD THP off).
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let base = 0x5555_0000_0000u64;
        for i in 0..4096u64 {
            cat.apply(&AllocEvent {
                seq: i + 1,
                op: AllocOp::Alloc {
                    addr: base + i * 1024,
                    size: 1000,
                    via: AllocVia::Malloc,
                    site: None,
                },
            });
        }
        let ms = Mapping::candidates(&[Category::HeapSmall], false, &[16], &[], false);
        assert_eq!(ms[2].name(), "heap-small:64k");
        let g = TlbGeometry {
            levels: vec![TlbLevel::new(
                "L1",
                vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)],
                None,
            )],
            source: "t".into(),
        };
        let mut an = Analyzer::new(g, vec![], ms);
        let mut frames = FxHashSet::default();
        let mut x = 99u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = base + (x % 4096) * 1024;
            frames.insert(addr >> 16);
            let id = cat.classify(addr).unwrap();
            an.feed(cat.object(id), addr);
        }
        let r = an.finish();
        let c = r[2].cell(Category::HeapSmall, k64);
        assert_eq!(c.faults, frames.len() as u64);
        assert_eq!(c.refs, 50_000);
        assert_eq!(r[2].total().walks, r[0].total().walks);
        assert_eq!(r[1].cell(Category::HeapSmall, Backing::Thp2m).faults, 2);
    }

    #[test]
    fn heap_small_comes_on_thp_and_on_pool_pages() {
        let mut cat = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let base = 0x5555_0000_0000u64;
        let n = 40_000u64; // 40 000 x 272 B: 10.4 MB, 6 frames of 2 MB
        for i in 0..n {
            cat.apply(&AllocEvent {
                seq: i + 1,
                op: AllocOp::Alloc {
                    addr: base + i * 272,
                    size: 256,
                    via: AllocVia::Malloc,
                    site: None,
                },
            });
        }
        let g = TlbGeometry {
            levels: vec![TlbLevel::new(
                "L1",
                vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)],
                None,
            )],
            source: "t".into(),
        };
        let mut an = Analyzer::new(
            g.clone(),
            vec![],
            Mapping::candidates(&[Category::HeapSmall], false, &[], &[], false),
        );
        let mut x = 7u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = base + (x % n) * 272;
            let id = cat.classify(addr).unwrap();
            an.feed(cat.object(id), addr);
        }
        let result = AnalysisResult {
            refs: an.refs(),
            mappings: an.finish(),
            heap_large_peak_pages: 0,
            heap_large_peak_pages_1g: (0, 0),
            static_pages_1g: (0, 0),
            site_peak_pages: vec![],
            alloc_stats: cat.stats().clone(),
            geometry: g,
            sampling: None,
            cores: None,
            alongside: None,
        };
        let preds = predictions(&result, &CostModel::default(), 1.0);
        let get = |b: Backing| {
            preds
                .iter()
                .find(|p| p.assignments == vec![(Category::HeapSmall, b)])
                .unwrap_or_else(|| panic!("no heap-small {b:?}: {preds:?}"))
                .clone()
        };
        let (thp, pool) = (get(Backing::Thp2m), get(Backing::Hugetlb2m));
        assert_eq!(pool.label, "heap-small:hugetlb");
        assert_eq!((thp.hugetlb_pages, pool.hugetlb_pages), (0, 6));
        assert!(thp.thp_pages > 0 && pool.thp_pages == 0);
        // The same references on the same page size: the same TLB saving; only
        // the fault costs differ.
        assert!(pool.saving_ns > 0.0 && thp.saving_ns > 0.0);
        let faults = CostModel::default();
        let diff = (faults.fault(Backing::Thp2m) - faults.fault(Backing::Hugetlb2m)) * 6.0;
        assert!(
            ((pool.saving_ns - thp.saving_ns) - diff).abs() < 1.0,
            "{} {} {diff}",
            pool.saving_ns,
            thp.saving_ns
        );
    }
}
