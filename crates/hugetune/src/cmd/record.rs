use crate::stages::{self, RefOptions, RefSource};
use crate::Ctx;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Bundle to write (a directory: PROGRAM.htb in it); checked before profiling
    #[arg(short, long, default_value = "hugetune.htb")]
    output: PathBuf,
    /// Reference source; auto: perf where the PMU samples data addresses (and no
    /// page sampling is asked), else qemu where qemu-x86_64 is installed, else
    /// valgrind
    #[arg(long, value_enum, default_value = "auto")]
    refs: RefSource,
    /// Sample 4 KB pages and 2 MB regions at this rate (SHARDS fixed-rate,
    /// 0 < R <= 1; qemu only); `analyze` scales the sample and gives error bars
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Sample at most this many 4 KB pages, 2 MB regions at the same rate
    /// (SHARDS fixed-size; qemu only)
    #[arg(long, value_name = "S", conflicts_with = "rate")]
    max_pages: Option<u64>,
    /// Keep about at most this many references: the page sample halves whenever
    /// the references it keeps pass N (fixed-size sampling with a budget; qemu
    /// only; with --max-pages, or 16384 pages)
    #[arg(long, value_name = "N", conflicts_with = "rate")]
    max_refs: Option<u64>,
    /// Seed of the page hash of sampling
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Monitor this running process (not started by hugetune, left running)
    /// with DAMON instead of profiling a command: --refs damon only
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with_all = ["command", "rate", "max_pages"])]
    pid: Option<u32>,
    /// How long to monitor the process of -p, in seconds (Ctrl-C or its exit
    /// end it earlier; the bundle is written either way)
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, requires = "pid")]
    duration: f64,
    /// The command to profile
    #[arg(last = true, required_unless_present = "pid")]
    command: Vec<OsString>,
}

/// Where the bundle goes: `output`, or PROGRAM.htb inside it when it is a
/// directory. Checked before the (long) profiling: a directory that does not
/// exist or cannot be written is an error now, not after the run.
pub fn bundle_path(output: &Path, command: &[OsString]) -> Result<PathBuf> {
    let path = if output.is_dir() {
        let name = command
            .first()
            .and_then(|c| Path::new(c).file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "hugetune".into());
        output.join(format!("{name}.htb"))
    } else {
        output.to_path_buf()
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!(
            "cannot write the bundle {}: the directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    // Probe with the same kind of file the bundle is written through.
    tempfile::Builder::new()
        .prefix(".bundle.")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write the bundle {}", path.display()))?;
    Ok(path)
}

/// `record -p PID`: DAMON on a running process.
fn run_pid(ctx: &Ctx, a: &Args, pid: u32) -> Result<i32> {
    match a.refs {
        RefSource::Damon | RefSource::Auto => {}
        other => bail!(
            "-p {pid}: a running process can only be monitored with DAMON (--refs damon); --refs {} starts the program itself",
            format!("{other:?}").to_lowercase()
        ),
    }
    if !(a.duration.is_finite() && a.duration > 0.0) {
        bail!(
            "--duration {} is not a positive number of seconds",
            a.duration
        );
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| vec![p.into_os_string()])
        .unwrap_or_default();
    let output = bundle_path(&a.output, &exe)?;
    let meta = stages::record_running(
        pid,
        &output,
        std::time::Duration::from_secs_f64(a.duration),
        ctx.tlb.as_deref(),
    )?;
    println!(
        "wrote {} (DAMON region access frequencies of pid {pid}, `{}`, {:.1} s); next: hugetune analyze {}",
        output.display(),
        meta.command.join(" "),
        meta.capture_s,
        output.display()
    );
    Ok(0)
}

pub fn run(ctx: &Ctx, mut a: Args) -> Result<i32> {
    if let Some(pid) = a.pid {
        return run_pid(ctx, &a, pid);
    }
    a.output = bundle_path(&a.output, &a.command)?;
    let art = crate::artifacts::find()?;
    let refs = RefOptions {
        source: a.refs,
        rate: a.rate,
        max_pages: a.max_pages,
        max_refs: a.max_refs,
        start_rate: None,
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
    let next = if meta.ref_sampling == "time" {
        String::new()
    } else {
        format!("; next: hugetune analyze {}", a.output.display())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_path_is_checked_before_profiling() {
        let d = tempfile::tempdir().unwrap();
        let cmd = vec![OsString::from("/usr/bin/sort"), OsString::from("-n")];
        assert_eq!(
            bundle_path(d.path(), &cmd).unwrap(),
            d.path().join("sort.htb")
        );
        let f = d.path().join("x.htb");
        assert_eq!(bundle_path(&f, &cmd).unwrap(), f);
        let e = bundle_path(&d.path().join("no/such/x.htb"), &cmd).unwrap_err();
        assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
        // Nothing was left behind by the probe.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
