use crate::{stages, Ctx};
use anyhow::Result;
use hugetune_host::machine;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Profile bundle written by `hugetune record`
    bundle: PathBuf,
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// Do not store the directives in the database
    #[arg(long)]
    no_db: bool,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let m = machine::machine(ctx.tlb.as_deref())?;
    let an = stages::analyze(
        &a.bundle,
        &m.tlb.geometry,
        &stages::cost_model_at(&ctx.db_path, &m)?,
    )?;
    let ids = if a.no_db {
        None
    } else {
        let mut db = ctx.db()?;
        let bundle = std::fs::canonicalize(&a.bundle)?;
        Some(stages::store_analysis(&mut db, &an, Some(&bundle), &m)?)
    };
    if a.json {
        let mut v = serde_json::to_value(&an)?;
        if let Some((p, _, _)) = ids {
            v["profile_id"] = p.into();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    print_analysis(&an, ctx.verbose);
    if let Some((p, _, _)) = ids {
        println!("stored as profile #{p} in {}", ctx.db_path.display());
    }
    Ok(0)
}

pub fn print_analysis(an: &stages::Analysis, verbose: bool) {
    let s = &an.stream;
    println!(
        "profile    {} ({} references from {}, native run {:.3} s)",
        an.meta.command.join(" "),
        hugetune_render::count(s.refs as f64),
        an.meta.ref_source,
        an.meta.native.wall_s
    );
    let cats: Vec<String> = hugetune_model::Category::ALL
        .iter()
        .filter(|c| s.refs_per_category[c.index()] > 0)
        .map(|c| {
            format!(
                "{c} {:.1}%",
                100.0 * s.refs_per_category[c.index()] as f64 / s.refs.max(1) as f64
            )
        })
        .collect();
    println!("references {}", cats.join(", "));
    let g = &an.result.geometry;
    println!("TLB model  {} ({})", g.describe().join("; "), g.source);
    let sig = &an.significance;
    println!(
        "significance  {} TLB misses/s, {} faults/s with 4 KB pages (model estimate): {}",
        hugetune_render::count(sig.tlb_misses_per_s),
        hugetune_render::count(sig.faults_per_s),
        if sig.passes {
            "passes"
        } else {
            "fails: huge pages cannot help much"
        }
    );
    println!("\npredicted (on the profiled input; * = combined mapping, computed exactly)");
    println!("{}", super::predictions_table(&an.predictions));
    println!("costs      {}", an.cost.source);
    // Seed 001 assumes category benefits add up; every combination is computed
    // exactly here, so say how far off that assumption would have been: one
    // line, the mapping per line with --verbose.
    let errors: Vec<(&str, f64, f64)> = an
        .predictions
        .iter()
        .filter_map(|p| {
            hugetune_model::rank::additivity_error(&an.predictions, p)
                .map(|e| (p.label.as_str(), p.saving_ns, e))
        })
        .collect();
    if verbose {
        for (label, saving, e) in &errors {
            println!(
                "additivity {label}: exact saving {:.1} ms, sum of its categories alone {:.1} ms ({:+.1}%)",
                saving / 1e6,
                saving * (1.0 - e) / 1e6,
                e * 100.0
            );
        }
    } else if let Some(worst) = errors.iter().max_by(|a, b| a.2.abs().total_cmp(&b.2.abs())) {
        println!(
            "additivity {} combined mappings computed exactly; summing their categories alone would be off by up to {:+.1}% ({}; -v lists each)",
            errors.len(),
            worst.2 * 100.0,
            worst.0
        );
    }
}
