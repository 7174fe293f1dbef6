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
    let db = ctx.db()?;
    let Some(st) = stages::stored_predictions(&db, &a.command)? else {
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
    if a.exec {
        // `run` never grows a pool (it plans for the pages free now) and changes
        // no other kernel setting, so nothing is left to restore after the exec.
        let text = plan::plan_text_with(
            &d.assignments,
            st.threshold,
            &plan::PlanOptions::for_program(&st.program).with_sites(&d.sites),
        );
        let plan_file = kept_plan(&text)?;
        drop(db);
        return exec(
            &a.command,
            &env::apply_env(&art.runtime_lib, &plan_file, None, &d.assignments),
        );
    }
    let r = stages::run_applied(&art, &db, &a.command, &st, &d)?;
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
                "source": db.provenance(st.profile_id, mapping)?, "host": db.host_id(),
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
