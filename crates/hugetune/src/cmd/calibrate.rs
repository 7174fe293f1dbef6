//! `hugetune calibrate`: measures this machine's TLB-miss and page-fault costs per
//! page size (docs/calibrate.md) and stores them per machine in the database.

use crate::{stages, Ctx};
use anyhow::{bail, Context, Result};
use hugetune_host::calibrate::{self, Calibration, LEAF};
use hugetune_host::machine;
use hugetune_render::table;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Fewer points, steps and passes (1-1.5 min; for tests and CI)
    #[arg(long)]
    quick: bool,
    /// Print the calibration as JSON (the form stored in the database)
    #[arg(long)]
    json: bool,
    /// Do not store the result in the database
    #[arg(long)]
    no_db: bool,
    /// Also write the calibration as JSON to FILE
    #[arg(short, long = "output", alias = "out", value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print this machine's stored calibration instead of measuring
    #[arg(long, conflicts_with_all = ["quick", "no_db", "out", "spread", "same_process"])]
    show: bool,
    /// Spread the walk curves' repetitions over DURATION (e.g. 5m, 300s):
    /// every footprint measured round after round, figures the medians of all
    /// rounds. For a host whose walk cost wanders over minutes
    /// (docs/calibrate.md, "Spread")
    #[arg(long, value_name = "DURATION", value_parser = super::run::parse_duration)]
    spread: Option<std::time::Duration>,
    /// Measure the 4 KB walks and the walk overlap in calibrate's own process,
    /// on one buffer per comparison, instead of on fresh memory in a child
    /// process per repetition (the default; docs/calibrate.md, "Fresh memory")
    #[arg(long)]
    same_process: bool,
}

const LEAF_TEXT: [&str; 3] = ["4 KB", "2 MB", "1 GB"];

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let m = machine::machine(ctx.tlb.as_deref())?;
    if a.show {
        let db = ctx.db()?;
        let Some(c) = stages::stored_calibration(&db, &m)? else {
            bail!(
                "no calibration of this machine in {}; run `hugetune calibrate`",
                db.path().display()
            );
        };
        if a.json {
            println!("{}", serde_json::to_string_pretty(&c)?);
        } else {
            print!("{}", render(&c, ctx.verbose));
        }
        return Ok(0);
    }
    // Open the database first: a bad path should not cost a measurement.
    let db = if a.no_db { None } else { Some(ctx.db()?) };
    if a.spread.is_some_and(|d| d.as_secs() > 3600) {
        bail!("--spread: at most an hour (the walk curves are measured round after round for that long)");
    }
    let mut o = calibrate::options(a.quick, &m);
    o.spread_s = a.spread.map_or(0.0, |d| d.as_secs_f64());
    o.fresh_memory = !a.same_process;
    let c = calibrate::calibrate(&o, calibrate::describe(&m), &mut |msg| {
        eprintln!("calibrate: {msg}")
    })?;
    let json = serde_json::to_value(&c)?;
    if let Some(p) = &a.out {
        std::fs::write(p, serde_json::to_string_pretty(&json)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let stored = match &db {
        Some(db) => {
            let mid = stages::machine_id(db, &m)?;
            Some(db.insert_calibration(mid, &json)?)
        }
        None => None,
    };
    let mut notes = Vec::new();
    match (&db, stored) {
        (Some(db), Some(id)) => notes.push(format!(
            "stored as calibration {id} of this machine in {} (`hugetune calibrate --show`)",
            db.path().display()
        )),
        _ => notes.push("not stored (--no-db)".into()),
    }
    if let Some(p) = &a.out {
        notes.push(format!("written to {}", p.display()));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
        for n in notes {
            eprintln!("calibrate: {n}");
        }
    } else {
        print!("{}", render(&c, ctx.verbose));
        for n in notes {
            println!("{n}");
        }
    }
    Ok(0)
}

fn range_text(s: &calibrate::Repeated) -> String {
    format!(
        "{}–{}",
        hugetune_render::ns(s.min),
        hugetune_render::ns(s.max)
    )
}

/// The calibration as tables: L2 hits, walk curves, faults, then the sources.
pub fn render(c: &Calibration, verbose: bool) -> String {
    let mut out = String::new();
    out += &format!("machine    {}\n", c.machine);
    if let Some(t) = &c.tlb {
        out += &format!(
            "TLB        L1 {}/{}/{}, L2 {}/{}/{} entries (4 KB/2 MB/1 GB; {})\n",
            t.l1[0], t.l1[1], t.l1[2], t.l2[0], t.l2[1], t.l2[2], t.source
        );
    }
    out += &format!(
        "measured   {}{}{}{}\n\n",
        c.created,
        if c.quick { " (--quick)" } else { "" },
        if c.spread_s > 0.0 {
            format!(
                ", walks in rounds over {:.1} min or more (--spread)",
                c.spread_s / 60.0
            )
        } else {
            String::new()
        },
        if c.fresh_memory {
            ", 4 KB walks on fresh memory (a child process per repetition)"
        } else {
            ""
        }
    );
    let figure = |kind: &str, what: &str, x: Option<f64>| {
        c.figures
            .iter()
            .find(|f| f.kind == kind && f.what == what && f.pt_bytes == x && f.ns.is_some())
    };
    let rows: Vec<Vec<String>> = (0..3)
        .map(|i| {
            let f = figure("l2-hit", LEAF[i], None);
            vec![
                LEAF_TEXT[i].to_string(),
                hugetune_render::ns(c.l2_hit_ns[i]),
                f.and_then(|f| f.ns.as_ref())
                    .map_or("extrapolated".into(), range_text),
            ]
        })
        .collect();
    out += "L2 DTLB hit (extra time of an access that misses the L1 DTLB)\n";
    out += &table(&["page", "cost", "spread"], &rows);
    out += "\n\n";
    let mut rows = Vec::new();
    for (i, curve) in c.walk_curve.iter().enumerate() {
        for &(x, y) in curve {
            let f = figure("walk", LEAF[i], Some(x));
            rows.push(vec![
                LEAF_TEXT[i].to_string(),
                hugetune_render::bytes(x as u64),
                hugetune_render::ns(y),
                f.and_then(|f| f.ns.as_ref())
                    .map_or("extrapolated".into(), range_text),
            ]);
        }
    }
    out += "page walk (per walk, over the page-table working set: 8 bytes per page touched)\n";
    out += &table(&["page", "page table", "cost", "spread"], &rows);
    out += "\n\n";
    out +=
        "walk overlap (docs/model.md §4: between a dependent chase and independent random loads)\n";
    out += &match &c.overlap {
        Some(o) => table(
            &["figure", "value", "spread"],
            &[
                vec![
                    "chase: saving per walk on 2 MB pages".into(),
                    hugetune_render::ns(o.dependent_walk.median),
                    range_text(&o.dependent_walk),
                ],
                vec![
                    "independent loads: saving per walk".into(),
                    hugetune_render::ns(o.independent_walk.median),
                    range_text(&o.independent_walk),
                ],
                vec![
                    "walks hidden behind each other".into(),
                    format!("{:.1}", o.walk_concurrency),
                    "-".into(),
                ],
                vec![
                    "independent loads: time per walk".into(),
                    hugetune_render::ns(o.independent_ns_per_walk),
                    "-".into(),
                ],
                vec![
                    "the access a walk precedes".into(),
                    hugetune_render::ns(o.memory_ns),
                    "-".into(),
                ],
            ],
        ),
        None => "not measured: the defaults apply (see sources)".into(),
    };
    out += "\n\n";
    // Backing names padded to one width, so `4k` lines up with `thp-2m`.
    let faults: Vec<&calibrate::Figure> = c.figures.iter().filter(|f| f.kind == "fault").collect();
    let w = faults.iter().map(|f| f.what.len()).max().unwrap_or(0);
    let rows: Vec<Vec<String>> = faults
        .iter()
        .map(|f| match &f.ns {
            Some(s) => vec![
                format!("{:w$}", f.what),
                hugetune_render::ns(s.median),
                range_text(s),
                f.cold_ns.map_or("-".into(), hugetune_render::ns),
            ],
            None => vec![
                format!("{:w$}", f.what),
                "-".into(),
                "not measured".into(),
                "-".into(),
            ],
        })
        .collect();
    out +=
        "page fault (first touch and unmap of a fresh mapping, warm memory; cold = first pass)\n";
    out += &table(&["backing", "cost", "spread", "cold"], &rows);
    out += "\n\nsources\n";
    for s in &c.sources {
        out += &format!("  {s}\n");
    }
    if verbose && !c.raw.is_empty() {
        let rows: Vec<Vec<String>> = c
            .raw
            .iter()
            .map(|m| {
                vec![
                    m.config.clone(),
                    format!("{:.2}", m.median),
                    format!("{:.2}", m.min),
                    format!("{:.2}", m.max),
                    m.reps.to_string(),
                    m.unit.clone(),
                ]
            })
            .collect();
        out += "\nmeasurements\n";
        out += &table(&["config", "median", "min", "max", "reps", "unit"], &rows);
        out += "\n";
    }
    out
}
