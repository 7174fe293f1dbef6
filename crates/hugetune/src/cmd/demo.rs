//! `hugetune demo`: the main job. Optimizes the built-in dependent random walk over
//! 1 GiB, profiled on that walk itself (sampled within the profile budget, so the
//! prediction is for the run that is measured), reserving the pages it needs.

use super::optimize::{self, Options};
use crate::{stages, Ctx};
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Size of the walk that is measured
    #[arg(long = "walk-size", alias = "size", default_value = "1G")]
    size: String,
    /// Profile a walk of this size instead (a training input: the prediction is
    /// then an extrapolation); default: the measured walk itself, sampled
    #[arg(long)]
    train_size: Option<String>,
    /// Fewest baseline and optimized runs each (5 + 5 lets the exact test tolerate
    /// one outlier); up to 10 while the speedup's confidence interval is wider than 5 %
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Do not grow the hugetlb pool (use only what is free, else THP)
    #[arg(long)]
    no_reserve: bool,
    /// Print one JSON object
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let work = art.work.clone().into_os_string();
    let cmd = |size: &str| vec![work.clone(), "chase".into(), "--size".into(), size.into()];
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !a.no_reserve && !root {
        stages::note(
            "not root: cannot reserve hugetlb pages; the plan will use what is free, or THP",
        );
    }
    let opts = Options {
        command: cmd(&a.size),
        profile_command: cmd(a.train_size.as_deref().unwrap_or(&a.size)),
        runs: hugetune_capture::ab::RunCount {
            min: a.runs as usize,
            max: (a.runs as usize).max(10),
            ci_width: 0.05,
            compare_output: false,
        },
        reserve: !a.no_reserve && root,
        min_gain: stages::DEFAULT_MIN_GAIN,
        bundle: None,
        refs: stages::RefSource::Auto,
        rate: None,
        max_pages: None,
        exact: false,
        profile_budget: super::optimize::DEFAULT_PROFILE_BUDGET,
        driver: None,
        profile_driver: None,
        mthp: None,
    };
    let r = optimize::execute(ctx, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(0);
    }
    print!("{}", optimize::render(&r));
    println!(
        "\ndemo verdict: chase over {} ran {:.2}x {} with {} on huge pages ({})",
        a.size,
        r.speedup,
        if r.speedup >= 1.0 { "faster" } else { "slower" },
        hugetune_render::bytes(r.huge_bytes_backed),
        r.verdict
    );
    Ok(0)
}
