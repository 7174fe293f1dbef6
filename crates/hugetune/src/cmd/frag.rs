//! `hugetune frag`: live report of huge page availability (the work is in the
//! `frag` crate).

use crate::Ctx;
use anyhow::{bail, Context, Result};
use frag::{render, snapshot, trace, trial};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Scan /proc/kpageflags (root; on by default for root): tainted pageblocks,
    /// 2 MB pages after compaction, clean 1 GB ranges, and the scan's time
    #[arg(long, conflicts_with = "no_scan")]
    scan: bool,
    /// Skip the kpageflags scan
    #[arg(long)]
    no_scan: bool,
    /// Print JSON (field names: docs/frag.md); with --watch one object per line
    #[arg(long)]
    json: bool,
    /// Repeat every SECS seconds, showing counter changes
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// Write a self-contained HTML page with plots to FILE
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Raise the hugetlb pool by N pages, report what the kernel gave, restore it (root)
    #[arg(long = "try", value_name = "N")]
    try_n: Option<u64>,
    /// Huge page size for --try: 2M or 1G
    #[arg(
        long = "page-size",
        alias = "size",
        default_value = "2M",
        requires = "try_n"
    )]
    size: String,
    /// Count kmem:mm_page_alloc_extfrag (fallback) events for DURATION (e.g. 10s; root)
    #[arg(long = "extfrag-for", alias = "events", value_name = "DURATION")]
    events: Option<String>,
    /// Record kmem:mm_page_alloc/mm_page_free into FILE (.zst: compressed; root)
    #[arg(long, value_name = "FILE", requires = "duration")]
    record: Option<PathBuf>,
    /// How long to record (with --record)
    #[arg(long, value_name = "DURATION", requires = "record")]
    duration: Option<String>,
}

pub fn run(_ctx: &Ctx, a: Args) -> Result<i32> {
    if let (Some(path), Some(d)) = (&a.record, &a.duration) {
        let d = trace::parse_duration(d)?;
        let r = trace::record(path, d)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            print!("{}", render::record_text(&r));
        }
        return Ok(0);
    }
    if let Some(w) = a.watch {
        if !(w.is_finite() && w > 0.0) {
            bail!("--watch needs a positive number of seconds");
        }
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if a.scan && !root {
        bail!("--scan reads /proc/kpageflags, which needs root");
    }
    // Without root, `take` notes the scan as skipped.
    let want_scan = !a.no_scan;
    let paths = snapshot::Paths::default();
    let snap = snapshot::take(&paths, want_scan)?;
    let trial = match a.try_n {
        Some(n) => Some(trial::try_pool(trial::parse_size(&a.size)?, n)?),
        None => None,
    };
    let ext = match &a.events {
        Some(d) => Some(trace::count_extfrag(trace::parse_duration(d)?)?),
        None => None,
    };
    if a.json {
        let v = serde_json::json!({
            "snapshot": snap,
            "try": trial,
            "extfrag_events": ext,
        });
        println!(
            "{}",
            if a.watch.is_some() {
                serde_json::to_string(&v)?
            } else {
                serde_json::to_string_pretty(&v)?
            }
        );
    } else {
        print!("{}", render::text(&snap, None));
        if let Some(t) = &trial {
            print!("\n{}", render::trial_text(t));
        }
        if let Some(e) = &ext {
            print!("\n{}", render::extfrag_text(e, &snap.migratetypes));
        }
    }
    if let Some(p) = &a.html {
        let mut extra = Vec::new();
        if let Some(t) = &trial {
            extra.push(("--try".to_string(), render::trial_text(t)));
        }
        if let Some(e) = &ext {
            extra.push((
                "Fallback (extfrag) events".to_string(),
                render::extfrag_text(e, &snap.migratetypes),
            ));
        }
        std::fs::write(p, render::html(&snap, &extra))
            .with_context(|| format!("writing {}", p.display()))?;
        if !a.json {
            println!("\nwrote {}", p.display());
        }
    }
    if let Some(w) = a.watch {
        let mut prev = snap;
        loop {
            std::thread::sleep(Duration::from_secs_f64(w));
            let s = snapshot::take(&paths, want_scan)?;
            let delta = s.counters.delta(&prev.counters);
            if a.json {
                let v = serde_json::json!({ "snapshot": s, "counters_delta": delta });
                println!("{}", serde_json::to_string(&v)?);
            } else {
                println!("\n---- {w} s later ----");
                print!("{}", render::text(&s, Some(&delta)));
            }
            prev = s;
        }
    }
    Ok(0)
}
