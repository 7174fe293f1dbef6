//! `hugetune-work --trace FILE`: the exact reference stream of a kernel, written by
//! the C encoder (include/hugetune/refstream.h) and read by the Rust reader. These
//! are the ground truth the sampled sources are tested against.

use hugetune_format::refstream::{RefReader, SamplingKind};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const WORK: &str = env!("HUGETUNE_BUILT_WORK");

struct Traced {
    out: Value,
    refs: Vec<hugetune_format::refstream::Ref>,
    seen: u64,
    command: Vec<String>,
}

fn traced(dir: &Path, args: &[&str]) -> Traced {
    let file = dir.join("t.htrefs");
    let o = Command::new(WORK)
        .args(args)
        .arg("--trace")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut r = RefReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    assert_eq!(r.version(), 2);
    assert_eq!(r.header().source, "workload-trace");
    assert_eq!(r.header().sampling, SamplingKind::Complete);
    let command = r.header().command.clone().unwrap();
    let mut refs = Vec::new();
    while let Some(x) = r.next_record().unwrap() {
        refs.push(x);
    }
    let t = r.totals().unwrap();
    assert_eq!(t.refs_written, refs.len() as u64);
    Traced {
        out,
        refs,
        seen: t.refs_seen,
        command,
    }
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// Per thread, indices 0, 1, 2, ... in order (a complete stream has no gaps).
fn check_sequences(refs: &[hugetune_format::refstream::Ref]) -> HashMap<u32, u64> {
    let mut next: HashMap<u32, u64> = HashMap::new();
    for r in refs {
        let n = next.entry(r.thread).or_insert(0);
        assert_eq!(r.seq, *n, "thread {} skipped an index", r.thread);
        *n += 1;
    }
    next
}

#[test]
fn chase_trace_is_every_step_of_the_walk() {
    let d = tempfile::tempdir().unwrap();
    let t = traced(d.path(), &["chase", "--size", "1M", "--threads", "2"]);
    let steps = t.out["accesses"].as_u64().unwrap();
    // Each step loads the next pointer and the node's payload.
    assert_eq!(t.refs.len() as u64, 2 * steps);
    assert_eq!(t.seen, 2 * steps);
    let base = hex(&t.out["buffer"]);
    assert!(t
        .refs
        .iter()
        .all(|r| !r.write && r.addr >= base && r.addr < base + (1 << 20) + 64));
    let per_thread = check_sequences(&t.refs);
    assert_eq!(per_thread.len(), 2, "{per_thread:?}");
    assert!(t.command.iter().any(|a| a == "chase"));
}

#[test]
fn randmem_and_gups_traces_carry_writes() {
    let d = tempfile::tempdir().unwrap();
    let t = traced(
        d.path(),
        &[
            "randmem",
            "--size",
            "1M",
            "--accesses",
            "5000",
            "--random-pct",
            "50",
        ],
    );
    assert!(t.refs.iter().any(|r| r.write));
    assert!(t.refs.len() as u64 >= 5000, "{}", t.refs.len());
    check_sequences(&t.refs);
    let t = traced(d.path(), &["gups", "--size", "1M", "--accesses", "3000"]);
    // Every update is one read-modify-write of a table word.
    assert_eq!(t.refs.iter().filter(|r| r.write).count(), 3000);
}

#[test]
fn traces_cover_the_heap_small_nodes_and_the_malloc_kernel() {
    let d = tempfile::tempdir().unwrap();
    let t = traced(
        d.path(),
        &[
            "chase",
            "--size",
            "2M",
            "--place",
            "heap-small",
            "--accesses",
            "4000",
        ],
    );
    // The walk goes through many distinct nodes, spread over many pages.
    let pages: std::collections::HashSet<u64> = t.refs.iter().map(|r| r.addr >> 12).collect();
    assert!(pages.len() > 50, "{} pages", pages.len());
    let t = traced(d.path(), &["malloc", "--size", "32K", "--accesses", "1000"]);
    // Per operation: the slot's pointer, the old block's byte, the new block's byte.
    assert_eq!(t.refs.len(), 3000);
    assert_eq!(t.refs.iter().filter(|r| r.write).count(), 1000);
}

#[test]
fn cg_trace_is_every_reference_of_the_iterations() {
    let d = tempfile::tempdir().unwrap();
    let args = [
        "cg",
        "--size",
        "256K",
        "--place",
        "static",
        "--threads",
        "2",
        "--iters",
        "2",
    ];
    let t = traced(d.path(), &args);
    let nnz = t.out["accesses"].as_u64().unwrap();
    let n = nnz / 17;
    // Per pass: each thread's first row pointer; per row its next row pointer, q[i]
    // stored and p[i] read (q = A p), x, p, r, q read and x, r stored (6), r and p read
    // and p stored (3); per nonzero its column, its value and p[column].
    assert_eq!(t.refs.len() as u64, 2 * (2 + 12 * n + 3 * nnz));
    assert_eq!(t.refs.iter().filter(|r| r.write).count() as u64, 2 * 4 * n);
    // All seven arrays lie in the static buffer, from its start.
    let base = hex(&t.out["buffer"]);
    let size = t.out["size"].as_u64().unwrap();
    assert!(t
        .refs
        .iter()
        .all(|r| r.addr >= base && r.addr < base + size));
    assert_eq!(check_sequences(&t.refs).len(), 2);
    // The traced build computes what the plain one does.
    let o = Command::new(WORK).args(args).output().unwrap();
    let plain: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plain["checksum"], t.out["checksum"]);
    assert_eq!(plain["residual"], t.out["residual"]);
}

#[test]
fn a_cut_trace_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    traced(d.path(), &["stream", "--size", "1M"]);
    let file = d.path().join("t.htrefs");
    let bytes = std::fs::read(&file).unwrap();
    for cut in [bytes.len() - 1, bytes.len() / 2] {
        let mut r = RefReader::new(&bytes[..cut]).unwrap();
        let res: std::io::Result<()> = (|| {
            while r.next_record()?.is_some() {}
            Ok(())
        })();
        assert!(res.is_err(), "cut at {cut} read cleanly");
    }
}

#[test]
fn bad_trace_arguments_are_usage_errors() {
    let o = Command::new(WORK)
        .args(["chase", "--size", "1M", "--trace", "/nonexistent-dir/x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--trace: cannot create"));
    let o = Command::new(WORK)
        .args(["chase", "--trace="])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// Valgrind lackey, the complete source: every reference of the exact trace appears
/// in lackey's stream, in the same order and with the same read/write flag (lackey
/// also sees everything else: initialization, libc, the stack).
#[test]
fn lackey_sees_every_reference_of_the_exact_trace_in_order() {
    if !hugetune_capture::lackey::valgrind_available() {
        eprintln!("skipped: valgrind is not installed (scripts/setup.sh installs it)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("exact.htrefs");
    let lackey_out = d.path().join("lackey.htrefs");
    let argv: Vec<std::ffi::OsString> = [
        WORK,
        "randmem",
        "--size",
        "256K",
        "--accesses",
        "3000",
        "--random-pct",
        "60",
        "--trace",
        trace.to_str().unwrap(),
    ]
    .iter()
    .map(Into::into)
    .collect();
    let run = hugetune_capture::lackey::capture(
        &argv,
        &[],
        &lackey_out,
        std::process::Stdio::null(),
        |_, _| {},
    )
    .unwrap();
    assert!(run.status.success());
    let read = |p: &Path| {
        let mut r = RefReader::new(std::fs::File::open(p).unwrap()).unwrap();
        let mut v = Vec::new();
        while let Some(x) = r.next_record().unwrap() {
            v.push((x.addr, x.write));
        }
        (v, r.header().clone())
    };
    let (exact, _) = read(&trace);
    let (all, h) = read(&lackey_out);
    assert_eq!(h.source, "valgrind-lackey");
    assert!(exact.len() >= 3000 && all.len() > exact.len());
    // Greedy subsequence match.
    let mut it = all.iter();
    for (i, want) in exact.iter().enumerate() {
        assert!(
            it.any(|got| got == want),
            "reference {i} of the trace ({:#x}, write {}) is not in lackey's stream in order",
            want.0,
            want.1
        );
    }
}

/// perf, simulated (this machine has no PMU): every 50th reference of an exact trace
/// written in `perf script`'s layout for Intel `perf mem` (fixed period 50), parsed,
/// turned into a time-sampled stream and read back. Per-page counts × 50 estimate
/// the exact ones; the sampled pages are pages of the trace.
#[test]
fn perf_time_samples_of_an_exact_trace_estimate_its_page_counts() {
    use std::fmt::Write as _;
    let d = tempfile::tempdir().unwrap();
    let t = traced(
        d.path(),
        &[
            "randmem",
            "--size",
            "4M",
            "--accesses",
            "400000",
            "--random-pct",
            "100",
        ],
    );
    const PERIOD: usize = 50;
    let mut text = String::from(
        "# ========\n# event : name = cpu/mem-loads,ldlat=30/P, , id = { 1 }, type = 4, size = 136, config = 0x1cd, { sample_period, sample_freq } = 50, sample_type = IP|TID|TIME|ADDR|ID|PERIOD|DATA_SRC|WEIGHT|DATA_PAGE_SIZE, read_format = ID, disabled = 1, inherit = 1, enable_on_exec = 1, precise_ip = 2\n# event : name = cpu/mem-stores/P, , id = { 2 }, type = 4, size = 136, config = 0x82d0, { sample_period, sample_freq } = 50, sample_type = IP|TID|TIME|ADDR|ID|PERIOD|DATA_SRC|WEIGHT|DATA_PAGE_SIZE, read_format = ID, disabled = 1, inherit = 1, enable_on_exec = 1, precise_ip = 3\n# ========\n#\n",
    );
    for (i, r) in t.refs.iter().enumerate().skip(PERIOD - 1).step_by(PERIOD) {
        let event = if r.write {
            "        cpu/mem-stores/P"
        } else {
            "cpu/mem-loads,ldlat=30/P"
        };
        writeln!(
            text,
            "{:>6} {}.{:09}: {event}: {:16x} {:16x} 4K",
            4242,
            100 + i / 1_000_000,
            i % 1_000_000 * 1000,
            r.addr,
            0x55d4_c3a0_1d34u64
        )
        .unwrap();
    }
    let s = hugetune_capture::perf::parse_script(std::io::BufReader::new(text.as_bytes())).unwrap();
    assert_eq!(s.samples.len(), t.refs.len() / PERIOD);
    let bytes = hugetune_capture::perf::write_stream(&s, None, Vec::new()).unwrap();
    let mut r = RefReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().sampling, SamplingKind::Time);
    assert_eq!(r.header().period, Some(PERIOD as u64));
    let mut est: HashMap<u64, f64> = HashMap::new();
    while let Some(x) = r.next_record().unwrap() {
        *est.entry(x.addr >> 12).or_default() += PERIOD as f64;
    }
    let mut exact: HashMap<u64, f64> = HashMap::new();
    for x in &t.refs {
        *exact.entry(x.addr >> 12).or_default() += 1.0;
    }
    assert!(est.keys().all(|p| exact.contains_key(p)));
    let (te, tx): (f64, f64) = (est.values().sum(), exact.values().sum());
    assert!((te - tx).abs() / tx < 0.01, "total {te} vs {tx}");
    // 1024 pages of 4 MiB, about 390 samples each: each page's estimate within
    // 5 standard errors (binomial, about 25 %).
    for (p, &n) in &exact {
        let e = est.get(p).copied().unwrap_or(0.0);
        let sd = (n * (PERIOD as f64 - 1.0)).sqrt();
        assert!(
            (e - n).abs() < 5.0 * sd + PERIOD as f64,
            "page {p:#x}: {e} vs {n}"
        );
    }
    assert_eq!(
        r.totals().unwrap().refs_seen,
        (t.refs.len() / PERIOD * PERIOD) as u64
    );
}
