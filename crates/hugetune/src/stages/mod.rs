//! The stages of the pipeline, composed by the commands (`cmd/`):
//! record → profile bundle → analyze → directives (DB) → plan → apply/run → validate.
//! One file per stage; this file holds what they share (the command line as the
//! user typed it, the progress note). Commands call the stages; the stages call
//! the libraries (docs/architecture.md).

use anyhow::{bail, Context, Result};
use hugetune_capture::{elf, launcher};
use hugetune_format::profile::Program;
use std::ffi::OsString;

mod analyze;
mod apply;
mod damon_plan;
mod fleet;
pub mod jvm;
mod plan;
mod record;
pub mod start_cache;
mod time_sampled;
mod validate;

pub use analyze::*;
pub use apply::*;
pub use damon_plan::*;
pub use fleet::*;
pub use plan::*;
pub use record::*;
pub use validate::*;

/// The smallest predicted saving, as a fraction of the run time, worth huge pages.
pub const DEFAULT_MIN_GAIN: f64 = 0.01;

pub fn display_cmd(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.is_empty() || s.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
                format!("'{}'", s.replace('\'', "'\\''"))
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Splits a shell-like command string (for `--profile-cmd "CMD ARGS"`): words on
/// whitespace, with single and double quotes.
pub fn split_command(s: &str) -> Result<Vec<OsString>> {
    let (words, open_quote) = hugetune_capture::launcher::shell_words(s);
    if open_quote {
        bail!("unbalanced quote in command '{s}'");
    }
    if words.is_empty() {
        bail!("empty command");
    }
    Ok(words.into_iter().map(OsString::from).collect())
}

/// The program `argv` runs: its executable and build-id. A launcher's
/// command (`bash -c`, `mpirun -np 2`, …) is the program it starts, read from
/// its arguments (docs/launchers.md); `record` confirms it with what ran.
pub fn program_of(argv: &[OsString]) -> Result<Program> {
    let first = argv.first().context("empty command")?;
    if launcher::launcher_of(argv).is_none() {
        return program_at(first);
    }
    // Where the arguments name no program that exists (a shell builtin first:
    // `sh -c 'exit 0'`; arguments hugetune does not read), the launcher is what
    // runs, and it is the identity; a profile confirms what was exec'd and
    // refuses a launcher that started no program (docs/launchers.md).
    match launcher::guess_program(argv) {
        Some(g) if !g.is_empty() => program_at(&g[0]).or_else(|e| program_at(first).map_err(|_| e)),
        _ => program_at(first),
    }
}

/// The identity of the executable `first` names (resolved like execvp).
pub fn program_at(first: &std::ffi::OsStr) -> Result<Program> {
    let path = elf::resolve_program(first)
        .with_context(|| format!("cannot find the program '{}'", first.to_string_lossy()))?;
    let build_id = elf::build_id(&path).unwrap_or(None);
    Ok(Program {
        path: path.display().to_string(),
        build_id,
    })
}

pub fn note(msg: impl AsRef<str>) {
    crate::progress::println(&format!("hugetune: {}", msg.as_ref()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugetune_capture::qemu;
    use hugetune_host::calibrate::Calibration;
    use hugetune_model::category::Category;
    use hugetune_model::cost::CostModel;
    use hugetune_model::page::Backing;
    use hugetune_model::plan::ProgramTraits;
    use hugetune_model::rank::Prediction;

    /// A validation agrees when the prediction lies in the measured interval or
    /// the measured gain is at least the predicted one; a shortfall lowers it in
    /// proportion to the predicted gain.
    #[test]
    fn agreement_penalizes_shortfalls_only() {
        // inside the interval
        assert_eq!(agreement(1.10, 1.12, (1.05, 1.15)), 1.0);
        // measured more than promised (optimize measured 2.13x where 1.05x was predicted)
        assert_eq!(agreement(1.05, 2.13, (1.59, 2.38)), 1.0);
        // measured half the predicted gain: gains 0.5 vs 0.25 -> 0.5
        let a = agreement(2.0, 1.0 / 0.75, (1.30, 1.36));
        assert!((a - 0.5).abs() < 1e-9, "{a}");
        // no gain at all where 1.5x was predicted
        assert_eq!(agreement(1.5, 1.0, (0.98, 1.02)), 0.0);
        // a loss measured
        assert_eq!(agreement(1.2, 0.8, (0.75, 0.85)), 0.0);
        // predicted nothing, measured 1 % more time: short by 1 % of at least 2 %
        let a = agreement(1.0, 1.0 / 1.01, (0.985, 0.995));
        assert!((a - 0.5).abs() < 1e-9, "{a}");
    }

    /// A calibration replaces the figures it has and leaves the others at their
    /// defaults; names it does not know are ignored, not guessed.
    #[test]
    fn calibration_becomes_the_cost_model() {
        let c: Calibration = serde_json::from_value(serde_json::json!({
            "l2_hit_ns": [1.5, 1.6, 1.7],
            "walk_curve": [[[262144.0, 20.0], [1048576.0, 40.0]], [], []],
            "fault_ns": [["4k", 1500.0], ["hugetlb-1g", 46e6], ["thp-3m", 1.0]],
            "sources": [],
            "machine": "test",
            "created": "2026-11-22T00:00:00Z"
        }))
        .unwrap();
        let m = cost_from_calibration(&c);
        m.validate().unwrap();
        let d = CostModel::default();
        assert_eq!(m.l2_hit_ns, [1.5, 1.6, 1.7]);
        assert_eq!(m.walk_curve[0], vec![(262144.0, 20.0), (1048576.0, 40.0)]);
        assert_eq!(
            m.walk_curve[1], d.walk_curve[1],
            "no 2 MB curve: default kept"
        );
        assert_eq!(m.fault(Backing::Base4k), 1500.0);
        assert_eq!(m.fault(Backing::Hugetlb1g), 46e6);
        assert_eq!(m.fault(Backing::Thp2m), d.fault(Backing::Thp2m));
        assert!(m.source.contains("calibrate"));
        // A calibration from before the overlap was measured keeps its defaults;
        // one with it sets all three.
        assert_eq!(
            (m.memory_ns, m.walk_concurrency, m.independent_ns_per_walk),
            (d.memory_ns, d.walk_concurrency, d.independent_ns_per_walk)
        );
        let spread = serde_json::json!({"median": 100.0, "min": 90.0, "max": 110.0, "reps": 5});
        let mut v = serde_json::to_value(&c).unwrap();
        v["overlap"] = serde_json::json!({
            "memory_ns": 150.0, "walk_concurrency": 40.0, "independent_ns_per_walk": 12.0,
            "dependent_walk": spread, "independent_walk": spread, "pt_bytes": 524288.0
        });
        let c2: Calibration = serde_json::from_value(v).unwrap();
        let m2 = cost_from_calibration(&c2);
        m2.validate().unwrap();
        assert_eq!(
            (
                m2.memory_ns,
                m2.walk_concurrency,
                m2.independent_ns_per_walk
            ),
            (150.0, 40.0, 12.0)
        );
    }

    /// Pool pages for the reference input: heap-large's from the sizing run,
    /// heap-small's from its peak bytes at the training profile's pages per
    /// byte; both add up in a mapping that has both.
    #[test]
    fn reference_pages_for_heap_large_and_the_heap_small_arena() {
        let pred = |a: Vec<(Category, Backing)>, pages| Prediction {
            mapping: String::new(),
            label: hugetune_model::rank::label(&a),
            base: true,
            assignments: a,
            miss_time_ns: 0.0,
            saving_ns: 1.0,
            pmb: 100.0,
            predicted_seconds: 1.0,
            predicted_speedup: 1.0,
            hugetlb_pages: pages,
            hugetlb_1g_pages: 0,
            static_pages_1g: (0, 0),
            thp_pages: 0,
            sites: vec![],
            walks: 0,
            faults: 0,
        };
        use Backing::*;
        use Category::*;
        let preds = vec![
            pred(vec![(HeapSmall, Hugetlb2m)], 6),
            pred(vec![(HeapSmall, Backing::Thp2m)], 0),
            pred(vec![(HeapLarge, Hugetlb2m)], 3),
            pred(vec![(HeapSmall, Hugetlb2m), (HeapLarge, Hugetlb2m)], 9),
            pred(vec![(HeapLarge, Hugetlb1g)], 0),
            // Static data on the 1 GB layout (1 GB page, 2 MB pages) with
            // heap-large on 1 GB pages: static's pages stay, the heap's scale.
            Prediction {
                hugetlb_1g_pages: 1,
                static_pages_1g: (1, 5),
                ..pred(vec![(Static, Hugetlb1g), (HeapLarge, Hugetlb1g)], 5)
            },
        ];
        let sizing = Sizing {
            heap_large_pages: 1100,
            heap_small_peak_bytes: 1 << 30,
            program: ProgramTraits::default(),
            pool: vec![],
        };
        // Training: 6 pages for 10 MiB of live objects (0.6 pages per MiB,
        // more than the 0.5 of bare 2 MB frames): 1 GiB needs 615 pages.
        let small = sizing.heap_small_pages(Some((10 << 20, 6)));
        assert_eq!(small, 615);
        // Without a training ratio: 2 MB frames plus an eighth.
        assert_eq!(sizing.heap_small_pages(None), 576);
        assert_eq!(sizing.heap_small_pages(Some((0, 6))), 576);
        // Fewer pages per byte than bare frames is not believed.
        assert_eq!(sizing.heap_small_pages(Some((1 << 30, 1))), 512);
        let r = with_reference_pages(&preds, sizing.heap_large_pages, small);
        let pages: Vec<(u64, u64)> = r
            .iter()
            .map(|p| (p.hugetlb_pages, p.hugetlb_1g_pages))
            .collect();
        assert_eq!(
            pages,
            vec![(615, 0), (0, 0), (1100, 0), (1715, 0), (76, 2), (81, 3)]
        );
        let none = Sizing {
            heap_small_peak_bytes: 0,
            ..sizing
        };
        assert_eq!(none.heap_small_pages(Some((10 << 20, 6))), 0);
    }

    /// optimize's profile: every reference, or DAMON's regions; never perf.
    #[test]
    fn complete_refs_are_qemu_or_valgrind() {
        let auto = RefOptions::complete(RefSource::Auto).unwrap().source;
        let want = if qemu::find_qemu().is_some() {
            RefSource::Qemu
        } else {
            RefSource::Valgrind
        };
        assert_eq!(auto, want);
        for s in [RefSource::Qemu, RefSource::Valgrind, RefSource::Perf] {
            let o = RefOptions::complete(s).unwrap();
            assert_eq!((o.source, o.rate, o.max_pages), (s, None, None));
        }
        // DAMON: a frequency estimate (damon_plan.rs), taken as asked.
        assert_eq!(
            RefOptions::complete(RefSource::Damon).unwrap().source,
            RefSource::Damon
        );
    }

    #[test]
    fn auto_prefers_perf_then_qemu_then_valgrind() {
        assert_eq!(auto_choice(true, true), RefSource::Perf);
        assert_eq!(auto_choice(true, false), RefSource::Perf);
        assert_eq!(auto_choice(false, true), RefSource::Qemu);
        assert_eq!(auto_choice(false, false), RefSource::Valgrind);
    }
}
