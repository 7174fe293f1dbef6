//! The plan file the runtime library reads in apply mode (docs/formats.md §3):
//! the only writer of it on the Rust side (the reader is runtime/src/plan.c).
//!
//! Invariant: every line written is one the library's parser accepts; module
//! paths with whitespace cannot be written and are skipped.

use hugetune_model::category::Category;
use hugetune_model::page::Backing;

/// Page layout of owned blocks (plan `layout`, docs/formats.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// floor(size / huge page) huge pages, the rest on 4 KB pages (the library's default).
    HeadTail,
    /// Whole huge pages (the last one partly unused).
    RoundUp,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::HeadTail => "head-tail",
            Layout::RoundUp => "round-up",
        }
    }
}

/// Fork protection of private hugetlb memory (plan `fork-safe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkSafe {
    /// hugetlb as planned; a fork copies the child's view into ordinary memory (default).
    Copy,
    /// No private hugetlb memory: hugetlb backings are served with THP (programs that fork).
    Thp,
    /// No protection (forks are only counted).
    Off,
}

impl ForkSafe {
    pub fn name(self) -> &'static str {
        match self {
            ForkSafe::Copy => "copy",
            ForkSafe::Thp => "thp",
            ForkSafe::Off => "off",
        }
    }
}

/// How the runtime library carries out a plan, beyond the category backings.
/// `Default` writes none of the optional directives (the library's defaults
/// apply) and puts heap-small in the library's arena (runtime/README.md,
/// "heap-small: two mechanisms, measured").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    pub layout: Option<Layout>,
    pub fork_safe: Option<ForkSafe>,
    /// `pool hugetlb-2m N`: N pages mapped at start-up, shared by all threads.
    pub pool_2m: Option<u64>,
    /// `pool hugetlb-1g N`.
    pub pool_1g: Option<u64>,
    /// heap-small through the library's arena (`heap-small arena B`) instead of
    /// glibc's `glibc.malloc.hugetlb=1` tunable.
    pub heap_small_arena: bool,
    /// Reserved address space of the arena (`None`: the library's default, 64 GiB).
    pub arena_bytes: Option<u64>,
    /// `site MODULE OFFSET B` directives: (module path, offset, backing).
    pub sites: Vec<(String, u64, Backing)>,
    /// `mapped thp`: the program's own mappings go on THP even where their
    /// directive says hugetlb (the profile saw them cut).
    pub mapped_thp: bool,
    /// The plan is applied from outside the process (`ProgramTraits::outside`):
    /// category backings only, heap-small in the plain form, and a comment
    /// line that says so.
    pub outside: bool,
    /// `jvm B` (`thp-2m` or `hugetlb-2m`): a JVM's heap backed by the JVM's own
    /// switch, which the launcher passes in `JAVA_TOOL_OPTIONS`; the library
    /// leaves the JVM's mappings alone and reports their huge pages.
    pub jvm: Option<Backing>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            layout: None,
            fork_safe: None,
            pool_2m: None,
            pool_1g: None,
            // Measured on hugetune-work --place heap-small (1 GiB): the same TLB gain
            // as glibc's tunable, 7x faster initialization, and it also works behind
            // an allocator other than glibc's.
            heap_small_arena: true,
            arena_bytes: None,
            sites: Vec::new(),
            mapped_thp: false,
            outside: false,
            jvm: None,
        }
    }
}

impl PlanOptions {
    /// Adds the `site` directives of a per-site plan; sites whose module the
    /// profile could not name are skipped (the library could not match them).
    pub fn with_sites(mut self, sites: &[hugetune_model::rank::PlannedSite]) -> Self {
        if self.outside {
            // The outside applier cannot see sites (the planner plans none).
            return self;
        }
        self.sites = sites
            .iter()
            .filter(|s| !s.module.is_empty() && !s.module.contains(char::is_whitespace))
            .map(|s| (s.module.clone(), s.site.offset, s.backing))
            .collect();
        self
    }

    /// Adds the plan's `jvm` directive (a JVM heap decision, `PlanDecision::jvm`).
    /// Only `thp-2m` and `hugetlb-2m` are written; other backings are dropped.
    /// The library's options for a plan decision on a program with these
    /// traits: its sites, the JVM's switch and the shared pool it chose (none
    /// when applied from outside: no library maps a pool there).
    pub fn for_decision(
        program: &hugetune_model::plan::ProgramTraits,
        d: &hugetune_model::plan::PlanDecision,
    ) -> Self {
        let mut o = Self::for_program(program)
            .with_sites(&d.sites)
            .with_jvm(d.jvm);
        if !o.outside {
            o.pool_2m = d.pool_2m();
        }
        o
    }

    pub fn with_jvm(mut self, jvm: Option<Backing>) -> Self {
        self.jvm = jvm.filter(|&b| matches!(b, Backing::Thp2m | Backing::Hugetlb2m));
        self
    }

    /// The library's options for a program with these traits: a program that forks
    /// gets `fork-safe thp`, so that no private hugetlb memory exists at a fork
    /// even where the plan asks for it (a pool or an allocation site plan written by
    /// hand); the planner already keeps its categories off hugetlb. A program that
    /// cut its own mappings gets `mapped thp`: heap-large malloc blocks may still
    /// take hugetlb pages, its mappings take THP, which the kernel splits where the
    /// program cuts (hugetlb would need a copy, runtime/src/mapped.c).
    pub fn for_program(program: &hugetune_model::plan::ProgramTraits) -> Self {
        if program.outside {
            // Applied from outside the process: no library, so none of its
            // mechanisms (arena, fork protection, mapped memory).
            return PlanOptions {
                heap_small_arena: false,
                outside: true,
                ..PlanOptions::default()
            };
        }
        PlanOptions {
            fork_safe: program.forks.then_some(ForkSafe::Thp),
            mapped_thp: program.mapping_cuts > 0,
            ..PlanOptions::default()
        }
    }
}

/// The plan file the runtime library reads in apply mode.
pub fn plan_text(assignments: &[(Category, Backing)], threshold: u64) -> String {
    plan_text_with(assignments, threshold, &PlanOptions::default())
}

/// The plan file with the library's execution options (docs/formats.md §3).
pub fn plan_text_with(
    assignments: &[(Category, Backing)],
    threshold: u64,
    opts: &PlanOptions,
) -> String {
    let mut s = format!("hugetune-plan 1\nthreshold {threshold}\n");
    if opts.outside {
        s.push_str(
            "# applied from outside the process (the runtime library cannot enter it): \
             MADV_HUGEPAGE injected at the planned mappings' creation (a tracer) and \
             process_madvise(MADV_COLLAPSE) of what is already populated, THP only\n",
        );
    }
    if let Some(l) = opts.layout {
        s.push_str(&format!("layout {}\n", l.name()));
    }
    if let Some(f) = opts.fork_safe {
        s.push_str(&format!("fork-safe {}\n", f.name()));
    }
    if opts.mapped_thp {
        s.push_str("mapped thp\n");
    }
    if let Some(b) = opts.jvm {
        s.push_str(&format!("jvm {}\n", b.name()));
    }
    if let Some(n) = opts.pool_2m.filter(|&n| n > 0) {
        s.push_str(&format!("pool hugetlb-2m {n}\n"));
    }
    if let Some(n) = opts.pool_1g.filter(|&n| n > 0) {
        s.push_str(&format!("pool hugetlb-1g {n}\n"));
    }
    for (module, offset, b) in &opts.sites {
        s.push_str(&format!("site {module} {offset:#x} {b}\n"));
    }
    let mut tunable = false;
    for &(c, b) in assignments {
        if c == Category::HeapSmall && opts.heap_small_arena && b.is_huge() {
            match opts.arena_bytes {
                Some(n) => s.push_str(&format!("heap-small arena {} {n}\n", b.name())),
                None => s.push_str(&format!("heap-small arena {}\n", b.name())),
            }
            continue;
        }
        // The tunable form only knows THP (glibc advises its heap; the size is
        // the one the run's per-size controls enable: thp-2m or an mTHP size).
        let b = if c == Category::HeapSmall && b.is_huge() {
            tunable = true;
            if b.is_mthp() {
                b
            } else {
                Backing::Thp2m
            }
        } else {
            b
        };
        s.push_str(&format!("{} {}\n", c.name(), b.name()));
    }
    // glibc's THP tunable (used for heap-small) also advises glibc's own large
    // chunks; owning heap-large allocations on 4 KB pages keeps the categories apart.
    if tunable && !opts.outside && !assignments.iter().any(|&(c, _)| c == Category::HeapLarge) {
        s.push_str("heap-large 4k\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{apply_env, apply_env_with};
    use std::path::Path;

    #[test]
    fn site_directives_are_written_for_named_modules() {
        use hugetune_model::categorize::Site;
        use hugetune_model::rank::PlannedSite;
        let planned = |module: &str, offset| PlannedSite {
            site: Site { module: 0, offset },
            module: module.into(),
            backing: Backing::Hugetlb2m,
        };
        let opts = PlanOptions::default().with_sites(&[
            planned("/usr/bin/prog", 0x1a2b),
            planned("", 0x10),
            planned("/a b", 0x20),
        ]);
        let t = plan_text_with(&[], 131072, &opts);
        assert!(t.contains("site /usr/bin/prog 0x1a2b hugetlb-2m\n"), "{t}");
        assert_eq!(
            t.matches("site ").count(),
            1,
            "unnamed or unparsable modules are skipped: {t}"
        );
    }

    #[test]
    fn plan_files() {
        let t = plan_text(&[(Category::HeapLarge, Backing::Hugetlb2m)], 131072);
        assert_eq!(
            t,
            "hugetune-plan 1\nthreshold 131072\nheap-large hugetlb-2m\n"
        );
        // heap-small goes to the library's arena by default ...
        let t = plan_text(&[(Category::HeapSmall, Backing::Thp2m)], 131072);
        assert!(t.ends_with("heap-small arena thp-2m\n"), "{t}");
        let env = apply_env(
            Path::new("/l.so"),
            Path::new("/p"),
            None,
            &[(Category::HeapSmall, Backing::Thp2m)],
        );
        assert!(!env.iter().any(|(k, _)| k == "GLIBC_TUNABLES"));
        // ... or through glibc's tunable, which the environment then sets.
        let tun = PlanOptions {
            heap_small_arena: false,
            ..PlanOptions::default()
        };
        let t = plan_text_with(&[(Category::HeapSmall, Backing::Thp2m)], 131072, &tun);
        assert!(t.ends_with("heap-small thp-2m\nheap-large 4k\n"));
        let env = apply_env_with(
            Path::new("/l.so"),
            Path::new("/p"),
            None,
            &[(Category::HeapSmall, Backing::Thp2m)],
            &tun,
        );
        assert!(env
            .iter()
            .any(|(k, v)| k == "GLIBC_TUNABLES" && v.ends_with("glibc.malloc.hugetlb=1")));
        // mTHP sizes keep their size in both forms and for static data (the
        // run's per-size controls give the folios).
        let k64 = Backing::Thp(16);
        let t = plan_text_with(
            &[(Category::Static, k64), (Category::HeapSmall, k64)],
            131072,
            &tun,
        );
        assert!(
            t.ends_with("static thp-64k\nheap-small thp-64k\nheap-large 4k\n"),
            "{t}"
        );
        let t = plan_text(&[(Category::HeapSmall, k64)], 131072);
        assert!(t.ends_with("heap-small arena thp-64k\n"), "{t}");
        // all-large:1g: static data and heap-large on the 1 GB layout, in the
        // form runtime/src/plan.c accepts (runtime/tests/unit_plan.c).
        let t = plan_text(
            &[
                (Category::Static, Backing::Hugetlb1g),
                (Category::HeapLarge, Backing::Hugetlb1g),
            ],
            131072,
        );
        assert_eq!(
            t,
            "hugetune-plan 1\nthreshold 131072\nstatic hugetlb-1g\nheap-large hugetlb-1g\n"
        );
    }

    #[test]
    fn plan_options() {
        let opts = PlanOptions {
            layout: Some(Layout::RoundUp),
            fork_safe: Some(ForkSafe::Thp),
            pool_2m: Some(64),
            pool_1g: Some(0),
            heap_small_arena: true,
            arena_bytes: Some(1 << 30),
            sites: vec![],
            mapped_thp: true,
            outside: false,
            jvm: None,
        };
        let a = [
            (Category::HeapLarge, Backing::Hugetlb2m),
            (Category::HeapSmall, Backing::Hugetlb2m),
        ];
        let t = plan_text_with(&a, 131072, &opts);
        assert_eq!(
            t,
            "hugetune-plan 1\nthreshold 131072\nlayout round-up\nfork-safe thp\nmapped thp\n\
             pool hugetlb-2m 64\nheap-large hugetlb-2m\nheap-small arena hugetlb-2m 1073741824\n"
        );
        // The arena needs no glibc tunable; the tunable form is THP only.
        let env = apply_env_with(Path::new("/l.so"), Path::new("/p"), None, &a, &opts);
        assert!(!env.iter().any(|(k, _)| k == "GLIBC_TUNABLES"));
        let t = plan_text_with(
            &[(Category::HeapSmall, Backing::Hugetlb2m)],
            4096,
            &PlanOptions {
                heap_small_arena: false,
                ..PlanOptions::default()
            },
        );
        assert_eq!(
            t,
            "hugetune-plan 1\nthreshold 4096\nheap-small thp-2m\nheap-large 4k\n"
        );
        assert_eq!(
            plan_text_with(&[], 1, &PlanOptions::default()),
            plan_text(&[], 1)
        );
    }

    /// `jvm B`: written for the two backings the JVM's switches give, after
    /// the library's options; anything else is not a JVM directive.
    #[test]
    fn jvm_directive() {
        let t = plan_text_with(
            &[],
            131072,
            &PlanOptions::default().with_jvm(Some(Backing::Thp2m)),
        );
        assert_eq!(t, "hugetune-plan 1\nthreshold 131072\njvm thp-2m\n");
        let opts = PlanOptions {
            mapped_thp: true,
            ..PlanOptions::default()
        }
        .with_jvm(Some(Backing::Hugetlb2m));
        let t = plan_text_with(&[(Category::HeapLarge, Backing::Thp2m)], 4096, &opts);
        assert_eq!(
            t,
            "hugetune-plan 1\nthreshold 4096\nmapped thp\njvm hugetlb-2m\nheap-large thp-2m\n"
        );
        for b in [Backing::Hugetlb1g, Backing::Base4k, Backing::Thp(16)] {
            let o = PlanOptions::default().with_jvm(Some(b));
            assert_eq!(o.jvm, None, "{b}");
            assert!(!plan_text_with(&[], 1, &o).contains("jvm"));
        }
    }

    #[test]
    fn plans_applied_from_outside_say_so_and_use_none_of_the_librarys_mechanisms() {
        use hugetune_model::categorize::Site;
        use hugetune_model::plan::ProgramTraits;
        use hugetune_model::rank::PlannedSite;
        let outside = ProgramTraits {
            outside: true,
            forks: true,
            mapping_cuts: 2,
            ..ProgramTraits::default()
        };
        let opts = PlanOptions::for_program(&outside).with_sites(&[PlannedSite {
            site: Site {
                module: 0,
                offset: 0x10,
            },
            module: "/prog".into(),
            backing: Backing::Thp2m,
        }]);
        let a = [
            (Category::HeapSmall, Backing::Thp2m),
            (Category::Static, Backing::Thp2m),
        ];
        assert_eq!(
            plan_text_with(&a, 131072, &opts),
            "hugetune-plan 1\nthreshold 131072\n# applied from outside the process (the runtime \
             library cannot enter it): MADV_HUGEPAGE injected at the planned mappings' creation (a \
             tracer) and process_madvise(MADV_COLLAPSE) of what is already populated, THP \
             only\nheap-small thp-2m\nstatic thp-2m\n"
        );
    }

    #[test]
    fn programs_that_fork_get_fork_safe_thp() {
        use hugetune_model::plan::ProgramTraits;
        let a = [(Category::HeapLarge, Backing::Thp2m)];
        let forks = ProgramTraits {
            forks: true,
            fork_children: 1,
            ..ProgramTraits::default()
        };
        let text = plan_text_with(&a, 131072, &PlanOptions::for_program(&forks));
        assert!(text.contains("\nfork-safe thp\n"), "{text}");
        assert!(!text.contains("mapped"), "{text}");
        let cuts = ProgramTraits {
            mapping_cuts: 2,
            ..ProgramTraits::default()
        };
        let text = plan_text_with(&a, 131072, &PlanOptions::for_program(&cuts));
        assert!(text.contains("\nmapped thp\n"), "{text}");
        let text = plan_text_with(
            &a,
            131072,
            &PlanOptions::for_program(&ProgramTraits::default()),
        );
        assert!(!text.contains("fork-safe"), "{text}");
        assert_eq!(text, plan_text(&a, 131072));
    }
}
