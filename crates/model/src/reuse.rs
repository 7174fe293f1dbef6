//! Exact LRU stack (reuse) distance at page granularity, O(N log M).
//!
//! Bennett-Kruskal / Olken style: every live key owns one set bit in a bitmap over
//! access "times" (slots); the distance of a re-reference is the number of set
//! bits after the key's previous slot. Times are compacted to the live keys
//! whenever the clock reaches the bitmap's end, so memory is proportional to the
//! number of distinct keys M, not to the trace length N.
//!
//! Layout, chosen for cache behaviour at millions of keys:
//! - the last-access table is open addressing with linear probing and 16-byte
//!   entries (key, slot): one cache line per lookup;
//! - the bitmap has a small 64-ary tree of counts above it: a count per 512-bit
//!   block (one cache line of bitmap), then a count per 64 blocks, and so on. A
//!   prefix count reads one bitmap line and sums at most 63 contiguous counters
//!   per level (vectorised); for 4 M keys the counters total ~130 KB and stay in
//!   L2, the bitmap (2–4 MB) in L2/L3;
//! - [`ReuseEngine::access_batch`] prefetches the table line of the reference 16
//!   positions ahead and the bitmap line of the one 8 ahead, so the DRAM misses of
//!   the table overlap instead of serialising.
//!
//! Keys can be *marked* ([`ReuseEngine::access_classed`]): a second bitmap over
//! the same slots holds only the marked keys, so one access also counts the
//! marked keys among those between (`sampled.rs` splits a distance by the sample
//! each key comes from). A key's mark is fixed when it enters; engines that never
//! mark a key never allocate the second bitmap.

use serde::{Deserialize, Serialize};

/// Prefetch the cache line holding `p` (a hint: any address is fine).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch never faults and has no architectural effect.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct Entry {
    key: u64,
    /// `EMPTY` marks a vacant entry (slots never reach it: at most 2^31 live keys).
    slot: u32,
    /// Accesses since the key entered (fills the entry's padding; SHARDS weighs
    /// its adjustment by it), below `MARK`; `MARK` set: a marked key.
    count: u32,
}

/// The mark bit of `Entry::count`.
const MARK: u32 = 1 << 31;

const VACANT: Entry = Entry {
    key: 0,
    slot: EMPTY,
    count: 0,
};

/// Open-addressing map key → slot, linear probing, load ≤ 3/4, backward-shift
/// deletion (so probe chains never hold tombstones).
#[derive(Debug, Clone)]
struct LastTable {
    entries: Vec<Entry>,
    shift: u32,
    len: usize,
}

impl LastTable {
    fn new(bits: u32) -> Self {
        LastTable {
            entries: vec![VACANT; 1 << bits],
            shift: 64 - bits,
            len: 0,
        }
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing on a pre-mixed key: sequential page numbers spread.
        ((key ^ (key >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    #[inline(always)]
    fn prefetch(&self, key: u64) {
        prefetch(self.entries.as_ptr().wrapping_add(self.home(key)));
    }

    /// The slot of `key` if it sits in its home entry (a cheap look for prefetching).
    #[inline(always)]
    fn peek(&self, key: u64) -> Option<u32> {
        let e = self.entries[self.home(key)];
        (e.slot != EMPTY && e.key == key).then_some(e.slot)
    }

    /// The slot of `key`, if live.
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u32> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let e = &self.entries[i];
            if e.slot == EMPTY {
                return None;
            }
            if e.key == key {
                return Some(e.slot);
            }
            i = (i + 1) & mask;
        }
    }

    /// Set `key`'s slot to `slot` and count the access; returns the previous
    /// slot (`None` if new) and the key's access count (with `MARK`: a new key
    /// enters marked when `mark` is `MARK`).
    #[inline(always)]
    fn upsert(&mut self, key: u64, slot: u32, mark: u32) -> (Option<u32>, u32) {
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let e = &mut self.entries[i];
            if e.slot == EMPTY {
                *e = Entry {
                    key,
                    slot,
                    count: 1 | mark,
                };
                self.len += 1;
                return (None, 1 | mark);
            }
            if e.key == key {
                // The count saturates below the mark bit.
                e.count += (e.count & !MARK < MARK - 1) as u32;
                return (Some(std::mem::replace(&mut e.slot, slot)), e.count);
            }
            i = (i + 1) & mask;
        }
    }

    /// Removes `key`; its slot and count (with the mark).
    fn remove(&mut self, key: u64) -> Option<(u32, u32)> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let e = self.entries[i];
            if e.slot == EMPTY {
                return None;
            }
            if e.key == key {
                break;
            }
            i = (i + 1) & mask;
        }
        let (slot, count) = (self.entries[i].slot, self.entries[i].count);
        // Backward shift: move later entries of the chain into the hole when their
        // home is not in (hole, j].
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let e = self.entries[j];
            if e.slot == EMPTY {
                break;
            }
            let h = self.home(e.key);
            if (j.wrapping_sub(h) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.entries[hole] = e;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.entries[hole] = VACANT;
        self.len -= 1;
        Some((slot, count))
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let bits = 64 - self.shift + 1;
        let old = std::mem::replace(self, LastTable::new(bits));
        let mask = self.mask();
        for e in old.entries.iter().filter(|e| e.slot != EMPTY) {
            let mut i = self.home(e.key);
            while self.entries[i].slot != EMPTY {
                i = (i + 1) & mask;
            }
            self.entries[i] = *e;
        }
        self.len = old.len;
    }
}

/// Bits per block: one cache line of the bitmap.
const BLOCK_BITS: usize = 512;
/// Fan-out of the count tree above the blocks: one cache line of `u32` counts.
const FAN: usize = 16;

/// One cache line of the bitmap.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Block([u64; 8]);

/// One cache line of counts.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Group([u32; FAN]);

impl Group {
    /// Sum of the first `n` counts (n ≤ 16), without a data-dependent branch so
    /// that it vectorises and never mispredicts.
    #[inline(always)]
    fn sum_below(&self, n: usize) -> u32 {
        let mut s = 0u32;
        for (j, &c) in self.0.iter().enumerate() {
            s += if j < n { c } else { 0 };
        }
        s
    }
}

/// A bitmap over time slots with a 16-ary tree of counts above its 512-bit
/// blocks. Every level is read and written branch-free at fixed depth: a prefix
/// count is 8 masked popcounts plus one masked 16-lane sum per level.
#[derive(Debug, Clone)]
struct CountedBitmap {
    blocks: Vec<Block>,
    /// `levels[0]` counts set bits per block; `levels[l + 1]` sums 16 counts of
    /// `levels[l]`. The last level is one group.
    levels: Vec<Vec<Group>>,
}

impl CountedBitmap {
    /// `cap` slots (a multiple of `BLOCK_BITS`), the first `live` set.
    fn with_prefix(cap: usize, live: usize) -> Self {
        debug_assert!(cap.is_multiple_of(BLOCK_BITS) && live <= cap);
        let mut blocks = vec![Block::default(); cap / BLOCK_BITS];
        for (i, b) in blocks.iter_mut().enumerate() {
            for (j, w) in b.0.iter_mut().enumerate() {
                let first = (i * 8 + j) * 64;
                let n = live.saturating_sub(first).min(64);
                *w = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            }
        }
        let mut counts: Vec<u32> = blocks
            .iter()
            .map(|b| b.0.iter().map(|w| w.count_ones()).sum())
            .collect();
        let mut levels = Vec::new();
        loop {
            let groups: Vec<Group> = counts
                .chunks(FAN)
                .map(|c| {
                    let mut g = Group::default();
                    g.0[..c.len()].copy_from_slice(c);
                    g
                })
                .collect();
            counts = groups.iter().map(|g| g.0.iter().sum()).collect();
            let top = groups.len() == 1;
            levels.push(groups);
            if top {
                break;
            }
        }
        CountedBitmap { blocks, levels }
    }

    fn cap(&self) -> usize {
        self.blocks.len() * BLOCK_BITS
    }

    #[inline(always)]
    fn bump(&mut self, pos: usize, up: bool) {
        let mut idx = pos / BLOCK_BITS;
        for l in self.levels.iter_mut() {
            let c = &mut l[idx / FAN].0[idx % FAN];
            *c = if up { *c + 1 } else { *c - 1 };
            idx /= FAN;
        }
    }

    #[inline(always)]
    fn word(&mut self, pos: usize) -> &mut u64 {
        &mut self.blocks[pos / BLOCK_BITS].0[(pos / 64) % 8]
    }

    #[inline(always)]
    fn set(&mut self, pos: usize) {
        *self.word(pos) |= 1 << (pos % 64);
        self.bump(pos, true);
    }

    #[inline(always)]
    fn clear(&mut self, pos: usize) {
        *self.word(pos) &= !(1 << (pos % 64));
        self.bump(pos, false);
    }

    /// Set bits in slots `0..pos` (`pos < cap`).
    #[inline(always)]
    fn prefix(&self, pos: usize) -> u32 {
        let block = &self.blocks[pos / BLOCK_BITS];
        let wi = (pos / 64) % 8;
        let low = (1u64 << (pos % 64)) - 1;
        let mut s = 0u32;
        for (j, &w) in block.0.iter().enumerate() {
            let m = if j < wi {
                u64::MAX
            } else if j == wi {
                low
            } else {
                0
            };
            s += (w & m).count_ones();
        }
        let mut idx = pos / BLOCK_BITS;
        for l in &self.levels {
            s += l[idx / FAN].sum_below(idx % FAN);
            idx /= FAN;
        }
        s
    }

    #[inline(always)]
    fn prefetch(&self, pos: usize) {
        let b = pos / BLOCK_BITS;
        prefetch(self.blocks.as_ptr().wrapping_add(b));
        prefetch(self.levels[0].as_ptr().wrapping_add(b / FAN));
    }

    fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * 64 + self.levels.iter().map(|l| l.capacity() * 64).sum::<usize>()
    }

    /// The new slot of every live slot when the live slots are renumbered
    /// `0..live` in order: set bits before it.
    fn ranker(&self) -> impl Fn(usize) -> u32 + '_ {
        let mut before = Vec::with_capacity(self.blocks.len() * 8);
        let mut run = 0u32;
        for w in self.blocks.iter().flat_map(|b| b.0.iter()) {
            before.push(run);
            run += w.count_ones();
        }
        move |s| {
            let w = self.blocks[s / BLOCK_BITS].0[(s / 64) % 8];
            before[s / 64] + (w & ((1u64 << (s % 64)) - 1)).count_ones()
        }
    }
}

/// Exact reuse-distance engine over `u64` keys.
#[derive(Debug, Clone)]
pub struct ReuseEngine {
    table: LastTable,
    bits: CountedBitmap,
    /// The next free slot.
    now: usize,
    /// The slots of the marked keys, once there is one.
    marked: Option<Box<CountedBitmap>>,
    /// Live marked keys.
    marked_len: usize,
}

const MIN_CAPACITY: usize = 1 << 12;
/// References per stage of [`ReuseEngine::access_batch`]'s prefetch pipeline.
const CHUNK: usize = 32;

impl Default for ReuseEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl ReuseEngine {
    pub fn new() -> Self {
        ReuseEngine {
            table: LastTable::new(10),
            bits: CountedBitmap::with_prefix(MIN_CAPACITY, 0),
            now: 0,
            marked: None,
            marked_len: 0,
        }
    }

    /// Number of distinct keys seen so far (less those removed).
    pub fn distinct(&self) -> usize {
        self.table.len
    }

    /// Heap bytes held by the engine.
    pub fn heap_bytes(&self) -> usize {
        self.table.entries.capacity() * std::mem::size_of::<Entry>()
            + self.bits.heap_bytes()
            + self.marked.as_ref().map_or(0, |m| m.heap_bytes())
    }

    /// Renumber the live keys' slots to `0..M` in recency order, in a bitmap of
    /// at least four times the live count, so compaction is amortized O(1) per
    /// access (and, at 1 bit per slot, cheap in memory: a rebuild scans the whole
    /// table, so fewer of them pay for a bigger bitmap — 10 % of the time at 2×).
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        let live = self.table.len;
        {
            let rank = self.bits.ranker();
            for e in self.table.entries.iter_mut().filter(|e| e.slot != EMPTY) {
                e.slot = rank(e.slot as usize);
            }
        }
        let cap = (live * 4).max(MIN_CAPACITY).next_power_of_two();
        self.bits = CountedBitmap::with_prefix(cap, live);
        if self.marked.is_some() {
            let mut m = CountedBitmap::with_prefix(cap, 0);
            for e in self.table.entries.iter().filter(|e| e.slot != EMPTY) {
                if e.count & MARK != 0 {
                    m.set(e.slot as usize);
                }
            }
            self.marked = Some(Box::new(m));
        }
        self.now = live;
    }

    /// Record an access to `key`. Returns the number of distinct other keys
    /// accessed since its previous access, or `None` on its first access (cold).
    pub fn access(&mut self, key: u64) -> Option<u64> {
        self.access_inline(key)
    }

    #[inline(always)]
    fn access_inline(&mut self, key: u64) -> Option<u64> {
        self.access_counted_inline(key).0
    }

    /// [`access`](Self::access), also returning how many times `key` has been
    /// accessed since it entered (this access included).
    pub fn access_counted(&mut self, key: u64) -> (Option<u64>, u32) {
        let (d, c) = self.access_counted_inline(key);
        (d, c & !MARK)
    }

    /// An access to `key`, which enters marked when `mark` (a key keeps the mark
    /// it entered with). `None` on its first access; else its previous slot, the
    /// distinct other keys since then, and how many of those are marked. Slots
    /// compare in time order until the next access (see [`ReuseEngine::slot_of`]).
    #[inline]
    pub fn access_classed(&mut self, key: u64, mark: bool) -> Option<(u32, u64, u64)> {
        if self.now == self.bits.cap() {
            self.compact();
        }
        let now = self.now;
        self.now += 1;
        let (prev, count) = self
            .table
            .upsert(key, now as u32, if mark { MARK } else { 0 });
        self.bits.set(now);
        let marked = count & MARK != 0;
        if marked {
            let cap = self.bits.cap();
            let m = self
                .marked
                .get_or_insert_with(|| Box::new(CountedBitmap::with_prefix(cap, 0)));
            m.set(now);
            if prev.is_none() {
                self.marked_len += 1;
            }
        }
        let prev = prev? as usize;
        let d = self.table.len as u32 - self.bits.prefix(prev + 1);
        self.bits.clear(prev);
        // Marked slots after `prev`, this key's new one excluded (it has two
        // bits now when marked, one of them at `prev`).
        let dm = match self.marked.as_deref_mut() {
            Some(m) => {
                let x = self.marked_len as u32 - m.prefix(prev + 1);
                if marked {
                    m.clear(prev);
                }
                x
            }
            None => 0,
        };
        Some((prev as u32, d as u64, dm as u64))
    }

    /// The slot of `key`'s last access, if it is live: greater than the
    /// `prev` an [`ReuseEngine::access_classed`] returned exactly when `key` was
    /// accessed since that access's key was, until the next access.
    pub fn slot_of(&self, key: u64) -> Option<u32> {
        self.table.get(key)
    }

    #[inline(always)]
    fn access_counted_inline(&mut self, key: u64) -> (Option<u64>, u32) {
        if self.now == self.bits.cap() {
            self.compact();
        }
        let now = self.now;
        self.now += 1;
        let (prev, count) = self.table.upsert(key, now as u32, 0);
        self.bits.set(now);
        let Some(prev) = prev else {
            return (None, count);
        };
        let prev = prev as usize;
        // Set slots after `prev` (and before `now`) = live keys - slots 0..=prev.
        let d = self.table.len as u32 - self.bits.prefix(prev + 1);
        self.bits.clear(prev);
        (Some(d as u64), count)
    }

    /// Σ over live keys of (accesses since the key entered)².
    pub fn count_squares(&self) -> f64 {
        self.table
            .entries
            .iter()
            .filter(|e| e.slot != EMPTY)
            .map(|e| ((e.count & !MARK) as f64) * ((e.count & !MARK) as f64))
            .sum()
    }

    /// [`access`](Self::access) for each key in order, handing each result to
    /// `sink`; prefetches the table and bitmap lines of references a few
    /// positions ahead, which is several times faster on footprints beyond the
    /// caches. Results are exactly those of `access`.
    pub fn access_batch(&mut self, keys: &[u64], sink: impl FnMut(Option<u64>)) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("popcnt") && std::is_x86_feature_detected!("avx2") {
            // SAFETY: the features were just detected on this CPU.
            unsafe { self.access_batch_x86(keys, sink) };
            return;
        }
        self.access_batch_generic(keys, sink)
    }

    /// The batch loop compiled with hardware popcount and 256-bit sums (the
    /// x86-64 baseline has neither; everything it calls is inlined into it).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt,avx2")]
    unsafe fn access_batch_x86(&mut self, keys: &[u64], sink: impl FnMut(Option<u64>)) {
        self.access_batch_generic(keys, sink)
    }

    /// Three-stage software pipeline over chunks of `CHUNK` keys: prefetch the
    /// table lines of chunk j + 2, read those of chunk j + 1 to prefetch their
    /// bitmap and count lines, process chunk j. The prefetch loops are tight, so
    /// a whole chunk's cache (and TLB) misses are in flight at once; a prefetch
    /// inside the long per-reference loop would hold the reorder buffer on a page
    /// walk and let only two or three references overlap.
    #[inline(always)]
    fn access_batch_generic(&mut self, keys: &[u64], mut sink: impl FnMut(Option<u64>)) {
        let chunks: Vec<&[u64]> = keys.chunks(CHUNK).collect();
        for j in 0..chunks.len() {
            if let Some(c) = chunks.get(j + 2) {
                for &k in c.iter() {
                    self.table.prefetch(k);
                }
            }
            if let Some(c) = chunks.get(j + 1) {
                for &k in c.iter() {
                    if let Some(slot) = self.table.peek(k) {
                        self.bits.prefetch(slot as usize);
                    }
                }
            }
            for &k in chunks[j] {
                sink(self.access_inline(k));
            }
        }
    }

    /// Forget `key` (SHARDS evicting it from the sample): it no longer counts in
    /// other keys' distances and its next access is cold. Returns whether it was
    /// there.
    pub fn remove(&mut self, key: u64) -> bool {
        match self.table.remove(key) {
            Some((slot, count)) => {
                self.bits.clear(slot as usize);
                if count & MARK != 0 {
                    if let Some(m) = self.marked.as_deref_mut() {
                        m.clear(slot as usize);
                        self.marked_len -= 1;
                    }
                }
                true
            }
            None => false,
        }
    }
}

/// A reuse-distance histogram: `counts[d]` references with distance `d`, plus cold
/// (first-touch) references.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub cold: u64,
    pub total: u64,
}

impl Histogram {
    pub fn record(&mut self, d: Option<u64>) {
        self.total += 1;
        match d {
            None => self.cold += 1,
            Some(d) => {
                let d = d as usize;
                if d >= self.counts.len() {
                    self.counts.resize(d + 1, 0);
                }
                self.counts[d] += 1;
            }
        }
    }

    /// Misses of a fully associative LRU structure with `capacity` entries
    /// (seed 001 eq. 1): cold references plus those with distance >= capacity.
    pub fn misses(&self, capacity: u64) -> u64 {
        let c = (capacity as usize).min(self.counts.len());
        self.cold + self.counts[c..].iter().sum::<u64>()
    }

    pub fn miss_ratio(&self, capacity: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.misses(capacity) as f64 / self.total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute force: an explicit LRU stack with move-to-front.
    fn brute(trace: &[u64]) -> Vec<Option<u64>> {
        let mut stack: Vec<u64> = Vec::new();
        trace
            .iter()
            .map(|&k| match stack.iter().position(|&x| x == k) {
                None => {
                    stack.insert(0, k);
                    None
                }
                Some(pos) => {
                    stack.remove(pos);
                    stack.insert(0, k);
                    Some(pos as u64)
                }
            })
            .collect()
    }

    fn engine(trace: &[u64]) -> Vec<Option<u64>> {
        let mut e = ReuseEngine::new();
        trace.iter().map(|&k| e.access(k)).collect()
    }

    #[test]
    fn seed_example() {
        // "a b c c a": the second a has reuse distance 2 (seed 001 §3.1).
        assert_eq!(
            engine(&[1, 2, 3, 3, 1]),
            vec![None, None, None, Some(0), Some(2)]
        );
    }

    #[test]
    fn compaction_keeps_distances_exact() {
        // A cyclic scan over more keys than the minimum capacity forces many
        // compactions; every re-reference has distance keys-1.
        let keys = 5000u64;
        let mut e = ReuseEngine::new();
        for round in 0..6 {
            for k in 0..keys {
                let d = e.access(k * 7919);
                if round == 0 {
                    assert_eq!(d, None);
                } else {
                    assert_eq!(d, Some(keys - 1));
                }
            }
        }
        assert_eq!(e.distinct(), keys as usize);
    }

    #[test]
    fn histogram_misses() {
        let mut h = Histogram::default();
        for d in [None, Some(0), Some(3), Some(10), None] {
            h.record(d);
        }
        assert_eq!(h.misses(0), 5);
        assert_eq!(h.misses(1), 4);
        assert_eq!(h.misses(4), 3);
        assert_eq!(h.misses(11), 2);
        assert_eq!(h.misses(1_000_000), 2);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_traces_match_brute_force(trace in proptest::collection::vec(0u64..64, 0..3000)) {
            prop_assert_eq!(engine(&trace), brute(&trace));
        }

        #[test]
        fn wide_key_space_matches_brute_force(trace in proptest::collection::vec(any::<u64>(), 0..500)) {
            prop_assert_eq!(engine(&trace), brute(&trace));
        }

    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]

        /// Adversarial shapes: long sweeps larger than the tree's initial capacity
        /// mixed with hot keys, which stress compaction and the Fenwick bounds.
        #[test]
        fn sweeps_with_hot_keys_match_brute_force(
            sweep in 4000u64..6000,
            hot in proptest::collection::vec(0u64..8, 1..8),
            every in 1usize..50,
        ) {
            let mut trace = Vec::new();
            for round in 0..3u64 {
                for k in 0..sweep {
                    trace.push(1000 + (k * 31 + round) % sweep);
                    if (k as usize).is_multiple_of(every) {
                        trace.push(hot[(k as usize) % hot.len()]);
                    }
                }
            }
            prop_assert_eq!(engine(&trace), brute(&trace));
        }
    }
}
