//! Turning what the runtime library recorded into the model's inputs: allocation
//! events with resolved sites, static segments, heap and stack ranges, and the
//! ranges of the tools' own memory.
//!
//! A log the QEMU plugin wrote from the guest's system calls (formats.md §2.10:
//! static and Go programs) reads alike, with three differences: every anonymous
//! private read-write mapping is the program's own (heap-large from the
//! threshold on), an mprotect that opens a PROT_NONE reservation read-write
//! makes the reservation such a mapping, and the brk heap is heap-small.

use hugetune_format::alloclog::{self, AllocLog, Kind, Module, PF_W, PF_X};
use hugetune_host::procfs::{parse_maps, MapEntry};
use hugetune_model::categorize::{
    AddressSpace, AllocEvent, AllocOp, AllocVia, Site, StaticSegment,
};
use hugetune_model::page::align_up;
use serde::{Deserialize, Serialize};

/// madvise advices whose effect the analysis models (`AllocOp::Advise`).
const MADV_HUGEPAGE: u32 = 14;
const MADV_NOHUGEPAGE: u32 = 15;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileInputs {
    pub space: AddressSpace,
    #[serde(skip)]
    pub events: Vec<AllocEvent>,
    /// Module paths; `Site::module` indexes this list.
    pub modules: Vec<String>,
    pub threshold: u64,
    pub markers: (u64, u64),
    /// Pids of the children the program forked (FORK events): memory the program
    /// touched is shared copy-on-write with them, which private hugetlb pages do
    /// not survive when the pool is short.
    #[serde(default)]
    pub children: Vec<u32>,
    /// Whether the program calls fork at all (a failed fork counts too).
    #[serde(default)]
    pub forks: bool,
    /// Programs it exec'd (EXEC events that were not reported as failed).
    #[serde(default)]
    pub execs: Vec<String>,
    /// Cuts of the program's own mappings that a hugetlb backing could not take
    /// without a copy (`AllocLog::mapping_cuts`).
    #[serde(default)]
    pub mapping_cuts: u64,
    /// The log is the QEMU plugin's record of the system calls of a program the
    /// runtime library cannot enter: its plans are applied from outside.
    #[serde(default)]
    pub outside: bool,
}

impl ProfileInputs {
    /// What the planner needs to know of the program beyond its references.
    pub fn traits(&self) -> hugetune_model::plan::ProgramTraits {
        hugetune_model::plan::ProgramTraits {
            forks: self.forks,
            fork_children: self.children.len() as u64,
            mapping_cuts: self.mapping_cuts,
            outside: self.outside,
            jvm: self
                .modules
                .iter()
                .any(|m| hugetune_model::plan::is_jvm_module(m)),
        }
    }
}

/// Distinct loaded modules (a module appears in the start and the exit snapshot).
fn distinct_modules(log: &AllocLog) -> Vec<&Module> {
    let mut out: Vec<&Module> = Vec::new();
    for m in &log.modules {
        if !out.iter().any(|o| o.path == m.path && o.bias == m.bias) {
            out.push(m);
        }
    }
    out
}

fn resolve_site(modules: &[&Module], names: &[String], caller: u64) -> Option<Site> {
    if caller == 0 {
        return None;
    }
    for m in modules {
        for s in &m.segments {
            let lo = m.bias.wrapping_add(s.vaddr);
            if s.flags & PF_X != 0 && caller >= lo && caller < lo.wrapping_add(s.memsz) {
                let module = names.iter().position(|n| *n == m.path)? as u32;
                return Some(Site {
                    module,
                    offset: caller - m.bias,
                });
            }
        }
    }
    None
}

fn containing(maps: &[MapEntry], addr: u64) -> Option<&MapEntry> {
    maps.iter().find(|e| addr >= e.start && addr < e.end)
}

fn push_range(v: &mut Vec<(u64, u64)>, r: (u64, u64)) {
    if !v.contains(&r) {
        v.push(r);
    }
}

pub fn inputs_from_log(log: &AllocLog) -> ProfileInputs {
    let modules = distinct_modules(log);
    let mut names: Vec<String> = Vec::new();
    for m in &modules {
        if !names.contains(&m.path) {
            names.push(m.path.clone());
        }
    }
    // The main program is the first object dl_iterate_phdr reports at start-up.
    let main = log
        .modules
        .iter()
        .min_by_key(|m| m.seq)
        .map(|m| (m.path.clone(), m.bias));

    let mut space = AddressSpace::default();
    for m in &modules {
        let module = names.iter().position(|n| *n == m.path).unwrap_or(0) as u32;
        for s in m
            .segments
            .iter()
            .filter(|s| s.flags & PF_W != 0 && s.memsz > 0)
        {
            space.static_segments.push(StaticSegment {
                module,
                start: m.bias.wrapping_add(s.vaddr),
                end: m.bias.wrapping_add(s.vaddr).wrapping_add(s.memsz),
                bias: m.bias,
                anon_start_vaddr: align_up(s.vaddr + s.filesz, 4096),
                main_program: main.as_ref() == Some(&(m.path.clone(), m.bias)),
            });
        }
    }

    let mut maps: Vec<MapEntry> = Vec::new();
    for snap in &log.maps {
        for e in parse_maps(&snap.text) {
            if !maps.iter().any(|m| m.start == e.start && m.end == e.end) {
                maps.push(e);
            }
        }
    }
    for e in maps.iter().filter(|e| e.path == "[heap]") {
        push_range(&mut space.heap_ranges, (e.start, e.end));
    }
    for e in maps.iter().filter(|e| e.path == "[stack]") {
        push_range(&mut space.stack_ranges, (e.start, e.end));
    }

    let threshold = log.header.threshold.max(1);
    let mut events = Vec::new();
    // A log of system calls (the QEMU plugin's, formats.md §2.10): the brk heap
    // as far as it grew, and the anonymous reservations an mprotect may open.
    let syscalls = log.header.syscalls;
    let mut brk: Option<(u64, u64)> = None;
    let mut reserved: std::collections::BTreeMap<u64, (u64, Option<Site>)> = Default::default();
    for r in &log.records {
        let site = || resolve_site(&modules, &names, r.caller);
        let op = match r.kind {
            k if k.is_malloc_alloc() => {
                // Anonymous memory that holds small malloc'd objects is a malloc arena
                // (the brk heap, or a thread arena): its free space is heap-small too.
                if r.addr != 0 && r.size < threshold {
                    if let Some(e) = containing(&maps, r.addr) {
                        if e.path.is_empty() || e.path == "[heap]" {
                            push_range(&mut space.heap_ranges, (e.start, e.end));
                        }
                    }
                }
                AllocOp::Alloc {
                    addr: r.addr,
                    size: r.size,
                    via: AllocVia::Malloc,
                    site: site(),
                }
            }
            Kind::Realloc | Kind::Reallocarray => AllocOp::Realloc {
                old: r.arg,
                addr: r.addr,
                size: r.size,
                site: site(),
            },
            Kind::Free => AllocOp::Free { addr: r.addr },
            Kind::Mmap => {
                // Memory an outside applier backs is every anonymous private
                // read-write mapping (MAP_FIXED included); the runtime library
                // backs those it can place itself.
                let backable = if syscalls {
                    r.is_anon_rw_mapping()
                } else {
                    r.is_backable_mapping()
                };
                let flags = r.arg as u32;
                if syscalls && !backable && r.addr != u64::MAX {
                    let anon_private = flags & alloclog::MAP_ANONYMOUS != 0
                        && flags & 0x0f == alloclog::MAP_PRIVATE;
                    if anon_private && (r.arg >> 32) as u32 == 0 {
                        reserved.insert(r.addr, (r.addr.saturating_add(r.size), site()));
                    }
                }
                AllocOp::Alloc {
                    addr: r.addr,
                    size: r.size,
                    via: if backable {
                        AllocVia::MmapAnon
                    } else if flags & alloclog::MAP_ANONYMOUS != 0
                        && flags & 0x0f == alloclog::MAP_PRIVATE
                    {
                        AllocVia::Mmap
                    } else {
                        AllocVia::MmapFile
                    },
                    site: site(),
                }
            }
            Kind::Munmap => {
                if syscalls {
                    let hi = r.addr.saturating_add(r.size);
                    let gone: Vec<u64> = reserved.range(r.addr..hi).map(|(&a, _)| a).collect();
                    for a in gone {
                        reserved.remove(&a);
                    }
                }
                AllocOp::Munmap {
                    addr: r.addr,
                    len: r.size,
                }
            }
            Kind::Brk => {
                // brk returns the break (the old one when it fails): the heap
                // is everything between the lowest and the highest.
                if r.addr != 0 {
                    brk = Some(brk.map_or((r.addr, r.addr), |(lo, hi)| {
                        (lo.min(r.addr), hi.max(r.addr))
                    }));
                }
                continue;
            }
            Kind::RangeCall
                if r.arg >> 32 == 1
                    && matches!(r.arg as u32, MADV_HUGEPAGE | MADV_NOHUGEPAGE)
                    && r.arg2 == 0 =>
            {
                AllocOp::Advise {
                    addr: r.addr,
                    len: r.size,
                    huge: r.arg as u32 == MADV_HUGEPAGE,
                }
            }
            Kind::RangeCall if syscalls => {
                // mprotect(PROT_READ | PROT_WRITE) opening a PROT_NONE
                // reservation: from now on the reservation is the program's
                // read-write memory, as if mapped so (glibc's thread arenas and
                // runtimes that reserve, then commit).
                let mprotect_rw =
                    r.arg >> 32 == 0 && r.arg as u32 == alloclog::PROT_READ_WRITE && r.arg2 == 0;
                let Some((&start, &(end, res_site))) = reserved.range(..=r.addr).next_back() else {
                    continue;
                };
                if !mprotect_rw || r.addr >= end {
                    continue;
                }
                reserved.remove(&start);
                AllocOp::Alloc {
                    addr: start,
                    size: end - start,
                    via: AllocVia::MmapAnon,
                    site: res_site,
                }
            }
            Kind::Mremap => AllocOp::Mremap {
                old: r.arg,
                addr: r.addr,
                len: r.size,
            },
            Kind::Thread => {
                // Version 1 names only a stack pointer; version 2 adds STACK below.
                if let Some(e) = containing(&maps, r.addr) {
                    push_range(&mut space.stack_ranges, (e.start, e.end));
                }
                continue;
            }
            Kind::Stack => {
                push_range(
                    &mut space.stack_ranges,
                    (r.addr, r.addr.saturating_add(r.size)),
                );
                continue;
            }
            Kind::OwnRegion => {
                push_range(
                    &mut space.excluded_ranges,
                    (r.addr, r.addr.saturating_add(r.size)),
                );
                continue;
            }
            _ => continue,
        };
        events.push(AllocEvent { seq: r.seq, op });
    }
    if let Some((lo, hi)) = brk.filter(|&(lo, hi)| hi > lo) {
        push_range(&mut space.heap_ranges, (lo, hi));
    }
    let markers = (log.header.marker_base, log.header.marker_span);
    if markers.1 != 0 {
        push_range(
            &mut space.excluded_ranges,
            (markers.0, markers.0 + markers.1),
        );
    }
    // The runtime library's own segments are announced as OWN_REGION: they are not
    // the program's static data.
    let excluded = space.excluded_ranges.clone();
    space.static_segments.retain(|s| {
        !excluded
            .iter()
            .any(|&(lo, hi)| lo <= s.start && s.end <= hi)
    });
    // A stack seen both whole (STACK, maps) and as part of a merged maps line is
    // listed once per distinct range; that is harmless for classification.
    // A heap range must not swallow a stack or a static segment (defensive: maps of
    // unusual processes).
    space.heap_ranges.retain(|&(lo, hi)| {
        !space.stack_ranges.iter().any(|&(s, e)| s < hi && lo < e)
            && !space
                .static_segments
                .iter()
                .any(|s| s.start < hi && lo < s.end)
    });
    // An exec attempt is followed by a failure report (errno) from the same thread
    // when the call returned; the others replaced the program.
    let execs = log
        .execs
        .iter()
        .enumerate()
        .filter(|&(i, e)| {
            e.errno == 0
                && log.execs[i + 1..]
                    .iter()
                    .find(|f| f.tid == e.tid)
                    .is_none_or(|f| f.errno == 0)
        })
        .map(|(_, e)| e.path.clone())
        .collect();
    ProfileInputs {
        space,
        events,
        modules: names,
        threshold,
        markers,
        children: log.children(),
        forks: log.forks(),
        execs,
        mapping_cuts: log.mapping_cuts(),
        outside: syscalls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_format::alloclog::{Header, Record, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ_WRITE};
    use hugetune_model::categorize::Categorizer;
    use hugetune_model::category::Category;

    fn rec(kind: Kind, seq: u64, addr: u64, size: u64, arg: u64, arg2: u64) -> Record {
        Record {
            kind,
            flags: 0,
            tid: 1,
            seq,
            time_ns: seq,
            addr,
            size,
            arg,
            arg2,
            caller: 0x40_1000,
        }
    }

    /// A log header of pid 1; `syscalls`: the qemu plugin's system-call log.
    fn header(syscalls: bool) -> Header {
        Header {
            version: 2,
            pid: 1,
            ppid: 0,
            start_ns: 0,
            marker_base: 1 << 63,
            marker_span: 1 << 20,
            threshold: 131072,
            exec_gen: 0,
            tsc_clock: false,
            syscalls,
        }
    }

    /// A system-call log (formats.md §2.10): the brk heap is heap-small, a
    /// MAP_FIXED read-write mapping over a reservation and a reservation that
    /// mprotect opens are heap-large, the reservation itself is other.
    #[test]
    fn a_system_call_log_categorizes_brk_fixed_mappings_and_opened_reservations() {
        const MB: u64 = 1 << 20;
        let anon = (MAP_PRIVATE | MAP_ANONYMOUS) as u64;
        let rw = (PROT_READ_WRITE as u64) << 32;
        let fixed = 0x10;
        let (r1, r2) = (0xc0_0000_0000u64, 0xd0_0000_0000u64);
        let log = AllocLog {
            header: header(true),
            records: vec![
                rec(Kind::Brk, 1, 0x4a_0000, 0, 0, 0),
                rec(Kind::Brk, 2, 0x4c_0000, 0, 0x4c_0000, 0),
                rec(
                    Kind::Mmap,
                    3,
                    r1,
                    64 * MB,
                    anon,
                    u32::MAX as u64 * (1 << 32),
                ),
                rec(Kind::Mmap, 4, r1, 4 * MB, rw | anon | fixed, 0),
                rec(Kind::Mmap, 5, r2, 64 * MB, anon, 0),
                rec(
                    Kind::RangeCall,
                    6,
                    r2 + 8 * MB,
                    2 * MB,
                    PROT_READ_WRITE as u64,
                    0,
                ),
            ],
            modules: vec![],
            maps: vec![],
            execs: vec![],
            hole_bytes: 0,
        };
        let inputs = inputs_from_log(&log);
        assert!(inputs.outside);
        assert_eq!(inputs.space.heap_ranges, vec![(0x4a_0000, 0x4c_0000)]);
        let mut c = Categorizer::new(inputs.space.clone(), inputs.threshold);
        let mut at = |seq: u64, addr: u64| {
            for ev in inputs.events.iter().filter(|e| e.seq == seq) {
                c.apply(ev);
            }
            let id = c.classify(addr).unwrap();
            c.object(id).category
        };
        assert_eq!(at(2, 0x4b_0000), Category::HeapSmall);
        assert_eq!(at(3, r1 + MB), Category::Other, "a PROT_NONE reservation");
        assert_eq!(at(4, r1 + MB), Category::HeapLarge, "MAP_FIXED read-write");
        assert_eq!(at(5, r2 + 9 * MB), Category::Other);
        assert_eq!(
            at(6, r2 + 9 * MB),
            Category::HeapLarge,
            "opened by mprotect"
        );
        // The runtime library's logs keep their rule: MAP_FIXED is not backable.
        let mut own = log.clone();
        own.header.syscalls = false;
        let inputs = inputs_from_log(&own);
        assert!(!inputs.outside);
        let mut c = Categorizer::new(inputs.space.clone(), inputs.threshold);
        for ev in &inputs.events {
            c.apply(ev);
        }
        let id = c.classify(r1 + MB).unwrap();
        assert_eq!(c.object(id).category, Category::Other);
    }

    /// Mappings the runtime library cannot back are `other` either way; a
    /// file-backed or shared one is marked so (never the JVM's heap), an
    /// anonymous private one (a committed heap) is not.
    #[test]
    fn file_and_shared_mappings_are_told_from_anonymous_ones() {
        const MB: u64 = 1 << 20;
        let rw = (PROT_READ_WRITE as u64) << 32;
        let (anon_fixed, file, shared_anon) = (0xa0_0000_0000u64, 0xb0_0000_0000, 0xc0_0000_0000);
        let log = AllocLog {
            header: header(false),
            records: vec![
                rec(
                    Kind::Mmap,
                    1,
                    anon_fixed,
                    64 * MB,
                    rw | (MAP_PRIVATE | MAP_ANONYMOUS) as u64 | 0x10,
                    0,
                ),
                // fd 3, MAP_SHARED: a memory-mapped file.
                rec(Kind::Mmap, 2, file, 64 * MB, (1u64 << 32) | 0x01, 3 << 32),
                rec(
                    Kind::Mmap,
                    3,
                    shared_anon,
                    64 * MB,
                    rw | 0x01 | MAP_ANONYMOUS as u64,
                    u32::MAX as u64 * (1 << 32),
                ),
            ],
            modules: vec![],
            maps: vec![],
            execs: vec![],
            hole_bytes: 0,
        };
        let vias: Vec<(u64, AllocVia)> = inputs_from_log(&log)
            .events
            .iter()
            .filter_map(|e| match e.op {
                AllocOp::Alloc { addr, via, .. } => Some((addr, via)),
                _ => None,
            })
            .collect();
        assert_eq!(
            vias,
            vec![
                (anon_fixed, AllocVia::Mmap),
                (file, AllocVia::MmapFile),
                (shared_anon, AllocVia::MmapFile)
            ]
        );
    }
}
