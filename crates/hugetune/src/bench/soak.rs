//! `hugetune bench soak`: Redis under the runtime library's plan for a long
//! time, the way an operator leaves a service running (issue 22, item 5).
//!
//! A private `redis-server` (redis.rs's arguments: no persistence but the
//! BGSAVE dump) runs preloaded with a plan that puts heap-small (the arena) and
//! heap-large on 2 MB hugetlb pages with `fork-safe copy` (or the plan given),
//! on a pool sized for the dataset. KEYS keys are loaded, then for MINUTES:
//! pipelined SETs of random keys with values whose size changes, a key space
//! growing by a quarter (so the server keeps needing memory), values read back
//! on a sample of keys, a BGSAVE
//! every BGSAVE_EVERY seconds while the writes go on, and at SHRINK_AT of the
//! time another process shrinks the pool to half of what the server holds.
//! Every second the server's RSS and huge pages are sampled.
//!
//! Invariants checked (a broken one is a failure, exit status 1): the server
//! never dies, every BGSAVE ends `ok` and counts as a save, every value read
//! back is the one last written, the last dump passes `redis-check-rdb`, the
//! library's summary is final with no errors and one child summary per BGSAVE,
//! and memory is steady (per key, the last tenth of the run within 25 % of the
//! first tenth after the load, huge pages included). The pool and everything else it
//! changes are restored (kernel_state guards, journaled).

use super::redis::{client_conn, info_field, server_args, server_path, Conn, Reply};
use anyhow::{bail, Context, Result};
use hugetune_format::env;
use hugetune_format::plan::{self, ForkSafe, PlanOptions};
use hugetune_format::summary::Summary;
use hugetune_host::kernel_state::{
    begin_spawn, lock_kernel_state, set_hugetlb_pool_holding, track_child,
};
use hugetune_host::machine;
use hugetune_host::procfs;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::stats::{median_u64, Rng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Minutes of writes and BGSAVEs after the load
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Keys in the dataset
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub keys: u64,
    /// Mean value size in bytes (values vary from half to one and a half of it)
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(32..=(1 << 20)))]
    pub value_bytes: u64,
    /// Seconds between BGSAVEs (a BGSAVE still running delays the next)
    #[arg(long, default_value_t = 10.0)]
    pub bgsave_every: f64,
    /// When another process shrinks the pool, as a fraction of the write phase
    /// (1 or more: never)
    #[arg(long, default_value_t = 0.5)]
    pub shrink_at: f64,
    /// The runtime library's plan file (default: heap-small and heap-large on
    /// hugetlb-2m, fork-safe copy)
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Two minutes, 100 000 keys (the test suite's version)
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
    /// Also write soak.json into DIR
    #[arg(long = "out-dir", alias = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// One sample of the server.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t_s: f64,
    /// Keys in the dataset then.
    pub keys: u64,
    pub rss: u64,
    pub hugetlb: u64,
    pub anon_huge: u64,
    pub pool_total: u64,
    pub pool_free: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Bgsave {
    pub started_s: f64,
    pub seconds: f64,
    pub fork_ms: f64,
    pub status: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakReport {
    pub keys: u64,
    pub value_bytes: u64,
    pub minutes: f64,
    pub plan: String,
    pub pool_pages: u64,
    pub load_s: f64,
    pub writes: u64,
    /// Keys at the end (the key space grows by a quarter during the writes).
    pub keys_end: u64,
    pub reads_checked: u64,
    pub bgsaves: Vec<Bgsave>,
    pub bgsaves_ok: usize,
    pub rdb_saves: u64,
    pub shrink: Option<String>,
    pub samples: Vec<Sample>,
    /// Medians of rss + hugetlb over the first and the last tenth of the write
    /// phase, and the same per key.
    pub memory_first: u64,
    pub memory_last: u64,
    pub per_key_first: u64,
    pub per_key_last: u64,
    pub hugetlb_first: u64,
    pub hugetlb_last: u64,
    pub server_exit: Option<i32>,
    pub rdb_check: String,
    pub summary_errors: Vec<String>,
    pub child_summaries: usize,
    pub summary_forks: u64,
    pub fallbacks: Vec<String>,
    pub peak_hugetlb_pages: u64,
    /// Broken invariants; empty when the soak passed.
    pub failures: Vec<String>,
}

/// The soak's default plan: the demanding one (every heap category on the
/// pool, forks protected by copying).
fn default_plan() -> String {
    plan::plan_text_with(
        &[
            (Category::HeapSmall, Backing::Hugetlb2m),
            (Category::HeapLarge, Backing::Hugetlb2m),
        ],
        65536,
        &PlanOptions {
            fork_safe: Some(ForkSafe::Copy),
            ..PlanOptions::default()
        },
    )
}

/// The value of key `k` at version `v`: its size varies with both; the first
/// 12 bytes say whose it is.
fn value(k: u64, v: u32, mean: u64, buf: &mut Vec<u8>) {
    // A hash of (key, version): sizes spread over [mean/2, 3*mean/2).
    let h = Rng(k.wrapping_mul(0x1_0000_0001) ^ u64::from(v) << 40).below(mean.max(1));
    let n = (mean / 2 + h).max(12) as usize;
    buf.clear();
    buf.extend_from_slice(&k.to_le_bytes());
    buf.extend_from_slice(&v.to_le_bytes());
    while buf.len() < n {
        buf.push(b'a' + ((buf.len() as u64 + k) % 26) as u8);
    }
}

fn key(k: u64) -> String {
    format!("key:{k:010}")
}

fn sample(pid: u32, t: f64, keys: u64) -> Option<Sample> {
    let u = procfs::read_huge_usage(pid)?;
    let p = machine::pool(2048);
    Some(Sample {
        t_s: t,
        keys,
        rss: u.rss,
        hugetlb: u.hugetlb,
        anon_huge: u.anon_huge,
        pool_total: p.as_ref().map_or(0, |p| p.nr),
        pool_free: p.as_ref().map_or(0, |p| p.available()),
    })
}

fn info_u64(c: &mut Conn, section: &str, field: &str) -> Result<u64> {
    let i = c.info(section)?;
    info_field(&i, field)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("INFO {section} has no {field}"))
}

pub fn run(a: Args) -> Result<i32> {
    let (minutes, keys, every, shrink_at) = if a.quick {
        (2.0, 100_000, 10.0, 0.5)
    } else {
        (a.minutes, a.keys, a.bgsave_every, a.shrink_at)
    };
    if !(minutes > 0.0 && every > 0.0) {
        bail!("--minutes and --bgsave-every must be positive");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the soak sizes and shrinks a hugetlb pool: run it as root");
    }
    let server = server_path().map_err(anyhow::Error::msg)?;
    let art = crate::artifacts::find()?;
    let plan_text = match &a.plan {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("reading the plan {}", p.display()))?,
        None => default_plan(),
    };
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-soak.")?;
    let plan_file = dir.path().join("plan");
    std::fs::write(&plan_file, &plan_text)?;
    let summary_tmpl = dir.path().join("summary.%p.json");

    let lock = lock_kernel_state()?;
    // The dataset with the allocators' overhead, and room for the variation.
    let pool_pages = ((keys * (a.value_bytes * 3 / 2 + 120)) >> 21) + 32;
    let taken = machine::pool(2048).map_or(0, |p| p.taken());
    let pool = set_hugetlb_pool_holding(&lock, 2048, pool_pages + taken)?;
    let mut r = SoakReport {
        keys,
        value_bytes: a.value_bytes,
        minutes,
        plan: plan_text.clone(),
        pool_pages: pool.now.saturating_sub(taken),
        ..Default::default()
    };
    eprintln!(
        "soak: {keys} keys x ~{} B, {minutes} min, BGSAVE every {every} s, pool of {} pages, plan:\n{}",
        a.value_bytes,
        r.pool_pages,
        plan_text.trim_end()
    );

    let port = hugetune_capture::session::free_port()?;
    let mut cmd = Command::new(&server);
    cmd.args(server_args(&port.to_string(), dir.path()))
        .envs(env::apply_env(
            &art.runtime_lib,
            &plan_file,
            Some(&summary_tmpl),
            &[],
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            dir.path().join("stderr"),
        )?));
    let spawning = begin_spawn()?;
    let mut child = cmd.spawn().context("starting redis-server")?;
    let pid = child.id();
    let _tracked = track_child(pid);
    drop(spawning);

    let outcome = drive(&mut r, port, pid, every, shrink_at, minutes, a.value_bytes);
    if let Err(e) = &outcome {
        r.failures.push(format!("{e:#}"));
    }
    // SIGTERM: redis exits through exit(), the library writes its summary.
    // SAFETY: kill has no memory effects; pid is our child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    use std::os::unix::process::ExitStatusExt;
    r.server_exit = status.and_then(|s| s.code().or(s.signal().map(|g| 128 + g)));
    if r.server_exit != Some(0) {
        r.failures.push(format!(
            "redis-server ended with status {:?}",
            r.server_exit
        ));
    }
    drop(pool);
    drop(lock);
    check_dump(&mut r, dir.path(), port);
    check_summaries(&mut r, dir.path(), pid);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    if stderr.contains("hugetune:") {
        r.failures.push(format!(
            "the runtime library spoke on stderr: {}",
            stderr
                .lines()
                .find(|l| l.contains("hugetune:"))
                .unwrap_or("")
        ));
    }
    steady(&mut r);
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d)?;
        std::fs::write(d.join("soak.json"), serde_json::to_string_pretty(&r)?)?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", render(&r));
    }
    Ok(if r.failures.is_empty() { 0 } else { 1 })
}

#[allow(clippy::too_many_arguments)]
fn drive(
    r: &mut SoakReport,
    port: u16,
    pid: u32,
    every: f64,
    shrink_at: f64,
    minutes: f64,
    mean: u64,
) -> Result<()> {
    let mut c = client_conn(port, Duration::from_secs(30))?;
    let mut buf = Vec::new();
    let batch = 1000u64;
    let keys = r.keys;
    let t0 = Instant::now();
    // Load.
    let mut k = 0;
    while k < keys {
        let end = (k + batch).min(keys);
        for i in k..end {
            value(i, 0, mean, &mut buf);
            c.send(&[b"SET", key(i).as_bytes(), &buf])?;
        }
        c.expect_ok(end - k)?;
        k = end;
    }
    r.load_s = t0.elapsed().as_secs_f64();
    crate::progress::println(&format!("soak: loaded in {:.1} s", r.load_s));
    // The key space grows by a quarter over the write phase: after the shrink
    // the server needs memory the pool no longer has.
    let max_keys = keys + keys / 4;
    let mut ver = vec![0u32; max_keys as usize];
    let mut written = keys;
    let mut rng = Rng(0x5eed_1234_5678_9abc);
    let start = Instant::now();
    let total = Duration::from_secs_f64(minutes * 60.0);
    let shrink_t = Duration::from_secs_f64(minutes * 60.0 * shrink_at);
    let mut next_sample = Duration::ZERO;
    let mut next_bgsave = Duration::from_secs_f64(every);
    let mut bg: Option<(Instant, f64, u64)> = None; // (started, at, rdb_saves before)
    let mut next_poll = Instant::now();
    let bar = crate::progress::Progress::bar("soak", total.as_secs(), "s");
    while start.elapsed() < total || bg.is_some() {
        let now = start.elapsed();
        if now >= next_sample {
            bar.set_position(now.as_secs().min(total.as_secs()));
            bar.set_message(format!(
                "{} BGSAVEs ok, {:.1} M writes",
                r.bgsaves_ok,
                r.writes as f64 / 1e6
            ));
            if let Some(s) = sample(pid, now.as_secs_f64(), written) {
                r.samples.push(s);
            } else {
                bail!("redis-server (pid {pid}) is gone");
            }
            next_sample += Duration::from_secs(1);
        }
        if r.shrink.is_none() && shrink_at < 1.0 && now >= shrink_t {
            r.shrink = Some(shrink_pool(pid)?);
            crate::progress::println(&format!("soak: {}", r.shrink.as_deref().unwrap_or("")));
        }
        if bg.is_none() && now >= next_bgsave && now < total {
            let saves = info_u64(&mut c, "persistence", "rdb_saves")?;
            match c.call(&[b"BGSAVE"])? {
                Reply::Simple(_) => {}
                other => bail!("BGSAVE answered {other:?}"),
            }
            bg = Some((Instant::now(), now.as_secs_f64(), saves));
        }
        if let Some((t, at, saves)) = bg {
            if Instant::now() >= next_poll {
                next_poll = Instant::now() + Duration::from_millis(100);
                let p = c.info("persistence")?;
                if info_field(&p, "rdb_bgsave_in_progress").as_deref() == Some("0") {
                    let status = info_field(&p, "rdb_last_bgsave_status").unwrap_or_default();
                    let after: u64 = info_field(&p, "rdb_saves")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let fork_us = info_u64(&mut c, "stats", "latest_fork_usec")?;
                    let ok = status == "ok" && after == saves + 1;
                    r.bgsaves.push(Bgsave {
                        started_s: at,
                        seconds: t.elapsed().as_secs_f64(),
                        fork_ms: fork_us as f64 / 1000.0,
                        status: if ok || status != "ok" {
                            status
                        } else {
                            format!("ok but rdb_saves {saves} -> {after}")
                        },
                    });
                    r.bgsaves_ok += usize::from(ok);
                    r.rdb_saves = after;
                    bg = None;
                    let due = Duration::from_secs_f64(at + every);
                    next_bgsave = due.max(start.elapsed());
                } else if t.elapsed() > Duration::from_secs(600) {
                    bail!("a BGSAVE has been running for 10 minutes");
                }
            }
        }
        // A batch of writes (a few new keys among them), and reads of a sample.
        let progress = (now.as_secs_f64() / total.as_secs_f64()).min(1.0);
        let range = keys + ((keys / 4) as f64 * progress) as u64;
        for _ in 0..batch {
            let k = if written < range {
                written += 1;
                written - 1
            } else {
                rng.below(written)
            };
            let v = ver[k as usize].wrapping_add(1);
            ver[k as usize] = v;
            value(k, v, mean, &mut buf);
            c.send(&[b"SET", key(k).as_bytes(), &buf])?;
        }
        c.expect_ok(batch)?;
        r.writes += batch;
        let reads: Vec<u64> = (0..20).map(|_| rng.below(written)).collect();
        for &k in &reads {
            c.send(&[b"GET", key(k).as_bytes()])?;
        }
        c.flush()?;
        for &k in &reads {
            value(k, ver[k as usize], mean, &mut buf);
            match c.reply()? {
                Reply::Bulk(Some(v)) if v == buf => {}
                Reply::Bulk(Some(v)) => bail!(
                    "GET {} returned a wrong value ({} bytes, version {:?}; {} bytes expected)",
                    key(k),
                    v.len(),
                    v.get(8..12)
                        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default())),
                    buf.len()
                ),
                other => bail!("GET {} answered {other:?}", key(k)),
            }
        }
        r.reads_checked += reads.len() as u64;
    }
    r.keys_end = written;
    Ok(())
}

/// Another process (a shell, as an operator would) shrinks the 2 MB pool to
/// half of the pages the server holds: free pages go at once, pages in use
/// become surplus and leave the pool when freed.
fn shrink_pool(pid: u32) -> Result<String> {
    let p = machine::pool(2048).context("no 2 MB pool")?;
    let held = procfs::read_huge_usage(pid).map_or(0, |u| u.hugetlb >> 21);
    let persistent = p.nr.saturating_sub(p.surplus);
    let target = persistent.saturating_sub(p.available() + held.div_ceil(2));
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo {target} > {}/hugepages-2048kB/nr_hugepages",
            machine::HUGEPAGES_SYSFS
        ))
        .status()
        .context("running sh to shrink the pool")?;
    if !st.success() {
        bail!("shrinking the pool failed ({st})");
    }
    let after = machine::pool(2048).context("no 2 MB pool")?;
    Ok(format!(
        "another process shrank the 2 MB pool (persistent pages {persistent} -> {target}): \
         {} pages free before, {} after; the server held {held}",
        p.available(),
        after.available()
    ))
}

fn check_dump(r: &mut SoakReport, dir: &Path, port: u16) {
    let dump = dir.join(format!("dump-{port}.rdb"));
    if r.bgsaves.is_empty() {
        r.failures.push("no BGSAVE ran".into());
        return;
    }
    let Some(check) = super::config::find_program("redis-check-rdb") else {
        r.rdb_check = "redis-check-rdb not installed: not checked".into();
        return;
    };
    match Command::new(check).arg(&dump).output() {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            r.rdb_check = text
                .lines()
                .rev()
                .find(|l| l.contains("keys read") || l.contains("RDB looks OK"))
                .unwrap_or("")
                .trim()
                .to_string();
            if !o.status.success() || !text.contains("RDB looks OK") {
                r.failures.push(format!(
                    "redis-check-rdb refused the last dump: {}",
                    text.lines().last().unwrap_or("")
                ));
            }
        }
        Err(e) => r.failures.push(format!("running redis-check-rdb: {e}")),
    }
}

fn check_summaries(r: &mut SoakReport, dir: &Path, pid: u32) {
    let mut main = None;
    for v in crate::stages::take_summaries(dir) {
        match Summary::from_value(&v) {
            Ok(s) if s.pid == u64::from(pid) => {
                r.summary_forks = v["forks"].as_u64().unwrap_or(0);
                r.peak_hugetlb_pages = v["peak_huge_pages"]["hugetlb-2m"].as_u64().unwrap_or(0);
                main = Some(s);
            }
            Ok(s) => {
                r.child_summaries += 1;
                r.summary_errors.extend(s.errors);
            }
            Err(err) => r
                .summary_errors
                .push(format!("a summary that does not parse: {err}")),
        }
    }
    match main {
        None => r
            .failures
            .push("the server left no runtime summary".to_string()),
        Some(s) => {
            if !s.is_final {
                r.failures.push("the server's summary is not final".into());
            }
            r.summary_errors.extend(s.errors.iter().cloned());
            for f in &s.fallbacks {
                r.fallbacks
                    .push(format!("{}, {} time(s)", f.describe("→"), f.count));
            }
        }
    }
    if !r.summary_errors.is_empty() {
        r.failures.push(format!(
            "the runtime library reported errors: {}",
            r.summary_errors.join("; ")
        ));
    }
    let forks = r.bgsaves.len() as u64;
    if r.summary_forks != forks {
        r.failures.push(format!(
            "the summary counts {} forks for {forks} BGSAVEs",
            r.summary_forks
        ));
    }
    if r.child_summaries != r.bgsaves.len() {
        r.failures.push(format!(
            "{} BGSAVE children left a summary, of {}",
            r.child_summaries,
            r.bgsaves.len()
        ));
    }
    if r.peak_hugetlb_pages > r.pool_pages {
        r.failures.push(format!(
            "the summary's peak of {} hugetlb pages exceeds the pool of {}",
            r.peak_hugetlb_pages, r.pool_pages
        ));
    }
}

/// Memory over the first and last tenth of the write phase.
fn steady(r: &mut SoakReport) {
    let n = r.samples.len();
    if n < 10 {
        r.failures
            .push(format!("only {n} samples of the server were taken"));
        return;
    }
    let tenth = (n / 10).max(1);
    let mem = |s: &Sample| s.rss + s.hugetlb;
    r.memory_first = median_u64(r.samples[..tenth].iter().map(mem));
    r.memory_last = median_u64(r.samples[n - tenth..].iter().map(mem));
    let per_key = |s: &Sample| (s.rss + s.hugetlb) / s.keys.max(1);
    r.per_key_first = median_u64(r.samples[..tenth].iter().map(per_key));
    r.per_key_last = median_u64(r.samples[n - tenth..].iter().map(per_key));
    r.hugetlb_first = median_u64(r.samples[..tenth].iter().map(|s| s.hugetlb));
    r.hugetlb_last = median_u64(r.samples[n - tenth..].iter().map(|s| s.hugetlb));
    if r.per_key_last as f64 > r.per_key_first as f64 * 1.25 {
        r.failures.push(format!(
            "memory per key grew from {} B to {} B (RSS + hugetlb, medians of the first and last tenth)",
            r.per_key_first, r.per_key_last
        ));
    }
    if r.bgsaves_ok != r.bgsaves.len() {
        r.failures.push(format!(
            "{} of {} BGSAVEs failed",
            r.bgsaves.len() - r.bgsaves_ok,
            r.bgsaves.len()
        ));
    }
}

pub fn render(r: &SoakReport) -> String {
    let b = hugetune_render::bytes;
    let secs: Vec<f64> = r.bgsaves.iter().map(|x| x.seconds).collect();
    let forks: Vec<f64> = r.bgsaves.iter().map(|x| x.fork_ms).collect();
    let med = |v: Vec<f64>| hugetune_model::stats::median_finite(&v).unwrap_or(0.0);
    let mut s = format!(
        "soak: redis-server, {} keys x ~{} B, {:.1} min after a {:.1} s load, pool {} pages\n",
        r.keys, r.value_bytes, r.minutes, r.load_s, r.pool_pages
    );
    s += &format!(
        "  writes {} (each sampled read back: {} reads, all correct unless listed below)\n",
        r.writes, r.reads_checked
    );
    s += &format!(
        "  BGSAVE: {} ok of {} (rdb_saves {}), median {:.2} s, fork median {:.1} ms, max {:.1} ms; last dump: {}\n",
        r.bgsaves_ok,
        r.bgsaves.len(),
        r.rdb_saves,
        med(secs),
        med(forks.clone()),
        forks.iter().copied().fold(0.0, f64::max),
        r.rdb_check
    );
    if let Some(x) = &r.shrink {
        s += &format!("  {x}\n");
    }
    s += &format!(
        "  memory (RSS + hugetlb, medians): first tenth {} ({} B/key), last tenth {} ({} B/key, {} keys); hugetlb {} -> {}\n",
        b(r.memory_first),
        r.per_key_first,
        b(r.memory_last),
        r.per_key_last,
        r.keys_end,
        b(r.hugetlb_first),
        b(r.hugetlb_last)
    );
    s += &format!(
        "  runtime summary: {} forks, {} child summaries, peak {} hugetlb pages, exit {:?}\n",
        r.summary_forks, r.child_summaries, r.peak_hugetlb_pages, r.server_exit
    );
    for f in &r.fallbacks {
        s += &format!("  fallback: {f}\n");
    }
    if r.failures.is_empty() {
        s += "  PASSED: no crash, every BGSAVE saved, values intact, memory steady, summary consistent\n";
    } else {
        for f in &r.failures {
            s += &format!("  FAILED: {f}\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_say_whose_they_are_and_vary_in_size() {
        let mut a = Vec::new();
        let mut sizes = std::collections::BTreeSet::new();
        for v in 0..50 {
            value(7, v, 500, &mut a);
            assert_eq!(u64::from_le_bytes(a[..8].try_into().unwrap()), 7);
            assert_eq!(u32::from_le_bytes(a[8..12].try_into().unwrap()), v);
            assert!((250..750).contains(&a.len()), "{}", a.len());
            sizes.insert(a.len());
        }
        assert!(sizes.len() > 20, "sizes vary: {sizes:?}");
        let p = default_plan();
        assert!(p.contains("fork-safe copy"), "{p}");
        assert!(p.contains("heap-small arena hugetlb-2m"), "{p}");
        assert!(p.contains("heap-large hugetlb-2m"), "{p}");
    }

    #[test]
    fn steadiness_and_bgsave_failures_are_failures() {
        let s = |t: f64, rss: u64| Sample {
            t_s: t,
            keys: 10,
            rss,
            hugetlb: 0,
            anon_huge: 0,
            pool_total: 0,
            pool_free: 0,
        };
        let mut r = SoakReport {
            samples: (0..100).map(|i| s(i as f64, 1000)).collect(),
            ..Default::default()
        };
        steady(&mut r);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let mut r = SoakReport {
            samples: (0..100).map(|i| s(i as f64, 1000 + 20 * i)).collect(),
            bgsaves: vec![Bgsave {
                started_s: 1.0,
                seconds: 1.0,
                fork_ms: 1.0,
                status: "err".into(),
            }],
            ..Default::default()
        };
        steady(&mut r);
        assert_eq!(r.failures.len(), 2, "{:?}", r.failures);
    }
}
