//! Driving the categorizer and the analyzer over a captured reference stream.
//!
//! The stream holds the program's data references in order, with the runtime
//! library's marker loads among them (docs/formats.md §2.4). A marker for event
//! `seq` means: everything up to `seq` has happened. Marker loads and references
//! to the measuring tools' own memory are not part of the program's behaviour and
//! are dropped here.
//!
//! A spatially sampled stream (`sampled.rs`) is analysed in the same single pass:
//! each program reference's page and group decide whether it is in the page
//! sample and the region sample (the capture also kept the region after each
//! sampled one, which only completes the sampled units: the rest of it is
//! dropped here), and the analyzer weighs each kept reference by 1/R in each
//! mapping's view. A complete stream can be sampled the same way by the
//! analysis itself (`analyze --rate`).

use crate::analysis::{
    Alongside, AnalysisResult, Analyzer, CoreSummary, Mapping, RefUnits, SamplingSummary,
};
use crate::categorize::{AddressSpace, AllocEvent, AllocOp, Categorizer, Site};
use crate::category::{Category, PerCategory};
use crate::sampled::{group_of, page_unit, Sampling};
use crate::tlb::TlbGeometry;
use serde::{Deserialize, Serialize};

/// One record of a reference stream, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamItem {
    /// A reference to this address (a load, or a store whose stream has no
    /// write bits).
    Ref(u64),
    /// A store to this address.
    Write(u64),
    /// Fixed-size sampling lowered the threshold to this value.
    Threshold(u64),
    /// The references that follow are this thread's (its id in the stream;
    /// before the first: the first thread's).
    Thread(u32),
}

/// How the stream the analysis reads was sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamSampling {
    /// The pages and groups in the sample now (the threshold falls at
    /// `Threshold` items).
    pub regions: Sampling,
    /// `spatial-rate`, `spatial-size` or `analysis` (module doc).
    pub kind: &'static str,
    /// The realized rate of the sampled regions over the nominal rate
    /// ([`crate::sampled::realized_ratio`]; 1 when unknown): the weights are
    /// 1 / (R × this), a ratio estimator (docs/model.md §3.1).
    pub realized: f64,
}

pub struct StreamSpec {
    pub space: AddressSpace,
    /// Allocation events sorted by `seq`.
    pub events: Vec<AllocEvent>,
    pub threshold: u64,
    /// Marker area (base, span); `span` is a power of two.
    pub markers: (u64, u64),
}

impl StreamSpec {
    /// Whether the program advises `MADV_HUGEPAGE` itself (`AllocOp::Advise`).
    pub fn self_advised(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e.op, AllocOp::Advise { huge: true, .. }))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Data references of the program (of a sampled stream: estimated, the
    /// weights of the references in the sample).
    pub refs: u64,
    /// References of the program in the sample the analysis used (all of them
    /// for a complete stream).
    #[serde(default)]
    pub sampled_refs: u64,
    /// Program references in the stream that are not in the sample: the region
    /// after a sampled one that the capture kept, or what `analyze --rate` left.
    #[serde(default)]
    pub out_of_sample: u64,
    /// References to the measuring tools' own memory.
    pub excluded: u64,
    pub markers: u64,
    pub events: u64,
    pub events_applied: u64,
    pub refs_per_category: PerCategory<u64>,
}

struct StreamDriver<'a> {
    spec: &'a StreamSpec,
    cat: Categorizer,
    next_event: usize,
    last_marker: u64,
    summary: StreamSummary,
}

impl<'a> StreamDriver<'a> {
    fn new(spec: &'a StreamSpec) -> Self {
        StreamDriver {
            cat: Categorizer::new(spec.space.clone(), spec.threshold),
            spec,
            next_event: 0,
            last_marker: 0,
            summary: StreamSummary {
                events: spec.events.len() as u64,
                ..Default::default()
            },
        }
    }

    /// The full sequence number of a marker: the value congruent to its offset
    /// modulo the span that is closest to the previous marker (markers of
    /// concurrent threads may arrive slightly out of order).
    fn marker_seq(&self, offset: u64) -> u64 {
        let span = self.spec.markers.1;
        let base = self.last_marker - self.last_marker % span;
        let mut cand = base + offset;
        if cand + span / 2 < self.last_marker {
            cand += span;
        } else if cand > self.last_marker + span / 2 && cand >= span {
            cand -= span;
        }
        cand
    }

    /// Returns the object of a program reference, or `None` for dropped ones.
    fn step(&mut self, addr: u64) -> Option<u32> {
        let (base, span) = self.spec.markers;
        if span != 0 && addr >= base && addr < base + span {
            let seq = self.marker_seq(addr - base);
            self.summary.markers += 1;
            self.last_marker = self.last_marker.max(seq);
            while self.next_event < self.spec.events.len()
                && self.spec.events[self.next_event].seq <= seq
            {
                self.cat.apply(&self.spec.events[self.next_event]);
                self.next_event += 1;
                self.summary.events_applied += 1;
            }
            return None;
        }
        match self.cat.classify(addr) {
            None => {
                self.summary.excluded += 1;
                None
            }
            Some(id) => Some(id),
        }
    }

    /// Counts a program reference of object `id`, every one of them (no sampling).
    fn count(&mut self, id: u32) {
        self.summary.refs += 1;
        self.summary.sampled_refs += 1;
        self.summary.refs_per_category[self.cat.object(id).category.index()] += 1;
    }
}

/// First pass: which categories does the program reference, and which are its
/// largest heap-large allocation sites?
pub fn present_categories(
    spec: &StreamSpec,
    refs: impl Iterator<Item = u64>,
) -> (Vec<Category>, StreamSummary, Vec<Site>) {
    let mut d = StreamDriver::new(spec);
    for addr in refs {
        if let Some(id) = d.step(addr) {
            d.count(id);
        }
    }
    let present = Category::ALL
        .iter()
        .copied()
        .filter(|c| d.summary.refs_per_category[c.index()] > 0)
        .collect();
    let sites = top_sites(&d.cat);
    (present, d.summary, sites)
}

/// Which mappings to evaluate beyond every subset of the categories at 2 MB.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnalysisOptions {
    /// Heap-large on 1 GB pages (the kernel has a 1 GB hugetlb size).
    pub gigantic: bool,
    /// Heap-large on these mTHP folio sizes (shifts 14..=20).
    pub mthp: Vec<u8>,
    /// Also run the exact set-associative TLB simulation.
    pub simulate: bool,
    /// Allocation sites whose heap-large objects are also evaluated alone.
    #[serde(default)]
    pub sites: Vec<Site>,
    /// Threads that analyse the mappings side by side (each thread a share of
    /// them, every one over the whole stream); 0: one per CPU. The results do not
    /// depend on it.
    #[serde(default)]
    pub threads: usize,
    /// The CPUs the profiled run could use: its threads go round-robin, in the
    /// order they first appear in the stream, over min(threads, cpus) cores,
    /// each with TLBs of its own (docs/model.md §3, "Per-core TLBs"). 0: one
    /// TLB for every reference, no thread placement reported.
    #[serde(default)]
    pub cpus: usize,
    /// Where `cpus` came from, for people (`affinity 0-1`).
    #[serde(default)]
    pub cpus_source: String,
    /// The program is a JVM (`ProgramTraits::jvm`): its heap, category
    /// `other`, is also evaluated on 2 MB THP, as the JVM's own switch puts it
    /// (mapping `jvm`, [`Mapping::is_jvm_heap`]).
    #[serde(default)]
    pub jvm: bool,
    /// The program's processes that ran alongside the analysed one (from a
    /// followed launch), carried into the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alongside: Option<Alongside>,
}

/// References categorized at a time before the analysis threads take them.
const BATCH: usize = 1 << 18;

/// How many of the largest heap-large allocation sites get a mapping of their own.
pub const TOP_SITES: usize = 3;

/// The sites worth a per-site mapping: the largest heap-large ones, when heap-large
/// memory comes from more than one site (with one, the site is the category).
pub fn top_sites(cat: &Categorizer) -> Vec<Site> {
    let sites = cat.heap_large_sites();
    if sites.len() < 2 {
        return vec![];
    }
    sites.into_iter().take(TOP_SITES).map(|(s, _)| s).collect()
}

/// A batch entry that is no reference: the threshold fell to `addr` here.
const THRESHOLD_ID: u32 = u32::MAX;
/// A batch entry that is no reference: the references after it run on core `addr`.
const CORE_ID: u32 = u32::MAX - 1;

/// A batch entry: object, address, units (sampled streams).
type Entry = (u32, u64, RefUnits);

fn feed_batch(a: &mut Analyzer, cat: &Categorizer, batch: &[Entry], s: Sampling, realized: f64) {
    if !a.is_sampled() {
        for &(id, addr, u) in batch {
            if id == CORE_ID {
                a.set_core(addr as usize);
                continue;
            }
            a.feed_access(cat.object(id), addr, u.flags & RefUnits::WRITE != 0);
        }
        return;
    }
    let mut s = s;
    for (id, addr, u) in batch {
        if *id == CORE_ID {
            a.set_core(*addr as usize);
            continue;
        }
        if *id == THRESHOLD_ID {
            s.threshold = *addr;
            a.evict(|p| !s.page_sampled(p), |g| !s.region_sampled(g));
            continue;
        }
        let inv_page = 1.0 / s.rate();
        a.feed_sampled(cat.object(*id), *addr, u, inv_page, inv_page / realized);
    }
}

/// Second pass: the full analysis of the candidate mappings of `present`.
pub fn analyze_stream(
    spec: &StreamSpec,
    geometry: &TlbGeometry,
    present: &[Category],
    opts: &AnalysisOptions,
    refs: impl Iterator<Item = u64>,
) -> (AnalysisResult, StreamSummary, Categorizer) {
    analyze_stream_sampled(
        spec,
        geometry,
        present,
        opts,
        None,
        refs.map(StreamItem::Ref),
    )
}

/// [`analyze_stream`] of a stream sampled as `sampling` says (`None`: complete,
/// exact counts). With sampling, the set-associative simulation is off (it needs
/// every reference).
pub fn analyze_stream_sampled(
    spec: &StreamSpec,
    geometry: &TlbGeometry,
    present: &[Category],
    opts: &AnalysisOptions,
    sampling: Option<StreamSampling>,
    items: impl Iterator<Item = StreamItem>,
) -> (AnalysisResult, StreamSummary, Categorizer) {
    let mut d = StreamDriver::new(spec);
    d.cat.track_sites(&opts.sites);
    let mappings = Mapping::candidates(present, opts.gigantic, &opts.mthp, &opts.sites, opts.jvm);
    let segments = spec.space.static_segments.clone();
    let a = match sampling {
        None => Analyzer::with_simulation(geometry.clone(), segments, mappings, opts.simulate),
        Some(_) => Analyzer::with_sampling(geometry.clone(), segments, mappings),
    };
    let a = if spec.self_advised() {
        a.with_self_advice()
    } else {
        a
    };
    let a = if opts.cpus > 1 { a.with_cores() } else { a };
    // Threads in the order they first appear; the core of the current one.
    let mut seen: rustc_hash::FxHashMap<u32, usize> = Default::default();
    let mut core = 0usize;
    let mut s = sampling.map_or(Sampling::complete(), |x| x.regions);
    let realized = sampling.map_or(1.0, |x| crate::sampled::sane_ratio(x.realized));
    // Weights of the program references in the sample, per category.
    let mut weights: PerCategory<f64> = [0.0; 5];
    let mut groups = rustc_hash::FxHashSet::default();
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // The categorizer runs ahead on this thread a batch at a time (objects are
    // never changed in what the analysis reads, only added), then every part of
    // the mappings takes the batch on its own thread (one part: this thread).
    let mut parts = a.split(threads);
    let mut batch: Vec<Entry> = Vec::with_capacity(BATCH);
    let mut items = items;
    loop {
        batch.clear();
        // The sampling in force at the batch's start, for the parts.
        let s0 = s;
        for item in items.by_ref() {
            let (addr, write) = match item {
                StreamItem::Ref(a) => (a, false),
                StreamItem::Write(a) => (a, true),
                StreamItem::Thread(t) => {
                    let n = seen.len();
                    let i = *seen.entry(t).or_insert(n);
                    let c = if opts.cpus > 1 { i % opts.cpus } else { 0 };
                    if c != core {
                        core = c;
                        batch.push((CORE_ID, c as u64, RefUnits::ALL));
                    }
                    continue;
                }
                StreamItem::Threshold(t) => {
                    // Thresholds only fall (the reader checks); a hostile
                    // stream's rise would only be ignored.
                    if sampling.is_some() && t > 0 && t < s.threshold {
                        s.threshold = t;
                        groups.retain(|&g| s.region_sampled(g));
                        batch.push((THRESHOLD_ID, t, RefUnits::ALL));
                    }
                    continue;
                }
            };
            let Some(id) = d.step(addr) else { continue };
            let units = if sampling.is_some() {
                let o = d.cat.object(id);
                let seg = o
                    .segment
                    .and_then(|i| spec.space.static_segments.get(i as usize));
                let (page, placed_page, group) = (
                    addr >> crate::sampled::PAGE_SHIFT,
                    page_unit(o, addr),
                    group_of(o, seg, addr),
                );
                let flags = (s.page_sampled(page) as u8 * RefUnits::PAGE)
                    | (s.page_sampled(placed_page) as u8 * RefUnits::PLACED_PAGE)
                    | (s.region_sampled(group) as u8 * RefUnits::REGION);
                if flags == 0 {
                    d.summary.out_of_sample += 1;
                    continue;
                }
                if flags & RefUnits::REGION != 0 {
                    groups.insert(group);
                }
                RefUnits {
                    page,
                    placed_page,
                    group,
                    flags,
                }
            } else {
                RefUnits::ALL
            };
            let units = RefUnits {
                flags: units.flags | (RefUnits::WRITE * write as u8),
                ..units
            };
            d.summary.sampled_refs += 1;
            // Reference counts from the page sample (every reference has a page).
            if units.flags & RefUnits::PAGE != 0 {
                weights[d.cat.object(id).category.index()] += 1.0 / s.rate();
            }
            batch.push((id, addr, units));
            if batch.len() == BATCH {
                break;
            }
        }
        if batch.is_empty() {
            break; // only a full batch stops the loop above early
        }
        let (cat, batch) = (&d.cat, &batch);
        std::thread::scope(|sc| {
            let (first, rest) = parts.split_first_mut().expect("at least one part");
            for p in rest {
                sc.spawn(move || feed_batch(p, cat, batch, s0, realized));
            }
            feed_batch(first, cat, batch, s0, realized);
        });
    }
    let a = Analyzer::join(parts);
    let cores = (opts.cpus > 0).then(|| {
        CoreSummary::new(
            seen.len().max(1) as u64,
            opts.cpus as u64,
            opts.cpus_source.clone(),
            a.core_weights(),
        )
    });
    for (c, w) in weights.iter().enumerate() {
        d.summary.refs_per_category[c] = w.round() as u64;
    }
    d.summary.refs = a.weight().round() as u64;
    let result = AnalysisResult {
        refs: a.weight().round() as u64,
        mappings: a.finish(),
        heap_large_peak_pages: d.cat.peak_owned_frames(),
        heap_large_peak_pages_1g: d.cat.peak_owned_pages_1g(),
        static_pages_1g: d.cat.static_pages_1g(),
        site_peak_pages: opts
            .sites
            .iter()
            .map(|&s| (s, d.cat.peak_site_frames(s)))
            .collect(),
        alloc_stats: d.cat.stats().clone(),
        geometry: geometry.clone(),
        sampling: sampling.map(|x| SamplingSummary {
            kind: x.kind.to_string(),
            seed: s.seed,
            modulus: s.modulus,
            threshold: s.threshold,
            rate: s.rate(),
            realized,
            refs_sampled: d.summary.sampled_refs,
            groups: groups.len() as u64,
        }),
        cores,
        alongside: opts.alongside.clone(),
    };
    (result, d.summary, d.cat)
}

/// A synthetic program for the tests and `hugetune bench model`: one heap-large
/// block that starts neither on a 2 MB nor on a 4 KB boundary, walked at random
/// (45 %) and swept (15 %), next to a 16 MiB heap walked at random (30 %) and a
/// 64 KiB stack (10 %); a marker orders the allocation before the references.
pub mod synth {
    use super::StreamSpec;
    use crate::categorize::{AddressSpace, AllocEvent, AllocOp, AllocVia};
    use crate::stats::Rng;

    /// The spec and `n` addresses (the marker load first) of the program with a
    /// block of `block` bytes.
    pub fn program(n: usize, block: u64, seed: u64) -> (StreamSpec, Vec<u64>) {
        let markers = 0x9000_0000u64;
        let heap = (0x100_0000u64, 0x200_0000u64);
        let stack = (0x7ffe_0000_0000u64, 0x7ffe_0001_0000u64);
        let start = 0x7f00_0010_0010u64;
        let block = block.max(1 << 20);
        let spec = StreamSpec {
            space: AddressSpace {
                heap_ranges: vec![heap],
                stack_ranges: vec![stack],
                ..Default::default()
            },
            events: vec![AllocEvent {
                seq: 1,
                op: AllocOp::Alloc {
                    addr: start,
                    size: block,
                    via: AllocVia::Malloc,
                    site: None,
                },
            }],
            threshold: 128 << 10,
            markers: (markers, 1 << 20),
        };
        let mut r = Rng(seed);
        let mut refs = Vec::with_capacity(n);
        refs.push(markers + 1);
        let mut sweep = 0u64;
        while refs.len() < n {
            let u = r.below(100);
            let a = if u < 45 {
                start + r.below(block / 64) * 64
            } else if u < 60 {
                sweep = (sweep + 64) % block;
                start + sweep
            } else if u < 90 {
                heap.0 + r.below((heap.1 - heap.0) / 64) * 64
            } else {
                stack.0 + r.below((stack.1 - stack.0) / 64) * 64
            };
            refs.push(a);
        }
        (spec, refs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::categorize::{AllocOp, AllocVia};
    use crate::page::PageSize::*;
    use crate::tlb::{TlbArray, TlbLevel};

    #[test]
    fn markers_order_events_and_are_dropped() {
        let base = 0x9000_0000u64;
        let spec = StreamSpec {
            space: AddressSpace {
                excluded_ranges: vec![(0xA000_0000, 0xA000_1000)],
                ..Default::default()
            },
            events: vec![
                AllocEvent {
                    seq: 1,
                    op: AllocOp::Alloc {
                        addr: 0x10_0000,
                        size: 1 << 20,
                        via: AllocVia::Malloc,
                        site: None,
                    },
                },
                AllocEvent {
                    seq: 2,
                    op: AllocOp::Free { addr: 0x10_0000 },
                },
            ],
            threshold: 128 << 10,
            markers: (base, 1 << 20),
        };
        let refs = vec![
            0x10_0040,   // before the allocation: other
            base + 1,    // marker: malloc done
            0x10_0040,   // heap-large
            0x10_2040,   // heap-large
            0xA000_0010, // the tools' own memory
            base + 2,    // marker: free
            0x10_0040,   // other again
        ];
        let (present, s, sites) = present_categories(&spec, refs.clone().into_iter());
        assert!(sites.is_empty(), "one block, no site");
        assert_eq!(present, vec![Category::HeapLarge, Category::Other]);
        assert_eq!(
            (s.refs, s.excluded, s.markers, s.events_applied),
            (4, 1, 2, 2)
        );
        assert_eq!(s.refs_per_category[Category::HeapLarge.index()], 2);
        let g = TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m], 64, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 512, 0)], None),
            ],
            source: "t".into(),
        };
        let opts = AnalysisOptions {
            gigantic: true,
            mthp: vec![16],
            simulate: true,
            sites: vec![],
            threads: 0,
            ..Default::default()
        };
        let (r, _, cat) = analyze_stream(&spec, &g, &present, &opts, refs.into_iter());
        assert_eq!(r.refs, 4);
        // all-small, heap-large, heap-large:1g, heap-large:64k.
        assert_eq!(r.mappings.len(), 4);
        assert_eq!(r.heap_large_peak_pages, 0, "a 1 MiB block has no huge head");
        assert_eq!(
            cat.objects()
                .iter()
                .filter(|o| o.free_seq.is_some())
                .count(),
            1
        );
    }

    /// Mappings split across threads give exactly the serial analysis: a stream
    /// of several batches, objects allocated and freed between its references.
    #[test]
    fn threaded_analysis_equals_serial() {
        let base = 0x9000_0000u64;
        let heap = (0x100_0000u64, 0x200_0000u64);
        let mut events = Vec::new();
        let mut refs = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Three large blocks, each allocated, walked at random next to the
        // small heap, then freed; a marker before each event.
        for (i, seq) in (1..=6u64).enumerate() {
            let block = 0x4000_0000 + (i as u64 / 2) * 0x1000_0000;
            let op = if seq % 2 == 1 {
                AllocOp::Alloc {
                    addr: block,
                    size: 64 << 20,
                    via: AllocVia::Malloc,
                    site: None,
                }
            } else {
                AllocOp::Free { addr: block }
            };
            events.push(AllocEvent { seq, op });
            refs.push(base + seq);
            for _ in 0..100_000 {
                let r = rnd();
                refs.push(if r & 1 == 0 {
                    block + (r >> 8) % (64 << 20)
                } else {
                    heap.0 + (r >> 8) % (heap.1 - heap.0)
                });
            }
        }
        let spec = StreamSpec {
            space: AddressSpace {
                heap_ranges: vec![heap],
                ..Default::default()
            },
            events,
            threshold: 128 << 10,
            markers: (base, 1 << 20),
        };
        let (present, _, _) = present_categories(&spec, refs.iter().copied());
        let g = TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m], 64, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 512, 0)], None),
            ],
            source: "t".into(),
        };
        let mut opts = AnalysisOptions {
            gigantic: true,
            mthp: vec![16],
            simulate: true,
            sites: vec![],
            threads: 1,
            ..Default::default()
        };
        let (serial, s1, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
        assert!(
            serial.mappings.len() >= 4,
            "{present:?} {:?}",
            serial.mappings.iter().map(|m| &m.name).collect::<Vec<_>>()
        );
        assert!(serial.refs as usize > 2 * BATCH);
        for threads in [3, 64] {
            opts.threads = threads;
            let (par, s2, _) = analyze_stream(&spec, &g, &present, &opts, refs.iter().copied());
            assert_eq!(par, serial, "{threads} threads");
            assert_eq!(s2, s1);
        }
    }

    #[test]
    fn marker_sequence_wraps() {
        let spec = StreamSpec {
            space: Default::default(),
            events: vec![],
            threshold: 1,
            markers: (0x1000, 16),
        };
        let mut d = StreamDriver::new(&spec);
        let mut seen = Vec::new();
        for seq in 1..100u64 {
            d.step(0x1000 + (seq % 16));
            seen.push(d.last_marker);
        }
        assert_eq!(seen, (1..100).collect::<Vec<_>>());
    }
}
