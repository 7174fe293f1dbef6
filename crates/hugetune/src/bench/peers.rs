//! `bench peers`: hugetune next to the mechanisms people use today, on the same
//! machine, in one run. For every workload: 4 KB (nothing changed), THP
//! `always`, glibc's `glibc.malloc.hugetlb=1` and `=2` (with a pool),
//! libhugetlbfs's morecore (`HUGETLB_MORECORE=yes` with `libhugetlbfs.so.0`
//! preloaded, what `hugectl --heap` sets), jemalloc with `thp:always`, mimalloc
//! with large OS pages (2 MB, and 1 GB reserved), and `hugetune optimize`: its
//! plan, applied, next to its own validated speedup. Speedup over 4 KB, huge
//! pages used, and whether the pages really were huge (a peer that "applied"
//! but backed nothing shows as such). hugetune's target: at least the best
//! peer's speedup on every workload, with fewer huge pages, and never a
//! slowdown on the controls (CPU, I/O, Redis with fork).

use super::config::{find_library, find_program, Config, LibPlan, Missing};
use super::output::{self, SuiteReport};
use super::redis::RedisJob;
use super::run::{Job, Workload, WorkloadResult};
use super::stats::{self, PeerOutcome};
use super::{drop_missing_kernels, emit, select, Opts, SuiteRun};
use crate::cmd::optimize;
use crate::stages;
use crate::Ctx;
use anyhow::{bail, Result};
use hugetune_format::plan::PlanOptions;
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use hugetune_render::table;
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;

/// A workload of the suite with the smaller input `hugetune optimize` profiles.
pub struct PeerWorkload {
    pub w: Workload,
    /// Training input for the profile (`--profile-cmd`); `None` for Redis. At
    /// full size 64 MiB: a training input within the L2 TLB's reach (12 MiB on
    /// Zen 4's 3072 entries) misses nothing, and the model then sees no gain.
    pub training: Option<String>,
    /// Footprint estimate in bytes (sizes the pools of peers that need them).
    pub footprint: u64,
}

pub fn workloads(quick: bool) -> Vec<PeerWorkload> {
    let mut v = Vec::new();
    let mut add = |w: Workload, training: Option<&str>, footprint: u64| {
        v.push(PeerWorkload {
            w,
            training: training.map(String::from),
            footprint,
        })
    };
    if quick {
        add(
            Workload::work(
                "randmem",
                "memory-bound: randmem, 100 % random, one 32 MiB buffer",
                "randmem --size 32M --random-pct 100",
                "wall",
                "memory",
            ),
            Some("randmem --size 4M --random-pct 100 --accesses 20000"),
            32 << 20,
        );
        add(
            Workload::work(
                "primes",
                "CPU-bound control: primes up to 20000",
                "primes --limit 20000 --iters 50",
                "wall",
                "cpu",
            )
            .control(),
            Some("primes --limit 20000 --iters 1"),
            2 << 20,
        );
        add(
            redis_workload(RedisJob {
                keys: 10_000,
                value_bytes: 500,
                batch: 1000,
                bgsave: true,
            }),
            None,
            64 << 20,
        );
        return v;
    }
    add(
        Workload::work(
            "randmem",
            "memory-bound: randmem over one 2 GiB buffer, 100 % random (seed 004)",
            "randmem --size 2G --random-pct 100",
            "wall",
            "memory",
        ),
        Some("randmem --size 64M --random-pct 100 --accesses 1000000"),
        2 << 30,
    );
    add(
        Workload::work(
            "chase",
            "latency-bound: pointer chase over one 1 GiB buffer",
            "chase --size 1G --accesses 8000000",
            "wall",
            "memory",
        ),
        Some("chase --size 64M --accesses 1000000"),
        1 << 30,
    );
    add(
        Workload::work(
            "gups-heap-small",
            "random updates of 1 GiB in 64-512 byte nodes (heap-small)",
            "gups --place heap-small --size 1G --accesses 16000000",
            "wall",
            "memory",
        ),
        Some("gups --place heap-small --size 64M --accesses 1000000"),
        (1 << 30) + (1 << 30) / 16,
    );
    add(
        Workload::work(
            "cg",
            "NAS CG-like, 1 GiB, 2 threads",
            "cg --size 1G --iters 5 --threads 2",
            "wall",
            "memory",
        ),
        Some("cg --size 64M --iters 1"),
        1 << 30,
    );
    add(
        Workload::work(
            "ptrees",
            "PTrees-like: 512 MiB in ~2 KiB objects",
            "ptrees --size 512M",
            "wall",
            "memory",
        ),
        Some("ptrees --size 64M"),
        (512 << 20) + (64 << 20),
    );
    add(
        Workload::work(
            "primes",
            "CPU-bound control: primes up to 20000 (sysbench cpu)",
            "primes --limit 20000 --iters 5000",
            "wall",
            "cpu",
        )
        .control(),
        Some("primes --limit 20000 --iters 2"),
        2 << 20,
    );
    add(
        Workload::work(
            "iocopy",
            "I/O-bound control: copy a 1.5 GiB file with fsync",
            "iocopy --file {dir}/io.dat --size 1536M",
            "wall",
            "io",
        )
        .control(),
        Some("iocopy --file {dir}/io-train.dat --size 2M"),
        64 << 20,
    );
    add(
        redis_workload(RedisJob {
            keys: 1_000_000,
            value_bytes: 500,
            batch: 1000,
            bgsave: true,
        }),
        None,
        700 << 20,
    );
    v
}

/// The plan `hugetune run -- CMD` chooses from the stored directives (lost
/// plans excluded), with the pages the suite grants (`pages` more 2 MB pages
/// than are free now): its text, its 2 MB pages and its label.
fn agent_plan(ctx: &Ctx, command: &[OsString], pages: u64) -> Result<(String, u64, String)> {
    let db = ctx.db()?;
    let Some(st) = stages::stored_predictions(&db, command)? else {
        bail!("no stored profile after optimize")
    };
    let mut avail = stages::availability_now();
    avail.hugetlb_2m_free += pages;
    avail.hugetlb_2m_total += pages;
    let d = st.choose(&avail, stages::DEFAULT_MIN_GAIN);
    let text = hugetune_format::plan::plan_text_with(
        &d.assignments,
        st.threshold,
        &PlanOptions::for_decision(&st.program, &d),
    );
    Ok((text, d.hugetlb_pages(), d.label()))
}

fn redis_workload(job: RedisJob) -> Workload {
    Workload {
        name: "redis-fork".into(),
        about: format!(
            "Redis with fork (control): {} keys x {} B loaded, every key read, then a BGSAVE that must succeed; primary: load + read + BGSAVE",
            job.keys, job.value_bytes
        ),
        job: Job::Redis(job),
        primary: "all".into(),
        group: "server".into(),
        control: true,
        params: serde_json::Value::Null,
    }
}

/// Peer libraries: name → soname and the Debian package that has it.
pub const PEER_LIBS: [(&str, &str, &str); 3] = [
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
    (
        "libhugetlbfs",
        "libhugetlbfs.so.0",
        "libhugetlbfs0 libhugetlbfs-bin",
    ),
];

/// `--peer-lib PEER=PATH` overrides, checked.
pub fn parse_peer_libs(specs: &[String]) -> Result<Vec<(String, PathBuf)>> {
    specs
        .iter()
        .map(|s| {
            let Some((k, v)) = s.split_once('=') else {
                bail!("--peer-lib wants PEER=PATH, got '{s}'");
            };
            if !PEER_LIBS.iter().any(|(n, _, _)| *n == k) {
                bail!(
                    "--peer-lib: unknown peer '{k}' (one of: {})",
                    PEER_LIBS.map(|p| p.0).join(", ")
                );
            }
            Ok((k.to_string(), PathBuf::from(v)))
        })
        .collect()
}

/// Where each peer's library is, or why it cannot run.
pub fn peer_paths(
    overrides: &[(String, PathBuf)],
) -> Vec<(String, std::result::Result<PathBuf, String>)> {
    PEER_LIBS
        .iter()
        .map(|(name, soname, pkg)| {
            let r = match overrides.iter().find(|(k, _)| k == name) {
                Some((_, p)) if p.is_file() => Ok(p.clone()),
                Some((_, p)) => Err(format!("{} does not exist (--peer-lib)", p.display())),
                None => find_library(soname).ok_or_else(|| {
                    format!(
                        "{soname} is not installed (apt-get install {pkg}; scripts/setup.sh does)"
                    )
                }),
            };
            (name.to_string(), r)
        })
        .collect()
}

/// The peers' configurations for a workload of `footprint` bytes.
pub fn peer_configs(
    footprint: u64,
    libs: &[(String, std::result::Result<PathBuf, String>)],
    missing: &mut Vec<Missing>,
) -> Vec<Config> {
    let pages_2m = footprint.div_ceil(2 << 20) + footprint.div_ceil(2 << 20) / 8 + 8;
    let pages_1g = footprint.div_ceil(1 << 30).max(1);
    let lib = |n: &str| libs.iter().find(|(k, _)| k == n).map(|(_, r)| r.clone());
    let mut v = vec![Config::new(
        "4k",
        "nothing changed: glibc malloc, THP madvise (nothing advised: 4 KB pages)",
    )
    .baseline()];
    let mut thp = Config::new(
        "thp-always",
        "THP enabled = always for the run (system-wide), nothing else changed",
    );
    thp.thp = Some("always".into());
    v.push(thp);
    v.push(Config::new("glibc-hugetlb=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1: glibc advises its heap and mmap'd chunks with MADV_HUGEPAGE").with_env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1"));
    let mut g2 = Config::new("glibc-hugetlb=2", "GLIBC_TUNABLES=glibc.malloc.hugetlb=2 with a 2 MB pool: MAP_HUGETLB for glibc's heap and mmap'd chunks").with_env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=2");
    g2.pool_2m = pages_2m;
    v.push(g2);
    match lib("libhugetlbfs") {
        Some(Ok(p)) => {
            let mut c = Config::new(
                "libhugetlbfs",
                "libhugetlbfs morecore: HUGETLB_MORECORE=yes with libhugetlbfs.so.0 preloaded (what hugectl --heap sets), a 2 MB pool",
            )
            .with_env("HUGETLB_MORECORE", "yes")
            .with_env("HUGETLB_VERBOSE", "3");
            c.preload = vec![p.display().to_string()];
            c.pool_2m = pages_2m;
            v.push(c);
        }
        Some(Err(e)) => missing.push(Missing {
            what: "libhugetlbfs".into(),
            reason: e,
        }),
        None => {}
    }
    match lib("jemalloc") {
        Some(Ok(p)) => {
            let mut c = Config::new(
                "jemalloc",
                "jemalloc preloaded with MALLOC_CONF=thp:always,metadata_thp:always",
            )
            .with_env("MALLOC_CONF", "thp:always,metadata_thp:always");
            c.preload = vec![p.display().to_string()];
            v.push(c);
        }
        Some(Err(e)) => missing.push(Missing {
            what: "jemalloc".into(),
            reason: e,
        }),
        None => {}
    }
    match lib("mimalloc") {
        Some(Ok(p)) => {
            let mut c = Config::new("mimalloc", "mimalloc preloaded with MIMALLOC_LARGE_OS_PAGES=1 (2 MB MAP_HUGETLB pages from the pool)")
                .with_env("MIMALLOC_LARGE_OS_PAGES", "1")
                .with_env("MIMALLOC_VERBOSE", "1");
            c.preload = vec![p.display().to_string()];
            c.pool_2m = pages_2m;
            let mut g = Config::new(
                "mimalloc-1g",
                &format!("mimalloc with MIMALLOC_RESERVE_HUGE_OS_PAGES={pages_1g} (1 GB pages reserved at start-up) and large OS pages"),
            )
            .with_env("MIMALLOC_LARGE_OS_PAGES", "1")
            .with_env("MIMALLOC_RESERVE_HUGE_OS_PAGES", &pages_1g.to_string())
            .with_env("MIMALLOC_VERBOSE", "1");
            g.preload = vec![p.display().to_string()];
            g.pool_1g = pages_1g;
            g.pool_2m = pages_2m;
            v.push(c);
            v.push(g);
        }
        Some(Err(e)) => {
            missing.push(Missing {
                what: "mimalloc".into(),
                reason: e.clone(),
            });
            missing.push(Missing {
                what: "mimalloc-1g".into(),
                reason: e,
            });
        }
        None => {}
    }
    v
}

pub fn run(ctx: &Ctx, o: &Opts, peer_lib: &[String]) -> Result<()> {
    let overrides = parse_peer_libs(peer_lib)?;
    let all = workloads(o.quick);
    let names: Vec<String> = all.iter().map(|p| p.w.name.clone()).collect();
    let chosen = select(names, &o.workloads, |n| n.as_str(), "workload", "peers")?;
    let mut pws: Vec<PeerWorkload> = all
        .into_iter()
        .filter(|p| chosen.contains(&p.w.name))
        .collect();
    let mut sr = SuiteRun::begin(
        "peers",
        "hugetune next to THP always, glibc's hugetlb tunable, libhugetlbfs, jemalloc and mimalloc: speedup over 4 KB, huge pages used, what was really huge",
    );
    let art = crate::artifacts::find()?;
    {
        let ws: Vec<Workload> = pws.iter().map(|p| p.w.clone()).collect();
        let keep: Vec<String> = drop_missing_kernels(ws, &art.work, &mut sr.missing)
            .into_iter()
            .map(|w| w.name)
            .collect();
        pws.retain(|p| keep.contains(&p.w.name));
    }
    if let Err(e) = super::redis::server_path() {
        pws.retain(|p| {
            let keep = !matches!(p.w.job, Job::Redis(_));
            if !keep {
                sr.missing.push(Missing {
                    what: p.w.name.clone(),
                    reason: e.clone(),
                });
            }
            keep
        });
    }
    let libs = peer_paths(&overrides);
    sr.notes.extend(hugectl_probe());
    let glibc = super::state::glibc_version();
    if super::state::glibc_at_least(&glibc, 2, 34) {
        sr.notes.push(format!(
            "glibc {glibc} has no __morecore (removed in 2.34): libhugetlbfs's HUGETLB_MORECORE cannot work here; its runs show what it really backed"
        ));
    }
    let scratch = hugetune_host::kernel_state::Scratch::new("hugetune-peers.")?;
    let subst = |s: &str| s.replace("{dir}", &scratch.path().display().to_string());
    // hugetune optimize on each workload first (it takes the kernel-state lock
    // itself to grow the pool for its runs).
    let mut optimized: Vec<(String, serde_json::Value, Option<LibPlan>, u64)> = Vec::new();
    for p in &pws {
        let (command, profile_command, driver, profile_driver) = match &p.w.job {
            Job::Work { args } => {
                let mut command: Vec<OsString> = vec![art.work.clone().into_os_string()];
                command.extend(args.iter().map(|a| OsString::from(subst(a))));
                let mut profile_command: Vec<OsString> = vec![art.work.clone().into_os_string()];
                profile_command.extend(
                    p.training
                        .as_deref()
                        .unwrap_or_default()
                        .split_whitespace()
                        .map(|a| OsString::from(subst(a))),
                );
                (command, profile_command, None, None)
            }
            Job::Program { argv } => {
                let command: Vec<OsString> = argv.iter().map(|a| subst(a).into()).collect();
                (command.clone(), command, None, None)
            }
            // A server: profiled and validated under the suite's own client, a
            // tenth of the keys for the profile.
            Job::Redis(job) => {
                let mut command: Vec<OsString> = vec![super::redis::server_path()
                    .map_err(anyhow::Error::msg)?
                    .into()];
                command.extend(super::redis::server_args(
                    hugetune_capture::session::PORT,
                    scratch.path(),
                ));
                let exe: OsString = std::env::current_exe()?.into();
                let client = |job: &RedisJob| {
                    let mut v = vec![exe.clone()];
                    v.extend(super::redis::client_args(job));
                    v
                };
                let training = RedisJob {
                    keys: (job.keys / 10).max(1000),
                    ..job.clone()
                };
                (
                    command.clone(),
                    command,
                    Some(client(job)),
                    Some(client(&training)),
                )
            }
        };
        let opts = optimize::Options {
            driver,
            profile_driver,
            ..optimize::Options::for_bench(
                command,
                profile_command,
                super::optimize_runs(o.quick),
                super::state::is_root(),
                scratch.path().join(format!("{}.htb", p.w.name)),
            )
        };
        stages::note(format!("peers: hugetune optimize on {}", p.w.name));
        match optimize::execute(ctx, &opts) {
            Ok(r) => {
                // What `hugetune run` applies from now on: optimize's plan, or,
                // where its validation measured a loss, the agent's next choice
                // (a lost plan is never applied again automatically).
                let (text, pages, applied) = if r.verdict == "loss" {
                    let (text, pages, label) =
                        agent_plan(ctx, &opts.command, r.plan.hugetlb_pages)?;
                    stages::note(format!(
                        "peers: optimize's plan lost on {} ({:.2}x): hugetune run applies {label} instead",
                        p.w.name, r.speedup
                    ));
                    (text, pages, label)
                } else {
                    (
                        r.plan.text.clone(),
                        r.plan.hugetlb_pages,
                        "optimize's plan".to_string(),
                    )
                };
                optimized.push((
                    p.w.name.clone(),
                    json!({
                        "plan": r.plan.assignments, "plan_text": r.plan.text, "reasons": r.plan.reasons,
                        "hugetlb_pages": r.plan.hugetlb_pages, "speedup": r.speedup, "speedup_ci": r.validation.speedup_ci,
                        "verdict": r.verdict, "runs": r.validation.runs, "huge_bytes_backed": r.huge_bytes_backed,
                        "baseline_median_s": r.baseline_median_s, "optimized_median_s": r.optimized_median_s,
                        "predicted_speedup": r.chosen_prediction.as_ref().map(|c| c.predicted_speedup),
                        "applied": applied, "applied_plan_text": text,
                    }),
                    Some(LibPlan::from_text(text)),
                    pages,
                ));
            }
            Err(e) => {
                sr.missing.push(Missing {
                    what: format!("hugetune on {}", p.w.name),
                    reason: format!("hugetune optimize failed: {e:#}"),
                });
                optimized.push((
                    p.w.name.clone(),
                    json!({"error": format!("{e:#}")}),
                    None,
                    0,
                ));
            }
        }
    }
    // Configurations per workload; the pools are grown once for the largest need.
    let mut per_workload: Vec<Vec<Config>> = Vec::new();
    let mut missing = Vec::new();
    for (p, (_, _, plan, pages)) in pws.iter().zip(&optimized) {
        let mut cs = peer_configs(p.footprint, &libs, &mut missing);
        if let Some(plan) = plan {
            let mut h = Config::new(
                "hugetune",
                "what `hugetune run` applies after optimize (its plan, or the next one where its validation lost), by the runtime library",
            );
            h.plan = Some(plan.clone());
            // An empty plan (the program gains nothing) is meant to change nothing.
            h.expects_huge = plan
                .text
                .lines()
                .any(|l| l.contains("thp-") || l.contains("hugetlb-"));
            h.pool_2m = if *pages > 0 { pages + 4 } else { 0 };
            cs.push(h);
        }
        let cs = super::select_configs(cs, o, "peers")?;
        per_workload.push(cs);
    }
    missing.sort_by(|a, b| a.what.cmp(&b.what));
    missing.dedup();
    sr.missing.extend(missing);
    let refs: Vec<&Config> = per_workload.iter().flatten().collect();
    let bench = sr.bench(&refs)?;
    let runs = o.runs();
    let mut results: Vec<WorkloadResult> = Vec::new();
    for (p, cs) in pws.iter().zip(&per_workload) {
        results.push(bench.measure(&p.w, cs, runs));
    }
    let verdicts: Vec<serde_json::Value> = results
        .iter()
        .map(|w| {
            let outcome = |c: &str| {
                w.result(c).map(|r| PeerOutcome {
                    config: r.config.clone(),
                    times: r
                        .runs
                        .iter()
                        .filter(|x| x.ok)
                        .filter_map(|x| x.phase(&w.primary))
                        .collect(),
                    huge_bytes: r.huge_bytes,
                    ok: r.ok,
                })
            };
            let base: Vec<f64> = outcome("4k").map(|o| o.times).unwrap_or_default();
            let peers: Vec<PeerOutcome> = w
                .results
                .iter()
                .filter(|r| r.config != "4k" && r.config != "hugetune")
                .filter_map(|r| outcome(&r.config))
                .collect();
            match outcome("hugetune") {
                Some(h) => json!({"workload": w.name, "control": w.control,
                                  "verdict": stats::peers_verdict(&base, &peers, &h, w.control)}),
                None => json!({"workload": w.name, "control": w.control, "verdict": null}),
            }
        })
        .collect();
    let extra = json!({
        "optimize": optimized.iter().map(|(n, v, _, _)| json!({"workload": n, "result": v})).collect::<Vec<_>>(),
        "verdicts": verdicts,
    });
    let configs: Vec<Config> = {
        let mut seen: Vec<Config> = Vec::new();
        for c in per_workload.into_iter().flatten() {
            if !seen.iter().any(|s| s.name == c.name) {
                seen.push(c);
            }
        }
        seen
    };
    let r = sr.finish(Some(bench), o.quick, runs, configs, results, extra);
    emit(&r, o, &text_extra(&r), html(&r))
}

/// What `hugectl --heap` does here: it preloads `libhugetlbfs.so`, which
/// Debian ships only in libhugetlbfs-dev.
pub fn hugectl_probe() -> Vec<String> {
    let Some(hugectl) = find_program("hugectl") else {
        return vec!["hugectl is not installed (apt-get install libhugetlbfs-bin): the probe of `hugectl --heap` is skipped".into()];
    };
    let out = std::process::Command::new(&hugectl)
        .args(["--heap", "true"])
        .env("HUGETLB_VERBOSE", "3")
        .output();
    match out {
        Err(e) => vec![format!("hugectl --heap true could not run: {e}")],
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let mut v: Vec<String> = super::run::stderr_notes(&err)
                .into_iter()
                .map(|n| format!("`hugectl --heap true`: {n}"))
                .collect();
            if v.is_empty() {
                v.push(format!(
                    "`hugectl --heap true` exited with {} and said nothing about morecore",
                    o.status
                ));
            } else if err.contains("cannot be preloaded") {
                v.push("hugectl --heap preloads `libhugetlbfs.so`, which Debian ships only in libhugetlbfs-dev; the libhugetlbfs configuration preloads libhugetlbfs.so.0 itself with the same variables".into());
            }
            v
        }
    }
}

fn text_extra(r: &SuiteReport) -> String {
    let mut s = String::new();
    let mut cols: Vec<String> = Vec::new();
    for w in &r.workloads {
        for c in &w.results {
            if !cols.contains(&c.config) {
                cols.push(c.config.clone());
            }
        }
    }
    let mut head: Vec<&str> = vec!["workload"];
    head.extend(cols.iter().map(|c| c.as_str()));
    let rows: Vec<Vec<String>> = r
        .workloads
        .iter()
        .map(|w| {
            let mut row = vec![w.name.clone()];
            for c in &cols {
                row.push(match w.result(c) {
                    Some(x) if x.ok => format!(
                        "{} {} {}",
                        x.speedup.map_or("-".into(), |v| format!("{v:.2}x")),
                        stats::pages_2m(x.huge_bytes),
                        &x.backing
                    ),
                    Some(x) => format!("FAILED ({})", x.failures),
                    None => "-".into(),
                });
            }
            row
        })
        .collect();
    s += "\nspeedup over 4 KB, 2 MB-equivalent huge pages used, backing (none/partial/huge):\n";
    s += &table(&head, &rows);
    s += "\n\nhugetune against the best peer:\n";
    for v in r.extra["verdicts"].as_array().into_iter().flatten() {
        let x = &v["verdict"];
        if x.is_null() {
            s += &format!(
                "  {}: no hugetune configuration\n",
                v["workload"].as_str().unwrap_or("?")
            );
            continue;
        }
        s += &format!(
            "  {:<16} hugetune {:.2}x vs best peer {} {:.2}x: speedup {}; huge bytes {} vs {}: {}{}\n",
            v["workload"].as_str().unwrap_or("?"),
            x["hugetune_speedup"].as_f64().unwrap_or(f64::NAN),
            x["best_peer"].as_str().unwrap_or("-"),
            x["best_peer_speedup"].as_f64().unwrap_or(f64::NAN),
            if x["speedup_met"].as_bool() == Some(true) { "met" } else { "NOT met" },
            hugetune_render::bytes(x["hugetune_huge_bytes"].as_u64().unwrap_or(0)),
            hugetune_render::bytes(x["best_peer_huge_bytes"].as_u64().unwrap_or(0)),
            if x["fewer_pages"].as_bool() == Some(true) { "fewer or equal" } else { "MORE" },
            match x["no_slowdown"].as_bool() {
                Some(true) => "; control: no slowdown".to_string(),
                Some(false) => "; control: SLOWDOWN".to_string(),
                None => String::new(),
            }
        );
    }
    for x in r.extra["optimize"].as_array().into_iter().flatten() {
        let res = &x["result"];
        if let Some(sp) = res["speedup"].as_f64() {
            s += &format!(
                "  optimize on {}: plan {}, its own validated speedup {:.2}x ({}, {} pairs){}\n",
                x["workload"].as_str().unwrap_or("?"),
                res["plan"],
                sp,
                res["verdict"].as_str().unwrap_or("?"),
                res["runs"],
                if res["verdict"] == "loss" {
                    format!(
                        "; hugetune run applies {} instead",
                        res["applied"].as_str().unwrap_or("?")
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    s
}

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    let mut cols: Vec<String> = Vec::new();
    for w in &r.workloads {
        for c in &w.results {
            if !cols.contains(&c.config) && c.config != "4k" {
                cols.push(c.config.clone());
            }
        }
    }
    let names: Vec<String> = r.workloads.iter().map(|w| w.name.clone()).collect();
    let series = |f: &dyn Fn(&super::run::ConfigResult) -> Option<f64>| -> Vec<Series> {
        cols.iter()
            .map(|c| {
                Series::new(
                    c.clone(),
                    r.workloads
                        .iter()
                        .enumerate()
                        .filter_map(|(i, w)| Some((i as f64, f(w.result(c)?)?)))
                        .collect(),
                )
            })
            .collect()
    };
    p.push_heading("Speedup over 4 KB per workload");
    p.push_svg(svg::render(
        &Chart {
            title: "speedup over 4 KB pages (median 4 KB / median)".into(),
            x_label: "workload".into(),
            y_label: "speedup".into(),
            kind: ChartKind::Bar,
            series: series(&|x| if x.ok { x.speedup } else { None }),
            x_categories: names.clone(),
            ..Default::default()
        },
        980,
        420,
    ));
    p.push_heading("Huge pages used");
    p.push_svg(svg::render(
        &Chart {
            title: "huge memory proven per run (2 MB-equivalent pages, median run)".into(),
            x_label: "workload".into(),
            y_label: "2 MB-equivalent pages".into(),
            kind: ChartKind::Bar,
            series: series(&|x| Some(stats::pages_2m(x.huge_bytes) as f64)),
            x_categories: names,
            ..Default::default()
        },
        980,
        420,
    ));
    p.push_heading("hugetune against the best peer");
    let rows: Vec<Vec<String>> = r.extra["verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let x = &v["verdict"];
            vec![
                v["workload"].as_str().unwrap_or("?").to_string(),
                x["hugetune_speedup"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.2}x")),
                x["best_peer"].as_str().unwrap_or("-").to_string(),
                x["best_peer_speedup"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.2}x")),
                x["speedup_met"].to_string(),
                format!(
                    "{} / {}",
                    hugetune_render::bytes(x["hugetune_huge_bytes"].as_u64().unwrap_or(0)),
                    hugetune_render::bytes(x["best_peer_huge_bytes"].as_u64().unwrap_or(0))
                ),
                x["fewer_pages"].to_string(),
                x["no_slowdown"].to_string(),
            ]
        })
        .collect();
    p.push_table(
        &[
            "workload",
            "hugetune",
            "best peer",
            "its speedup",
            "speedup met",
            "huge: hugetune / best peer",
            "fewer pages",
            "control: no slowdown",
        ],
        &rows,
    );
    output::push_workloads(&mut p, r);
    output::push_notes(&mut p, r);
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_library_overrides() {
        let v = parse_peer_libs(&["jemalloc=/x/libjemalloc.so.2".into()]).unwrap();
        assert_eq!(v[0].0, "jemalloc");
        assert!(parse_peer_libs(&["tcmalloc=/x".into()])
            .unwrap_err()
            .to_string()
            .contains("unknown peer 'tcmalloc'"));
        assert!(parse_peer_libs(&["jemalloc".into()])
            .unwrap_err()
            .to_string()
            .contains("PEER=PATH"));
        let paths = peer_paths(&[(
            "mimalloc".into(),
            PathBuf::from("/nonexistent/libmimalloc.so.2"),
        )]);
        let m = paths.iter().find(|(n, _)| n == "mimalloc").unwrap();
        assert!(m.1.as_ref().unwrap_err().contains("does not exist"));
    }

    #[test]
    fn configurations_of_a_workload() {
        let libs = vec![
            (
                "jemalloc".to_string(),
                Ok(PathBuf::from("/l/libjemalloc.so.2")),
            ),
            (
                "mimalloc".to_string(),
                Err("libmimalloc.so.2 is not installed".to_string()),
            ),
            (
                "libhugetlbfs".to_string(),
                Ok(PathBuf::from("/l/libhugetlbfs.so.0")),
            ),
        ];
        let mut missing = Vec::new();
        let c = peer_configs(1 << 30, &libs, &mut missing);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "4k",
                "thp-always",
                "glibc-hugetlb=1",
                "glibc-hugetlb=2",
                "libhugetlbfs",
                "jemalloc"
            ]
        );
        assert_eq!(
            missing.len(),
            2,
            "mimalloc and mimalloc-1g are reported missing: {missing:?}"
        );
        assert!(missing[0].reason.contains("not installed"));
        let g2 = &c[3];
        assert!(g2.pool_2m >= 512);
        assert!(g2
            .env
            .contains(&("GLIBC_TUNABLES".into(), "glibc.malloc.hugetlb=2".into())));
        assert_eq!(c[1].thp.as_deref(), Some("always"));
        let hl = &c[4];
        assert_eq!(hl.preload, vec!["/l/libhugetlbfs.so.0".to_string()]);
        assert!(hl.env.contains(&("HUGETLB_MORECORE".into(), "yes".into())));
        // The server is optimized under the suite's client, the same server
        // arguments the suite's runs use.
        let job = RedisJob {
            keys: 10,
            value_bytes: 64,
            batch: 5,
            bgsave: true,
        };
        let args = super::super::redis::client_args(&job);
        assert_eq!(args[..4], ["bench", "redis-client", "--port", "{port}"]);
        assert!(args.iter().any(|a| a == "--bgsave"));
        let srv = super::super::redis::server_args("{port}", std::path::Path::new("/s"));
        assert!(srv.iter().any(|a| a == "dump-{port}.rdb"));
        assert_eq!(workloads(true).len(), 3);
        assert!(workloads(false).iter().filter(|p| p.w.control).count() == 3);
    }
}
