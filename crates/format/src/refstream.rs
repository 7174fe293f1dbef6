//! Reference streams: the memory references of a run, complete or sampled
//! (docs/formats.md §6).
//!
//! Version 2: a header (magic + JSON parameters), then varint records: REF
//! (address delta and write flag, then the gap in the thread's sequence index),
//! THREAD, THRESHOLD (SHARDS fixed-size) and END (totals; its absence means the
//! stream was cut; with flag 1 it also counts the 2 MB regions the source saw
//! referenced, for the analysis's realized sampling rate). Per-thread delta state lets every thread's records be encoded
//! on their own, which the QEMU plugin and the workloads' trace mode need.
//! Version 1 (lackey bundles from before) is a bare zstd stream of REF values.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};

pub const MAGIC: [u8; 8] = *b"HTREFS\x00\x02";
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
const MAX_HEADER: u32 = 65536;

const K_REF: u64 = 0;
const K_THREAD: u64 = 1;
const K_THRESHOLD: u64 = 2;
const K_END: u64 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SamplingKind {
    /// Every reference.
    Complete,
    /// SHARDS fixed-rate: every reference to a sampled page.
    SpatialRate,
    /// SHARDS fixed-size: the threshold falls to keep at most `max_pages` pages.
    SpatialSize,
    /// One reference every `period` events, whatever its page (perf).
    Time,
}

/// The stream's parameters (the header's JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamHeader {
    pub source: String,
    pub sampling: SamplingKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_shift: Option<u32>,
    /// Two samples (docs/model.md §3.1): pages `addr >> page_shift` hashed with
    /// `page_seed`, and regions `addr >> region_shift` hashed with `seed`, the
    /// region after every sampled one kept too. Absent: pages only (an older
    /// plugin), which the analysis cannot use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region_shift: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modulus: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pages: Option<u64>,
    /// Fixed-size with a reference budget: the threshold also fell whenever the
    /// references kept passed this (qemu-plugin/README.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_refs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

impl StreamHeader {
    /// A complete stream from `source`.
    pub fn complete(source: &str) -> Self {
        StreamHeader {
            source: source.into(),
            sampling: SamplingKind::Complete,
            page_shift: None,
            region_shift: None,
            page_seed: None,
            hash: None,
            seed: None,
            modulus: None,
            threshold: None,
            max_pages: None,
            max_refs: None,
            period: None,
            command: None,
        }
    }

    /// Whether the keys its sampling needs are there and make sense.
    pub fn validate(&self) -> Result<(), String> {
        match self.sampling {
            SamplingKind::Complete | SamplingKind::Time => Ok(()),
            SamplingKind::SpatialRate | SamplingKind::SpatialSize => {
                if self.hash.as_deref() != Some("fmix64") {
                    return Err(format!(
                        "spatial sampling with hash {:?} (this hugetune knows fmix64)",
                        self.hash
                    ));
                }
                let (Some(m), Some(t), Some(_), Some(ps)) =
                    (self.modulus, self.threshold, self.seed, self.page_shift)
                else {
                    return Err(
                        "spatial sampling needs modulus, threshold, seed and page_shift".into(),
                    );
                };
                if m == 0 || t == 0 || t > m {
                    return Err(format!(
                        "threshold {t} of modulus {m} is not a rate in (0, 1]"
                    ));
                }
                if ps > 30 {
                    return Err(format!("page_shift {ps} is out of range"));
                }
                if let Some(rs) = self.region_shift {
                    if rs <= ps || rs > 30 {
                        return Err(format!(
                            "region_shift {rs} is not between page_shift {ps} and 30"
                        ));
                    }
                    if self.page_seed.is_none() {
                        return Err("region sampling needs page_seed".into());
                    }
                }
                if self.sampling == SamplingKind::SpatialSize && self.max_pages.unwrap_or(0) == 0 {
                    return Err("spatial-size sampling needs max_pages > 0".into());
                }
                Ok(())
            }
        }
    }

    /// The initial sampling rate (1 for complete streams; `None` for time sampling).
    pub fn rate(&self) -> Option<f64> {
        match self.sampling {
            SamplingKind::Complete => Some(1.0),
            SamplingKind::Time => None,
            _ => Some(self.threshold? as f64 / self.modulus? as f64),
        }
    }
}

/// MurmurHash3's 64-bit finalizer, the page hash of spatial sampling; its one home
/// is the model's SHARDS sampler, which the QEMU plugin's samples must agree with.
pub use hugetune_model::shards::fmix64;

/// Whether `page` is in the sample at `threshold` (docs/formats.md §6).
pub fn sampled(page: u64, seed: u64, modulus: u64, threshold: u64) -> bool {
    fmix64(page ^ seed) % modulus < threshold
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Unsigned LEB128; u128 because a REF's first value has 67 significant bits.
fn put_varint(buf: &mut Vec<u8>, v: impl Into<u128>) {
    let mut v: u128 = v.into();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.push(byte);
            return;
        }
        buf.push(byte | 0x80);
    }
}

#[derive(Clone, Copy)]
struct ThreadState {
    prev_addr: u64,
    /// seq + 1 of the previous REF (0: none yet).
    next_seq: u64,
}

const NEW_THREAD: ThreadState = ThreadState {
    prev_addr: 0,
    next_seq: 0,
};

/// Writes a version-2 stream, zstd-compressed.
pub struct RefWriter<W: Write> {
    enc: zstd::stream::Encoder<'static, BufWriter<W>>,
    threads: HashMap<u32, ThreadState>,
    thread: u32,
    cur: ThreadState,
    count: u64,
    buf: Vec<u8>,
}

impl<W: Write> RefWriter<W> {
    pub fn new(w: W, header: &StreamHeader) -> std::io::Result<Self> {
        header
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let json = serde_json::to_vec(header)?;
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
        buf.extend_from_slice(&json);
        Ok(RefWriter {
            enc: zstd::stream::Encoder::new(BufWriter::new(w), 3)?,
            threads: HashMap::new(),
            thread: 0,
            cur: NEW_THREAD,
            count: 0,
            buf,
        })
    }

    fn flush_if_full(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= 1 << 16 {
            self.enc.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The following references belong to thread `tid`.
    pub fn set_thread(&mut self, tid: u32) {
        if tid == self.thread {
            return;
        }
        self.threads.insert(self.thread, self.cur);
        self.cur = self.threads.get(&tid).copied().unwrap_or(NEW_THREAD);
        self.thread = tid;
        put_varint(&mut self.buf, (tid as u64) << 2 | K_THREAD);
    }

    /// The next reference of the current thread, `seq` = its index in the thread's
    /// complete stream (strictly increasing).
    pub fn push_seq(&mut self, addr: u64, write: bool, seq: u64) -> std::io::Result<()> {
        if seq < self.cur.next_seq {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "reference index {seq} of thread {} does not increase",
                    self.thread
                ),
            ));
        }
        let delta = addr.wrapping_sub(self.cur.prev_addr) as i64;
        put_varint(
            &mut self.buf,
            (zigzag(delta) as u128) << 3 | (write as u128) << 2 | K_REF as u128,
        );
        put_varint(&mut self.buf, seq - self.cur.next_seq);
        self.cur.prev_addr = addr;
        self.cur.next_seq = seq + 1;
        self.count += 1;
        self.flush_if_full()
    }

    /// The next reference of the current thread, immediately after its previous one.
    pub fn push(&mut self, addr: u64, write: bool) -> std::io::Result<()> {
        self.push_seq(addr, write, self.cur.next_seq)
    }

    /// SHARDS fixed-size lowered the threshold.
    pub fn threshold(&mut self, t: u64) -> std::io::Result<()> {
        put_varint(&mut self.buf, t << 2 | K_THRESHOLD);
        self.flush_if_full()
    }

    /// REF records written so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes END with `refs_seen` (every reference the source observed).
    pub fn finish(self, refs_seen: u64) -> std::io::Result<W> {
        self.finish_with(refs_seen, None)
    }

    /// [`RefWriter::finish`], also with the number of 2 MB regions the source
    /// saw referenced (END's flag 1).
    pub fn finish_with(mut self, refs_seen: u64, regions: Option<u64>) -> std::io::Result<W> {
        put_varint(&mut self.buf, K_END | (regions.is_some() as u64) << 2);
        put_varint(&mut self.buf, refs_seen);
        put_varint(&mut self.buf, self.count);
        if let Some(r) = regions {
            put_varint(&mut self.buf, r);
        }
        self.enc.write_all(&self.buf)?;
        let bw = self.enc.finish()?;
        bw.into_inner().map_err(|e| e.into_error())
    }
}

/// One reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ref {
    pub addr: u64,
    pub write: bool,
    pub thread: u32,
    /// Index in the thread's complete stream.
    pub seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Ref(Ref),
    /// SHARDS fixed-size: the new threshold.
    Threshold(u64),
}

/// END's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Every reference the source observed, sampled or not.
    pub refs_seen: u64,
    /// REF records in the stream.
    pub refs_written: u64,
    /// The 2 MB regions the source saw referenced, sampled or not (END's flag
    /// 1: sampling plugins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions_seen: Option<u64>,
}

/// The input with the bytes read while detecting zstd put back in front.
type Replayed<R> = std::io::Chain<std::io::Cursor<Vec<u8>>, R>;

enum Input<R: Read> {
    Zstd(Box<zstd::stream::Decoder<'static, BufReader<Replayed<R>>>>),
    Raw(Replayed<R>),
}

impl<R: Read> Read for Input<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::Zstd(d) => d.read(buf),
            Input::Raw(r) => r.read(buf),
        }
    }
}

/// A stream that is not a valid reference stream (as opposed to a failed read):
/// it reaches callers inside an `io::Error` of kind `InvalidData`, since the
/// reader streams from any `Read`; `CorruptStream::of` finds it there.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CorruptStream(pub String);

impl CorruptStream {
    /// The corruption an I/O error carries, if it is one.
    pub fn of(e: &std::io::Error) -> Option<&CorruptStream> {
        e.get_ref().and_then(|x| x.downcast_ref::<CorruptStream>())
    }
}

fn corrupt(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, CorruptStream(msg.into()))
}

/// Reads version 1 and version 2 streams, raw or zstd-compressed.
pub struct RefReader<R: Read> {
    src: BufReader<Input<R>>,
    /// Bytes read ahead while detecting the version, served first.
    pending: Vec<u8>,
    pending_pos: usize,
    header: StreamHeader,
    version: u32,
    threads: HashMap<u32, ThreadState>,
    thread: u32,
    cur: ThreadState,
    refs: u64,
    totals: Option<Totals>,
    threshold: Option<u64>,
}

fn read_up_to<R: Read>(r: &mut R, n: usize) -> std::io::Result<Vec<u8>> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match r.read(&mut out[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out.truncate(got);
    Ok(out)
}

/// A varint at the start of `buf` if it ends there within 9 bytes (every value
/// below 2^63): the value and its length. `None` otherwise (longer, or cut by
/// the buffer's end): the caller reads it byte by byte.
#[inline]
fn quick_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().take(9).enumerate() {
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

impl<R: Read> RefReader<R> {
    pub fn new(mut r: R) -> std::io::Result<Self> {
        let first = read_up_to(&mut r, 4)?;
        let zstd = first == ZSTD_MAGIC;
        let chained = std::io::Cursor::new(first).chain(r);
        let input = if zstd {
            Input::Zstd(Box::new(zstd::stream::Decoder::new(chained)?))
        } else {
            Input::Raw(chained)
        };
        let mut src = BufReader::with_capacity(1 << 16, input);
        let head = read_up_to(&mut src, 8)?;
        let mut me = RefReader {
            src,
            pending: Vec::new(),
            pending_pos: 0,
            header: StreamHeader::complete("valgrind-lackey"),
            version: 1,
            threads: HashMap::new(),
            thread: 0,
            cur: NEW_THREAD,
            refs: 0,
            totals: None,
            threshold: None,
        };
        if head == MAGIC {
            let len = read_up_to(&mut me.src, 4)?;
            if len.len() < 4 {
                return Err(corrupt("reference stream: the header is cut short"));
            }
            let n = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
            if n > MAX_HEADER {
                return Err(corrupt(format!(
                    "reference stream: header of {n} bytes (at most {MAX_HEADER})"
                )));
            }
            let json = read_up_to(&mut me.src, n as usize)?;
            if json.len() < n as usize {
                return Err(corrupt("reference stream: the header is cut short"));
            }
            let h: StreamHeader = serde_json::from_slice(&json)
                .map_err(|e| corrupt(format!("reference stream: bad header: {e}")))?;
            h.validate()
                .map_err(|e| corrupt(format!("reference stream: {e}")))?;
            me.threshold = h.threshold;
            me.header = h;
            me.version = 2;
        } else if head.len() >= 6 && head[..6] == MAGIC[..6] {
            return Err(corrupt(format!(
                "reference stream version {} (this hugetune reads 1 and 2)",
                head.get(7).copied().unwrap_or(0)
            )));
        } else if !zstd && !head.is_empty() {
            return Err(corrupt(
                "not a reference stream (neither zstd nor the HTREFS header)",
            ));
        } else {
            me.pending = head;
        }
        Ok(me)
    }

    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// END's totals, once the stream was read to its end (version 1: counted).
    pub fn totals(&self) -> Option<Totals> {
        self.totals
    }

    /// The current threshold of spatial sampling.
    pub fn threshold(&self) -> Option<u64> {
        self.threshold
    }

    fn byte(&mut self) -> std::io::Result<Option<u8>> {
        if self.pending_pos < self.pending.len() {
            self.pending_pos += 1;
            return Ok(Some(self.pending[self.pending_pos - 1]));
        }
        let mut b = [0u8; 1];
        loop {
            match self.src.read(&mut b) {
                Ok(0) => return Ok(None),
                Ok(_) => return Ok(Some(b[0])),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A varint; `None` at a clean end before its first byte.
    #[inline]
    fn varint(&mut self) -> std::io::Result<Option<u128>> {
        // Fast path: decoded in place from the read buffer when it holds the
        // whole value in at most 9 bytes (every value below 2^63): reading byte
        // by byte through `Read` took half of an analysis's first pass.
        if self.pending_pos >= self.pending.len() {
            if let Some((v, n)) = quick_varint(self.src.buffer()) {
                self.src.consume(n);
                return Ok(Some(v as u128));
            }
        }
        self.varint_slow()
    }

    /// A varint, byte by byte: across the buffer's end, or longer than 9 bytes.
    fn varint_slow(&mut self) -> std::io::Result<Option<u128>> {
        let mut v: u128 = 0;
        let mut shift = 0;
        loop {
            let Some(b) = self.byte()? else {
                if shift == 0 {
                    return Ok(None);
                }
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "reference stream ends inside a value",
                ));
            };
            if shift > 77 {
                return Err(corrupt("reference stream: varint too long"));
            }
            v |= ((b & 0x7f) as u128) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(Some(v));
            }
        }
    }

    fn need_varint(&mut self, what: &str) -> std::io::Result<u64> {
        match self.varint()? {
            Some(v) if v <= u64::MAX as u128 => Ok(v as u64),
            Some(_) => Err(corrupt(format!("reference stream: {what} out of range"))),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("reference stream ends before {what}"),
            )),
        }
    }

    fn next_v1(&mut self) -> std::io::Result<Option<Event>> {
        let Some(v) = self.varint()? else {
            self.totals = Some(Totals {
                refs_seen: self.refs,
                refs_written: self.refs,
                regions_seen: None,
            });
            return Ok(None);
        };
        let write = v & 1 == 1;
        let delta = unzigzag((v >> 1) as u64);
        self.cur.prev_addr = self.cur.prev_addr.wrapping_add(delta as u64);
        let seq = self.refs;
        self.refs += 1;
        Ok(Some(Event::Ref(Ref {
            addr: self.cur.prev_addr,
            write,
            thread: 0,
            seq,
        })))
    }

    /// The next record: a reference or a threshold change; `None` after END.
    pub fn next_event(&mut self) -> std::io::Result<Option<Event>> {
        if self.version == 1 {
            return self.next_v1();
        }
        if self.totals.is_some() {
            return Ok(None);
        }
        // Fast path: a REF whose two varints lie whole in the read buffer, each
        // within 9 bytes; anything else (or an overflowing sequence index) goes
        // the general way below, which reports it.
        if self.pending_pos >= self.pending.len() {
            let buf = self.src.buffer();
            if let Some((h, n1)) = quick_varint(buf) {
                if h & 3 == K_REF {
                    if let Some((gap, n2)) = quick_varint(&buf[n1..]) {
                        if let Some(seq) = self.cur.next_seq.checked_add(gap) {
                            self.src.consume(n1 + n2);
                            let v = h >> 2;
                            let addr = self.cur.prev_addr.wrapping_add(unzigzag(v >> 1) as u64);
                            self.cur.prev_addr = addr;
                            self.cur.next_seq = seq.saturating_add(1);
                            self.refs += 1;
                            return Ok(Some(Event::Ref(Ref {
                                addr,
                                write: v & 1 == 1,
                                thread: self.thread,
                                seq,
                            })));
                        }
                    }
                }
            }
        }
        let Some(h) = self.varint()? else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "reference stream ends without END after {} references (cut short?)",
                    self.refs
                ),
            ));
        };
        match (h & 3) as u64 {
            K_REF => {
                let v = h >> 2;
                let write = v & 1 == 1;
                let delta = unzigzag((v >> 1) as u64);
                let gap = self.need_varint("a sequence gap")?;
                let addr = self.cur.prev_addr.wrapping_add(delta as u64);
                let seq = self
                    .cur
                    .next_seq
                    .checked_add(gap)
                    .ok_or_else(|| corrupt("reference stream: sequence index overflows"))?;
                self.cur.prev_addr = addr;
                self.cur.next_seq = seq.saturating_add(1);
                self.refs += 1;
                Ok(Some(Event::Ref(Ref {
                    addr,
                    write,
                    thread: self.thread,
                    seq,
                })))
            }
            K_THREAD => {
                let tid = u32::try_from(h >> 2)
                    .map_err(|_| corrupt("reference stream: thread id out of range"))?;
                if tid != self.thread {
                    self.threads.insert(self.thread, self.cur);
                    self.cur = self.threads.get(&tid).copied().unwrap_or(NEW_THREAD);
                    self.thread = tid;
                }
                self.next_event()
            }
            K_THRESHOLD => {
                let t = u64::try_from(h >> 2)
                    .map_err(|_| corrupt("reference stream: threshold out of range"))?;
                if self.header.sampling != SamplingKind::SpatialSize {
                    return Err(corrupt(
                        "reference stream: THRESHOLD in a stream that is not spatial-size",
                    ));
                }
                if t == 0 || self.threshold.is_some_and(|old| t > old) {
                    return Err(corrupt(format!(
                        "reference stream: threshold {t} does not fall (was {:?})",
                        self.threshold
                    )));
                }
                self.threshold = Some(t);
                Ok(Some(Event::Threshold(t)))
            }
            _ => {
                if h >> 2 > 1 {
                    return Err(corrupt("reference stream: malformed END"));
                }
                let seen = self.need_varint("END's reference count")?;
                let written = self.need_varint("END's record count")?;
                let regions = if h >> 2 == 1 {
                    Some(self.need_varint("END's region count")?)
                } else {
                    None
                };
                if written != self.refs {
                    return Err(corrupt(format!(
                        "reference stream: END says {written} references, the stream holds {}",
                        self.refs
                    )));
                }
                if seen < written {
                    return Err(corrupt(format!(
                        "reference stream: END says {seen} references seen but {written} written"
                    )));
                }
                if self.byte()?.is_some() {
                    return Err(corrupt("reference stream: bytes after END"));
                }
                self.totals = Some(Totals {
                    refs_seen: seen,
                    refs_written: written,
                    regions_seen: regions,
                });
                Ok(None)
            }
        }
    }

    /// The next reference (threshold changes skipped; see `threshold()`).
    pub fn next_record(&mut self) -> std::io::Result<Option<Ref>> {
        loop {
            match self.next_event()? {
                None => return Ok(None),
                Some(Event::Ref(r)) => return Ok(Some(r)),
                Some(Event::Threshold(_)) => {}
            }
        }
    }

    /// `(address, is_write)` of the next reference, `None` at a clean end; an
    /// error for a corrupt or cut stream.
    pub fn next_ref(&mut self) -> std::io::Result<Option<(u64, bool)>> {
        Ok(self.next_record()?.map(|r| (r.addr, r.write)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(bytes: &[u8]) -> std::io::Result<(Vec<Event>, Option<Totals>, StreamHeader)> {
        let mut r = RefReader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(e) = r.next_event()? {
            out.push(e);
        }
        Ok((out, r.totals(), r.header().clone()))
    }

    fn spatial(size: bool) -> StreamHeader {
        StreamHeader {
            sampling: if size {
                SamplingKind::SpatialSize
            } else {
                SamplingKind::SpatialRate
            },
            page_shift: Some(12),
            hash: Some("fmix64".into()),
            seed: Some(7),
            modulus: Some(1 << 24),
            threshold: Some(1 << 20),
            max_pages: size.then_some(8192),
            ..StreamHeader::complete("qemu")
        }
    }

    proptest! {
        #[test]
        fn round_trip(refs in proptest::collection::vec(
            (any::<u64>(), any::<bool>(), 0u32..4, 0u64..1000), 0..2000)) {
            let mut w = RefWriter::new(Vec::new(), &spatial(false)).unwrap();
            let mut next = [0u64; 4];
            let mut want = Vec::new();
            for &(a, wr, t, gap) in &refs {
                w.set_thread(t);
                let seq = next[t as usize] + gap;
                next[t as usize] = seq + 1;
                w.push_seq(a, wr, seq).unwrap();
                want.push(Event::Ref(Ref { addr: a, write: wr, thread: t, seq }));
            }
            prop_assert_eq!(w.count(), refs.len() as u64);
            let bytes = w.finish(refs.len() as u64 * 3).unwrap();
            let (back, totals, h) = read_all(&bytes).unwrap();
            prop_assert_eq!(back, want);
            prop_assert_eq!(totals, Some(Totals { refs_seen: refs.len() as u64 * 3, refs_written: refs.len() as u64, regions_seen: None }));
            prop_assert_eq!(h, spatial(false));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            for input in [bytes.clone(), [&MAGIC[..], &bytes[..]].concat()] {
                if let Ok(mut r) = RefReader::new(&input[..]) {
                    for _ in 0..1000 {
                        match r.next_event() {
                            Ok(Some(_)) => {}
                            _ => break,
                        }
                    }
                }
            }
        }
    }

    /// A stream many times the reader's 64 KiB buffer, with values of every
    /// length (1-byte deltas to 10-byte ones, gaps up to 2^63): varints split
    /// across the buffer's end take the byte-wise path, the others the in-place
    /// one, and both read back what was written.
    #[test]
    fn long_streams_cross_the_read_buffer() {
        let mut w = RefWriter::new(Vec::new(), &spatial(false)).unwrap();
        let (mut x, mut addr, mut seq) = (0x9e37_79b9_7f4a_7c15u64, 0u64, 0u64);
        let mut want = Vec::new();
        for i in 0..300_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bits = (x % 64) as u32;
            addr = addr.wrapping_add((x >> 1) & (u64::MAX >> (63 - bits.min(63))));
            seq += 1 + match i {
                299_999 => 1 << 63, // a 10-byte gap
                _ if i % 1000 == 0 => x >> 24,
                _ => x % 3,
            };
            w.push_seq(addr, x & 1 == 1, seq).unwrap();
            want.push(Event::Ref(Ref {
                addr,
                write: x & 1 == 1,
                thread: 0,
                seq,
            }));
        }
        let bytes = w.finish(want.len() as u64).unwrap();
        let (back, _, _) = read_all(&bytes).unwrap();
        assert_eq!(back.len(), want.len());
        assert!(back == want);
    }

    #[test]
    fn thresholds_and_raw_streams() {
        let mut w = RefWriter::new(Vec::new(), &spatial(true)).unwrap();
        w.push(0x1000, false).unwrap();
        w.threshold(1 << 19).unwrap();
        w.push(0x2008, true).unwrap();
        let z = w.finish(10).unwrap();
        let (ev, totals, _) = read_all(&z).unwrap();
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[1], Event::Threshold(1 << 19));
        assert_eq!(
            ev[2],
            Event::Ref(Ref {
                addr: 0x2008,
                write: true,
                thread: 0,
                seq: 1
            })
        );
        assert_eq!(totals.unwrap().refs_seen, 10);
        // The same content uncompressed (what the C encoder writes) reads the same.
        let raw = zstd::decode_all(&z[..]).unwrap();
        assert_eq!(read_all(&raw).unwrap().0, ev);
    }

    #[test]
    fn end_counts_regions_and_headers_name_both_samples() {
        let h = StreamHeader {
            region_shift: Some(21),
            page_seed: Some(7 ^ 0x9e37_79b9_7f4a_7c15),
            ..spatial(false)
        };
        let mut w = RefWriter::new(Vec::new(), &h).unwrap();
        w.push(0x1000, false).unwrap();
        let z = w.finish_with(5, Some(3)).unwrap();
        let (ev, totals, back) = read_all(&z).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(back, h);
        assert_eq!(totals.unwrap().regions_seen, Some(3));
        // A region shift that is not above the page shift, or no page seed.
        for bad in [
            StreamHeader {
                region_shift: Some(12),
                ..h.clone()
            },
            StreamHeader {
                page_seed: None,
                ..h.clone()
            },
        ] {
            assert!(bad.validate().is_err());
        }
        // END with an unknown flag.
        let mut raw = zstd::decode_all(&z[..]).unwrap();
        let at = raw.len() - 4;
        assert_eq!(raw[at], (K_END | 1 << 2) as u8);
        raw[at] = (K_END | 2 << 2) as u8;
        assert!(err_of(&raw).contains("malformed END"));
    }

    #[test]
    fn version_1_streams_still_read() {
        // A version-1 stream: zstd of bare zigzag-delta << 1 | write values.
        let mut raw = Vec::new();
        let mut prev = 0u64;
        for (a, w) in [
            (0x7f00_0000_0000u64, false),
            (0x7f00_0000_0008, true),
            (0x10, false),
        ] {
            let d = a.wrapping_sub(prev) as i64;
            prev = a;
            put_varint(&mut raw, (zigzag(d) as u128) << 1 | w as u128);
        }
        let z = zstd::encode_all(&raw[..], 3).unwrap();
        let mut r = RefReader::new(&z[..]).unwrap();
        assert_eq!(r.version(), 1);
        let mut got = Vec::new();
        while let Some(x) = r.next_ref().unwrap() {
            got.push(x);
        }
        assert_eq!(
            got,
            vec![
                (0x7f00_0000_0000, false),
                (0x7f00_0000_0008, true),
                (0x10, false)
            ]
        );
        assert_eq!(r.totals().unwrap().refs_written, 3);
    }

    #[test]
    fn sequential_streams_are_small() {
        let mut w = RefWriter::new(Vec::new(), &StreamHeader::complete("test")).unwrap();
        for i in 0..1_000_000u64 {
            w.push(0x7f00_0000_0000 + i * 8, i % 2 == 0).unwrap();
        }
        let bytes = w.finish(1_000_000).unwrap();
        assert!(bytes.len() < 40_000, "{} bytes", bytes.len());
    }

    fn err_of(bytes: &[u8]) -> String {
        match read_all(bytes) {
            Ok(x) => panic!("read a corrupt stream: {:?}", x.1),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn corrupt_streams_are_errors_that_say_why() {
        let e = RefReader::new(&b"HTREFS\x00\x07rest"[..]).err().unwrap();
        assert!(CorruptStream::of(&e).is_some(), "{e}");
        let mut w = RefWriter::new(Vec::new(), &StreamHeader::complete("test")).unwrap();
        for i in 0..10_000u64 {
            w.push(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), false)
                .unwrap();
        }
        let z = w.finish(10_000).unwrap();
        let raw = zstd::decode_all(&z[..]).unwrap();
        // Cut anywhere: an error, never a clean end.
        for cut in [raw.len() - 1, raw.len() / 2, 20, 13, 9] {
            let e = err_of(&raw[..cut]);
            assert!(
                e.contains("END")
                    || e.contains("cut short")
                    || e.contains("inside a value")
                    || e.contains("before"),
                "cut at {cut}: {e}"
            );
        }
        assert!(err_of(&z[..z.len() / 2]).len() > 5);
        // Bytes after END.
        let mut more = raw.clone();
        more.push(0);
        assert!(err_of(&more).contains("after END"));
        // Wrong totals: END says one reference more.
        let mut w = RefWriter::new(Vec::new(), &StreamHeader::complete("test")).unwrap();
        w.push(1, false).unwrap();
        let mut raw = zstd::decode_all(&w.finish(1).unwrap()[..]).unwrap();
        *raw.last_mut().unwrap() = 2;
        assert!(err_of(&raw).contains("END says 2"));
        // Unknown version and a bad header.
        let mut v3 = raw.clone();
        v3[7] = 3;
        assert!(err_of(&v3).contains("version 3"));
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(&5u32.to_le_bytes());
        bad.extend_from_slice(b"{nope");
        assert!(err_of(&bad).contains("bad header"));
        assert!(err_of(b"hello world").contains("not a reference stream"));
        // A spatial stream without its parameters.
        let mut h = MAGIC.to_vec();
        let json = br#"{"source":"qemu","sampling":"spatial-rate","hash":"fmix64"}"#;
        h.extend_from_slice(&(json.len() as u32).to_le_bytes());
        h.extend_from_slice(json);
        assert!(err_of(&h).contains("needs modulus"));
    }

    #[test]
    fn fmix64_matches_murmur3() {
        // Reference values of MurmurHash3's fmix64.
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
        let rate = (0..100_000u64)
            .filter(|&p| sampled(p, 7, 1 << 24, 1 << 20))
            .count() as f64
            / 100_000.0;
        assert!((rate - 1.0 / 16.0).abs() < 0.005, "rate {rate}");
    }
}
