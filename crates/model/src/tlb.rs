//! TLB geometry and the fully associative LRU estimate of TLB misses.
//!
//! Each level is modelled as a fully associative LRU array (seed 001 eq. 1 and its
//! footnote: a smaller fully associative TLB stands in for the set-associative one).
//! A level either holds every page size in one array (`shared`, as AMD's L1 and L2
//! and Intel's STLB do) or has one array per size (Intel's L1).

use crate::page::PageSize;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlbLevel {
    /// Entries available to 4 KB pages.
    pub entries_4k: u64,
    /// Entries available to 2 MB pages.
    pub entries_2m: u64,
    /// True when 4 KB and 2 MB translations compete for the same entries
    /// (`entries_4k` is then the array's size).
    pub shared: bool,
}

impl TlbLevel {
    pub fn entries(&self, size: PageSize) -> u64 {
        match size {
            PageSize::P4k => self.entries_4k,
            PageSize::P2m => self.entries_2m,
        }
    }
}

/// Data TLB geometry of a CPU: the first-level and the last-level data TLB.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlbGeometry {
    pub l1: TlbLevel,
    pub l2: TlbLevel,
    /// Where these numbers come from (cpuid, a preset, an override file).
    pub source: String,
}

impl TlbGeometry {
    /// Whether the model needs one reuse stack over all page sizes, and/or one
    /// stack per page size.
    pub fn needs_mixed(&self) -> bool {
        self.l1.shared || self.l2.shared
    }
    pub fn needs_split(&self) -> bool {
        !self.l1.shared || !self.l2.shared
    }

    /// Classify one reference given its distance in the mixed stack and in the
    /// stack of its own page size. Returns (l1 miss, l2 miss).
    pub fn classify(&self, size: PageSize, mixed: Option<u64>, split: Option<u64>) -> (bool, bool) {
        let miss = |level: &TlbLevel| {
            let d = if level.shared { mixed } else { split };
            match d {
                None => true,
                Some(d) => d >= level.entries(size),
            }
        };
        let l1 = miss(&self.l1);
        // An L2 hit needs an L1 miss first; an inclusive-enough approximation.
        let l2 = l1 && miss(&self.l2);
        (l1, l2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zen_like() -> TlbGeometry {
        TlbGeometry {
            l1: TlbLevel {
                entries_4k: 96,
                entries_2m: 96,
                shared: true,
            },
            l2: TlbLevel {
                entries_4k: 4096,
                entries_2m: 4096,
                shared: true,
            },
            source: "test".into(),
        }
    }

    #[test]
    fn classify_levels() {
        let g = zen_like();
        assert_eq!(
            g.classify(PageSize::P4k, Some(10), Some(10)),
            (false, false)
        );
        assert_eq!(
            g.classify(PageSize::P4k, Some(100), Some(100)),
            (true, false)
        );
        assert_eq!(
            g.classify(PageSize::P4k, Some(5000), Some(5000)),
            (true, true)
        );
        assert_eq!(g.classify(PageSize::P2m, None, None), (true, true));
        assert!(g.needs_mixed() && !g.needs_split());
    }

    #[test]
    fn split_levels_use_their_own_distance() {
        let g = TlbGeometry {
            l1: TlbLevel {
                entries_4k: 64,
                entries_2m: 32,
                shared: false,
            },
            l2: TlbLevel {
                entries_4k: 1536,
                entries_2m: 1536,
                shared: true,
            },
            source: "test".into(),
        };
        // Far in the mixed stack, near in its own 2 MB array: L1 hit.
        assert_eq!(
            g.classify(PageSize::P2m, Some(2000), Some(3)),
            (false, false)
        );
        assert_eq!(
            g.classify(PageSize::P2m, Some(2000), Some(40)),
            (true, true)
        );
        assert!(g.needs_mixed() && g.needs_split());
    }
}
