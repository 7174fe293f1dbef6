//! Stage 4, apply: a run with a plan applied. The plan file and the runtime
//! library's environment (hugetune_format::{plan, env}) in a private directory,
//! the hugetlb pool grown for the plan's pages (given back when the guard
//! drops), the library's summaries collected, and `hugetune run`'s applied run
//! recorded in the database. A program the library cannot enter (static, Go)
//! runs without it and takes the plan from outside instead (hugetune-attach,
//! docs/attach.md): a watcher collapses its planned ranges while it runs and
//! leaves its report (`attach.PID.json`) in the same directory as the library's
//! summaries.

use super::{display_cmd, note, strings, Stored};
use crate::artifacts::Artifacts;
use anyhow::{Context, Result};
use hugetune_attach::OutsidePlan;
use hugetune_capture::launcher;
use hugetune_capture::runner::{self, Launch, OnStart, Output, RunSpec};
use hugetune_format::env;
use hugetune_format::plan::{self, PlanOptions};
use hugetune_format::summary::Summary;
use hugetune_host::kernel_state::{
    lock_kernel_state_here, reserve_hugetlb_holding, KernelStateLock, PoolChange,
};
use hugetune_host::procfs::RunStats;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::plan::{Availability, PlanDecision};
use hugetune_store::db::NewRun;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Applied {
    /// Holds the plan file and the runtime library's summaries.
    pub dir: hugetune_host::kernel_state::Scratch,
    pub spec: RunSpec,
}

/// Whether the runtime library can enter the program `argv` runs; false (with
/// the plan applied from outside) for static and Go binaries. A launcher's
/// command is the launcher's process: the library follows it into its program,
/// and outside application is not tried (it follows one process only).
pub fn preload_can_enter(argv: &[OsString]) -> bool {
    if launcher::launcher_of(argv).is_some() {
        return true;
    }
    let Ok(p) = super::program_of(argv) else {
        // It will not start: the run says why.
        return true;
    };
    match hugetune_capture::elf::preload_can_enter(Path::new(&p.path)) {
        Ok(b) => b,
        Err(e) => {
            note(format!(
                "cannot tell whether the runtime library can enter {}: {e:#}: assuming it can",
                p.path
            ));
            true
        }
    }
}

/// A spec that applies `plan` from outside: the program runs without the
/// runtime library, under the fault-time tracer (hugetune_attach::trace, which
/// starts and reaps it; untraced when it cannot be, saying why), and a watcher
/// collapses its planned ranges from its start to its end; the report, with
/// the tracer's part, is left in `dir` as `attach.PID.json`.
pub fn outside_spec(argv: &[OsString], plan: OutsidePlan, dir: &Path) -> Result<RunSpec> {
    use hugetune_attach::report::TraceReport;
    use std::collections::HashMap;
    use std::sync::Mutex;
    let opt = hugetune_attach::Options::default()
        .with_env_injection()
        .map_err(anyhow::Error::msg)?;
    let mut spec = RunSpec::new(argv.to_vec());
    let (plan, dir) = (Arc::new(plan), dir.to_path_buf());
    // Each run of the spec (validate runs it again and again) has its own
    // tracer account, handed from the launch to the watcher by the child's pid.
    type Accounts = Arc<Mutex<HashMap<u32, Arc<Mutex<TraceReport>>>>>;
    let accounts: Accounts = Arc::default();
    let exe = super::program_of(argv).ok().map(|p| PathBuf::from(p.path));
    let (plan2, accounts2) = (plan.clone(), accounts.clone());
    spec.launch = Some(Launch(Arc::new(move |cmd| {
        let account = Arc::new(Mutex::new(TraceReport::default()));
        let (child, reaped) =
            hugetune_attach::trace::launch(cmd, plan2.clone(), exe.as_deref(), account.clone())?;
        accounts2
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(child.id(), account);
        Ok((child, reaped))
    })));
    spec.on_start = Some(OnStart(Arc::new(
        move |pid: u32| -> Box<dyn FnOnce() + Send> {
            // The pidfd is opened before the runner can reap the child, so it
            // names this child even if it ended at once.
            let proc = hugetune_attach::process::Process::open(pid);
            let (plan, mut opt, dir) = (plan.clone(), opt.clone(), dir.clone());
            let account = accounts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&pid);
            // Traced, the program's planned mappings are advised as they
            // appear: the watcher collapses only what was not.
            opt.leave_advised = account
                .as_ref()
                .is_some_and(|a| a.lock().unwrap_or_else(|p| p.into_inner()).ran);
            let t = std::thread::spawn(move || {
                let r = proc.and_then(|p| hugetune_attach::attach(&p, &plan, &opt, None));
                let mut report = r.unwrap_or_else(|e| {
                    note(format!("the plan could not be collapsed from outside: {e}"));
                    hugetune_attach::Report {
                        pid,
                        ended: "error".into(),
                        notes: vec![e.to_string()],
                        ..Default::default()
                    }
                });
                // The program has ended: what the tracer did for it is final.
                report.trace = account.map(|a| a.lock().unwrap_or_else(|p| p.into_inner()).clone());
                let path = dir.join(format!("attach.{pid}.json"));
                if let Err(e) = serde_json::to_vec(&report)
                    .map_err(std::io::Error::other)
                    .and_then(|b| std::fs::write(&path, b))
                {
                    note(format!("cannot write {}: {e}", path.display()));
                }
            });
            Box::new(move || {
                let _ = t.join();
            })
        },
    )));
    Ok(spec)
}

/// Collects (and removes) the outside applier's reports written in `dir`.
pub fn take_attach_reports(dir: &Path) -> Vec<hugetune_attach::Report> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("attach."))
        })
        .collect();
    paths.sort();
    let mut out = vec![];
    for p in paths {
        match std::fs::read(&p).map(|b| serde_json::from_slice(&b)) {
            Ok(Ok(r)) => out.push(r),
            Ok(Err(e)) => note(format!(
                "outside report {} is not readable: {e}",
                p.display()
            )),
            Err(_) => {}
        }
        let _ = std::fs::remove_file(&p);
    }
    out
}

/// Huge bytes the outside applier verified, summed over its reports.
pub fn attach_huge_bytes(reports: &[hugetune_attach::Report]) -> u64 {
    reports.iter().map(|r| r.huge_bytes).sum()
}

/// What an outside report says, one line per category and one for failures.
pub fn attach_lines(r: &hugetune_attach::Report) -> Vec<String> {
    let mut v = vec![];
    if let Some(t) = &r.trace {
        v.push(trace_line(t));
    }
    for (c, planned, huge) in r.per_category() {
        v.push(format!(
            "{c}: {} of {} planned became huge",
            hugetune_render::bytes(huge),
            hugetune_render::bytes(planned)
        ));
    }
    if r.per_category().is_empty() {
        v.push(format!(
            "no planned range ({}) held a whole 2 MiB page",
            r.categories.join(", ")
        ));
    }
    let unpopulated: u64 = r.ranges.iter().map(|x| x.unpopulated_bytes).sum();
    if unpopulated > 0 {
        v.push(format!(
            "{} left alone at the last look: the program had populated less than half of \
             those 2 MiB pieces (collapsing them would allocate memory it never touched)",
            hugetune_render::bytes(unpopulated)
        ));
    }
    if let Some(f) = r.failure_text() {
        v.push(format!(
            "refused MADV_COLLAPSE calls: {f} (the process is unharmed)"
        ));
    }
    for (k, n) in &r.skipped {
        v.push(format!("left alone: {n} {k}"));
    }
    v.push(format!(
        "{} collapsed in {} calls, {:.3} s ({} looks over {:.2} s; ended: {})",
        hugetune_render::bytes(r.collapsed_bytes),
        r.collapse_calls,
        r.collapse_s,
        r.passes,
        r.elapsed_s,
        r.ended
    ));
    v
}

/// The tracer's part of an outside report, in one line.
pub fn trace_line(t: &hugetune_attach::report::TraceReport) -> String {
    if !t.ran {
        return format!(
            "at fault time: not traced ({}); collapsed after the fact only",
            t.why_not.as_deref().unwrap_or("no reason recorded")
        );
    }
    let per: Vec<String> = t
        .advised
        .iter()
        .map(|(c, a)| {
            format!(
                "{c} {} call(s), {}",
                a.calls,
                hugetune_render::bytes(a.bytes)
            )
        })
        .collect();
    let mut line = format!(
        "at fault time: MADV_HUGEPAGE given inside the program at {} ({} traced calls, {} \
         process(es), {} thread(s), {:.3} s in the tracer)",
        if per.is_empty() {
            "no call (none mapped planned memory)".to_string()
        } else {
            per.join(", ")
        },
        t.stops,
        t.processes,
        t.threads,
        t.handling_s
    );
    if !t.failures.is_empty() {
        let f: Vec<String> = t
            .failures
            .iter()
            .map(|(k, n)| format!("{n} × {k}"))
            .collect();
        line.push_str(&format!("; not advised: {}", f.join(", ")));
    }
    if !t.skipped.is_empty() {
        let f: Vec<String> = t
            .skipped
            .iter()
            .map(|(k, n)| format!("{n} × {k}"))
            .collect();
        line.push_str(&format!("; left alone: {}", f.join(", ")));
    }
    line
}

/// The optimized run's spec: the plan file written, the runtime library
/// preloaded; for a program it cannot enter, the plan applied from outside.
pub fn applied_spec(
    art: &Artifacts,
    argv: &[OsString],
    assignments: &[(Category, Backing)],
    threshold: u64,
    options: &PlanOptions,
    stdout: Output,
) -> Result<Applied> {
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-run.")?;
    if !assignments.is_empty() && !preload_can_enter(argv) {
        let plan = OutsidePlan::from_assignments(assignments, threshold);
        note(format!(
            "{}: the runtime library cannot enter this program (static or Go): the plan ({}) \
             is applied from outside (MADV_HUGEPAGE at fault time, MADV_COLLAPSE after)",
            display_cmd(&argv[..1]),
            plan.categories().join(", ")
        ));
        for n in &plan.notes {
            note(n);
        }
        let mut spec = outside_spec(argv, plan, dir.path())?;
        spec.stdout = stdout;
        return Ok(Applied { dir, spec });
    }
    let options = &super::jvm::for_command(options, argv, &super::availability_now, true);
    let plan_file = dir.path().join("plan");
    std::fs::write(
        &plan_file,
        plan::plan_text_with(assignments, threshold, options),
    )?;
    let summary = dir.path().join("summary.%p.json");
    let mut spec = RunSpec::new(argv.to_vec());
    spec.env = env::apply_env(&art.runtime_lib, &plan_file, Some(&summary), assignments);
    super::jvm::environment(options, argv, Some(dir.path()), &mut spec.env);
    // A launcher stays inert and the program it starts (every rank) takes the
    // plan: the runtime library's follow mode (docs/launchers.md). Only the
    // program the arguments name, when they name one.
    if launcher::launcher_of(argv).is_some() {
        let mut extra = Vec::new();
        if let Ok(p) = super::program_of(argv) {
            extra.push(("HUGETUNE_FOLLOW_PROGRAM", p.path));
        }
        spec.env = env::follow_env(spec.env, "apply", &dir.path().join("follow.log"), &extra);
    }
    spec.stdout = stdout;
    spec.around = thp_controls_around(assignments, options);
    Ok(Applied { dir, spec })
}

/// The per-size THP controls a plan with these backings needs for its runs
/// (`hugetune_model::plan::thp_controls`, from the controls as they read now),
/// as a hook that sets them just before each applied run and restores them
/// once it ended (also on error, interrupt, and through the journal after a
/// kill). The controls are system-wide, so the baseline runs interleaved with
/// the applied ones never see them. None for a plan without mTHP.
pub fn thp_controls_around(
    assignments: &[(Category, Backing)],
    options: &PlanOptions,
) -> Option<runner::Around> {
    let root = Path::new(hugetune_host::machine::THP_SYSFS);
    let now = Availability {
        thp: hugetune_host::machine::thp_mode(root).unwrap_or(hugetune_model::plan::ThpMode::Never),
        mthp: hugetune_host::machine::mthp_usable(root),
        ..Availability::default()
    };
    let backings: Vec<Backing> = assignments
        .iter()
        .map(|&(_, b)| b)
        .chain(options.sites.iter().map(|&(_, _, b)| b))
        .collect();
    let controls = hugetune_model::plan::thp_controls(&backings, &now);
    if controls.is_empty() {
        return None;
    }
    note(format!(
        "the plan's runs set {} and restore them after each (system-wide controls: MADV_HUGEPAGE \
         gives an advised range the largest enabled size that fits)",
        controls
            .iter()
            .map(|c| c.text())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let pairs: Vec<(u64, String)> = controls.into_iter().map(|c| (c.kb, c.mode)).collect();
    Some(runner::Around(Arc::new(move || {
        let changes = hugetune_host::kernel_state::set_thp_controls(&pairs)
            .context("setting the plan's per-size THP controls for its run")?;
        Ok(Box::new(changes) as Box<dyn std::any::Any>)
    })))
}

/// Collects (and removes) the runtime library summaries written in `dir`.
pub fn take_summaries(dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("summary."))
        })
        .collect();
    paths.sort();
    for p in paths {
        if let Ok(t) = std::fs::read_to_string(&p) {
            match serde_json::from_str(&t) {
                Ok(v) => out.push(v),
                Err(e) => note(format!(
                    "runtime summary {} is not valid JSON: {e}",
                    p.display()
                )),
            }
        }
        let _ = std::fs::remove_file(&p);
    }
    out
}

/// Huge bytes the runtime library says it backed, summed over processes:
/// hugetlb bytes plus THP bytes verified in smaps.
pub fn summary_huge_bytes(summaries: &[serde_json::Value]) -> u64 {
    summaries
        .iter()
        .filter_map(|s| Summary::from_value(s).ok())
        .map(|s| s.huge_bytes())
        .sum()
}

/// Why an applied run left no runtime summary, when it left none. The library
/// writes one at exit, at `_exit`/`_Exit` and at exec; a process killed by a
/// signal (or ending with a raw exit_group system call) cannot write it, and
/// what it backed is then known only from /proc's peak.
pub fn missing_summary(stats: &RunStats, summaries: &[serde_json::Value]) -> Option<String> {
    if !summaries.is_empty() {
        return None;
    }
    Some(match stats.signal {
        Some(s) => format!(
            "no runtime summary: the program {} before the runtime library could write one \
             (huge pages are counted from /proc's peak only)",
            hugetune_capture::ab::ended(stats.exit_code, Some(s))
        ),
        None => format!(
            "no runtime summary although the program {}: it left without exit handlers in a way \
             the library cannot see (a raw exit_group system call), or the library stayed inert \
             (a setuid program, or its environment was cleared)",
            hugetune_capture::ab::ended(stats.exit_code, None)
        ),
    })
}

/// The hugetlb pools grown for an optimize's runs: each goes back to its
/// persistent size when this drops (or on interrupt, or through the journal
/// after a kill). The kernel-state lock is taken once, before the first
/// change, and shared by all of them. Changes are undone last first: a pool
/// changed twice (grown, then grown again or given back in part) must end at
/// the value the first change found, not at the one the second found.
#[derive(Default)]
pub struct Reserved {
    pub changes: Vec<PoolChange>,
    lock: Option<KernelStateLock>,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        while let Some(c) = self.changes.pop() {
            drop(c);
        }
    }
}

impl Reserved {
    /// Pages the `page_kb` pool holds now beyond what it held before the first
    /// change (pages given back in between are not counted).
    pub fn added(&self, page_kb: u64) -> u64 {
        let mine = |c: &&PoolChange| c.page_kb == page_kb;
        match (
            self.changes.iter().find(mine),
            self.changes.iter().rfind(mine),
        ) {
            (Some(first), Some(last)) => last.now.saturating_sub(first.previous),
            _ => 0,
        }
    }

    /// Asks the kernel for `extra` more 1 GB pages to learn how many it can
    /// assemble now (the fragmentation doctor's scan counts free pages it
    /// cannot see as such — on per-CPU lists, or taken off the free lists
    /// while free page reporting hands them to the host — as unmovable, so
    /// its estimate is a lower bound). Returns the pages the kernel gave;
    /// they stay in the pool until `give_back_unused` or the drop.
    pub fn probe_gigantic(&mut self, extra: u64) -> Result<u64> {
        let t = std::time::Instant::now();
        let r = self.grow(1 << 20, extra)?;
        note(format!(
            "asked the kernel for {extra} x 1 GB pages to see how many it assembles now: it gave \
             {} in {:.1} s (kept for the plan; those it does not use go back before the runs)",
            r.added(),
            t.elapsed().as_secs_f64()
        ));
        Ok(r.added())
    }

    /// Gives back the `page_kb` pages grown here that the plan does not use:
    /// the pool shrinks to `need` free pages, never below its size before the
    /// first change.
    pub fn give_back_unused(&mut self, page_kb: u64, need: u64) -> Result<()> {
        let Some(first) = self.changes.iter().find(|c| c.page_kb == page_kb) else {
            return Ok(());
        };
        let floor = first.previous;
        let Some(pool) = hugetune_host::machine::pool(page_kb) else {
            return Ok(());
        };
        let spare = pool.available().saturating_sub(need);
        let target = pool.nr.saturating_sub(spare).max(floor);
        if target >= pool.nr {
            return Ok(());
        }
        let c =
            hugetune_host::kernel_state::set_hugetlb_pool_holding(self.lock()?, page_kb, target)?;
        note(format!(
            "gave back {} x {} pages the plan does not use",
            pool.nr.saturating_sub(c.now),
            if page_kb == 1 << 20 { "1 GB" } else { "2 MB" }
        ));
        self.changes.push(c);
        Ok(())
    }

    /// The kernel-state lock, taken on first use (waiting for another user of
    /// the pools, and saying so, before anything is timed or changed). A lock
    /// this thread already holds (a bench suite around its optimize) is shared,
    /// not waited on.
    fn lock(&mut self) -> Result<&KernelStateLock> {
        if self.lock.is_none() {
            self.lock = Some(lock_kernel_state_here()?);
        }
        Ok(self.lock.as_ref().expect("just set"))
    }

    /// Holds the kernel-state lock from now until the drop, as root: runs that
    /// use pool pages must not take them from another hugetune that sized the
    /// pools for its own runs (a bench suite, a size sweep), and pools must
    /// not change under them. Not root: nothing (the lock file is root's).
    pub fn hold_lock(&mut self) -> Result<()> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            self.lock()?;
        }
        Ok(())
    }

    fn grow(&mut self, page_kb: u64, extra: u64) -> Result<&PoolChange> {
        let c = reserve_hugetlb_holding(self.lock()?, page_kb, extra)?;
        self.changes.push(c);
        Ok(self.changes.last().expect("just pushed"))
    }
}

/// Grows the pools when the plan needs more hugetlb pages than `avail_now`
/// has free: its 1 GB pages first (the scarcer; the kernel may give fewer,
/// which the caller sees in the next availability and plans again), then its
/// 2 MB pages. Says what it asked and what the kernel gave.
pub fn reserve_for(
    decision: &PlanDecision,
    avail_now: &Availability,
    reserved: &mut Reserved,
) -> Result<()> {
    let need_1g = decision
        .prediction
        .as_ref()
        .map_or(0, |p| p.hugetlb_1g_pages);
    if need_1g > avail_now.hugetlb_1g_free {
        let extra = need_1g - avail_now.hugetlb_1g_free;
        reserved.lock()?;
        let t = std::time::Instant::now();
        let r = reserved.grow(1 << 20, extra)?;
        note(format!(
            "grew the 1 GB hugetlb pool by {} pages ({} asked) in {:.1} s for the runs; it goes \
             back to {} persistent pages afterwards",
            r.added(),
            extra,
            t.elapsed().as_secs_f64(),
            r.restores_to
        ));
        if r.added() < extra {
            note(format!(
                "the kernel gave {} x 1 GB pages of the {extra} asked: no further aligned gigabyte \
                 could be emptied of what is in it now (fragmentation or memory)",
                r.added()
            ));
        }
    }
    let need = decision.hugetlb_pages();
    if need > avail_now.hugetlb_2m_free {
        let extra = need - avail_now.hugetlb_2m_free;
        let r = reserved.grow(2048, extra)?;
        note(format!(
            "grew the 2 MB hugetlb pool by {} pages ({} asked) for the runs; it goes back to {} \
             persistent pages afterwards",
            r.added(),
            extra,
            r.restores_to
        ));
    }
    Ok(())
}

/// What to say, and the 1 GB pages to plan with, when the kernel gave fewer
/// 1 GB pages than the plan needs (`got_1g` free now): None when it gave
/// enough. The plan falls back as the runtime library does for a block it
/// cannot place, 1 GB -> 2 MB -> 4 KB pages.
pub fn gigantic_shortfall(decision: &PlanDecision, got_1g: u64) -> Option<String> {
    let need = decision
        .prediction
        .as_ref()
        .map_or(0, |p| p.hugetlb_1g_pages);
    (need > got_1g).then(|| {
        format!(
            "only {got_1g} x 1 GB pages are free of the {need} the plan needs: planning again \
             with {got_1g}; heap-large falls back as the runtime library does, 1 GB -> 2 MB -> \
             4 KB pages"
        )
    })
}

/// Fallbacks the runtime library reported, deduplicated across runs.
pub fn fallbacks(summaries: &[serde_json::Value]) -> Vec<String> {
    let mut out = Vec::new();
    for run in summaries {
        for proc in run.as_array().into_iter().flatten() {
            let Ok(s) = Summary::from_value(proc) else {
                continue;
            };
            for f in &s.fallbacks {
                let line = format!("{}, {} time(s)", f.describe("→"), f.count);
                if !out.contains(&line) {
                    out.push(line);
                }
            }
        }
    }
    out
}

/// The program run unchanged (it has no profile): its exit status.
pub fn run_unchanged(argv: &[OsString]) -> Result<i32> {
    note(format!(
        "no profile of this program yet: running it unchanged (try `hugetune optimize -- {}`)",
        display_cmd(argv)
    ));
    let mut spec = RunSpec::new(argv.to_vec());
    spec.stdout = Output::Inherit;
    Ok(runner::run(&spec)?.exit_code)
}

/// What an applied run did.
pub struct AppliedRun {
    pub stats: RunStats,
    pub summaries: Vec<serde_json::Value>,
    /// The outside applier's reports (a program the library cannot enter).
    pub attach: Vec<hugetune_attach::Report>,
    /// Huge bytes backed: the library's summaries, the outside applier's
    /// verification or /proc's peak, the largest.
    pub huge_bytes: u64,
}

/// Runs `argv` with the plan `d` (chosen from the stored profile `st`) applied,
/// output to the terminal, and records the run (verdict `applied`).
/// The run is recorded by `record` once the program ended (`run`'s start-up
/// cache connects to the store while the program runs).
pub fn run_applied_then(
    art: &Artifacts,
    argv: &[OsString],
    st: &Stored,
    d: &PlanDecision,
    record: impl FnOnce(&NewRun) -> Result<()>,
) -> Result<AppliedRun> {
    let applied = applied_spec(
        art,
        argv,
        &d.assignments,
        st.threshold,
        &PlanOptions::for_decision(&st.program, d),
        Output::Inherit,
    )?;
    let stats = runner::run(&applied.spec)?;
    let summaries = take_summaries(applied.dir.path());
    super::jvm::note_heap(applied.dir.path(), &summaries);
    let attach = take_attach_reports(applied.dir.path());
    let huge_bytes = summary_huge_bytes(&summaries)
        .max(attach_huge_bytes(&attach))
        .max(stats.peak.huge());
    let mapping = d.label();
    record(&NewRun {
        program_id: st.program_id,
        mapping: mapping.clone(),
        profile_id: Some(st.profile_id),
        machine_id: None,
        args: strings(argv),
        plan: serde_json::json!({"mapping": mapping, "assignments": d.assignments, "sites": d.sites}),
        baseline_s: vec![],
        optimized_s: vec![stats.wall_s],
        speedup: None,
        huge_bytes_backed: huge_bytes,
        verdict: "applied".into(),
        details: serde_json::json!({"stats": stats, "summaries": summaries, "attach": attach}),
    })?;
    Ok(AppliedRun {
        stats,
        summaries,
        attach,
        huge_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured runs of `run`, `validate` and `optimize` preload the
    /// library into a dynamic program, and apply the plan from outside to a
    /// static one (no LD_PRELOAD, a watcher on start).
    #[test]
    fn a_static_program_gets_its_plan_from_outside() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let exe = d.path().join("s");
        let built = std::process::Command::new("cc")
            .args(["-O2", "-static", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        let art = Artifacts {
            runtime_lib: d.path().join("libhugetune.so"),
            work: d.path().join("work"),
            qemu_plugin: d.path().join("plugin.so"),
        };
        let plan = [(Category::HeapLarge, Backing::Hugetlb2m)];
        let spec = |argv: Vec<OsString>| {
            applied_spec(
                &art,
                &argv,
                &plan,
                1 << 20,
                &PlanOptions::default(),
                Output::Null,
            )
            .unwrap()
            .spec
        };
        let dynamic = spec(vec!["/bin/true".into()]);
        assert!(dynamic.env.iter().any(|(k, _)| k == "LD_PRELOAD"));
        assert!(dynamic.on_start.is_none());
        if !built {
            eprintln!("skipped the static half: no static C library");
            return;
        }
        let outside = spec(vec![exe.into_os_string()]);
        assert!(
            outside.env.iter().all(|(k, _)| k != "LD_PRELOAD"),
            "{:?}",
            outside.env
        );
        assert!(outside.on_start.is_some());
        assert!(outside.launch.is_some(), "the tracer starts it");
    }

    #[test]
    fn a_run_without_a_summary_is_explained() {
        let one = vec![serde_json::json!({"pid": 1})];
        let killed = RunStats {
            exit_code: 137,
            signal: Some(9),
            ..Default::default()
        };
        assert_eq!(missing_summary(&killed, &one), None);
        let m = missing_summary(&killed, &[]).unwrap();
        assert!(m.contains("died of signal 9"), "{m}");
        let quiet = RunStats::default();
        let m = missing_summary(&quiet, &[]).unwrap();
        assert!(
            m.contains("exited with status 0") && m.contains("inert"),
            "{m}"
        );
    }

    /// A pool grown twice and given back in part ends where it began: the
    /// changes are undone last first (undone first first, the second change
    /// would put back the pool the first one had grown).
    #[test]
    fn a_pool_changed_three_times_goes_back_to_where_it_began() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root to change the 2 MB pool");
            return;
        }
        let before = hugetune_host::kernel_state::resting_pool_size(2048).unwrap();
        let mut r = Reserved::default();
        r.grow(2048, 2).unwrap();
        r.grow(2048, 1).unwrap();
        let grown = r.added(2048);
        r.give_back_unused(2048, 1).unwrap();
        // One page kept (where the kernel gave one), the others given back.
        assert_eq!(r.added(2048), grown.min(1), "{grown} grown");
        drop(r);
        assert_eq!(
            hugetune_host::kernel_state::resting_pool_size(2048).unwrap(),
            before
        );
    }

    /// A kernel that gave fewer 1 GB pages than the plan needs: said, with the
    /// fallback; nothing said when it gave enough or the plan wants none.
    #[test]
    fn a_short_gigantic_pool_is_said_and_planned_again() {
        let p = hugetune_model::rank::Prediction {
            mapping: "heap-large:1g".into(),
            label: "heap-large:hugetlb-1g".into(),
            base: true,
            assignments: vec![(Category::HeapLarge, Backing::Hugetlb1g)],
            miss_time_ns: 0.0,
            saving_ns: 1e9,
            pmb: 100.0,
            predicted_seconds: 1.0,
            predicted_speedup: 2.0,
            hugetlb_pages: 0,
            hugetlb_1g_pages: 4,
            static_pages_1g: (0, 0),
            thp_pages: 0,
            sites: vec![],
            walks: 0,
            faults: 0,
        };
        let d = PlanDecision {
            assignments: vec![(Category::HeapLarge, Backing::Hugetlb1g)],
            sites: vec![],
            prediction: Some(p),
            reasons: vec![],
            jvm: None,
            jvm_prediction: None,
            pool: None,
            thp_controls: vec![],
        };
        let m = gigantic_shortfall(&d, 1).unwrap();
        assert!(
            m.starts_with(
                "only 1 x 1 GB pages are free of the 4 the plan needs: planning again with 1"
            ) && m.contains("1 GB -> 2 MB -> 4 KB"),
            "{m}"
        );
        assert_eq!(gigantic_shortfall(&d, 4), None);
        let none = PlanDecision {
            prediction: None,
            ..d
        };
        assert_eq!(gigantic_shortfall(&none, 0), None);
    }
}
