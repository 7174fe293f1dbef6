//! The runtime library's environment (docs/formats.md §1): how a program is
//! started under it in record and apply mode. Only this module writes the
//! `HUGETUNE_*` variables the library reads.

use crate::plan::PlanOptions;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use std::path::Path;
/// `LD_PRELOAD` with the runtime library first, keeping what the user preloads.
pub fn preload_value(lib: &Path) -> String {
    match std::env::var("LD_PRELOAD") {
        Ok(v) if !v.trim().is_empty() => format!("{} {}", lib.display(), v),
        _ => lib.display().to_string(),
    }
}

pub struct RecordEnv<'a> {
    pub lib: &'a Path,
    /// Allocation log path template (`%p` = pid); `None`: summary only.
    pub log: Option<&'a Path>,
    pub summary: Option<&'a Path>,
    pub markers: bool,
}

pub fn record_env(r: &RecordEnv<'_>) -> Vec<(String, String)> {
    let mut env = vec![
        ("LD_PRELOAD".into(), preload_value(r.lib)),
        ("HUGETUNE_MODE".into(), "record".into()),
    ];
    if let Some(l) = r.log {
        env.push(("HUGETUNE_LOG".into(), l.display().to_string()));
    }
    if let Some(s) = r.summary {
        env.push(("HUGETUNE_SUMMARY".into(), s.display().to_string()));
    }
    if r.markers {
        env.push(("HUGETUNE_MARKERS".into(), "1".into()));
    }
    env
}

/// A launcher's environment (docs/launchers.md): `role_env` (what
/// `record_env` or `apply_env` gives the program) with the runtime library in
/// follow mode, `role` (`record` or `apply`) for the program it starts, the
/// follow log at `log`, and `extra` (the qemu command for a profile,
/// `HUGETUNE_FOLLOW_PROGRAM` for a plan).
pub fn follow_env(
    role_env: Vec<(String, String)>,
    role: &str,
    log: &Path,
    extra: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = role_env
        .into_iter()
        .filter(|(k, _)| k != "HUGETUNE_MODE")
        .collect();
    env.push(("HUGETUNE_MODE".into(), "follow".into()));
    env.push(("HUGETUNE_FOLLOW".into(), role.into()));
    env.push(("HUGETUNE_FOLLOW_LOG".into(), log.display().to_string()));
    // The user's own launchers, for the library's decisions too.
    if let Ok(l) = std::env::var("HUGETUNE_LAUNCHERS") {
        env.push(("HUGETUNE_LAUNCHERS".into(), l));
    }
    for (k, v) in extra {
        env.push(((*k).to_string(), v.clone()));
    }
    env
}

/// Environment for a run with `plan` applied; `plan` is the plan file's path.
pub fn apply_env(
    lib: &Path,
    plan: &Path,
    summary: Option<&Path>,
    assignments: &[(Category, Backing)],
) -> Vec<(String, String)> {
    apply_env_with(lib, plan, summary, assignments, &PlanOptions::default())
}

/// `apply_env` for a plan written with `plan_text_with(.., opts)`: glibc's THP
/// tunable is set only when heap-small goes through it (not the arena).
pub fn apply_env_with(
    lib: &Path,
    plan: &Path,
    summary: Option<&Path>,
    assignments: &[(Category, Backing)],
    opts: &PlanOptions,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("LD_PRELOAD".into(), preload_value(lib)),
        ("HUGETUNE_MODE".into(), "apply".into()),
        ("HUGETUNE_PLAN".into(), plan.display().to_string()),
    ];
    if let Some(s) = summary {
        env.push(("HUGETUNE_SUMMARY".into(), s.display().to_string()));
    }
    if !opts.heap_small_arena
        && assignments
            .iter()
            .any(|&(c, b)| c == Category::HeapSmall && b.is_huge())
    {
        let mut t = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        if !t.is_empty() {
            t.push(':');
        }
        t.push_str("glibc.malloc.hugetlb=1");
        env.push(("GLIBC_TUNABLES".into(), t));
    }
    env
}
