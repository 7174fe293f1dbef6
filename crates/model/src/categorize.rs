//! Categorization (seed 001 §3.2, first step): map every referenced address to the
//! object live at that moment, and the object to a data category.
//!
//! The categorizer is driven in program order: allocation events are applied as
//! their markers appear in the reference stream, and references are classified
//! against the objects live at that point.

use crate::category::{Category, PerCategory};
use crate::page::{align_down, align_up, SIZE_1G, SIZE_2M};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An allocation site: the caller of an allocation function, as module + offset
/// (stable across ASLR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Site {
    pub module: u32,
    pub offset: u64,
}

/// What produced a dynamic object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocVia {
    Malloc,
    /// An anonymous private mapping the runtime library cannot back (fixed,
    /// PROT_NONE reservation, not read-write, ...): `other`. A runtime that
    /// advises its own memory (the JVM's heap) makes such mappings.
    Mmap,
    /// An anonymous private read-write mapping of the program's own
    /// (`Record::is_backable_mapping`): heap-large from the threshold on, like a
    /// malloc'd block, and backed by the runtime library at mmap time with the
    /// same head + tail layout (docs/model.md §1).
    MmapAnon,
    /// A file-backed or shared mapping: `other`, and never part of the JVM's
    /// heap (`-XX:+UseTransparentHugePages` advises only the memory the JVM
    /// mapped anonymously for itself; a memory-mapped index stays as it was).
    MmapFile,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AllocOp {
    Alloc {
        addr: u64,
        size: u64,
        via: AllocVia,
        site: Option<Site>,
    },
    Free {
        addr: u64,
    },
    Realloc {
        old: u64,
        addr: u64,
        size: u64,
        site: Option<Site>,
    },
    Munmap {
        addr: u64,
        len: u64,
    },
    Mremap {
        old: u64,
        addr: u64,
        len: u64,
    },
    /// A successful `madvise(MADV_HUGEPAGE)` (`huge`) or `MADV_NOHUGEPAGE` of
    /// the program's own: the objects it covers get (or lose) THP at fault time
    /// without hugetune, so their "4 KB" baseline is THP (`ObjectInfo::self_thp`).
    Advise {
        addr: u64,
        len: u64,
        huge: bool,
    },
}

/// One allocation event with its global sequence number (program order).
#[derive(Debug, Clone, PartialEq)]
pub struct AllocEvent {
    pub seq: u64,
    pub op: AllocOp,
}

/// A writable loaded segment (.data + .bss) of a module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticSegment {
    pub module: u32,
    /// Runtime address range of the segment in the profiled process.
    pub start: u64,
    pub end: u64,
    /// Load bias: link-time address = runtime address - bias.
    pub bias: u64,
    /// Link-time address where the anonymous (.bss beyond the file) part starts.
    pub anon_start_vaddr: u64,
    /// Whether the module is the main program (the runtime library remaps only its .bss).
    pub main_program: bool,
}

impl StaticSegment {
    /// The 2 MB-aligned interior of the anonymous part, in link-time addresses: what
    /// the runtime library advises for THP. Empty when smaller than one huge page.
    pub fn huge_interior_vaddr(&self) -> (u64, u64) {
        self.interior_vaddr(SIZE_2M)
    }

    /// The `static hugetlb-1g` layout of the segment (link-time addresses,
    /// like [`Self::huge_interior_vaddr`]): the 1 GB-aligned part of the 2 MB
    /// interior, empty when it spans no whole gigabyte; the rest of the 2 MB
    /// interior goes on 2 MB pages.
    pub fn gigantic_interior_vaddr(&self) -> (u64, u64) {
        let (lo, hi) = self.huge_interior_vaddr();
        let (glo, ghi) = (align_up(lo, SIZE_1G), align_down(hi, SIZE_1G));
        if ghi > glo {
            (glo, ghi)
        } else {
            (0, 0)
        }
    }

    /// 1 GB pages and 2 MB pages the runtime library holds for the segment
    /// under `static hugetlb-1g` (the main program's only: the library
    /// places only those from a profile's plan).
    pub fn pages_1g(&self) -> (u64, u64) {
        if !self.main_program {
            return (0, 0);
        }
        let (lo, hi) = self.huge_interior_vaddr();
        let (glo, ghi) = self.gigantic_interior_vaddr();
        let g = (ghi - glo) / SIZE_1G;
        (g, ((hi - lo) - (ghi - glo)) / SIZE_2M)
    }

    /// The `page`-aligned interior of the anonymous part (link-time addresses):
    /// what the runtime library places on folios of `page` bytes (`static
    /// thp-64k` advises the 64 KB-aligned interior). Empty when smaller than one.
    pub fn interior_vaddr(&self, page: u64) -> (u64, u64) {
        let lo = align_up(self.anon_start_vaddr, page);
        let hi = align_down(self.end - self.bias, page);
        if hi > lo {
            (lo, hi)
        } else {
            (0, 0)
        }
    }
}

/// Address ranges known from the process's maps and the runtime library's log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AddressSpace {
    pub static_segments: Vec<StaticSegment>,
    /// `[heap]` (brk) ranges: allocator memory outside live objects is heap-small.
    pub heap_ranges: Vec<(u64, u64)>,
    pub stack_ranges: Vec<(u64, u64)>,
    /// Memory of the measuring tools themselves (runtime library buffers, markers).
    pub excluded_ranges: Vec<(u64, u64)>,
}

/// What the model knows about one object (fixed pseudo-objects included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectInfo {
    pub id: u32,
    pub category: Category,
    pub start: u64,
    pub len: u64,
    pub via: Option<AllocVia>,
    pub site: Option<Site>,
    pub alloc_seq: u64,
    pub free_seq: Option<u64>,
    /// Start of this object in the runtime library's own placement, a synthetic
    /// address space where every owned (heap-large) object gets a fresh, 1 GB-aligned
    /// range of its own, as the library maps each owned block separately.
    pub virt_base: u64,
    /// Index into `AddressSpace::static_segments` for static pseudo-objects.
    pub segment: Option<u32>,
    /// The program itself advised `MADV_HUGEPAGE` over most of this object's
    /// 2 MB-aligned interior (numpy does for its buffers of 4 MiB and more): its
    /// interior is on THP in every mapping that does not plan its category.
    #[serde(default)]
    pub self_thp: bool,
}

impl ObjectInfo {
    /// Huge pages the runtime library maps for this object. Its default layout
    /// (head+tail, docs/formats.md §3) puts floor(size / 2 MB) huge pages first and
    /// the rest on 4 KB pages: no partial huge page is zeroed, none is wasted.
    pub fn frames(&self) -> u64 {
        head_frames(self.len)
    }
    /// Bytes of the object on huge pages (its head).
    pub fn head_len(&self) -> u64 {
        self.frames() * SIZE_2M
    }
}

/// Huge pages of an owned block of `len` bytes under the head+tail layout.
pub fn head_frames(len: u64) -> u64 {
    len / SIZE_2M
}

/// Pages of an owned `hugetlb-1g` block under the head+tail layout: whole 1 GB
/// pages, then whole 2 MB pages of the rest (docs/formats.md §3).
pub fn head_pages_1g(len: u64) -> (u64, u64) {
    (len / SIZE_1G, (len % SIZE_1G) / SIZE_2M)
}

pub const OBJ_OTHER: u32 = 0;
pub const OBJ_STACK: u32 = 1;
pub const OBJ_HEAP_META: u32 = 2;

/// Per-category allocation statistics of a profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocStats {
    pub allocations: u64,
    pub requested_bytes: u64,
    pub peak_live_bytes: u64,
    live_bytes: u64,
}

pub struct Categorizer {
    threshold: u64,
    space: AddressSpace,
    objects: Vec<ObjectInfo>,
    live: BTreeMap<u64, u32>,
    next_virt: u64,
    owned_frames: u64,
    peak_owned_frames: u64,
    /// Live (1 GB, 2 MB) pages of the `hugetlb-1g` layout, and their peaks.
    owned_1g: (u64, u64),
    peak_owned_1g: (u64, u64),
    /// Allocation sites whose heap-large objects are counted apart: (site, live
    /// 2 MB pages, peak), for per-site mappings.
    tracked_sites: Vec<(Site, u64, u64)>,
    stats: PerCategory<AllocStats>,
    first_static: u32,
    /// Ranges `[lo, hi)` and what `classify` answered for an address in each,
    /// the latest first: an object's or a segment's range, or a gap holding
    /// neither (and no range boundary of `space`). An entry goes when its
    /// object dies or an object is born in it. Several, because a program's
    /// references alternate between its stack, its heap and its static data
    /// (a JVM's interpreter at every bytecode): one entry would be replaced
    /// at nearly every reference.
    cache: [(u64, u64, u32); CACHED],
}

/// Ranges `Categorizer::classify` keeps.
const CACHED: usize = 4;
const NO_RANGE: (u64, u64, u32) = (0, 0, OBJ_OTHER);

fn in_ranges(ranges: &[(u64, u64)], addr: u64) -> bool {
    ranges.iter().any(|&(lo, hi)| addr >= lo && addr < hi)
}

/// Narrows the gap `[lo, hi)` around `addr` so that `[a, b)` either holds
/// all of it or none of it.
fn clip(lo: &mut u64, hi: &mut u64, addr: u64, a: u64, b: u64) {
    if b <= addr {
        *lo = (*lo).max(b);
    } else if a > addr {
        *hi = (*hi).min(a);
    } else {
        *lo = (*lo).max(a);
        *hi = (*hi).min(b);
    }
}

impl Categorizer {
    /// `threshold`: malloc-family allocations of at least this many bytes are
    /// heap-large (glibc's default mmap threshold is 128 KiB).
    pub fn new(space: AddressSpace, threshold: u64) -> Self {
        let fixed = |id, category| ObjectInfo {
            id,
            category,
            start: 0,
            len: 0,
            via: None,
            site: None,
            alloc_seq: 0,
            free_seq: None,
            virt_base: 0,
            segment: None,
            self_thp: false,
        };
        let mut objects = vec![
            fixed(OBJ_OTHER, Category::Other),
            fixed(OBJ_STACK, Category::Stack),
            fixed(OBJ_HEAP_META, Category::HeapSmall),
        ];
        let first_static = objects.len() as u32;
        for (i, seg) in space.static_segments.iter().enumerate() {
            let id = objects.len() as u32;
            let mut o = fixed(id, Category::Static);
            o.start = seg.start;
            o.len = seg.end - seg.start;
            o.segment = Some(i as u32);
            objects.push(o);
        }
        Categorizer {
            threshold,
            space,
            objects,
            live: BTreeMap::new(),
            next_virt: 0,
            owned_frames: 0,
            peak_owned_frames: 0,
            owned_1g: (0, 0),
            peak_owned_1g: (0, 0),
            tracked_sites: Vec::new(),
            stats: Default::default(),
            first_static,
            cache: [NO_RANGE; CACHED],
        }
    }

    pub fn objects(&self) -> &[ObjectInfo] {
        &self.objects
    }
    pub fn object(&self, id: u32) -> &ObjectInfo {
        &self.objects[id as usize]
    }
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }
    pub fn stats(&self) -> &PerCategory<AllocStats> {
        &self.stats
    }
    /// Peak number of 2 MB pages the runtime library would hold for heap-large
    /// objects at once (its placement: whole pages per object).
    pub fn peak_owned_frames(&self) -> u64 {
        self.peak_owned_frames
    }
    /// Counts the heap-large pages of these sites apart from now on.
    pub fn track_sites(&mut self, sites: &[Site]) {
        self.tracked_sites = sites.iter().map(|&s| (s, 0, 0)).collect();
    }
    /// Peak 2 MB pages the library would hold for heap-large objects of `site`
    /// (tracked sites only).
    pub fn peak_site_frames(&self, site: Site) -> u64 {
        self.tracked_sites
            .iter()
            .find(|t| t.0 == site)
            .map_or(0, |t| t.2)
    }
    /// Heap-large bytes allocated per site, largest first.
    pub fn heap_large_sites(&self) -> Vec<(Site, u64)> {
        let mut acc: Vec<(Site, u64)> = Vec::new();
        for o in &self.objects {
            if let (Category::HeapLarge, Some(s)) = (o.category, o.site) {
                match acc.iter_mut().find(|(x, _)| *x == s) {
                    Some(e) => e.1 += o.len,
                    None => acc.push((s, o.len)),
                }
            }
        }
        acc.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.offset.cmp(&b.0.offset)));
        acc
    }
    /// Peak 1 GB pages, and peak 2 MB pages, the runtime library would hold for
    /// heap-large objects planned on `hugetlb-1g` (each peak taken on its own).
    pub fn peak_owned_pages_1g(&self) -> (u64, u64) {
        self.peak_owned_1g
    }

    /// 1 GB and 2 MB pages static data takes on `static hugetlb-1g`
    /// ([`StaticSegment::pages_1g`], every segment).
    pub fn static_pages_1g(&self) -> (u64, u64) {
        self.space
            .static_segments
            .iter()
            .map(StaticSegment::pages_1g)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    fn category_of(&self, via: AllocVia, size: u64) -> Category {
        match via {
            AllocVia::Mmap | AllocVia::MmapFile => Category::Other,
            AllocVia::Malloc | AllocVia::MmapAnon if size >= self.threshold => Category::HeapLarge,
            AllocVia::Malloc => Category::HeapSmall,
            // A small mapping of the program's own holds no malloc'd objects.
            AllocVia::MmapAnon => Category::Other,
        }
    }

    fn birth(&mut self, seq: u64, addr: u64, size: u64, via: AllocVia, site: Option<Site>) {
        if addr == 0 || addr == u64::MAX || size == 0 {
            return;
        }
        // A new object at an address still thought live means we missed its free
        // (e.g. it was freed through a path we do not see): retire the old one.
        self.kill_range(seq, addr, addr.saturating_add(size));
        let category = self.category_of(via, size);
        let id = self.objects.len() as u32;
        let virt_base = if category == Category::HeapLarge {
            let b = self.next_virt;
            self.next_virt = self.next_virt.saturating_add(align_up(size, SIZE_1G));
            self.owned_frames += head_frames(size);
            self.peak_owned_frames = self.peak_owned_frames.max(self.owned_frames);
            let (g, m) = head_pages_1g(size);
            self.owned_1g.0 += g;
            self.owned_1g.1 += m;
            self.peak_owned_1g.0 = self.peak_owned_1g.0.max(self.owned_1g.0);
            self.peak_owned_1g.1 = self.peak_owned_1g.1.max(self.owned_1g.1);
            if let Some(t) = self.tracked_sites.iter_mut().find(|t| Some(t.0) == site) {
                t.1 += head_frames(size);
                t.2 = t.2.max(t.1);
            }
            b
        } else {
            0
        };
        self.objects.push(ObjectInfo {
            id,
            category,
            start: addr,
            len: size,
            via: Some(via),
            site,
            alloc_seq: seq,
            free_seq: None,
            virt_base,
            segment: None,
            self_thp: false,
        });
        let st = &mut self.stats[category.index()];
        st.allocations += 1;
        st.requested_bytes += size;
        st.live_bytes += size;
        st.peak_live_bytes = st.peak_live_bytes.max(st.live_bytes);
        self.live.insert(addr, id);
        // A gap kept by `classify` may hold the new object now.
        let end = addr.saturating_add(size);
        for e in &mut self.cache {
            if addr < e.1 && end > e.0 {
                *e = NO_RANGE;
            }
        }
    }

    fn death(&mut self, seq: u64, id: u32) {
        let o = &mut self.objects[id as usize];
        o.free_seq = Some(seq);
        let (category, len, start, site) = (o.category, o.len, o.start, o.site);
        self.live.remove(&start);
        if category == Category::HeapLarge {
            self.owned_frames -= head_frames(len);
            let (g, m) = head_pages_1g(len);
            self.owned_1g.0 -= g;
            self.owned_1g.1 -= m;
            if let Some(t) = self.tracked_sites.iter_mut().find(|t| Some(t.0) == site) {
                t.1 -= head_frames(len);
            }
        }
        let st = &mut self.stats[category.index()];
        st.live_bytes = st.live_bytes.saturating_sub(len);
        for e in &mut self.cache {
            if e.2 == id {
                *e = NO_RANGE;
            }
        }
    }

    /// Retire every live object overlapping `[lo, hi)`.
    fn kill_range(&mut self, seq: u64, lo: u64, hi: u64) {
        let mut doomed = Vec::new();
        if let Some((_, &id)) = self.live.range(..lo).next_back() {
            let o = &self.objects[id as usize];
            if o.start + o.len > lo {
                doomed.push(id);
            }
        }
        doomed.extend(self.live.range(lo..hi).map(|(_, &id)| id));
        for id in doomed {
            self.death(seq, id);
        }
    }

    pub fn apply(&mut self, ev: &AllocEvent) {
        let seq = ev.seq;
        match ev.op {
            AllocOp::Alloc {
                addr,
                size,
                via,
                site,
            } => self.birth(seq, addr, size, via, site),
            AllocOp::Free { addr } => {
                if let Some(&id) = self.live.get(&addr) {
                    if self.objects[id as usize].via == Some(AllocVia::Malloc) {
                        self.death(seq, id);
                    }
                }
            }
            AllocOp::Realloc {
                old,
                addr,
                size,
                site,
            } => {
                if addr == 0 {
                    // Failed realloc (or realloc(p, 0), which freed p).
                    if size == 0 {
                        if let Some(&id) = self.live.get(&old) {
                            self.death(seq, id);
                        }
                    }
                    return;
                }
                if let Some(&id) = self.live.get(&old) {
                    self.death(seq, id);
                }
                self.birth(seq, addr, size, AllocVia::Malloc, site);
            }
            AllocOp::Munmap { addr, len } => {
                let lo = addr;
                let hi = addr.saturating_add(len);
                let mapped: Vec<u32> = self
                    .live
                    .range(lo..hi)
                    .map(|(_, &id)| id)
                    .filter(|&id| {
                        matches!(
                            self.objects[id as usize].via,
                            Some(AllocVia::Mmap | AllocVia::MmapAnon | AllocVia::MmapFile)
                        )
                    })
                    .collect();
                for id in mapped {
                    self.death(seq, id);
                }
            }
            AllocOp::Mremap { old, addr, len } => {
                // The moved mapping keeps its site and kind (the runtime library
                // keeps a backed mapping's backing where the kernel moves it).
                let prev = self.live.get(&old).map(|&id| {
                    let o = &self.objects[id as usize];
                    (id, o.site, o.via, o.self_thp)
                });
                if let Some((id, _, _, _)) = prev {
                    self.death(seq, id);
                }
                if addr != u64::MAX {
                    let via = prev.and_then(|p| p.2).unwrap_or(AllocVia::Mmap);
                    self.birth(seq, addr, len, via, prev.and_then(|p| p.1));
                    // The advice is a flag of the mapping: it moves with it.
                    if let (Some(p), Some(&id)) = (prev, self.live.get(&addr)) {
                        self.objects[id as usize].self_thp = p.3;
                    }
                }
            }
            AllocOp::Advise { addr, len, huge } => {
                let (lo, hi) = (addr, addr.saturating_add(len));
                let mut hit: Vec<u32> = self.live.range(lo..hi).map(|(_, &id)| id).collect();
                if let Some((_, &id)) = self.live.range(..lo).next_back() {
                    hit.push(id);
                }
                for id in hit {
                    let o = &mut self.objects[id as usize];
                    let (ilo, ihi) = (
                        align_up(o.start, SIZE_2M),
                        align_down(o.start + o.len, SIZE_2M),
                    );
                    let covered = hi.min(ihi).saturating_sub(lo.max(ilo));
                    if huge && ihi > ilo && covered * 2 >= ihi - ilo {
                        o.self_thp = true;
                    } else if !huge && hi > o.start && lo < o.start + o.len {
                        o.self_thp = false;
                    }
                }
            }
        }
    }

    /// The object a reference to `addr` touches now, or `None` for memory of the
    /// measuring tools themselves (not part of the program's behaviour).
    pub fn classify(&mut self, addr: u64) -> Option<u32> {
        if let Some(e) = self.cache.iter().find(|e| addr >= e.0 && addr < e.1) {
            return Some(e.2);
        }
        if in_ranges(&self.space.excluded_ranges, addr) {
            return None;
        }
        // The gap around `addr` that holds no object, segment or range
        // boundary: every address in it is classified as `addr` is.
        let (mut lo, mut hi) = (0u64, u64::MAX);
        if let Some((&start, &id)) = self.live.range(..=addr).next_back() {
            let len = self.objects[id as usize].len;
            if addr < start + len {
                self.keep(start, start + len, id);
                return Some(id);
            }
            lo = start + len;
        }
        if let Some((&next, _)) = self.live.range(addr..).next() {
            hi = next;
        }
        for (i, seg) in self.space.static_segments.iter().enumerate() {
            if addr >= seg.start && addr < seg.end {
                // Objects come first where one lies in a segment (a mapping
                // over its .bss): only the part around `addr` is kept.
                let id = self.first_static + i as u32;
                self.keep(lo.max(seg.start), hi.min(seg.end), id);
                return Some(id);
            }
            clip(&mut lo, &mut hi, addr, seg.start, seg.end);
        }
        let space = &self.space;
        for &(a, b) in [
            &space.excluded_ranges,
            &space.heap_ranges,
            &space.stack_ranges,
        ]
        .into_iter()
        .flatten()
        {
            clip(&mut lo, &mut hi, addr, a, b);
        }
        let id = if in_ranges(&space.heap_ranges, addr) {
            OBJ_HEAP_META
        } else if in_ranges(&space.stack_ranges, addr) {
            OBJ_STACK
        } else {
            OBJ_OTHER
        };
        // Kept for the next references (a program's stack takes most of a
        // JVM's; without this each walked every segment of every module).
        self.keep(lo, hi, id);
        Some(id)
    }

    /// Keeps `[lo, hi)` → `id` as the latest range, dropping the oldest.
    fn keep(&mut self, lo: u64, hi: u64, id: u32) {
        self.cache.copy_within(0..CACHED - 1, 1);
        self.cache[0] = (lo, hi, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> AddressSpace {
        AddressSpace {
            static_segments: vec![StaticSegment {
                module: 0,
                start: 0x10000,
                end: 0x20000,
                bias: 0,
                anon_start_vaddr: 0x11000,
                main_program: true,
            }],
            heap_ranges: vec![(0x100000, 0x200000)],
            stack_ranges: vec![(0x7000_0000, 0x7010_0000)],
            excluded_ranges: vec![(0x9000_0000, 0x9010_0000)],
        }
    }

    /// `classify` with its kept range answers as it does without one, over
    /// random births, deaths and references around objects, segments and
    /// the heap, stack and excluded ranges.
    #[test]
    fn the_kept_range_never_changes_an_answer() {
        let mut r = crate::stats::Rng(5);
        let mut c = Categorizer::new(space(), 1 << 17);
        let mut live: Vec<u64> = Vec::new();
        for seq in 1..20_000u64 {
            match r.below(8) {
                0 => {
                    let addr = 0x8000 + r.below(0x400) * 0x1000;
                    let size = (1 + r.below(64)) * 0x800;
                    c.apply(&alloc(seq, addr, size));
                    live.push(addr);
                }
                1 if !live.is_empty() => {
                    let addr = live.swap_remove(r.below(live.len() as u64) as usize);
                    c.apply(&AllocEvent {
                        seq,
                        op: AllocOp::Free { addr },
                    });
                }
                _ => {
                    // Near the last answer's range most of the time, as a
                    // program's references are.
                    let addr = if r.below(4) == 0 {
                        [0x7000_0000u64, 0x9000_0000, 0x10000, 0x100000][r.below(4) as usize]
                            + r.below(0x200000)
                            - 0x100000
                    } else {
                        0x8000 + r.below(0x410000)
                    };
                    let kept = c.classify(addr);
                    let after = c.cache;
                    c.cache = [NO_RANGE; CACHED];
                    let fresh = c.classify(addr);
                    assert_eq!(kept, fresh, "{addr:#x} at {seq}");
                    // Leave the ranges as the cached query left them.
                    c.cache = after;
                }
            }
        }
    }

    fn alloc(seq: u64, addr: u64, size: u64) -> AllocEvent {
        AllocEvent {
            seq,
            op: AllocOp::Alloc {
                addr,
                size,
                via: AllocVia::Malloc,
                site: None,
            },
        }
    }

    #[test]
    fn categories_follow_object_lifetimes() {
        let mut c = Categorizer::new(space(), 128 * 1024);
        let cat = |c: &mut Categorizer, a| c.classify(a).map(|id| c.object(id).category);
        assert_eq!(cat(&mut c, 0x10010), Some(Category::Static));
        assert_eq!(cat(&mut c, 0x100010), Some(Category::HeapSmall));
        assert_eq!(cat(&mut c, 0x7000_1000), Some(Category::Stack));
        assert_eq!(cat(&mut c, 0x9000_0010), None);
        assert_eq!(cat(&mut c, 0x5000_0000), Some(Category::Other));

        c.apply(&alloc(1, 0x5000_0000, 1 << 20));
        c.apply(&alloc(2, 0x100100, 64));
        assert_eq!(cat(&mut c, 0x5000_0000 + 4096), Some(Category::HeapLarge));
        assert_eq!(cat(&mut c, 0x100110), Some(Category::HeapSmall));
        c.apply(&AllocEvent {
            seq: 3,
            op: AllocOp::Free { addr: 0x5000_0000 },
        });
        assert_eq!(cat(&mut c, 0x5000_0000 + 4096), Some(Category::Other));
        // 1 MiB is below one huge page: owned on 4 KB pages, no huge page held.
        assert_eq!(c.peak_owned_frames(), 0);
        assert_eq!(
            c.stats()[Category::HeapLarge.index()].requested_bytes,
            1 << 20
        );
    }

    #[test]
    fn realloc_can_change_category_and_frames_are_peak_of_live() {
        let mut c = Categorizer::new(AddressSpace::default(), 1000);
        c.apply(&alloc(1, 0x1000, 100));
        c.apply(&AllocEvent {
            seq: 2,
            op: AllocOp::Realloc {
                old: 0x1000,
                addr: 0x40000,
                size: 5 << 20,
                site: None,
            },
        });
        let id = c.classify(0x40000 + 10).unwrap();
        assert_eq!(c.object(id).category, Category::HeapLarge);
        // 5 MiB: a head of two 2 MB pages and a 1 MiB tail on 4 KB pages.
        assert_eq!(c.object(id).frames(), 2);
        assert_eq!(c.object(id).head_len(), 4 << 20);
        c.apply(&alloc(3, 0x1000_0000, 2 << 20));
        assert_eq!(c.peak_owned_frames(), 3);
        c.apply(&AllocEvent {
            seq: 4,
            op: AllocOp::Free { addr: 0x40000 },
        });
        c.apply(&alloc(5, 0x2000_0000, 2 << 20));
        assert_eq!(c.peak_owned_frames(), 3);
    }

    #[test]
    fn munmap_retires_mmapped_objects() {
        let mut c = Categorizer::new(AddressSpace::default(), 1000);
        c.apply(&AllocEvent {
            seq: 1,
            op: AllocOp::Alloc {
                addr: 0x10_0000,
                size: 8192,
                via: AllocVia::Mmap,
                site: None,
            },
        });
        let id = c.classify(0x10_0100).unwrap();
        assert_eq!(c.object(id).category, Category::Other);
        assert_ne!(id, OBJ_OTHER);
        c.apply(&AllocEvent {
            seq: 2,
            op: AllocOp::Munmap {
                addr: 0x10_0000,
                len: 8192,
            },
        });
        assert_eq!(c.classify(0x10_0100), Some(OBJ_OTHER));
    }

    #[test]
    fn backable_mappings_are_heap_large_by_size_and_die_by_munmap() {
        let mut c = Categorizer::new(AddressSpace::default(), 128 * 1024);
        let map = |seq, addr, size, via| AllocEvent {
            seq,
            op: AllocOp::Alloc {
                addr,
                size,
                via,
                site: Some(Site {
                    module: 0,
                    offset: 0x40,
                }),
            },
        };
        c.apply(&map(1, 0x4000_0000, 16 << 20, AllocVia::MmapAnon));
        c.apply(&map(2, 0x8000_0000, 16 << 20, AllocVia::Mmap));
        c.apply(&map(3, 0x9000_0000, 64 << 10, AllocVia::MmapAnon));
        let cat = |c: &mut Categorizer, a| {
            let id = c.classify(a).unwrap();
            c.object(id).category
        };
        assert_eq!(cat(&mut c, 0x4000_1000), Category::HeapLarge);
        assert_eq!(cat(&mut c, 0x8000_1000), Category::Other);
        assert_eq!(cat(&mut c, 0x9000_1000), Category::Other);
        assert_eq!(c.peak_owned_frames(), 8);
        assert_eq!(c.heap_large_sites()[0].1, 16 << 20);
        // free() of a mapping's address is not its end; munmap is.
        c.apply(&AllocEvent {
            seq: 4,
            op: AllocOp::Free { addr: 0x4000_0000 },
        });
        assert_eq!(cat(&mut c, 0x4000_1000), Category::HeapLarge);
        c.apply(&AllocEvent {
            seq: 5,
            op: AllocOp::Mremap {
                old: 0x4000_0000,
                addr: 0x5000_0000,
                len: 32 << 20,
            },
        });
        assert_eq!(cat(&mut c, 0x5000_1000), Category::HeapLarge);
        c.apply(&AllocEvent {
            seq: 6,
            op: AllocOp::Munmap {
                addr: 0x5000_0000,
                len: 32 << 20,
            },
        });
        assert_eq!(cat(&mut c, 0x5000_1000), Category::Other);
        assert_eq!(c.peak_owned_frames(), 16);
    }

    #[test]
    fn static_interior_is_2m_aligned_inside_the_anonymous_part() {
        let seg = StaticSegment {
            module: 0,
            start: 0x555500200000 + 0x1000,
            end: 0x555500200000 + 0x1000 + (5 << 20),
            bias: 0x555500200000,
            anon_start_vaddr: 0x3000,
            main_program: true,
        };
        assert_eq!(seg.huge_interior_vaddr(), (0x200000, 0x400000));
    }
}
