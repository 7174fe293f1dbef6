use crate::stages::{self, RefOptions, RefSource};
use crate::Ctx;
use anyhow::Result;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Bundle to write
    #[arg(short, long, default_value = "hugetune.htb")]
    output: PathBuf,
    /// Reference source: qemu (user-mode emulation with hugetune's plugin), valgrind
    /// (lackey), or auto (qemu if qemu-x86_64 is installed, else valgrind)
    #[arg(long, value_enum, default_value = "auto")]
    refs: RefSource,
    /// Sample pages at this rate (SHARDS fixed-rate, 0 < R <= 1; qemu only).
    /// Sampled bundles cannot be analyzed yet
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Sample at most this many pages (SHARDS fixed-size; qemu only).
    /// Sampled bundles cannot be analyzed yet
    #[arg(long, value_name = "S", conflicts_with = "rate")]
    max_pages: Option<u64>,
    /// Seed of the page hash of sampling
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The command to profile
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let refs = RefOptions {
        source: a.refs,
        rate: a.rate,
        max_pages: a.max_pages,
        seed: a.seed,
    };
    let meta = stages::record(
        &art,
        &a.command,
        &a.output,
        &refs,
        ctx.tlb.as_deref(),
        ctx.verbose,
        None,
    )?;
    let next = if meta.ref_sampling == "complete" {
        format!("; next: hugetune analyze {}", a.output.display())
    } else {
        String::new()
    };
    println!(
        "wrote {} ({:.2} M references from {}, {}, native run {:.3} s){next}",
        a.output.display(),
        meta.refs as f64 / 1e6,
        meta.ref_source,
        meta.ref_sampling,
        meta.native.wall_s,
    );
    Ok(0)
}
