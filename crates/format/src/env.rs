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
