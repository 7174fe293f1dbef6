//! Published data-TLB geometries (REF-model §8), keyed by vendor, family and model
//! (x86) or MIDR implementer and part (ARM). cpuid cannot express skewed
//! associativity or coalescing, some of its encodings are lossy, hypervisors often
//! synthesize its TLB leaves, and ARM has no way to enumerate TLBs at all; these
//! figures fill in (docs/tlb.md has the table). "unverified" marks figures the
//! reference could not confirm from a primary source.

use hugetune_model::page::PageSize::{P1g, P2m, P4k};
use hugetune_model::tlb::{TlbArray, TlbGeometry, TlbLevel};

/// A preset as data: what it matches and how to build its levels.
pub struct PresetDef {
    pub name: &'static str,
    /// Where the figures come from; "unverified" where the reference says so.
    pub source: &'static str,
    /// x86: the cpuid vendor string; ARM: `ARM`.
    pub vendor: &'static str,
    /// x86: the family (extended family added); ARM: the MIDR implementer.
    pub family: u32,
    /// x86 models / ARM MIDR parts, inclusive ranges.
    pub models: &'static [(u32, u32)],
    levels: fn() -> Vec<TlbLevel>,
}

/// A preset matched to a CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub source: &'static str,
    pub geometry: TlbGeometry,
}

impl PresetDef {
    pub fn matches(&self, vendor: &str, family: u32, model: u32) -> bool {
        self.vendor == vendor
            && self.family == family
            && self.models.iter().any(|&(a, b)| (a..=b).contains(&model))
    }

    pub fn geometry(&self) -> TlbGeometry {
        TlbGeometry {
            levels: (self.levels)(),
            source: format!("preset {}", self.name),
        }
    }

    pub fn preset(&self) -> Preset {
        Preset {
            name: self.name,
            source: self.source,
            geometry: self.geometry(),
        }
    }
}

/// The preset for a CPU, if one matches.
pub fn lookup(vendor: &str, family: u32, model: u32) -> Option<Preset> {
    PRESETS
        .iter()
        .find(|p| p.matches(vendor, family, model))
        .map(PresetDef::preset)
}

/// Names of the ARM cores the presets know, by MIDR implementer and part.
pub fn arm_part_name(implementer: u32, part: u32) -> Option<&'static str> {
    match (implementer, part) {
        (0x41, 0xd0b) => Some("Cortex-A76"),
        (0x41, 0xd0c) => Some("Neoverse N1"),
        (0x41, 0xd40) => Some("Neoverse V1"),
        (0x41, 0xd4f) => Some("Neoverse V2"),
        _ => None,
    }
}

const KIB: u64 = 1 << 10;

/// AMD Zen: a fully associative L1 holding every size; an L2 whose 4 KB and 2 MB
/// entries share one skewed array (ways split by size, which the model cannot
/// express: it takes cpuid's lower bound of the 4 KB ways), plus an optional 1 GB
/// array (else 1 GB pages are smashed into 2 MB entries).
fn zen(
    l1: u64,
    l1_coalesce: Option<u64>,
    l2: u64,
    l2_ways: u64,
    l2_1g: Option<u64>,
) -> Vec<TlbLevel> {
    let mut l2_arrays = vec![TlbArray::new(&[P4k, P2m], l2, l2_ways)];
    if let Some(n) = l2_1g {
        l2_arrays.push(TlbArray::new(&[P1g], n, 0));
    }
    vec![
        TlbLevel::new(
            "L1 DTLB",
            vec![TlbArray::new(&[P4k, P2m, P1g], l1, 0)],
            l1_coalesce,
        ),
        TlbLevel::new("L2 DTLB", l2_arrays, None),
    ]
}

fn zen2() -> Vec<TlbLevel> {
    zen(64, None, 2048, 8, None)
}

fn zen3() -> Vec<TlbLevel> {
    zen(64, Some(16 * KIB), 2048, 8, Some(64))
}

fn zen4() -> Vec<TlbLevel> {
    zen(72, None, 3072, 8, Some(64))
}

fn zen5() -> Vec<TlbLevel> {
    zen(96, None, 4096, 8, None)
}

pub(crate) fn skylake() -> Vec<TlbLevel> {
    vec![
        TlbLevel::new(
            "L1 DTLB",
            vec![
                TlbArray::new(&[P4k], 64, 4),
                TlbArray::new(&[P2m], 32, 4),
                TlbArray::new(&[P1g], 4, 4),
            ],
            None,
        ),
        TlbLevel::new(
            "STLB",
            vec![
                TlbArray::new(&[P4k, P2m], 1536, 12),
                TlbArray::new(&[P1g], 16, 4),
            ],
            None,
        ),
    ]
}

/// Sunny Cove / Golden Cove STLB as leaf 0x18 describes it: 1024 × 4k/2m 8-way and
/// 1024 × 4k/1g 8-way. The model keeps a size in one array, so 4 KB gets both halves
/// (2048, 16-way) and 2 MB and 1 GB 1024 entries each.
fn stlb_sunny_cove() -> TlbLevel {
    TlbLevel::new(
        "STLB",
        vec![
            TlbArray::new(&[P4k], 2048, 16),
            TlbArray::new(&[P2m], 1024, 8),
            TlbArray::new(&[P1g], 1024, 8),
        ],
        None,
    )
}

fn ice_lake_sp() -> Vec<TlbLevel> {
    vec![
        TlbLevel::new(
            "L1 DTLB",
            vec![
                TlbArray::new(&[P4k], 64, 4),
                TlbArray::new(&[P2m], 32, 4),
                TlbArray::new(&[P1g], 8, 0),
            ],
            None,
        ),
        stlb_sunny_cove(),
    ]
}

fn sapphire_rapids() -> Vec<TlbLevel> {
    vec![
        TlbLevel::new(
            "L1 DTLB",
            vec![
                TlbArray::new(&[P4k], 96, 6),
                TlbArray::new(&[P2m], 32, 4),
                TlbArray::new(&[P1g], 8, 0),
            ],
            None,
        ),
        stlb_sunny_cove(),
    ]
}

/// ARM: a fully associative L1 and a set-associative L2 holding every size; the
/// contiguous bit merges 16 aligned 4 KB entries into one 64 KB entry.
fn neoverse(l1_sizes: &[hugetune_model::page::PageSize], l2: u64, l2_ways: u64) -> Vec<TlbLevel> {
    vec![
        TlbLevel::new(
            "L1 DTLB",
            vec![TlbArray::new(l1_sizes, 48, 0)],
            Some(64 * KIB),
        ),
        TlbLevel::new(
            "L2 TLB",
            vec![TlbArray::new(&[P4k, P2m, P1g], l2, l2_ways)],
            Some(64 * KIB),
        ),
    ]
}

fn neoverse_n1() -> Vec<TlbLevel> {
    neoverse(&[P4k, P2m], 1280, 5)
}

fn neoverse_v() -> Vec<TlbLevel> {
    neoverse(&[P4k, P2m, P1g], 2048, 8)
}

pub const PRESETS: &[PresetDef] = &[
    PresetDef {
        name: "AMD Zen 2",
        source: "WikiChip Zen 2: L1 64 fully assoc. 4K/2M/1G, L2 2048 12-way 4K/2M, \
                 1G smashed into 2M in the L2; 2048 is not a multiple of 12, so 8 ways \
                 (cpuid's lower bound, '8 to 15'); cpuid of EPYC 7742 (InstLatx64) agrees",
        vendor: "AuthenticAMD",
        family: 0x17,
        models: &[(0x30, 0x4f), (0x60, 0x7f), (0x90, 0x91), (0xa0, 0xaf)],
        levels: zen2,
    },
    PresetDef {
        name: "AMD Zen 3",
        source: "L1 64 fully assoc. and L2 2048 (AMD SOG 56665, unverified) as cpuid of \
                 EPYC 7763 (InstLatx64) gives them, with 64 x 1G in the L2; 8 ways: \
                 cpuid's lower bound ('8 to 15'); L1 coalesces 16 KB: IBS L1TlbPgSz \
                 16KB, Linux tools/perf/util/amd-sample-raw.c (erratum 1347 table, family \
                 19h models 00h-0Fh; assumed for all Zen 3)",
        vendor: "AuthenticAMD",
        family: 0x19,
        models: &[(0x00, 0x0f), (0x20, 0x5f)],
        levels: zen3,
    },
    PresetDef {
        name: "AMD Zen 4",
        source: "L1 72 fully assoc., L2 3072 (AMD SOG 57647, Chips and Cheese 'Zen 4 \
                 part 2'; unverified) as cpuid of EPYC 9654 (InstLatx64) gives them, \
                 with 64 x 1G in the L2; 8 ways: cpuid's lower bound ('8 to 15')",
        vendor: "AuthenticAMD",
        family: 0x19,
        models: &[(0x10, 0x1f), (0x60, 0xaf)],
        levels: zen4,
    },
    PresetDef {
        name: "AMD Zen 5",
        source: "Hot Chips 2024 'Zen 5': L1 96, L2 4K entries for everything but 1G \
                 (1G smashed into 2M in the L2); 8 ways: cpuid's lower bound ('8 to 15'); \
                 L2 knee between 3072 and 4096 pages measured on the reference machine \
                 (docs/model.md)",
        vendor: "AuthenticAMD",
        family: 0x1a,
        models: &[(0x00, 0x2f), (0x40, 0x4f), (0x60, 0x7f)],
        levels: zen5,
    },
    PresetDef {
        name: "Intel Skylake-SP / Cascade Lake",
        source: "CPUID leaf 2 descriptors 0x03, 0x63, 0xC3 (Intel SDM; community CPUID \
                 dump): L1 64 x 4K 4-way, 32 x 2M 4-way, 4 x 1G 4-way, STLB 1536 x 4K/2M \
                 and 16 x 1G 4-way; avires two_level_tlb.h (64/32/4, 1536/16); STLB \
                 12-way: WikiChip (0xC3 says 6-way)",
        vendor: "GenuineIntel",
        family: 6,
        models: &[(0x55, 0x55)],
        levels: skylake,
    },
    PresetDef {
        name: "Intel Skylake client (Skylake, Kaby/Coffee/Comet Lake)",
        source: "as Skylake-SP (same core): leaf 2 descriptors 0x03, 0x63, 0xC3; STLB \
                 12-way: WikiChip",
        vendor: "GenuineIntel",
        family: 6,
        models: &[
            (0x4e, 0x4e),
            (0x5e, 0x5e),
            (0x8e, 0x8e),
            (0x9e, 0x9e),
            (0xa5, 0xa6),
        ],
        levels: skylake,
    },
    PresetDef {
        name: "Intel Ice Lake-SP",
        source: "L1 64 x 4K, 32 x 2M, 8 x 1G (REF-model §8, unverified); 4-way/4-way/fully \
                 and the STLB from leaf 0x18 of Xeon Gold 6336Y (InstLatx64): 1024 x 4K/2M \
                 8-way + 1024 x 4K/1G 8-way (REF's 2048 x 4K/2M is unverified)",
        vendor: "GenuineIntel",
        family: 6,
        models: &[(0x6a, 0x6a), (0x6c, 0x6c)],
        levels: ice_lake_sp,
    },
    PresetDef {
        name: "Intel Sunny Cove client (Ice Lake client, Rocket Lake)",
        source: "the Sunny Cove core of Ice Lake-SP (its figures, unverified for the \
                 client parts); Rocket Lake's Cypress Cove is Sunny Cove backported to \
                 14 nm (AnandTech, Rocket Lake review); models: Linux intel-family.h \
                 (ICELAKE_L 0x7E, ICELAKE 0x7D, ROCKETLAKE 0xA7)",
        vendor: "GenuineIntel",
        family: 6,
        models: &[(0x7d, 0x7e), (0xa7, 0xa7)],
        levels: ice_lake_sp,
    },
    PresetDef {
        name: "Intel Sapphire Rapids / Emerald Rapids (Golden Cove)",
        source: "96 x 4K load DTLB: cpunews (Alder Lake analysis; leaf 0x18 says 64 = 16 \
                 sets x 4 ways, so 6-way is inferred); 32 x 2M 4-way, 8 x 1G fully assoc. \
                 and the STLB from leaf 0x18 of Xeon w7-2475X (InstLatx64): 1024 x 4K/2M \
                 8-way + 1024 x 4K/1G 8-way (REF's 2048 x 4K/2M + 1024 x 1G is \
                 unverified); the 16-entry store DTLB is not modelled",
        vendor: "GenuineIntel",
        family: 6,
        models: &[(0x8f, 0x8f), (0xcf, 0xcf)],
        levels: sapphire_rapids,
    },
    PresetDef {
        name: "ARM Neoverse N1",
        source: "Cortex-A76 TRM §A5.2, Intel Agilex-5 HPS TRM (A76): L1 48 fully assoc. \
                 (4K/16K/64K/2M/512M: 1G held as smaller entries), L2 1280 5-way for 4K \
                 to 1G; contiguous bit: 64 KB entries",
        vendor: "ARM",
        family: 0x41,
        models: &[(0xd0c, 0xd0c)],
        levels: neoverse_n1,
    },
    PresetDef {
        name: "ARM Cortex-A76",
        source: "Cortex-A76 TRM §A5.2 (the Neoverse N1 core): L1 48 fully assoc., L2 1280 \
                 5-way; contiguous bit: 64 KB entries",
        vendor: "ARM",
        family: 0x41,
        models: &[(0xd0b, 0xd0b)],
        levels: neoverse_n1,
    },
    PresetDef {
        name: "ARM Neoverse V1",
        source: "L1 48 fully assoc., L2 2048 8-way (REF-model §8, unverified); contiguous \
                 bit: 64 KB entries",
        vendor: "ARM",
        family: 0x41,
        models: &[(0xd40, 0xd40)],
        levels: neoverse_v,
    },
    PresetDef {
        name: "ARM Neoverse V2",
        source: "gem5 NeoverseV2 model (not the ARM TRM): L1 48 fully assoc., L2 2048 \
                 8-way; contiguous bit: 64 KB entries",
        vendor: "ARM",
        family: 0x41,
        models: &[(0xd4f, 0xd4f)],
        levels: neoverse_v,
    },
];
