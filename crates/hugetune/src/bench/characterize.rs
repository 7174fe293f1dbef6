//! `bench characterize` (seed 004, experiment 2): which workloads gain from huge
//! pages. A CPU-bound control (primes, like sysbench cpu with limit 20000), the
//! memory-bound randmem over 2 GiB at 0, 20, …, 100 % random accesses, an
//! I/O-bound copy of a 1.5 GiB file, and Redis (a 500 MB dataset, every key
//! read back, then a BGSAVE) under 4 KB, THP 2 MB, hugetlb 2 MB, hugetlb 1 GB
//! and one mTHP size (64 kB), each through the runtime library.

use super::config::{page_setting, Config, Coverage, Missing, PageSetting};
use super::output::{self, SuiteReport};
use super::redis::RedisJob;
use super::run::{Job, Workload, WorkloadResult};
use super::{drop_missing_kernels, emit, select, select_configs, Opts, SuiteRun};
use anyhow::Result;
use hugetune_host::machine::{self, THP_SYSFS};
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use serde_json::json;
use std::path::Path;

pub const RANDOM_PCTS: [u32; 6] = [0, 20, 40, 60, 80, 100];
/// The mTHP size measured (64 kB).
pub const MTHP_SHIFT: u8 = 16;

pub struct Sizes {
    pub primes_iters: u64,
    pub randmem: u64,
    pub io: u64,
    pub redis: RedisJob,
}

pub fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            primes_iters: 50,
            randmem: 16 << 20,
            io: 8 << 20,
            redis: RedisJob {
                keys: 10_000,
                value_bytes: 500,
                batch: 1000,
                bgsave: true,
            },
        }
    } else {
        Sizes {
            primes_iters: 5000,
            randmem: 2 << 30,
            io: 1536 << 20,
            redis: RedisJob {
                keys: 1_000_000,
                value_bytes: 500,
                batch: 1000,
                bgsave: true,
            },
        }
    }
}

pub fn workloads(s: &Sizes) -> Vec<Workload> {
    let mut v = vec![Workload::work(
        "primes",
        "CPU-bound control: primes up to 20000 by trial division (sysbench cpu's test)",
        &format!("primes --limit 20000 --iters {}", s.primes_iters),
        "kernel",
        "cpu",
    )
    .control()];
    for p in RANDOM_PCTS {
        v.push(
            Workload::work(
                &format!("randmem-{p}"),
                &format!(
                    "memory-bound: {} MiB buffer, one word read and written per access, {p} % of the accesses random, the rest sequential",
                    s.randmem >> 20
                ),
                &format!("randmem --size {} --random-pct {p}", s.randmem),
                "kernel",
                "memory",
            )
            .with_params(json!({"random_pct": p})),
        );
    }
    v.push(
        Workload::work(
            "iocopy",
            &format!(
                "I/O-bound control: copy a {} MiB file (written untimed, dropped from the page cache) with fsync",
                s.io >> 20
            ),
            &format!("iocopy --file {{dir}}/io.dat --size {}", s.io),
            "kernel",
            "io",
        )
        .control(),
    );
    v.push(Workload {
        name: "redis".into(),
        about: format!(
            "Redis: {} keys x {} B values ({} MB) loaded with pipelined SETs, every key read back with pipelined GETs (primary: the reads), then a BGSAVE (fork)",
            s.redis.keys,
            s.redis.value_bytes,
            s.redis.dataset_bytes() / 1_000_000
        ),
        job: Job::Redis(s.redis.clone()),
        primary: "read".into(),
        group: "server".into(),
        control: false,
        params: serde_json::Value::Null,
    });
    v
}

/// The five page settings, sized for the largest workload.
pub fn configs(s: &Sizes) -> Vec<Config> {
    let pages_2m = (s.randmem >> 21).max(s.redis.memory_estimate() >> 21) + 8;
    let cov = Coverage {
        heap_large: true,
        heap_small: true,
        pages_2m,
        pages_1g: s.randmem >> 30,
    };
    [
        PageSetting::Base,
        PageSetting::Thp2m,
        PageSetting::Hugetlb2m,
        PageSetting::Hugetlb1g,
        PageSetting::Mthp(MTHP_SHIFT),
    ]
    .into_iter()
    .map(|p| page_setting(p, cov))
    .collect()
}

pub fn run(o: &Opts) -> Result<()> {
    let s = sizes(o.quick);
    let mut sr = SuiteRun::begin(
        "characterize",
        "seed 004 experiment 2 (workload characterization: CPU, memory with 0-100 % random accesses, I/O, Redis under each page size)",
    );
    let mut configs = select_configs(configs(&s), o, "characterize")?;
    let mthp_kb = (1u64 << MTHP_SHIFT) >> 10;
    if !machine::mthp_sizes(Path::new(THP_SYSFS))
        .iter()
        .any(|(kb, _)| *kb == mthp_kb)
    {
        configs.retain(|c| {
            let keep = c.mthp.is_empty();
            if !keep {
                sr.missing.push(Missing {
                    what: c.name.clone(),
                    reason: format!("this kernel has no {mthp_kb} kB THP size (multi-size THP needs Linux 6.8+)"),
                });
            }
            keep
        });
    }
    let ws = select(
        workloads(&s),
        &o.workloads,
        |w| w.name.as_str(),
        "workload",
        "characterize",
    )?;
    let refs: Vec<&Config> = configs.iter().collect();
    let bench = sr.bench(&refs)?;
    let mut ws = drop_missing_kernels(ws, &bench.art.work, &mut sr.missing);
    if let Err(e) = super::redis::server_path() {
        ws.retain(|w| {
            let keep = !matches!(w.job, Job::Redis(_));
            if !keep {
                sr.missing.push(Missing {
                    what: w.name.clone(),
                    reason: e.clone(),
                });
            }
            keep
        });
    }
    let runs = o.runs();
    let results: Vec<WorkloadResult> = ws
        .iter()
        .map(|w| bench.measure(w, &configs, runs))
        .collect();
    let extra = json!({"randmem": randmem_curves(&results), "redis": redis_table(&results)});
    let r = sr.finish(Some(bench), o.quick, runs, configs, results, extra);
    let text = text_extra(&r);
    emit(&r, o, &text, html(&r))
}

/// Per configuration: (random %, median kernel s, min, max) of the randmem workloads.
pub fn randmem_curves(ws: &[WorkloadResult]) -> serde_json::Value {
    let mut by_config: Vec<(String, Vec<serde_json::Value>)> = Vec::new();
    for w in ws.iter().filter(|w| w.name.starts_with("randmem-")) {
        let p = w.params["random_pct"].as_u64().unwrap_or(0);
        for r in &w.results {
            let Some(s) = r.primary else { continue };
            let point = json!({"random_pct": p, "median_s": s.median, "min_s": s.min, "max_s": s.max,
                                "speedup": r.speedup});
            match by_config.iter_mut().find(|(c, _)| *c == r.config) {
                Some(e) => e.1.push(point),
                None => by_config.push((r.config.clone(), vec![point])),
            }
        }
    }
    json!(by_config
        .into_iter()
        .map(|(c, pts)| json!({"config": c, "points": pts}))
        .collect::<Vec<_>>())
}

/// Redis per configuration: load, read, BGSAVE, fork time, BGSAVE status.
pub fn redis_table(ws: &[WorkloadResult]) -> serde_json::Value {
    let Some(w) = ws.iter().find(|w| w.name == "redis") else {
        return serde_json::Value::Null;
    };
    json!(w
        .results
        .iter()
        .map(|r| {
            let ph = |n: &str| r.phases.iter().find(|(p, _)| p == n).map(|(_, s)| s.median);
            let statuses: Vec<String> = r
                .runs
                .iter()
                .map(|x| x.output["bgsave_status"].as_str().unwrap_or("-").to_string())
                .collect();
            let fork: Vec<f64> = r
                .runs
                .iter()
                .filter_map(|x| x.output["fork_usec"].as_f64())
                .collect();
            json!({"config": r.config, "load_s": ph("load"), "read_s": ph("read"),
                   "bgsave_s": ph("bgsave"), "fork_ms": super::stats::Spread::of(&fork).map(|s| s.median / 1000.0),
                   "bgsave_status": statuses,
                   "used_memory": r.runs.first().and_then(|x| x.output["used_memory"].as_u64())})
        })
        .collect::<Vec<_>>())
}

fn text_extra(r: &SuiteReport) -> String {
    let mut s = String::new();
    if let Some(rows) = r.extra["redis"].as_array() {
        s += "\nredis phases (medians): config, load s, read s, BGSAVE s, fork ms, BGSAVE status per run\n";
        for x in rows {
            s += &format!(
                "  {:<12} {:>8} {:>8} {:>8} {:>8}  {}\n",
                x["config"].as_str().unwrap_or("?"),
                x["load_s"].as_f64().map_or("-".into(), output::num),
                x["read_s"].as_f64().map_or("-".into(), output::num),
                x["bgsave_s"].as_f64().map_or("-".into(), output::num),
                x["fork_ms"].as_f64().map_or("-".into(), output::num),
                x["bgsave_status"]
            );
        }
    }
    s
}

/// (median, low, high) of a curve point.
type PointOf = dyn Fn(&serde_json::Value) -> Option<(f64, f64, f64)>;

fn html(r: &SuiteReport) -> String {
    let mut p = output::page_head(r);
    if let Some(curves) = r.extra["randmem"].as_array() {
        if !curves.is_empty() {
            p.push_heading("Memory-bound: time against random accesses (seed 004 fig. 11)");
            let series = |f: &PointOf| -> Vec<Series> {
                curves
                    .iter()
                    .map(|c| {
                        let pts: Vec<(f64, f64, f64, f64)> = c["points"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|q| {
                                let (m, lo, hi) = f(q)?;
                                Some((q["random_pct"].as_f64()?, m, lo, hi))
                            })
                            .collect();
                        Series::new(
                            c["config"].as_str().unwrap_or("?"),
                            pts.iter().map(|&(x, m, _, _)| (x, m)).collect(),
                        )
                        .with_spread(pts.iter().map(|&(x, _, lo, hi)| (x, lo, hi)).collect())
                    })
                    .collect()
            };
            p.push_svg(svg::render(
                &Chart {
                    title: "randmem: kernel-phase time against % random accesses".into(),
                    x_label: "% random accesses".into(),
                    y_label: "seconds (median, min-max)".into(),
                    kind: ChartKind::Line,
                    series: series(&|q| {
                        Some((
                            q["median_s"].as_f64()?,
                            q["min_s"].as_f64()?,
                            q["max_s"].as_f64()?,
                        ))
                    }),
                    ..Default::default()
                },
                760,
                400,
            ));
            p.push_svg(svg::render(
                &Chart {
                    title: "randmem: speedup over 4 KB against % random accesses".into(),
                    x_label: "% random accesses".into(),
                    y_label: "speedup (median 4 KB / median)".into(),
                    kind: ChartKind::Line,
                    series: series(&|q| {
                        let s = q["speedup"].as_f64()?;
                        Some((s, s, s))
                    })
                    .into_iter()
                    .map(|mut s| {
                        s.spread.clear();
                        s
                    })
                    .collect(),
                    ..Default::default()
                },
                760,
                400,
            ));
        }
    }
    if let Some(rows) = r.extra["redis"].as_array() {
        p.push_heading("Redis phases");
        p.push_table(
            &[
                "configuration",
                "load s",
                "read s",
                "BGSAVE s",
                "fork ms",
                "BGSAVE status per run",
                "used_memory",
            ],
            &rows
                .iter()
                .map(|x| {
                    vec![
                        x["config"].as_str().unwrap_or("?").to_string(),
                        x["load_s"].as_f64().map_or("-".into(), output::num),
                        x["read_s"].as_f64().map_or("-".into(), output::num),
                        x["bgsave_s"].as_f64().map_or("-".into(), output::num),
                        x["fork_ms"].as_f64().map_or("-".into(), output::num),
                        x["bgsave_status"].to_string(),
                        x["used_memory"]
                            .as_u64()
                            .map_or("-".into(), hugetune_render::bytes),
                    ]
                })
                .collect::<Vec<_>>(),
        );
    }
    output::push_workloads(&mut p, r);
    output::push_notes(&mut p, r);
    p.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_configs() {
        let full = sizes(false);
        assert_eq!(full.randmem, 2 << 30);
        assert_eq!(full.io, 1536 << 20);
        assert!(full.redis.dataset_bytes() >= 500_000_000);
        let ws = workloads(&full);
        assert_eq!(ws.len(), 1 + RANDOM_PCTS.len() + 2);
        assert!(ws.iter().filter(|w| w.control).count() == 2);
        let c = configs(&full);
        assert_eq!(c[0].name, "4k");
        let g = c.iter().find(|c| c.name == "hugetlb-1g").unwrap();
        assert_eq!(g.pool_1g, 2);
        let h = c.iter().find(|c| c.name == "hugetlb-2m").unwrap();
        assert!(h.pool_2m >= 1024, "{}", h.pool_2m);
        let q = sizes(true);
        assert!(configs(&q).iter().all(|c| c.pool_1g == 0 && c.pool_2m < 64));
    }
}
