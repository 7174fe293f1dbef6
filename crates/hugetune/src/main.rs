//! hugetune: huge pages for unmodified Linux programs, automatically and with
//! evidence. The CLI is glue: `cmd/` one thin module per command, `stages/` the
//! pipeline (record → analyze → plan → apply → validate) that commands call and
//! that calls the library crates, `bench/` the benchmark suites, `report/`
//! `hugetune report`'s view (docs/architecture.md).
//!
//! Invariants: `anyhow` stays here (library crates with untrusted input return
//! typed errors); every kernel change goes through `hugetune_host::kernel_state`
//! guards, restored on error and on Ctrl-C.

mod artifacts;
mod bench;
mod cmd;
mod progress;
mod report;
mod stages;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "hugetune",
    version,
    about = "Huge pages for unmodified Linux programs: profile, predict, apply, prove",
    after_help = "Start with `hugetune demo`, or `hugetune optimize -- ./app args`."
)]
pub struct Cli {
    /// Database: a file (default: ~/.local/share/hugetune/hugetune.db), or a fleet's
    /// PostgreSQL server, postgresql://user@host:port/dbname; else $HUGETUNE_DB
    #[arg(long, global = true, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// This host's id in the database (default: /etc/machine-id)
    #[arg(long, global = true, value_name = "ID")]
    host_id: Option<String>,
    /// TLB geometry override (JSON), instead of cpuid and presets
    #[arg(long, global = true, value_name = "FILE")]
    tlb: Option<PathBuf>,
    /// Show the profiled program's output and more detail
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Optimize `hugetune-work chase` over 1 GiB: profile, predict, apply, measure
    Demo(cmd::demo::Args),
    /// The whole loop: record, analyze, plan, apply and validate a command
    Optimize(cmd::optimize::Args),
    /// Profile a command into a bundle (allocations + references)
    Record(cmd::record::Args),
    /// Page size benefit analysis of a bundle; stores directives in the database
    Analyze(cmd::analyze::Args),
    /// Choose categories and page sizes for a program, for the pages available now
    Plan(cmd::plan::Args),
    /// Run a command with its stored plan applied (or unchanged if none)
    Run(cmd::run::Args),
    /// Interleaved A/B runs of a command with and without its plan
    Validate(cmd::validate::Args),
    /// How many huge pages a program should get: the knee of its PMB-vs-pages curve
    Size(cmd::size::Args),
    /// TLB geometry, page sizes, THP and hugetlb settings, PMU availability
    Machine(cmd::machine::Args),
    /// Measure this machine's TLB-miss and page-fault costs per page size
    Calibrate(cmd::calibrate::Args),
    /// Benchmarks and the seeds' experiments: characterize, pages-sweep, integration,
    /// scaling, categories, peers (docs/reproducing.md); runtime, capture, model
    Bench(bench::Args),
    /// Inspect the database
    Db(cmd::db::Args),
    /// Predicted vs measured ranking of every base mapping of a command (seed 001 §5.3.2)
    Rank(cmd::rank::Args),
    /// A profile's predictions and its runs: terminal summary, JSON, or HTML with plots
    Report(cmd::report::Args),
    /// Live huge page availability: fragmentation indices, pageblocks, --try, events
    Frag(cmd::frag::Args),
    /// Buddy allocator simulation with anti-fragmentation policies (seed 003)
    Fragsim(cmd::fragsim::Args),
    /// Undo the kernel changes a hugetune killed outright left (pools, THP, tracefs)
    Restore(cmd::restore::Args),
    /// Is it really huge? Pools, THP modes, and per mapping of a process (-p PID) what
    /// is on 4 KB, mTHP, THP and hugetlb pages
    Status(cmd::status::Args),
    /// Deploy a program's plan to a systemd service (a drop-in preloading the runtime
    /// library, the plan file, a unit reserving its pages at boot), or remove it
    Service(cmd::service::Args),
    /// Print a shell completion script: `hugetune completions bash > /etc/bash_completion.d/hugetune`
    Completions(cmd::completions::CompletionsArgs),
    /// Write the man pages (hugetune.1, hugetune-COMMAND.1) into a directory
    Manpages(cmd::completions::ManpagesArgs),
}

pub struct Ctx {
    pub db_path: PathBuf,
    pub tlb: Option<PathBuf>,
    pub verbose: bool,
}

impl Ctx {
    /// The database: `--db`'s file (its directory must exist) or server, or the
    /// default file (its directory created). A look-up that needs this host's
    /// machine class gets it from `hugetune machine`'s description (with `--tlb`).
    pub fn db(&self) -> anyhow::Result<hugetune_store::db::Db> {
        let mut db = if self.db_path == hugetune_store::db::Db::default_path() {
            hugetune_store::db::Db::open_default()
        } else {
            hugetune_store::db::Db::open(&self.db_path)
        }?;
        let tlb = self.tlb.clone();
        db.set_host_source(move || {
            stages::host_spec(&hugetune_host::machine::machine(tlb.as_deref())?)
        });
        Ok(db)
    }
}

/// A write to a closed pipe (`hugetune machine | head -1`): `print!` panics
/// with "failed printing to stdout: Broken pipe", and `writeln!` returns the
/// error. Either way the program ends quietly, as the tools of a pipeline do,
/// with 141 (128 + SIGPIPE) — after unwinding, so kernel-state guards restore.
/// SIGPIPE itself stays ignored: a server that dies under a client must be an
/// error, not a silent death of hugetune.
fn is_broken_pipe_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    // print!'s "failed printing to stdout: Broken pipe (os error 32)", and the
    // like from libraries that unwrap their writes.
    msg.contains("Broken pipe (os error 32)") || msg.contains("kind: BrokenPipe")
}

fn is_broken_pipe_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

const BROKEN_PIPE_EXIT: i32 = 141;

fn main() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe_panic(info.payload()) {
            default_hook(info);
        }
    }));
    let cli = Cli::parse();
    if let Some(t) = cli.tlb.as_ref().filter(|t| !t.is_file()) {
        eprintln!(
            "hugetune: error: --tlb {}: no such file (a TLB geometry in JSON, docs/tlb.md)",
            t.display()
        );
        std::process::exit(2);
    }
    if let Some(Err(e)) = cli
        .host_id
        .as_deref()
        .map(hugetune_store::identity::set_host_id)
    {
        eprintln!("hugetune: error: --host-id: {e:#}");
        std::process::exit(2);
    }
    hugetune_host::kernel_state::install_signal_guard();
    // A bundle being written when hugetune is interrupted: its temporary file
    // (beside the bundle asked for, hidden) goes too.
    hugetune_format::bundle::on_temp_file(|p| {
        let p = p.to_path_buf();
        Box::new(hugetune_host::kernel_state::on_interrupt(move || {
            let _ = std::fs::remove_file(&p);
        }))
    });
    let db_path = cli
        .db
        .or_else(|| {
            std::env::var_os("HUGETUNE_DB")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(hugetune_store::db::Db::default_path);
    let ctx = Ctx {
        // A password in a URL is kept out of every message (and of the programs run).
        db_path: hugetune_store::db::hide_password(&db_path),
        tlb: cli.tlb,
        verbose: cli.verbose,
    };
    let command = cli.command;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match command {
        Command::Demo(a) => cmd::demo::run(&ctx, a),
        Command::Optimize(a) => cmd::optimize::run(&ctx, a),
        Command::Record(a) => cmd::record::run(&ctx, a),
        Command::Analyze(a) => cmd::analyze::run(&ctx, a),
        Command::Plan(a) => cmd::plan::run(&ctx, a),
        Command::Run(a) => cmd::run::run(&ctx, a),
        Command::Validate(a) => cmd::validate::run(&ctx, a),
        Command::Size(a) => cmd::size::run(&ctx, a),
        Command::Machine(a) => cmd::machine::run(&ctx, a),
        Command::Calibrate(a) => cmd::calibrate::run(&ctx, a),
        Command::Bench(a) => bench::run(&ctx, a),
        Command::Db(a) => cmd::db::run(&ctx, a),
        Command::Rank(a) => cmd::rank::run(&ctx, a),
        Command::Report(a) => cmd::report::run(&ctx, a),
        Command::Frag(a) => cmd::frag::run(&ctx, a),
        Command::Fragsim(a) => cmd::fragsim::run(&ctx, a),
        Command::Restore(a) => cmd::restore::run(&ctx, a),
        Command::Status(a) => cmd::status::run(&ctx, a),
        Command::Service(a) => cmd::service::run(&ctx, a),
        Command::Completions(a) => cmd::completions::completions(a),
        Command::Manpages(a) => cmd::completions::manpages(a),
    }));
    let r = match r {
        Ok(r) => r,
        Err(p) if is_broken_pipe_panic(p.as_ref()) => std::process::exit(BROKEN_PIPE_EXIT),
        Err(p) => std::panic::resume_unwind(p),
    };
    match r {
        Ok(code) => std::process::exit(code),
        Err(e) if is_broken_pipe_error(&e) => std::process::exit(BROKEN_PIPE_EXIT),
        Err(e) => {
            eprintln!("hugetune: error: {e:#}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every option and argument of every command says what it is.
    #[test]
    fn every_argument_has_help() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{path} --{id}"));
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "hugetune", &mut missing);
        assert!(
            missing.is_empty(),
            "arguments without help:\n{}",
            missing.join("\n")
        );
    }
}
