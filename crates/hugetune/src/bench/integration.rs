//! `bench integration` (seed 000, Piehl): how the allocation pattern decides
//! which integration works. One big buffer (GAMESS-like), many 3–12 MiB
//! buffers with every fourth k×2 MiB + 1 byte (HPL-like), hundreds of thousands
//! of ~2 KiB objects (PTrees-like), under 4 KB pages, THP, hugetlb through the
//! runtime library (whole pages + a 4 KB tail), and hugetlb with unrounded
//! sizes (whole huge pages for every block: the "2 MB + 1 byte" trap, the last
//! page zeroed for a byte). Wall, user and system time, faults.

use super::config::{Config, Coverage};
use super::output::{self, SuiteReport};
use super::run::{Workload, WorkloadResult};
use super::{drop_missing_kernels, emit, select, select_configs, Opts, SuiteRun};
use anyhow::Result;
use hugetune_format::plan::{Layout, PlanOptions};
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use serde_json::json;

pub fn size(quick: bool) -> u64 {
    if quick {
        32 << 20
    } else {
        1 << 30
    }
}

pub fn workloads(quick: bool) -> Vec<Workload> {
    let s = size(quick);
    let mib = s >> 20;
    vec![
        Workload::work(
            "bigbuf",
            &format!("GAMESS-like: one malloc of {mib} MiB, then computed over"),
            &format!("bigbuf --size {s}"),
            "wall",
            "memory",
        ),
        Workload::work(
            "panels",
            &format!(
                "HPL-like: {mib} MiB in many 3-12 MiB mallocs, every fourth k x 2 MiB + 1 byte"
            ),
            &format!("panels --size {s}"),
            "wall",
            "memory",
        ),
        Workload::work(
            "ptrees",
            &format!("PTrees-like: {mib} MiB in ~2 KiB objects (hundreds of thousands of mallocs)"),
            &format!("ptrees --size {s}"),
            "wall",
            "memory",
        ),
    ]
}

/// 4 KB, THP, hugetlb (head-tail: whole pages, the rest on 4 KB pages) and
/// hugetlb unrounded (round-up: every block on whole huge pages), all through
/// the runtime library; heap-small in its arena where huge.
pub fn configs(quick: bool) -> Vec<Config> {
    let s = size(quick);
    // Round-up adds at most a page per block (blocks are >= 3 MiB: a third).
    let cov = Coverage {
        heap_large: true,
        heap_small: true,
        pages_2m: (s >> 21) * 3 / 2 + 16,
        pages_1g: 0,
    };
    let huge = |b: Backing| vec![(Category::HeapLarge, b), (Category::HeapSmall, b)];
    let base = Config::new(
        "4k",
        "4 KB pages: heap-large owned by the runtime library on 4 KB pages (MADV_NOHUGEPAGE), heap-small left to glibc (THP madvise: 4 KB)",
    )
    .with_plan(&[(Category::HeapLarge, Backing::Base4k)], &PlanOptions::default())
    .baseline();
    let thp = Config::new(
        "thp",
        "THP (transparent): heap-large blocks 2 MB-aligned with MADV_HUGEPAGE, heap-small in the library's arena on THP",
    )
    .with_plan(&huge(Backing::Thp2m), &PlanOptions::default());
    let mut tlb = Config::new(
        "hugetlb",
        "hugetlb (static) through the runtime library: heap-large blocks on whole 2 MB pages and the rest of each block on 4 KB pages (no partial huge page), heap-small in the arena on 2 MB hugetlb pages",
    )
    .with_plan(&huge(Backing::Hugetlb2m), &PlanOptions::default());
    tlb.pool_2m = cov.pages_2m;
    let mut trap = Config::new(
        "hugetlb-unrounded",
        "hugetlb with unrounded sizes (the \"2 MB + 1 byte\" trap): every heap-large block on whole 2 MB pages (layout round-up), so a block of k x 2 MiB + 1 byte takes and zeroes a whole extra page",
    )
    .with_plan(
        &huge(Backing::Hugetlb2m),
        &PlanOptions {
            layout: Some(Layout::RoundUp),
            ..PlanOptions::default()
        },
    );
    trap.pool_2m = cov.pages_2m;
    vec![base, thp, tlb, trap]
}

pub fn run(o: &Opts) -> Result<()> {
    let mut sr = SuiteRun::begin(
        "integration",
        "seed 000 (Piehl): GAMESS-, HPL- and PTrees-like allocation patterns under 4 KB, THP, hugetlb and hugetlb with unrounded sizes",
    );
    let configs = select_configs(configs(o.quick), o, "integration")?;
    let ws = select(
        workloads(o.quick),
        &o.workloads,
        |w| w.name.as_str(),
        "workload",
        "integration",
    )?;
    let refs: Vec<&Config> = configs.iter().collect();
    let bench = sr.bench(&refs)?;
    let ws = drop_missing_kernels(ws, &bench.art.work, &mut sr.missing);
    let runs = o.runs();
    let results: Vec<WorkloadResult> = ws
        .iter()
        .map(|w| bench.measure(w, &configs, runs))
        .collect();
    let extra = json!({"trap": trap_summary(&results)});
    let r = sr.finish(Some(bench), o.quick, runs, configs, results, extra);
    emit(&r, o, &text_extra(&r), html(&r))
}

/// Per workload: the unrounded configuration against the rounded one (wall and
/// system time ratios, faults), the trap's cost.
pub fn trap_summary(ws: &[WorkloadResult]) -> serde_json::Value {
    json!(ws
        .iter()
        .filter_map(|w| {
            let a = w.result("hugetlb")?;
            let b = w.result("hugetlb-unrounded")?;
            let ratio =
                |x: &Option<super::stats::Spread>, y: &Option<super::stats::Spread>| match (x, y) {
                    (Some(x), Some(y)) if x.median > 0.0 => Some(y.median / x.median),
                    _ => None,
                };
            Some(json!({
                "workload": w.name,
                "wall_unrounded_over_rounded": ratio(&a.wall, &b.wall),
                "sys_unrounded_over_rounded": ratio(&a.sys, &b.sys),
                "pool_pages_rounded": a.pool_pages,
                "pool_pages_unrounded": b.pool_pages,
            }))
        })
        .collect::<Vec<_>>())
}

fn text_extra(r: &SuiteReport) -> String {
    let mut s = String::new();
    for t in r.extra["trap"].as_array().into_iter().flatten() {
        s +=
            &format!(
            "\n{}: unrounded hugetlb / rounded: wall {}x, system {}x; pool pages {} against {}\n",
            t["workload"].as_str().unwrap_or("?"),
            t["wall_unrounded_over_rounded"].as_f64().map_or("-".into(), |v| format!("{v:.2}")),
            t["sys_unrounded_over_rounded"].as_f64().map_or("-".into(), |v| format!("{v:.2}")),
            t["pool_pages_unrounded"],
            t["pool_pages_rounded"]
        );
    }
    s
}

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    for w in &r.workloads {
        if w.results.is_empty() {
            continue;
        }
        p.push_heading(&format!("{}: user and system time", w.name));
        p.push_svg(output::measures_chart(
            w,
            &format!(
                "{}: user and system time per configuration (seed 000 tables 4.x)",
                w.name
            ),
            "seconds (median, min-max)",
            &[("user", &|c| c.user), ("system", &|c| c.sys)],
        ));
        p.push_svg(output::measures_chart(
            w,
            &format!("{}: minor faults per configuration", w.name),
            "minor faults (median, min-max)",
            &[("minor faults", &|c| c.minor_faults)],
        ));
    }
    output::push_workloads(&mut p, r);
    output::push_notes(&mut p, r);
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations() {
        let c = configs(false);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["4k", "thp", "hugetlb", "hugetlb-unrounded"]);
        let text = |i: usize| c[i].plan.as_ref().unwrap().text.clone();
        assert!(!text(2).contains("layout"), "{}", text(2));
        assert!(text(3).contains("layout round-up"), "{}", text(3));
        assert!(text(3).contains("heap-large hugetlb-2m"));
        assert!(text(1).contains("heap-small arena thp-2m"));
        assert!(c[2].pool_2m >= 512 && c[3].pool_2m == c[2].pool_2m);
        assert!(!c[0].expects_huge && c[1].expects_huge);
        assert_eq!(workloads(true).len(), 3);
    }
}
