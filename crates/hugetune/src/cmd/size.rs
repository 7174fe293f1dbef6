//! `hugetune size`: how many huge pages a program should get. The predicted
//! PMB-vs-pages curve of its stored profile (for the input given), its knee, the
//! commands that reserve that many pages now and at boot; with `--sweep`, the
//! real curve measured by running the program with growing pool budgets.

use crate::{stages, Ctx};
use anyhow::{bail, Context, Result};
use hugetune_capture::rounds::{self, Ran, Rounds};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_format::plan::PlanOptions;
use hugetune_host::kernel_state::{
    hold_page_reporting, lock_kernel_state, set_hugetlb_pool_holding,
};
use hugetune_host::machine;
use hugetune_model::sizing::{self, CurvePoint, Pool};
use hugetune_model::stats;
use hugetune_render::table;
use serde::Serialize;
use std::ffi::OsString;

#[derive(clap::Args)]
pub struct Args {
    /// Pool to size: 2M or 1G
    #[arg(long = "page-size", alias = "size", default_value = "2M", value_parser = parse_pool)]
    size: Pool,
    /// Budgets on the predicted curve, evenly spaced up to the pages needed
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1000))]
    steps: u64,
    /// As root: also measure the curve, running the program with the pool holding each budget
    #[arg(long)]
    sweep: bool,
    /// Budgets measured by --sweep (evenly spaced, and the knee)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(2..=50))]
    sweep_points: u64,
    /// Runs per measured budget (interleaved rounds; medians)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// Print the curve, the knee and the commands as one JSON object
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML page: both curves in one plot, the commands
    #[arg(long, value_name = "FILE")]
    html: Option<std::path::PathBuf>,
    /// The program and its (reference) arguments
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

fn parse_pool(s: &str) -> Result<Pool, String> {
    match s.to_ascii_uppercase().as_str() {
        "2M" | "2MB" | "2048K" | "2048KB" => Ok(Pool::P2m),
        "1G" | "1GB" | "1048576K" | "1048576KB" => Ok(Pool::P1g),
        _ => Err(format!("'{s}': expected 2M or 1G")),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub pages: u64,
    /// Pages the kernel really gave for this budget.
    pub got: u64,
    pub median_s: f64,
    pub runs_s: Vec<f64>,
    pub pmb: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizeReport {
    pub profile_id: i64,
    pub pool: Pool,
    pub pages_needed: u64,
    pub predicted: Vec<CurvePoint>,
    pub knee_pages: Option<u64>,
    pub pages_for_90pct: Option<u64>,
    pub recommended: u64,
    pub commands_now: Vec<String>,
    pub commands_boot: Vec<String>,
    pub baseline_median_s: Option<f64>,
    pub measured: Vec<Measured>,
    /// `--size 1G` as root: the fragmentation doctor's estimate of the 1 GB
    /// pages the kernel can assemble now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gigantic: Option<stages::GiganticEstimate>,
}

/// The commands that reserve `pages` more pages now and at boot (`service
/// install` prints the boot ones too).
pub(crate) fn commands(pool: Pool, pages: u64, in_use: u64) -> (Vec<String>, Vec<String>) {
    let (kb, name) = (pool.page_kb(), if pool == Pool::P2m { "2M" } else { "1G" });
    let total = in_use + pages;
    let now = vec![
        format!("echo {total} > /sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages   # {pages} for this program + {in_use} in use"),
        format!("hugeadm --pool-pages-min {}:+{pages}", if pool == Pool::P2m { "2MB" } else { "1GB" }),
    ];
    let mut boot = vec![format!(
        "kernel command line: hugepagesz={name} hugepages={total}"
    )];
    if pool == Pool::P2m {
        boot.push(format!(
            "or: echo 'vm.nr_hugepages = {total}' > /etc/sysctl.d/90-hugetune.conf"
        ));
    } else {
        boot.push("1 GB pages are best reserved at boot: memory fragments after it".into());
    }
    (now, boot)
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let db = ctx.db()?;
    let Some(mut st) = stages::stored_predictions(&db, &a.command)? else {
        bail!(
            "no profile of {} in {}: run `hugetune optimize -- {}` (or record + analyze) first",
            stages::display_cmd(&a.command[..1]),
            ctx.db_path.display(),
            stages::display_cmd(&a.command)
        );
    };
    stages::note("sizing run in record mode (the pages this input needs; not timed)");
    let sizing = stages::sizing_run(&art, &a.command, None)?;
    // The stored directives keep no allocation statistics: heap-small's pool
    // pages come from the reference run's peak bytes alone.
    st.predictions = stages::with_reference_pages(
        &st.predictions,
        sizing.heap_large_pages,
        sizing.heap_small_pages(None),
    );
    let avail = stages::availability_now();
    let policy = st.policy(a.min_gain);
    let curve = sizing::pmb_curve(
        &sizing::Planned {
            preds: &st.predictions,
            sig: &st.significance,
            traits: &st.program,
            native_seconds: st.native_s,
            policy: &policy,
        },
        &avail,
        a.size,
        a.steps,
    );
    let need = sizing::pages_needed(&st.predictions, a.size);
    let knee = sizing::knee(&curve).map(|p| p.pages);
    let recommended = knee.unwrap_or(0);
    let in_use = machine::pool(a.size.page_kb()).map_or(0, |p| p.nr.saturating_sub(p.free));
    let (now, boot) = commands(a.size, recommended, in_use);
    let mut report = SizeReport {
        profile_id: st.profile_id,
        pool: a.size,
        pages_needed: need,
        knee_pages: knee,
        pages_for_90pct: sizing::pages_for(&curve, 90.0),
        recommended,
        commands_now: now,
        commands_boot: boot,
        baseline_median_s: None,
        measured: vec![],
        predicted: curve,
        gigantic: None,
    };
    // 1 GB pages are assembled from whole free or movable gigabytes: how many
    // the kernel can give now decides between reserving now and at boot.
    // SAFETY: geteuid has no preconditions.
    if a.size == Pool::P1g && unsafe { libc::geteuid() } == 0 {
        match stages::gigantic_estimate() {
            Ok(e) => {
                stages::note(e.text());
                report.gigantic = Some(e);
            }
            Err(e) => stages::note(format!("the fragmentation doctor failed: {e:#}")),
        }
    }
    if a.sweep {
        sweep(&art, &a, &st, &mut report)?;
    }
    if let Some(f) = &a.html {
        std::fs::write(f, html(&report, &stages::display_cmd(&a.command)))
            .with_context(|| format!("writing {}", f.display()))?;
        stages::note(format!("wrote {}", f.display()));
    }
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    print!("{}", render(&report));
    Ok(0)
}

/// The sizing page: a verdict card (the pages to reserve and the commands),
/// the predicted curve and, after `--sweep`, the measured one in one plot (seed
/// 001 fig. 3, seed 004 experiment 1) on a y axis from 0 to 100 % with the
/// recommended pages marked, then the terminal table.
fn html(r: &SizeReport, cmd: &str) -> String {
    use hugetune_render::html::{Card, Page, Tone};
    use hugetune_render::svg;
    let unit = if r.pool == Pool::P2m { "2 MB" } else { "1 GB" };
    let mut series = vec![svg::Series::new(
        "predicted",
        r.predicted
            .iter()
            .map(|p| (p.pages as f64, p.pmb))
            .collect(),
    )];
    if !r.measured.is_empty() {
        series.push(svg::Series::new(
            "measured",
            r.measured.iter().map(|m| (m.pages as f64, m.pmb)).collect(),
        ));
    }
    let chart = svg::Chart {
        title: format!("PMB against {unit} hugetlb pages"),
        x_label: format!("{unit} pages the program may take"),
        y_label: "% of maximal benefit".into(),
        kind: svg::ChartKind::Line,
        series,
        // A percentage: from 0, so that a curve from 90 to 100 % looks flat.
        y_range: Some((0.0, 100.0)),
        marks: r
            .knee_pages
            .map(|k| svg::Mark::Rule {
                x: k as f64,
                label: format!("recommended: {k}"),
                class: "chosen".into(),
            })
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let card = match r.knee_pages {
        Some(k) => Card {
            headline: format!("Reserve {k} {unit} pages for this program"),
            tone: Tone::Good,
            facts: vec![
                ("Why".into(), "the knee of the predicted curve".into()),
                (
                    "90 % of the benefit".into(),
                    r.pages_for_90pct
                        .map_or("-".into(), |p| format!("from {p} pages")),
                ),
                ("A full mapping".into(), format!("{} pages", r.pages_needed)),
                ("Profile".into(), format!("#{}", r.profile_id)),
            ],
            commands: r
                .commands_now
                .iter()
                .map(|c| ("Reserve now:".to_string(), c.clone()))
                .chain(
                    r.commands_boot
                        .iter()
                        .map(|c| ("At boot:".to_string(), c.clone())),
                )
                .collect(),
        },
        None => Card {
            headline: format!("Reserve no {unit} pages: no benefit predicted from them"),
            tone: Tone::Bad,
            facts: vec![("Profile".into(), format!("#{}", r.profile_id))],
            commands: vec![],
        },
    };
    let mut page = Page::new(&format!("hugetune size: {cmd}"));
    page.push_card(card);
    page.push_heading("Benefit against pages");
    page.push_paragraph(&format!(
        "The predicted percentage of the maximal benefit for each budget of {unit} pages{}; \
         the dashed rule is the recommendation.",
        if r.measured.is_empty() {
            ""
        } else {
            ", and what --sweep measured"
        }
    ));
    page.push_svg(svg::render(&chart, 720, 400));
    page.push_heading("Details");
    page.push_preformatted(&render(r));
    page.render()
}

/// Measures the curve: at each measured budget the pool is set so that exactly
/// that many pages are free, and the program runs with the plan the predicted
/// curve has there (the runtime library falls back to 4 KB pages when a pool
/// runs dry). Rounds interleave the budgets and an unchanged baseline, after an
/// untimed warm-up round; the pool is restored after each run and free page
/// reporting after the sweep, also on error and Ctrl-C.
fn sweep(
    art: &crate::artifacts::Artifacts,
    a: &Args,
    st: &stages::Stored,
    r: &mut SizeReport,
) -> Result<()> {
    let n = r.predicted.len();
    let mut idx: Vec<usize> = (0..a.sweep_points)
        .map(|i| (i as usize * (n - 1)) / (a.sweep_points as usize - 1))
        .collect();
    if let Some(k) = r.knee_pages {
        idx.extend(r.predicted.iter().position(|p| p.pages == k));
    }
    idx.sort_unstable();
    idx.dedup();
    let lock = lock_kernel_state()?;
    let _reporting = hold_page_reporting(&lock)?;
    let kb = a.size.page_kb();
    let pool = machine::pool(kb)
        .ok_or_else(|| anyhow::anyhow!("this kernel has no {kb} kB hugetlb pool"))?;
    let held = pool.taken();
    let mut specs = Vec::new();
    for &i in &idx {
        let p = &r.predicted[i];
        specs.push(stages::applied_spec(
            art,
            &a.command,
            &p.assignments,
            st.threshold,
            &PlanOptions::for_program(&st.program).with_sites(&p.sites),
            Output::Null,
        )?);
    }
    let mut baseline = RunSpec::new(a.command.clone());
    baseline.stdout = Output::Null;
    stages::note(format!(
        "measuring {} budgets x {} runs (the pool is restored afterwards)",
        idx.len(),
        a.runs
    ));
    let mut times: Vec<Vec<f64>> = vec![vec![]; idx.len()];
    let mut got = vec![0u64; idx.len()];
    let mut base_t = Vec::new();
    // Configuration 0 is the baseline, then one per budget, in that order every
    // round; round 0 is untimed: memory the host took back is slow once (free
    // page reporting is also held off meanwhile); before each timed run the
    // baseline's footprint is touched and freed (capture::rounds).
    let rounds = Rounds {
        rotate: false,
        ..Rounds::fixed(a.runs as usize)
    };
    rounds::run(
        1 + idx.len(),
        &rounds,
        |step| {
            let round = step.round;
            if step.config == 0 {
                let s = runner::run(&baseline)?;
                if step.timed() {
                    stages::note(format!("round {round}: baseline {:.3} s", s.wall_s));
                    base_t.push(s.wall_s);
                }
                return Ok(Ran::Faults(s.minor_faults));
            }
            let j = step.config - 1;
            let i = idx[j];
            let b = r.predicted[i].pages;
            let change = set_hugetlb_pool_holding(&lock, kb, held + b)?;
            got[j] = change.now.saturating_sub(held);
            if got[j] < b && a.size == Pool::P1g && step.round == 0 {
                stages::note(format!(
                    "the kernel gave {} of the {b} 1 GB pages asked (fragmentation): the runtime \
                     library falls back for the rest, 1 GB -> 2 MB -> 4 KB pages",
                    got[j]
                ));
            }
            let s = runner::run(&specs[j].spec)?;
            stages::take_summaries(specs[j].dir.path());
            drop(change);
            if s.exit_code != 0 {
                bail!(
                    "the program exited with status {} with {b} pages",
                    s.exit_code
                );
            }
            if step.timed() {
                stages::note(format!(
                    "round {round}: {b} pages ({} given), {}: {:.3} s, {} huge at peak",
                    got[j],
                    r.predicted[i].label,
                    s.wall_s,
                    hugetune_render::bytes(s.peak.huge())
                ));
                times[j].push(s.wall_s);
            }
            Ok(Ran::Faults(s.minor_faults))
        },
        |_| true,
    )?;
    let t0 = stats::median(&base_t);
    let medians: Vec<f64> = times.iter().map(|t| stats::median(t)).collect();
    let best = medians.iter().copied().fold(f64::INFINITY, f64::min);
    r.baseline_median_s = Some(t0);
    r.measured = idx
        .iter()
        .enumerate()
        .map(|(j, &i)| Measured {
            pages: r.predicted[i].pages,
            got: got[j],
            median_s: medians[j],
            runs_s: times[j].clone(),
            pmb: hugetune_model::rank::pmb(t0 - medians[j], t0 - best),
        })
        .collect();
    Ok(())
}

fn render(r: &SizeReport) -> String {
    let unit = if r.pool == Pool::P2m { "2 MB" } else { "1 GB" };
    let mut s = format!(
        "profile #{}: a full mapping needs {} {unit} pages\n\n",
        r.profile_id, r.pages_needed
    );
    let measured = |pages: u64| r.measured.iter().find(|m| m.pages == pages);
    let mut pages: Vec<u64> = r.predicted.iter().map(|p| p.pages).collect();
    pages.extend(r.measured.iter().map(|m| m.pages));
    pages.sort_unstable();
    pages.dedup();
    let rows: Vec<Vec<String>> = pages
        .iter()
        .map(|&n| {
            let p = r.predicted.iter().find(|p| p.pages == n);
            vec![
                n.to_string(),
                p.map_or("".into(), |p| format!("{:.0}%", p.pmb)),
                p.map_or("".into(), |p| {
                    format!("{}{}", p.label, if p.partial { " (pro rata)" } else { "" })
                }),
                measured(n).map_or("".into(), |m| format!("{:.0}%", m.pmb)),
                measured(n).map_or("".into(), |m| format!("{:.3} s", m.median_s)),
            ]
        })
        .collect();
    s += &table(
        &[
            "pages",
            "predicted PMB",
            "plan",
            "measured PMB",
            "median time",
        ],
        &rows,
    );
    if let Some(t0) = r.baseline_median_s {
        s += &format!("\nbaseline (unchanged program): {t0:.3} s\n");
    }
    match r.knee_pages {
        Some(k) => {
            s += &format!(
                "\nrecommended: {k} {unit} pages (the knee of the predicted curve; 90 % of the benefit from {} pages)\n",
                r.pages_for_90pct.map_or("-".into(), |p| p.to_string())
            );
            s += "reserve now:\n";
            for c in &r.commands_now {
                s += &format!("  {c}\n");
            }
            s += "at boot:\n";
            for c in &r.commands_boot {
                s += &format!("  {c}\n");
            }
            if let Some(g) = &r.gigantic {
                s += &format!("{}\n", g.text());
                if g.obtainable < k {
                    s += &format!(
                        "the kernel can assemble about {} of the {k} 1 GB pages now (a lower \
                         bound: free pages on per-CPU lists or being reported to a hypervisor look \
                         allocated to the scan; `hugetune frag --try {k} --page-size 1G` asks the \
                         kernel and gives them back): reserve them at boot, or the runtime library \
                         falls back to 2 MB and 4 KB pages for the rest\n",
                        g.obtainable
                    );
                }
            }
        }
        None => s += "\nno benefit predicted from hugetlb pages: reserve none\n",
    }
    s
}

#[cfg(test)]
mod html_tests {
    use super::*;

    fn report(knee: Option<u64>) -> SizeReport {
        SizeReport {
            profile_id: 4,
            pool: Pool::P2m,
            pages_needed: 600,
            // Every point at 90 % or more: the defect's case.
            predicted: [(0, 90.0), (256, 96.0), (512, 100.0)]
                .into_iter()
                .map(|(pages, pmb)| CurvePoint {
                    pages,
                    saving_ns: pmb * 1e6,
                    pmb,
                    label: "heap-large:hugetlb".into(),
                    assignments: vec![],
                    sites: vec![],
                    partial: false,
                })
                .collect(),
            knee_pages: knee,
            pages_for_90pct: Some(256),
            recommended: knee.unwrap_or(0),
            commands_now: vec![
                "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages".into(),
            ],
            commands_boot: vec!["kernel command line: hugepagesz=2M hugepages=512".into()],
            baseline_median_s: Some(2.0),
            measured: vec![
                Measured {
                    pages: 0,
                    got: 0,
                    median_s: 2.0,
                    runs_s: vec![2.0],
                    pmb: 90.0,
                },
                Measured {
                    pages: 256,
                    got: 256,
                    median_s: 1.9,
                    runs_s: vec![1.9],
                    pmb: 96.0,
                },
                Measured {
                    pages: 512,
                    got: 512,
                    median_s: 1.8,
                    runs_s: vec![1.8],
                    pmb: 100.0,
                },
            ],
            gigantic: None,
        }
    }

    #[test]
    fn the_page_opens_with_the_recommendation_and_its_axis_starts_at_zero() {
        let h = html(&report(Some(512)), "app");
        let first = h.split("</h1>\n").nth(1).unwrap();
        assert!(
            first.starts_with("<section class=\"verdict good\">"),
            "{first}"
        );
        assert!(first.contains("Reserve 512 2 MB pages"));
        assert!(first.contains("hugepagesz=2M hugepages=512"));
        // Measured from 90 to 100 %: the axis still starts at 0, and the
        // recommendation is a labelled rule.
        let svg = &h[h.find("<svg").unwrap()..];
        // (y tick labels are right-aligned; the x axis has a 0 too)
        assert!(svg.contains(r#"text-anchor="end">0</text>"#), "{svg}");
        assert!(svg.contains(r#"text-anchor="end">100</text>"#), "{svg}");
        assert!(
            svg.contains(r#"<line class="chosen""#) && svg.contains(">recommended: 512</tspan>")
        );
        assert!(h.find("<pre>").unwrap() > h.find("<svg").unwrap());
        let none = html(&report(None), "app");
        assert!(none.contains("Reserve no 2 MB pages"));
    }
}
