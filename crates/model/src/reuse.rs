//! Exact LRU stack (reuse) distance at page granularity, O(N log M).
//!
//! Bennett-Kruskal / Olken style: every live key owns one set slot in a Fenwick
//! tree over access "times"; the distance of a re-reference is the number of set
//! slots after the key's previous slot. Times are compacted to O(M) slots whenever
//! the clock reaches the tree's capacity, so memory stays proportional to the
//! number of distinct keys M, not to the trace length N.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Exact reuse-distance engine over `u64` keys.
#[derive(Debug, Clone)]
pub struct ReuseEngine {
    last: FxHashMap<u64, u32>,
    /// Fenwick tree (1-based) over time slots; each slot holds 0 or 1.
    tree: Vec<u32>,
    /// Key that owns each slot (meaningful only while `last[key] == slot`).
    slot_key: Vec<u64>,
    now: u32,
}

const MIN_CAPACITY: usize = 1 << 12;

impl Default for ReuseEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl ReuseEngine {
    pub fn new() -> Self {
        ReuseEngine {
            last: FxHashMap::default(),
            tree: vec![0; MIN_CAPACITY + 1],
            slot_key: vec![0; MIN_CAPACITY],
            now: 0,
        }
    }

    /// Number of distinct keys seen so far.
    pub fn distinct(&self) -> usize {
        self.last.len()
    }

    fn capacity(&self) -> usize {
        self.slot_key.len()
    }

    fn add(&mut self, slot: usize, delta: i32) {
        let mut i = slot + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of slots `0..=slot`.
    fn prefix(&self, slot: usize) -> u32 {
        let mut i = slot + 1;
        let mut s = 0u32;
        while i > 0 {
            s = s.wrapping_add(self.tree[i]);
            i &= i - 1;
        }
        s
    }

    /// Renumber the live keys' slots to `0..M` in recency order and resize the
    /// tree to twice the live count, so compaction is amortized O(1) per access.
    fn compact(&mut self) {
        let live = self.last.len();
        let mut order: Vec<(u32, u64)> = self.last.iter().map(|(&k, &t)| (t, k)).collect();
        order.sort_unstable_by_key(|&(t, _)| t);
        let cap = (live * 2).max(MIN_CAPACITY);
        self.slot_key = vec![0; cap];
        for (new_slot, &(_, key)) in order.iter().enumerate() {
            self.slot_key[new_slot] = key;
            self.last.insert(key, new_slot as u32);
        }
        // A Fenwick tree whose first `live` slots are 1: node i covers
        // (i - lowbit(i), i], so it holds the overlap of that range with 1..=live.
        self.tree = vec![0; cap + 1];
        for i in 1..=cap {
            let low = i - (i & i.wrapping_neg());
            self.tree[i] = live.min(i).saturating_sub(low) as u32;
        }
        self.now = live as u32;
    }

    /// Record an access to `key`. Returns the number of distinct other keys
    /// accessed since its previous access, or `None` on its first access (cold).
    pub fn access(&mut self, key: u64) -> Option<u64> {
        if self.now as usize == self.capacity() {
            self.compact();
        }
        let now = self.now as usize;
        self.now += 1;
        self.slot_key[now] = key;
        match self.last.insert(key, now as u32) {
            None => {
                self.add(now, 1);
                None
            }
            Some(prev) => {
                let prev = prev as usize;
                // Set slots after `prev` = live keys - slots up to and including prev.
                let live_before = (self.last.len()) as u32;
                let d = live_before - self.prefix(prev);
                self.add(prev, -1);
                self.add(now, 1);
                Some(d as u64)
            }
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
