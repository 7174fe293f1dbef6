//! The QEMU plugin reference source (qemu-plugin/, `--refs qemu`), checked against
//! `hugetune-work --trace FILE` in the same run: the plugin's pages are exactly the
//! trace's pages that its two samples keep (pages by their hash, 2 MB regions by
//! theirs and the region before; docs/model.md §3.1), its counts cover the trace's,
//! its estimates fall within sampling error, fixed-size sampling keeps its bound,
//! END counts the regions referenced. Skipped (with a message) where qemu-x86_64 is
//! not installed; scripts/setup.sh installs it.

mod common;
use common::{hugetune, qemu_or_skip};

use hugetune_capture::qemu::{self, Sampling, MARKER_ADDR, MARKER_SPAN, MODULUS};
use hugetune_format::refstream::{Event, Ref, RefReader, SamplingKind};
use hugetune_model::sampled::Sampling as Samples;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

const WORK: &str = env!("HUGETUNE_BUILT_WORK");
const PLUGIN: &str = env!("HUGETUNE_BUILT_QEMU_PLUGIN");
const LIB: &str = env!("HUGETUNE_BUILT_RUNTIME");

struct Stream {
    refs: Vec<Ref>,
    /// THRESHOLD records, in order.
    thresholds: Vec<u64>,
    /// For each REF, the threshold in force when it was read.
    t_at: Vec<u64>,
    seen: u64,
    /// END's count of 2 MB regions referenced (sampling plugins).
    regions: Option<u64>,
    threshold0: u64,
    kind: SamplingKind,
    seed: u64,
}

fn read_stream(path: &Path) -> Stream {
    let mut r = RefReader::new(std::fs::File::open(path).unwrap()).unwrap();
    assert_eq!(r.version(), 2);
    let h = r.header().clone();
    let mut s = Stream {
        refs: Vec::new(),
        thresholds: Vec::new(),
        t_at: Vec::new(),
        seen: 0,
        regions: None,
        threshold0: h.threshold.unwrap_or(MODULUS),
        kind: h.sampling,
        seed: h.seed.unwrap_or(0),
    };
    let mut t = s.threshold0;
    while let Some(e) = r.next_event().unwrap() {
        match e {
            Event::Ref(x) => {
                s.refs.push(x);
                s.t_at.push(t);
            }
            Event::Threshold(n) => {
                s.thresholds.push(n);
                t = n;
            }
        }
    }
    let tot = r.totals().unwrap();
    assert_eq!(tot.refs_written, s.refs.len() as u64);
    s.seen = tot.refs_seen;
    s.regions = tot.regions_seen;
    if h.sampling != SamplingKind::Complete && h.source == "qemu" {
        assert_eq!(h.region_shift, Some(21));
        assert!(s.regions.is_some(), "END without the region count");
    }
    s
}

struct Run {
    out: Value,
    plugin: Stream,
    trace: Stream,
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// hugetune-work under qemu with the plugin and `--trace` in the same run.
fn run(qemu_bin: &Path, dir: &Path, sampling: Sampling, seed: u64, args: &[&str]) -> Run {
    let out_path = dir.join("plugin.htrefs");
    let trace = dir.join("trace.htrefs");
    let mut argv: Vec<OsString> = vec![WORK.into()];
    argv.extend(args.iter().map(OsString::from));
    argv.push("--trace".into());
    argv.push(trace.clone().into());
    let spec = qemu::QemuSpec {
        qemu: qemu_bin,
        plugin: Path::new(PLUGIN),
        argv: &argv,
        guest_env: &[],
        out: &out_path,
        sampling,
        seed,
        markers: false,
        scratch: dir,
        driver: None,
        alloc: None,
    };
    let mut cmd = qemu::command(&spec).unwrap();
    let o = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let plugin = read_stream(&out_path);
    assert_eq!(plugin.kind, {
        match sampling {
            Sampling::Complete => SamplingKind::Complete,
            Sampling::Rate(_) => SamplingKind::SpatialRate,
            Sampling::MaxPages(_) | Sampling::Budget { .. } => SamplingKind::SpatialSize,
        }
    });
    Run {
        out,
        plugin,
        trace: read_stream(&trace),
    }
}

/// The buffer's pages [first, last] from the workload's JSON line.
fn buffer_pages(out: &Value) -> (u64, u64) {
    let base = hex(&out["buffer"]);
    let size = out["size"].as_u64().unwrap();
    let usable = (size - 63) / 64 * 64;
    (base >> 12, (base + usable - 1) >> 12)
}

fn counts(refs: &[Ref], pages: (u64, u64)) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for r in refs {
        let p = r.addr >> 12;
        if p >= pages.0 && p <= pages.1 {
            *m.entry(p).or_insert(0) += 1;
        }
    }
    m
}

fn samples(seed: u64, t: u64) -> Samples {
    Samples::new(seed, MODULUS, t).unwrap()
}

/// Whether page `p` is in the page sample.
fn in_page_sample(p: u64, seed: u64, t: u64) -> bool {
    samples(seed, t).page_sampled(p)
}

/// Whether the plugin keeps the references to page `p`: its page or its region
/// or the region before is sampled.
fn is_sampled(p: u64, seed: u64, t: u64) -> bool {
    let s = samples(seed, t);
    let r = p >> 9;
    s.page_sampled(p) || s.region_sampled(r) || s.region_sampled(r.wrapping_sub(1))
}

/// Per thread, seq strictly increases (the reader guarantees it) and the threads
/// are numbered 0, 1, ...
fn threads(refs: &[Ref]) -> Vec<u32> {
    let mut last: HashMap<u32, u64> = HashMap::new();
    for r in refs {
        if let Some(&l) = last.get(&r.thread) {
            assert!(r.seq > l, "thread {}: seq {} after {l}", r.thread, r.seq);
        }
        last.insert(r.thread, r.seq);
    }
    let mut t: Vec<u32> = last.keys().copied().collect();
    t.sort();
    t
}

/// (a), (b), (d) for one workload at fixed rate `t / MODULUS`.
fn check_fixed_rate(args: &[&str], t: u64, seed: u64) {
    let Some(q) = qemu_or_skip() else { return };
    let d = tempfile::tempdir().unwrap();
    let rate = t as f64 / MODULUS as f64;
    let r = run(&q, d.path(), Sampling::Rate(rate), seed, args);
    assert_eq!(r.plugin.threshold0, t);
    assert_eq!(r.plugin.seed, seed);
    let pages = buffer_pages(&r.out);
    let pc = counts(&r.plugin.refs, pages);
    let tc = counts(&r.trace.refs, pages);
    // (a) the sampled pages inside the buffer are exactly the trace's pages the
    // hash keeps (same run, same addresses).
    let want: HashSet<u64> = tc
        .keys()
        .copied()
        .filter(|&p| is_sampled(p, seed, t))
        .collect();
    let got: HashSet<u64> = pc.keys().copied().collect();
    assert!(
        want.len() >= 8,
        "{args:?}: only {} sampled pages",
        want.len()
    );
    assert_eq!(got, want, "{args:?}: sampled page sets differ");
    // Every REF of the plugin (not only the buffer's) is to a sampled page.
    assert!(r
        .plugin
        .refs
        .iter()
        .all(|x| is_sampled(x.addr >> 12, seed, t)));
    // (b) per page, the plugin saw at least what the kernel phase did.
    for (p, &c) in &tc {
        if let Some(&pcount) = pc.get(p) {
            assert!(
                pcount >= c,
                "{args:?}: page {p:#x}: plugin {pcount} < trace {c}"
            );
        }
    }
    // ... and the SHARDS estimate of the kernel's references to the buffer, the
    // page sample's counts over R, is within 4 standard errors of the exact total
    // (Bernoulli sampling of pages: var = (1 - R) / R * sum of squared counts).
    let exact: u64 = tc.values().sum();
    let sampled: u64 = tc
        .iter()
        .filter(|(p, _)| got.contains(p) && in_page_sample(**p, seed, t))
        .map(|(_, c)| c)
        .sum();
    let est = sampled as f64 / rate;
    let sq: f64 = tc.values().map(|&c| (c as f64).powi(2)).sum();
    let sigma = ((1.0 - rate) / rate * sq).sqrt();
    assert!(
        (est - exact as f64).abs() <= 4.0 * sigma,
        "{args:?}: estimate {est:.0} vs exact {exact} (sigma {sigma:.0})"
    );
    // (d) the plugin saw every reference the trace did, and more.
    assert!(
        r.plugin.seen >= r.trace.seen,
        "{args:?}: plugin saw {} < trace {}",
        r.plugin.seen,
        r.trace.seen
    );
    assert!(r.plugin.seen > r.plugin.refs.len() as u64);
    // Threads: one per OpenMP thread at least, numbered from 0.
    let want_threads: usize = r.out["threads"].as_u64().unwrap() as usize;
    let th = threads(&r.plugin.refs);
    assert!(th.len() >= want_threads.min(2), "{args:?}: threads {th:?}");
    assert_eq!(th[0], 0);
    eprintln!(
        "{args:?}: {} sampled pages of {}; plugin {} of {} refs; estimate {est:.0} vs exact {exact} (sigma {sigma:.0})",
        got.len(),
        tc.len(),
        r.plugin.refs.len(),
        r.plugin.seen
    );
}

#[test]
fn fixed_rate_chase_matches_the_trace() {
    check_fixed_rate(&["chase", "--size", "8M", "--iters", "4"], MODULUS / 8, 1);
}

#[test]
fn fixed_rate_randmem_matches_the_trace() {
    check_fixed_rate(&["randmem", "--size", "8M", "--iters", "8"], MODULUS / 8, 2);
}

#[test]
fn fixed_rate_gups_matches_the_trace() {
    check_fixed_rate(&["gups", "--size", "8M", "--iters", "4"], MODULUS / 8, 3);
}

#[test]
fn fixed_rate_randmem_two_threads_matches_the_trace() {
    check_fixed_rate(
        &["randmem", "--size", "8M", "--iters", "8", "--threads", "2"],
        MODULUS / 8,
        4,
    );
}

#[test]
fn fixed_rate_gups_two_threads_matches_the_trace() {
    check_fixed_rate(
        &["gups", "--size", "8M", "--iters", "4", "--threads", "2"],
        MODULUS / 8,
        5,
    );
}

/// (b) against the plugin itself: the sampled estimate of all references to the
/// buffer (initialization included) against a complete run of the same program.
#[test]
fn sampled_estimate_agrees_with_a_complete_run() {
    let Some(q) = qemu_or_skip() else { return };
    let d = tempfile::tempdir().unwrap();
    let args = ["randmem", "--size", "16M", "--iters", "4"];
    let full = run(&q, d.path(), Sampling::Complete, 0, &args);
    let fc = counts(&full.plugin.refs, buffer_pages(&full.out));
    let exact: u64 = fc.values().sum();
    // The complete stream has no gaps: seq = position, refs_seen = refs_written.
    assert_eq!(full.plugin.seen, full.plugin.refs.len() as u64);
    let rate = 1.0 / 8.0;
    let t = MODULUS / 8;
    let seed = 11;
    let s = run(&q, d.path(), Sampling::Rate(rate), seed, &args);
    let sc = counts(&s.plugin.refs, buffer_pages(&s.out));
    let est = sc
        .iter()
        .filter(|(p, _)| in_page_sample(**p, seed, t))
        .map(|(_, c)| c)
        .sum::<u64>() as f64
        / rate;
    // The two runs may place the buffer differently: the deviation is judged with
    // the complete run's per-page counts, as if its pages had been sampled.
    let sq: f64 = fc.values().map(|&c| (c as f64).powi(2)).sum();
    let sigma = ((1.0 - rate) / rate * sq).sqrt();
    assert!(
        (est - exact as f64).abs() <= 4.0 * sigma,
        "estimate {est:.0} vs complete {exact} (sigma {sigma:.0})"
    );
    assert!(sc.keys().all(|&p| is_sampled(p, seed, t)));
    eprintln!("estimate {est:.0} vs complete {exact} (sigma {sigma:.0})");
}

/// (c) fixed-size: at most S_max pages in the page sample at any time, thresholds
/// only fall, every REF satisfies the threshold in force.
fn check_fixed_size(args: &[&str], max_pages: u64) {
    let Some(q) = qemu_or_skip() else { return };
    let d = tempfile::tempdir().unwrap();
    let seed = 9;
    let r = run(&q, d.path(), Sampling::MaxPages(max_pages), seed, args);
    assert_eq!(r.plugin.threshold0, MODULUS);
    assert!(
        !r.plugin.thresholds.is_empty(),
        "{args:?}: the threshold never fell"
    );
    let mut prev = r.plugin.threshold0;
    for &t in &r.plugin.thresholds {
        assert!(t < prev, "{args:?}: threshold {t} after {prev}");
        prev = t;
    }
    let mut set: HashSet<u64> = HashSet::new();
    let mut idx = 0;
    let mut t = r.plugin.threshold0;
    // Replay: REFs between THRESHOLD records; t_at says which T each REF had.
    for (x, &tx) in r.plugin.refs.iter().zip(&r.plugin.t_at) {
        if tx != t {
            t = tx;
            set.retain(|&p| in_page_sample(p, seed, t));
            idx += 1;
        }
        let p = x.addr >> 12;
        assert!(
            is_sampled(p, seed, t),
            "{args:?}: REF to page {p:#x} above threshold {t}"
        );
        if in_page_sample(p, seed, t) {
            set.insert(p);
        }
        assert!(
            set.len() as u64 <= max_pages,
            "{args:?}: {} pages in the sample",
            set.len()
        );
    }
    assert!(idx <= r.plugin.thresholds.len());
    // The final sample is the buffer pages under the final threshold that the
    // kernel touched, plus others: the trace's pages under the final T are in it.
    let pages = buffer_pages(&r.out);
    let pc = counts(&r.plugin.refs, pages);
    let tc = counts(&r.trace.refs, pages);
    for p in tc.keys().filter(|&&p| is_sampled(p, seed, prev)) {
        assert!(pc.contains_key(p), "{args:?}: page {p:#x} missing");
    }
    assert!(r.plugin.seen >= r.trace.seen);
    eprintln!(
        "{args:?}: {} threshold falls, final T {prev} (R = {:.5}), {} refs of {}",
        r.plugin.thresholds.len(),
        prev as f64 / MODULUS as f64,
        r.plugin.refs.len(),
        r.plugin.seen
    );
}

#[test]
fn fixed_size_randmem_keeps_its_bound() {
    check_fixed_size(&["randmem", "--size", "8M"], 64);
}

/// A reference budget (`max_refs`): the threshold falls (each time by at least
/// half the page sample) until the references the final sample keeps are within
/// a small factor of the budget, where without one it keeps them all; every REF
/// satisfies the threshold in force, and every reference of the trace to a page
/// under the final threshold is in the stream (so the analysis can read it as a
/// fixed-rate sample there).
#[test]
fn reference_budget_bounds_what_the_sample_keeps() {
    check_budget(1.0);
}

/// The same started below rate 1 (`optimize` starts where the native run's
/// resident size takes the page bound): the header's threshold is the starting
/// one, and the sample keeps the same guarantees from there.
#[test]
fn reference_budget_from_a_starting_rate() {
    check_budget(0.125);
}

fn check_budget(start_rate: f64) {
    let Some(q) = qemu_or_skip() else { return };
    let d = tempfile::tempdir().unwrap();
    let seed = 5;
    let budget = 200_000u64;
    let args = ["randmem", "--size", "16M", "--iters", "4"];
    let r = run(
        &q,
        d.path(),
        Sampling::Budget {
            max_pages: 1 << 20,
            max_refs: budget,
            start_rate,
        },
        seed,
        &args,
    );
    assert_eq!(
        r.plugin.threshold0,
        (start_rate * MODULUS as f64).round() as u64
    );
    assert!(!r.plugin.thresholds.is_empty(), "the threshold never fell");
    let mut prev = r.plugin.threshold0;
    for &t in &r.plugin.thresholds {
        assert!(t < prev, "threshold {t} after {prev}");
        prev = t;
    }
    for (x, &t) in r.plugin.refs.iter().zip(&r.plugin.t_at) {
        assert!(is_sampled(x.addr >> 12, seed, t), "REF above threshold {t}");
    }
    let kept = |refs: &[Ref]| {
        refs.iter()
            .filter(|x| is_sampled(x.addr >> 12, seed, prev))
            .count() as u64
    };
    let (in_stream, in_trace) = (kept(&r.plugin.refs), kept(&r.trace.refs));
    // Every trace reference under the final threshold is in the stream (the
    // plugin also sees the program's own stack and code data the trace omits).
    assert!(in_stream >= in_trace, "{in_stream} < {in_trace}");
    assert!(
        in_stream <= 4 * budget,
        "{in_stream} references kept at the final threshold, budget {budget}"
    );
    assert!(
        (r.trace.refs.len() as u64) > 8 * budget,
        "the run is too small to test the budget"
    );
    eprintln!(
        "{} threshold falls, final R = {:.5}, {in_stream} kept of {} written, {} seen",
        r.plugin.thresholds.len(),
        prev as f64 / MODULUS as f64,
        r.plugin.refs.len(),
        r.plugin.seen
    );
}

#[test]
fn fixed_size_two_threads_keeps_its_bound() {
    check_fixed_size(&["gups", "--size", "8M", "--threads", "2"], 100);
}

#[test]
fn chase_two_threads_under_qemu() {
    check_fixed_rate(
        &["chase", "--size", "8M", "--iters", "2", "--threads", "2"],
        MODULUS / 8,
        6,
    );
}

#[test]
fn bad_plugin_arguments_fail_clearly() {
    let Some(q) = qemu_or_skip() else { return };
    let o = Command::new(&q)
        .arg("-plugin")
        .arg(format!("{PLUGIN},out=/dev/null,rate=2"))
        .arg("/bin/true")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad argument rate=2"), "{e}");
}

// ---------------------------------------------------------------- hugetune record

/// (e) `record --refs qemu`: complete streams are analyzed exactly; sampled ones
/// from their sample, with error bars (`--exact` refuses them).
#[test]
fn record_with_qemu_then_analyze() {
    if qemu_or_skip().is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("db.sqlite");
    let bundle = d.path().join("q.htb");
    let b = bundle.to_str().unwrap();
    let (code, out, err) = hugetune(
        &db,
        &[
            "record", "--refs", "qemu", "-o", b, "--", WORK, "randmem", "--size", "4M",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("from qemu, complete"), "{out}");
    let (code, out, err) = hugetune(&db, &["analyze", "--json", b]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v.to_string().contains("qemu"), "{out}");
    assert!(v["errors"].is_null() && v["result"]["sampling"].is_null());

    let sampled = d.path().join("s.htb");
    let s = sampled.to_str().unwrap();
    let (code, out, err) = hugetune(
        &db,
        &[
            "record", "--refs", "qemu", "--rate", "0.25", "-o", s, "--", WORK, "randmem", "--size",
            "16M",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("spatial-rate") && out.contains("next: hugetune analyze"),
        "{out}"
    );
    // The bundle's description of its stream comes from the capture's scan
    // (the stream is not read again to write it): it is what reading the
    // stored stream finds.
    for path in [&bundle, &sampled] {
        let stored = hugetune_format::profile::read(path).unwrap();
        let read = hugetune_format::profile::scan_refs(stored.refs.as_ref().unwrap()).unwrap();
        assert_eq!(
            stored.meta.ref_stream.as_ref(),
            Some(&read),
            "{}",
            path.display()
        );
    }
    let (code, out, err) = hugetune(&db, &["analyze", "--no-db", s]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("sampled    spatial-rate"), "{out}");
    assert!(out.contains("sampling error"), "{out}");
    let (code, out, err) = hugetune(&db, &["analyze", "--no-db", "--json", s]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["result"]["sampling"]["kind"], "spatial-rate");
    assert!(!v["errors"].as_array().unwrap().is_empty());
    let (code, out, err) = hugetune(&db, &["analyze", "--exact", s]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("exact counts need a complete stream"), "{err}");

    // Markers are always kept: the sampled stream holds the marker loads.
    let (code, _, err) = hugetune(
        &db,
        &[
            "record", "--refs", "valgrind", "--rate", "0.5", "-o", s, "--", WORK, "randmem",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("need the qemu source"), "{err}");
}

/// The marker area is at the agreed address and its loads survive any sampling.
#[test]
fn markers_survive_sampling() {
    let Some(q) = qemu_or_skip() else { return };
    let d = tempfile::tempdir().unwrap();
    let rec = hugetune_capture::record::record(
        &hugetune_capture::record::Source::Qemu {
            qemu: q,
            plugin: PLUGIN.into(),
            // A rate so small that nearly no data page is sampled.
            sampling: Sampling::Rate(1.0 / MODULUS as f64),
            seed: 0,
        },
        Path::new(LIB),
        &[
            OsString::from(WORK),
            "malloc".into(),
            "--size".into(),
            "64K".into(),
            "--accesses".into(),
            "2000".into(),
        ],
        d.path(),
        false,
        None,
        &mut |_, _, _, _| {},
    )
    .unwrap();
    assert_eq!(rec.log.header.marker_base, MARKER_ADDR);
    let hooked = rec
        .log
        .records
        .iter()
        .filter(|r| r.has_marker(&rec.log.header))
        .count() as u64;
    let s = read_stream(rec.refs_path.as_ref().unwrap());
    let markers = s
        .refs
        .iter()
        .filter(|r| r.addr.wrapping_sub(MARKER_ADDR) < MARKER_SPAN)
        .count() as u64;
    assert!(hooked > 4000, "{hooked} hooked calls");
    assert_eq!(markers, hooked, "one marker load per hooked call");
    assert_eq!(rec.capture.source, "qemu");
    assert_eq!(rec.capture.sampling, "spatial-rate");
}

#[test]
fn bench_capture_quick_prints_figures() {
    if qemu_or_skip().is_none() || !hugetune_capture::lackey::valgrind_available() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (code, out, err) = hugetune(
        &d.path().join("db"),
        &["bench", "capture", "--quick", "--runs", "1", "--json"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let w = v["workloads"].as_array().unwrap();
    assert_eq!(w.len(), 3);
    for x in w {
        let r = x["results"].as_array().unwrap();
        assert_eq!(r.len(), 4);
        assert!(r[1]["refs_seen"].as_u64().unwrap() > r[1]["refs_written"].as_u64().unwrap());
        assert_eq!(
            r[2]["refs_seen"].as_u64().unwrap(),
            r[2]["refs_written"].as_u64().unwrap()
        );
        assert!(x["lackey_over_qemu"].as_f64().unwrap() > 0.0);
    }
}
