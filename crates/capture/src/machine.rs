//! What this machine is and what it can give: CPU and TLB geometry, page sizes,
//! THP/mTHP and hugetlb settings and pools, PMU availability.

use crate::procfs::{read_trimmed, read_u64, selected_choice};
use anyhow::{Context, Result};
use hugetune_model::page::PageSize::{P1g, P2m, P4k};
use hugetune_model::plan::ThpMode;
use hugetune_model::tlb::{TlbArray, TlbGeometry, TlbLevel};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuIdent {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub brand: String,
    /// The hypervisor's name when running in a VM.
    pub hypervisor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlbReport {
    /// The geometry the model uses.
    pub geometry: TlbGeometry,
    /// What cpuid reported, if it reports TLBs at all.
    pub cpuid: Option<TlbGeometry>,
    pub notes: Vec<String>,
}

pub fn cpu_ident() -> CpuIdent {
    let c = raw_cpuid::CpuId::new();
    let vendor = c
        .get_vendor_info()
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    let (family, model) = c
        .get_feature_info()
        .map(|f| (f.family_id() as u32, f.model_id() as u32))
        .unwrap_or((0, 0));
    let brand = c
        .get_processor_brand_string()
        .map(|b| b.as_str().trim().to_string())
        .filter(|b| !b.is_empty())
        .or_else(|| cpuinfo_field("model name"))
        .unwrap_or_else(|| "unknown".into());
    let hypervisor = c
        .get_hypervisor_info()
        .map(|h| format!("{:?}", h.identify()));
    CpuIdent {
        vendor,
        family,
        model,
        brand,
        hypervisor,
    }
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let t = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    t.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_string())
    })
}

/// TLB geometry as cpuid describes it: AMD leaves 0x80000005/6, Intel leaf 0x18.
pub fn cpuid_geometry(id: &CpuIdent) -> Option<TlbGeometry> {
    let c = raw_cpuid::CpuId::new();
    if id.vendor == "AuthenticAMD" || id.vendor == "HygonGenuine" {
        let l1 = c.get_l1_cache_and_tlb_info()?;
        let l2 = c.get_l2_l3_cache_and_tlb_info()?;
        if l1.dtlb_4k_size() == 0 {
            return None;
        }
        // AMD's L1 DTLB is fully associative and holds every page size; the L2 is
        // one (skewed) array shared by 4 KB and 2 MB translations.
        return Some(TlbGeometry {
            levels: vec![
                TlbLevel::new(
                    "L1 DTLB",
                    vec![TlbArray::new(&[P4k, P2m, P1g], l1.dtlb_4k_size() as u64, 0)],
                    None,
                ),
                TlbLevel::new(
                    "L2 DTLB",
                    vec![TlbArray::new(&[P4k, P2m], l2.dtlb_4k_size() as u64, 0)],
                    None,
                ),
            ],
            source: "cpuid 0x80000005/0x80000006".into(),
        });
    }
    if id.vendor == "GenuineIntel" {
        let mut levels: Vec<TlbLevel> = Vec::new();
        for d in c.get_deterministic_address_translation_info()? {
            use raw_cpuid::DatType;
            if !matches!(
                d.cache_type(),
                DatType::DataTLB | DatType::UnifiedTLB | DatType::LoadOnly
            ) {
                continue;
            }
            let mut sizes = Vec::new();
            if d.has_4k_entries() {
                sizes.push(P4k);
            }
            if d.has_2mb_entries() {
                sizes.push(P2m);
            }
            if d.has_1gb_entries() {
                sizes.push(P1g);
            }
            let li = (d.cache_level() as usize).clamp(1, 2) - 1;
            while levels.len() <= li {
                let name = if levels.is_empty() { "L1 DTLB" } else { "STLB" };
                levels.push(TlbLevel::new(name, vec![], None));
            }
            let entries = d.ways() as u64 * d.sets() as u64;
            let lvl = &mut levels[li];
            sizes.retain(|s| !lvl.arrays.iter().any(|a| a.sizes.contains(s)));
            if !sizes.is_empty() && entries > 0 {
                lvl.arrays
                    .push(TlbArray::new(&sizes, entries, d.ways() as u64));
            }
        }
        let g = TlbGeometry {
            levels,
            source: "cpuid leaf 0x18".into(),
        };
        return g.validate().is_ok().then_some(g);
    }
    None
}

/// Published geometries of CPUs whose cpuid TLB leaves are lossy or, in VMs, often
/// synthesized by the hypervisor (REF-model §8). Keyed by vendor/family/model.
pub fn preset(id: &CpuIdent) -> Option<(&'static str, TlbGeometry)> {
    let amd = |name: &'static str, l1: u64, l2: u64| {
        Some((
            name,
            TlbGeometry {
                levels: vec![
                    TlbLevel::new(
                        "L1 DTLB",
                        vec![TlbArray::new(&[P4k, P2m, P1g], l1, 0)],
                        None,
                    ),
                    TlbLevel::new("L2 DTLB", vec![TlbArray::new(&[P4k, P2m], l2, 0)], None),
                ],
                source: format!("preset {name}"),
            },
        ))
    };
    match (id.vendor.as_str(), id.family, id.model) {
        ("AuthenticAMD", 0x1a, _) => amd("AMD Zen 5 (L1 96, L2 4096: Hot Chips 2024)", 96, 4096),
        ("AuthenticAMD", 0x19, m)
            if (0x10..0x20).contains(&m)
                || (0x60..0x80).contains(&m)
                || (0xa0..0xb0).contains(&m) =>
        {
            amd("AMD Zen 4 (L1 72, L2 3072)", 72, 3072)
        }
        ("AuthenticAMD", 0x19, _) => amd("AMD Zen 3 (L1 64, L2 2048)", 64, 2048),
        ("AuthenticAMD", 0x17, m) if m >= 0x30 => amd("AMD Zen 2 (L1 64, L2 2048)", 64, 2048),
        _ => None,
    }
}

/// A conservative geometry when nothing better is known (Skylake-like).
pub fn generic_geometry() -> TlbGeometry {
    TlbGeometry {
        levels: vec![
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
        ],
        source: "generic (Skylake-like) default".into(),
    }
}

/// The geometry the model should use, and why. An override file (JSON of
/// `TlbGeometry`) wins; then cpuid, corrected by a preset when running in a VM
/// whose cpuid disagrees with the CPU's published figures.
pub fn tlb_report(override_file: Option<&Path>) -> Result<TlbReport> {
    let id = cpu_ident();
    let cpuid = cpuid_geometry(&id);
    let mut notes = Vec::new();
    if let Some(p) = override_file {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("reading TLB override {}", p.display()))?;
        let mut g: TlbGeometry = serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not a TLB geometry (expected JSON with levels, source; docs/formats.md)",
                p.display()
            )
        })?;
        g.validate()
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        g.source = format!("override file {}", p.display());
        return Ok(TlbReport {
            geometry: g,
            cpuid,
            notes,
        });
    }
    let geometry = match (&cpuid, preset(&id)) {
        (Some(c), Some((name, p))) if id.hypervisor.is_some() && c.levels != p.levels => {
            notes.push(format!(
                "cpuid reports {}, but this is {name}; hypervisors often synthesize TLB \
                 leaves, so the published figures are used",
                c.describe().join("; ")
            ));
            p
        }
        (Some(c), _) => c.clone(),
        (None, Some((_, p))) => p,
        (None, None) => {
            notes.push("cpuid does not describe the TLBs; using a generic geometry".into());
            generic_geometry()
        }
    };
    Ok(TlbReport {
        geometry,
        cpuid,
        notes,
    })
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

pub fn machine(tlb_override: Option<&Path>) -> Result<Machine> {
    let thp_root = Path::new(THP_SYSFS);
    let mem_total_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
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

    #[test]
    fn this_machine_has_a_geometry() {
        let r = tlb_report(None).unwrap();
        r.geometry.validate().unwrap();
        let g = &r.geometry;
        assert!(g.last().entries(P4k) >= g.levels[0].entries(P4k));
    }

    #[test]
    fn zen5_in_a_vm_uses_the_preset() {
        let id = CpuIdent {
            vendor: "AuthenticAMD".into(),
            family: 0x1a,
            model: 2,
            brand: "x".into(),
            hypervisor: Some("KVM".into()),
        };
        let (_, p) = preset(&id).unwrap();
        assert_eq!(p.last().entries(P4k), 4096);
    }
}
