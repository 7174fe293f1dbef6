//! A JVM's heap on huge pages through the JVM's own switch (issue 19 item 3,
//! docs/runtimes.md). The JVM reserves its heap `PROT_NONE` and commits it in
//! place (`MAP_FIXED`), so the heap is category `other` to the model and no
//! `heap-large`/`site` directive reaches it; HotSpot's
//! `-XX:+UseTransparentHugePages` (it advises its heap) or `-XX:+UseLargePages`
//! (hugetlb) does. This file holds the three steps:
//!
//! - plan ([`plan`]): a program that loaded `libjvm.so` (the profile's modules,
//!   `ProgramTraits::jvm`) whose modelled page walks lie mostly in `other`
//!   gets `PlanDecision::jvm = thp-2m`;
//! - launch ([`for_command`], [`environment`]): the command's own JVM options
//!   decide THP or hugetlb (hugetlb only with an explicit `-Xmx` whose heap and
//!   code cache the free pool already holds: JDK 17 commits the whole heap up
//!   front on hugetlb pages), and `JAVA_TOOL_OPTIONS` carries the switch plus a
//!   `-Xlog:pagesize` file that says where the heap is;
//! - proof ([`heap_report`]): the runtime library's summary lists the huge
//!   bytes of the JVM's anonymous mappings (smaps, plan `jvm`), the JVM's log
//!   names the heap's range: their overlap is what of the heap was huge.
//!
//! Invariant: a user's own huge page switch (on the command line or in the
//! JVM's environment variables) is never overridden: the plan's `jvm` is then
//! dropped for that run.

use super::note;
use hugetune_format::plan::PlanOptions;
use hugetune_format::summary::Summary;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::plan::{Availability, PlanDecision, ProgramTraits, ThpMode};
use hugetune_model::rank::{Prediction, Significance};
use std::ffi::OsString;
use std::path::Path;

/// The smallest share of the modelled 4 KB page walks in memory the JVM maps
/// itself (category `other`: its heap) for which its heap is planned on huge
/// pages. The random walks of workloads/java/Walk.java have 99-100 % there
/// (docs/runtimes.md); a JVM whose misses are elsewhere (its malloc'd C heap,
/// which the ordinary directives cover) gains nothing from the switch.
pub const MIN_HEAP_WALK_SHARE: f64 = 0.5;

/// HotSpot's default `ReservedCodeCacheSize` with tiered compilation (JDK 9+):
/// the code cache takes large pages too under `-XX:+UseLargePages`.
const DEFAULT_CODE_CACHE: u64 = 240 << 20;
const PAGE_2M: u64 = 2 << 20;

/// Plans a JVM's heap: sets `d.jvm` and says why (or why not) in the reasons.
/// The THP/hugetlb choice is made at launch (`for_command`), where the
/// command's `-Xmx` and the pool are known.
///
/// `lost`: labels of plans that lost a validation (`Policy::lost`). A plan
/// whose label with the switch (`heap-small:hugetlb+jvm:thp-2m`, `jvm:thp-2m`)
/// lost is not planned again with the switch: the switch is the part this
/// file adds, so it is the part left out (the rest was chosen on its own).
///
/// `min_saving_ns`: the smallest saving that justifies a mapping
/// (`Policy::min_gain` of the native run, as `plan::choose_with` takes it).
/// The heap's own prediction (`jvm:thp`) must reach it: the walks in `other`
/// may be in files or shared memory the JVM maps, which the switch leaves
/// on 4 KB pages and the prediction does not count.
pub fn plan(
    d: &mut PlanDecision,
    program: &ProgramTraits,
    sig: &Significance,
    predictions: &[Prediction],
    avail: &Availability,
    lost: &[String],
    min_saving_ns: f64,
) {
    if !program.jvm {
        return;
    }
    let total: u64 = sig.walks_by_category.iter().map(|&(_, w)| w).sum();
    let other: u64 = sig
        .walks_by_category
        .iter()
        .filter(|&&(c, _)| c == Category::Other)
        .map(|&(_, w)| w)
        .sum();
    let share = if total > 0 {
        other as f64 / total as f64
    } else {
        0.0
    };
    let heap = predictions.iter().find(|p| p.is_jvm_heap());
    let why = if !sig.passes {
        Some("its significance test failed".to_string())
    } else if let Some(p) = heap.filter(|p| p.saving_ns < min_saving_ns) {
        Some(format!(
            "its heap on THP is predicted to save {:.1} ms, below {:.1} ms: the walks in memory \
             it maps itself are in files or shared memory it maps (the switch leaves those as \
             they are)",
            p.saving_ns.max(0.0) / 1e6,
            min_saving_ns / 1e6
        ))
    } else if share < MIN_HEAP_WALK_SHARE {
        Some(format!(
            "{:.0} % of the modelled page walks are in memory the JVM maps itself (< {:.0} %)",
            share * 100.0,
            MIN_HEAP_WALK_SHARE * 100.0
        ))
    } else if avail.thp == ThpMode::Never && avail.hugetlb_2m_free == 0 {
        Some(
            "THP is `never` and no hugetlb page is free: the JVM's switches have nothing to use"
                .into(),
        )
    } else {
        None
    };
    if let Some(why) = why {
        d.reasons.push(format!(
            "the program is a JVM (libjvm.so loaded), but its heap stays on 4 KB pages: {why}"
        ));
        return;
    }
    d.jvm = Some(Backing::Thp2m);
    let label = d.label();
    if let Some(l) = lost
        .iter()
        .find(|l| **l == label || l.as_str() == "jvm:thp-2m")
    {
        d.jvm = None;
        d.reasons.push(format!(
            "the program is a JVM (libjvm.so loaded), but its heap stays on 4 KB pages: {l} \
             lost a validation on this host (`hugetune db` lists it)"
        ));
        return;
    }
    d.jvm_prediction = heap.cloned();
    let predicted = match &d.jvm_prediction {
        Some(p) => format!(
            "; predicted to save {:.1} ms ({:.2}x) with the heap on THP",
            p.saving_ns / 1e6,
            p.predicted_speedup
        ),
        None => String::new(),
    };
    d.reasons.push(format!(
        "the program is a JVM (libjvm.so loaded): {:.0} % of the modelled page walks are in memory \
         it maps itself (its heap, category other): plan `jvm thp-2m`, the JVM's own switch \
         (-XX:+UseTransparentHugePages; -XX:+UseLargePages where the command gives -Xmx and the \
         free hugetlb pool holds that heap){predicted}",
        share * 100.0
    ));
}

/// What a java command line says about its heap and its huge page switches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JavaOptions {
    /// `-Xmx` / `-XX:MaxHeapSize`, the last one given.
    pub max_heap: Option<u64>,
    /// `-XX:ReservedCodeCacheSize`.
    pub code_cache: Option<u64>,
    /// A huge page switch the user gave (`-XX:+UseLargePages`, ...).
    pub user_switch: Option<String>,
}

/// A JVM size (`1g`, `512m`, `65536k`, `1073741824`): bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        b't' | b'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// java launcher options that take the next argument as their value.
const WITH_VALUE: &[&str] = &[
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--limit-modules",
    "--add-exports",
    "--add-reads",
    "--add-opens",
    "--patch-module",
    "--enable-native-access",
    "--source",
];

impl JavaOptions {
    fn take(&mut self, opt: &str) {
        if let Some(v) = opt.strip_prefix("-Xmx") {
            self.max_heap = parse_size(v).or(self.max_heap);
        } else if let Some(v) = opt.strip_prefix("-XX:MaxHeapSize=") {
            self.max_heap = parse_size(v).or(self.max_heap);
        } else if let Some(v) = opt.strip_prefix("-XX:ReservedCodeCacheSize=") {
            self.code_cache = parse_size(v).or(self.code_cache);
        } else if [
            "UseLargePages",
            "UseTransparentHugePages",
            "LargePageSizeInBytes",
            "UseHugeTLBFS",
            "UseSHM",
        ]
        .iter()
        .any(|f| opt.starts_with("-XX:") && opt.contains(f))
        {
            self.user_switch = Some(opt.to_string());
        }
    }

    /// The options of `argv` (a `java` command: its options end at the main
    /// class, `-jar`, `-m` or `--module`), after those of the JVM's environment
    /// variables in the JVM's order: `JAVA_TOOL_OPTIONS`, `JDK_JAVA_OPTIONS`,
    /// the command line, `_JAVA_OPTIONS` (the last value wins).
    pub fn of(argv: &[OsString], env: &dyn Fn(&str) -> Option<String>) -> JavaOptions {
        let mut o = JavaOptions::default();
        let words = |v: Option<String>| -> Vec<String> {
            v.map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        for w in words(env("JAVA_TOOL_OPTIONS")) {
            o.take(&w);
        }
        for w in words(env("JDK_JAVA_OPTIONS")) {
            o.take(&w);
        }
        let mut it = argv.iter().skip(1).map(|a| a.to_string_lossy());
        while let Some(a) = it.next() {
            if !a.starts_with('-') || matches!(&*a, "-jar" | "-m" | "--module") {
                break;
            }
            if WITH_VALUE.contains(&&*a) {
                it.next();
                continue;
            }
            o.take(&a);
        }
        for w in words(env("_JAVA_OPTIONS")) {
            o.take(&w);
        }
        o
    }

    /// 2 MB pages `-XX:+UseLargePages` takes at start-up: the whole heap
    /// (JDK 17 reserves and commits it in one MAP_HUGETLB mapping, measured:
    /// docs/runtimes.md) and the code cache, which commits its own as it grows.
    pub fn hugetlb_pages(&self) -> Option<u64> {
        let heap = self.max_heap?;
        let code = self.code_cache.unwrap_or(DEFAULT_CODE_CACHE);
        Some(heap.div_ceil(PAGE_2M) + code.div_ceil(PAGE_2M))
    }
}

/// The java command `argv` runs: itself, or the one a launcher starts.
fn java_argv(argv: &[OsString]) -> Vec<OsString> {
    if hugetune_capture::launcher::launcher_of(argv).is_some() {
        if let Some(g) = hugetune_capture::launcher::guess_program(argv) {
            return g;
        }
    }
    argv.to_vec()
}

/// The plan options for this command: the `jvm` directive kept as THP,
/// turned into hugetlb where the command's `-Xmx` heap (and code cache) fits
/// the free pool now, or dropped where the command sets its own switch. Says
/// what it decided when `say`. hugetune never grows a pool for a JVM.
/// `avail` is asked only for a JVM plan (a plain run's start pays nothing).
pub fn for_command(
    opts: &PlanOptions,
    argv: &[OsString],
    avail: &dyn Fn() -> Availability,
    say: bool,
) -> PlanOptions {
    let mut out = opts.clone();
    if opts.jvm.is_none() {
        return out;
    }
    let j = JavaOptions::of(&java_argv(argv), &|k| std::env::var(k).ok());
    let (b, why) = choose(&j, &avail());
    out.jvm = b;
    if say {
        note(why);
    }
    out
}

/// The JVM backing for these options and pool, and why.
pub fn choose(j: &JavaOptions, avail: &Availability) -> (Option<Backing>, String) {
    if let Some(s) = &j.user_switch {
        return (
            None,
            format!("JVM: the command sets its own huge page switch ({s}); hugetune leaves it"),
        );
    }
    let thp_ok = avail.thp != ThpMode::Never;
    match (j.max_heap, j.hugetlb_pages()) {
        (Some(heap), Some(need)) if avail.hugetlb_2m_free >= need => (
            Some(Backing::Hugetlb2m),
            format!(
                "JVM: -XX:+UseLargePages: the {} heap (-Xmx) and the code cache take {need} \
                 hugetlb pages at start-up; {} are free",
                hugetune_render::bytes(heap),
                avail.hugetlb_2m_free
            ),
        ),
        (Some(_), Some(need)) if thp_ok => (
            Some(Backing::Thp2m),
            format!(
                "JVM: -XX:+UseTransparentHugePages (hugetlb would take {need} pages at start-up, \
                 {} are free; hugetune does not grow a pool for a JVM)",
                avail.hugetlb_2m_free
            ),
        ),
        _ if thp_ok => (
            Some(Backing::Thp2m),
            "JVM: -XX:+UseTransparentHugePages (no -Xmx: on hugetlb pages the JVM would commit \
             its default maximum heap, a quarter of the memory, at start-up)"
                .into(),
        ),
        _ => (
            None,
            "JVM: THP is `never` and the pool cannot hold the heap: its heap stays on 4 KB pages"
                .into(),
        ),
    }
}

/// The feature release of the JDK whose `java` `argv` runs, from its
/// `release` file (`JAVA_VERSION="17.0.15"`, `"1.8.0_402"` is 8); None when
/// it cannot be found.
pub fn java_release(argv: &[OsString]) -> Option<u32> {
    let argv = java_argv(argv);
    let exe = hugetune_capture::elf::resolve_program(argv.first()?)?;
    let home = std::fs::canonicalize(exe)
        .ok()?
        .parent()?
        .parent()?
        .to_path_buf();
    let text = std::fs::read_to_string(home.join("release")).ok()?;
    release_major(&text)
}

fn release_major(release: &str) -> Option<u32> {
    let v = release
        .lines()
        .find_map(|l| l.strip_prefix("JAVA_VERSION="))?
        .trim_matches('"');
    let mut parts = v.split(['.', '_', '-', '+']);
    match parts.next()?.parse().ok()? {
        1 => parts.next()?.parse().ok(),
        n => Some(n),
    }
}

/// The JVM's switch for a plan's `jvm` directive, appended to the user's
/// `JAVA_TOOL_OPTIONS` (in `env` or inherited), with the JVM's page size log
/// written to `log_dir/jvm.%p.log` (the heap's range for [`heap_report`])
/// where the JDK of `argv` has unified logging (9+: an older JVM refuses
/// `-Xlog` and would not start). The JVM prints "Picked up
/// JAVA_TOOL_OPTIONS: ..." on stderr.
pub fn environment(
    opts: &PlanOptions,
    argv: &[OsString],
    log_dir: Option<&Path>,
    env: &mut Vec<(String, String)>,
) {
    let log_dir = log_dir.filter(|_| java_release(argv).is_some_and(|r| r >= 9));
    let switch = match opts.jvm {
        Some(Backing::Hugetlb2m) => "-XX:+UseLargePages -XX:LargePageSizeInBytes=2m",
        Some(b) if b == Backing::Thp2m => "-XX:+UseTransparentHugePages",
        _ => return,
    };
    let mut v = match env.iter().position(|(k, _)| k == "JAVA_TOOL_OPTIONS") {
        Some(i) => env.remove(i).1,
        None => std::env::var("JAVA_TOOL_OPTIONS").unwrap_or_default(),
    };
    if !v.trim().is_empty() {
        v.push(' ');
    }
    v.push_str(switch);
    // The JVM splits the variable on whitespace and -Xlog on ':'.
    if let Some(d) = log_dir.map(|d| d.display().to_string()) {
        if !d.contains(|c: char| c.is_whitespace() || c == ':' || c == ',') {
            v.push_str(&format!(" -Xlog:pagesize:file={d}/jvm.%p.log"));
        }
    }
    env.push(("JAVA_TOOL_OPTIONS".into(), v));
}

/// The Java heap as the JVM's page size log names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapLog {
    pub base: u64,
    pub size: u64,
    /// The page size the JVM says it used (`4K`, `2M`).
    pub page_size: String,
}

/// The heap line of a `-Xlog:pagesize` log ("Heap:  min=8M max=256M
/// base=0x00000000f0000000 page_size=2M size=256M").
pub fn parse_heap_log(text: &str) -> Option<HeapLog> {
    let line = text.lines().find(|l| l.contains("] Heap:"))?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k).map(str::to_string))
    };
    let base = u64::from_str_radix(field("base=")?.strip_prefix("0x")?, 16).ok()?;
    let size = parse_size(&field("size=")?)?;
    Some(HeapLog {
        base,
        size,
        page_size: field("page_size=")?,
    })
}

/// What of a JVM's heap was huge in one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapBacking {
    /// The heap's reserved range, when the JVM logged it.
    pub heap: Option<HeapLog>,
    /// Huge bytes (AnonHugePages + Private_Hugetlb) inside the heap's range,
    /// or of all the JVM's anonymous memory without a heap range.
    pub huge_bytes: u64,
    /// Huge bytes of the JVM's anonymous memory outside the heap (code cache).
    pub other_huge_bytes: u64,
}

/// The heap's huge bytes: the summaries' `jvm` ranges (smaps at exit) inside
/// the heap ranges of the JVM logs in `dir`, per process, summed.
pub fn heap_backing(dir: &Path, summaries: &[serde_json::Value]) -> Option<HeapBacking> {
    let mut out: Option<HeapBacking> = None;
    for v in summaries {
        let Ok(s) = Summary::from_value(v) else {
            continue;
        };
        let Some(j) = &s.jvm else { continue };
        let log = std::fs::read_to_string(dir.join(format!("jvm.{}.log", s.pid)))
            .ok()
            .and_then(|t| parse_heap_log(&t));
        let all = j.anon_huge_bytes + j.hugetlb_bytes;
        let in_heap = match &log {
            Some(h) => j
                .ranges
                .iter()
                .filter_map(|r| {
                    let (lo, hi) = r.span()?;
                    let o = hi.min(h.base + h.size).saturating_sub(lo.max(h.base));
                    Some((r.anon_huge_bytes + r.hugetlb_bytes).min(o))
                })
                .sum(),
            None => all,
        };
        let acc = out.get_or_insert(HeapBacking {
            heap: None,
            huge_bytes: 0,
            other_huge_bytes: 0,
        });
        acc.heap = acc.heap.take().or(log);
        acc.huge_bytes += in_heap;
        acc.other_huge_bytes += all.saturating_sub(in_heap);
    }
    out
}

/// Says what of the Java heap was huge in a run (nothing without a `jvm` summary).
pub fn note_heap(dir: &Path, summaries: &[serde_json::Value]) {
    if let Some(line) = heap_report(dir, summaries) {
        note(line);
    }
}

/// The line a run prints about its Java heap (None: no `jvm` summary).
pub fn heap_report(dir: &Path, summaries: &[serde_json::Value]) -> Option<String> {
    let b = heap_backing(dir, summaries)?;
    let bytes = hugetune_render::bytes;
    Some(match &b.heap {
        Some(h) => format!(
            "Java heap: {} of its {} reservation on huge pages (smaps at exit; the JVM logged page_size={}); {} more in its other memory",
            bytes(b.huge_bytes),
            bytes(h.size),
            h.page_size,
            bytes(b.other_huge_bytes)
        ),
        None => format!(
            "JVM: {} of its anonymous memory on huge pages (smaps at exit; no heap range logged)",
            bytes(b.huge_bytes)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdk_release_from_its_release_file() {
        assert_eq!(
            release_major("IMPLEMENTOR=\"Debian\"\nJAVA_VERSION=\"17.0.15\"\n"),
            Some(17)
        );
        assert_eq!(release_major("JAVA_VERSION=\"1.8.0_402\""), Some(8));
        assert_eq!(release_major("JAVA_VERSION=\"21\""), Some(21));
        assert_eq!(release_major("JAVA_VERSION=\"x\""), None);
        assert_eq!(release_major(""), None);
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn sizes_as_the_jvm_reads_them() {
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("65536k"), Some(64 << 20));
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size("1.5g"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999t"), None);
    }

    /// Options end at the main class; the environment's come first, then the
    /// command line, then _JAVA_OPTIONS; a user's switch is noticed anywhere.
    #[test]
    fn java_options_in_the_jvms_order() {
        let none = |_: &str| None;
        let o = JavaOptions::of(
            &os(&[
                "java", "-cp", "-Xmx9g", "-Xmx1g", "-Xms512m", "Walk", "-Xmx2g",
            ]),
            &none,
        );
        assert_eq!(o.max_heap, Some(1 << 30));
        assert_eq!(o.user_switch, None);
        assert_eq!(o.hugetlb_pages(), Some(512 + 120));
        let o = JavaOptions::of(&os(&["java", "-jar", "app.jar", "-Xmx1g"]), &none);
        assert_eq!(o.max_heap, None);
        assert_eq!(o.hugetlb_pages(), None);
        let env = |k: &str| match k {
            "JAVA_TOOL_OPTIONS" => Some("-Xmx4g -XX:ReservedCodeCacheSize=64m".to_string()),
            "_JAVA_OPTIONS" => Some("-XX:MaxHeapSize=256m".to_string()),
            _ => None,
        };
        let o = JavaOptions::of(&os(&["java", "-Xmx1g", "Main"]), &env);
        assert_eq!(o.max_heap, Some(256 << 20));
        assert_eq!(o.hugetlb_pages(), Some(128 + 32));
        let o = JavaOptions::of(
            &os(&["java", "-XX:-UseTransparentHugePages", "Main"]),
            &none,
        );
        assert_eq!(
            o.user_switch.as_deref(),
            Some("-XX:-UseTransparentHugePages")
        );
    }

    fn avail(free: u64, thp: ThpMode) -> Availability {
        Availability {
            hugetlb_2m_free: free,
            hugetlb_2m_total: free,
            hugetlb_1g_free: 0,
            thp,
            mthp: vec![],
            thp_settable: vec![],
            thp_2m_allocatable: None,
        }
    }

    /// hugetlb only for an explicit -Xmx whose pages are free now; THP
    /// otherwise; nothing where neither works or the user chose.
    #[test]
    fn backing_from_the_command_and_the_pool() {
        let j = JavaOptions {
            max_heap: Some(1 << 30),
            ..Default::default()
        };
        assert_eq!(
            choose(&j, &avail(632, ThpMode::Madvise)).0,
            Some(Backing::Hugetlb2m)
        );
        assert_eq!(
            choose(&j, &avail(631, ThpMode::Madvise)).0,
            Some(Backing::Thp2m)
        );
        assert_eq!(choose(&j, &avail(0, ThpMode::Never)).0, None);
        let default_heap = JavaOptions::default();
        let (b, why) = choose(&default_heap, &avail(100_000, ThpMode::Madvise));
        assert_eq!(b, Some(Backing::Thp2m), "{why}");
        assert!(why.contains("no -Xmx"), "{why}");
        let user = JavaOptions {
            max_heap: Some(1 << 30),
            user_switch: Some("-XX:+UseLargePages".into()),
            ..Default::default()
        };
        assert_eq!(choose(&user, &avail(10_000, ThpMode::Madvise)).0, None);
    }

    fn sig(walks: Vec<(Category, u64)>, passes: bool) -> Significance {
        Significance {
            tlb_misses_per_s: 1e6,
            faults_per_s: 0.0,
            passes,
            source: "model".into(),
            walks_by_category: walks,
        }
    }

    #[test]
    fn plans_a_jvm_whose_walks_are_in_its_own_memory() {
        let jvm = ProgramTraits {
            jvm: true,
            ..Default::default()
        };
        let a = avail(0, ThpMode::Madvise);
        let hot = sig(vec![(Category::Other, 95), (Category::HeapSmall, 5)], true);
        // The model's predictions: the heap on THP saves most, heap-small on
        // THP a little; the planner never takes the heap's as a directive.
        let pred = |c: Category, saving_ms: f64| {
            let assignments = vec![(c, Backing::Thp2m)];
            Prediction {
                mapping: hugetune_model::analysis::category_name(c).into(),
                label: hugetune_model::rank::label(&assignments),
                base: c != Category::Other,
                assignments,
                sites: vec![],
                miss_time_ns: 0.0,
                saving_ns: saving_ms * 1e6,
                pmb: 0.0,
                predicted_seconds: 1.0 - saving_ms / 1e3,
                predicted_speedup: 1.0 / (1.0 - saving_ms / 1e3),
                hugetlb_pages: 0,
                hugetlb_1g_pages: 0,
                static_pages_1g: (0, 0),
                thp_pages: 1,
                walks: 0,
                faults: 0,
            }
        };
        let preds = [
            pred(Category::Other, 400.0),
            pred(Category::HeapSmall, 30.0),
        ];
        assert_eq!(preds[0].label, "jvm:thp");
        let mut d =
            hugetune_model::plan::choose_with(&preds, &hot, &a, &jvm, 1.0, &Default::default());
        assert_eq!(
            d.prediction.as_ref().map(|p| p.label.as_str()),
            Some("heap-small:thp"),
            "{:?}",
            d.reasons
        );
        assert_eq!(d.prediction.as_ref().unwrap().pmb, 100.0, "over the rest");
        plan(&mut d, &jvm, &hot, &preds, &a, &[], 10e6);
        assert_eq!(d.jvm, Some(Backing::Thp2m), "{:?}", d.reasons);
        assert_eq!(d.label(), "heap-small:thp+jvm:thp-2m");
        assert_eq!(d.jvm_prediction.as_ref(), Some(&preds[0]));
        assert!(
            d.reasons
                .last()
                .unwrap()
                .contains("predicted to save 400.0 ms (1.67x)"),
            "{:?}",
            d.reasons
        );
        let mut d =
            hugetune_model::plan::choose_with(&[], &hot, &a, &jvm, 1.0, &Default::default());
        plan(&mut d, &jvm, &hot, &[], &a, &[], 10e6);
        assert_eq!(d.jvm, Some(Backing::Thp2m), "{:?}", d.reasons);
        assert_eq!(d.label(), "jvm:thp-2m");
        assert_eq!(d.jvm_prediction, None);
        // The switch lost a validation: not planned again, and said why.
        let mut d =
            hugetune_model::plan::choose_with(&[], &hot, &a, &jvm, 1.0, &Default::default());
        plan(
            &mut d,
            &jvm,
            &hot,
            &preds,
            &a,
            &["jvm:thp-2m".to_string()],
            10e6,
        );
        assert_eq!(d.jvm_prediction, None, "no switch, no prediction of it");
        assert_eq!(d.jvm, None);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("jvm:thp-2m lost a validation")),
            "{:?}",
            d.reasons
        );
        // Not a JVM, misses elsewhere, nothing significant: no directive.
        for (p, s) in [
            (ProgramTraits::default(), hot.clone()),
            (
                jvm,
                sig(vec![(Category::Other, 40), (Category::HeapLarge, 60)], true),
            ),
            (jvm, sig(vec![(Category::Other, 95)], false)),
        ] {
            let mut d =
                hugetune_model::plan::choose_with(&[], &s, &a, &p, 1.0, &Default::default());
            plan(&mut d, &p, &s, &preds, &a, &[], 10e6);
            assert_eq!(d.jvm, None, "{:?}", d.reasons);
        }
        // Walks in `other`, but in files the JVM maps: the heap's own
        // prediction is below the planner's threshold, so no switch.
        let mut d =
            hugetune_model::plan::choose_with(&[], &hot, &a, &jvm, 1.0, &Default::default());
        plan(&mut d, &jvm, &hot, &preds, &a, &[], 500e6);
        assert_eq!(d.jvm, None, "{:?}", d.reasons);
        assert_eq!(d.jvm_prediction, None);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("predicted to save 400.0 ms, below 500.0 ms")),
            "{:?}",
            d.reasons
        );
    }

    #[test]
    fn environment_appends_to_the_users_options() {
        let opts = PlanOptions::default().with_jvm(Some(Backing::Thp2m));
        let mut env = vec![("JAVA_TOOL_OPTIONS".to_string(), "-Dx=1".to_string())];
        let java = os(&["java"]);
        let log = java_release(&java).is_some_and(|r| r >= 9);
        environment(&opts, &java, Some(Path::new("/tmp/d")), &mut env);
        assert_eq!(
            env,
            vec![(
                "JAVA_TOOL_OPTIONS".to_string(),
                if log {
                    "-Dx=1 -XX:+UseTransparentHugePages -Xlog:pagesize:file=/tmp/d/jvm.%p.log"
                } else {
                    "-Dx=1 -XX:+UseTransparentHugePages" // no JDK 9+ here: no -Xlog
                }
                .to_string()
            )]
        );
        let opts = PlanOptions::default().with_jvm(Some(Backing::Hugetlb2m));
        let mut env = vec![];
        environment(&opts, &java, Some(Path::new("/a b")), &mut env);
        let v = &env
            .iter()
            .find(|(k, _)| k == "JAVA_TOOL_OPTIONS")
            .unwrap()
            .1;
        assert!(
            v.ends_with("-XX:+UseLargePages -XX:LargePageSizeInBytes=2m"),
            "{v}"
        );
        let mut env = vec![];
        environment(&PlanOptions::default(), &java, None, &mut env);
        assert!(env.is_empty());
    }

    /// The heap's range from the JVM's log, its huge bytes from the summary.
    #[test]
    fn heap_backing_from_the_log_and_the_summary() {
        let log = "[0.015s][info][pagesize] CodeHeap 'non-nmethods':  min=4M max=6M base=0x00007fcdac800000 page_size=2M size=6M\n\
                   [0.053s][info][pagesize] Heap:  min=8M max=256M base=0x00000000f0000000 page_size=2M size=256M\n";
        let h = parse_heap_log(log).unwrap();
        assert_eq!(
            (h.base, h.size, h.page_size.as_str()),
            (0xf000_0000, 256 << 20, "2M")
        );
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("jvm.7.log"), log).unwrap();
        let summary = serde_json::json!({"pid": 7, "jvm": {"backing": "thp-2m",
            "anon_huge_bytes": 77594624u64, "hugetlb_bytes": 0,
            "ranges": [{"start": "0xf0000000", "bytes": 266338304u64, "anon_huge_bytes": 71303168u64},
                       {"start": "0x7fcdac800000", "bytes": 4194304, "anon_huge_bytes": 6291456u64}]}});
        let b = heap_backing(d.path(), std::slice::from_ref(&summary)).unwrap();
        assert_eq!(b.huge_bytes, 71303168);
        assert_eq!(b.other_huge_bytes, 77594624 - 71303168);
        assert!(heap_report(d.path(), std::slice::from_ref(&summary))
            .unwrap()
            .contains("Java heap: 68.0 MiB"));
        // Without the log: all of the JVM's anonymous huge memory.
        let e = tempfile::tempdir().unwrap();
        assert_eq!(
            heap_backing(e.path(), &[summary]).unwrap().huge_bytes,
            77594624
        );
        assert_eq!(
            heap_backing(e.path(), &[serde_json::json!({"pid": 1})]),
            None
        );
    }
}
