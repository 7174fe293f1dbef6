//! Reader of the runtime library's allocation log (docs/formats.md §2).
//!
//! The log is untrusted input: every length and offset is checked, and problems
//! come back as errors naming the file, the offset and what was wrong.

use std::fmt;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"HTALLOC\0";
pub const VERSION: u32 = 1;
const HEADER_SIZE: usize = 64;
const RECORD_SIZE: usize = 64;
/// Upper bound on a blob payload (a /proc/self/maps of a huge process is < 64 MiB).
const MAX_BLOB: u64 = 256 << 20;

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
    Thread,
    Module,
    Maps,
    OwnRegion,
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
            20 => Thread,
            21 => Module,
            22 => Maps,
            23 => OwnRegion,
            _ => return None,
        })
    }

    fn is_blob(self) -> bool {
        matches!(self, Kind::Module | Kind::Maps)
    }

    /// A hooked call of the malloc family that returns a new object.
    pub fn is_malloc_alloc(self) -> bool {
        use Kind::*;
        matches!(
            self,
            Malloc | Calloc | PosixMemalign | AlignedAlloc | Memalign | Valloc | Pvalloc
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub pid: u32,
    pub ppid: u32,
    pub start_ns: u64,
    pub marker_base: u64,
    pub marker_span: u64,
    pub threshold: u64,
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

/// A whole allocation log, records sorted by `seq` (program order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocLog {
    pub header: Header,
    pub records: Vec<Record>,
    pub modules: Vec<Module>,
    pub maps: Vec<MapsSnapshot>,
}

#[derive(Debug)]
pub struct LogError {
    pub path: PathBuf,
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allocation log {}: at byte {}: {}",
            self.path.display(),
            self.offset,
            self.what
        )
    }
}

impl std::error::Error for LogError {}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

impl AllocLog {
    pub fn read(path: &Path) -> anyhow::Result<AllocLog> {
        let bytes = std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("cannot read allocation log {}: {e}", path.display()))?;
        Ok(Self::parse(&bytes, path)?)
    }

    pub fn parse(b: &[u8], path: &Path) -> Result<AllocLog, LogError> {
        let err = |offset: usize, what: String| LogError {
            path: path.to_path_buf(),
            offset,
            what,
        };
        if b.len() < HEADER_SIZE {
            return Err(err(
                0,
                format!("file is {} bytes, shorter than the 64-byte header", b.len()),
            ));
        }
        if &b[0..8] != MAGIC {
            return Err(err(0, "not a hugetune allocation log (bad magic)".into()));
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(err(
                8,
                format!("unsupported version {version} (this hugetune reads version {VERSION})"),
            ));
        }
        let hsize = u32_at(b, 12) as usize;
        if hsize != HEADER_SIZE {
            return Err(err(
                12,
                format!("header size {hsize}, expected {HEADER_SIZE}"),
            ));
        }
        let header = Header {
            pid: u32_at(b, 16),
            ppid: u32_at(b, 20),
            start_ns: u64_at(b, 24),
            marker_base: u64_at(b, 32),
            marker_span: u64_at(b, 40),
            threshold: u64_at(b, 48),
        };
        if header.marker_span != 0 && !header.marker_span.is_power_of_two() {
            return Err(err(
                40,
                format!("marker span {} is not a power of two", header.marker_span),
            ));
        }
        let mut records = Vec::new();
        let mut modules = Vec::new();
        let mut maps = Vec::new();
        let mut o = HEADER_SIZE;
        while o < b.len() {
            if b.len() - o < RECORD_SIZE {
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
            o += RECORD_SIZE;
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
                let payload = &b[o..o + len];
                o += padded;
                match kind {
                    Kind::Module => {
                        modules.push(parse_module(payload, &r).map_err(|w| err(rec_off, w))?)
                    }
                    Kind::Maps => maps.push(MapsSnapshot {
                        seq: r.seq,
                        at_exit: r.arg == 1,
                        text: String::from_utf8_lossy(payload).into_owned(),
                    }),
                    _ => unreachable!(),
                }
                continue;
            }
            records.push(r);
        }
        records.sort_by_key(|r| r.seq);
        Ok(AllocLog {
            header,
            records,
            modules,
            maps,
        })
    }
}

fn parse_module(p: &[u8], r: &Record) -> Result<Module, String> {
    let nul = p
        .iter()
        .position(|&c| c == 0)
        .ok_or("module record without a NUL-terminated path")?;
    let path = String::from_utf8_lossy(&p[..nul]).into_owned();
    let seg_start = (nul + 1).div_ceil(8) * 8;
    let n = r.arg as usize;
    if n > 4096 || seg_start + n * 32 > p.len() {
        return Err(format!(
            "module {path}: {n} segments do not fit in its {}-byte record",
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

    /// Writes a log the way the runtime library does, for reader tests.
    pub fn build_log(header: &Header, recs: &[(Record, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
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
            let kind: u16 = match r.kind {
                Kind::Malloc => 1,
                Kind::Free => 4,
                Kind::Module => 21,
                Kind::Maps => 22,
                Kind::Thread => 20,
                _ => 1,
            };
            b.extend_from_slice(&kind.to_le_bytes());
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
            caller: 0x1234,
        }
    }

    fn header() -> Header {
        Header {
            pid: 42,
            ppid: 1,
            start_ns: 5,
            marker_base: 0x1000_0000,
            marker_span: 1 << 20,
            threshold: 131072,
        }
    }

    #[test]
    fn round_trip_sorted_by_seq_with_blobs() {
        let mut module = b"/bin/prog\0".to_vec();
        while !module.len().is_multiple_of(8) {
            module.push(0);
        }
        for v in [0x1000u64, 0x2000, 0x1800] {
            module.extend_from_slice(&v.to_le_bytes());
        }
        module.extend_from_slice(&(PF_W | 4).to_le_bytes());
        module.extend_from_slice(&0u32.to_le_bytes());
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

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let mut b = build_log(&header(), &[]);
            b.extend_from_slice(&tail);
            let _ = AllocLog::parse(&b, Path::new("fuzz.log"));
        }
    }
}
