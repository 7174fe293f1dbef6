//! `hugetune bench` suites end to end in `--quick` mode: the JSON is well formed
//! with the expected configurations, the HTML page is written with its plots,
//! the kernel's huge page settings are the same afterwards (pools, THP, mTHP),
//! bad arguments give clear errors, a missing peer is reported as missing. Never
//! timings. Parts that change kernel state need root and are checked only as
//! root (the suites skip such configurations otherwise, and say so); suites
//! that need workload kernels this `hugetune-work` lacks report them missing,
//! and the checks of those kernels' results are skipped with a message.

mod common;
use common::hugetune;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const WORK: &str = env!("HUGETUNE_BUILT_WORK");

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The kernel's resting huge page settings, read under the kernel-state lock
/// (so another test's temporary pool is not taken for the resting value). A
/// pool is its persistent size (nr_hugepages less surplus_hugepages): pages a
/// neighbour's interrupted child still holds after its pool was put back are
/// surplus, and leave when that child exits.
fn resting() -> Value {
    let _lock = if is_root() {
        Some(hugetune_host::kernel_state::lock_kernel_state().unwrap())
    } else {
        None
    };
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let mut pools = Vec::new();
    let mut mthp = Vec::new();
    for e in std::fs::read_dir("/sys/kernel/mm/hugepages")
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = |f: &str| {
            read(&format!("{}/{f}", e.path().display()))
                .parse::<u64>()
                .unwrap_or(0)
        };
        pools.push((
            e.file_name().to_string_lossy().into_owned(),
            n("nr_hugepages").saturating_sub(n("surplus_hugepages")),
        ));
    }
    for e in std::fs::read_dir("/sys/kernel/mm/transparent_hugepage")
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("hugepages-") {
            mthp.push((n, read(&format!("{}/enabled", e.path().display()))));
        }
    }
    pools.sort();
    mthp.sort();
    serde_json::json!({
        "thp": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "pools": pools,
        "mthp": mthp,
    })
}

/// The kernels of the built `hugetune-work`: its --help's list, and the list
/// its error for an unknown kernel gives.
fn kernels() -> Vec<String> {
    let text = |args: &[&str]| {
        let o = Command::new(WORK).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    };
    let mut out = Vec::new();
    let mut inside = false;
    for l in text(&["--help"]).lines() {
        if l.trim_end() == "kernels:" {
            inside = true;
            continue;
        }
        if inside && !l.starts_with(' ') && !l.trim().is_empty() {
            break;
        }
        if inside && l.starts_with("  ") && !l.starts_with("   ") {
            out.extend(l.split_whitespace().next().map(String::from));
        }
    }
    let err = text(&["hugetune-no-such-kernel"]);
    if let Some(i) = err.find("(expected ") {
        let list = err[i + 10..]
            .split(')')
            .next()
            .unwrap_or("")
            .replace(" or ", ", ");
        for k in list.split(',').map(|k| k.trim().to_string()) {
            if !k.is_empty() && !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// Runs a suite with `--quick --json --out DIR`; checks what every suite's
/// report has and returns it with the HTML page.
fn suite(name: &str, extra: &[&str]) -> (Value, String, String) {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let before = resting();
    let mut args = vec![
        "bench",
        name,
        "--quick",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = hugetune(&d.path().join("h.db"), &args);
    assert_eq!(code, 0, "bench {name} failed:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let r: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("bench {name}: not JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(r["suite"], name);
    assert_eq!(r["quick"], true);
    assert_eq!(r["runs"], 1);
    // The file written is the same report.
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap())
            .unwrap();
    assert_eq!(file, r, "SUITE.json and --json differ");
    let html = std::fs::read_to_string(out.join(format!("{name}.html"))).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert!(!html.contains("<script"), "self-contained, no scripts");
    // The machine's settings afterwards: as the suite says, and as we read them.
    assert_eq!(r["restored"], true, "{}", r["kernel_after"]);
    assert_eq!(r["kernel_before"], r["kernel_after"]);
    assert_eq!(
        resting(),
        before,
        "bench {name} left kernel settings changed"
    );
    assert!(r["machine"]["pmu_note"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    (r, html, stderr)
}

fn config_names(w: &Value) -> Vec<String> {
    w["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["config"].as_str().unwrap().to_string())
        .collect()
}

fn missing(r: &Value) -> Vec<(String, String)> {
    r["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["what"].as_str().unwrap().to_string(),
                m["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every configuration result of a workload: runs recorded, a backing verdict,
/// and for successful ones a primary measure.
fn check_results(w: &Value) {
    for c in w["results"].as_array().unwrap() {
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{c}");
        assert!(c["warmup"].is_object(), "the warm-up run is kept apart");
        assert!(["none", "partial", "huge", "-"].contains(&c["backing"].as_str().unwrap()));
        if c["ok"] == true {
            assert!(c["primary"]["median"].as_f64().unwrap() > 0.0, "{c}");
            assert!(c["speedup"].as_f64().unwrap() > 0.0);
            let run = &runs[0];
            assert!(run["pools_before"].is_array() && run["pools_after"].is_array());
            assert!(
                run["figures"]["rss"].as_u64().unwrap() > 0,
                "smaps sampled: {run}"
            );
        }
    }
}

#[test]
fn characterize_quick() {
    let (r, html, _) = suite("characterize", &[]);
    let want: Vec<&str> = if is_root() {
        vec!["4k", "thp-2m", "hugetlb-2m", "hugetlb-1g", "thp-64k"]
    } else {
        vec!["4k", "thp-2m"]
    };
    let have = kernels();
    let ws = r["workloads"].as_array().unwrap();
    let names: Vec<&str> = ws.iter().map(|w| w["name"].as_str().unwrap()).collect();
    for n in [
        "primes",
        "randmem-0",
        "randmem-20",
        "randmem-40",
        "randmem-60",
        "randmem-80",
        "randmem-100",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let m = missing(&r);
    if have.iter().any(|k| k == "iocopy") {
        assert!(names.contains(&"iocopy"));
    } else {
        eprintln!("SKIPPED iocopy: this hugetune-work has no iocopy kernel");
        assert!(
            m.iter()
                .any(|(w, why)| w == "iocopy" && why.contains("'iocopy'")),
            "{m:?}"
        );
    }
    if Path::new("/usr/bin/redis-server").exists() {
        assert!(names.contains(&"redis"));
        let redis = ws.iter().find(|w| w["name"] == "redis").unwrap();
        let run = &redis["results"][0]["runs"][0];
        let phases: Vec<&str> = run["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap())
            .collect();
        assert!(
            phases.contains(&"load") && phases.contains(&"read") && phases.contains(&"bgsave"),
            "{phases:?}"
        );
        assert!(r["extra"]["redis"].as_array().unwrap().len() == want.len());
    } else {
        eprintln!("SKIPPED redis: redis-server is not installed");
    }
    for w in ws {
        // mTHP sizes only exist on newer kernels: then thp-64k is reported missing.
        let mut names = config_names(w);
        if !want.contains(&"thp-64k") || m.iter().any(|(n, _)| n == "thp-64k") {
            names.retain(|n| n != "thp-64k");
        }
        let mut want = want.clone();
        if m.iter().any(|(n, _)| n == "thp-64k") {
            want.retain(|n| *n != "thp-64k");
        }
        assert_eq!(names, want, "{}", w["name"]);
        check_results(w);
        if !is_root() {
            let skipped: Vec<&str> = w["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["what"].as_str().unwrap())
                .collect();
            assert!(skipped.contains(&"hugetlb-2m"), "{skipped:?}");
        }
    }
    if is_root() {
        // The 2 MB hugetlb runs were backed by the pool, and it says so.
        let w = ws.iter().find(|w| w["name"] == "randmem-100").unwrap();
        let h = w["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["config"] == "hugetlb-2m")
            .unwrap();
        assert_eq!(h["ok"], true, "{h}");
        assert_eq!(h["backing"], "huge", "{h}");
        let pages = h["pool_pages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p[0] == 2048)
            .unwrap()[1]
            .as_u64()
            .unwrap();
        assert!(pages >= 8, "16 MiB on 2 MB pages: {pages}");
        let base = &w["results"][0];
        assert_eq!(base["backing"], "none", "{base}");
    }
    assert!(
        html.matches("<svg").count() >= 2 + ws.len(),
        "plots: one per workload and the randmem curves"
    );
    assert!(html.contains("randmem: kernel-phase time against % random accesses"));
    assert!(
        html.contains("class=\"mark spread\""),
        "the spread is drawn"
    );
}

#[test]
fn pages_sweep_quick() {
    let d = tempfile::tempdir().unwrap();
    if !is_root() {
        let (code, _, err) = hugetune(&d.path().join("h.db"), &["bench", "pages-sweep", "--quick"]);
        assert_ne!(code, 0);
        assert!(err.contains("run it as root"), "{err}");
        eprintln!("SKIPPED pages-sweep: needs root");
        return;
    }
    let (r, html, _) = suite("pages-sweep", &["--pcts", "50,110"]);
    let w = &r["workloads"][0];
    assert_eq!(config_names(w), ["0 pages", "50%", "110%"]);
    check_results(w);
    let meas = r["extra"]["measured"].as_array().unwrap();
    assert_eq!(meas.len(), 3);
    let need = r["extra"]["need_pages"].as_u64().unwrap();
    assert!(need >= 8, "16 MiB of nodes: {need}");
    let pages: Vec<u64> = meas.iter().map(|m| m["pages"].as_u64().unwrap()).collect();
    assert_eq!(pages[0], 0);
    assert!(pages[1] > 0 && pages[1] < pages[2], "{pages:?}");
    // Without pages nothing is huge; with 110 % the arena is.
    assert_eq!(w["results"][0]["backing"], "none");
    assert_ne!(w["results"][2]["backing"], "none", "{}", w["results"][2]);
    if r["extra"]["model"].is_object() {
        assert_eq!(r["extra"]["model"]["points"].as_array().unwrap().len(), 3);
    } else {
        eprintln!("SKIPPED model curve: {:?}", r["notes"]);
    }
    assert!(html.contains("kernel-phase time against 2 MB pages"));
    assert!(html.contains("percentage of maximal benefit against 2 MB pages"));
}

#[test]
fn integration_quick() {
    let (r, html, _) = suite("integration", &[]);
    let have = kernels();
    let m = missing(&r);
    for k in ["bigbuf", "panels", "ptrees"] {
        if have.iter().any(|h| h == k) {
            let w = r["workloads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["name"] == k)
                .unwrap_or_else(|| panic!("{k} not measured"));
            let want: Vec<&str> = if is_root() {
                vec!["4k", "thp", "hugetlb", "hugetlb-unrounded"]
            } else {
                vec!["4k", "thp"]
            };
            assert_eq!(config_names(w), want);
            check_results(w);
            assert!(html.contains(&format!("{k}: user and system time per configuration")));
        } else {
            eprintln!("SKIPPED {k}: this hugetune-work has no {k} kernel (it comes with the workloads branch)");
            assert!(
                m.iter()
                    .any(|(w, why)| w == k && why.contains(&format!("'{k}'"))),
                "{m:?}"
            );
        }
    }
    let names: Vec<&str> = r["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["4k", "thp", "hugetlb", "hugetlb-unrounded"]);
    let trap = r["configs"][3]["plan"]["text"].as_str().unwrap();
    assert!(trap.contains("layout round-up"), "{trap}");
}

#[test]
fn scaling_quick() {
    let (r, html, _) = suite("scaling", &["--threads", "2"]);
    let ws = r["workloads"].as_array().unwrap();
    let names: Vec<&str> = ws.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"cg-t1") && names.contains(&"cg-t2"),
        "{names:?}"
    );
    // The own mappings, then the unmodified kernel through the runtime
    // library: optimize's plan (where optimize ran: else `missing` says why),
    // heap-large on hugetlb-2m from the shared pool and per allocation (root).
    let want: Vec<&str> = if is_root() {
        vec![
            "4k",
            "thp",
            "hugetlb-2m",
            "optimize",
            "lib-pool",
            "lib-per-alloc",
        ]
    } else {
        vec!["4k", "thp", "optimize"]
    };
    let plans = r["extra"]["plans"].as_array().unwrap();
    for w in ws {
        let name = w["name"].as_str().unwrap();
        let plan = plans.iter().find(|p| p["workload"] == name).unwrap();
        let mut want = want.clone();
        if plan["optimize"]["error"].is_string()
            || !is_root() && plan["optimize"]["hugetlb_pages"] != 0
        {
            // optimize failed, or (not root) its plan needs hugetlb pages.
            want.retain(|c| *c != "optimize");
        }
        if name.starts_with("panels") {
            // No mapping of its own: the baseline and the library only.
            want.retain(|c| !["thp", "hugetlb-2m"].contains(c));
        }
        assert_eq!(config_names(w), want, "{plan}");
        check_results(w);
        if !is_root() {
            continue;
        }
        // The plan's reasons say pool or not, and why, when it puts
        // heap-large on hugetlb-2m; the NAS-like kernels allocate their arrays
        // once, panels over and over (whether its pool clears --min-gain at
        // this size is tests/pool.rs's question, with --min-gain 0).
        let text = plan["optimize"]["plan_text"].as_str().unwrap_or("");
        if text.contains("heap-large hugetlb-2m") {
            let reasons: Vec<&str> = plan["optimize"]["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect();
            let line = reasons
                .iter()
                .find(|l| l.starts_with("pool vs per-allocation: "))
                .unwrap_or_else(|| panic!("{reasons:?}"));
            if name.starts_with("panels") {
                assert!(!line.contains("allocates its blocks once"), "{line}");
                assert_eq!(
                    text.contains("pool hugetlb-2m"),
                    line.contains("shared pool chosen"),
                    "{text}\n{line}"
                );
            } else {
                assert!(
                    line.starts_with(
                        "pool vs per-allocation: per-allocation pages: the program allocates its blocks once"
                    ),
                    "{line}"
                );
                assert!(!text.contains("pool hugetlb-2m"), "{text}");
            }
        }
        // The forced pool was mapped whole at start-up: N pages taken.
        let n = plan["pool_pages"].as_u64().unwrap();
        assert!(n > 0, "{plan}");
        let pool = w["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["config"] == "lib-pool")
            .unwrap();
        if pool["ok"] == true {
            assert_eq!(
                pool["pool_pages"][0],
                serde_json::json!([2048, n]),
                "{pool}"
            );
            assert_eq!(pool["backing"], "huge", "{pool}");
        }
    }
    assert!(r["extra"]["published"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["kernel"] == "cg" && p["speedup_2m_over_4k"] == 1.25));
    let have = kernels();
    for k in ["mg", "sp"] {
        if !have.iter().any(|h| h == k) {
            eprintln!("SKIPPED {k}: this hugetune-work has no {k} kernel");
            assert!(missing(&r)
                .iter()
                .any(|(_, why)| why.contains(&format!("'{k}'"))));
        } else {
            assert!(names.contains(&format!("{k}-t2").as_str()));
        }
    }
    let curves = r["extra"]["curves"].as_array().unwrap();
    assert!(curves.iter().any(|c| c["kernel"] == "cg"));
    assert!(html.contains("cg: kernel-phase time against threads"));
    assert!(html.contains("cg: speedup over 4 KB pages against threads"));
}

fn qemu_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("qemu-x86_64").is_file()))
}

#[test]
fn categories_quick() {
    let (r, html, _) = suite("categories", &[]);
    if !qemu_installed() || !is_root() {
        eprintln!("SKIPPED categories' rankings: needs qemu-x86_64 and root");
        assert!(!missing(&r).is_empty());
        return;
    }
    let ranks = r["extra"]["rankings"].as_array().unwrap();
    let cats: Vec<&str> = ranks
        .iter()
        .map(|x| x["category"].as_str().unwrap())
        .collect();
    assert_eq!(cats, ["static", "heap-small", "heap-large"]);
    for x in ranks {
        let rk = &x["rank"];
        assert!(rk.is_object(), "{x}");
        let maps = rk["mappings"].as_array().unwrap();
        assert_eq!(maps[0]["label"], "all-small");
        let cat = x["category"].as_str().unwrap();
        assert!(
            maps.iter()
                .any(|m| m["label"].as_str().unwrap().starts_with(cat)),
            "a mapping of the workload's own category: {maps:?}"
        );
        let e = rk["ranking_error"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&e));
    }
    assert!(r["extra"]["mean_ranking_error"].as_f64().is_some());
    assert!(html.contains("every base mapping: predicted PMB against measured PMB"));
    assert!(html.matches("<svg").count() >= 4);
}

#[test]
fn peers_quick_reports_a_missing_peer() {
    let (r, html, _) = suite(
        "peers",
        &["--peer-lib", "mimalloc=/nonexistent/libmimalloc.so.2"],
    );
    let m = missing(&r);
    for p in ["mimalloc", "mimalloc-1g"] {
        assert!(
            m.iter()
                .any(|(w, why)| w == p && why.contains("/nonexistent/libmimalloc.so.2")),
            "{p} reported missing: {m:?}"
        );
    }
    let ws = r["workloads"].as_array().unwrap();
    let names: Vec<&str> = ws.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"randmem") && names.contains(&"primes"),
        "{names:?}"
    );
    for w in ws {
        let c = config_names(w);
        assert_eq!(c[0], "4k");
        assert!(!c.iter().any(|n| n.starts_with("mimalloc")), "{c:?}");
        for want in ["glibc-hugetlb=1", "jemalloc", "hugetune"] {
            assert!(c.iter().any(|n| n == want), "{want} in {c:?}");
        }
        if is_root() {
            for want in ["thp-always", "glibc-hugetlb=2", "libhugetlbfs"] {
                assert!(c.iter().any(|n| n == want), "{want} in {c:?}");
            }
        }
        check_results(w);
        // libhugetlbfs's morecore does nothing with glibc >= 2.34: it must show.
        if let Some(l) = w["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["config"] == "libhugetlbfs")
        {
            if w["name"] != "redis-fork" {
                assert_eq!(l["backing"], "none", "{l}");
                let flags = l["flags"].as_array().unwrap();
                assert!(
                    flags
                        .iter()
                        .any(|f| f.as_str().unwrap().contains("morecore")),
                    "{flags:?}"
                );
            }
        }
    }
    let verdicts = r["extra"]["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), ws.len());
    for v in verdicts {
        let x = &v["verdict"];
        assert!(x["hugetune_speedup"].is_number(), "{v}");
        if v["control"] == true {
            assert!(x["no_slowdown"].is_boolean(), "{v}");
        }
    }
    let opt = r["extra"]["optimize"].as_array().unwrap();
    let randmem = opt.iter().find(|o| o["workload"] == "randmem").unwrap();
    assert!(
        randmem["result"]["plan_text"].as_str().is_some(),
        "{randmem}"
    );
    assert!(html.contains("speedup over 4 KB pages (median 4 KB / median)"));
    assert!(html.contains("hugetune against the best peer"));
}

#[test]
fn bad_arguments_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let cases: [(&[&str], &str); 7] = [
        (&["bench", "characterize", "--runs", "0"], "--runs"),
        (
            &["bench", "characterize", "--quick", "--workloads", "nope"],
            "unknown workload 'nope' for bench characterize",
        ),
        (
            &["bench", "scaling", "--quick", "--configs", "huge"],
            "unknown configuration 'huge' for bench scaling",
        ),
        (
            &["bench", "peers", "--quick", "--peer-lib", "tcmalloc=/x.so"],
            "unknown peer 'tcmalloc'",
        ),
        (
            &["bench", "peers", "--quick", "--peer-lib", "jemalloc"],
            "PEER=PATH",
        ),
        (
            &["bench", "pages-sweep", "--quick", "--pcts", "0"],
            "--pcts",
        ),
        (
            &["bench", "categories", "--quick", "--configs", "4k"],
            "takes no --configs",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = hugetune(&db, args);
        assert_ne!(code, 0, "{args:?} succeeded: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let (code, _, err) = hugetune(&db, &["bench", "nosuch"]);
    assert_ne!(code, 0);
    assert!(err.contains("unrecognized subcommand"), "{err}");
}

/// The processes whose environment names a suite's scratch directory (the
/// workloads and servers a suite started).
fn suite_processes(suite: &str) -> Vec<u32> {
    let tag = format!("hugetune-bench-{suite}.");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if String::from_utf8_lossy(&env).contains(&tag) {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn ctrl_c_restores_the_kernel_settings_and_stops_the_server() {
    if !is_root() || !Path::new("/usr/bin/redis-server").exists() {
        eprintln!("SKIPPED ctrl-c: needs root (pools to restore) and redis-server");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // The suite's scratch directory goes here, where no other test's does.
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let before = resting();
    let mut child = common::signalable()
        .env("TMPDIR", &tmp)
        .arg("--db")
        .arg(d.path().join("h.db"))
        .args([
            "bench",
            "characterize",
            "--quick",
            "--runs",
            "20",
            "--workloads",
            "redis",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (rx, reader) = common::follow_stderr(&mut child);
    // Interrupt once the suite holds its pool and has run Redis a few times.
    let t0 = std::time::Instant::now();
    let mut seen = 0;
    while seen < 4 && t0.elapsed() < std::time::Duration::from_secs(120) {
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            if l.contains("characterize redis [") {
                seen += 1;
            }
        }
    }
    assert!(seen >= 4, "the suite did not get to Redis");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("kernel settings restored"), "{stderr}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(resting(), before, "settings after Ctrl-C");
    assert!(
        suite_processes("characterize").is_empty(),
        "left running: {:?}",
        suite_processes("characterize")
    );
    // Nor its scratch directory: exiting on the signal drops nothing, the
    // restorers remove it.
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

#[test]
fn soak_quick_redis_under_the_plan_with_bgsaves_and_a_shrinking_pool() {
    // The soak's two-minute version (the 30-minute one is a benchmark:
    // `hugetune bench soak`, figures in docs/testing.md).
    let have = |c: &str| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !is_root() || !have("redis-server") {
        eprintln!("skipped: the soak needs root (a pool) and redis-server");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let before = resting();
    let (code, stdout, stderr) = hugetune(
        &d.path().join("h.db"),
        &["bench", "soak", "--quick", "--json"],
    );
    let r: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(code, 0, "{}\n{stderr}", r["failures"]);
    assert_eq!(r["failures"], serde_json::json!([]));
    let bgsaves = r["bgsaves"].as_array().unwrap();
    assert!(bgsaves.len() >= 10, "a BGSAVE every 10 s for 2 min: {r}");
    assert_eq!(r["bgsaves_ok"], bgsaves.len());
    assert_eq!(r["child_summaries"], bgsaves.len());
    assert_eq!(r["summary_forks"], bgsaves.len());
    assert!(r["shrink"].as_str().unwrap().contains("shrank"), "{r}");
    assert!(r["reads_checked"].as_u64().unwrap() > 1000);
    assert_eq!(r["server_exit"], 0);
    assert!(r["peak_hugetlb_pages"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(resting(), before, "the pool is back");
}
