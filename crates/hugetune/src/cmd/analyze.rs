//! `hugetune analyze BUNDLE`: the model over a profile bundle, stored as
//! directives. Sampled bundles (`record --rate/--max-pages`) are analysed from
//! their sample with error bars; `--exact` insists on exact counts, `--rate`
//! samples a complete stream (docs/model.md §3.1).

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
    /// Exact counts only: refuse a sampled bundle (a complete one is analysed
    /// whole, which is the default for complete bundles)
    #[arg(long, conflicts_with = "rate")]
    exact: bool,
    /// Analyse a sample of the stream at this rate (0 < R <= 1): of a complete
    /// bundle, 4 KB pages and 2 MB regions sampled as `record --rate` would; of a
    /// fixed-rate one, a smaller sample
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Seed of the sampling hash for --rate on a complete bundle
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A sampled stream: analyse at most about this many references, sampling it
    /// further (the highest threshold that keeps no more)
    #[arg(long, value_name = "N", conflicts_with = "exact")]
    max_refs: Option<u64>,
    /// Take the predicted speedups over this native run time (seconds) instead of
    /// the profile's own native run, e.g. one timed on a quiet machine: the walk
    /// overlap is estimated from it too (docs/model.md §4)
    #[arg(long, value_name = "SECONDS")]
    native_time: Option<f64>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    if let Some(t) = a.native_time {
        if !(t.is_finite() && t > 0.0) {
            anyhow::bail!("--native-time {t} is not a positive number of seconds");
        }
    }
    let m = machine::machine(ctx.tlb.as_deref())?;
    let an = stages::analyze_sampled(
        &a.bundle,
        &m.tlb.geometry,
        &stages::cost_model_at(&ctx.db_path, &m)?,
        &stages::analysis_options(false, &m.tlb.geometry),
        &stages::SampleOptions {
            exact: a.exact,
            rate: a.rate,
            seed: a.seed,
            max_refs: a.max_refs,
            native_s: a.native_time,
        },
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
    if let Some(f) = &an.frequency {
        for l in stages::frequency_lines(
            &an.meta.command,
            an.meta.native.wall_s,
            &an.result.geometry.source,
            &an.significance,
            f,
        ) {
            println!("{l}");
        }
        println!(
            "\npredicted ({}; walks and faults are lower bounds)",
            f.basis
        );
        println!("{}", super::predictions_table(&an.predictions));
        if !an.intervals.is_empty() {
            println!(
                "interval (speedup with every calibrated figure anywhere between its fastest and slowest repetition, over the lower-bound counts: the speedup may lie above it; docs/model.md §4.1)"
            );
            println!("{}", interval_table(an));
        }
        println!("costs      {}", an.cost.source);
        return;
    }
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
    if let Some(c) = &an.result.cores {
        // `analyze` said how the threads were placed (a note).
        let per_core = &an.result.all_small().per_core;
        if !per_core.is_empty() && c.cores() > 1 {
            let walks: Vec<String> = per_core
                .iter()
                .map(|x| hugetune_render::count(x.walks as f64))
                .collect();
            println!("walks per core with 4 KB pages: {}", walks.join(", "));
        }
    }
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
    println!(
        "misses        {}",
        hugetune_model::plan::miss_shares_text(sig)
    );
    if let Some(x) = an.result.sampling.as_ref().filter(|x| x.kind == "time") {
        println!(
            "sampled    time : one reference in {} (perf), {} samples; TLB misses under the independent reference model (docs/model.md §3.2)",
            x.modulus,
            hugetune_render::count(x.refs_sampled as f64)
        );
    } else if let Some(x) = &an.result.sampling {
        println!(
            "sampled    {} : 4 KB pages and 2 MB regions at R = {:.4} (regions' realized rate {:.2}× that), {} of the references in the sample, {} regions",
            x.kind,
            x.rate,
            x.realized,
            hugetune_render::count(x.refs_sampled as f64),
            x.groups
        );
    }
    println!(
        "\npredicted (on the profiled input; * = combined mapping, computed {})",
        if an.result.sampling.is_some() {
            "from the same sample"
        } else {
            "exactly"
        }
    );
    println!("{}", super::predictions_table(&an.predictions));
    if !an.errors.is_empty() {
        println!("sampling error (standard errors; 90 % interval of the speedup)");
        println!("{}", error_table(an));
    }
    if !an.intervals.is_empty() {
        println!(
            "interval (speedup with every calibrated figure anywhere between its fastest and slowest repetition{}; docs/model.md §4.1)",
            if an.errors.is_empty() {
                ""
            } else {
                ", and with the sampling's 90 % on top"
            }
        );
        println!("{}", interval_table(an));
    }
    println!("costs      {}", an.cost.source);
    let o = hugetune_model::rank::walk_overlap(&an.result, &an.cost, an.meta.native.wall_s);
    if o.ns_per_walk.is_finite() {
        println!(
            "overlap    walks {:.2}x at once: the native run spends {:.1} ns per 4 KB walk, between a chase's {:.1} ns (a walk and its access in series: 1x) and independent loads' {:.1} ns ({:.1}x; docs/model.md §4){}",
            o.factor,
            o.ns_per_walk,
            o.serial_ns,
            an.cost.independent_ns_per_walk,
            an.cost.walk_concurrency,
            if o.factor > 1.0 && (o.factor - o.serial_ns / o.ns_per_walk).abs() < 1e-9 {
                "; no fewer than the run shows: a chase's time over its own"
            } else {
                ""
            }
        );
        if o.dirty_share > 0.0 {
            println!(
                "writes     {:.0} % of the walks are to a page the program then writes: their access costs {:.0} % more in series (calibrated; docs/model.md §4, \"Writes\")",
                100.0 * o.dirty_share,
                100.0 * an.cost.dirty_ratio
            );
        }
    }
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

/// The intervals from the calibration's spread, one row per prediction in
/// the predictions' order.
fn interval_table(an: &stages::Analysis) -> String {
    use hugetune_render::table;
    let rows: Vec<Vec<String>> = an
        .predictions
        .iter()
        .filter_map(|p| {
            let i = an.intervals.iter().find(|i| i.label == p.label)?;
            let mut row = vec![
                p.label.clone(),
                format!("{:.2}x", p.predicted_speedup),
                format!("{:.2}–{:.2}x", i.calibration_low, i.calibration_high),
            ];
            if !an.errors.is_empty() {
                row.push(format!("{:.2}–{:.2}x", i.low, i.high));
            }
            Some(row)
        })
        .collect();
    let mut head = vec!["mapping", "speedup", "calibration"];
    if !an.errors.is_empty() {
        head.push("and sampling");
    }
    table(&head, &rows)
}

/// The error bars of a sampled analysis, one row per prediction in the
/// predictions' order.
fn error_table(an: &stages::Analysis) -> String {
    use hugetune_render::{count, table};
    let rows: Vec<Vec<String>> = an
        .predictions
        .iter()
        .filter_map(|p| {
            let e = an.errors.iter().find(|e| e.label == p.label)?;
            Some(vec![
                p.label.clone(),
                format!("± {}", count(e.walks_se)),
                format!("± {}", count(e.faults_se)),
                format!("± {:.1} ms", e.saving_se_ns / 1e6),
                format!(
                    "{:.2}x ({:.2}–{:.2}x)",
                    p.predicted_speedup, e.speedup_low, e.speedup_high
                ),
            ])
        })
        .collect();
    table(
        &["mapping", "TLB walks", "faults", "saving", "speedup"],
        &rows,
    )
}
