//! What this machine is and what it can give: CPU and TLB geometry, page sizes,
//! THP/mTHP and hugetlb settings and pools, PMU availability; and the untimed
//! touch-and-free of memory before a timed run (`warm_memory`).
//!
//! TLB geometry (docs/tlb.md) comes from, first match wins: an override file
//! (`--tlb`); cpuid when it agrees with the CPU's published figures (a preset,
//! `tlb_presets.rs`) or no preset exists; the preset when a hypervisor's cpuid
//! disagrees with it; a generic default. cpuid is decoded from raw register values
//! ([`CpuidDump`]), so recorded leaves (`tests/fixtures/cpuid`) take the same path as
//! live ones.

use crate::procfs::{read_trimmed, read_u64, selected_choice};
use anyhow::{anyhow, Context, Result};
use hugetune_model::page::PageSize::{self, P1g, P2m, P4k};
use hugetune_model::plan::ThpMode;
use hugetune_model::tlb::{TlbArray, TlbGeometry, TlbLevel};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[path = "tlb_presets.rs"]
pub mod tlb_presets;

pub use tlb_presets::Preset;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuIdent {
    /// x86: the cpuid vendor string; ARM: `ARM` (MIDR implementer 0x41) or
    /// `implementer 0xNN`.
    pub vendor: String,
    /// x86: the family with the extended family added; ARM: the MIDR implementer.
    pub family: u32,
    /// x86: the model with the extended model; ARM: the MIDR part number.
    pub model: u32,
    pub brand: String,
    /// The hypervisor's name when running in a VM.
    pub hypervisor: Option<String>,
}

/// How the TLB geometry in use was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlbChoice {
    /// The `--tlb` override file.
    Override,
    /// cpuid: no preset exists for this CPU, or cpuid disagrees with it outside a VM.
    Cpuid,
    /// cpuid, which agrees with the preset on the entries of every level and page
    /// size; associativity and coalescing (which cpuid cannot express) from the preset.
    CpuidPreset,
    /// The preset: cpuid says nothing about the TLBs, or a hypervisor's cpuid
    /// disagrees with the CPU's published figures.
    Preset,
    /// Nothing known about this CPU: [`generic_geometry`].
    Generic,
}

/// The preset matching this CPU: its name and where its figures come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresetRef {
    pub name: String,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlbReport {
    /// The geometry the model uses.
    pub geometry: TlbGeometry,
    /// What cpuid reported, if it reports TLBs at all.
    pub cpuid: Option<TlbGeometry>,
    pub notes: Vec<String>,
    /// How `geometry` was chosen (absent in bundles written before it existed).
    #[serde(default)]
    pub choice: Option<TlbChoice>,
    /// The cpuid leaves `cpuid` was decoded from, e.g. `0x80000005/0x80000006`.
    #[serde(default)]
    pub cpuid_leaves: Option<String>,
    /// The published figures for this CPU model, whether used or not.
    #[serde(default)]
    pub preset: Option<PresetRef>,
}

// ---------------------------------------------------------------------------
// Raw cpuid leaves

/// One cpuid leaf/sub-leaf and the registers it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidLeaf {
    pub leaf: u32,
    pub subleaf: u32,
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

/// The cpuid leaves that identify a CPU and describe its TLBs, read live or from a
/// recorded fixture. Leaves not recorded read as zeros, as unsupported leaves do.
///
/// Text form (fixtures, [`CpuidDump::to_text`]): one leaf per line, `leaf subleaf eax
/// ebx ecx edx` in hexadecimal (`0x` optional); `#` starts a comment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidDump {
    pub leaves: Vec<CpuidLeaf>,
}

impl CpuidDump {
    /// The registers of `leaf`/`subleaf`, `[eax, ebx, ecx, edx]`, if recorded.
    pub fn get(&self, leaf: u32, subleaf: u32) -> Option<[u32; 4]> {
        self.leaves
            .iter()
            .find(|l| l.leaf == leaf && l.subleaf == subleaf)
            .map(|l| [l.eax, l.ebx, l.ecx, l.edx])
    }

    fn regs(&self, leaf: u32, subleaf: u32) -> [u32; 4] {
        self.get(leaf, subleaf).unwrap_or([0; 4])
    }

    /// The highest basic leaf (leaf 0's EAX).
    pub fn max_basic(&self) -> u32 {
        self.regs(0, 0)[0]
    }

    /// The highest extended leaf (0x80000000's EAX), or 0 when there are none.
    pub fn max_extended(&self) -> u32 {
        let e = self.regs(0x8000_0000, 0)[0];
        if e & 0x8000_0000 != 0 {
            e
        } else {
            0
        }
    }

    /// Registers of a basic leaf the CPU reports as supported, else zeros.
    fn basic(&self, leaf: u32, subleaf: u32) -> [u32; 4] {
        if leaf <= self.max_basic() {
            self.regs(leaf, subleaf)
        } else {
            [0; 4]
        }
    }

    /// Registers of an extended leaf the CPU reports as supported, else zeros.
    fn extended(&self, leaf: u32) -> [u32; 4] {
        if leaf <= self.max_extended() {
            self.regs(leaf, 0)
        } else {
            [0; 4]
        }
    }

    /// Reads the leaves hugetune uses through `cpuid(leaf, subleaf)`: 0, 1, 2, 0x18
    /// (every sub-leaf), 0x40000000 under a hypervisor, 0x80000000..4 and the AMD TLB
    /// leaves 0x80000005, 0x80000006, 0x80000019.
    pub fn read_with(cpuid: impl Fn(u32, u32) -> [u32; 4]) -> Self {
        let mut d = CpuidDump::default();
        let put = |d: &mut CpuidDump, leaf: u32, subleaf: u32| {
            let [eax, ebx, ecx, edx] = cpuid(leaf, subleaf);
            d.leaves.push(CpuidLeaf {
                leaf,
                subleaf,
                eax,
                ebx,
                ecx,
                edx,
            });
            [eax, ebx, ecx, edx]
        };
        let max = put(&mut d, 0, 0)[0];
        for leaf in [1, 2] {
            if leaf <= max {
                put(&mut d, leaf, 0);
            }
        }
        if max >= 0x18 {
            // Sub-leaf 0's EAX is the highest sub-leaf; bounded against garbage.
            let n = put(&mut d, 0x18, 0)[0].min(63);
            for s in 1..=n {
                put(&mut d, 0x18, s);
            }
        }
        if max >= 1 && d.regs(1, 0)[2] & (1 << 31) != 0 {
            put(&mut d, 0x4000_0000, 0);
        }
        let ext = put(&mut d, 0x8000_0000, 0)[0];
        if ext & 0x8000_0000 != 0 {
            for leaf in [
                0x8000_0002,
                0x8000_0003,
                0x8000_0004,
                0x8000_0005,
                0x8000_0006,
                0x8000_0019,
            ] {
                if leaf <= ext {
                    put(&mut d, leaf, 0);
                }
            }
        }
        d
    }

    /// This CPU's leaves; empty where there is no cpuid instruction.
    pub fn read_live() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            CpuidDump::read_with(|l, s| {
                let r = raw_cpuid::native_cpuid::cpuid_count(l, s);
                [r.eax, r.ebx, r.ecx, r.edx]
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuidDump::default()
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let hex = |s: &str| {
            let t = s.trim_start_matches("0x").trim_start_matches("0X");
            u32::from_str_radix(t, 16).map_err(|_| format!("'{s}' is not a hexadecimal u32"))
        };
        let mut d = CpuidDump::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 6 {
                return Err(format!(
                    "line {}: expected 'leaf subleaf eax ebx ecx edx', got {} fields",
                    i + 1,
                    f.len()
                ));
            }
            let v = f
                .iter()
                .map(|s| hex(s))
                .collect::<Result<Vec<u32>, String>>()
                .map_err(|e| format!("line {}: {e}", i + 1))?;
            d.leaves.push(CpuidLeaf {
                leaf: v[0],
                subleaf: v[1],
                eax: v[2],
                ebx: v[3],
                ecx: v[4],
                edx: v[5],
            });
        }
        Ok(d)
    }

    pub fn to_text(&self) -> String {
        self.leaves
            .iter()
            .map(|l| {
                format!(
                    "0x{:08x} {:x} 0x{:08x} 0x{:08x} 0x{:08x} 0x{:08x}\n",
                    l.leaf, l.subleaf, l.eax, l.ebx, l.ecx, l.edx
                )
            })
            .collect()
    }
}

/// Lets raw_cpuid parse recorded leaves (vendor, family/model, brand, hypervisor).
impl raw_cpuid::CpuIdReader for CpuidDump {
    fn cpuid2(&self, eax: u32, ecx: u32) -> raw_cpuid::CpuIdResult {
        let [eax, ebx, ecx, edx] = self.regs(eax, ecx);
        raw_cpuid::CpuIdResult { eax, ebx, ecx, edx }
    }
}

/// Vendor, family, model, brand and hypervisor from cpuid leaves.
pub fn cpu_ident_from(dump: &CpuidDump) -> CpuIdent {
    let c = raw_cpuid::CpuId::with_cpuid_reader(dump.clone());
    let vendor = c
        .get_vendor_info()
        .map(|v| v.as_str().trim_matches('\0').to_string())
        .unwrap_or_default();
    let (family, model) = c
        .get_feature_info()
        .map(|f| (f.family_id() as u32, f.model_id() as u32))
        .unwrap_or((0, 0));
    let brand = c
        .get_processor_brand_string()
        .map(|b| b.as_str().trim().to_string())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let hypervisor = c.get_hypervisor_info().map(|h| match h.identify() {
        raw_cpuid::Hypervisor::Unknown(b, c, d) => {
            let sig: Vec<u8> = [b, c, d].iter().flat_map(|r| r.to_le_bytes()).collect();
            let s = String::from_utf8_lossy(&sig)
                .trim_matches(|ch: char| ch == '\0' || ch.is_whitespace())
                .to_string();
            if s.is_empty() {
                "unknown".into()
            } else {
                s
            }
        }
        h => format!("{h:?}"),
    });
    CpuIdent {
        vendor,
        family,
        model,
        brand,
        hypervisor,
    }
}

/// The first CPU's MIDR implementer and part from `/proc/cpuinfo` text (arm64:
/// `CPU implementer : 0x41`, `CPU part : 0xd0c`).
pub fn midr_from_cpuinfo(text: &str) -> Option<(u32, u32)> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            if k.trim() != name {
                return None;
            }
            let v = v.trim();
            let h = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X"))?;
            u32::from_str_radix(h, 16).ok()
        })
    };
    Some((field("CPU implementer")?, field("CPU part")?))
}

/// An ARM CPU's identity from `/proc/cpuinfo` text: MIDR implementer as family, part
/// as model (the keys of the ARM presets).
pub fn arm_ident(cpuinfo: &str) -> Option<CpuIdent> {
    let (implementer, part) = midr_from_cpuinfo(cpuinfo)?;
    let vendor = if implementer == 0x41 {
        "ARM".to_string()
    } else {
        format!("implementer {implementer:#04x}")
    };
    let brand = tlb_presets::arm_part_name(implementer, part)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{vendor} part {part:#05x}"));
    Some(CpuIdent {
        vendor,
        family: implementer,
        model: part,
        brand,
        hypervisor: None,
    })
}

pub fn cpu_ident() -> CpuIdent {
    #[cfg(target_arch = "aarch64")]
    {
        if let Some(id) = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| arm_ident(&t))
        {
            return id;
        }
    }
    let mut id = cpu_ident_from(&CpuidDump::read_live());
    if id.brand == "unknown" {
        if let Some(b) = cpuinfo_field("model name") {
            id.brand = b;
        }
    }
    id
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let t = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    t.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_string())
    })
}

// ---------------------------------------------------------------------------
// Decoding the TLB leaves

/// Associativity as a cpuid field gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assoc {
    /// The field says this TLB does not exist.
    Disabled,
    /// `min` to `max` ways (equal when the encoding is exact; AMD's L2 encoding gives
    /// ranges; `u64::MAX`: no upper bound).
    Ways {
        min: u64,
        max: u64,
    },
    Full,
    /// Reserved, or "see another leaf".
    Unknown,
}

impl Assoc {
    fn exact(n: u64) -> Self {
        Assoc::Ways { min: n, max: n }
    }

    pub fn describe(self) -> String {
        match self {
            Assoc::Disabled => "disabled".into(),
            Assoc::Full => "fully associative".into(),
            Assoc::Unknown => "unknown associativity".into(),
            Assoc::Ways { min, max } if min == max => format!("{min}-way"),
            Assoc::Ways { min, max: u64::MAX } => format!("{min} or more ways"),
            Assoc::Ways { min, max } => format!("{min} to {max} ways"),
        }
    }
}

/// AMD's 8-bit L1 TLB associativity field (Fn8000_0005): 1 direct mapped, 0xFF fully
/// associative, otherwise the number of ways (0 is reserved).
pub fn amd_l1_assoc(field: u32) -> Assoc {
    match field & 0xff {
        0 => Assoc::Unknown,
        0xff => Assoc::Full,
        n => Assoc::exact(n as u64),
    }
}

/// AMD's 4-bit L2 cache/TLB associativity encoding (Fn8000_0006, and Fn8000_0019 for
/// both levels): 0 disabled, 1 direct mapped, 2 and 3 ways, 4h 4-5, 5h 6-7, 6h 8-15,
/// 8h 16-31, Ah 32-47, Bh 48-63, Ch 64-95, Dh 96-127, Eh 128 or more, Fh fully
/// associative; 7h reserved, 9h "see Fn8000_001D" (which describes caches only).
pub fn amd_l2_assoc(field: u32) -> Assoc {
    let w = |min, max| Assoc::Ways { min, max };
    match field & 0xf {
        0x0 => Assoc::Disabled,
        0x1 => w(1, 1),
        0x2 => w(2, 2),
        0x3 => w(3, 3),
        0x4 => w(4, 5),
        0x5 => w(6, 7),
        0x6 => w(8, 15),
        0x8 => w(16, 31),
        0xa => w(32, 47),
        0xb => w(48, 63),
        0xc => w(64, 95),
        0xd => w(96, 127),
        0xe => w(128, u64::MAX),
        0xf => Assoc::Full,
        _ => Assoc::Unknown,
    }
}

/// Ways for an array of `entries` the model accepts (0 = fully associative): `ways`
/// when it divides `entries`, else the nearest divisor (the lower one on a tie).
pub fn fit_ways(entries: u64, ways: u64) -> u64 {
    if ways == 0 || entries == 0 || ways >= entries {
        return 0;
    }
    if entries.is_multiple_of(ways) {
        return ways;
    }
    (1..entries)
        .flat_map(|d| [ways.saturating_sub(d), ways + d])
        .find(|&w| w > 0 && w < entries && entries.is_multiple_of(w))
        .unwrap_or(0)
}

/// What cpuid says about the data TLBs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuidTlb {
    pub geometry: Option<TlbGeometry>,
    /// The leaves `geometry` was decoded from.
    pub leaves: Option<String>,
    /// Lossy encodings, conversions and gaps met on the way.
    pub notes: Vec<String>,
}

/// The data TLBs as cpuid describes them: AMD (and Hygon) leaves 0x80000005,
/// 0x80000006 and 0x80000019; Intel leaf 0x18, else leaf 2's descriptors.
pub fn cpuid_tlb(id: &CpuIdent, dump: &CpuidDump) -> CpuidTlb {
    match id.vendor.as_str() {
        "AuthenticAMD" | "HygonGenuine" => amd_tlb(id.family, dump),
        "GenuineIntel" => intel_tlb(dump),
        _ => CpuidTlb::default(),
    }
}

/// TLB geometry as this CPU's cpuid describes it.
pub fn cpuid_geometry(id: &CpuIdent) -> Option<TlbGeometry> {
    cpuid_tlb(id, &CpuidDump::read_live()).geometry
}

/// One page size's entries at one level, as cpuid gives them.
#[derive(Debug, Clone, Copy)]
struct SizeEntries {
    size: PageSize,
    entries: u64,
    assoc: Assoc,
}

/// An AMD level: page sizes with the same entry count share one array (AMD's L1 is
/// one fully associative array for all sizes; its L2 one skewed array whose ways are
/// split by size), ways from the smallest size's field. `None` without 4 KB entries.
fn amd_level(name: &str, sizes: &[SizeEntries], notes: &mut Vec<String>) -> Option<TlbLevel> {
    let present: Vec<SizeEntries> = sizes
        .iter()
        .copied()
        .filter(|s| s.entries > 0 && s.assoc != Assoc::Disabled)
        .collect();
    if !present.iter().any(|s| s.size == P4k) {
        return None;
    }
    let mut groups: Vec<Vec<SizeEntries>> = Vec::new();
    for s in present {
        match groups.iter_mut().find(|g| g[0].entries == s.entries) {
            Some(g) => g.push(s),
            None => groups.push(vec![s]),
        }
    }
    let arrays = groups
        .iter()
        .map(|g| {
            let entries = g[0].entries;
            let sizes: Vec<PageSize> = g.iter().map(|s| s.size).collect();
            let names: Vec<&str> = sizes.iter().map(|s| s.name()).collect();
            let (ways, wanted) = match g[0].assoc {
                Assoc::Full => (0, 0),
                Assoc::Ways { min, .. } => (fit_ways(entries, min), min),
                _ => (0, 0),
            };
            let inexact = g.iter().any(|s| s.assoc != g[0].assoc)
                || matches!(g[0].assoc, Assoc::Ways { min, max } if min != max)
                || matches!(g[0].assoc, Assoc::Unknown)
                || ways != wanted;
            if inexact {
                let said: Vec<String> = g
                    .iter()
                    .map(|s| format!("{} {}", s.size, s.assoc.describe()))
                    .collect();
                let modelled = if ways == 0 {
                    "fully associative".to_string()
                } else {
                    format!("{ways}-way")
                };
                let skewed = if g.iter().any(|s| s.assoc != g[0].assoc) {
                    " (one skewed array, ways split by page size)"
                } else {
                    ""
                };
                notes.push(format!(
                    "{name} {}: cpuid gives {entries} entries, {}{skewed}; modelled {modelled}",
                    names.join("/"),
                    said.join(", ")
                ));
            }
            TlbArray::new(&sizes, entries, ways)
        })
        .collect();
    Some(TlbLevel::new(name, arrays, None))
}

/// AMD leaves 0x80000005 (L1: EBX 4 KB, EAX 2/4 MB; entries in bits 23:16, 8-bit
/// associativity in 31:24), 0x80000006 (L2: EBX 4 KB, EAX 2/4 MB; 12-bit entries in
/// 27:16, 4-bit associativity in 31:28) and 0x80000019 (1 GB: EAX L1, EBX L2, laid out
/// as 0x80000006). Data TLB halves only.
pub fn amd_tlb(family: u32, dump: &CpuidDump) -> CpuidTlb {
    let mut out = CpuidTlb::default();
    let l5 = dump.extended(0x8000_0005);
    let l6 = dump.extended(0x8000_0006);
    let l19 = dump.extended(0x8000_0019);
    let l1 = |r: u32| ((r >> 16) & 0xff) as u64;
    let l2 = |r: u32| ((r >> 16) & 0xfff) as u64;
    let mut l2_4k = l2(l6[1]);
    let mut l2_2m = l2(l6[0]);
    if family >= 0x1a && (1..=256).contains(&l2_4k) {
        out.notes.push(format!(
            "cpuid 0x80000006 gives the L2 DTLB {l2_4k} entries for 4 KB and {l2_2m} for \
             2 MB pages; family {family:#x} (Zen 5) under-reports its L2 TLB sizes (Linux \
             commit 228200f695c0 'x86/CPU/AMD: Fix Zen5 TLB sizes reporting'): read as \
             units of 32 entries they give {} and {}, which match Hot Chips 2024's \
             4K-entry L2 DTLB (and 2K-entry L2 ITLB) and the knee between 3072 and 4096 \
             pages measured in docs/model.md",
            l2_4k * 32,
            l2_2m * 32
        ));
        l2_4k *= 32;
        l2_2m *= 32;
    }
    let level1 = [
        SizeEntries {
            size: P4k,
            entries: l1(l5[1]),
            assoc: amd_l1_assoc(l5[1] >> 24),
        },
        SizeEntries {
            size: P2m,
            entries: l1(l5[0]),
            assoc: amd_l1_assoc(l5[0] >> 24),
        },
        SizeEntries {
            size: P1g,
            entries: l2(l19[0]),
            assoc: amd_l2_assoc(l19[0] >> 28),
        },
    ];
    let level2 = [
        SizeEntries {
            size: P4k,
            entries: l2_4k,
            assoc: amd_l2_assoc(l6[1] >> 28),
        },
        SizeEntries {
            size: P2m,
            entries: l2_2m,
            assoc: amd_l2_assoc(l6[0] >> 28),
        },
        SizeEntries {
            size: P1g,
            entries: l2(l19[1]),
            assoc: amd_l2_assoc(l19[1] >> 28),
        },
    ];
    let mut notes = Vec::new();
    let Some(first) = amd_level("L1 DTLB", &level1, &mut notes) else {
        if l5 != [0; 4] || l6 != [0; 4] {
            out.notes
                .push("cpuid 0x80000005 reports no L1 data TLB for 4 KB pages".into());
        }
        return out;
    };
    let mut levels = vec![first];
    match amd_level("L2 DTLB", &level2, &mut notes) {
        Some(l) => levels.push(l),
        None => notes.push("cpuid 0x80000006 reports no L2 data TLB for 4 KB pages".into()),
    }
    out.notes.extend(notes);
    let mut leaves = vec!["0x80000005"];
    if levels.len() > 1 {
        leaves.push("0x80000006");
    }
    if l19[0] | l19[1] != 0 {
        leaves.push("0x80000019");
    } else if dump.max_extended() >= 0x8000_0019 {
        out.notes.push(
            "cpuid 0x80000019 reports no 1 GB data TLB entries (hypervisors often leave \
             it empty); a level without them holds 1 GB pages as 2 MB entries"
                .into(),
        );
    }
    let g = TlbGeometry {
        levels,
        source: format!("cpuid {}", leaves.join("/")),
    };
    match g.validate() {
        Ok(()) => {
            out.geometry = Some(g);
            out.leaves = Some(leaves.join("/"));
        }
        Err(e) => out
            .notes
            .push(format!("cpuid's TLB leaves give an unusable geometry: {e}")),
    }
    out
}

/// An array as a TLB leaf describes it, before the model's rule (one array per size
/// within a level) is applied.
#[derive(Debug, Clone, PartialEq)]
struct RawArray {
    sizes: Vec<PageSize>,
    entries: u64,
    /// 0: fully associative.
    ways: u64,
}

/// The arrays of one level, with sizes that several arrays accept (Golden Cove's STLB:
/// 4 KB in both the 4k/2m and the 4k/1g array) given arrays of their own: a size held
/// by several arrays gets their entries and ways summed. Capacity per size is then
/// exact; competition between sizes for the shared ways is not modelled.
fn one_array_per_size(name: &str, arrays: &[RawArray], notes: &mut Vec<String>) -> Vec<TlbArray> {
    let mut groups: Vec<(Vec<usize>, Vec<PageSize>)> = Vec::new();
    for s in PageSize::ALL {
        let members: Vec<usize> = (0..arrays.len())
            .filter(|&i| arrays[i].sizes.contains(&s))
            .collect();
        if members.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(m, _)| *m == members) {
            Some((_, sizes)) => sizes.push(s),
            None => groups.push((members, vec![s])),
        }
    }
    groups
        .iter()
        .map(|(members, sizes)| {
            if let [i] = members[..] {
                return TlbArray::new(sizes, arrays[i].entries, arrays[i].ways);
            }
            let entries: u64 = members.iter().map(|&i| arrays[i].entries).sum();
            let parts: Vec<&RawArray> = members.iter().map(|&i| &arrays[i]).collect();
            let sets = |a: &RawArray| a.entries.checked_div(a.ways).unwrap_or(1);
            let ways = if parts.iter().any(|a| a.ways == 0) {
                0
            } else if parts.iter().all(|a| sets(a) == sets(parts[0])) {
                parts.iter().map(|a| a.ways).sum()
            } else {
                fit_ways(entries, parts.iter().map(|a| a.ways).max().unwrap_or(0))
            };
            let desc: Vec<String> = parts
                .iter()
                .map(|a| {
                    let n: Vec<&str> = a.sizes.iter().map(|s| s.name()).collect();
                    format!("{} x {}", a.entries, n.join("/"))
                })
                .collect();
            let n: Vec<&str> = sizes.iter().map(|s| s.name()).collect();
            notes.push(format!(
                "{name}: {} translations can use each of {}; the model keeps a page size \
                 in one array, so {} gets {entries} entries of its own (capacity per size \
                 exact, competition between sizes not modelled)",
                n.join("/"),
                desc.join(" and "),
                n.join("/"),
            ));
            TlbArray::new(sizes, entries, ways)
        })
        .collect()
}

/// Levels numbered from 1 into a geometry; levels without 4 KB entries are left out
/// (noted), and `None` when nothing usable remains.
fn intel_geometry(
    levels: Vec<(String, Vec<RawArray>)>,
    leaf: &str,
    notes: &mut Vec<String>,
) -> Option<TlbGeometry> {
    let mut out = Vec::new();
    for (name, arrays) in levels {
        if arrays.is_empty() {
            continue;
        }
        let arrays = one_array_per_size(&name, &arrays, notes);
        if !arrays.iter().any(|a| a.sizes.contains(&P4k)) {
            let l = TlbLevel::new(&name, arrays, None);
            notes.push(format!(
                "cpuid {leaf} describes a {name} without 4 KB entries ({}); left out",
                l.arrays
                    .iter()
                    .map(|a| format!(
                        "{} x {}",
                        a.entries,
                        a.sizes
                            .iter()
                            .map(|s| s.name())
                            .collect::<Vec<_>>()
                            .join("/")
                    ))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ));
            continue;
        }
        out.push(TlbLevel::new(&name, arrays, None));
    }
    if out.is_empty() {
        return None;
    }
    let g = TlbGeometry {
        levels: out,
        source: format!("cpuid {leaf}"),
    };
    match g.validate() {
        Ok(()) => Some(g),
        Err(e) => {
            notes.push(format!("cpuid {leaf} gives an unusable geometry: {e}"));
            None
        }
    }
}

/// Kind of translation cache a leaf 0x18 sub-leaf describes (EDX bits 4:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatKind {
    Data,
    Instruction,
    Unified,
    /// Hit on loads (fills on loads and stores): Golden Cove's L1 DTLB.
    LoadOnly,
    /// Hit on stores only.
    StoreOnly,
    Other(u32),
}

/// One sub-leaf of leaf 0x18 (deterministic address translation parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatEntry {
    pub kind: DatKind,
    /// Translation cache level, from 1.
    pub level: u32,
    pub sizes: Vec<PageSize>,
    /// Entries: ways × sets.
    pub entries: u64,
    /// 0 when fully associative.
    pub ways: u64,
}

/// Decodes a leaf 0x18 sub-leaf: EBX bits 0-3 page sizes (4K, 2M, 4M, 1G; 4 MB pages
/// share the 2 MB entries in 64-bit mode), 31:16 ways; ECX sets; EDX 4:0 type, 7:5
/// level, bit 8 fully associative. `None` for a null sub-leaf or one without entries.
pub fn leaf18_entry(ebx: u32, ecx: u32, edx: u32) -> Option<DatEntry> {
    let kind = match edx & 0x1f {
        0 => return None,
        1 => DatKind::Data,
        2 => DatKind::Instruction,
        3 => DatKind::Unified,
        4 => DatKind::LoadOnly,
        5 => DatKind::StoreOnly,
        k => DatKind::Other(k),
    };
    let mut sizes = Vec::new();
    if ebx & 1 != 0 {
        sizes.push(P4k);
    }
    if ebx & 0b110 != 0 {
        sizes.push(P2m);
    }
    if ebx & 0b1000 != 0 {
        sizes.push(P1g);
    }
    let ways = (ebx >> 16) as u64;
    let entries = ways * ecx as u64;
    if sizes.is_empty() || entries == 0 {
        return None;
    }
    let fully = edx & 0x100 != 0;
    Some(DatEntry {
        kind,
        level: (edx >> 5) & 7,
        sizes,
        entries,
        ways: if fully { 0 } else { fit_ways(entries, ways) },
    })
}

/// Intel leaf 0x18: data, unified and load-only translation caches by level. Where a
/// level has a load-only DTLB (Golden Cove) its store-only one is left out: the model
/// follows loads.
pub fn intel_leaf18(dump: &CpuidDump) -> CpuidTlb {
    let mut out = CpuidTlb::default();
    if dump.max_basic() < 0x18 {
        return out;
    }
    let last = dump.basic(0x18, 0)[0].min(63);
    let entries: Vec<DatEntry> = (0..=last)
        .filter_map(|s| {
            let [_, ebx, ecx, edx] = dump.basic(0x18, s);
            leaf18_entry(ebx, ecx, edx)
        })
        .filter(|e| e.level >= 1)
        .collect();
    let mut by_level: Vec<u32> = entries
        .iter()
        .filter(|e| e.kind != DatKind::Instruction)
        .map(|e| e.level)
        .collect();
    by_level.sort_unstable();
    by_level.dedup();
    let mut levels = Vec::new();
    for lv in by_level {
        let here: Vec<&DatEntry> = entries.iter().filter(|e| e.level == lv).collect();
        let has_load = here
            .iter()
            .any(|e| matches!(e.kind, DatKind::Data | DatKind::Unified | DatKind::LoadOnly));
        let mut arrays = Vec::new();
        for e in &here {
            let keep = match e.kind {
                DatKind::Data | DatKind::Unified | DatKind::LoadOnly => true,
                DatKind::StoreOnly => !has_load,
                _ => false,
            };
            if !keep {
                if e.kind == DatKind::StoreOnly {
                    out.notes.push(format!(
                        "leaf 0x18: level {lv} store-only DTLB ({} entries, {}) left out; \
                         the model follows the load DTLB",
                        e.entries,
                        e.sizes
                            .iter()
                            .map(|s| s.name())
                            .collect::<Vec<_>>()
                            .join("/")
                    ));
                }
                continue;
            }
            arrays.push(RawArray {
                sizes: e.sizes.clone(),
                entries: e.entries,
                ways: e.ways,
            });
        }
        let unified = here.iter().any(|e| e.kind == DatKind::Unified);
        let name = match lv {
            1 => "L1 DTLB".to_string(),
            2 if unified => "STLB".to_string(),
            n => format!("L{n} DTLB"),
        };
        levels.push((name, arrays));
    }
    out.geometry = intel_geometry(levels, "leaf 0x18", &mut out.notes);
    if let Some(g) = &mut out.geometry {
        g.source = "cpuid 0x18".into();
        out.leaves = Some("0x18".into());
    }
    out
}

/// Which structure a leaf 2 TLB descriptor describes (the SDM's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Leaf2Class {
    /// "Data TLB0": the first, small level (Core 2, Atom).
    Dtlb0,
    /// "Data TLB" / "DTLB".
    Dtlb,
    /// "Data TLB1": the main DTLB behind a TLB0.
    Dtlb1,
    /// "Shared 2nd-Level TLB".
    Stlb,
}

/// A data-TLB descriptor of leaf 2: its arrays `(sizes, entries, ways; 0 = fully
/// associative)` and what the descriptor gets wrong, if known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf2Tlb {
    pub class: Leaf2Class,
    pub arrays: &'static [(&'static [PageSize], u64, u64)],
    pub note: Option<&'static str>,
}

/// The data-TLB and STLB one-byte descriptors of leaf 2 (Intel SDM vol. 2A, CPUID,
/// table "Encoding of CPUID Leaf 2 Descriptors"). "4 MByte" arrays hold 2 MB pages in
/// 64-bit mode. Instruction TLB descriptors (e.g. 0x0B, "Instruction TLB: 4 MByte
/// pages, 4-way, 4 entries") and caches give `None`.
pub fn leaf2_descriptor(d: u8) -> Option<Leaf2Tlb> {
    use Leaf2Class::*;
    let t = |class, arrays, note| {
        Some(Leaf2Tlb {
            class,
            arrays,
            note,
        })
    };
    const K: &[PageSize] = &[P4k];
    const M: &[PageSize] = &[P2m];
    const G: &[PageSize] = &[P1g];
    const KM: &[PageSize] = &[P4k, P2m];
    const NO_ASSOC: Option<&str> =
        Some("the descriptor gives no associativity; modelled fully associative");
    match d {
        0x03 => t(Dtlb, &[(K, 64, 4)], None),
        0x04 => t(Dtlb, &[(M, 8, 4)], None),
        0x05 => t(Dtlb1, &[(M, 32, 4)], None),
        0x56 => t(Dtlb0, &[(M, 16, 4)], None),
        0x57 => t(Dtlb0, &[(K, 16, 4)], None),
        0x59 => t(Dtlb0, &[(K, 16, 0)], None),
        0x5a => t(Dtlb0, &[(M, 32, 4)], None),
        0x5b => t(Dtlb, &[(KM, 64, 0)], NO_ASSOC),
        0x5c => t(Dtlb, &[(KM, 128, 0)], NO_ASSOC),
        0x5d => t(Dtlb, &[(KM, 256, 0)], NO_ASSOC),
        0x63 => t(Dtlb, &[(M, 32, 4), (G, 4, 4)], None),
        0x64 => t(Dtlb, &[(K, 512, 4)], None),
        0x6b => t(Dtlb, &[(K, 256, 8)], None),
        0x6c => t(Dtlb, &[(M, 128, 8)], None),
        0x6d => t(Dtlb, &[(G, 16, 0)], None),
        0xa0 => t(Dtlb, &[(K, 32, 0)], None),
        0xb3 => t(Dtlb, &[(K, 128, 4)], None),
        0xb4 => t(Dtlb1, &[(K, 256, 4)], None),
        0xba => t(Dtlb1, &[(K, 64, 4)], None),
        0xc0 => t(Dtlb, &[(KM, 8, 4)], None),
        0xc1 => t(Stlb, &[(KM, 1024, 8)], None),
        // The SDM says "4 KByte/2 MByte pages"; Linux's table counts it as 2M/4M only.
        0xc2 => t(Dtlb, &[(KM, 16, 4)], None),
        0xc3 => t(
            Stlb,
            &[(KM, 1536, 6), (G, 16, 4)],
            Some(
                "descriptor 0xC3 says 6-way; Skylake's 1536-entry STLB is 12-way \
                 (WikiChip): the one-byte encoding is lossy",
            ),
        ),
        0xc4 => t(Dtlb, &[(M, 32, 4)], None),
        0xca => t(Stlb, &[(K, 512, 4)], None),
        _ => None,
    }
}

/// The one-byte descriptors of leaf 2's registers: a register with bit 31 set holds
/// none, EAX's low byte is the iteration count, zero bytes are null descriptors.
pub fn leaf2_descriptors(regs: [u32; 4]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in regs.iter().enumerate() {
        if r & 0x8000_0000 != 0 {
            continue;
        }
        let bytes = r.to_le_bytes();
        let from = if i == 0 { 1 } else { 0 };
        out.extend(bytes[from..].iter().copied().filter(|&b| b != 0));
    }
    out
}

/// Intel leaf 2: data TLB descriptors placed into levels: TLB0 and plain DTLB arrays
/// form the first level (a TLB0 and a DTLB for the same size: two levels), TLB1 and
/// STLB arrays the next.
pub fn intel_leaf2(dump: &CpuidDump) -> CpuidTlb {
    let mut out = CpuidTlb::default();
    if dump.max_basic() < 2 {
        return out;
    }
    let descs = leaf2_descriptors(dump.basic(2, 0));
    if descs.contains(&0xfe) {
        out.notes
            .push("leaf 2 descriptor 0xFE: TLBs are described by leaf 0x18 only".to_string());
    }
    let mut found: Vec<(u8, Leaf2Tlb)> = descs
        .iter()
        .filter_map(|&d| Some((d, leaf2_descriptor(d)?)))
        .collect();
    // Smaller arrays first within a class, so the smaller one becomes the upper level.
    found.sort_by_key(|(_, t)| (t.class, t.arrays.iter().map(|a| a.1).sum::<u64>()));
    let mut levels: Vec<Vec<RawArray>> = Vec::new();
    let mut has_stlb: Vec<bool> = Vec::new();
    let mut second = None;
    for (_, t) in &found {
        if let Some(n) = t.note {
            out.notes.push(format!("leaf 2: {n}"));
        }
        let min_level = match t.class {
            Leaf2Class::Dtlb0 | Leaf2Class::Dtlb => 0,
            Leaf2Class::Dtlb1 | Leaf2Class::Stlb => *second.get_or_insert(levels.len()),
        };
        let arrays: Vec<RawArray> = t
            .arrays
            .iter()
            .map(|&(sizes, entries, ways)| RawArray {
                sizes: sizes.to_vec(),
                entries,
                ways: fit_ways(entries, ways),
            })
            .collect();
        let overlaps = |l: &Vec<RawArray>| {
            l.iter().any(|a| {
                a.sizes
                    .iter()
                    .any(|s| arrays.iter().any(|b| b.sizes.contains(s)))
            })
        };
        let at = (min_level..levels.len())
            .find(|&i| !overlaps(&levels[i]))
            .unwrap_or(levels.len());
        if at == levels.len() {
            levels.push(Vec::new());
            has_stlb.push(false);
        }
        levels[at].extend(arrays);
        has_stlb[at] |= t.class == Leaf2Class::Stlb;
    }
    let named = levels
        .into_iter()
        .enumerate()
        .map(|(i, arrays)| {
            let name = match i {
                0 => "L1 DTLB".to_string(),
                _ if has_stlb[i] => "STLB".to_string(),
                n => format!("L{} DTLB", n + 1),
            };
            (name, arrays)
        })
        .collect();
    out.geometry = intel_geometry(named, "leaf 2", &mut out.notes);
    if out.geometry.is_some() {
        let ds: Vec<String> = found.iter().map(|(d, _)| format!("{d:#04x}")).collect();
        let leaves = format!("0x2 (descriptors {})", ds.join(", "));
        if let Some(g) = &mut out.geometry {
            g.source = format!("cpuid {leaves}");
        }
        out.leaves = Some(leaves);
    }
    out
}

/// Intel: leaf 0x18 where it describes the TLBs, else leaf 2.
pub fn intel_tlb(dump: &CpuidDump) -> CpuidTlb {
    let l18 = intel_leaf18(dump);
    if l18.geometry.is_some() {
        return l18;
    }
    let mut l2 = intel_leaf2(dump);
    if l2.geometry.is_none() && dump.max_basic() >= 0x18 && l18.notes.is_empty() {
        l2.notes
            .push("leaf 0x18 describes no data TLB (a hypervisor may hide it)".into());
    }
    let mut notes = l18.notes;
    notes.append(&mut l2.notes);
    l2.notes = notes;
    l2
}

// ---------------------------------------------------------------------------
// Choosing the geometry

/// A conservative geometry when nothing better is known (Skylake-like).
pub fn generic_geometry() -> TlbGeometry {
    TlbGeometry {
        levels: tlb_presets::skylake(),
        source: "generic (Skylake-like) default".into(),
    }
}

/// The published figures for this CPU model (`tlb_presets.rs`).
pub fn preset(id: &CpuIdent) -> Option<Preset> {
    tlb_presets::lookup(&id.vendor, id.family, id.model)
}

/// Whether two geometries have the same levels with the same arrays: the same page
/// sizes and entries, associativity and coalescing aside (what cpuid can say).
pub fn same_entries(a: &TlbGeometry, b: &TlbGeometry) -> bool {
    let key = |l: &TlbLevel| {
        let mut k: Vec<(Vec<PageSize>, u64)> = l
            .arrays
            .iter()
            .map(|a| {
                let mut s = a.sizes.clone();
                s.sort();
                (s, a.entries)
            })
            .collect();
        k.sort();
        k
    };
    a.levels.len() == b.levels.len()
        && a.levels
            .iter()
            .zip(&b.levels)
            .all(|(x, y)| key(x) == key(y))
}

/// What a preset adds to cpuid figures that agree with it: associativity and
/// coalescing, level by level.
fn preset_additions(cpuid: &TlbGeometry, preset: &TlbGeometry) -> Vec<String> {
    let mut out = Vec::new();
    for (c, p) in cpuid.levels.iter().zip(&preset.levels) {
        for pa in &p.arrays {
            let Some(ca) = c
                .arrays
                .iter()
                .find(|a| a.entries == pa.entries && a.sizes.contains(&pa.sizes[0]))
            else {
                continue;
            };
            let w = |a: &TlbArray| {
                if a.ways == 0 || a.ways == a.entries {
                    "fully associative".to_string()
                } else {
                    format!("{}-way", a.ways)
                }
            };
            if w(ca) != w(pa) {
                let n: Vec<&str> = pa.sizes.iter().map(|s| s.name()).collect();
                out.push(format!(
                    "{} {}: {} (cpuid: {})",
                    p.name,
                    n.join("/"),
                    w(pa),
                    w(ca)
                ));
            }
        }
        if let Some(co) = p.coalesce {
            if c.coalesce != p.coalesce {
                out.push(format!("{} coalesces {} KiB", p.name, co >> 10));
            }
        }
    }
    out
}

/// Known keys of the override file, by position (docs/formats.md §8).
fn check_override_keys(v: &serde_json::Value) -> Result<(), String> {
    fn check(v: &serde_json::Value, at: &str, known: &[&str]) -> Result<(), String> {
        if let Some(o) = v.as_object() {
            for k in o.keys() {
                if !known.contains(&k.as_str()) && k != "comment" {
                    return Err(format!(
                        "unknown key '{k}' in {at} (known: {})",
                        known.join(", ")
                    ));
                }
            }
        }
        Ok(())
    }
    check(v, "the top level", &["version", "levels", "source"])?;
    match v.get("version") {
        None => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => return Err(format!("version {n} (this hugetune reads version 1)")),
    }
    for (i, l) in v["levels"].as_array().into_iter().flatten().enumerate() {
        check(l, &format!("levels[{i}]"), &["name", "arrays", "coalesce"])?;
        for (j, a) in l["arrays"].as_array().into_iter().flatten().enumerate() {
            check(
                a,
                &format!("levels[{i}].arrays[{j}]"),
                &["sizes", "entries", "ways"],
            )?;
        }
    }
    Ok(())
}

/// Reads and validates a TLB override file (JSON of `TlbGeometry`, docs/formats.md
/// §8). Every error names the file and what is wrong.
pub fn read_tlb_override(path: &Path) -> Result<TlbGeometry> {
    let p = path.display();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("TLB override file {p}: cannot read it"))?;
    let mut v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow!("TLB override file {p}: not JSON: {e} (docs/formats.md §8)"))?;
    if !v.is_object() {
        return Err(anyhow!(
            "TLB override file {p}: expected a JSON object with 'levels' (docs/formats.md §8)"
        ));
    }
    check_override_keys(&v)
        .map_err(|e| anyhow!("TLB override file {p}: {e} (docs/formats.md §8)"))?;
    if v.get("source").is_none() {
        v["source"] = "".into();
    }
    let g: TlbGeometry = match serde_json::from_value(v.clone()) {
        Ok(g) => g,
        Err(e) => {
            // Say where: the first level or array that does not parse on its own.
            let mut at = String::new();
            'find: for (i, l) in v["levels"].as_array().into_iter().flatten().enumerate() {
                for (j, a) in l["arrays"].as_array().into_iter().flatten().enumerate() {
                    if let Err(e) = serde_json::from_value::<TlbArray>(a.clone()) {
                        at = format!("levels[{i}].arrays[{j}]: {e}");
                        break 'find;
                    }
                }
                if let Err(e) = serde_json::from_value::<TlbLevel>(l.clone()) {
                    at = format!("levels[{i}]: {e}");
                    break 'find;
                }
            }
            if at.is_empty() {
                at = e.to_string();
            }
            return Err(anyhow!(
                "TLB override file {p}: not a TLB geometry: {at} (docs/formats.md §8)"
            ));
        }
    };
    g.validate()
        .map_err(|e| anyhow!("TLB override file {p}: invalid geometry: {e}"))?;
    Ok(TlbGeometry {
        source: format!("override file {p}"),
        ..g
    })
}

fn is_arm(id: &CpuIdent) -> bool {
    id.vendor == "ARM" || id.vendor.starts_with("implementer ")
}

/// Chooses the geometry from what is known about this CPU: the override file, else
/// cpuid when it agrees with the preset or no preset exists, else the preset under a
/// hypervisor (cpuid disagreeing) or when cpuid is silent, else cpuid (bare metal,
/// disagreeing with the preset), else the generic geometry.
pub fn choose_tlb(
    id: &CpuIdent,
    cpuid: CpuidTlb,
    preset: Option<Preset>,
    override_file: Option<&Path>,
) -> Result<TlbReport> {
    let mut notes = cpuid.notes;
    let preset_ref = preset.as_ref().map(|p| PresetRef {
        name: p.name.to_string(),
        source: p.source.to_string(),
    });
    let leaves = cpuid.leaves.clone();
    let report = |geometry, choice, notes| TlbReport {
        geometry,
        cpuid: cpuid.geometry.clone(),
        notes,
        choice: Some(choice),
        cpuid_leaves: leaves.clone(),
        preset: preset_ref.clone(),
    };
    if let Some(p) = override_file {
        let g = read_tlb_override(p)?;
        return Ok(report(g, TlbChoice::Override, notes));
    }
    let leaves_name = leaves.as_deref().unwrap_or("?");
    let (geometry, choice) = match (&cpuid.geometry, preset) {
        (Some(c), Some(p)) if same_entries(c, &p.geometry) => {
            let adds = preset_additions(c, &p.geometry);
            if !adds.is_empty() {
                notes.push(format!(
                    "cpuid agrees with preset {} on every level's entries; from the \
                     preset, which cpuid cannot express: {}",
                    p.name,
                    adds.join("; ")
                ));
            }
            let mut g = p.geometry;
            g.source = format!("cpuid {leaves_name}, agreeing with preset {}", p.name);
            (g, TlbChoice::CpuidPreset)
        }
        (Some(c), Some(p)) if id.hypervisor.is_some() => {
            notes.push(format!(
                "cpuid reports {}, but this is {}; hypervisors often synthesize TLB \
                 leaves, so the published figures are used",
                c.describe().join("; "),
                p.name
            ));
            (p.geometry, TlbChoice::Preset)
        }
        (Some(c), Some(p)) => {
            notes.push(format!(
                "preset {} says {}; cpuid, on bare metal, describes this CPU differently \
                 and is used (--tlb FILE overrides)",
                p.name,
                p.geometry.describe().join("; ")
            ));
            (c.clone(), TlbChoice::Cpuid)
        }
        (Some(c), None) => (c.clone(), TlbChoice::Cpuid),
        (None, Some(p)) => {
            notes.push(if is_arm(id) {
                format!(
                    "ARM has no architectural way to enumerate TLBs; preset {} by MIDR part",
                    p.name
                )
            } else {
                format!("cpuid does not describe the TLBs; using preset {}", p.name)
            });
            (p.geometry, TlbChoice::Preset)
        }
        (None, None) => {
            notes.push(
                "cpuid does not describe the TLBs and no preset knows this CPU; using a \
                 generic geometry (--tlb FILE overrides)"
                    .into(),
            );
            (generic_geometry(), TlbChoice::Generic)
        }
    };
    Ok(report(geometry, choice, notes))
}

/// The geometry the model should use, and why (see [`choose_tlb`]). A bad override
/// file is an error naming the file and the problem.
pub fn tlb_report(override_file: Option<&Path>) -> Result<TlbReport> {
    let id = cpu_ident();
    let cpuid = cpuid_tlb(&id, &CpuidDump::read_live());
    choose_tlb(&id, cpuid, preset(&id), override_file)
}

/// How much memory one level's entries cover for pages of one size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reach {
    pub page: PageSize,
    /// Entries available to such pages.
    pub entries: u64,
    /// Bytes one entry covers: less than the page when the level holds it as smaller
    /// entries (1 GB pages in an L2 without 1 GB entries).
    pub entry_bytes: u64,
    pub bytes: u64,
    /// With 4 KB pages in folios the level coalesces: bytes covered then.
    pub coalesced_bytes: Option<u64>,
}

/// TLB reach of `level` for each page size.
pub fn reach(level: &TlbLevel) -> Vec<Reach> {
    PageSize::ALL
        .iter()
        .filter_map(|&s| {
            let slot = level.slot(s, s.shift())?;
            let entries = level.arrays[slot.array].entries;
            let coalesced_bytes = match (s, level.coalesce) {
                (P4k, Some(_)) => level
                    .slot(P4k, 20)
                    .map(|c| level.arrays[c.array].entries << c.shift),
                _ => None,
            };
            Some(Reach {
                page: s,
                entries,
                entry_bytes: 1 << slot.shift,
                bytes: entries << slot.shift,
                coalesced_bytes,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HugetlbPool {
    pub page_kb: u64,
    pub nr: u64,
    pub free: u64,
    pub resv: u64,
    pub surplus: u64,
}

impl HugetlbPool {
    /// Pages that are not free for a new mapping: in use (`nr - free`) or free
    /// but reserved for a mapping (`resv`), by other processes or by the kernel
    /// itself (Linux 6.18 can leak reservations: docs/testing.md). A smaller
    /// `nr_hugepages` cannot free them; the kernel keeps them as surplus pages.
    pub fn taken(&self) -> u64 {
        self.nr.saturating_sub(self.free) + self.resv.min(self.free)
    }

    /// Pages a new mapping can reserve now.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.resv)
    }
}

pub const HUGEPAGES_SYSFS: &str = "/sys/kernel/mm/hugepages";
pub const THP_SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";

/// The `hugepages-<size>kB` directories under `root`: (size in kB, path), by size.
/// Both the hugetlb pools and the mTHP settings are laid out this way.
fn page_size_dirs(root: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut out: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kb = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            Some((kb, e.path()))
        })
        .collect();
    out.sort();
    out
}

pub fn hugetlb_pools(root: &Path) -> Vec<HugetlbPool> {
    page_size_dirs(root)
        .into_iter()
        .map(|(page_kb, p)| {
            let get = |f: &str| read_u64(&p.join(f)).unwrap_or(0);
            HugetlbPool {
                page_kb,
                nr: get("nr_hugepages"),
                free: get("free_hugepages"),
                resv: get("resv_hugepages"),
                surplus: get("surplus_hugepages"),
            }
        })
        .collect()
}

pub fn pool(kb: u64) -> Option<HugetlbPool> {
    hugetlb_pools(Path::new(HUGEPAGES_SYSFS))
        .into_iter()
        .find(|p| p.page_kb == kb)
}

pub fn thp_mode(root: &Path) -> Option<ThpMode> {
    match selected_choice(&read_trimmed(&root.join("enabled"))?)?.as_str() {
        "always" => Some(ThpMode::Always),
        "madvise" => Some(ThpMode::Madvise),
        "never" => Some(ThpMode::Never),
        _ => None,
    }
}

/// Multi-size THP settings: (size in kB, setting), from hugepages-<size>kB/enabled.
pub fn mthp_sizes(root: &Path) -> Vec<(u64, String)> {
    page_size_dirs(root)
        .into_iter()
        .filter_map(|(kb, p)| Some((kb, selected_choice(&read_trimmed(&p.join("enabled"))?)?)))
        .collect()
}

/// Anonymous folios the kernel allocated at fault time so far, per folio size
/// in kB (`hugepages-<size>kB/stats/anon_fault_alloc`, Linux 6.9+; empty before).
/// The difference around a run proves which folio sizes it really got.
pub fn folio_fault_counts(root: &Path) -> Vec<(u64, u64)> {
    page_size_dirs(root)
        .into_iter()
        .filter_map(|(kb, dir)| Some((kb, read_u64(&dir.join("stats/anon_fault_alloc"))?)))
        .collect()
}

/// Folio shifts (14..=20) of the mTHP sizes `MADV_HUGEPAGE` may use now: the
/// size's control is `always` or `madvise`, or `inherit` with the top level not
/// `never` (docs/formats.md §3).
pub fn mthp_usable(root: &Path) -> Vec<u8> {
    let top = thp_mode(root);
    mthp_sizes(root)
        .into_iter()
        .filter(|(kb, _)| (16..2048).contains(kb) && kb.is_power_of_two())
        .filter(|(_, v)| match v.as_str() {
            "always" | "madvise" => true,
            "inherit" => top.is_some_and(|t| t != ThpMode::Never),
            _ => false,
        })
        .map(|(kb, _)| (kb.trailing_zeros() + 10) as u8)
        .collect()
}

/// Folio shifts (14..=21) of the THP sizes whose per-size control this process
/// may change for a run: the control file is writable (root). hugetune sets
/// them only for the runs of a plan that needs them (`kernel_state`,
/// `hugetune_model::plan::thp_controls`) and restores them.
pub fn thp_settable(root: &Path) -> Vec<u8> {
    page_size_dirs(root)
        .into_iter()
        .filter(|(kb, _)| (16..=2048).contains(kb) && kb.is_power_of_two())
        .filter(|(_, dir)| {
            let Ok(c) = std::ffi::CString::new(dir.join("enabled").as_os_str().as_encoded_bytes())
            else {
                return false;
            };
            // SAFETY: access reads a NUL-terminated path we own.
            unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
        })
        .map(|(kb, _)| (kb.trailing_zeros() + 10) as u8)
        .collect()
}

/// The mTHP sizes worth evaluating, of those `offered` (usable now or settable
/// for a run): the sizes the TLB geometry coalesces (`coalesce`, bytes: there
/// an mTHP folio also extends TLB reach), 64 KB (the arm64 contiguous-bit size
/// and a common fault-saving size) and the largest below 2 MB (the most
/// fault saving). At most a handful, so that the analysis, one pass per
/// mapping, does not grow with every size the kernel lists.
pub fn mthp_evaluated(offered: &[u8], coalesce: &[u64]) -> Vec<u8> {
    let mthp: Vec<u8> = offered
        .iter()
        .copied()
        .filter(|s| (14..=20).contains(s))
        .collect();
    let mut v: Vec<u8> = mthp
        .iter()
        .copied()
        .filter(|&s| s == 16 || coalesce.contains(&(1u64 << s)))
        .collect();
    v.extend(mthp.iter().copied().max());
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether hardware performance counters work (perf_event_open of a hardware event).
pub fn pmu_available() -> bool {
    #[repr(C)]
    #[derive(Default)]
    struct Attr {
        type_: u32,
        size: u32,
        config: u64,
        sample: u64,
        sample_type: u64,
        read_format: u64,
        flags: u64,
        rest: [u64; 10],
    }
    let attr = Attr {
        type_: 0, // PERF_TYPE_HARDWARE
        size: std::mem::size_of::<Attr>() as u32,
        config: 1,                  // PERF_COUNT_HW_INSTRUCTIONS
        flags: 1 | 1 << 5 | 1 << 6, // disabled, exclude_kernel, exclude_hv
        ..Default::default()
    };
    // SAFETY: perf_event_open reads `attr` (size given) and returns a descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const Attr,
            0,
            -1,
            -1,
            0,
        )
    };
    if fd >= 0 {
        // SAFETY: fd is a descriptor we own.
        unsafe { libc::close(fd as i32) };
        true
    } else {
        false
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu: CpuIdent,
    pub kernel: String,
    pub tlb: TlbReport,
    pub thp: Option<ThpMode>,
    pub thp_defrag: Option<String>,
    pub mthp: Vec<(u64, String)>,
    pub pools: Vec<HugetlbPool>,
    pub pmu: bool,
    pub cores: usize,
    pub mem_total_kb: u64,
}

/// A `/proc/meminfo` field in kB.
fn meminfo_kb(field: &str) -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    t.lines()
        .find(|l| l.split(':').next() == Some(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// Memory available for new allocations without swapping (`MemAvailable`).
pub fn mem_available_kb() -> Option<u64> {
    meminfo_kb("MemAvailable")
}

/// Touches and frees `bytes` of anonymous memory (untimed, before a timed run;
/// at most half of what is available: warming must not push anything out). On a
/// VM that hands free memory back to its host (free page reporting), a process
/// that happens to get memory the host took back pays for it on first touch,
/// several times the fault cost (docs/model.md §4), and which run gets such
/// memory is chance. Freed just before the run, this memory is what the kernel
/// hands out next, so every configuration starts on memory the host backs.
pub fn warm_memory(bytes: u64) {
    let bytes = bytes.min(mem_available_kb().unwrap_or(0) * 1024 / 2);
    if bytes == 0 {
        return;
    }
    let len = bytes as usize;
    // SAFETY: a fresh private anonymous mapping, written only within its length
    // and unmapped before returning; nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        let base = p as *mut u8;
        for off in (0..len).step_by(4096) {
            base.add(off).write_volatile(1);
        }
        libc::munmap(p, len);
    }
}

/// Physical memory (`MemTotal`).
pub fn mem_total_kb() -> Option<u64> {
    meminfo_kb("MemTotal")
}

pub fn machine(tlb_override: Option<&Path>) -> Result<Machine> {
    let thp_root = Path::new(THP_SYSFS);
    let mem_total_kb = meminfo_kb("MemTotal").unwrap_or(0);
    Ok(Machine {
        hostname: read_trimmed(Path::new("/proc/sys/kernel/hostname")).unwrap_or_default(),
        cpu: cpu_ident(),
        kernel: read_trimmed(Path::new("/proc/sys/kernel/osrelease")).unwrap_or_default(),
        tlb: tlb_report(tlb_override)?,
        thp: thp_mode(thp_root),
        thp_defrag: read_trimmed(&thp_root.join("defrag")).and_then(|t| selected_choice(&t)),
        mthp: mthp_sizes(thp_root),
        pools: hugetlb_pools(Path::new(HUGEPAGES_SYSFS)),
        pmu: pmu_available(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        mem_total_kb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_and_thp_from_fixture_trees() {
        let d = tempfile::tempdir().unwrap();
        let p2 = d.path().join("hugepages-2048kB");
        std::fs::create_dir(&p2).unwrap();
        for (f, v) in [
            ("nr_hugepages", "10"),
            ("free_hugepages", "8"),
            ("resv_hugepages", "3"),
            ("surplus_hugepages", "0"),
        ] {
            std::fs::write(p2.join(f), format!("{v}\n")).unwrap();
        }
        std::fs::create_dir(d.path().join("hugepages-bogus")).unwrap();
        let pools = hugetlb_pools(d.path());
        assert_eq!(
            pools,
            vec![HugetlbPool {
                page_kb: 2048,
                nr: 10,
                free: 8,
                resv: 3,
                surplus: 0
            }]
        );
        assert_eq!(pools[0].available(), 5);
        std::fs::write(d.path().join("enabled"), "always madvise [never]\n").unwrap();
        assert_eq!(thp_mode(d.path()), Some(ThpMode::Never));
        std::fs::write(p2.join("enabled"), "always inherit [madvise] never\n").unwrap();
        assert_eq!(mthp_sizes(d.path()), vec![(2048, "madvise".to_string())]);
    }

    /// The sizes evaluated: coalescing sizes, 64 KB and the largest below
    /// 2 MB, of those offered; nothing when none is offered.
    #[test]
    fn mthp_evaluated_keeps_a_small_set() {
        let all: Vec<u8> = (14..=21).collect();
        assert_eq!(mthp_evaluated(&all, &[]), vec![16, 20]);
        assert_eq!(mthp_evaluated(&all, &[32 << 10]), vec![15, 16, 20]);
        assert_eq!(mthp_evaluated(&[14, 15], &[]), vec![15]);
        assert!(mthp_evaluated(&[21], &[16 << 10]).is_empty());
    }

    #[test]
    fn this_machine_has_a_geometry() {
        let r = tlb_report(None).unwrap();
        r.geometry.validate().unwrap();
        let g = &r.geometry;
        assert!(g.last().entries(P4k) >= g.levels[0].entries(P4k));
    }

    /// Prints this machine's cpuid leaves in fixture form:
    /// `cargo test -p hugetune-capture print_this_machines_cpuid -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn print_this_machines_cpuid() {
        print!("{}", CpuidDump::read_live().to_text());
    }

    fn fixture(name: &str) -> (CpuIdent, CpuidDump) {
        let text = match name {
            "zen2" => include_str!("../tests/fixtures/cpuid/amd_zen2_rome_epyc7742.txt"),
            "zen3" => include_str!("../tests/fixtures/cpuid/amd_zen3_milan_epyc7763.txt"),
            "zen3-qemu" => include_str!("../tests/fixtures/cpuid/amd_zen3_qemu_synthesized.txt"),
            "zen4" => include_str!("../tests/fixtures/cpuid/amd_zen4_genoa_epyc9654.txt"),
            "zen5" => include_str!("../tests/fixtures/cpuid/amd_zen5_turin_epyc9655.txt"),
            "zen5-kvm" => include_str!("../tests/fixtures/cpuid/amd_zen5_kvm_here.txt"),
            "skx" => include_str!("../tests/fixtures/cpuid/intel_skylake_sp_gold6154.txt"),
            "spr" => include_str!("../tests/fixtures/cpuid/intel_sapphire_rapids_w7_2475x.txt"),
            "icx" => include_str!("../tests/fixtures/cpuid/intel_ice_lake_sp_gold6336y.txt"),
            "icx-hyperv" => include_str!("../tests/fixtures/cpuid/intel_ice_lake_d_hyperv.txt"),
            "rkl-kvm" => include_str!("../tests/fixtures/cpuid/intel_rocket_lake_kvm_here.txt"),
            _ => panic!("no fixture {name}"),
        };
        let dump = CpuidDump::parse(text).unwrap();
        (cpu_ident_from(&dump), dump)
    }

    /// Decodes a fixture: cpuid's geometry (which must exist) and the notes.
    fn decode(name: &str) -> (TlbGeometry, CpuidTlb) {
        let (id, dump) = fixture(name);
        let c = cpuid_tlb(&id, &dump);
        let g = c
            .geometry
            .clone()
            .unwrap_or_else(|| panic!("{name}: no geometry: {:?}", c.notes));
        g.validate().unwrap();
        (g, c)
    }

    fn arrays(l: &TlbLevel) -> Vec<(Vec<PageSize>, u64, u64)> {
        l.arrays
            .iter()
            .map(|a| (a.sizes.clone(), a.entries, a.ways))
            .collect()
    }

    fn report(name: &str) -> TlbReport {
        let (id, dump) = fixture(name);
        choose_tlb(&id, cpuid_tlb(&id, &dump), preset(&id), None).unwrap()
    }

    #[test]
    fn dump_text_round_trips_and_rejects_garbage() {
        let (_, d) = fixture("spr");
        assert_eq!(CpuidDump::parse(&d.to_text()).unwrap(), d);
        assert_eq!(d.get(0x18, 8), Some([0, 0x0008_0009, 0x80, 0x4043]));
        assert_eq!(d.get(0x18, 9), None);
        let e = CpuidDump::parse("# c\n0x1 0 1 2 3\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("5 fields"), "{e}");
        let e = CpuidDump::parse("1 0 1 2 3 zz\n").unwrap_err();
        assert!(e.contains("'zz'"), "{e}");
    }

    #[test]
    fn read_with_reads_the_leaves_the_cpu_reports() {
        // Max basic leaf 0x18 with 2 more sub-leaves, a hypervisor, extended leaves up
        // to 0x80000006 only.
        let d = CpuidDump::read_with(|l, s| match (l, s) {
            (0, _) => [0x18, 0, 0, 0],
            (1, _) => [0, 0, 1 << 31, 0],
            (0x18, 0) => [2, 0, 0, 0],
            (0x8000_0000, _) => [0x8000_0006, 0, 0, 0],
            _ => [l, s, 0, 0],
        });
        let has = |l, s| d.get(l, s).is_some();
        assert!(has(2, 0) && has(0x18, 1) && has(0x18, 2) && !has(0x18, 3));
        assert!(has(0x4000_0000, 0) && has(0x8000_0006, 0));
        assert!(!has(0x8000_0019, 0), "beyond the highest extended leaf");
        // Without the hypervisor bit and leaf 0x18, neither is read.
        let d = CpuidDump::read_with(|l, _| match l {
            0 => [2, 0, 0, 0],
            _ => [0; 4],
        });
        assert!(d.get(0x4000_0000, 0).is_none() && d.get(0x18, 0).is_none());
        assert_eq!(d.max_extended(), 0);
    }

    #[test]
    fn identity_from_recorded_leaves() {
        let (id, _) = fixture("zen3");
        assert_eq!(
            (id.vendor.as_str(), id.family, id.model, id.brand.as_str()),
            (
                "AuthenticAMD",
                0x19,
                0x01,
                "AMD EPYC 7763 64-Core Processor"
            )
        );
        assert_eq!(id.hypervisor, None);
        let (id, _) = fixture("zen5-kvm");
        assert_eq!((id.family, id.model), (0x1a, 0x02));
        assert_eq!(id.hypervisor.as_deref(), Some("KVM"));
        let (id, _) = fixture("skx");
        assert_eq!(
            (id.vendor.as_str(), id.family, id.model),
            ("GenuineIntel", 6, 0x55)
        );
        let (id, _) = fixture("icx-hyperv");
        assert_eq!((id.family, id.model), (6, 0x6c));
        assert_eq!(id.hypervisor.as_deref(), Some("HyperV"));
        let (id, _) = fixture("zen3-qemu");
        assert_eq!(id.brand, "unknown");
    }

    #[test]
    fn amd_associativity_encodings() {
        assert_eq!(amd_l1_assoc(0xff), Assoc::Full);
        assert_eq!(amd_l1_assoc(1), Assoc::Ways { min: 1, max: 1 });
        assert_eq!(amd_l1_assoc(0), Assoc::Unknown);
        assert_eq!(amd_l2_assoc(0), Assoc::Disabled);
        assert_eq!(amd_l2_assoc(4), Assoc::Ways { min: 4, max: 5 });
        assert_eq!(amd_l2_assoc(5), Assoc::Ways { min: 6, max: 7 });
        assert_eq!(amd_l2_assoc(6), Assoc::Ways { min: 8, max: 15 });
        assert_eq!(amd_l2_assoc(8), Assoc::Ways { min: 16, max: 31 });
        assert_eq!(amd_l2_assoc(0xe).describe(), "128 or more ways");
        assert_eq!(amd_l2_assoc(0xf), Assoc::Full);
        assert_eq!(amd_l2_assoc(7), Assoc::Unknown);
        assert_eq!(amd_l2_assoc(9), Assoc::Unknown);
    }

    #[test]
    fn ways_are_fitted_to_divide_the_entries() {
        assert_eq!(
            fit_ways(2048, 12),
            8,
            "12 does not divide 2048; 8 and 16 tie"
        );
        assert_eq!(fit_ways(1536, 12), 12);
        assert_eq!(fit_ways(96, 7), 6);
        assert_eq!(
            fit_ways(64, 64),
            0,
            "as many ways as entries: fully associative"
        );
        assert_eq!(fit_ways(255, 1), 1);
        assert_eq!(fit_ways(0, 4), 0);
    }

    #[test]
    fn amd_zen2_to_zen4_from_recorded_leaves() {
        let (g, c) = decode("zen2");
        assert_eq!(
            c.leaves.as_deref(),
            Some("0x80000005/0x80000006/0x80000019")
        );
        assert_eq!(arrays(&g.levels[0]), vec![(vec![P4k, P2m, P1g], 64, 0)]);
        assert_eq!(
            arrays(&g.levels[1]),
            vec![(vec![P4k, P2m], 2048, 8)],
            "no 1 GB entries in Zen 2's L2: smashed into 2 MB"
        );
        assert!(
            c.notes.iter().any(|n| n.contains("4k 8 to 15 ways")),
            "{:?}",
            c.notes
        );
        let (g, _) = decode("zen3");
        assert_eq!(arrays(&g.levels[0]), vec![(vec![P4k, P2m, P1g], 64, 0)]);
        assert_eq!(
            arrays(&g.levels[1]),
            vec![(vec![P4k, P2m], 2048, 8), (vec![P1g], 64, 0)]
        );
        let (g, _) = decode("zen4");
        assert_eq!(arrays(&g.levels[0]), vec![(vec![P4k, P2m, P1g], 72, 0)]);
        assert_eq!(
            arrays(&g.levels[1]),
            vec![(vec![P4k, P2m], 3072, 8), (vec![P1g], 64, 0)]
        );
    }

    #[test]
    fn amd_zen5_l2_counts_are_in_units_of_32() {
        let (g, c) = decode("zen5");
        assert_eq!(arrays(&g.levels[0]), vec![(vec![P4k, P2m, P1g], 96, 0)]);
        assert_eq!(
            arrays(&g.levels[1]),
            vec![(vec![P4k, P2m], 4096, 8), (vec![P1g], 32, 4)]
        );
        assert!(c.notes.iter().any(|n| n.contains("units of 32")));
        // Under KVM here: the same 0x80000005/6, 0x80000019 left empty.
        let (g, c) = decode("zen5-kvm");
        assert_eq!(c.leaves.as_deref(), Some("0x80000005/0x80000006"));
        assert_eq!(arrays(&g.levels[0]), vec![(vec![P4k, P2m], 96, 0)]);
        assert_eq!(arrays(&g.levels[1]), vec![(vec![P4k, P2m], 4096, 8)]);
        assert!(c
            .notes
            .iter()
            .any(|n| n.contains("0x80000019 reports no 1 GB")));
        // Zen 4 is not scaled.
        let (g, c) = decode("zen4");
        assert_eq!(g.levels[1].entries(P4k), 3072);
        assert!(!c.notes.iter().any(|n| n.contains("units of 32")));
    }

    #[test]
    fn amd_synthesized_leaves_decode_as_they_say() {
        let (g, _) = decode("zen3-qemu");
        assert_eq!(arrays(&g.levels[0]), vec![(vec![P4k, P2m], 255, 1)]);
        assert_eq!(arrays(&g.levels[1]), vec![(vec![P4k], 512, 4)]);
    }

    #[test]
    fn intel_leaf2_skylake_sp() {
        let (id, dump) = fixture("skx");
        assert_eq!(
            leaf2_descriptors(dump.get(2, 0).unwrap()),
            vec![0x63, 0x03, 0x76, 0xff, 0xb5, 0xf0, 0xc3]
        );
        let (g, c) = decode("skx");
        assert!(
            c.leaves.as_deref().unwrap().starts_with("0x2 "),
            "{:?}",
            c.leaves
        );
        assert_eq!(g.levels[0].name, "L1 DTLB");
        assert_eq!(
            arrays(&g.levels[0]),
            vec![(vec![P4k], 64, 4), (vec![P2m], 32, 4), (vec![P1g], 4, 0)],
            "4 entries in 4 ways: fully associative"
        );
        assert_eq!(g.levels[1].name, "STLB");
        assert_eq!(
            arrays(&g.levels[1]),
            vec![(vec![P4k, P2m], 1536, 6), (vec![P1g], 16, 4)]
        );
        assert!(c.notes.iter().any(|n| n.contains("0xC3 says 6-way")));
        assert!(
            intel_leaf18(&dump).geometry.is_none(),
            "max basic leaf 0x16"
        );
        assert_eq!(id.hypervisor, None);
    }

    #[test]
    fn leaf2_descriptor_table() {
        for d in [
            0x03, 0x04, 0x05, 0x56, 0x57, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x63, 0x64, 0xa0, 0xb3,
            0xb4, 0xba, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xca,
        ] {
            let t = leaf2_descriptor(d).unwrap_or_else(|| panic!("{d:#x}"));
            for &(sizes, entries, ways) in t.arrays {
                assert!(!sizes.is_empty() && entries > 0, "{d:#x}");
                assert!(ways == 0 || entries % ways == 0, "{d:#x}");
            }
        }
        // Instruction TLBs, caches, prefetch, "use leaf 4", "use leaf 0x18".
        for d in [0x0b, 0x76, 0xb5, 0x2c, 0xf0, 0xff, 0xfe, 0x00] {
            assert!(leaf2_descriptor(d).is_none(), "{d:#x}");
        }
        let t = leaf2_descriptor(0x63).unwrap();
        assert_eq!(t.arrays, &[(&[P2m][..], 32, 4), (&[P1g][..], 4, 4)]);
        assert_eq!(
            leaf2_descriptor(0xc3).unwrap().arrays[0],
            (&[P4k, P2m][..], 1536, 6)
        );
        // Bit 31 set: the register holds no descriptors; EAX's low byte is a count.
        assert_eq!(
            leaf2_descriptors([0x0000_0301, 0x8000_00c3, 0, 0xca]),
            vec![0x03, 0xca]
        );
    }

    #[test]
    fn leaf2_places_tlb0_tlb1_and_stlb_in_levels() {
        let dump = |regs: [u32; 4]| CpuidDump {
            leaves: vec![
                CpuidLeaf {
                    leaf: 0,
                    subleaf: 0,
                    eax: 2,
                    ebx: 0,
                    ecx: 0,
                    edx: 0,
                },
                CpuidLeaf {
                    leaf: 2,
                    subleaf: 0,
                    eax: regs[0],
                    ebx: regs[1],
                    ecx: regs[2],
                    edx: regs[3],
                },
            ],
        };
        // Core 2: DTLB0 4M/4K 16 entries, DTLB1 4M 32 and 4K 256.
        let c = intel_leaf2(&dump([0x0557_5601, 0xb4, 0, 0]));
        let g = c.geometry.unwrap();
        assert_eq!(
            arrays(&g.levels[0]),
            vec![(vec![P4k], 16, 4), (vec![P2m], 16, 4)]
        );
        assert_eq!(g.levels[1].name, "L2 DTLB");
        assert_eq!(
            arrays(&g.levels[1]),
            vec![(vec![P4k], 256, 4), (vec![P2m], 32, 4)]
        );
        // Nehalem: DTLB0 2M 32 and DTLB 4K 64 are one level; STLB 4K 512.
        let g = intel_leaf2(&dump([0x0003_5a01, 0xca, 0, 0]))
            .geometry
            .unwrap();
        assert_eq!(
            arrays(&g.levels[0]),
            vec![(vec![P4k], 64, 4), (vec![P2m], 32, 4)]
        );
        assert_eq!(g.levels[1].name, "STLB");
        assert_eq!(arrays(&g.levels[1]), vec![(vec![P4k], 512, 4)]);
        // Only "use leaf 0x18": nothing, and it says why.
        let c = intel_leaf2(&dump([0x00fe_ff01, 0, 0, 0]));
        assert!(c.geometry.is_none());
        assert!(c.notes.iter().any(|n| n.contains("0xFE")));
    }

    #[test]
    fn intel_leaf18_golden_cove_and_sunny_cove() {
        for name in ["spr", "icx"] {
            let (g, c) = decode(name);
            assert_eq!(c.leaves.as_deref(), Some("0x18"));
            assert_eq!(
                arrays(&g.levels[0]),
                vec![(vec![P4k], 64, 4), (vec![P2m], 32, 4), (vec![P1g], 8, 0)],
                "{name}: the load-only DTLB, not the store-only one"
            );
            assert_eq!(g.levels[1].name, "STLB");
            assert_eq!(
                arrays(&g.levels[1]),
                vec![
                    (vec![P4k], 2048, 16),
                    (vec![P2m], 1024, 8),
                    (vec![P1g], 1024, 8)
                ],
                "{name}: 4 KB in both 1024-entry arrays"
            );
            assert!(c.notes.iter().any(|n| n.contains("store-only")), "{name}");
            assert!(c.notes.iter().any(|n| n.contains("competition")), "{name}");
        }
        // Sub-leaf decoding: SPR's store-only DTLB, 16 entries, fully associative.
        let e = leaf18_entry(0x0010_000f, 1, 0x4125).unwrap();
        assert_eq!(
            (e.kind, e.level, e.sizes.clone(), e.entries, e.ways),
            (DatKind::StoreOnly, 1, vec![P4k, P2m, P1g], 16, 0)
        );
        assert!(leaf18_entry(0, 0, 0).is_none(), "null sub-leaf");
        // Under Hyper-V, leaf 0x18 is empty and leaf 2 defers to it: no geometry.
        let (id, dump) = fixture("icx-hyperv");
        let c = cpuid_tlb(&id, &dump);
        assert!(c.geometry.is_none());
        assert!(c
            .notes
            .iter()
            .any(|n| n.contains("leaf 0x18 describes no data TLB")));
    }

    #[test]
    fn every_preset_validates_and_keys_do_not_overlap() {
        for p in tlb_presets::PRESETS {
            p.geometry()
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert!(!p.source.is_empty());
            for q in tlb_presets::PRESETS {
                if std::ptr::eq(p, q) || p.vendor != q.vendor || p.family != q.family {
                    continue;
                }
                for &(a, b) in p.models {
                    assert!(
                        !(a..=b).any(|m| q.matches(q.vendor, q.family, m)),
                        "{} and {} both match model {a:#x}..{b:#x}",
                        p.name,
                        q.name
                    );
                }
            }
        }
    }

    #[test]
    fn presets_by_family_and_model() {
        let name = |v: &str, f, m| tlb_presets::lookup(v, f, m).map(|p| p.name);
        let amd = "AuthenticAMD";
        assert_eq!(name(amd, 0x17, 0x31), Some("AMD Zen 2"), "Rome");
        assert_eq!(name(amd, 0x17, 0x71), Some("AMD Zen 2"), "Matisse");
        assert_eq!(name(amd, 0x17, 0x08), None, "Zen+");
        assert_eq!(name(amd, 0x17, 0x50), None, "Zen 1");
        assert_eq!(name(amd, 0x19, 0x01), Some("AMD Zen 3"), "Milan");
        assert_eq!(name(amd, 0x19, 0x21), Some("AMD Zen 3"), "Vermeer");
        assert_eq!(name(amd, 0x19, 0x50), Some("AMD Zen 3"), "Cezanne");
        assert_eq!(name(amd, 0x19, 0x11), Some("AMD Zen 4"), "Genoa");
        assert_eq!(name(amd, 0x19, 0x61), Some("AMD Zen 4"), "Raphael");
        assert_eq!(name(amd, 0x19, 0xa0), Some("AMD Zen 4"), "Bergamo");
        assert_eq!(name(amd, 0x1a, 0x02), Some("AMD Zen 5"), "Turin");
        assert_eq!(name(amd, 0x1a, 0x44), Some("AMD Zen 5"), "Granite Ridge");
        assert_eq!(name(amd, 0x1a, 0x50), None, "Zen 6");
        assert_eq!(name("HygonGenuine", 0x18, 0x01), None);
        let intel = "GenuineIntel";
        assert_eq!(
            name(intel, 6, 0x55),
            Some("Intel Skylake-SP / Cascade Lake")
        );
        assert!(name(intel, 6, 0x9e)
            .unwrap()
            .starts_with("Intel Skylake client"));
        assert_eq!(name(intel, 6, 0x6a), Some("Intel Ice Lake-SP"));
        assert_eq!(name(intel, 6, 0x6c), Some("Intel Ice Lake-SP"));
        for m in [0x7d, 0x7e, 0xa7] {
            assert!(
                name(intel, 6, m)
                    .unwrap()
                    .starts_with("Intel Sunny Cove client"),
                "{m:#x}"
            );
        }
        for m in [0x8f, 0xcf] {
            assert!(name(intel, 6, m)
                .unwrap()
                .starts_with("Intel Sapphire Rapids"));
        }
        assert_eq!(name(intel, 6, 0x97), None, "Alder Lake: hybrid");
        assert_eq!(name(amd, 6, 0x55), None);
    }

    #[test]
    fn presets_by_midr() {
        let cpuinfo = |part: &str| {
            format!(
                "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\
                 CPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: {part}\n\
                 CPU revision\t: 1\n\nprocessor\t: 1\n"
            )
        };
        assert_eq!(midr_from_cpuinfo(&cpuinfo("0xd0c")), Some((0x41, 0xd0c)));
        assert_eq!(midr_from_cpuinfo("processor : 0\n"), None);
        for (part, want) in [
            ("0xd0c", "ARM Neoverse N1"),
            ("0xd40", "ARM Neoverse V1"),
            ("0xd4f", "ARM Neoverse V2"),
        ] {
            let id = arm_ident(&cpuinfo(part)).unwrap();
            assert_eq!((id.vendor.as_str(), id.family), ("ARM", 0x41));
            let p = preset(&id).unwrap();
            assert_eq!(p.name, want);
            assert_eq!(p.geometry.levels[0].coalesce, Some(64 << 10));
            // No cpuid on ARM: the preset is what the model uses.
            let r = choose_tlb(&id, CpuidTlb::default(), Some(p), None).unwrap();
            assert_eq!(r.choice, Some(TlbChoice::Preset));
        }
        let id = arm_ident(&cpuinfo("0xd49")).unwrap();
        assert!(preset(&id).is_none(), "Neoverse N2: no preset");
        assert!(id.brand.contains("0xd49"));
        let n1 = tlb_presets::lookup("ARM", 0x41, 0xd0c).unwrap().geometry;
        assert_eq!(n1.last().entries(P4k), 1280);
    }

    #[test]
    fn cpuid_agreeing_with_the_preset_takes_its_ways_and_coalescing() {
        let r = report("zen3");
        assert_eq!(r.choice, Some(TlbChoice::CpuidPreset));
        assert_eq!(r.geometry.levels[0].coalesce, Some(16 << 10));
        assert_eq!(r.preset.as_ref().unwrap().name, "AMD Zen 3");
        assert!(
            r.notes.iter().any(|n| n.contains("coalesces 16 KiB")),
            "{:?}",
            r.notes
        );
        assert_eq!(r.cpuid.as_ref().unwrap().levels[0].coalesce, None);
        let r = report("skx");
        assert_eq!(r.choice, Some(TlbChoice::CpuidPreset));
        assert_eq!(r.geometry.levels[1].arrays[0].ways, 12);
        assert!(
            r.notes.iter().any(|n| n.contains("12-way (cpuid: 6-way)")),
            "{:?}",
            r.notes
        );
        assert!(r.geometry.source.contains("agreeing with preset"));
        for name in ["zen2", "zen4", "icx"] {
            assert_eq!(report(name).choice, Some(TlbChoice::CpuidPreset), "{name}");
        }
    }

    #[test]
    fn a_hypervisors_disagreeing_cpuid_gives_way_to_the_preset() {
        // This machine: Zen 5 under KVM, 0x80000019 empty.
        let r = report("zen5-kvm");
        assert_eq!(r.choice, Some(TlbChoice::Preset));
        assert_eq!(r.geometry.levels[0].entries(P1g), 96);
        assert_eq!(r.geometry.last().entries(P4k), 4096);
        assert!(r
            .notes
            .iter()
            .any(|n| n.contains("hypervisors often synthesize")));
        assert_eq!(r.cpuid.as_ref().unwrap().levels[0].entries(P1g), 0);
        // QEMU's built-in TLB leaves on a Zen 3 guest.
        let r = report("zen3-qemu");
        assert_eq!(r.choice, Some(TlbChoice::Preset));
        assert_eq!(r.geometry.last().entries(P4k), 2048);
        // KVM on Rocket Lake: leaf 2 points at leaf 0x18, which describes no
        // data TLB; the Sunny Cove client preset (before it: the generic
        // Skylake default, a 1536-entry STLB).
        let r = report("rkl-kvm");
        assert_eq!(r.choice, Some(TlbChoice::Preset));
        assert!(r.cpuid.is_none());
        assert_eq!(r.geometry.last().entries(P4k), 2048);
        assert_eq!(r.geometry.levels[0].entries(P1g), 8);
        // Hyper-V hides leaf 0x18: the preset, because cpuid is silent.
        let r = report("icx-hyperv");
        assert_eq!(r.choice, Some(TlbChoice::Preset));
        assert!(r.cpuid.is_none());
        assert!(r
            .notes
            .iter()
            .any(|n| n.contains("does not describe the TLBs")));
    }

    #[test]
    fn bare_metal_cpuid_that_disagrees_is_kept_and_the_preset_noted() {
        let r = report("spr");
        assert_eq!(r.choice, Some(TlbChoice::Cpuid));
        assert_eq!(r.geometry.levels[0].entries(P4k), 64);
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("preset Intel Sapphire Rapids") && n.contains("96 x 4k")),
            "{:?}",
            r.notes
        );
        let r = report("zen5");
        assert_eq!(r.choice, Some(TlbChoice::Cpuid));
        assert_eq!(r.geometry.last().entries(P1g), 32);
        // Nothing known at all: the generic geometry.
        let id = CpuIdent {
            vendor: "CentaurHauls".into(),
            family: 6,
            model: 0x0f,
            brand: "x".into(),
            hypervisor: None,
        };
        let r = choose_tlb(&id, CpuidTlb::default(), preset(&id), None).unwrap();
        assert_eq!(r.choice, Some(TlbChoice::Generic));
        assert_eq!(r.geometry, generic_geometry());
    }

    #[test]
    fn override_file_wins_and_its_errors_name_the_file_and_the_problem() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let good = write(
            "good.json",
            r#"{"version": 1, "comment": "Neoverse N1", "levels": [
                {"name": "L1", "arrays": [{"sizes": ["4k", "2m"], "entries": 48}],
                 "coalesce": 65536},
                {"name": "L2", "arrays": [{"sizes": ["4k", "2m", "1g"], "entries": 1280, "ways": 5}]}
            ]}"#,
        );
        let (id, dump) = fixture("zen3");
        let r = choose_tlb(&id, cpuid_tlb(&id, &dump), preset(&id), Some(&good)).unwrap();
        assert_eq!(r.choice, Some(TlbChoice::Override));
        assert_eq!(r.geometry.last().entries(P1g), 1280);
        assert_eq!(
            r.geometry.source,
            format!("override file {}", good.display())
        );
        assert!(
            r.cpuid.is_some(),
            "cpuid's view is kept beside the override"
        );

        let err = |p: &Path| format!("{:#}", read_tlb_override(p).unwrap_err());
        let missing = d.path().join("missing.json");
        let e = err(&missing);
        assert!(
            e.contains("missing.json") && e.contains("cannot read"),
            "{e}"
        );
        let cases = [
            ("syntax.json", "{\"levels\": [", "not JSON"),
            ("array.json", "[]", "expected a JSON object"),
            ("null.json", "null", "expected a JSON object"),
            (
                "key.json",
                r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": 64, "way": 4}]}]}"#,
                "unknown key 'way' in levels[0].arrays[0]",
            ),
            (
                "size.json",
                r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4K"], "entries": 64}]}]}"#,
                "levels[0].arrays[0]: unknown variant `4K`",
            ),
            (
                "type.json",
                r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": "64"}]}]}"#,
                "levels[0].arrays[0]: invalid type",
            ),
            (
                "nolevels.json",
                r#"{"source": "x"}"#,
                "missing field `levels`",
            ),
            ("levels.json", r#"{"levels": 5}"#, "not a TLB geometry"),
            (
                "ways.json",
                r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": 64, "ways": 5}]}]}"#,
                "invalid geometry: TLB level 'L1': 64 entries is not a multiple of 5 ways",
            ),
            ("empty.json", r#"{"levels": []}"#, "invalid geometry"),
            (
                "version.json",
                r#"{"version": 2, "levels": []}"#,
                "version 2 (this hugetune reads version 1)",
            ),
        ];
        for (name, text, want) in cases {
            let p = write(name, text);
            let e = err(&p);
            assert!(e.contains(name) && e.contains(want), "{name}: {e}");
        }
        // The choice reports the same error, without falling back silently.
        let e = choose_tlb(&id, CpuidTlb::default(), None, Some(&missing)).unwrap_err();
        assert!(format!("{e:#}").contains("missing.json"));
    }

    #[test]
    fn odd_override_files_are_errors_not_panics() {
        let d = tempfile::tempdir().unwrap();
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let odd = [
            "",
            "\u{feff}{}",
            "{}",
            r#"{"levels": null}"#,
            r#"{"levels": [null]}"#,
            r#"{"levels": [{"arrays": 3}]}"#,
            r#"{"levels": [{"name": "L1", "arrays": [{"sizes": [], "entries": 0}]}]}"#,
            r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": 18446744073709551615}]}]}"#,
            r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": 64, "ways": 18446744073709551615}]}]}"#,
            r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": 64}], "coalesce": 0}]}"#,
            r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["4k"], "entries": -1}]}]}"#,
            r#"{"levels": [{"name": "L1", "arrays": [{"sizes": ["2m"], "entries": 64}]}]}"#,
            r#"{"version": "1", "levels": []}"#,
            &deep,
        ];
        for (i, text) in odd.iter().enumerate() {
            let p = d.path().join(format!("odd{i}.json"));
            std::fs::write(&p, text).unwrap();
            let e = read_tlb_override(&p).expect_err(text);
            assert!(format!("{e:#}").contains(&format!("odd{i}.json")), "{e:#}");
        }
    }

    #[test]
    fn reach_per_page_size_with_smashing_and_coalescing() {
        let zen5 = tlb_presets::lookup("AuthenticAMD", 0x1a, 2)
            .unwrap()
            .geometry;
        let r = reach(zen5.last());
        let by = |s| r.iter().find(|x| x.page == s).unwrap().clone();
        assert_eq!(by(P4k).bytes, 16 << 20);
        assert_eq!(by(P2m).bytes, 8 << 30);
        assert_eq!(
            (by(P1g).entry_bytes, by(P1g).bytes),
            (2 << 20, 8 << 30),
            "1 GB pages held as 2 MB entries"
        );
        let skx = tlb_presets::lookup("GenuineIntel", 6, 0x55)
            .unwrap()
            .geometry;
        let r = reach(skx.last());
        assert_eq!(
            r.iter().map(|x| x.bytes).collect::<Vec<_>>(),
            vec![6 << 20, 3 << 30, 16 << 30]
        );
        let n1 = tlb_presets::lookup("ARM", 0x41, 0xd0c).unwrap().geometry;
        let r = reach(n1.last());
        assert_eq!(r[0].bytes, 5 << 20);
        assert_eq!(
            r[0].coalesced_bytes,
            Some(80 << 20),
            "64 KB contiguous entries"
        );
        assert_eq!(r[1].coalesced_bytes, None);
    }
}
