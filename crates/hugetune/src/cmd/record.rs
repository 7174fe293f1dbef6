use crate::{pipeline, Ctx};
use anyhow::Result;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Bundle to write
    #[arg(short, long, default_value = "hugetune.htb")]
    output: PathBuf,
    /// The command to profile
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let art = crate::artifacts::find()?;
    let meta = pipeline::record(&art, &a.command, &a.output, ctx.tlb.as_deref(), ctx.verbose)?;
    println!(
        "wrote {} ({:.2} M references, native run {:.3} s); next: hugetune analyze {}",
        a.output.display(),
        meta.refs as f64 / 1e6,
        meta.native.wall_s,
        a.output.display()
    );
    Ok(0)
}
