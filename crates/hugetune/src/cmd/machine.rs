use crate::Ctx;
use anyhow::Result;
use hugetune_host::machine::{self, TlbChoice, TlbReport};
use hugetune_model::page::PageSize;
use hugetune_render::table;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let m = machine::machine(ctx.tlb.as_deref())?;
    let art = crate::artifacts::find()?;
    if a.json {
        let mut v = serde_json::to_value(&m)?;
        let last = m.tlb.geometry.last();
        v["tlb"]["reach"] = serde_json::json!({
            "level": last.name,
            "pages": machine::reach(last),
        });
        v["runtime_lib"] = art.runtime_lib.display().to_string().into();
        v["work"] = art.work.display().to_string().into();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!(
        "cpu        {} (vendor {}, family {:#x}, model {:#x})",
        m.cpu.brand, m.cpu.vendor, m.cpu.family, m.cpu.model
    );
    println!(
        "           {} cores, {} memory, kernel {}",
        m.cores,
        hugetune_render::bytes(m.mem_total_kb * 1024),
        m.kernel
    );
    if let Some(h) = &m.cpu.hypervisor {
        println!("           running under a hypervisor ({h}): TLB misses cost 2-D page walks");
    }
    print_tlb(&m.tlb);
    println!(
        "THP        enabled {}, defrag {}",
        m.thp.map_or("unavailable".to_string(), |t| format!("{t:?}")
            .to_lowercase()),
        m.thp_defrag.as_deref().unwrap_or("?")
    );
    if !m.mthp.is_empty() {
        let sizes: Vec<String> = m.mthp.iter().map(|(kb, s)| format!("{kb}K:{s}")).collect();
        println!("mTHP       {}", sizes.join(" "));
    }
    let rows: Vec<Vec<String>> = m
        .pools
        .iter()
        .map(|p| {
            vec![
                hugetune_render::bytes(p.page_kb * 1024),
                p.nr.to_string(),
                p.free.to_string(),
                p.resv.to_string(),
                p.surplus.to_string(),
            ]
        })
        .collect();
    println!(
        "hugetlb pools\n{}",
        table(&["page", "total", "free", "reserved", "surplus"], &rows)
    );
    println!(
        "PMU        {}",
        if m.pmu {
            "hardware counters available"
        } else {
            "no hardware counters (perf reports them unsupported): TLB misses are modelled, gains are timed"
        }
    );
    println!("runtime    {}", art.runtime_lib.display());
    println!("workloads  {}", art.work.display());
    Ok(0)
}

/// `n` bytes in the largest binary unit it reaches, without decimals when exact:
/// `6 MiB`, `2.5 GiB`, `16 GiB`.
fn exact_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = (0..UNITS.len())
        .rev()
        .find(|&u| n >> (10 * u) > 0)
        .unwrap_or(0);
    let v = n as f64 / (1u64 << (10 * u)) as f64;
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `4 KB`, `2 MB`, `1 GB`, `64 KB`: page and entry sizes as the docs write them.
fn page_bytes(n: u64) -> String {
    exact_bytes(n)
        .replace(" KiB", " KB")
        .replace(" MiB", " MB")
        .replace(" GiB", " GB")
}

fn print_tlb(t: &TlbReport) {
    let g = &t.geometry;
    let why = match t.choice {
        Some(TlbChoice::Override) => "",
        Some(TlbChoice::Cpuid) => " (cpuid)",
        Some(TlbChoice::CpuidPreset) => " (cpuid, with the preset's associativity and coalescing)",
        Some(TlbChoice::Preset) => " (published figures)",
        Some(TlbChoice::Generic) => " (nothing known about this CPU)",
        None => "",
    };
    println!("dTLB       {}{why}", g.source);
    for line in g.describe() {
        println!("           {line}");
    }
    let last = g.last();
    let reach: Vec<String> = machine::reach(last)
        .iter()
        .map(|r| {
            let mut s = format!(
                "{} with {} pages",
                exact_bytes(r.bytes),
                page_bytes(r.page.bytes())
            );
            if r.entry_bytes < r.page.bytes() {
                s += &format!(" (held as {} entries)", page_bytes(r.entry_bytes));
            }
            if let (PageSize::P4k, Some(c), Some(co)) = (r.page, r.coalesced_bytes, last.coalesce) {
                s += &format!(
                    " ({} in {} contiguous folios)",
                    exact_bytes(c),
                    page_bytes(co)
                );
            }
            s
        })
        .collect();
    println!("           reach ({}): {}", last.name, reach.join(", "));
    match &t.cpuid {
        Some(c) if c.levels != g.levels => {
            let leaves = t.cpuid_leaves.as_deref().unwrap_or("?");
            println!(
                "           cpuid {leaves} says: {}",
                c.describe().join("; ")
            );
        }
        _ => {}
    }
    if let Some(p) = &t.preset {
        let used = matches!(t.choice, Some(TlbChoice::Preset | TlbChoice::CpuidPreset));
        let tag = if used { "preset" } else { "preset (not used)" };
        println!("           {tag} {}: {}", p.name, p.source);
    }
    for n in &t.notes {
        println!("           note: {n}");
    }
}
