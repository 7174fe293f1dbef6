//! `hugetune bench store` (issue 20, item 6): a fleet's load on one store.
//! N clients (threads, each a host with its own id, start-up cache and
//! connections) start the program again and again as `hugetune run` processes
//! do against `--db` (a PostgreSQL server, or an SQLite file), and record each
//! run. Of every eight starts, six find a fresh start-up cache entry (the
//! plan is read from it; the connection and the one-query confirmation that
//! `run` does in a thread while the program runs are timed apart), one an
//! entry past its TTL (connect, schema check, one query, then the start), and
//! one none (connect, describe and register the host, the full look-up,
//! `stages::stored_predictions`, and the entry written). Prints starts and
//! writes per second and their latency percentiles.
//!
//! Invariants: it writes only into a database that is empty or its own (it
//! refuses one holding other profiles: it would add runs to real programs);
//! every failed look-up or write is an error, never a figure.

use crate::stages::start_cache;
use crate::{stages, Ctx};
use anyhow::{bail, Context, Result};
use hugetune_model::rank::{Prediction, Significance};
use hugetune_model::{Backing, Category};
use hugetune_store::db::{Db, NewDirective, NewRun};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Concurrent clients, each a host with its own connection
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    clients: u32,
    /// Seconds of load
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    seconds: u32,
    /// Print one JSON object
    #[arg(long)]
    json: bool,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub n: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

fn latency(mut v: Vec<f64>) -> Latency {
    v.sort_by(f64::total_cmp);
    let q = |p| hugetune_model::stats::quantile(&v, p) * 1e3;
    Latency {
        n: v.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: v.last().copied().unwrap_or(f64::NAN) * 1e3,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreFigures {
    pub database: String,
    pub engine: String,
    pub clients: u32,
    pub seconds: f64,
    /// `hugetune run` starts (of the three kinds).
    pub starts: usize,
    pub starts_per_s: f64,
    pub writes: usize,
    pub writes_per_s: f64,
    /// A start from a fresh start-up cache entry (the store asked meanwhile).
    pub fresh: Latency,
    /// A start from an entry past its TTL: connect, schema check, one query.
    pub confirmed: Latency,
    /// A first start (no entry): connect, describe, register, look up, write it.
    pub first: Latency,
    /// A fresh start's background work: connect and confirm.
    pub background: Latency,
    pub write: Latency,
    /// The target for the start-up look-up's p99 (issue 20).
    pub target_p99_ms: f64,
}

/// Directives as an analysis stores them: every base mapping of three
/// categories and two backings, details in `Prediction`'s form.
fn seed_directives() -> Vec<NewDirective> {
    let cats = [Category::HeapLarge, Category::HeapSmall, Category::Static];
    let backings = [Backing::Hugetlb2m, Backing::Thp2m];
    let mut out = Vec::new();
    for mask in 1u32..8 {
        for &b in &backings {
            let assignments: Vec<(Category, Backing)> = cats
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, &c)| (c, b))
                .collect();
            let label = hugetune_model::rank::label(&assignments);
            let saving = 1e6 * f64::from(mask) * if b == Backing::Hugetlb2m { 1.2 } else { 1.0 };
            let p = Prediction {
                mapping: label.clone(),
                label: label.clone(),
                base: mask.count_ones() == 1,
                assignments,
                miss_time_ns: 5e6 - saving,
                saving_ns: saving,
                pmb: saving / 8.4e6 * 100.0,
                predicted_seconds: 0.05,
                predicted_speedup: 1.0 + saving / 5e7,
                hugetlb_pages: if b == Backing::Hugetlb2m { 16 } else { 0 },
                hugetlb_1g_pages: 0,
                static_pages_1g: (0, 0),
                thp_pages: if b == Backing::Thp2m { 16 } else { 0 },
                sites: vec![],
                walks: 1000,
                faults: 100,
            };
            out.push(NewDirective {
                mapping: label,
                assignments: serde_json::to_value(&p.assignments).unwrap_or_default(),
                base: p.base,
                saving_ns: p.saving_ns,
                pmb: p.pmb,
                predicted_speedup: p.predicted_speedup,
                hugetlb_pages: p.hugetlb_pages,
                thp_pages: p.thp_pages,
                details: serde_json::to_value(&p).unwrap_or_default(),
                confidence: 1.0,
                validations: 0,
                lost: false,
            });
        }
    }
    out
}

/// A profile summary as large as a real one (miss-ratio curves included).
fn seed_summary() -> serde_json::Value {
    let curve: Vec<(u64, f64)> = (0..100)
        .map(|i| (1u64 << (i % 20), 1.0 / f64::from(i + 1)))
        .collect();
    serde_json::json!({
        "bench": true,
        "refs": 1_000_000,
        "native_s": 0.05,
        "threshold": 131072,
        "significance": Significance {
            tlb_misses_per_s: 1e6, faults_per_s: 1e4, passes: true, source: "model".into(),
            walks_by_category: vec![]
        },
        "program": {"forks": false, "fork_children": 0},
        "mrc": {"4k": curve, "2m": curve, "1g": curve},
    })
}

/// The database as `hugetune run` opens it: the host describes itself (its
/// machine, with `--tlb`) when the look-up first needs its class.
fn open(location: &Path, host: &str, tlb: &Option<PathBuf>) -> Result<Db> {
    let mut db = Db::open(location)?;
    db.set_host_id(host)?;
    let tlb = tlb.clone();
    db.set_host_source(move || {
        stages::host_spec(&hugetune_host::machine::machine(tlb.as_deref())?)
    });
    Ok(db)
}

/// Stores the profile the clients look up (for this host's class), unless a
/// previous run of the benchmark did; refuses a database with other profiles.
fn seed(location: &Path, tlb: &Option<PathBuf>, argv: &[OsString]) -> Result<()> {
    let mut db = open(location, "bench-seed", tlb)?;
    let others = db.query_sql(
        "SELECT count(*) FROM profiles WHERE summary NOT LIKE '%\"bench\":true%'",
        &[],
    )?[0]
        .int(0)?;
    if others > 0 {
        bail!(
            "{} holds {others} profiles that are not the benchmark's: give --db a scratch database \
             (scripts/pg.sh start prints one), the benchmark adds runs",
            db.path().display()
        );
    }
    if stages::stored_predictions(&db, argv)?.is_some() {
        return Ok(());
    }
    let host = db
        .host()?
        .context("the benchmark's host did not register")?;
    let program = stages::program_of(argv)?;
    let pid = db.upsert_program(&program.path, program.build_id.as_deref())?;
    let profile = db.insert_profile(
        pid,
        Some(host.machine_id),
        &stages::strings(argv),
        None,
        &seed_summary(),
        &seed_directives(),
    )?;
    db.record_validation(profile, "heap-large:hugetlb", 0.9, false)?;
    Ok(())
}

#[derive(Default)]
struct Samples {
    /// Starts from a fresh cache entry: nothing asked of the store first.
    fresh: Vec<f64>,
    /// Starts from an entry past its TTL: connect, check the schema, one query.
    confirmed: Vec<f64>,
    /// First starts (no entry): connect, describe and register the host, the
    /// full look-up, the entry written.
    first: Vec<f64>,
    /// The work a fresh start leaves to its background thread: connect and confirm.
    background: Vec<f64>,
    write: Vec<f64>,
}

/// One client: a host running the program again and again, as `hugetune run`
/// processes do, each start one of three kinds (in every eight: one first
/// start, one past the TTL, six fresh), then its run insert.
fn client(
    location: &Path,
    i: u32,
    tlb: &Option<PathBuf>,
    argv: &[OsString],
    start: &Barrier,
    seconds: u32,
) -> Result<Samples> {
    let host = format!("bench-{i}");
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-bench-start-")?;
    let key = start_cache::Key::new(location, &host, tlb.as_deref(), argv)?;
    let ready = open(location, &host, tlb).and_then(|db| {
        start_cache::look_up(&db, Some(dir.path()), &key, argv)?
            .context("the seeded profile is not found")?;
        Ok(db)
    });
    // Every client reaches the start, ready or not: none is left waiting.
    start.wait();
    ready?;
    let mut s = Samples::default();
    let end = Instant::now() + Duration::from_secs(seconds.into());
    let mut n = 0u64;
    while Instant::now() < end {
        let t = Instant::now();
        // As `run` does at every start: the key (the program's build-id, the
        // host's fingerprint).
        let key = start_cache::Key::new(location, &host, tlb.as_deref(), argv)?;
        let (db, st) = match n % 8 {
            7 => {
                for e in std::fs::read_dir(dir.path())? {
                    std::fs::remove_file(e?.path())?;
                }
                let db = open(location, &host, tlb)?;
                let st = start_cache::look_up(&db, Some(dir.path()), &key, argv)?
                    .context("the seeded profile is not found")?;
                s.first.push(t.elapsed().as_secs_f64());
                (db, st)
            }
            3 => {
                let c = start_cache::read(dir.path(), &key).context("no start-up cache entry")?;
                let db = open(location, &host, tlb)?;
                if !c.confirm(&db)? {
                    bail!("the start-up cache entry was not confirmed: the seeded profile changed");
                }
                s.confirmed.push(t.elapsed().as_secs_f64());
                (db, c.stored())
            }
            _ => {
                let c = start_cache::read(dir.path(), &key).context("no start-up cache entry")?;
                let st = c.stored();
                s.fresh.push(t.elapsed().as_secs_f64());
                // What `run` does meanwhile, in its thread.
                let t = Instant::now();
                let db = open(location, &host, tlb)?;
                if !c.confirm(&db)? {
                    bail!("the start-up cache entry was not confirmed: the seeded profile changed");
                }
                s.background.push(t.elapsed().as_secs_f64());
                (db, st)
            }
        };
        let t = Instant::now();
        db.insert_run(&NewRun {
            program_id: st.program_id,
            mapping: "heap-large:hugetlb".into(),
            profile_id: Some(st.profile_id),
            machine_id: None,
            args: stages::strings(argv),
            plan: serde_json::json!({"mapping": "heap-large:hugetlb"}),
            baseline_s: vec![],
            optimized_s: vec![0.05],
            speedup: None,
            huge_bytes_backed: 32 << 20,
            verdict: "applied".into(),
            details: serde_json::json!({"bench": true, "client": i, "n": n}),
        })?;
        s.write.push(t.elapsed().as_secs_f64());
        n += 1;
    }
    Ok(s)
}

pub fn measure(ctx: &Ctx, clients: u32, seconds: u32) -> Result<StoreFigures> {
    if ctx.db_path == Db::default_path() {
        bail!("give --db: the benchmark writes into it (a scratch PostgreSQL database from scripts/pg.sh, or a new file)");
    }
    let location: PathBuf = ctx.db_path.clone();
    let tlb = ctx.tlb.clone();
    let art = crate::artifacts::find()?;
    let argv: Vec<OsString> = [
        art.work.as_os_str(),
        "chase".as_ref(),
        "--size".as_ref(),
        "1G".as_ref(),
    ]
    .iter()
    .map(|s| s.to_os_string())
    .collect();
    seed(&location, &tlb, &argv)?;
    let engine = format!("{:?}", Db::open(&location)?.engine()).to_lowercase();
    let barrier = Arc::new(Barrier::new(clients as usize + 1));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (location, tlb, argv, barrier) =
                (location.clone(), tlb.clone(), argv.clone(), barrier.clone());
            std::thread::spawn(move || client(&location, i, &tlb, &argv, &barrier, seconds))
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    let mut all = Samples::default();
    for t in threads {
        let s = t
            .join()
            .map_err(|_| anyhow::anyhow!("a benchmark client panicked"))??;
        all.fresh.extend(s.fresh);
        all.confirmed.extend(s.confirmed);
        all.first.extend(s.first);
        all.background.extend(s.background);
        all.write.extend(s.write);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let starts = all.fresh.len() + all.confirmed.len() + all.first.len();
    let writes = all.write.len();
    Ok(StoreFigures {
        database: location.display().to_string(),
        engine,
        clients,
        seconds: elapsed,
        starts,
        starts_per_s: starts as f64 / elapsed,
        writes,
        writes_per_s: writes as f64 / elapsed,
        fresh: latency(all.fresh),
        confirmed: latency(all.confirmed),
        first: latency(all.first),
        background: latency(all.background),
        write: latency(all.write),
        target_p99_ms: 20.0,
    })
}

pub fn render(f: &StoreFigures) -> String {
    let row = |name: &str, l: &Latency| {
        format!(
            "  {name:<28} {:>7} {:>9.2} {:>9.2} {:>9.2}\n",
            l.n, l.p50_ms, l.p99_ms, l.max_ms
        )
    };
    let mut s = format!(
        "store: {} ({}), {} clients, {:.1} s\n  starts {:>11.0}/s  ({} in all)\n  run inserts {:>6.0}/s  ({} in all)\n\n  {:<28} {:>7} {:>9} {:>9} {:>9}\n",
        f.database, f.engine, f.clients, f.seconds, f.starts_per_s, f.starts, f.writes_per_s, f.writes,
        "latency (ms)", "n", "p50", "p99", "max"
    );
    s += &row("start, cache fresh", &f.fresh);
    s += &row("start, cache past its TTL", &f.confirmed);
    s += &row("first start (no cache)", &f.first);
    s += &row("  fresh start's background", &f.background);
    s += &row("run insert", &f.write);
    s += &format!(
        "\n  p99 of a start with its cache entry: {:.2} ms fresh, {:.2} ms past its TTL (target ≤ {:.0} ms: {})\n",
        f.fresh.p99_ms,
        f.confirmed.p99_ms,
        f.target_p99_ms,
        if f.fresh.p99_ms <= f.target_p99_ms {
            "met by a fresh entry"
        } else {
            "missed"
        }
    );
    s
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let f = measure(ctx, a.clients, a.seconds)?;
    if a.json {
        println!("{}", serde_json::to_string(&f)?);
    } else {
        print!("{}", render(&f));
    }
    Ok(0)
}
