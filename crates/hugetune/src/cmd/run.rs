//! `hugetune run`: the online agent. Looks up the program's directives, plans for
//! the pages available now, runs it with the plan applied, and records the run.
//! Signals sent to hugetune go to the program (forwarded), which ends as it would
//! alone; its exit status is hugetune's. With `--exec` hugetune becomes the
//! program instead (a service's main process), and records nothing. `--json`
//! ends with where the plan came from (profile, machine class, hosts).

use crate::{stages, Ctx};
use anyhow::{Context, Result};
use hugetune_format::{env, plan};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

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
    /// library's summary is not collected
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
    /// The program and its arguments (after --)
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    // A wrapper in a unit file: signals are the program's, and hugetune waits
    // for its end (exit status included) before it records the run. Under
    // --exec the program is the process itself: nothing to forward.
    if !a.exec {
        hugetune_host::kernel_state::forward_signals();
    }
    let art = crate::artifacts::find()?;
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
        let d = st.choose(&stages::availability_now(), a.min_gain);
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
        let d = st.choose(&stages::availability_now(), a.min_gain);
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
        &plan::PlanOptions::for_program(&st.program)
            .with_sites(&d.sites)
            .with_jvm(d.jvm),
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
    if let Some(m) = stages::missing_summary(&r.stats, &r.summaries) {
        stages::note(m);
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
