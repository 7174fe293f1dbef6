//! TLB geometry, and the two ways the model turns a page stream into TLB misses:
//!
//! - the fully associative LRU approximation (seed 001 eq. 1): a level's array
//!   misses when the reuse distance among the translations it holds is at least its
//!   entry count. One histogram answers every size, and sampling (SHARDS) applies;
//! - an exact trace-driven simulation of set-associative LRU arrays ([`TlbSim`]),
//!   level by level with fills on the way back, used as ground truth to measure
//!   the approximation's error.
//!
//! A level is one or more arrays, each holding some leaf sizes (AMD's L1 holds all
//! sizes in one array; Intel's L1 has one array per size; a level without an array
//! for 1 GB pages holds them "smashed" as 2 MB entries, as AMD's L2 does). A level
//! may coalesce aligned, contiguous 4 KB entries into one (AMD: 16 KB or 32 KB;
//! ARM's contiguous bit: 64 KB): only then do mTHP folios extend TLB reach.

use crate::page::{PageSize, SHIFT_4K};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlbArray {
    /// Leaf sizes this array holds.
    pub sizes: Vec<PageSize>,
    pub entries: u64,
    /// Associativity; 0 means fully associative.
    #[serde(default)]
    pub ways: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlbLevel {
    /// `L1 DTLB`, `L2 DTLB`, `STLB`.
    pub name: String,
    pub arrays: Vec<TlbArray>,
    /// Bytes of aligned, contiguous 4 KB mappings the level merges into one entry
    /// when one folio backs them all (a power of two, 8 KB .. 1 MB); none: no merging.
    #[serde(default)]
    pub coalesce: Option<u64>,
}

/// Data TLB geometry of a CPU, first level first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlbGeometry {
    pub levels: Vec<TlbLevel>,
    /// Where these numbers come from (cpuid, a preset, an override file).
    pub source: String,
}

/// Where a translation lands at one level: which array, and the bytes one entry
/// covers (the key's shift).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    pub array: usize,
    pub shift: u32,
}

impl TlbArray {
    pub fn new(sizes: &[PageSize], entries: u64, ways: u64) -> Self {
        TlbArray {
            sizes: sizes.to_vec(),
            entries,
            ways,
        }
    }
}

impl TlbLevel {
    pub fn new(name: &str, arrays: Vec<TlbArray>, coalesce: Option<u64>) -> Self {
        TlbLevel {
            name: name.into(),
            arrays,
            coalesce,
        }
    }

    /// The array and entry size for a translation of leaf `leaf` within a folio of
    /// 2^`folio_shift` bytes, or `None` when the level cannot hold it.
    pub fn slot(&self, leaf: PageSize, folio_shift: u32) -> Option<Slot> {
        let held = |s: PageSize| self.arrays.iter().position(|a| a.sizes.contains(&s));
        if let Some(array) = held(leaf) {
            let mut shift = leaf.shift();
            if leaf == PageSize::P4k {
                if let Some(c) = self.coalesce {
                    let cs = c.trailing_zeros();
                    if folio_shift >= cs {
                        shift = cs;
                    }
                }
            }
            return Some(Slot { array, shift });
        }
        // Smashed: held as the largest smaller size the level has.
        PageSize::ALL
            .iter()
            .rev()
            .filter(|&&s| s < leaf)
            .find_map(|&s| {
                held(s).map(|array| Slot {
                    array,
                    shift: s.shift(),
                })
            })
    }

    /// Entries available to translations of leaf size `s` (0 when not held).
    pub fn entries(&self, s: PageSize) -> u64 {
        self.arrays
            .iter()
            .find(|a| a.sizes.contains(&s))
            .map_or(0, |a| a.entries)
    }
}

impl TlbGeometry {
    pub fn last(&self) -> &TlbLevel {
        self.levels.last().expect("validated geometry has a level")
    }

    /// Checks the geometry is usable: at least one level, arrays with entries,
    /// associativity dividing the entries, each size in at most one array of a level.
    pub fn validate(&self) -> Result<(), String> {
        if self.levels.is_empty() || self.levels.len() > 4 {
            return Err("a TLB geometry needs 1 to 4 levels".into());
        }
        for l in &self.levels {
            if l.arrays.is_empty() {
                return Err(format!("TLB level '{}' has no arrays", l.name));
            }
            for a in &l.arrays {
                if a.entries == 0 || a.entries > 1 << 20 {
                    return Err(format!(
                        "TLB level '{}': an array has {} entries (1 .. 1048576 allowed)",
                        l.name, a.entries
                    ));
                }
                if a.sizes.is_empty() {
                    return Err(format!(
                        "TLB level '{}': an array holds no page size",
                        l.name
                    ));
                }
                if a.ways != 0 && !a.entries.is_multiple_of(a.ways) {
                    return Err(format!(
                        "TLB level '{}': {} entries is not a multiple of {} ways",
                        l.name, a.entries, a.ways
                    ));
                }
            }
            for s in PageSize::ALL {
                if l.arrays.iter().filter(|a| a.sizes.contains(&s)).count() > 1 {
                    return Err(format!(
                        "TLB level '{}': page size {s} is in more than one array",
                        l.name
                    ));
                }
            }
            if !l.arrays.iter().any(|a| a.sizes.contains(&PageSize::P4k)) {
                return Err(format!("TLB level '{}' holds no 4k translations", l.name));
            }
            if let Some(c) = l.coalesce {
                if !c.is_power_of_two() || !(8 << 10..=1 << 20).contains(&c) {
                    return Err(format!(
                        "TLB level '{}': coalescing of {c} bytes (a power of two, 8 KiB .. 1 MiB)",
                        l.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// One line per level: `L1 DTLB 96 (4k,2m,1g) fully assoc.; coalesces 16 KiB`.
    pub fn describe(&self) -> Vec<String> {
        self.levels
            .iter()
            .map(|l| {
                let arrays: Vec<String> = l
                    .arrays
                    .iter()
                    .map(|a| {
                        let sizes: Vec<&str> = a.sizes.iter().map(|s| s.name()).collect();
                        let assoc = if a.ways == 0 || a.ways == a.entries {
                            "fully assoc.".to_string()
                        } else {
                            format!("{}-way", a.ways)
                        };
                        format!("{} x {} {}", a.entries, sizes.join("/"), assoc)
                    })
                    .collect();
                let co = l
                    .coalesce
                    .map(|c| format!("; coalesces {} KiB", c >> 10))
                    .unwrap_or_default();
                format!("{}: {}{}", l.name, arrays.join(" + "), co)
            })
            .collect()
    }
}

/// A set-associative LRU array (ways = entries: fully associative). Sets are
/// indexed by the low bits of the key (the virtual page number), as real TLBs do.
#[derive(Debug, Clone)]
struct SetAssoc {
    sets: u64,
    ways: usize,
    /// `sets * ways` keys; each set ordered most recent first. `u64::MAX` is empty.
    slots: Vec<u64>,
}

impl SetAssoc {
    fn new(a: &TlbArray) -> Self {
        let ways = if a.ways == 0 { a.entries } else { a.ways };
        let sets = a.entries / ways;
        SetAssoc {
            sets,
            ways: ways as usize,
            slots: vec![u64::MAX; a.entries as usize],
        }
    }

    /// Looks `key` up; on a hit moves it to the front. Returns whether it hit.
    fn lookup(&mut self, key: u64) -> bool {
        let set = self.set(key);
        match set.iter().position(|&k| k == key) {
            Some(i) => {
                set[..=i].rotate_right(1);
                true
            }
            None => false,
        }
    }

    /// Inserts `key` as the most recent entry, evicting the least recent.
    fn fill(&mut self, key: u64) {
        let set = self.set(key);
        set.rotate_right(1);
        set[0] = key;
    }

    fn set(&mut self, key: u64) -> &mut [u64] {
        // Tags live in the top bits; index with the page number bits only.
        let s = ((key & ((1 << 55) - 1)) % self.sets) as usize;
        &mut self.slots[s * self.ways..(s + 1) * self.ways]
    }
}

/// Exact simulation of a TLB hierarchy: a lookup goes level by level; a hit at a
/// lower level fills the levels above it; a miss everywhere is a page walk, which
/// fills every level.
#[derive(Debug, Clone)]
pub struct TlbSim {
    levels: Vec<Vec<SetAssoc>>,
}

impl TlbSim {
    pub fn new(g: &TlbGeometry) -> Self {
        TlbSim {
            levels: g
                .levels
                .iter()
                .map(|l| l.arrays.iter().map(SetAssoc::new).collect())
                .collect(),
        }
    }

    /// One reference, given where its translation lands at each level (`None`: the
    /// level cannot hold it) and its key there. Returns the index of the level that
    /// hit, or `levels` for a walk.
    pub fn access(&mut self, slots: &[Option<(usize, u64)>]) -> usize {
        let n = self.levels.len();
        let mut hit = n;
        for (i, s) in slots.iter().enumerate().take(n) {
            if let Some((array, key)) = *s {
                if self.levels[i][array].lookup(key) {
                    hit = i;
                    break;
                }
            }
        }
        for (i, s) in slots.iter().enumerate().take(hit.min(n)) {
            if let Some((array, key)) = *s {
                self.levels[i][array].fill(key);
            }
        }
        hit
    }
}

/// The 4 KB shift, for callers that build slots by hand.
pub const BASE_SHIFT: u32 = SHIFT_4K;

#[cfg(test)]
mod tests {
    use super::*;
    use PageSize::*;

    fn zen5() -> TlbGeometry {
        TlbGeometry {
            levels: vec![
                TlbLevel::new(
                    "L1 DTLB",
                    vec![TlbArray::new(&[P4k, P2m, P1g], 96, 0)],
                    None,
                ),
                TlbLevel::new("L2 DTLB", vec![TlbArray::new(&[P4k, P2m], 4096, 8)], None),
            ],
            source: "test".into(),
        }
    }

    #[test]
    fn slots_smash_and_coalesce() {
        let g = zen5();
        assert_eq!(
            g.levels[1].slot(P1g, 30),
            Some(Slot {
                array: 0,
                shift: 21
            }),
            "the L2 holds 1 GB pages as 2 MB entries"
        );
        assert_eq!(
            g.levels[0].slot(P1g, 30),
            Some(Slot {
                array: 0,
                shift: 30
            })
        );
        assert_eq!(
            g.levels[0].slot(P4k, 16),
            Some(Slot {
                array: 0,
                shift: 12
            })
        );
        let arm = TlbLevel::new(
            "L1",
            vec![TlbArray::new(&[P4k, P2m, P1g], 48, 0)],
            Some(64 << 10),
        );
        assert_eq!(
            arm.slot(P4k, 16),
            Some(Slot {
                array: 0,
                shift: 16
            })
        );
        assert_eq!(
            arm.slot(P4k, 15),
            Some(Slot {
                array: 0,
                shift: 12
            }),
            "32 KB folios do not fill a 64 KB entry"
        );
        assert_eq!(
            arm.slot(P4k, 20),
            Some(Slot {
                array: 0,
                shift: 16
            })
        );
        let only4k = TlbLevel::new("L2", vec![TlbArray::new(&[P4k], 512, 4)], None);
        assert_eq!(
            only4k.slot(P2m, 21),
            Some(Slot {
                array: 0,
                shift: 12
            })
        );
        g.validate().unwrap();
    }

    #[test]
    fn bad_geometries_are_rejected() {
        let mut g = zen5();
        g.levels[1].arrays[0].ways = 7;
        assert!(g.validate().unwrap_err().contains("multiple of 7 ways"));
        let mut g = zen5();
        g.levels[0].coalesce = Some(3000);
        assert!(g.validate().is_err());
        let mut g = zen5();
        g.levels[0].arrays.push(TlbArray::new(&[P2m], 32, 4));
        assert!(g.validate().unwrap_err().contains("more than one array"));
        let g = TlbGeometry {
            levels: vec![],
            source: "x".into(),
        };
        assert!(g.validate().is_err());
    }

    /// A fully associative simulated array agrees with the reuse-distance rule.
    #[test]
    fn fully_associative_sim_matches_reuse_distance() {
        use crate::reuse::ReuseEngine;
        let g = TlbGeometry {
            levels: vec![TlbLevel::new(
                "L1",
                vec![TlbArray::new(&[P4k], 64, 0)],
                None,
            )],
            source: "t".into(),
        };
        let mut sim = TlbSim::new(&g);
        let mut e = ReuseEngine::new();
        let mut x = 99u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = x % 100;
            let walk = sim.access(&[Some((0, k))]) == 1;
            let d = e.access(k);
            assert_eq!(walk, d.is_none_or(|d| d >= 64));
        }
    }

    /// Set conflicts: 5 keys mapping to one set of a 4-way array always miss in a
    /// loop, while a fully associative array of the same size holds them.
    #[test]
    fn set_conflicts_are_simulated() {
        let g = TlbGeometry {
            levels: vec![TlbLevel::new(
                "L1",
                vec![TlbArray::new(&[P4k], 64, 4)],
                None,
            )],
            source: "t".into(),
        };
        let mut sim = TlbSim::new(&g);
        let keys: Vec<u64> = (0..5).map(|i| i * 16).collect();
        let mut walks = 0;
        for _ in 0..10 {
            for &k in &keys {
                walks += (sim.access(&[Some((0, k))]) == 1) as u32;
            }
        }
        assert_eq!(walks, 50);
    }

    #[test]
    fn lower_level_hits_fill_upper_levels() {
        let g = TlbGeometry {
            levels: vec![
                TlbLevel::new("L1", vec![TlbArray::new(&[P4k], 2, 0)], None),
                TlbLevel::new("L2", vec![TlbArray::new(&[P4k], 8, 0)], None),
            ],
            source: "t".into(),
        };
        let mut sim = TlbSim::new(&g);
        let s = |k| [Some((0, k)), Some((0, k))];
        assert_eq!(sim.access(&s(1)), 2);
        assert_eq!(sim.access(&s(2)), 2);
        assert_eq!(sim.access(&s(3)), 2);
        assert_eq!(sim.access(&s(1)), 1, "evicted from L1, still in L2");
        assert_eq!(sim.access(&s(1)), 0, "filled back into L1");
    }
}
