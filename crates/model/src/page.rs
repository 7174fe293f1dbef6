//! Page sizes and backings, and the page keys the reuse-distance engines see.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub const SHIFT_4K: u32 = 12;
pub const SHIFT_2M: u32 = 21;
pub const SIZE_2M: u64 = 1 << SHIFT_2M;

/// Page size classes the TLB model distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PageSize {
    #[serde(rename = "4k")]
    P4k,
    #[serde(rename = "2m")]
    P2m,
}

impl PageSize {
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn bytes(self) -> u64 {
        match self {
            PageSize::P4k => 4096,
            PageSize::P2m => SIZE_2M,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            PageSize::P4k => "4k",
            PageSize::P2m => "2m",
        }
    }
}

/// How memory is backed: the mechanism matters for fault cost and for the budget
/// (hugetlb pages come from the reserved pool, THP from the buddy allocator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Backing {
    #[serde(rename = "4k")]
    Base4k,
    #[serde(rename = "thp-2m")]
    Thp2m,
    #[serde(rename = "hugetlb-2m")]
    Hugetlb2m,
}

impl Backing {
    pub const ALL: [Backing; 3] = [Backing::Base4k, Backing::Thp2m, Backing::Hugetlb2m];

    pub fn name(self) -> &'static str {
        match self {
            Backing::Base4k => "4k",
            Backing::Thp2m => "thp-2m",
            Backing::Hugetlb2m => "hugetlb-2m",
        }
    }
    pub fn page_size(self) -> PageSize {
        match self {
            Backing::Base4k => PageSize::P4k,
            Backing::Thp2m | Backing::Hugetlb2m => PageSize::P2m,
        }
    }
    pub fn is_huge(self) -> bool {
        self != Backing::Base4k
    }
    /// Whether the backing consumes pages of the hugetlb pool.
    pub fn uses_pool(self) -> bool {
        self == Backing::Hugetlb2m
    }
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backing::ALL
            .iter()
            .copied()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                format!("unknown page backing '{s}' (expected 4k, thp-2m or hugetlb-2m)")
            })
    }
}

/// Key tags: the top bits keep 4 KB keys, and the 2 MB keys of the different
/// placement schemes, in disjoint spaces.
pub const TAG_2M: u64 = 1 << 63;
pub const TAG_OWNED: u64 = 1 << 61;
pub const TAG_STATIC: u64 = 1 << 62;

pub fn key_4k(addr: u64) -> u64 {
    addr >> SHIFT_4K
}

pub fn is_2m_key(key: u64) -> bool {
    key & TAG_2M != 0
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

pub fn align_down(x: u64, a: u64) -> u64 {
    x / a * a
}
