//! Reader of the runtime library's allocation log (docs/formats.md §2), versions 1
//! and 2 (the runtime library writes version 2).
//!
//! The log is untrusted input: every length and offset is checked, and problems
//! come back as errors naming the file, the offset and what was wrong.
//!
//! Version 2 is a sequence of per-thread chunks of delta-encoded events. Without
//! markers the events carry no global sequence number: they are put in order by
//! time (each chunk's order kept) and numbered 1..N here, so that every consumer
//! sees `seq` exactly as in version 1. Times are TSC ticks converted to
//! CLOCK_MONOTONIC nanoseconds with the calibration pairs of the log.

use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"HTALLOC\0";
/// The version the runtime library writes.
pub const VERSION: u32 = 2;
const V1_HEADER_SIZE: usize = 64;
const V2_HEADER_SIZE: usize = 128;
const V1_RECORD_SIZE: usize = 64;
const CHUNK_HEADER_SIZE: usize = 40;
const CHUNK_TAG: u32 = 0x4b43_5448; // "HTCK"
/// Header flags (version 2).
const HF_SEQ: u32 = 1;
const HF_TSC: u32 = 2;
/// Written by the QEMU plugin from the guest's system calls (section 2.10).
const HF_SYSCALLS: u32 = 4;
/// Upper bound on a blob payload (a /proc/self/maps of a huge process is < 64 MiB).
const MAX_BLOB: u64 = 256 << 20;

/// `Record::flags`: recorded before the runtime library was initialized (no marker).
pub const FLAG_PREINIT: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Malloc,
    Calloc,
    Realloc,
    Free,
    PosixMemalign,
    AlignedAlloc,
    Memalign,
    Valloc,
    Pvalloc,
    Mmap,
    Munmap,
    Mremap,
    Reallocarray,
    /// mprotect or madvise of a range (section 2.3): `arg` = call << 32 | prot
    /// or advice (call 0: mprotect, 1: madvise), `arg2` = the result.
    RangeCall,
    Thread,
    Module,
    Maps,
    OwnRegion,
    Stack,
    Fork,
    Exec,
    /// A brk system call (QEMU plugin logs only, section 2.10): `addr` = the
    /// break after it, `arg` = the break asked for (0: a query).
    Brk,
}

impl Kind {
    fn from_u16(k: u16) -> Option<Kind> {
        use Kind::*;
        Some(match k {
            1 => Malloc,
            2 => Calloc,
            3 => Realloc,
            4 => Free,
            5 => PosixMemalign,
            6 => AlignedAlloc,
            7 => Memalign,
            8 => Valloc,
            9 => Pvalloc,
            10 => Mmap,
            11 => Munmap,
            12 => Mremap,
            13 => Reallocarray,
            14 => RangeCall,
            20 => Thread,
            21 => Module,
            22 => Maps,
            23 => OwnRegion,
            24 => Stack,
            25 => Fork,
            26 => Exec,
            27 => Brk,
            _ => return None,
        })
    }

    /// The kind's number in the log.
    pub fn code(self) -> u16 {
        use Kind::*;
        match self {
            Malloc => 1,
            Calloc => 2,
            Realloc => 3,
            Free => 4,
            PosixMemalign => 5,
            AlignedAlloc => 6,
            Memalign => 7,
            Valloc => 8,
            Pvalloc => 9,
            Mmap => 10,
            Munmap => 11,
            Mremap => 12,
            Reallocarray => 13,
            RangeCall => 14,
            Thread => 20,
            Module => 21,
            Maps => 22,
            OwnRegion => 23,
            Stack => 24,
            Fork => 25,
            Exec => 26,
            Brk => 27,
        }
    }

    fn is_blob(self) -> bool {
        matches!(self, Kind::Module | Kind::Maps | Kind::Exec)
    }

    /// A hooked call of the malloc family that returns a new object.
    pub fn is_malloc_alloc(self) -> bool {
        use Kind::*;
        matches!(
            self,
            Malloc | Calloc | PosixMemalign | AlignedAlloc | Memalign | Valloc | Pvalloc
        )
    }

    /// A hooked call of the program (as opposed to what the library reports about
    /// the process: THREAD, STACK, MODULE, MAPS, OWN_REGION).
    pub fn is_hooked_call(self) -> bool {
        !matches!(
            self,
            Kind::Thread | Kind::Stack | Kind::Module | Kind::Maps | Kind::OwnRegion
        )
    }

    /// Which of size, arg, arg2, caller a version-2 event of this kind stores.
    fn v2_fields(self) -> u8 {
        use Kind::*;
        match self {
            Malloc => F_SIZE | F_CALLER,
            Realloc | AlignedAlloc | Memalign | Valloc | Pvalloc | Munmap | Reallocarray => {
                F_SIZE | F_ARG | F_CALLER
            }
            Free => F_CALLER,
            Thread => 0,
            Module | Maps => F_SIZE | F_ARG,
            OwnRegion => F_SIZE,
            Stack => F_SIZE | F_ARG | F_ARG2,
            Fork | Brk => F_ARG | F_CALLER,
            Calloc | PosixMemalign | Mmap | Mremap | RangeCall | Exec => {
                F_SIZE | F_ARG | F_ARG2 | F_CALLER
            }
        }
    }
}

const F_SIZE: u8 = 1;
const F_ARG: u8 = 2;
const F_ARG2: u8 = 4;
const F_CALLER: u8 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub pid: u32,
    pub ppid: u32,
    pub start_ns: u64,
    pub marker_base: u64,
    pub marker_span: u64,
    pub threshold: u64,
    /// How many execs this pid made before the image that wrote the log.
    pub exec_gen: u32,
    /// Event times were TSC ticks (converted to ns by the reader).
    pub tsc_clock: bool,
    /// The QEMU plugin wrote the log from the guest's system calls, not the
    /// runtime library from libc calls (section 2.10).
    pub syscalls: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub flags: u16,
    pub tid: u32,
    pub seq: u64,
    pub time_ns: u64,
    pub addr: u64,
    pub size: u64,
    pub arg: u64,
    pub arg2: u64,
    pub caller: u64,
}

/// mmap flags and protections the backable-mapping predicate reads (Linux x86-64
/// and aarch64 values).
pub const MAP_PRIVATE: u32 = 0x02;
pub const MAP_ANONYMOUS: u32 = 0x20;
pub const MAP_POPULATE: u32 = 0x8000;
pub const PROT_READ_WRITE: u32 = 0x3;

impl Record {
    /// An MMAP record of an anonymous private read-write mapping with no address
    /// wanted: the mappings the runtime library backs at mmap time when the plan
    /// gives their site (or heap-large) a backing. The same predicate as
    /// `ht_mapped_eligible` in runtime/src/mapped.c (formats.md §3, "Mapped
    /// memory"): MAP_PRIVATE | MAP_ANONYMOUS with at most MAP_POPULATE besides,
    /// PROT_READ | PROT_WRITE, offset 0. Files, shared memory, MAP_FIXED,
    /// PROT_NONE reservations, stacks, MAP_NORESERVE and the program's own
    /// MAP_HUGETLB are not.
    pub fn is_backable_mapping(&self) -> bool {
        if self.kind != Kind::Mmap {
            return false;
        }
        let prot = (self.arg >> 32) as u32;
        let flags = self.arg as u32;
        let off_pages = self.arg2 & 0xffff_ffff;
        let allowed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
        flags & MAP_ANONYMOUS != 0
            && flags & 0x0f == MAP_PRIVATE
            && flags & !allowed == 0
            && prot == PROT_READ_WRITE
            && off_pages == 0
    }

    /// An MMAP record of memory an outside applier can back (section 2.10): an
    /// anonymous private read-write mapping, wherever it was placed (`MAP_FIXED`
    /// over a `PROT_NONE` reservation is how the Go runtime maps its heap),
    /// except stacks and the program's own hugetlb or shared memory.
    pub fn is_anon_rw_mapping(&self) -> bool {
        if self.kind != Kind::Mmap {
            return false;
        }
        const MAP_GROWSDOWN: u32 = 0x100;
        const MAP_STACK: u32 = 0x20000;
        const MAP_HUGETLB: u32 = 0x40000;
        let prot = (self.arg >> 32) as u32;
        let flags = self.arg as u32;
        flags & MAP_ANONYMOUS != 0
            && flags & 0x0f == MAP_PRIVATE
            && flags & (MAP_GROWSDOWN | MAP_STACK | MAP_HUGETLB) == 0
            && prot == PROT_READ_WRITE
    }

    /// Whether the runtime library made a marker load for this record (section 2.4).
    pub fn has_marker(&self, header: &Header) -> bool {
        header.marker_span != 0 && self.kind.is_hooked_call() && self.flags & FLAG_PREINIT == 0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub filesz: u64,
    pub flags: u32,
}

pub const PF_X: u32 = 1;
pub const PF_W: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub path: String,
    pub bias: u64,
    pub segments: Vec<Segment>,
    /// Sequence number of the MODULE record (snapshots at start and at exit).
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsSnapshot {
    pub seq: u64,
    pub at_exit: bool,
    pub text: String,
}

/// An exec the process attempted (version 2): the program continues in a new image
/// whose log has the same pid and `exec_gen` = `new_gen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecEvent {
    pub seq: u64,
    pub tid: u32,
    pub path: String,
    pub new_gen: u32,
    /// 0: written before the call; else the errno of a call that failed.
    pub errno: u32,
    pub caller: u64,
}

/// A whole allocation log, records sorted by `seq` (program order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocLog {
    pub header: Header,
    pub records: Vec<Record>,
    pub modules: Vec<Module>,
    pub maps: Vec<MapsSnapshot>,
    pub execs: Vec<ExecEvent>,
    /// Zero-filled bytes between chunks: space a writer reserved but never wrote
    /// (it was killed while writing). Their events are lost.
    pub hole_bytes: u64,
}

impl AllocLog {
    /// Pids of the children this process forked (successful FORK events).
    pub fn children(&self) -> Vec<u32> {
        self.records
            .iter()
            .filter(|r| r.kind == Kind::Fork && r.arg != 0 && r.arg < u32::MAX as u64)
            .map(|r| r.arg as u32)
            .collect()
    }

    /// Whether the program forked (the planner avoids private hugetlb memory then).
    pub fn forks(&self) -> bool {
        self.records.iter().any(|r| r.kind == Kind::Fork)
    }

    /// How often the program cut one of its own backable mappings of at least
    /// 2 MB (those the runtime library may put on hugetlb pages) where the
    /// library would have to turn a hugetlb-backed one into plain memory first
    /// (runtime/src/mapped.c, `ht_mapped_before`): a munmap or `MAP_FIXED` mmap
    /// covering part of it, any mremap of it, any mprotect touching it, and any
    /// madvise touching it other than the access hints and `MADV_FREE`. A cut
    /// mapping is plain memory from then on and counts once.
    pub fn mapping_cuts(&self) -> u64 {
        const HUGE: u64 = 2 << 20;
        // madvise advices that need no cut (hooks.c, range_call_slow).
        const NO_CUT: [u32; 8] = [0, 1, 2, 3, 8, 14, 15, 25];
        let failed = |a: u64| a >= u64::MAX - 4095;
        let mut live: std::collections::BTreeMap<u64, u64> = Default::default();
        let mut cuts = 0;
        // Mappings [lo, hi) touches; whole: those it covers end to end go
        // quietly, the others count as cut.
        let mut touch =
            |live: &mut std::collections::BTreeMap<u64, u64>, lo: u64, len: u64, whole_ok: bool| {
                let hi = lo.saturating_add(len.div_ceil(4096) * 4096);
                let hit: Vec<(u64, u64)> = live
                    .range(..hi)
                    .filter(|&(&s, &e)| e > lo && s < hi)
                    .map(|(&s, &e)| (s, e))
                    .collect();
                for (s, e) in hit {
                    live.remove(&s);
                    if !(whole_ok && lo <= s && hi >= e) {
                        cuts += 1;
                    }
                }
            };
        for r in &self.records {
            match r.kind {
                Kind::Mmap if failed(r.addr) => {}
                Kind::Mmap if r.is_backable_mapping() => {
                    let len = r.size.div_ceil(4096) * 4096;
                    if len >= HUGE {
                        live.insert(r.addr, r.addr.saturating_add(len));
                    }
                }
                Kind::Mmap => touch(&mut live, r.addr, r.size, true),
                Kind::Munmap if r.arg == 0 => touch(&mut live, r.addr, r.size, true),
                Kind::Mremap => touch(&mut live, r.arg, r.arg2.max(1), false),
                Kind::RangeCall if r.arg2 == 0 => {
                    let madvise = r.arg >> 32 == 1;
                    if !(madvise && NO_CUT.contains(&(r.arg as u32))) {
                        touch(&mut live, r.addr, r.size, false);
                    }
                }
                _ => {}
            }
        }
        cuts
    }
}

/// What is wrong with an allocation log, and where.
#[derive(Debug, thiserror::Error)]
#[error("allocation log {}: at byte {offset}: {what}", path.display())]
pub struct LogError {
    pub path: PathBuf,
    pub offset: usize,
    pub what: String,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn unzz(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

/// An event as decoded, before ordering and time conversion.
struct Raw {
    rec: Record,
    /// Blob payload: offset and length in the file.
    payload: Option<(usize, usize)>,
    offset: usize,
    /// Version 2 without seqs: the order key (running maximum of the times in the
    /// chunk, chunk index, index in the chunk).
    key: (u64, u32, u32),
}

impl AllocLog {
    pub fn read(path: &Path) -> Result<AllocLog, LogError> {
        let bytes = std::fs::read(path).map_err(|e| LogError {
            path: path.to_path_buf(),
            offset: 0,
            what: format!("cannot be read: {e}"),
        })?;
        Self::parse(&bytes, path)
    }

    pub fn parse(b: &[u8], path: &Path) -> Result<AllocLog, LogError> {
        let err = |offset: usize, what: String| LogError {
            path: path.to_path_buf(),
            offset,
            what,
        };
        if b.len() < V1_HEADER_SIZE {
            return Err(err(
                0,
                format!("file is {} bytes, shorter than the 64-byte header", b.len()),
            ));
        }
        if &b[0..8] != MAGIC {
            return Err(err(0, "not a hugetune allocation log (bad magic)".into()));
        }
        let version = u32_at(b, 8);
        let hsize = u32_at(b, 12) as usize;
        let expected = match version {
            1 => V1_HEADER_SIZE,
            2 => V2_HEADER_SIZE,
            _ => {
                return Err(err(
                    8,
                    format!("unsupported version {version} (this hugetune reads versions 1 and 2)"),
                ))
            }
        };
        if hsize != expected {
            return Err(err(
                12,
                format!("header size {hsize}, expected {expected} for version {version}"),
            ));
        }
        if b.len() < hsize {
            return Err(err(
                0,
                format!(
                    "file is {} bytes, shorter than the {hsize}-byte header",
                    b.len()
                ),
            ));
        }
        let flags = if version == 2 { u32_at(b, 56) } else { HF_SEQ };
        if flags & !(HF_SEQ | HF_TSC | HF_SYSCALLS) != 0 {
            return Err(err(56, format!("unknown header flags {flags:#x}")));
        }
        let header = Header {
            version,
            pid: u32_at(b, 16),
            ppid: u32_at(b, 20),
            start_ns: u64_at(b, 24),
            marker_base: u64_at(b, 32),
            marker_span: u64_at(b, 40),
            threshold: u64_at(b, 48),
            exec_gen: if version == 2 { u32_at(b, 60) } else { 0 },
            tsc_clock: flags & HF_TSC != 0,
            syscalls: flags & HF_SYSCALLS != 0,
        };
        if header.marker_span != 0 && !header.marker_span.is_power_of_two() {
            return Err(err(
                40,
                format!("marker span {} is not a power of two", header.marker_span),
            ));
        }
        let (raws, hole_bytes) = if version == 1 {
            (parse_v1(b, &err)?, 0)
        } else {
            parse_v2(b, &header, flags & HF_SEQ != 0, &err)?
        };
        let mut records = Vec::new();
        let mut modules = Vec::new();
        let mut maps = Vec::new();
        let mut execs = Vec::new();
        for raw in raws {
            let r = raw.rec;
            match (r.kind, raw.payload) {
                (Kind::Module, Some((o, n))) => {
                    modules.push(parse_module(&b[o..o + n], &r).map_err(|w| err(raw.offset, w))?)
                }
                (Kind::Maps, Some((o, n))) => maps.push(MapsSnapshot {
                    seq: r.seq,
                    at_exit: r.arg == 1,
                    text: String::from_utf8_lossy(&b[o..o + n]).into_owned(),
                }),
                (Kind::Exec, Some((o, n))) => {
                    let p = &b[o..o + n];
                    let end = p.iter().position(|&c| c == 0).unwrap_or(p.len());
                    execs.push(ExecEvent {
                        seq: r.seq,
                        tid: r.tid,
                        path: String::from_utf8_lossy(&p[..end]).into_owned(),
                        new_gen: r.arg.min(u32::MAX as u64) as u32,
                        errno: r.arg2.min(u32::MAX as u64) as u32,
                        caller: r.caller,
                    });
                    // An exec is also a hooked call (it has a marker).
                    records.push(r);
                }
                _ => records.push(r),
            }
        }
        Ok(AllocLog {
            header,
            records,
            modules,
            maps,
            execs,
            hole_bytes,
        })
    }
}

fn parse_v1(b: &[u8], err: &dyn Fn(usize, String) -> LogError) -> Result<Vec<Raw>, LogError> {
    let mut out = Vec::new();
    let mut o = V1_HEADER_SIZE;
    while o < b.len() {
        if b.len() - o < V1_RECORD_SIZE {
            return Err(err(
                o,
                format!(
                    "truncated record: {} bytes left, a record has 64",
                    b.len() - o
                ),
            ));
        }
        let raw_kind = u16_at(b, o);
        let kind = Kind::from_u16(raw_kind)
            .filter(|k| k.code() <= 23)
            .ok_or_else(|| err(o, format!("unknown record kind {raw_kind}")))?;
        let r = Record {
            kind,
            flags: u16_at(b, o + 2),
            tid: u32_at(b, o + 4),
            seq: u64_at(b, o + 8),
            time_ns: u64_at(b, o + 16),
            addr: u64_at(b, o + 24),
            size: u64_at(b, o + 32),
            arg: u64_at(b, o + 40),
            arg2: u64_at(b, o + 48),
            caller: u64_at(b, o + 56),
        };
        let rec_off = o;
        o += V1_RECORD_SIZE;
        let mut payload = None;
        if kind.is_blob() {
            if r.size > MAX_BLOB {
                return Err(err(
                    rec_off,
                    format!("blob of {} bytes is implausibly large", r.size),
                ));
            }
            let len = r.size as usize;
            let padded = len.div_ceil(8) * 8;
            if b.len() - o < padded {
                return Err(err(
                    o,
                    format!(
                        "truncated blob: {} bytes declared, {} left",
                        padded,
                        b.len() - o
                    ),
                ));
            }
            payload = Some((o, len));
            o += padded;
        }
        out.push(Raw {
            rec: r,
            payload,
            offset: rec_off,
            key: (0, 0, 0),
        });
    }
    out.sort_by_key(|r| r.rec.seq);
    Ok(out)
}

/// The log's tick clock against nanoseconds: the (ticks, ns) pairs with the
/// lowest and the highest ticks (not `hugetune_host::calibrate::Calibration`).
#[derive(Default)]
struct ClockFit {
    lo: Option<(u64, u64)>,
    hi: Option<(u64, u64)>,
}

impl ClockFit {
    fn add(&mut self, t: u64, ns: u64) {
        if t == 0 && ns == 0 {
            return;
        }
        if self.lo.is_none_or(|(lt, _)| t < lt) {
            self.lo = Some((t, ns));
        }
        if self.hi.is_none_or(|(ht, _)| t > ht) {
            self.hi = Some((t, ns));
        }
    }

    fn to_ns(&self, t: u64) -> u64 {
        let Some((lt, lns)) = self.lo else { return t };
        let (ht, hns) = self.hi.unwrap_or((lt, lns));
        let dt = t as i128 - lt as i128;
        let ns = if ht > lt {
            lns as i128 + dt * (hns as i128 - lns as i128) / (ht as i128 - lt as i128)
        } else {
            lns as i128 + dt
        };
        ns.clamp(0, u64::MAX as i128) as u64
    }
}

/// Reads `w` little-endian bytes.
fn le(b: &[u8], o: usize, w: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..w].copy_from_slice(&b[o..o + w]);
    u64::from_le_bytes(v)
}

fn parse_v2(
    b: &[u8],
    header: &Header,
    with_seq: bool,
    err: &dyn Fn(usize, String) -> LogError,
) -> Result<(Vec<Raw>, u64), LogError> {
    let mut cal = ClockFit::default();
    cal.add(u64_at(b, 64), u64_at(b, 72));
    cal.add(u64_at(b, 96), u64_at(b, 104));
    let mut events: Vec<Raw> = Vec::new();
    let mut n_chunks = 0u32;
    let mut hole_bytes = 0u64;
    let mut o = V2_HEADER_SIZE;
    while o < b.len() {
        if b[o..(o + 8).min(b.len())].iter().all(|&c| c == 0) {
            // A hole: a writer reserved space and died before writing it.
            let start = o;
            while o < b.len() && b[o..(o + 8).min(b.len())].iter().all(|&c| c == 0) {
                o = (o + 8).min(b.len());
            }
            hole_bytes += (o - start) as u64;
            continue;
        }
        if b.len() - o < CHUNK_HEADER_SIZE {
            return Err(err(
                o,
                format!(
                    "truncated chunk header: {} bytes left, a header has {CHUNK_HEADER_SIZE}",
                    b.len() - o
                ),
            ));
        }
        let tag = u32_at(b, o);
        if tag != CHUNK_TAG {
            return Err(err(o, format!("bad chunk tag {tag:#x}")));
        }
        let tid = u32_at(b, o + 4);
        let bytes = u32_at(b, o + 8) as usize;
        let n_events = u32_at(b, o + 12) as usize;
        let skip = u32_at(b, o + 16) as usize;
        cal.add(u64_at(b, o + 24), u64_at(b, o + 32));
        let total = CHUNK_HEADER_SIZE + bytes.div_ceil(8) * 8;
        if total > b.len() - o {
            return Err(err(
                o,
                format!(
                    "truncated chunk: {total} bytes declared, {} left",
                    b.len() - o
                ),
            ));
        }
        if skip > n_events {
            return Err(err(
                o + 16,
                format!("chunk skips {skip} events but holds {n_events}"),
            ));
        }
        let end = o + CHUNK_HEADER_SIZE + bytes;
        if n_events > bytes {
            return Err(err(
                o + 12,
                format!("chunk of {bytes} bytes cannot hold {n_events} events"),
            ));
        }
        let chunk_index = n_chunks;
        let mut run_max = 0u64;
        let mut p = o + CHUNK_HEADER_SIZE;
        let (mut prev_seq, mut prev_time, mut prev_addr) = (0u64, 0u64, 0u64);
        let mut last_caller = [0u64; 16];
        for i in 0..n_events {
            if p >= end {
                return Err(err(
                    p,
                    format!("chunk ends after {i} of its {n_events} events"),
                ));
            }
            let ev_off = p;
            let op = b[p];
            let kind = Kind::from_u16((op & 63) as u16)
                .ok_or_else(|| err(p, format!("unknown event kind {}", op & 63)))?;
            let long_time = op & 0x80 != 0;
            let mut q = p + 1;
            let mut dt = 0u64;
            if !long_time {
                if end - q < 2 {
                    return Err(err(p, "event runs past its chunk".into()));
                }
                dt = u16_at(b, q) as u64;
                q += 2;
            }
            let m = kind.v2_fields();
            let nf = with_seq as usize
                + long_time as usize
                + 1
                + (m & F_SIZE != 0) as usize
                + (m & F_ARG != 0) as usize
                + (m & F_ARG2 != 0) as usize
                + (m & F_CALLER != 0) as usize;
            let nb = nf.div_ceil(2);
            if end - q < nb {
                return Err(err(p, "event runs past its chunk".into()));
            }
            let nib = q;
            q += nb;
            let mut v = [0u64; 7];
            for (k, slot) in v.iter_mut().enumerate().take(nf) {
                let w = ((b[nib + k / 2] >> (4 * (k % 2))) & 15) as usize;
                if w > 8 {
                    return Err(err(p, format!("field width {w} (at most 8)")));
                }
                if end - q < w {
                    return Err(err(p, "event runs past its chunk".into()));
                }
                *slot = le(b, q, w);
                q += w;
            }
            let mut k = 0;
            let mut next = || {
                k += 1;
                v[k - 1]
            };
            let seq = if with_seq {
                prev_seq = prev_seq.wrapping_add(unzz(next()));
                prev_seq
            } else {
                0
            };
            if long_time {
                dt = unzz(next());
            }
            prev_time = prev_time.wrapping_add(dt);
            prev_addr = prev_addr.wrapping_add(unzz(next()));
            let size = if m & F_SIZE != 0 { next() } else { 0 };
            let arg = if m & F_ARG != 0 { next() } else { 0 };
            let arg2 = if m & F_ARG2 != 0 { next() } else { 0 };
            let caller = if m & F_CALLER != 0 {
                let c = &mut last_caller[(kind.code() & 15) as usize];
                *c = c.wrapping_add(unzz(next()));
                *c
            } else {
                0
            };
            let mut payload = None;
            if kind.is_blob() {
                if size > MAX_BLOB || size as usize > end - q {
                    return Err(err(p, format!("blob of {size} bytes runs past its chunk")));
                }
                payload = Some((q, size as usize));
                q += size as usize;
            }
            p = q;
            run_max = run_max.max(prev_time);
            if i < skip {
                continue; // already in the file, in an earlier chunk of this thread
            }
            events.push(Raw {
                key: (run_max, chunk_index, i as u32),
                rec: Record {
                    kind,
                    flags: ((op >> 6) & 1) as u16,
                    tid,
                    seq,
                    time_ns: prev_time,
                    addr: prev_addr,
                    size,
                    arg,
                    arg2,
                    caller,
                },
                payload,
                offset: ev_off,
            });
        }
        if p != end {
            return Err(err(
                p,
                format!("{} bytes after the last event of the chunk", end - p),
            ));
        }
        n_chunks += 1;
        o += total;
    }

    // Event order.
    if with_seq {
        events.sort_by_key(|r| r.rec.seq);
    } else {
        // By time, each chunk's order kept: the key is the running maximum of the
        // times within the chunk, ties broken by chunk and position.
        events.sort_unstable_by_key(|e| e.key);
        for (i, e) in events.iter_mut().enumerate() {
            e.rec.seq = i as u64 + 1;
        }
    }
    if header.tsc_clock {
        for e in &mut events {
            e.rec.time_ns = cal.to_ns(e.rec.time_ns);
        }
    }
    Ok((events, hole_bytes))
}

fn parse_module(p: &[u8], r: &Record) -> Result<Module, String> {
    let nul = p
        .iter()
        .position(|&c| c == 0)
        .ok_or("module record without a NUL-terminated path")?;
    let path = String::from_utf8_lossy(&p[..nul]).into_owned();
    let seg_start = (nul + 1).div_ceil(8) * 8;
    let n = r.arg as usize;
    if r.arg > 4096 || seg_start + n * 32 > p.len() {
        return Err(format!(
            "module {path}: {} segments do not fit in its {}-byte record",
            r.arg,
            p.len()
        ));
    }
    let segments = (0..n)
        .map(|i| {
            let o = seg_start + i * 32;
            Segment {
                vaddr: u64_at(p, o),
                memsz: u64_at(p, o + 8),
                filesz: u64_at(p, o + 16),
                flags: u32_at(p, o + 24),
            }
        })
        .collect();
    Ok(Module {
        path,
        bias: r.addr,
        segments,
        seq: r.seq,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Writes a version-1 log, for reader tests.
    pub fn build_log(header: &Header, recs: &[(Record, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&64u32.to_le_bytes());
        b.extend_from_slice(&header.pid.to_le_bytes());
        b.extend_from_slice(&header.ppid.to_le_bytes());
        for v in [
            header.start_ns,
            header.marker_base,
            header.marker_span,
            header.threshold,
            0,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for (r, payload) in recs {
            b.extend_from_slice(&r.kind.code().to_le_bytes());
            b.extend_from_slice(&r.flags.to_le_bytes());
            b.extend_from_slice(&r.tid.to_le_bytes());
            for v in [r.seq, r.time_ns, r.addr, r.size, r.arg, r.arg2, r.caller] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(payload);
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
        }
        b
    }

    fn zz(d: u64) -> u64 {
        (d << 1) ^ ((d as i64 >> 63) as u64)
    }

    /// The runtime library's encoder (runtime/src/enc.h), for reader tests.
    #[derive(Default)]
    pub struct Enc {
        prev_seq: u64,
        prev_time: u64,
        prev_addr: u64,
        last_caller: [u64; 16],
    }

    impl Enc {
        /// Encodes `r` (its `time_ns` is the raw clock value) and its payload.
        pub fn event(&mut self, with_seq: bool, r: &Record, payload: &[u8]) -> Vec<u8> {
            let dt = r.time_ns.wrapping_sub(self.prev_time);
            self.prev_time = r.time_ns;
            let long = dt >= 65536;
            let mut out = vec![r.kind.code() as u8 | ((r.flags as u8 & 1) << 6)];
            if long {
                out[0] |= 0x80;
            } else {
                out.extend_from_slice(&(dt as u16).to_le_bytes());
            }
            let mut v = Vec::new();
            if with_seq {
                v.push(zz(r.seq.wrapping_sub(self.prev_seq)));
                self.prev_seq = r.seq;
            }
            if long {
                v.push(zz(dt));
            }
            v.push(zz(r.addr.wrapping_sub(self.prev_addr)));
            self.prev_addr = r.addr;
            let m = r.kind.v2_fields();
            if m & F_SIZE != 0 {
                v.push(r.size);
            }
            if m & F_ARG != 0 {
                v.push(r.arg);
            }
            if m & F_ARG2 != 0 {
                v.push(r.arg2);
            }
            if m & F_CALLER != 0 {
                let c = &mut self.last_caller[(r.kind.code() & 15) as usize];
                v.push(zz(r.caller.wrapping_sub(*c)));
                *c = r.caller;
            }
            let w: Vec<usize> = v
                .iter()
                .map(|&x| (64 - x.leading_zeros() as usize).div_ceil(8))
                .collect();
            let mut nib = vec![0u8; v.len().div_ceil(2)];
            for (i, &wi) in w.iter().enumerate() {
                nib[i / 2] |= (wi as u8) << (4 * (i % 2));
            }
            out.extend_from_slice(&nib);
            for (x, &wi) in v.iter().zip(&w) {
                out.extend_from_slice(&x.to_le_bytes()[..wi]);
            }
            out.extend_from_slice(payload);
            out
        }
    }

    #[derive(Debug, Clone)]
    pub struct Chunk {
        pub tid: u32,
        pub skip: u32,
        pub cal: (u64, u64),
        pub events: Vec<(Record, Vec<u8>)>,
    }

    /// Writes a version-2 log the way the runtime library does.
    pub fn build_log_v2(h: &Header, with_seq: bool, cal0: (u64, u64), chunks: &[Chunk]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&128u32.to_le_bytes());
        b.extend_from_slice(&h.pid.to_le_bytes());
        b.extend_from_slice(&h.ppid.to_le_bytes());
        for v in [h.start_ns, h.marker_base, h.marker_span, h.threshold] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let flags = (with_seq as u32) * HF_SEQ
            + (h.tsc_clock as u32) * HF_TSC
            + (h.syscalls as u32) * HF_SYSCALLS;
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&h.exec_gen.to_le_bytes());
        for v in [cal0.0, cal0.1, 0, 0, 0, 0, 0, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for c in chunks {
            let mut enc = Enc::default();
            let mut body = Vec::new();
            for (r, payload) in &c.events {
                body.extend(enc.event(with_seq, r, payload));
            }
            b.extend_from_slice(&CHUNK_TAG.to_le_bytes());
            b.extend_from_slice(&c.tid.to_le_bytes());
            b.extend_from_slice(&(body.len() as u32).to_le_bytes());
            b.extend_from_slice(&(c.events.len() as u32).to_le_bytes());
            b.extend_from_slice(&c.skip.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&c.cal.0.to_le_bytes());
            b.extend_from_slice(&c.cal.1.to_le_bytes());
            b.extend(body);
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
        }
        b
    }

    fn rec(kind: Kind, seq: u64, addr: u64, size: u64, arg: u64) -> Record {
        Record {
            kind,
            flags: 0,
            tid: 7,
            seq,
            time_ns: seq * 10,
            addr,
            size,
            arg,
            arg2: 0,
            caller: if kind.v2_fields() & F_CALLER != 0 {
                0x1234
            } else {
                0
            },
        }
    }

    #[test]
    fn mapping_cuts_follow_the_runtime_librarys_rule() {
        const MB: u64 = 1 << 20;
        let map = |seq, addr, size, flags: u32| Record {
            arg: (PROT_READ_WRITE as u64) << 32 | flags as u64,
            ..rec(Kind::Mmap, seq, addr, size, 0)
        };
        let anon = MAP_PRIVATE | MAP_ANONYMOUS;
        let call = |seq, addr, size, madvise: u64, v: u64| {
            rec(Kind::RangeCall, seq, addr, size, madvise << 32 | v)
        };
        let log = |records| AllocLog {
            header: header(),
            records,
            modules: vec![],
            maps: vec![],
            execs: vec![],
            hole_bytes: 0,
        };
        let a = 0x4000_0000;
        // Whole munmap, hints, MADV_FREE, small mappings, other memory: no cut.
        let quiet = log(vec![
            map(1, a, 8 * MB + 5, anon),
            call(2, a, 8 * MB, 1, 14),
            call(3, a + MB, 4096, 1, 8),
            map(4, 0x9000_0000, MB, anon),
            munmap(5, 0x9000_0000 + 4096, 4096),
            call(6, 0x7000_0000, 4096, 0, 1),
            munmap(7, a, 8 * MB + 5),
            call(8, a, 4096, 0, 1), // after the munmap: not the program's mapping any more
        ]);
        assert_eq!(quiet.mapping_cuts(), 0);
        let fixed = 0x10 | MAP_PRIVATE | MAP_ANONYMOUS;
        let cut = log(vec![
            map(1, a, 8 * MB, anon),
            munmap(2, a + 3 * MB + 4096, MB), // partial munmap
            munmap(3, a, 8 * MB),
            map(4, a, 8 * MB, anon),
            map(5, a + 2 * MB, MB, fixed), // MAP_FIXED over part
            map(6, 0x8000_0000, 4 * MB, anon),
            Record {
                arg2: 4 * MB,
                ..rec(Kind::Mremap, 7, 0x8800_0000, 8 * MB, 0x8000_0000)
            },
            map(8, 0x9000_0000, 4 * MB, anon),
            call(9, 0x9000_0000 + MB, 4096, 0, 1), // mprotect
            call(10, 0x9000_0000 + 2 * MB, 4096, 1, 4), // already plain memory: counts once
            map(11, 0xa000_0000, 4 * MB, anon),
            call(12, 0xa000_0000, 64 << 10, 1, 4), // MADV_DONTNEED
            Record {
                arg2: (-22i64) as u64, // a failed madvise cuts nothing
                ..call(13, 0xb000_0000, 4096, 1, 4)
            },
        ]);
        assert_eq!(cut.mapping_cuts(), 5);
    }

    fn munmap(seq: u64, addr: u64, size: u64) -> Record {
        rec(Kind::Munmap, seq, addr, size, 0)
    }

    fn header() -> Header {
        Header {
            version: 1,
            pid: 42,
            ppid: 1,
            start_ns: 5,
            marker_base: 0x1000_0000,
            marker_span: 1 << 20,
            threshold: 131072,
            exec_gen: 0,
            tsc_clock: false,
            syscalls: false,
        }
    }

    fn module_payload() -> Vec<u8> {
        let mut module = b"/bin/prog\0".to_vec();
        while !module.len().is_multiple_of(8) {
            module.push(0);
        }
        for v in [0x1000u64, 0x2000, 0x1800] {
            module.extend_from_slice(&v.to_le_bytes());
        }
        module.extend_from_slice(&(PF_W | 4).to_le_bytes());
        module.extend_from_slice(&0u32.to_le_bytes());
        module
    }

    #[test]
    fn round_trip_sorted_by_seq_with_blobs() {
        let module = module_payload();
        let maps = b"00400000-00401000 r-xp 00000000 00:00 0 /bin/prog\n".to_vec();
        let recs = vec![
            (rec(Kind::Free, 3, 0x5000, 0, 0), vec![]),
            (rec(Kind::Malloc, 2, 0x5000, 100, 0), vec![]),
            (
                rec(Kind::Module, 1, 0x5555_0000_0000, module.len() as u64, 1),
                module.clone(),
            ),
            (rec(Kind::Maps, 4, 0, maps.len() as u64, 1), maps.clone()),
        ];
        let b = build_log(&header(), &recs);
        let log = AllocLog::parse(&b, Path::new("t.log")).unwrap();
        assert_eq!(log.header, header());
        assert_eq!(
            log.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert_eq!(log.modules.len(), 1);
        assert_eq!(log.modules[0].path, "/bin/prog");
        assert_eq!(log.modules[0].bias, 0x5555_0000_0000);
        assert_eq!(
            log.modules[0].segments[0],
            Segment {
                vaddr: 0x1000,
                memsz: 0x2000,
                filesz: 0x1800,
                flags: PF_W | 4
            }
        );
        assert!(log.maps[0].at_exit);
        assert!(log.maps[0].text.contains("/bin/prog"));
    }

    fn v2_header(tsc: bool, markers: bool) -> Header {
        Header {
            version: 2,
            marker_base: if markers { 0x1000_0000 } else { 0 },
            marker_span: if markers { 1 << 20 } else { 0 },
            exec_gen: 3,
            tsc_clock: tsc,
            syscalls: false,
            ..header()
        }
    }

    #[test]
    fn a_system_call_log_reads_its_flag_brk_and_fixed_mappings() {
        let h = Header {
            syscalls: true,
            ..v2_header(false, true)
        };
        let ev = |kind, seq, addr, size, arg| Record {
            tid: 7,
            time_ns: 100 + seq,
            caller: 0x40_1234,
            ..rec(kind, seq, addr, size, arg)
        };
        let fixed = (PROT_READ_WRITE as u64) << 32 | (MAP_PRIVATE | MAP_ANONYMOUS | 0x10) as u64;
        let chunks = vec![Chunk {
            tid: 7,
            skip: 0,
            cal: (0, 0),
            events: vec![
                (ev(Kind::Brk, 1, 0x4a_0000, 0, 0), vec![]),
                (ev(Kind::Brk, 2, 0x4c_1000, 0, 0x4c_1000), vec![]),
                (ev(Kind::Mmap, 3, 0xc0_0000_0000, 4 << 20, fixed), vec![]),
            ],
        }];
        let b = build_log_v2(&h, true, (0, 0), &chunks);
        let log = AllocLog::parse(&b, Path::new("t.log")).unwrap();
        assert!(log.header.syscalls);
        let brk = &log.records[1];
        assert_eq!(
            (brk.kind, brk.addr, brk.arg, brk.caller),
            (Kind::Brk, 0x4c_1000, 0x4c_1000, 0x40_1234)
        );
        assert!(brk.has_marker(&log.header));
        let m = &log.records[2];
        assert!(m.is_anon_rw_mapping() && !m.is_backable_mapping());
        // A log without the flag reads as the runtime library's.
        let b = build_log_v2(&v2_header(false, true), true, (0, 0), &chunks);
        assert!(
            !AllocLog::parse(&b, Path::new("t.log"))
                .unwrap()
                .header
                .syscalls
        );
    }

    #[test]
    fn v2_without_seqs_is_ordered_by_time_keeping_each_chunk_in_order() {
        let h = v2_header(false, false);
        let ev = |kind, tid, t, addr| Record {
            tid,
            time_ns: t,
            ..rec(kind, 0, addr, 16, 0)
        };
        // Thread 7 allocates at t=100 and frees at 300; thread 8 allocates at 200.
        // Thread 9's chunk has equal times: its order must be kept.
        let chunks = vec![
            Chunk {
                tid: 7,
                skip: 0,
                cal: (0, 0),
                events: vec![
                    (ev(Kind::Malloc, 7, 100, 0xa000), vec![]),
                    (ev(Kind::Free, 7, 300, 0xa000), vec![]),
                ],
            },
            Chunk {
                tid: 8,
                skip: 0,
                cal: (0, 0),
                events: vec![(ev(Kind::Malloc, 8, 200, 0xb000), vec![])],
            },
            Chunk {
                tid: 9,
                skip: 0,
                cal: (0, 0),
                events: vec![
                    (ev(Kind::Malloc, 9, 250, 0xc000), vec![]),
                    (ev(Kind::Free, 9, 250, 0xc000), vec![]),
                ],
            },
        ];
        let b = build_log_v2(&h, false, (0, 0), &chunks);
        let log = AllocLog::parse(&b, Path::new("t.log")).unwrap();
        assert_eq!(log.header, h);
        let got: Vec<(u64, u32, u64, Kind)> = log
            .records
            .iter()
            .map(|r| (r.seq, r.tid, r.time_ns, r.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 7, 100, Kind::Malloc),
                (2, 8, 200, Kind::Malloc),
                (3, 9, 250, Kind::Malloc),
                (4, 9, 250, Kind::Free),
                (5, 7, 300, Kind::Free),
            ]
        );
    }

    #[test]
    fn v2_skipped_events_long_times_tsc_conversion_and_blobs() {
        let h = v2_header(true, true);
        let module = module_payload();
        let r = |kind, seq, t, addr, size, arg| Record {
            time_ns: t,
            ..rec(kind, seq, addr, size, arg)
        };
        let exec_path = b"/bin/next\0".to_vec();
        let exec = Record {
            arg2: 0,
            caller: 0x4444,
            ..r(Kind::Exec, 5, 5_000_000, 0, exec_path.len() as u64, 1)
        };
        let chunks = vec![
            // What an exit flusher wrote of a live thread's buffer...
            Chunk {
                tid: 7,
                skip: 0,
                cal: (2_002_000, 1_001_000),
                events: vec![
                    (
                        r(Kind::Malloc, 2, 1_000_000, 0x7f00_0000_1000, 100, 0),
                        vec![],
                    ),
                    (r(Kind::Free, 3, 1_000_050, 0x7f00_0000_1000, 0, 0), vec![]),
                ],
            },
            // ...and then the owner's chunk repeats them, marked skipped.
            Chunk {
                tid: 7,
                skip: 2,
                cal: (0, 0),
                events: vec![
                    (
                        r(Kind::Malloc, 2, 1_000_000, 0x7f00_0000_1000, 100, 0),
                        vec![],
                    ),
                    (r(Kind::Free, 3, 1_000_050, 0x7f00_0000_1000, 0, 0), vec![]),
                    (
                        r(Kind::Malloc, 6, 9_000_000, 0x5555_0000_2000, 1 << 30, 0),
                        vec![],
                    ),
                ],
            },
            Chunk {
                tid: 8,
                skip: 0,
                cal: (0, 0),
                events: vec![
                    (
                        r(
                            Kind::Module,
                            1,
                            10,
                            0x5555_0000_0000,
                            module.len() as u64,
                            1,
                        ),
                        module.clone(),
                    ),
                    (r(Kind::Fork, 4, 4_000_000, 0, 0, 4321), vec![]),
                    (exec.clone(), exec_path.clone()),
                ],
            },
        ];
        // 2 ticks per ns from the two pairs (2_000_000, 1_001_000), (0 + 1_000, 500 ...).
        let b = build_log_v2(&h, true, (2_000, 1_000), &chunks);
        let log = AllocLog::parse(&b, Path::new("t.log")).unwrap();
        let seqs: Vec<(u64, Kind)> = log.records.iter().map(|r| (r.seq, r.kind)).collect();
        assert_eq!(
            seqs,
            vec![
                (2, Kind::Malloc),
                (3, Kind::Free),
                (4, Kind::Fork),
                (5, Kind::Exec),
                (6, Kind::Malloc)
            ]
        );
        // ns = 1000 + (t - 2000) * (1_001_000 - 1000) / (2_000_000 - 2000)
        assert_eq!(log.records[0].time_ns, 1000 + (1_000_000 - 2000) / 2);
        assert_eq!(log.records[4].size, 1 << 30);
        assert_eq!(log.records[4].addr, 0x5555_0000_2000);
        assert_eq!(log.modules[0].seq, 1);
        assert_eq!(log.modules[0].segments.len(), 1);
        assert_eq!(log.children(), vec![4321]);
        assert!(log.forks());
        assert_eq!(
            log.execs,
            vec![ExecEvent {
                seq: 5,
                tid: 8,
                path: "/bin/next".into(),
                new_gen: 1,
                errno: 0,
                caller: 0x4444
            }]
        );
        assert!(log.records.iter().all(|r| r.has_marker(&log.header)));
        assert_eq!(log.header.exec_gen, 3);
    }

    #[test]
    fn corrupt_logs_fail_cleanly() {
        let good = build_log(&header(), &[(rec(Kind::Malloc, 1, 0x5000, 100, 0), vec![])]);
        let p = Path::new("x.log");
        assert!(AllocLog::parse(&good[..10], p)
            .unwrap_err()
            .to_string()
            .contains("shorter than"));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(AllocLog::parse(&bad, p)
            .unwrap_err()
            .to_string()
            .contains("bad magic"));
        let mut bad = good.clone();
        bad[8] = 9;
        assert!(AllocLog::parse(&bad, p)
            .unwrap_err()
            .to_string()
            .contains("unsupported version 9"));
        assert!(AllocLog::parse(&good[..good.len() - 3], p)
            .unwrap_err()
            .to_string()
            .contains("truncated record"));
        let mut bad = good.clone();
        bad[64] = 99;
        assert!(AllocLog::parse(&bad, p)
            .unwrap_err()
            .to_string()
            .contains("unknown record kind 99"));
    }

    #[test]
    fn corrupt_v2_logs_fail_cleanly() {
        let h = v2_header(true, false);
        let chunk = |events| Chunk {
            tid: 1,
            skip: 0,
            cal: (5, 5),
            events,
        };
        let good = build_log_v2(
            &h,
            false,
            (1, 1),
            &[chunk(vec![(rec(Kind::Malloc, 0, 0x5000, 100, 0), vec![])])],
        );
        let p = Path::new("x.log");
        let msg = |b: &[u8]| AllocLog::parse(b, p).unwrap_err().to_string();
        assert!(msg(&good[..100]).contains("shorter than the 128-byte header"));
        assert!(msg(&good[..good.len() - 1]).contains("truncated chunk"));
        let mut bad = good.clone();
        bad[128] ^= 1;
        assert!(msg(&bad).contains("bad chunk tag"));
        let mut bad = good.clone();
        bad[128 + 40] = 60;
        assert!(msg(&bad).contains("unknown event kind 60"));
        let mut bad = good.clone();
        bad[128 + 12] = 2; // two events declared, one present
        assert!(msg(&bad).contains("chunk ends after 1 of its 2 events"));
        let mut bad = good.clone();
        bad[128 + 16] = 2;
        assert!(msg(&bad).contains("skips 2 events"));
        let mut bad = good.clone();
        bad[128 + 40 + 3] = 0x9; // width 9
        assert!(msg(&bad).contains("field width 9"));
        let mut bad = good.clone();
        bad[56] = 8; // bits 0-2 are SEQ, TSC, SYSCALLS
        assert!(msg(&bad).contains("unknown header flags"));
        let mut bad = good.clone();
        bad[12] = 64;
        assert!(msg(&bad).contains("header size 64, expected 128"));

        // A hole (reserved, never written) between chunks is skipped and counted.
        let mut holed = good[..128].to_vec();
        holed.extend_from_slice(&[0u8; 48]);
        holed.extend_from_slice(&good[128..]);
        let log = AllocLog::parse(&holed, p).unwrap();
        assert_eq!((log.hole_bytes, log.records.len()), (48, 1));
    }

    fn arb_kind() -> impl Strategy<Value = Kind> {
        prop::sample::select(vec![
            Kind::Malloc,
            Kind::Calloc,
            Kind::Realloc,
            Kind::Free,
            Kind::PosixMemalign,
            Kind::Memalign,
            Kind::Mmap,
            Kind::Munmap,
            Kind::Mremap,
            Kind::RangeCall,
            Kind::Thread,
            Kind::OwnRegion,
            Kind::Stack,
            Kind::Fork,
            Kind::Maps,
            Kind::Exec,
        ])
    }

    /// Random chunks of random events with increasing times (what one thread
    /// writes), blobs included, and the records the reader must return.
    fn arb_chunks() -> impl Strategy<Value = Vec<Chunk>> {
        let ev = (
            arb_kind(),
            any::<bool>(),
            prop::num::u64::ANY,
            prop::num::u64::ANY,
            prop::num::u64::ANY,
            prop::num::u64::ANY,
            prop::num::u64::ANY,
            prop::sample::select(vec![0u64, 1, 300, 70_000, 1 << 40]),
            prop::collection::vec(any::<u8>(), 0..40),
        );
        let chunk = (
            1u32..4,
            prop::collection::vec(ev, 0..12),
            any::<(u64, u64)>(),
        );
        prop::collection::vec(chunk, 0..6).prop_map(|cs| {
            let mut t = 0u64;
            cs.into_iter()
                .map(|(tid, evs, cal)| Chunk {
                    tid,
                    skip: 0,
                    cal,
                    events: evs
                        .into_iter()
                        .map(
                            |(kind, pre, addr, size, arg, arg2, caller, dt, mut payload)| {
                                t = t.wrapping_add(dt);
                                let m = kind.v2_fields();
                                if kind.is_blob() {
                                    if kind == Kind::Exec {
                                        payload.retain(|&c| c != 0);
                                        payload.push(0);
                                    }
                                } else {
                                    payload.clear();
                                }
                                let r = Record {
                                    kind,
                                    flags: pre as u16,
                                    tid,
                                    seq: 0,
                                    time_ns: t,
                                    addr,
                                    size: if kind.is_blob() {
                                        payload.len() as u64
                                    } else if m & F_SIZE != 0 {
                                        size
                                    } else {
                                        0
                                    },
                                    arg: if m & F_ARG != 0 { arg } else { 0 },
                                    arg2: if m & F_ARG2 != 0 { arg2 } else { 0 },
                                    caller: if m & F_CALLER != 0 { caller } else { 0 },
                                };
                                (r, payload)
                            },
                        )
                        .collect(),
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut b = build_log(&header(), &[]);
            b.extend_from_slice(&tail);
            let _ = AllocLog::parse(&b, Path::new("fuzz.log"));
        }

        #[test]
        fn arbitrary_v2_bytes_never_panic(
            tail in prop::collection::vec(any::<u8>(), 0..600),
            seq in any::<bool>(),
        ) {
            let mut b = build_log_v2(&v2_header(true, seq), seq, (1, 1), &[]);
            b.extend_from_slice(&tail);
            let _ = AllocLog::parse(&b, Path::new("fuzz.log"));
        }

        /// Whatever the events, the reader returns exactly what was encoded (in time
        /// order, numbered 1..N), and any truncation or bit flip of such a log is
        /// an error or a log, never a panic.
        #[test]
        fn v2_round_trip_and_damage(chunks in arb_chunks(), cut in any::<prop::sample::Index>(),
                                    flip in any::<prop::sample::Index>(), bit in 0u8..8) {
            let h = v2_header(false, false);
            let b = build_log_v2(&h, false, (0, 0), &chunks);
            let log = AllocLog::parse(&b, Path::new("rt.log")).unwrap();
            let mut want: Vec<(u64, usize, Record, Vec<u8>)> = Vec::new();
            for (ci, c) in chunks.iter().enumerate() {
                let mut run = 0;
                for (r, p) in &c.events {
                    run = u64::max(run, r.time_ns);
                    want.push((run, ci, r.clone(), p.clone()));
                }
            }
            want.sort_by_key(|w| (w.0, w.1));
            let mut got_blobs = 0;
            let mut ri = 0;
            for (i, (_, _, r, _)) in want.iter().enumerate() {
                let seq = i as u64 + 1;
                match r.kind {
                    Kind::Maps => {
                        prop_assert!(log.maps.iter().any(|m| m.seq == seq));
                        got_blobs += 1;
                    }
                    _ => {
                        let g = &log.records[ri];
                        ri += 1;
                        prop_assert_eq!(g, &Record { seq, ..r.clone() });
                    }
                }
            }
            prop_assert_eq!(ri, log.records.len());
            prop_assert_eq!(got_blobs, log.maps.len());
            let _ = AllocLog::parse(&b[..cut.index(b.len() + 1)], Path::new("cut.log"));
            let mut d = b.clone();
            if !d.is_empty() {
                let i = flip.index(d.len());
                d[i] ^= 1 << bit;
                let _ = AllocLog::parse(&d, Path::new("flip.log"));
            }
        }

        /// With global seqs (markers on), records come back sorted by seq.
        #[test]
        fn v2_with_seqs_sorts_by_seq(seqs in prop::collection::vec(1u64..1000, 1..30)) {
            let h = v2_header(false, true);
            let events = seqs
                .iter()
                .map(|&s| (Record { time_ns: 5, ..rec(Kind::Malloc, s, s * 16, 8, 0) }, vec![]))
                .collect();
            let b = build_log_v2(&h, true, (0, 0), &[Chunk { tid: 7, skip: 0, cal: (0, 0), events }]);
            let log = AllocLog::parse(&b, Path::new("s.log")).unwrap();
            let mut want = seqs.clone();
            want.sort_unstable();
            prop_assert_eq!(log.records.iter().map(|r| r.seq).collect::<Vec<_>>(), want);
            prop_assert!(log.records.iter().all(|r| r.addr == r.seq * 16));
        }
    }
}
