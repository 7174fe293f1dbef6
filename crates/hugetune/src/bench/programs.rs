//! `hugetune bench programs`: real programs, not the built-in workloads, each
//! built or written into a scratch directory from the sources in
//! `workloads/programs/` (and `workloads/mpi/`), embedded in the binary:
//! a C program with its own mmap allocator, python3 with numpy, an MPI program
//! under `mpirun -np 2`, numpy behind `bash -c`, the C program linked
//! statically, a Go program and a Java program. For each: `hugetune optimize`
//! (its timings from the command to the plan, the plan, the predicted and the
//! validated speedup, the bytes it proved huge, stdout compared with the plain
//! run's), then interleaved, repeated runs of the program as it is (`plain`),
//! under `hugetune run` (the stored plan, applied however `run` applies it),
//! with THP `always`, and with `GLIBC_TUNABLES=glibc.malloc.hugetlb=2` and a
//! sized pool; medians and the proof of backing of every run (bench::run).
//!
//! Invariants: a program that cannot run here (its tool missing, its build
//! failing, optimize failing on it) is reported as skipped with the reason,
//! never measured with a stand-in; a figure in the report comes from a run of
//! that program. Adding a program is one entry in `PROGRAMS`.

use super::config::{find_program, Config};
use super::output::{self, SuiteReport};
use super::run::{Job, Workload};
use super::{emit, select, Opts, SuiteRun};
use crate::cmd::optimize;
use crate::{stages, Ctx};
use anyhow::{Context, Result};
use hugetune_capture::ab::RunCount;
use hugetune_render::{bytes, table};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Only these programs (comma-separated; an unknown name lists them)
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    only: Vec<String>,
    /// MiB of data each program walks (an MPI program's ranks share it)
    #[arg(long, value_name = "MIB", default_value_t = 512,
          value_parser = clap::value_parser!(u64).range(4..=65536))]
    size: u64,
    /// Timed runs of every configuration (interleaved, after one untimed
    /// warm-up round), and the A/B pairs of optimize's validation
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    reps: u32,
    /// Print the report as one JSON object
    #[arg(long)]
    json: bool,
    /// Write programs.json and programs.html into DIR
    #[arg(long = "out-dir", value_name = "DIR")]
    out: Option<PathBuf>,
}

/// A program ready to run: its command line and how much memory it may need
/// (sizes the pool of `glibc-hugetlb=2`).
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub argv: Vec<String>,
    pub footprint: u64,
}

/// One real program: how it is built into a scratch directory for `mib` MiB,
/// or why it cannot be here (the message names what is missing).
pub struct Program {
    pub name: &'static str,
    pub about: &'static str,
    pub prepare: fn(dir: &Path, mib: u64) -> Result<Prepared, String>,
}

const MMAP_WALK_C: &str = include_str!("../../../../workloads/programs/mmap_walk.c");
const GATHER_PY: &str = include_str!("../../../../workloads/programs/gather.py");
const WALK_GO: &str = include_str!("../../../../workloads/programs/walk.go");
const WALK_JAVA: &str = include_str!("../../../../workloads/programs/Walk.java");
const MPI_WALK_C: &str = include_str!("../../../../workloads/mpi/mpi_walk.c");

/// The python3 whose numpy the bench uses (Debian's python3-numpy).
pub const PYTHON: &str = "/usr/bin/python3";

/// Steps of a dependent walk over `mib` MiB: one per 128 bytes.
fn walk_steps(mib: u64) -> u64 {
    mib << 13
}

/// Elements gathered over `mib` MiB: one per 16 bytes (a gather is much
/// cheaper than a dependent step; fewer leave python's start and the array's
/// first touch most of the run).
fn gather_steps(mib: u64) -> u64 {
    mib << 16
}

/// Every program of the suite, in report order.
pub const PROGRAMS: &[Program] = &[
    Program {
        name: "c-mmap",
        about: "C with its own mmap allocator (32 MiB chunks, bump-allocated 64-byte records and their index), a dependent random walk",
        prepare: |dir, mib| {
            let exe = cc(dir, "mmap_walk", MMAP_WALK_C, &[])?;
            Ok(Prepared {
                argv: vec![exe, mib.to_string(), walk_steps(mib).to_string()],
                footprint: (mib + mib / 8 + 64) << 20,
            })
        },
    },
    Program {
        name: "numpy",
        about: "python3 with numpy: random gathers (1 Mi indices a batch) over one int64 array",
        prepare: |dir, mib| {
            let script = numpy_script(dir)?;
            Ok(Prepared {
                argv: vec![
                    PYTHON.into(),
                    script,
                    mib.to_string(),
                    gather_steps(mib).to_string(),
                ],
                footprint: (mib + 64) << 20,
            })
        },
    },
    Program {
        name: "mpi",
        about: "an MPI program under mpirun -np 2: each rank mallocs half the data and walks it at random (the steps of the others each), then a reduction",
        prepare: |dir, mib| {
            for t in ["mpicc", "mpirun"] {
                need(t, "openmpi-bin, libopenmpi-dev")?;
            }
            let src = dir.join("mpi_walk.c");
            write(&src, MPI_WALK_C)?;
            let exe = dir.join("mpi_walk");
            build(
                Command::new("mpicc")
                    .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
                    .arg(&exe)
                    .arg(&src),
                "mpicc",
            )?;
            let per_rank = (mib / 2).max(1);
            Ok(Prepared {
                argv: vec![
                    "mpirun".into(),
                    "--allow-run-as-root".into(),
                    "--oversubscribe".into(),
                    "-np".into(),
                    "2".into(),
                    exe.display().to_string(),
                    per_rank.to_string(),
                    walk_steps(mib).to_string(),
                ],
                footprint: (2 * per_rank + 128) << 20,
            })
        },
    },
    Program {
        name: "bash-numpy",
        about: "the numpy program started by bash -c (a shell that forks it: the launcher is followed into python3)",
        prepare: |dir, mib| {
            need("bash", "bash")?;
            let script = numpy_script(dir)?;
            Ok(Prepared {
                argv: vec![
                    "bash".into(),
                    "-c".into(),
                    format!(
                        "{PYTHON} {} {mib} {} || exit $?",
                        shell_quote(&script),
                        gather_steps(mib)
                    ),
                ],
                footprint: (mib + 64) << 20,
            })
        },
    },
    Program {
        name: "c-static",
        about: "the c-mmap program linked statically (no preload can enter: profiled under qemu, applied from outside)",
        prepare: |dir, mib| {
            let exe = cc(dir, "mmap_walk_static", MMAP_WALK_C, &["-static"])?;
            Ok(Prepared {
                argv: vec![exe, mib.to_string(), walk_steps(mib).to_string()],
                footprint: (mib + mib / 8 + 64) << 20,
            })
        },
    },
    Program {
        name: "go",
        about: "a Go program: one slice in the Go runtime's own heap arenas, a dependent random walk",
        prepare: |dir, mib| {
            need("go", "golang-go")?;
            let src = dir.join("walk.go");
            write(&src, WALK_GO)?;
            let exe = dir.join("walk");
            build(
                Command::new("go")
                    .args(["build", "-o"])
                    .arg(&exe)
                    .arg(&src)
                    .env("GO111MODULE", "off"),
                "go build",
            )?;
            Ok(Prepared {
                argv: vec![
                    exe.display().to_string(),
                    mib.to_string(),
                    walk_steps(mib).to_string(),
                ],
                footprint: (2 * mib + 64) << 20,
            })
        },
    },
    Program {
        name: "java",
        about: "a Java program: one long[] in the JVM's heap, a dependent random walk",
        prepare: |dir, mib| {
            need("javac", "openjdk-17-jdk-headless")?;
            need("java", "openjdk-17-jdk-headless")?;
            let src = dir.join("Walk.java");
            write(&src, WALK_JAVA)?;
            build(
                Command::new("javac").arg("-d").arg(dir).arg(&src),
                "javac",
            )?;
            Ok(Prepared {
                argv: vec![
                    "java".into(),
                    format!("-Xmx{}m", 2 * mib + 256),
                    "-cp".into(),
                    dir.display().to_string(),
                    "Walk".into(),
                    mib.to_string(),
                    walk_steps(mib).to_string(),
                ],
                footprint: (mib + 256) << 20,
            })
        },
    },
];

/// `Err` naming the package when `tool` is not installed.
fn need(tool: &str, package: &str) -> Result<PathBuf, String> {
    find_program(tool).ok_or_else(|| {
        format!("{tool} is not installed (apt-get install {package}; scripts/setup.sh does)")
    })
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Runs a build command; its failure is the program's reason to be skipped.
fn build(cmd: &mut Command, what: &str) -> Result<(), String> {
    let o = cmd
        .output()
        .map_err(|e| format!("{what} could not run: {e}"))?;
    if o.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!("{what} failed ({}): {}", o.status, last.trim()))
}

/// `src` compiled by gcc into `dir/name` with `extra` flags.
fn cc(dir: &Path, name: &str, src: &str, extra: &[&str]) -> Result<String, String> {
    need("gcc", "gcc")?;
    let c = dir.join(format!("{name}.c"));
    write(&c, src)?;
    let exe = dir.join(name);
    build(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror"])
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&c),
        "gcc",
    )?;
    Ok(exe.display().to_string())
}

/// gather.py written into `dir`, once numpy imports in `PYTHON`.
fn numpy_script(dir: &Path) -> Result<String, String> {
    if !Path::new(PYTHON).is_file() {
        return Err(format!(
            "{PYTHON} is not installed (apt-get install python3-numpy)"
        ));
    }
    let o = Command::new(PYTHON)
        .args(["-c", "import numpy"])
        .output()
        .map_err(|e| format!("{PYTHON} could not run: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "numpy does not import in {PYTHON} (apt-get install python3-numpy)"
        ));
    }
    let script = dir.join("gather.py");
    write(&script, GATHER_PY)?;
    Ok(script.display().to_string())
}

/// `s` as one word for bash.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The configurations a program is measured under. `plan_pages`: the 2 MB
/// pages of optimize's plan (0: none).
pub fn configs(footprint: u64, plan_pages: u64, plan_backs: bool, run: Vec<String>) -> Vec<Config> {
    let pages_2m = footprint.div_ceil(2 << 20) + footprint.div_ceil(2 << 20) / 8 + 8;
    let plain = Config::new(
        "plain",
        "the program as it is (THP madvise: only what the program advises itself is on THP)",
    )
    .baseline();
    let mut h = Config::new(
        "hugetune",
        "`hugetune run -- CMD`: the plan optimize stored, applied as `run` applies it, with the pool optimize sized",
    );
    h.wrapper = run;
    h.pool_2m = if plan_pages > 0 { plan_pages + 4 } else { 0 };
    h.expects_huge = plan_backs;
    let mut thp = Config::new(
        "thp-always",
        "THP enabled = always for the run (system-wide), nothing else changed",
    );
    thp.thp = Some("always".into());
    let mut g2 = Config::new(
        "glibc-hugetlb=2",
        "GLIBC_TUNABLES=glibc.malloc.hugetlb=2 with a 2 MB pool of the program's footprint: MAP_HUGETLB for glibc's heap and mmap'd chunks",
    )
    .with_env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=2");
    g2.pool_2m = pages_2m;
    vec![plain, h, thp, g2]
}

/// What optimize found for one program, as the report keeps it.
fn optimize_entry(r: &optimize::Report) -> Value {
    let t = &r.timings;
    json!({
        "native_s": t.native_s,
        // From the command to the plan: everything but the validation.
        "to_plan_s": (t.total_s - t.validate_s).max(0.0),
        "total_s": t.total_s,
        "timings": t,
        "plan": plan_lines(&r.plan.text),
        "plan_text": r.plan.text,
        "reasons": r.plan.reasons,
        "hugetlb_pages": r.plan.hugetlb_pages,
        "predicted_speedup": r.predicted_speedup,
        "validated_speedup": r.speedup,
        "speedup_ci": r.validation.speedup_ci,
        "verdict": r.verdict,
        "huge_bytes": r.huge_bytes_backed,
        "outputs_compared": r.validation.run_count.compare_output,
        "exit_codes_match": r.validation.exit_codes_match,
        "pairs": r.validation.runs,
    })
}

/// The directives of a plan file, one entry each (categories and sites; a
/// site's module by its file name): what the plan column shows.
pub fn plan_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("hugetune-plan") && !l.starts_with("threshold"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["site", module, offset, rest @ ..] => {
                    let name = Path::new(module)
                        .file_name()
                        .map_or(*module, |n| n.to_str().unwrap_or(module));
                    format!("site {name}+{offset} {}", rest.join(" "))
                }
                _ => l.to_string(),
            }
        })
        .collect()
}

/// `hugetune [global options] run --`: the wrapper of the `hugetune` configuration.
fn run_wrapper(ctx: &Ctx) -> Result<Vec<String>> {
    let exe = std::env::current_exe().context("finding hugetune's own executable")?;
    let mut v = vec![
        exe.display().to_string(),
        "--db".into(),
        ctx.db_path.display().to_string(),
        "--host-id".into(),
        hugetune_store::identity::host_id(),
    ];
    if let Some(t) = &ctx.tlb {
        v.push("--tlb".into());
        v.push(t.display().to_string());
    }
    v.extend(["run".into(), "--".into()]);
    Ok(v)
}

pub fn run(ctx: &Ctx, a: &Args) -> Result<()> {
    let chosen = select(
        PROGRAMS.iter().collect(),
        &a.only,
        |p| p.name,
        "program",
        "programs",
    )?;
    let reps = a.reps as usize;
    let mut sr = SuiteRun::begin(
        "programs",
        "real programs (own mmap allocator, numpy, MPI, bash -c, static C, Go, Java): hugetune optimize and run next to THP always and glibc's hugetlb tunable",
    );
    sr.notes.push(format!(
        "{} MiB of data per program; optimize validated with {reps} A/B pairs, stdout compared with the plain run's",
        a.size
    ));
    sr.notes.push(
        "the hugetune configuration's times include `hugetune run` itself: the plan looked up before the program starts and the run recorded after it ends".into(),
    );
    let scratch = hugetune_host::kernel_state::Scratch::new("hugetune-programs.")?;
    let wrapper = run_wrapper(ctx)?;
    // Build and optimize every program first (optimize takes the kernel-state
    // lock itself to grow the pool for its runs); what cannot run is skipped.
    let mut ready: Vec<(Workload, Vec<Config>, Value, i64)> = Vec::new();
    let mut entries: Vec<Value> = Vec::new();
    for p in chosen {
        let dir = scratch.path().join(p.name);
        std::fs::create_dir_all(&dir)?;
        // Reported in the program's entry (the report's `skipped:` lines).
        let skip = |entries: &mut Vec<Value>, reason: String| {
            stages::note(format!("programs: skipped {}: {reason}", p.name));
            entries.push(json!({"program": p.name, "about": p.about, "skipped": reason}));
        };
        let prep = match (p.prepare)(&dir, a.size) {
            Ok(x) => x,
            Err(reason) => {
                skip(&mut entries, reason);
                continue;
            }
        };
        let command: Vec<OsString> = prep.argv.iter().map(OsString::from).collect();
        let opts = optimize::Options::for_bench(
            command.clone(),
            command,
            RunCount {
                min: reps,
                max: reps,
                ci_width: 0.05,
                compare_output: true,
            },
            super::state::is_root(),
            dir.join("profile.htb"),
        );
        stages::note(format!("programs: hugetune optimize on {}", p.name));
        let r = match optimize::execute(ctx, &opts) {
            Ok(r) => r,
            Err(e) => {
                skip(&mut entries, format!("hugetune optimize failed: {e:#}"));
                continue;
            }
        };
        let opt = optimize_entry(&r);
        let w = Workload {
            name: p.name.into(),
            about: p.about.into(),
            job: Job::Program {
                argv: prep.argv.clone(),
            },
            primary: "wall".into(),
            group: "memory".into(),
            control: false,
            params: json!({"mib": a.size}),
        };
        let cs = configs(
            prep.footprint,
            r.plan.hugetlb_pages,
            !r.plan.assignments.is_empty(),
            wrapper.clone(),
        );
        ready.push((w, cs, opt, r.profile_id));
    }
    let refs: Vec<&Config> = ready.iter().flat_map(|(_, cs, _, _)| cs).collect();
    let bench = sr.bench(&refs)?;
    let mut results = Vec::new();
    for (w, cs, opt, profile_id) in &ready {
        let res = bench.measure(w, cs, reps);
        let measured: Value = res
            .results
            .iter()
            .map(|c| {
                (
                    c.config.clone(),
                    json!({
                        "median_s": c.primary.map(|s| s.median),
                        "speedup": c.speedup,
                        "huge_bytes": c.huge_bytes,
                        "backing": c.backing,
                        "ok": c.ok,
                        "failures": c.failures,
                        "first_error": c.first_error,
                    }),
                )
            })
            .collect::<serde_json::Map<String, Value>>()
            .into();
        let mut e = json!({"program": w.name, "about": w.about, "command": w.command(&bench.art.work),
                           "optimize": opt, "measured": measured,
                           "hugetune_run": applied_runs(ctx, *profile_id, reps)?});
        if !res.skipped.is_empty() {
            e["configs_skipped"] = serde_json::to_value(&res.skipped)?;
        }
        entries.push(e);
        results.push(res);
    }
    // Report order: the suite's order, skipped programs where they belong.
    entries.sort_by_key(|e| {
        PROGRAMS
            .iter()
            .position(|p| Some(p.name) == e["program"].as_str())
    });
    let configs: Vec<Config> = ready
        .first()
        .map(|(_, cs, _, _)| cs.clone())
        .unwrap_or_default();
    let extra = json!({"size_mib": a.size, "programs": entries});
    let report = sr.finish(Some(bench), false, reps, configs, results, extra);
    let o = Opts {
        quick: false,
        runs: Some(a.reps),
        json: a.json,
        out: a.out.clone(),
        workloads: vec![],
        configs: vec![],
    };
    emit(&report, &o, &text_extra(&report), html(&report))
}

/// What `hugetune run` did in the `hugetune` configuration's timed runs (the
/// last `reps` it recorded with the profile; the warm-up round's came first):
/// the plans it applied (it plans for the pages free at each start), the
/// program's own median wall time inside `run` and the median bytes the
/// runtime library backed huge (every block over the run).
fn applied_runs(ctx: &Ctx, profile_id: i64, reps: usize) -> Result<Value> {
    let db = ctx.db()?;
    let mut runs: Vec<_> = db
        .runs_of_profile(profile_id)?
        .into_iter()
        .filter(|r| r.verdict == "applied")
        .collect();
    let warm_up = runs.len().saturating_sub(reps);
    runs.drain(..warm_up);
    let mut plans: Vec<String> = Vec::new();
    for r in &runs {
        let label = if r.mapping.is_empty() {
            "nothing".to_string()
        } else {
            r.mapping.clone()
        };
        if !plans.contains(&label) {
            plans.push(label);
        }
    }
    let walls: Vec<f64> = runs.iter().flat_map(|r| r.optimized_s.clone()).collect();
    Ok(json!({
        "runs": runs.len(),
        "applied": plans,
        "program_median_s": hugetune_model::stats::median_finite(&walls),
        "runtime_huge_bytes": hugetune_model::stats::median_u64(runs.iter().map(|r| r.huge_bytes_backed)),
    }))
}

const MEASURED: [&str; 3] = ["hugetune", "thp-always", "glibc-hugetlb=2"];

/// `1.42x 512 MiB` (speedup over plain, huge bytes of the median run).
fn measured_cell(m: &Value) -> String {
    if m.is_null() {
        return "-".into();
    }
    if m["ok"] == false {
        return format!("FAILED ({})", m["failures"]);
    }
    format!(
        "{} {}",
        m["speedup"]
            .as_f64()
            .map_or("-".into(), |s| format!("{s:.2}x")),
        bytes(m["huge_bytes"].as_u64().unwrap_or(0))
    )
}

/// One row per program: optimize's figures, then the measured configurations.
pub fn figures_rows(extra: &Value) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for e in extra["programs"].as_array().into_iter().flatten() {
        let name = e["program"].as_str().unwrap_or("?").to_string();
        if e["skipped"].is_string() {
            // The reason is on its own line below the table.
            let mut row = vec![name, "skipped".into()];
            row.resize(FIGURES_HEADERS.len(), String::new());
            rows.push(row);
            continue;
        }
        let o = &e["optimize"];
        let m = &e["measured"];
        let f = |v: &Value| v.as_f64().map_or("-".into(), output::num);
        let plan: Vec<&str> = o["plan"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let p = &o["predicted_speedup"];
        let mut row = vec![
            name,
            f(&o["native_s"]),
            f(&o["to_plan_s"]),
            if plan.is_empty() {
                "nothing".into()
            } else {
                plan.join(", ")
            },
            format!(
                "{:.2}x [{:.2}, {:.2}]",
                p["value"].as_f64().unwrap_or(f64::NAN),
                p["lo"].as_f64().unwrap_or(f64::NAN),
                p["hi"].as_f64().unwrap_or(f64::NAN)
            ),
            format!(
                "{:.2}x ({})",
                o["validated_speedup"].as_f64().unwrap_or(f64::NAN),
                o["verdict"].as_str().unwrap_or("?")
            ),
            bytes(o["huge_bytes"].as_u64().unwrap_or(0)),
            f(&m["plain"]["median_s"]),
        ];
        row.extend(MEASURED.iter().map(|c| measured_cell(&m[*c])));
        rows.push(row);
    }
    rows
}

pub const FIGURES_HEADERS: [&str; 11] = [
    "program",
    "native s",
    "to plan s",
    "plan",
    "predicted",
    "optimize measured",
    "huge (optimize)",
    "plain s",
    "hugetune run",
    "thp-always",
    "glibc-hugetlb=2",
];

fn text_extra(r: &SuiteReport) -> String {
    let mut s = format!(
        "\nfigures ({} MiB; medians of {} interleaved runs; speedup over plain, huge bytes proven in the median run):\n",
        r.extra["size_mib"], r.runs
    );
    s += &table(&FIGURES_HEADERS, &figures_rows(&r.extra));
    s += "\n\nwhat `hugetune run` applied in its timed runs (medians: the program's own time inside `run`, the whole command's, the bytes the runtime library backed huge, every block over the run):\n";
    s += &table(&RUN_HEADERS, &run_rows(&r.extra));
    s += "\n";
    for l in skipped_lines(&r.extra) {
        s += &l;
        s += "\n";
    }
    s
}

pub const RUN_HEADERS: [&str; 5] = [
    "program",
    "applied",
    "program s inside run",
    "whole command s",
    "backed by the runtime library",
];

/// One row per measured program: what `hugetune run` applied.
pub fn run_rows(extra: &Value) -> Vec<Vec<String>> {
    extra["programs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| !e["hugetune_run"].is_null())
        .map(|e| {
            let h = &e["hugetune_run"];
            let applied: Vec<&str> = h["applied"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            vec![
                e["program"].as_str().unwrap_or("?").to_string(),
                if applied.is_empty() {
                    format!("no run recorded ({} runs)", h["runs"])
                } else {
                    applied.join(", ")
                },
                h["program_median_s"]
                    .as_f64()
                    .map_or("-".into(), output::num),
                e["measured"]["hugetune"]["median_s"]
                    .as_f64()
                    .map_or("-".into(), output::num),
                bytes(h["runtime_huge_bytes"].as_u64().unwrap_or(0)),
            ]
        })
        .collect()
}

/// `skipped: PROGRAM: REASON` for every program that did not run.
pub fn skipped_lines(extra: &Value) -> Vec<String> {
    extra["programs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some(format!(
                "skipped: {}: {}",
                e["program"].as_str().unwrap_or("?"),
                e["skipped"].as_str()?
            ))
        })
        .collect()
}

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    p.push_heading("Figures");
    p.push_table(&FIGURES_HEADERS, &figures_rows(&r.extra));
    p.push_table(&RUN_HEADERS, &run_rows(&r.extra));
    let skipped = skipped_lines(&r.extra);
    if !skipped.is_empty() {
        p.push_preformatted(&skipped.join("\n"));
    }
    output::push_workloads(&mut p, r);
    output::push_notes(&mut p, r);
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_selectable() {
        let names: Vec<&str> = PROGRAMS.iter().map(|p| p.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        let picked = select(
            PROGRAMS.iter().collect(),
            &["numpy".into(), "mpi".into()],
            |p| p.name,
            "program",
            "programs",
        )
        .unwrap();
        assert_eq!(
            picked.iter().map(|p| p.name).collect::<Vec<_>>(),
            ["numpy", "mpi"]
        );
        let e = select(
            PROGRAMS.iter().collect(),
            &["perl".into()],
            |p| p.name,
            "program",
            "programs",
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("one of: c-mmap, numpy"), "{e}");
    }

    #[test]
    fn configurations_and_pools() {
        let cs = configs(
            512 << 20,
            260,
            true,
            vec!["hugetune".into(), "run".into(), "--".into()],
        );
        let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["plain", "hugetune", "thp-always", "glibc-hugetlb=2"]
        );
        assert!(!cs[0].expects_huge && !cs[0].needs_root());
        assert_eq!(cs[1].pool_2m, 264);
        assert_eq!(cs[1].wrapper, ["hugetune", "run", "--"]);
        assert!(
            cs[1].plan.is_none(),
            "applied by `hugetune run`, not a preload"
        );
        assert_eq!(cs[2].thp.as_deref(), Some("always"));
        assert_eq!(cs[3].pool_2m, 256 + 32 + 8);
        // No plan: nothing reserved, nothing expected.
        let cs = configs(64 << 20, 0, false, vec![]);
        assert_eq!(cs[1].pool_2m, 0);
        assert!(!cs[1].expects_huge);
    }

    #[test]
    fn skipped_programs_have_a_row_with_the_reason() {
        let extra = json!({"programs": [
            {"program": "go", "skipped": "go is not installed"},
            {"program": "c-mmap", "optimize": {"native_s": 1.5, "to_plan_s": 20.0,
              "plan": ["heap-large hugetlb-2m"], "predicted_speedup": {"value": 1.3, "lo": 1.2, "hi": 1.4},
              "validated_speedup": 1.25, "verdict": "gain", "huge_bytes": 1u64 << 29},
             "measured": {"plain": {"median_s": 1.5, "ok": true},
                          "hugetune": {"speedup": 1.3, "huge_bytes": 1u64 << 29, "ok": true},
                          "thp-always": {"ok": false, "failures": 2}}}
        ]});
        let rows = figures_rows(&extra);
        assert_eq!(rows[0][1], "skipped");
        assert_eq!(skipped_lines(&extra), ["skipped: go: go is not installed"]);
        assert!(rows.iter().all(|r| r.len() == FIGURES_HEADERS.len()));
        assert_eq!(rows[1][3], "heap-large hugetlb-2m");
        assert_eq!(rows[1][4], "1.30x [1.20, 1.40]");
        assert_eq!(rows[1][8], "1.30x 512.0 MiB");
        assert_eq!(rows[1][9], "FAILED (2)");
        assert_eq!(rows[1][10], "-");
        // Only measured programs have a `hugetune run` row.
        let mut extra = extra;
        extra["programs"][1]["hugetune_run"] = json!({"runs": 4, "applied": ["heap-large:hugetlb-2m"],
            "program_median_s": 1.2, "runtime_huge_bytes": 1u64 << 29});
        extra["programs"][1]["measured"]["hugetune"]["median_s"] = json!(1.25);
        let rows = run_rows(&extra);
        assert_eq!(
            rows,
            [[
                "c-mmap",
                "heap-large:hugetlb-2m",
                "1.200",
                "1.250",
                "512.0 MiB"
            ]]
        );
    }

    #[test]
    fn plan_columns() {
        assert_eq!(
            plan_lines("hugetune-plan 1\nthreshold 131072\nheap-large hugetlb-2m\nsite /tmp/x/mpi_walk 0x1185 hugetlb-2m\n"),
            ["heap-large hugetlb-2m", "site mpi_walk+0x1185 hugetlb-2m"]
        );
        assert!(plan_lines("hugetune-plan 1\nthreshold 131072\n").is_empty());
    }

    #[test]
    fn bash_words() {
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
