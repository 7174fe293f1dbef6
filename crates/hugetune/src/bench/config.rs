//! Configurations are data: what a run of a workload is started with — a runtime
//! library plan, the workload's own `--page`, environment variables, preloaded
//! libraries, a wrapper command, the system's THP mode and mTHP sizes for the
//! run, and the hugetlb pages it may take. The runner turns one into a command
//! line and an environment; nothing else in the suites branches on a
//! configuration's kind.

use hugetune_format::plan::{self, PlanOptions};
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The runtime library's heap-large threshold in every plan of the suites
/// (glibc's default mmap threshold).
pub const THRESHOLD: u64 = 128 * 1024;

/// A runtime library plan: the plan file's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibPlan {
    pub text: String,
    /// heap-small goes through glibc's `glibc.malloc.hugetlb=1` (the launcher
    /// then sets `GLIBC_TUNABLES`), not the library's arena.
    pub glibc_thp_tunable: bool,
}

impl LibPlan {
    pub fn new(assignments: &[(Category, Backing)], opts: &PlanOptions) -> LibPlan {
        let text = plan::plan_text_with(assignments, THRESHOLD, opts);
        LibPlan::from_text(text)
    }

    /// A plan written elsewhere (`hugetune optimize`'s).
    pub fn from_text(text: String) -> LibPlan {
        let glibc_thp_tunable = text.lines().any(|l| l.trim() == "heap-small thp-2m");
        LibPlan {
            text,
            glibc_thp_tunable,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Short name, unique in a suite (`4k`, `thp-2m`, `glibc-hugetlb=2`, …).
    pub name: String,
    /// What it is, in words.
    pub about: String,
    /// Runtime library plan (the library is preloaded only when there is one).
    pub plan: Option<LibPlan>,
    /// The workload's own page backing (`--page`), for suites that measure the
    /// raw mechanism.
    pub page: Option<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Libraries preloaded (peers' allocators), in this order.
    pub preload: Vec<String>,
    /// A command the workload is started through (`hugectl --heap`).
    pub wrapper: Vec<String>,
    /// System THP mode (`/sys/kernel/mm/transparent_hugepage/enabled`) during the
    /// runs of this configuration, restored after each run.
    pub thp: Option<String>,
    /// Per-size THP controls (size in kB, mode) during the runs, restored after.
    pub mthp: Vec<(u64, String)>,
    /// 2 MB hugetlb pages the configuration may take (the suite reserves the
    /// largest need of its configurations for the whole suite).
    pub pool_2m: u64,
    /// 1 GB hugetlb pages it may take.
    pub pool_1g: u64,
    /// For each run, the 2 MB pool set so that exactly this many pages are
    /// free (a budget; pages sweep), restored after the run.
    pub budget_2m: Option<u64>,
    /// It is meant to put memory on huge pages: a run that backs none is flagged.
    pub expects_huge: bool,
}

impl Config {
    pub fn new(name: &str, about: &str) -> Config {
        Config {
            name: name.into(),
            about: about.into(),
            plan: None,
            page: None,
            env: vec![],
            preload: vec![],
            wrapper: vec![],
            thp: None,
            mthp: vec![],
            pool_2m: 0,
            pool_1g: 0,
            budget_2m: None,
            expects_huge: true,
        }
    }

    /// Kernel settings it changes (pools, THP): needs root.
    pub fn needs_root(&self) -> bool {
        self.pool_2m > 0
            || self.pool_1g > 0
            || self.budget_2m.is_some()
            || self.thp.is_some()
            || !self.mthp.is_empty()
    }

    pub fn with_plan(mut self, assignments: &[(Category, Backing)], opts: &PlanOptions) -> Self {
        self.plan = Some(LibPlan::new(assignments, opts));
        self
    }
    pub fn with_env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn baseline(mut self) -> Self {
        self.expects_huge = false;
        self
    }

    /// The environment of a run: the variables to set, given where the runtime
    /// library, the plan file and the summaries are. Variables inherited from the
    /// caller that would change what the run is are removed (`SCRUB`).
    pub fn env_for(&self, lib: &Path, plan: &Path, summary: &Path) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut preload: Vec<String> = Vec::new();
        if self.plan.is_some() {
            preload.push(lib.display().to_string());
            env.push(("HUGETUNE_MODE".into(), "apply".into()));
            env.push(("HUGETUNE_PLAN".into(), plan.display().to_string()));
            env.push(("HUGETUNE_SUMMARY".into(), summary.display().to_string()));
        }
        preload.extend(self.preload.iter().cloned());
        if !preload.is_empty() {
            env.push(("LD_PRELOAD".into(), preload.join(" ")));
        }
        let mut tunables: Vec<String> = Vec::new();
        if self.plan.as_ref().is_some_and(|p| p.glibc_thp_tunable) {
            tunables.push("glibc.malloc.hugetlb=1".into());
        }
        for (k, v) in &self.env {
            if k == "GLIBC_TUNABLES" {
                tunables.push(v.clone());
            } else {
                env.push((k.clone(), v.clone()));
            }
        }
        if !tunables.is_empty() {
            env.push(("GLIBC_TUNABLES".into(), tunables.join(":")));
        }
        env
    }
}

/// Inherited variables removed from every run: they would change what a
/// configuration is.
pub const SCRUB: &[&str] = &[
    "LD_PRELOAD",
    "GLIBC_TUNABLES",
    "MALLOC_CONF",
    "MIMALLOC_LARGE_OS_PAGES",
    "MIMALLOC_ALLOW_LARGE_OS_PAGES",
    "MIMALLOC_RESERVE_HUGE_OS_PAGES",
    "HUGETLB_MORECORE",
    "HUGETLB_VERBOSE",
    "HUGETUNE_MODE",
    "HUGETUNE_PLAN",
    "HUGETUNE_SUMMARY",
    "HUGETUNE_LOG",
    "HUGETUNE_MARKERS",
    "HUGETUNE_THRESHOLD",
    "HUGETUNE_INJECT",
    "MALLOC_ARENA_MAX",
];

/// The page backings of seed 004's page size settings, through the runtime
/// library: 4 KB, THP 2 MB, hugetlb 2 MB, hugetlb 1 GB and one mTHP size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSetting {
    Base,
    Thp2m,
    Hugetlb2m,
    Hugetlb1g,
    /// mTHP of 2^shift bytes (PMD THP off for the run, the size on `madvise`).
    Mthp(u8),
}

impl PageSetting {
    pub fn name(self) -> String {
        match self {
            PageSetting::Base => "4k".into(),
            PageSetting::Thp2m => "thp-2m".into(),
            PageSetting::Hugetlb2m => "hugetlb-2m".into(),
            PageSetting::Hugetlb1g => "hugetlb-1g".into(),
            PageSetting::Mthp(s) => Backing::Thp(s).name(),
        }
    }
}

/// What a page setting covers: heap-large only, or heap-small too (programs
/// whose data are many small objects, e.g. redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub heap_large: bool,
    pub heap_small: bool,
    /// hugetlb pages (2 MB, 1 GB) the data may need.
    pub pages_2m: u64,
    pub pages_1g: u64,
}

/// One page setting as a configuration through the runtime library. The 4 KB
/// setting owns heap-large on 4 KB pages (`MADV_NOHUGEPAGE`), so every
/// configuration runs with the library loaded and only the backing differs.
/// heap-small goes to the library's arena, whose chunks are 2 MB: with 1 GB
/// pages it stays on 2 MB hugetlb pages, and with an mTHP size its THP chunks
/// get that size (PMD THP is off for the run).
pub fn page_setting(s: PageSetting, cov: Coverage) -> Config {
    let mut a: Vec<(Category, Backing)> = Vec::new();
    let large = match s {
        PageSetting::Base => Backing::Base4k,
        PageSetting::Thp2m => Backing::Thp2m,
        PageSetting::Hugetlb2m => Backing::Hugetlb2m,
        PageSetting::Hugetlb1g => Backing::Hugetlb1g,
        PageSetting::Mthp(sh) => Backing::Thp(sh),
    };
    if cov.heap_large {
        a.push((Category::HeapLarge, large));
    }
    // The arena's chunks are 2 MB: with PMD THP off (the mTHP setting) they
    // would only fall back to 4 KB pages, so heap-small stays out of it.
    if cov.heap_small && !matches!(s, PageSetting::Base | PageSetting::Mthp(_)) {
        let small = match s {
            PageSetting::Hugetlb2m | PageSetting::Hugetlb1g => Backing::Hugetlb2m,
            _ => Backing::Thp2m,
        };
        a.push((Category::HeapSmall, small));
    }
    let about = match s {
        PageSetting::Base => "4 KB pages: the runtime library owns heap-large blocks on 4 KB pages (MADV_NOHUGEPAGE)".to_string(),
        PageSetting::Thp2m => "THP 2 MB: heap-large (and heap-small in the library's arena) 2 MB-aligned with MADV_HUGEPAGE".to_string(),
        PageSetting::Hugetlb2m => "hugetlb 2 MB: heap-large (and heap-small in the arena) on 2 MB hugetlb pages from the pool".to_string(),
        PageSetting::Hugetlb1g => "hugetlb 1 GB: heap-large on 1 GB pages (the rest of a block on 2 MB pages); heap-small in the arena stays on 2 MB hugetlb pages".to_string(),
        PageSetting::Mthp(sh) => format!(
            "mTHP {}: heap-large blocks with MADV_HUGEPAGE while only the {} size is enabled (madvise) and PMD THP is off for the run (heap-small stays on 4 KB pages: the library's arena has 2 MB chunks only)",
            hugetune_model::page::size_name(1u64 << sh),
            hugetune_model::page::size_name(1u64 << sh)
        ),
    };
    let mut c = Config::new(&s.name(), &about).with_plan(&a, &PlanOptions::default());
    match s {
        PageSetting::Base => c = c.baseline(),
        PageSetting::Hugetlb2m => c.pool_2m = cov.pages_2m,
        PageSetting::Hugetlb1g => {
            c.pool_1g = cov.pages_1g;
            c.pool_2m = cov.pages_2m;
        }
        PageSetting::Mthp(sh) => {
            let kb = (1u64 << sh) / 1024;
            c.mthp = vec![(2048, "never".into()), (kb, "madvise".into())];
        }
        PageSetting::Thp2m => {}
    }
    c
}

/// The workload's own mapping (`--page 4k|thp|hugetlb-2m|hugetlb-1g`).
pub fn own_page(page: &str, pages_2m: u64, pages_1g: u64) -> Config {
    let about = match page {
        "4k" => "the workload's own mapping with MADV_NOHUGEPAGE (4 KB pages)",
        "thp" => "the workload's own 2 MB-aligned mapping with MADV_HUGEPAGE (THP)",
        "hugetlb-2m" => "the workload's own MAP_HUGETLB mapping, 2 MB pages from the pool",
        "hugetlb-1g" => "the workload's own MAP_HUGETLB mapping, 1 GB pages from the pool",
        _ => "the workload's own mapping",
    };
    let mut c = Config::new(page, about);
    c.page = Some(page.into());
    match page {
        "4k" => c = c.baseline(),
        "hugetlb-2m" => c.pool_2m = pages_2m,
        "hugetlb-1g" => c.pool_1g = pages_1g,
        _ => {}
    }
    c
}

/// A shared library found on this machine, or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Missing {
    /// The configuration (or workload) that cannot run.
    pub what: String,
    /// What is missing and how to get it.
    pub reason: String,
}

/// Directories searched for preloadable libraries, after `ldconfig -p`.
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// The path `ldconfig -p` gives for `soname` (its output: lines
/// `\tlibfoo.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libfoo.so.2`).
pub fn ldconfig_path(ldconfig_output: &str, soname: &str) -> Option<String> {
    ldconfig_output.lines().find_map(|l| {
        let (name, rest) = l.trim().split_once(' ')?;
        if name != soname {
            return None;
        }
        Some(rest.split_once("=> ")?.1.trim().to_string())
    })
}

/// Finds a shared library by soname.
pub fn find_library(soname: &str) -> Option<PathBuf> {
    if let Ok(o) = std::process::Command::new("ldconfig").arg("-p").output() {
        if let Some(p) = ldconfig_path(&String::from_utf8_lossy(&o.stdout), soname) {
            if Path::new(&p).is_file() {
                return Some(PathBuf::from(p));
            }
        }
    }
    LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(soname))
        .find(|p| p.is_file())
}

/// Finds a program on PATH (and the usual system directories).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(env: &[(String, String)]) -> Vec<String> {
        env.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    #[test]
    fn environments_from_data() {
        let lib = Path::new("/l/libhugetune.so");
        let (plan, sum) = (Path::new("/d/plan"), Path::new("/d/summary.%p.json"));
        // No plan, no peer: nothing set.
        assert!(Config::new("4k", "").env_for(lib, plan, sum).is_empty());
        // A library plan.
        let c = page_setting(
            PageSetting::Hugetlb2m,
            Coverage {
                heap_large: true,
                heap_small: false,
                pages_2m: 10,
                pages_1g: 0,
            },
        );
        let e = vars(&c.env_for(lib, plan, sum));
        assert!(
            e.contains(&"LD_PRELOAD=/l/libhugetune.so".to_string()),
            "{e:?}"
        );
        assert!(e.contains(&"HUGETUNE_MODE=apply".to_string()));
        assert!(e.contains(&"HUGETUNE_PLAN=/d/plan".to_string()));
        assert!(!e.iter().any(|v| v.starts_with("GLIBC_TUNABLES")));
        assert_eq!(
            c.plan.as_ref().unwrap().text.lines().last(),
            Some("heap-large hugetlb-2m")
        );
        assert_eq!(c.pool_2m, 10);
        assert!(c.needs_root() && c.expects_huge);
        // A peer: preload and its variables, tunables joined.
        let mut p = Config::new("jemalloc", "").with_env("MALLOC_CONF", "thp:always");
        p.preload = vec!["/usr/lib/libjemalloc.so.2".into()];
        let e = vars(&p.env_for(lib, plan, sum));
        assert_eq!(
            e,
            vec![
                "LD_PRELOAD=/usr/lib/libjemalloc.so.2",
                "MALLOC_CONF=thp:always"
            ]
        );
        assert!(!p.needs_root());
        // glibc's THP tunable from the plan and from the configuration are joined.
        let mut t = Config::new("t", "").with_env("GLIBC_TUNABLES", "glibc.malloc.arena_max=1");
        t.plan = Some(LibPlan::from_text(
            "hugetune-plan 1\nthreshold 131072\nheap-small thp-2m\nheap-large 4k\n".into(),
        ));
        let e = vars(&t.env_for(lib, plan, sum));
        assert!(
            e.contains(
                &"GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1".to_string()
            ),
            "{e:?}"
        );
    }

    #[test]
    fn page_settings() {
        let cov = Coverage {
            heap_large: true,
            heap_small: true,
            pages_2m: 300,
            pages_1g: 2,
        };
        let names: Vec<String> = [
            PageSetting::Base,
            PageSetting::Thp2m,
            PageSetting::Hugetlb2m,
            PageSetting::Hugetlb1g,
            PageSetting::Mthp(16),
        ]
        .iter()
        .map(|&s| page_setting(s, cov).name)
        .collect();
        assert_eq!(
            names,
            ["4k", "thp-2m", "hugetlb-2m", "hugetlb-1g", "thp-64k"]
        );
        let base = page_setting(PageSetting::Base, cov);
        assert!(!base.expects_huge && !base.needs_root());
        let text = &base.plan.unwrap().text;
        assert!(
            text.contains("heap-large 4k") && !text.contains("heap-small"),
            "{text}"
        );
        let g = page_setting(PageSetting::Hugetlb1g, cov);
        let text = &g.plan.as_ref().unwrap().text;
        assert!(text.contains("heap-large hugetlb-1g"), "{text}");
        assert!(text.contains("heap-small arena hugetlb-2m"), "{text}");
        assert_eq!((g.pool_1g, g.pool_2m), (2, 300));
        let m = page_setting(PageSetting::Mthp(16), cov);
        assert_eq!(
            m.mthp,
            vec![(2048, "never".to_string()), (64, "madvise".to_string())]
        );
        let text = m.plan.unwrap().text;
        assert!(
            text.contains("heap-large thp-64k") && !text.contains("heap-small"),
            "{text}"
        );
        let own = own_page("hugetlb-2m", 7, 0);
        assert_eq!((own.page.as_deref(), own.pool_2m), (Some("hugetlb-2m"), 7));
        assert!(own.plan.is_none());
    }

    #[test]
    fn ldconfig_lines() {
        let out = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibmimalloc.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libmimalloc.so.2\n\
            \tlibjemalloc.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libjemalloc.so.2\n";
        assert_eq!(
            ldconfig_path(out, "libjemalloc.so.2").as_deref(),
            Some("/lib/x86_64-linux-gnu/libjemalloc.so.2")
        );
        assert_eq!(ldconfig_path(out, "libjemalloc.so"), None);
        assert_eq!(ldconfig_path("garbage", "x"), None);
    }
}
