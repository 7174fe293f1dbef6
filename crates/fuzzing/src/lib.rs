//! The entry points of every reader of untrusted input, one per cargo-fuzz
//! target (`fuzz/fuzz_targets/NAME.rs` calls `NAME` here), so that the fuzzers
//! and the tests that replay their corpora (`tests/corpora.rs`, over
//! `fuzz/corpus/NAME/`) run exactly the same code.
//!
//! Invariant: an entry point never panics on any input: a panic (or an abort,
//! a hang, an allocation beyond libFuzzer's limit) is a bug in the reader it
//! calls. Inputs go through the public API as a user's file would, and what a
//! reader accepts is used further (a decoded bundle's stream is read to its
//! end), so that accepted garbage is exercised too.

use std::io::Write;
use std::path::Path;

/// A target's entry point.
pub type Entry = fn(&[u8]);

/// Every target: its name (the corpus directory) and its entry point.
pub const TARGETS: &[(&str, Entry)] = &[
    ("bundle", bundle),
    ("alloclog", alloclog),
    ("refstream", refstream),
    ("summary", summary),
    ("perf_script", perf_script),
    ("damon", damon),
    ("procfs", procfs),
    ("db_import", db_import),
    ("tlb_override", tlb_override),
];

/// Reads a reference stream to its end (at most 4 M events: a fuzzer's input
/// cannot hold more; a reader that loops forever would hang the target).
fn drain(r: &[u8]) {
    if let Ok(mut rd) = hugetune_format::refstream::RefReader::new(r) {
        for _ in 0..4_000_000 {
            match rd.next_event() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        let _ = rd.totals();
    }
}

/// A profile bundle (docs/formats.md §7): the container, its sections, the
/// allocation log inside, and the reference stream read through.
pub fn bundle(data: &[u8]) {
    let Ok(sections) = hugetune_format::bundle::decode(data) else {
        return;
    };
    if let Ok(b) = hugetune_format::profile::decode(sections) {
        if let Some(r) = &b.refs {
            drain(r);
        }
        for s in &b.extra {
            if s.name == "damon" {
                let _ = hugetune_capture::damon::DamonCapture::from_json(&String::from_utf8_lossy(
                    &s.data,
                ));
            }
        }
    }
}

/// The runtime library's allocation log (§2), versions 1 and 2.
pub fn alloclog(data: &[u8]) {
    let _ = hugetune_format::alloclog::AllocLog::parse(data, Path::new("fuzz input"));
}

/// A reference stream (§6), raw or zstd-compressed, versions 1 and 2.
pub fn refstream(data: &[u8]) {
    drain(data);
}

/// The runtime library's exit summary (§4), and what the tool derives from it.
pub fn summary(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(s) = hugetune_format::summary::Summary::from_value(&v) {
        let _ = s.huge_bytes();
        for f in &s.fallbacks {
            let _ = f.describe("->");
        }
    }
}

/// `perf script` text of sampled data addresses (docs/perf.md).
pub fn perf_script(data: &[u8]) {
    if let Ok(s) = hugetune_capture::perf::parse_script(data) {
        let _ = hugetune_capture::perf::page_size_counts(&s);
    }
}

/// DAMON: a bundle's `damon` section (JSON) and a `tried_regions/` directory as
/// the kernel's sysfs has it, built from the input's lines (`start end
/// nr_accesses age`, and `total_bytes N`).
pub fn damon(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = hugetune_capture::damon::DamonCapture::from_json(&text);
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    for (i, line) in text.lines().take(64).enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"total_bytes") {
            let _ = std::fs::write(dir.path().join("total_bytes"), f.get(1).unwrap_or(&""));
            continue;
        }
        let r = dir.path().join(i.to_string());
        if std::fs::create_dir(&r).is_err() {
            return;
        }
        for (k, name) in ["start", "end", "nr_accesses", "age"].iter().enumerate() {
            if let Some(v) = f.get(k) {
                let _ =
                    std::fs::File::create(r.join(name)).and_then(|mut h| h.write_all(v.as_bytes()));
            }
        }
    }
    let _ = hugetune_capture::damon::read_tried_regions(dir.path());
}

/// /proc and /sys files of other kernels: buddyinfo, pagetypeinfo, zoneinfo,
/// vmstat, extfrag_threshold, maps, smaps_rollup, THP mode files, a cpuid dump.
pub fn procfs(data: &[u8]) {
    use frag::parse;
    let t = String::from_utf8_lossy(data);
    let _ = parse::parse_buddyinfo(&t, "buddyinfo");
    let _ = parse::parse_pagetypeinfo(&t, "pagetypeinfo");
    let _ = parse::parse_zoneinfo(&t, "zoneinfo");
    let _ = parse::parse_vmstat(&t, "vmstat");
    let _ = parse::parse_threshold(&t, "extfrag_threshold");
    let _ = hugetune_host::procfs::parse_maps(&t);
    let _ = hugetune_host::procfs::parse_smaps_rollup(&t);
    let _ = hugetune_host::procfs::selected_choice(&t);
    let _ = hugetune_host::machine::CpuidDump::parse(&t);
}

/// A database export (`hugetune db import`) merged into an empty database.
pub fn db_import(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(mut db) = hugetune_store::db::Db::open_in_memory() {
        let _ = db.import(&v);
    }
}

/// A TLB geometry override file (§8).
pub fn tlb_override(data: &[u8]) {
    let Ok(mut f) = tempfile::NamedTempFile::new() else {
        return;
    };
    if f.write_all(data).is_ok() {
        let _ = hugetune_host::machine::read_tlb_override(f.path());
    }
}
