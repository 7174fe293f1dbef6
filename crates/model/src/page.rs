//! Page sizes and backings, and the page keys the reuse-distance engines see.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub const SHIFT_4K: u32 = 12;
pub const SHIFT_2M: u32 = 21;
pub const SHIFT_1G: u32 = 30;
pub const SIZE_2M: u64 = 1 << SHIFT_2M;
pub const SIZE_1G: u64 = 1 << SHIFT_1G;

/// Leaf sizes of the x86-64 / arm64 (4 KB granule) page table: what a page walk
/// ends in and what a TLB entry translates (before coalescing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PageSize {
    #[serde(rename = "4k")]
    P4k,
    #[serde(rename = "2m")]
    P2m,
    #[serde(rename = "1g")]
    P1g,
}

impl PageSize {
    pub const ALL: [PageSize; 3] = [PageSize::P4k, PageSize::P2m, PageSize::P1g];

    pub fn index(self) -> usize {
        self as usize
    }
    pub fn shift(self) -> u32 {
        match self {
            PageSize::P4k => SHIFT_4K,
            PageSize::P2m => SHIFT_2M,
            PageSize::P1g => SHIFT_1G,
        }
    }
    pub fn bytes(self) -> u64 {
        1 << self.shift()
    }
    pub fn name(self) -> &'static str {
        match self {
            PageSize::P4k => "4k",
            PageSize::P2m => "2m",
            PageSize::P1g => "1g",
        }
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PageSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PageSize::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown page size '{s}' (expected 4k, 2m or 1g)"))
    }
}

/// Shifts of the multi-size THP (mTHP) folio sizes, 16 KB .. 1 MB.
pub const MTHP_SHIFTS: std::ops::RangeInclusive<u8> = 14..=20;

/// How memory is backed: the folio size decides the faults and what the page
/// table maps; the mechanism decides the fault cost and the budget (hugetlb pages
/// come from the reserved pool, THP from the buddy allocator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Backing {
    Base4k,
    /// Transparent huge pages with folios of 2^shift bytes: 14..=20 (mTHP) or 21.
    Thp(u8),
    Hugetlb2m,
    Hugetlb1g,
}

impl Backing {
    #[allow(non_upper_case_globals)]
    pub const Thp2m: Backing = Backing::Thp(SHIFT_2M as u8);

    /// Every backing the model knows, smallest folio first within each mechanism.
    pub fn all() -> Vec<Backing> {
        let mut v = vec![Backing::Base4k];
        v.extend(MTHP_SHIFTS.map(Backing::Thp));
        v.extend([Backing::Thp2m, Backing::Hugetlb2m, Backing::Hugetlb1g]);
        v
    }

    pub fn name(self) -> String {
        match self {
            Backing::Base4k => "4k".into(),
            Backing::Thp(s) => format!("thp-{}", size_name(1u64 << s)),
            Backing::Hugetlb2m => "hugetlb-2m".into(),
            Backing::Hugetlb1g => "hugetlb-1g".into(),
        }
    }
    /// Bytes of one folio (one fault maps this much).
    pub fn folio_bytes(self) -> u64 {
        1 << self.folio_shift()
    }
    pub fn folio_shift(self) -> u32 {
        match self {
            Backing::Base4k => SHIFT_4K,
            Backing::Thp(s) => s as u32,
            Backing::Hugetlb2m => SHIFT_2M,
            Backing::Hugetlb1g => SHIFT_1G,
        }
    }
    /// The page-table leaf that maps it: mTHP folios are mapped by 4 KB entries.
    pub fn leaf(self) -> PageSize {
        match self.folio_shift() {
            SHIFT_1G => PageSize::P1g,
            SHIFT_2M => PageSize::P2m,
            _ => PageSize::P4k,
        }
    }
    pub fn is_huge(self) -> bool {
        self != Backing::Base4k
    }
    pub fn is_mthp(self) -> bool {
        matches!(self, Backing::Thp(s) if (s as u32) < SHIFT_2M)
    }
    /// Whether the backing consumes pages of a hugetlb pool.
    pub fn uses_pool(self) -> bool {
        matches!(self, Backing::Hugetlb2m | Backing::Hugetlb1g)
    }
    pub fn is_thp(self) -> bool {
        matches!(self, Backing::Thp(_))
    }
    /// Dense index over [`Backing::all`], for per-backing tables.
    pub fn index(self) -> usize {
        match self {
            Backing::Base4k => 0,
            Backing::Thp(s) => (s as usize).clamp(14, 21) - 13,
            Backing::Hugetlb2m => 9,
            Backing::Hugetlb1g => 10,
        }
    }
}

/// Number of distinct backings ([`Backing::index`] is below this).
pub const BACKINGS: usize = 11;

/// `16k`, `2m`, `1g`: the kernel's and the plan file's spelling of a size.
pub fn size_name(bytes: u64) -> String {
    if bytes >= SIZE_1G && bytes.is_multiple_of(SIZE_1G) {
        format!("{}g", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}m", bytes >> 20)
    } else {
        format!("{}k", bytes >> 10)
    }
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl From<Backing> for String {
    fn from(b: Backing) -> String {
        b.name()
    }
}

impl TryFrom<String> for Backing {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl FromStr for Backing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backing::all()
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown page backing '{s}' (expected 4k, thp-16k .. thp-1m, thp-2m, \
                     hugetlb-2m or hugetlb-1g)"
                )
            })
    }
}

/// Key tags: the top bits keep 4 KB keys, the keys of larger translations and
/// the keys of the different placement schemes in disjoint spaces.
pub const TAG_HUGE: u64 = 1 << 63;
pub const TAG_STATIC: u64 = 1 << 62;
pub const TAG_OWNED: u64 = 1 << 61;
/// Bits 56..60: the shift of the translation a key names (0 for plain 4 KB keys).
pub const TAG_SHIFT_POS: u32 = 56;

pub fn key_4k(addr: u64) -> u64 {
    addr >> SHIFT_4K
}

/// The key of the translation of `shift` bytes covering `addr` in a placement
/// space (`TAG_OWNED`, `TAG_STATIC` or 0 for captured addresses).
pub fn key(space: u64, shift: u32, addr: u64) -> u64 {
    if shift == SHIFT_4K && space == 0 {
        return addr >> SHIFT_4K;
    }
    TAG_HUGE | space | ((shift as u64) << TAG_SHIFT_POS) | ((addr >> shift) & ((1 << 55) - 1))
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

pub fn align_down(x: u64, a: u64) -> u64 {
    x / a * a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_names_round_trip() {
        for b in Backing::all() {
            assert_eq!(b.name().parse::<Backing>().unwrap(), b);
            let json = serde_json_like(b);
            assert_eq!(json, b.name());
        }
        assert_eq!(Backing::Thp(14).name(), "thp-16k");
        assert_eq!(Backing::Thp(20).name(), "thp-1m");
        assert_eq!(Backing::Thp2m.name(), "thp-2m");
        assert!("thp-8k".parse::<Backing>().is_err());
        assert!("hugetlb-4m".parse::<Backing>().is_err());
        assert_eq!(Backing::Thp(16).leaf(), PageSize::P4k);
        assert_eq!(Backing::Hugetlb1g.leaf(), PageSize::P1g);
        assert!(Backing::Thp(16).is_mthp() && !Backing::Thp2m.is_mthp());
        let idx: Vec<usize> = Backing::all().iter().map(|b| b.index()).collect();
        assert_eq!(idx, (0..BACKINGS).collect::<Vec<_>>());
    }

    fn serde_json_like(b: Backing) -> String {
        String::from(b)
    }

    #[test]
    fn keys_of_different_sizes_and_spaces_differ() {
        let a = 0x7f12_3456_7000u64;
        let k = [
            key(0, SHIFT_4K, a),
            key(0, 16, a),
            key(0, SHIFT_2M, a),
            key(TAG_OWNED, SHIFT_2M, a),
            key(TAG_STATIC, SHIFT_2M, a),
            key(TAG_OWNED, SHIFT_1G, a),
        ];
        for i in 0..k.len() {
            for j in 0..i {
                assert_ne!(k[i], k[j], "{i} {j}");
            }
        }
        assert_eq!(key(0, SHIFT_4K, a), a >> 12);
    }
}
