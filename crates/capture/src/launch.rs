//! How a program is started under the runtime library: the environment for record
//! and apply mode, and the plan file (docs/formats.md §1, §3).

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

/// The plan file the runtime library reads in apply mode.
pub fn plan_text(assignments: &[(Category, Backing)], threshold: u64) -> String {
    let mut s = format!("hugetune-plan 1\nthreshold {threshold}\n");
    for &(c, b) in assignments {
        s.push_str(&format!("{} {}\n", c.name(), b.name()));
    }
    // glibc's THP tunable (used for heap-small) also advises glibc's own large
    // chunks; owning heap-large allocations on 4 KB pages keeps the categories apart.
    let heap_small_thp = assignments.iter().any(|&(c, _)| c == Category::HeapSmall);
    if heap_small_thp && !assignments.iter().any(|&(c, _)| c == Category::HeapLarge) {
        s.push_str("heap-large 4k\n");
    }
    s
}

/// Environment for a run with `plan` applied; `plan` is the plan file's path.
pub fn apply_env(
    lib: &Path,
    plan: &Path,
    summary: Option<&Path>,
    assignments: &[(Category, Backing)],
) -> Vec<(String, String)> {
    let mut env = vec![
        ("LD_PRELOAD".into(), preload_value(lib)),
        ("HUGETUNE_MODE".into(), "apply".into()),
        ("HUGETUNE_PLAN".into(), plan.display().to_string()),
    ];
    if let Some(s) = summary {
        env.push(("HUGETUNE_SUMMARY".into(), s.display().to_string()));
    }
    if assignments
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_files() {
        let t = plan_text(&[(Category::HeapLarge, Backing::Hugetlb2m)], 131072);
        assert_eq!(
            t,
            "hugetune-plan 1\nthreshold 131072\nheap-large hugetlb-2m\n"
        );
        let t = plan_text(&[(Category::HeapSmall, Backing::Thp2m)], 131072);
        assert!(t.ends_with("heap-small thp-2m\nheap-large 4k\n"));
        let env = apply_env(
            Path::new("/l.so"),
            Path::new("/p"),
            None,
            &[(Category::HeapSmall, Backing::Thp2m)],
        );
        assert!(env
            .iter()
            .any(|(k, v)| k == "GLIBC_TUNABLES" && v.ends_with("glibc.malloc.hugetlb=1")));
    }
}
