//! `hugetune run`: the online agent. Looks up the program's directives, plans for
//! the pages available now, runs it with the plan applied, and records the run.
//! Signals sent to hugetune go to the program (forwarded), which ends as it would
//! alone; its exit status is hugetune's. With `--exec` hugetune becomes the
//! program instead (a service's main process), and records nothing. `--json`
//! ends with where the plan came from (profile, machine class, hosts).
//! A program the runtime library cannot enter (static, Go) takes its plan from
//! outside (stages::apply, docs/attach.md). `--plan FILE` applies a plan file
//! instead of the stored plan (not recorded). `-p PID` applies the stored plan
//! (or `--plan FILE`) to a running process from outside, once or for
//! `--watch DURATION`: only MADV_COLLAPSE, which never changes its memory's
//! contents.

use crate::{stages, Ctx};
use anyhow::{Context, Result};
use hugetune_format::{env, plan};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(clap::Args)]
pub struct Args {
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
    /// Print why the plan was chosen
    #[arg(long)]
    explain: bool,
    /// Become the program (exec) once the plan is set up, instead of running it as a
    /// child: it keeps hugetune's PID and gets its signals itself, as a service's main
    /// process should. The run is then not recorded in the database, and the runtime
    /// library's summary is not collected; nor can a per-size THP control be set
    /// for the run (mTHP sizes count only where usable already)
    #[arg(long)]
    exec: bool,
    /// After the program ends, print one JSON object (its last line on standard
    /// output): the exit status, the plan, and where the plan came from (profile,
    /// machine class, the hosts that analyzed and validated it)
    #[arg(long, conflicts_with = "exec")]
    json: bool,
    /// On a PostgreSQL store, how long (seconds) the plan a start-up cache entry
    /// holds is used without asking the store first (it is confirmed while the
    /// program runs); older entries are confirmed by one query before the start.
    /// A bar another host's loss sets reaches this host within this time; 0
    /// confirms before every start
    #[arg(long, value_name = "SECONDS", default_value_t = stages::start_cache::DEFAULT_TTL.as_secs())]
    cache_ttl: u64,
    /// Do not use or write the start-up cache (look the plan up in the store)
    #[arg(long)]
    no_cache: bool,
    /// Apply this plan file (docs/formats.md §3) instead of the stored plan; the
    /// run is not recorded
    #[arg(long, value_name = "FILE", conflicts_with = "exec")]
    plan: Option<PathBuf>,
    /// Apply the plan to the running process PID from outside (MADV_COLLAPSE of
    /// its planned ranges, which keeps their contents) and print what became huge.
    /// The plan is the one stored for its program and arguments (/proc/PID/exe
    /// and cmdline), or --plan FILE
    #[arg(short = 'p', long, value_name = "PID", conflicts_with_all = ["exec", "command"])]
    pid: Option<u32>,
    /// With -p: keep applying for this long (e.g. 30s, 500ms, 10m), collapsing
    /// ranges as the process populates them, or until it exits
    #[arg(long, value_name = "DURATION", requires = "pid", value_parser = parse_duration)]
    watch: Option<std::time::Duration>,
    /// The program and its arguments (after --)
    #[arg(last = true, required_unless_present = "pid")]
    command: Vec<OsString>,
}

/// A duration: a number with `ms`, `s`, `m` or `h` (seconds without a unit).
pub(crate) fn parse_duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 30s, 500ms, 10m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("'{s}': the unit is ms, s, m or h")),
    };
    std::time::Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("'{s}' is not a duration hugetune can wait"))
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    if let Some(pid) = a.pid {
        return attach_pid(ctx, &a, pid);
    }
    if a.watch.is_some() {
        anyhow::bail!(
            "--watch goes with -p PID (a program hugetune starts is watched until it ends)"
        );
    }
    // A wrapper in a unit file: signals are the program's, and hugetune waits
    // for its end (exit status included) before it records the run. Under
    // --exec the program is the process itself: nothing to forward.
    if !a.exec {
        hugetune_host::kernel_state::forward_signals();
    }
    let art = crate::artifacts::find()?;
    if let Some(f) = &a.plan {
        return plan_file_run(&a, &art, f);
    }
    let cache = start_cache(ctx, &a);
    let ttl = std::time::Duration::from_secs(a.cache_ttl);
    let entry = cache
        .as_ref()
        .and_then(|(dir, key)| stages::start_cache::read(dir, key));
    let entry = match (entry, &cache) {
        (Some(c), Some((dir, key))) if c.age() < ttl => {
            return start_now(ctx, &a, &art, c, dir.clone(), key.clone());
        }
        (e, _) => e,
    };
    let db = ctx.db()?;
    let (found, how) = match (&entry, &cache) {
        (Some(c), _) if c.confirm(&db)? => (Some(c.stored()), "confirmed"),
        (_, Some((dir, key))) => (
            stages::start_cache::look_up(&db, Some(dir), key, &a.command)?,
            "looked up",
        ),
        (_, None) => (stages::stored_predictions(&db, &a.command)?, "looked up"),
    };
    let Some(st) = found else {
        if a.exec {
            stages::note(format!(
                "no profile of this program yet: running it unchanged (try `hugetune optimize -- {}`)",
                stages::display_cmd(&a.command)
            ));
            drop(db);
            return exec(&a.command, &[]);
        }
        let code = stages::run_unchanged(&a.command)?;
        if a.json {
            println!(
                "{}",
                serde_json::json!({"exit_code": code, "plan": null, "source": null, "host": db.host_id()})
            );
        }
        return Ok(code);
    };
    if a.exec {
        let d = st.choose(&exec_availability(), a.min_gain);
        drop(db);
        return exec_plan(&a, &art, &st, &d);
    }
    applied(&a, &art, st, Later::Ready(Box::new(db)), how)
}

/// A start from a fresh cache entry: the program starts at once under its
/// plan; a thread connects to the store meanwhile, confirms the entry (one
/// query) or looks the plan up again and rewrites it for the next start, and
/// gives the connection the run is recorded with.
fn start_now(
    ctx: &Ctx,
    a: &Args,
    art: &crate::artifacts::Artifacts,
    c: stages::start_cache::Cached,
    dir: PathBuf,
    key: stages::start_cache::Key,
) -> Result<i32> {
    let st = c.stored();
    if a.exec {
        // Nothing is recorded under --exec: the store is not needed.
        let d = st.choose(&exec_availability(), a.min_gain);
        return exec_plan(a, art, &st, &d);
    }
    let ctx2 = Ctx {
        db_path: ctx.db_path.clone(),
        tlb: ctx.tlb.clone(),
        verbose: ctx.verbose,
    };
    let argv = a.command.clone();
    let confirm = std::thread::spawn(move || -> Result<hugetune_store::db::Db> {
        let db = ctx2.db()?;
        if !c.confirm(&db)? {
            // Changed: the full look-up (this host registering afresh), its
            // result the entry of the next start.
            stages::start_cache::look_up(&db, Some(&dir), &key, &argv)?;
        }
        Ok(db)
    });
    applied(a, art, st, Later::Thread(confirm), "cached")
}

/// The store `run` records into: open already, or being opened (and the
/// start-up cache entry confirmed) while the program runs.
enum Later {
    Ready(Box<hugetune_store::db::Db>),
    Thread(std::thread::JoinHandle<Result<hugetune_store::db::Db>>),
}

/// The start-up cache's directory and this start's key, on a PostgreSQL store
/// (SQLite, in-process, looks up in a few milliseconds: no cache); None with a
/// note when the cache cannot be used.
fn start_cache(ctx: &Ctx, a: &Args) -> Option<(PathBuf, stages::start_cache::Key)> {
    let fleet = ctx.db_path.to_str().is_some_and(hugetune_store::db::is_url);
    if !fleet || a.no_cache {
        return None;
    }
    let r = stages::start_cache::cache_dir().and_then(|dir| {
        let key = stages::start_cache::Key::new(
            &ctx.db_path,
            &hugetune_store::identity::host_id(),
            ctx.tlb.as_deref(),
            &a.command,
        )?;
        Ok((dir, key))
    });
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            stages::note(format!("no start-up cache: {e:#}"));
            None
        }
    }
}

/// What `--exec` can use now: hugetune is gone once the program runs, so no
/// per-size THP control can be set for the run and restored after it; only
/// the mTHP sizes usable as the controls read now count.
fn exec_availability() -> hugetune_model::plan::Availability {
    hugetune_model::plan::Availability {
        thp_settable: vec![],
        ..stages::availability_now()
    }
}

/// Replaces hugetune with the program under plan `d`.
fn exec_plan(
    a: &Args,
    art: &crate::artifacts::Artifacts,
    st: &stages::Stored,
    d: &hugetune_model::plan::PlanDecision,
) -> Result<i32> {
    stages::note(format!(
        "applying {} (profile #{})",
        super::decision_text(d),
        st.profile_id
    ));
    // `run` never grows a pool (it plans for the pages free now) and changes
    // no other kernel setting, so nothing is left to restore after the exec.
    let opts = stages::jvm::for_command(
        &plan::PlanOptions::for_decision(&st.program, d),
        &a.command,
        &stages::availability_now,
        true,
    );
    let text = plan::plan_text_with(&d.assignments, st.threshold, &opts);
    let plan_file = kept_plan(&text)?;
    let mut e = env::apply_env(&art.runtime_lib, &plan_file, None, &d.assignments);
    stages::jvm::environment(&opts, &a.command, None, &mut e);
    exec(&a.command, &e)
}

/// Runs the program under `st`'s plan, records the run and prints what
/// `--json` asks for; `how` says where the plan came from at start-up.
fn applied(
    a: &Args,
    art: &crate::artifacts::Artifacts,
    st: stages::Stored,
    later: Later,
    how: &str,
) -> Result<i32> {
    let d = st.choose(&stages::availability_now(), a.min_gain);
    if a.explain || d.prediction.is_none() {
        for r in &d.reasons {
            stages::note(format!("  - {r}"));
        }
    }
    stages::note(format!(
        "applying {} (profile #{})",
        super::decision_text(&d),
        st.profile_id
    ));
    let mut db = None;
    let mut failed = None;
    let r = stages::run_applied_then(art, &a.command, &st, &d, |run| {
        let opened = match later {
            Later::Ready(db) => Ok(*db),
            Later::Thread(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the store's connection thread panicked"))
                .and_then(|r| r),
        };
        // The program ran: a store that cannot be reached costs the record
        // of the run, not the program's exit status.
        match opened.and_then(|d| d.insert_run(run).map(|_| d)) {
            Ok(d) => db = Some(d),
            Err(e) => {
                stages::note(format!("the run was not recorded in the store: {e:#}"));
                failed = Some(format!("{e:#}"));
            }
        }
        Ok(())
    })?;
    stages::note(format!(
        "done in {:.3} s; {} on huge pages",
        r.stats.wall_s,
        hugetune_render::bytes(r.huge_bytes)
    ));
    for rep in &r.attach {
        stages::note(format!("applied from outside to process {}:", rep.pid));
        for l in stages::attach_lines(rep) {
            stages::note(format!("  {l}"));
        }
    }
    if r.attach.is_empty() {
        if let Some(m) = stages::missing_summary(&r.stats, &r.summaries) {
            stages::note(m);
        }
    }
    for f in stages::fallbacks(&[serde_json::Value::Array(r.summaries)]) {
        stages::note(format!("fallback: {f}"));
    }
    if a.json {
        let mapping = d.prediction.as_ref().map(|p| p.label.as_str());
        println!(
            "{}",
            serde_json::json!({
                "exit_code": r.stats.exit_code, "wall_s": r.stats.wall_s, "huge_bytes": r.huge_bytes,
                "plan": {"mapping": d.label(), "assignments": d.assignments, "sites": d.sites},
                "source": match &db {
                    Some(db) => serde_json::to_value(db.provenance(st.profile_id, mapping)?)?,
                    None => serde_json::Value::Null,
                },
                "host": hugetune_store::identity::host_id(),
                "start": {"plan": how, "store_error": failed},
                "attach": r.attach,
            })
        );
    }
    Ok(r.stats.exit_code)
}

/// Replaces hugetune with the program; returns only when that fails. The
/// standard library resets the signal mask and SIGPIPE (which Rust ignores) for
/// it, and hugetune's own descriptors are close-on-exec.
fn exec(argv: &[OsString], env: &[(String, String)]) -> Result<i32> {
    let e = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .exec();
    Err(e).with_context(|| format!("cannot run {}", stages::display_cmd(&argv[..1])))
}

/// The plan file of an exec'd program: it must outlive hugetune (the library
/// reads it in every process the program starts), so it is kept, one file per
/// plan text, in the cache directory beside the extracted artifacts.
fn kept_plan(text: &str) -> Result<PathBuf> {
    let hash = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    let dir = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("hugetune/plans");
    let path = dir.join(format!("{hash:016x}.plan"));
    if std::fs::read(&path).is_ok_and(|b| b == text.as_bytes()) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{hash:016x}.{}", std::process::id()));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// `run --plan FILE -- CMD`: the plan file applied as it is, by the runtime
/// library, or from outside for a program the library cannot enter. Not
/// recorded (no profile says what the plan was chosen for).
fn plan_file_run(
    a: &Args,
    art: &crate::artifacts::Artifacts,
    file: &std::path::Path,
) -> Result<i32> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the plan {}", file.display()))?;
    let outside = hugetune_attach::OutsidePlan::parse(&text)
        .with_context(|| format!("{} is not a plan hugetune can apply", file.display()))?;
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-run.")?;
    let mut spec = if stages::preload_can_enter(&a.command) {
        stages::note(format!("applying the plan {}", file.display()));
        let plan_path = std::fs::canonicalize(file)?;
        // glibc's THP tunable serves `heap-small thp-2m` (not the arena form).
        let tunable = text.lines().any(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect::<Vec<_>>()
                == ["heap-small", "thp-2m"]
        });
        let assignments: Vec<_> = if tunable {
            vec![(
                hugetune_model::category::Category::HeapSmall,
                hugetune_model::page::Backing::Thp2m,
            )]
        } else {
            vec![]
        };
        let mut spec = hugetune_capture::runner::RunSpec::new(a.command.clone());
        spec.env = env::apply_env(
            &art.runtime_lib,
            &plan_path,
            Some(&dir.path().join("summary.%p.json")),
            &assignments,
        );
        spec
    } else {
        stages::note(format!(
            "{}: the runtime library cannot enter this program (static or Go): the plan {} ({}) \
             is applied from outside (MADV_HUGEPAGE at fault time, MADV_COLLAPSE after)",
            stages::display_cmd(&a.command[..1]),
            file.display(),
            outside.categories().join(", ")
        ));
        for n in &outside.notes {
            stages::note(n);
        }
        stages::outside_spec(&a.command, outside, dir.path())?
    };
    spec.stdout = hugetune_capture::runner::Output::Inherit;
    let stats = hugetune_capture::runner::run(&spec)?;
    let summaries = stages::take_summaries(dir.path());
    let attach = stages::take_attach_reports(dir.path());
    let huge = stages::summary_huge_bytes(&summaries)
        .max(stages::attach_huge_bytes(&attach))
        .max(stats.peak.huge());
    stages::note(format!(
        "done in {:.3} s; {} on huge pages",
        stats.wall_s,
        hugetune_render::bytes(huge)
    ));
    for rep in &attach {
        stages::note(format!("applied from outside to process {}:", rep.pid));
        for l in stages::attach_lines(rep) {
            stages::note(format!("  {l}"));
        }
    }
    for f in stages::fallbacks(&[serde_json::Value::Array(summaries.clone())]) {
        stages::note(format!("fallback: {f}"));
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "exit_code": stats.exit_code, "wall_s": stats.wall_s, "huge_bytes": huge,
                "plan": {"file": file.display().to_string()},
                "summaries": summaries, "attach": attach,
            })
        );
    }
    Ok(stats.exit_code)
}

/// Set by SIGINT/SIGTERM while `run -p` watches: it stops and reports.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// `run -p PID`: the stored plan of the process's program (or `--plan FILE`)
/// applied to it from outside; what became huge printed.
fn attach_pid(ctx: &Ctx, a: &Args, pid: u32) -> Result<i32> {
    use hugetune_attach::process::{AttachError, Process};
    let proc = Process::open(pid).map_err(|e| match e {
        AttachError::NoProcess(_) => {
            anyhow::anyhow!("no process {pid} (it does not exist or has exited)")
        }
        e => e.into(),
    })?;
    let gone = || anyhow::anyhow!("process {pid} exited before its plan could be applied");
    let exe = proc.exe()?.ok_or_else(gone)?;
    let (plan, source) = match &a.plan {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading the plan {}", f.display()))?;
            let p = hugetune_attach::OutsidePlan::parse(&text)
                .with_context(|| format!("{} is not a plan hugetune can apply", f.display()))?;
            (p, serde_json::json!({"file": f.display().to_string()}))
        }
        None => stored_plan_of(ctx, a, &proc, &exe)?,
    };
    for n in &plan.notes {
        stages::note(n);
    }
    if plan.is_empty() {
        stages::note(format!(
            "the plan for {exe} puts nothing on huge pages: nothing to apply"
        ));
    }
    let opt = hugetune_attach::Options {
        once: a.watch.is_none(),
        duration: a.watch,
        ..Default::default()
    }
    .with_env_injection()
    .map_err(anyhow::Error::msg)?;
    if a.watch.is_some() {
        // Ctrl-C or a stop ends the watch with its report; the process is not
        // signalled.
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe {
            libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
            libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        }
    }
    stages::note(format!(
        "applying {} to process {pid} ({exe}) from outside{}",
        if plan.is_empty() {
            "nothing".to_string()
        } else {
            plan.categories().join(", ")
        },
        match a.watch {
            Some(d) => format!(", watching for {:.1} s", d.as_secs_f64()),
            None => String::new(),
        }
    ));
    let r = hugetune_attach::attach(&proc, &plan, &opt, Some(&STOP))?;
    if r.ended == "exited" && r.passes == 0 {
        return Err(gone());
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({"pid": pid, "program": exe, "plan": source, "attach": r})
        );
        return Ok(0);
    }
    println!(
        "process {pid} ({exe}): {} of {} planned on huge pages (verified in smaps)",
        hugetune_render::bytes(r.huge_bytes),
        hugetune_render::bytes(r.planned_bytes)
    );
    for l in stages::attach_lines(&r) {
        println!("  {l}");
    }
    Ok(0)
}

/// The stored plan for the process's program and arguments (the identity `run`
/// uses for a command: the executable's build-id and the argument signature).
fn stored_plan_of(
    ctx: &Ctx,
    a: &Args,
    proc: &hugetune_attach::process::Process,
    exe: &str,
) -> Result<(hugetune_attach::OutsidePlan, serde_json::Value)> {
    if exe.ends_with(" (deleted)") {
        anyhow::bail!(
            "process {}'s executable {exe} was replaced or deleted since it started: its identity \
             cannot be checked; give the plan with --plan FILE",
            proc.pid
        );
    }
    let cmdline = proc
        .read("cmdline")?
        .ok_or_else(|| anyhow::anyhow!("process {} exited", proc.pid))?;
    let mut argv: Vec<OsString> = vec![OsString::from(exe)];
    argv.extend(
        cmdline
            .split('\0')
            .skip(1)
            .filter(|s| !s.is_empty())
            .map(OsString::from),
    );
    let db = ctx.db()?;
    let Some(st) = stages::stored_predictions(&db, &argv)? else {
        anyhow::bail!(
            "no plan stored for {exe} in {}: profile it first (`hugetune optimize -- {}`), \
             or give a plan with --plan FILE",
            ctx.db_path.display(),
            stages::display_cmd(&argv)
        );
    };
    let d = st.choose(&stages::availability_now(), a.min_gain);
    if a.explain || d.prediction.is_none() {
        for r in &d.reasons {
            stages::note(format!("  - {r}"));
        }
    }
    if stages::preload_can_enter(&argv) {
        stages::note(format!(
            "{exe} can take the runtime library at its next start (`hugetune run -- ...`); \
             running now, it gets the THP part of its plan from outside"
        ));
    }
    let plan = hugetune_attach::OutsidePlan::from_assignments(&d.assignments, st.threshold);
    Ok((
        plan,
        serde_json::json!({"profile": st.profile_id, "mapping": d.label(), "assignments": d.assignments}),
    ))
}
