use crate::Ctx;
use anyhow::Result;
use hugetune_capture::machine;
use hugetune_report::table;

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
        hugetune_report::bytes(m.mem_total_kb * 1024),
        m.kernel
    );
    if let Some(h) = &m.cpu.hypervisor {
        println!("           running under a hypervisor ({h}): TLB misses cost 2-D page walks");
    }
    let g = &m.tlb.geometry;
    println!("dTLB       {}", g.source);
    for line in g.describe() {
        println!("           {line}");
    }
    if let Some(c) = &m.tlb.cpuid {
        if c != g {
            println!("           cpuid says: {}", c.describe().join("; "));
        }
    }
    for n in &m.tlb.notes {
        println!("           note: {n}");
    }
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
                hugetune_report::bytes(p.page_kb * 1024),
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
