//! `hugetune fragsim`: the buddy allocator simulator (crate `fragsim`) with
//! a policy (or all of them), a workload, and the thesis's metrics as a
//! table, CSV, JSON, SVG plots and an HTML page.

use crate::Ctx;
use anyhow::{bail, Context, Result};
use fragsim::workload::{run_highalloc, run_kbuild, HighallocParams, KbuildParams, RunOpts};
use fragsim::{replay, AllocMode, PolicyKind, SimConfig, Summary, ZoneSpec};
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use hugetune_render::{count, html, table};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// kbuild | highalloc | replay
    #[arg(default_value = "kbuild")]
    workload: String,
    /// The recording to replay (`hugetune frag --record FILE`; .zst allowed)
    file: Option<PathBuf>,
    /// linux-4.5, linux-6.15, linux-6.15-defrag, aaf, opbs, ipbs, illuminator, or all
    #[arg(long, default_value = "all")]
    policy: String,
    /// Simulated memory (one Normal zone), e.g. 512M, 4G; for replay it
    /// overrides the recorded zones
    #[arg(long)]
    mem: Option<String>,
    /// Split --mem into x86-64 zones (DMA32 up to 3 GiB, Normal above) instead
    /// of one Normal zone; Linux 6.15 then spreads across zones before it
    /// fragments (ALLOC_NOFRAGMENT)
    #[arg(long)]
    x86_zones: bool,
    /// Seed of the workload's random choices (the same seed, the same run)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Build events (allocations + frees) before the workload ends or, for
    /// highalloc, before the first pass
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Concurrent compiler processes of the build
    #[arg(long, default_value_t = 8)]
    jobs: u32,
    /// Source tree size as a share of memory (default 1 for kbuild, 2 for
    /// highalloc, whose parallel trees exceed memory)
    #[arg(long)]
    tree: Option<f64>,
    /// kbuild: successive builds, `make clean` in between
    #[arg(long, default_value_t = 2)]
    builds: u32,
    /// Anonymous memory as THP (order-9) attempts
    #[arg(long)]
    thp: bool,
    /// highalloc: share of memory requested as 2 MB blocks per pass (%)
    #[arg(long, default_value_t = 95.0)]
    percent: f64,
    /// highalloc: build events between attempts of the pass under load
    #[arg(long, default_value_t = 500)]
    gap: u64,
    /// highalloc: how hard each 2 MB attempt tries: normal (GFP_HIGHUSER_MOVABLE),
    /// hugetlb (sync compaction), thp (async compaction only), nowait
    #[arg(long, default_value = "normal")]
    hp_mode: String,
    /// Points in the time series
    #[arg(long, default_value_t = 200)]
    samples: u64,
    /// Skip the full compaction at the end
    #[arg(long)]
    no_final_compaction: bool,
    /// Check every invariant after every event (slow)
    #[arg(long)]
    check: bool,
    /// Time series as CSV
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Print the summaries and time series as one JSON document instead of the table
    #[arg(long)]
    json: bool,
    /// HTML page with the table and plots
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write the plots as SVG files into this directory
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
}

/// "4G", "512M", "65536K" or a plain number of bytes → 4 KB pages.
fn parse_mem(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        Some('T' | 't') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("--mem {s:?}: not a size like 512M or 4G"))?;
    let pages = (v * mul as f64 / 4096.0) as u64;
    if !(2048..=(1u64 << 28)).contains(&pages) {
        bail!("--mem {s:?}: between 8M and 1T, please");
    }
    Ok(pages)
}

fn policies(s: &str) -> Result<Vec<PolicyKind>> {
    if s == "all" {
        return Ok(PolicyKind::ALL.to_vec());
    }
    s.split(',')
        .map(|p| {
            PolicyKind::parse(p.trim()).with_context(|| {
                let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown policy {p:?}; one of {} or all", names.join(", "))
            })
        })
        .collect()
}

pub fn run(_ctx: &Ctx, a: Args) -> Result<i32> {
    let kinds = policies(&a.policy)?;
    let hp_mode = match a.hp_mode.as_str() {
        "normal" => AllocMode::Normal,
        "hugetlb" => AllocMode::Hugetlb,
        "thp" => AllocMode::Thp,
        "nowait" => AllocMode::NoWait,
        m => bail!("--hp-mode {m:?}: one of normal, hugetlb, thp, nowait"),
    };
    if a.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    if !(0.0..=100.0).contains(&a.percent) {
        bail!("--percent must be within 0..100");
    }
    let recording = match (a.workload.as_str(), &a.file) {
        ("replay", Some(f)) => Some(replay::read_file(f).map_err(|e| anyhow::anyhow!("{e}"))?),
        ("replay", None) => bail!("replay needs the recording: hugetune fragsim replay FILE"),
        ("kbuild" | "highalloc", None) => None,
        ("kbuild" | "highalloc", Some(f)) => bail!("{}: only replay takes a file", f.display()),
        (w, _) => bail!("unknown workload {w:?}: kbuild, highalloc or replay FILE"),
    };
    let zones = match (&a.mem, &recording) {
        (Some(m), _) if a.x86_zones => ZoneSpec::x86(parse_mem(m)?),
        (Some(m), _) => vec![ZoneSpec::normal(parse_mem(m)?)],
        (None, Some(r)) if !r.zones.is_empty() => r.zones.clone(),
        (None, Some(_)) => bail!("the recording has no `# zone` lines: give --mem"),
        (None, None) if a.x86_zones => ZoneSpec::x86(parse_mem("1G")?),
        (None, None) => vec![ZoneSpec::normal(parse_mem("1G")?)],
    };
    let mut build = KbuildParams::new(a.events);
    build.jobs = a.jobs;
    build.thp = a.thp;
    build.builds = a.builds.max(1);
    if let Some(t) = a.tree {
        if !(t > 0.0 && t <= 16.0) {
            bail!("--tree must be within (0, 16]");
        }
        build.tree = t;
    }
    let build = build.fit(zones.iter().map(|z| z.managed).sum());
    let mut results = Vec::new();
    for kind in kinds {
        let mut sim = SimConfig::new(kind, a.seed);
        sim.check = a.check;
        let opts = RunOpts {
            sim,
            zones: zones.clone(),
            samples: a.samples,
            final_compaction: !a.no_final_compaction,
        };
        let t = std::time::Instant::now();
        let s = match (&recording, a.workload.as_str()) {
            (Some(r), _) => replay::run_replay(r, &opts),
            (None, "highalloc") => {
                let mut p = HighallocParams::new(a.events);
                p.build = KbuildParams {
                    tree: a.tree.unwrap_or(p.build.tree),
                    builds: 1,
                    ..build.clone()
                };
                p.percent = a.percent;
                p.gap = a.gap;
                p.mode = hp_mode;
                run_highalloc(&p, &opts)
            }
            _ => run_kbuild(&build, &opts),
        };
        eprintln!(
            "{}: {} events in {:.1} s",
            kind.name(),
            count(s.events as f64),
            t.elapsed().as_secs_f64()
        );
        results.push(s);
    }
    if !a.json {
        println!("{}", summary_table(&results));
    }
    if let Some(r) = results.first() {
        if r.workload == "replay" {
            eprintln!(
                "replay: {} frees of pages allocated before the recording ignored, {} frees with another order than their allocation",
                r.ignored_frees, r.unmatched_frees
            );
        }
    }
    if let Some(p) = &a.csv {
        std::fs::write(p, Summary::csv(&results))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    let charts = charts(&results);
    if let Some(dir) = &a.svg {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, c) in &charts {
            let p = dir.join(format!("{name}.svg"));
            std::fs::write(&p, svg::render(c, 720, 400))
                .with_context(|| format!("writing {}", p.display()))?;
        }
    }
    if let Some(p) = &a.html {
        write_html(p, &a, &results, &charts)?;
    }
    Ok(0)
}

fn headers() -> Vec<&'static str> {
    vec![
        "policy",
        "tainted",
        "mixed",
        "UFSI",
        "UFSI compacted",
        "free 2MB",
        "2MB compacted",
        "fallbacks",
        "fragmenting",
        "scanned",
        "migrated",
        "final compaction",
        "pass success",
        "THP success",
        "failed allocs",
    ]
}

fn rows(results: &[Summary]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            let c = r.after_compaction.as_ref();
            vec![
                r.policy.clone(),
                r.end.tainted.to_string(),
                r.end.mixed.to_string(),
                format!("{:.3}", r.end.ufsi9 as f64 / 1000.0),
                c.map_or("-".into(), |c| format!("{:.3}", c.ufsi9 as f64 / 1000.0)),
                r.end.free_hp.to_string(),
                c.map_or("-".into(), |c| c.free_hp.to_string()),
                count(r.stats.fallbacks as f64),
                count(r.stats.fragmenting_fallbacks as f64),
                count((r.stats.migrate_scanned + r.stats.free_scanned) as f64),
                count((r.stats.migrated + r.stats.aaf_migrated) as f64),
                r.final_compaction.map_or("-".into(), |(s, m)| {
                    format!("{} / {}", count(s as f64), count(m as f64))
                }),
                if r.passes.is_empty() {
                    "-".into()
                } else {
                    r.passes
                        .iter()
                        .map(|p| format!("{:.0}%", p.rate() * 100.0))
                        .collect::<Vec<_>>()
                        .join(" ")
                },
                if r.stats.thp_attempts == 0 {
                    "-".into()
                } else {
                    format!(
                        "{:.1}%",
                        r.stats.thp_success as f64 * 100.0 / r.stats.thp_attempts as f64
                    )
                },
                r.stats.alloc_fail.to_string(),
            ]
        })
        .collect()
}

fn summary_table(results: &[Summary]) -> String {
    table(&headers(), &rows(results))
}

fn line_chart(
    results: &[Summary],
    title: &str,
    y: &str,
    f: impl Fn(&fragsim::Sample) -> f64,
) -> Chart {
    Chart {
        title: title.into(),
        x_label: "events (millions)".into(),
        y_label: y.into(),
        kind: ChartKind::Line,
        series: results
            .iter()
            .map(|r| {
                Series::new(
                    r.policy.clone(),
                    r.series
                        .iter()
                        .map(|s| (s.events as f64 / 1e6, f(s)))
                        .collect(),
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// The plots: tainted blocks, UFSI, fallbacks and compaction effort over
/// time, and (highalloc) the success rate per pass.
fn charts(results: &[Summary]) -> Vec<(String, Chart)> {
    let wl = results
        .first()
        .map_or("", |r| r.workload.as_str())
        .to_string();
    let mut v = vec![
        (
            format!("{wl}-tainted"),
            line_chart(
                results,
                "Tainted pageblocks (kernel and movable pages)",
                "pageblocks",
                |s| s.tainted as f64,
            ),
        ),
        (
            format!("{wl}-ufsi"),
            line_chart(results, "Unusable free space index, order 9", "UFSI", |s| {
                s.ufsi9 as f64 / 1000.0
            }),
        ),
        (
            format!("{wl}-fallbacks"),
            line_chart(
                results,
                "Fragmenting fallbacks (fallback order < 9)",
                "events",
                |s| s.fragmenting_fallbacks as f64,
            ),
        ),
        (
            format!("{wl}-compaction"),
            line_chart(results, "Compaction: pages migrated", "pages", |s| {
                s.migrated as f64
            }),
        ),
    ];
    if results.iter().any(|r| r.stats.thp_attempts > 0) {
        // THP success between consecutive samples: decay shows as a falling line.
        v.push((
            format!("{wl}-thp"),
            Chart {
                title: "THP success between samples".into(),
                x_label: "events (millions)".into(),
                y_label: "% of THP attempts".into(),
                kind: ChartKind::Line,
                series: results
                    .iter()
                    .map(|r| {
                        let pts = r
                            .series
                            .windows(2)
                            .filter(|w| w[1].thp_attempts > w[0].thp_attempts)
                            .map(|w| {
                                let a = (w[1].thp_attempts - w[0].thp_attempts) as f64;
                                let s = (w[1].thp_success - w[0].thp_success) as f64;
                                (w[1].events as f64 / 1e6, 100.0 * s / a)
                            })
                            .collect();
                        Series::new(r.policy.clone(), pts)
                    })
                    .collect(),
                ..Default::default()
            },
        ));
    }
    if results.iter().any(|r| !r.passes.is_empty()) {
        let names: Vec<String> = results[0].passes.iter().map(|p| p.name.clone()).collect();
        v.push((
            format!("{wl}-success"),
            Chart {
                title: "Huge page success rate per pass".into(),
                x_label: "pass".into(),
                y_label: "% of attempts".into(),
                kind: ChartKind::Bar,
                series: results
                    .iter()
                    .map(|r| {
                        Series::new(
                            r.policy.clone(),
                            r.passes
                                .iter()
                                .enumerate()
                                .map(|(i, p)| (i as f64, p.rate() * 100.0))
                                .collect(),
                        )
                    })
                    .collect(),
                x_categories: names,
                ..Default::default()
            },
        ));
    }
    v
}

fn write_html(
    path: &Path,
    a: &Args,
    results: &[Summary],
    charts: &[(String, Chart)],
) -> Result<()> {
    let mut page = html::Page::new("hugetune fragsim");
    page.push_paragraph(&format!(
        "Workload {}, seed {}, {} pages ({}), policies: {}.",
        a.workload,
        a.seed,
        results.first().map_or(0, |r| r.pages),
        hugetune_render::bytes(results.first().map_or(0, |r| r.pages) * 4096),
        results
            .iter()
            .map(|r| r.policy.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    page.push_table(&headers(), &rows(results));
    for (_, c) in charts {
        page.push_svg(svg::render(c, 720, 400));
    }
    std::fs::write(path, page.render()).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_policies() {
        assert_eq!(parse_mem("4G").unwrap(), 1 << 20);
        assert_eq!(parse_mem("512M").unwrap(), 131072);
        assert!(parse_mem("4X").is_err());
        assert!(parse_mem("1M").is_err());
        assert_eq!(policies("all").unwrap().len(), PolicyKind::ALL.len());
        assert_eq!(
            policies("opbs,illuminator").unwrap(),
            vec![PolicyKind::Opbs, PolicyKind::Illuminator]
        );
        assert!(policies("nope")
            .unwrap_err()
            .to_string()
            .contains("unknown policy"));
    }
}
