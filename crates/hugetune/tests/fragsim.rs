//! `hugetune fragsim` end to end: every output, replay of a compressed
//! recording, and clear errors for bad arguments.

mod common;

use std::path::Path;

/// What `hugetune fragsim ARGS` did.
struct Ran {
    code: i32,
    stdout: String,
    /// stdout then stderr.
    text: String,
}

fn fragsim(args: &[&str]) -> Ran {
    let (code, stdout, err) = common::hugetune_at(None, &[&["fragsim"], args].concat());
    let text = format!("{stdout}{err}");
    Ran { code, stdout, text }
}

#[test]
fn highalloc_writes_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let o = fragsim(&[
        "highalloc",
        "--mem",
        "64M",
        "--events",
        "100000",
        "--gap",
        "10",
        "--policy",
        "linux-4.5,illuminator",
        "--csv",
        &p("s.csv"),
        "--json",
        "--svg",
        &p("svg"),
        "--html",
        &p("r.html"),
    ]);
    assert!(o.code == 0, "{}", o.text);
    let out = o.text;
    assert!(
        out.contains("linux-4.5") && out.contains("illuminator"),
        "{out}"
    );
    let csv = std::fs::read_to_string(p("s.csv")).unwrap();
    assert!(csv.starts_with("policy,events,phase,"));
    assert!(csv.lines().count() > 10);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j.as_array().unwrap().len(), 2);
    assert_eq!(j[0]["passes"].as_array().unwrap().len(), 3);
    for n in ["tainted", "ufsi", "fallbacks", "compaction", "success"] {
        let f = Path::new(&p("svg")).join(format!("highalloc-{n}.svg"));
        assert!(
            std::fs::read_to_string(&f).unwrap().starts_with("<svg"),
            "{}",
            f.display()
        );
    }
    assert!(std::fs::read_to_string(p("r.html"))
        .unwrap()
        .contains("<svg"));
}

#[test]
fn replays_a_compressed_recording() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rec.zst");
    let mut s = String::from(
        "# hugetune-pagealloc v1\n# zone node=0 name=Normal start_pfn=1048576 spanned=16384 present=16384 managed=16000\n",
    );
    for i in 0..2000u64 {
        s.push_str(&format!("{} A {} 0 {}\n", i * 10, 1_048_576 + i, i % 3));
        if i % 2 == 0 {
            s.push_str(&format!("{} F {} 0\n", i * 10 + 5, 1_048_576 + i));
        }
    }
    s.push_str("99999 F 5 0\n");
    std::fs::write(&f, zstd::encode_all(s.as_bytes(), 3).unwrap()).unwrap();
    let o = fragsim(&["replay", f.to_str().unwrap(), "--policy", "all", "--json"]);
    assert!(o.code == 0, "{}", o.text);
    let out = o.text.clone();
    assert!(
        out.contains("1 frees of pages allocated before the recording ignored"),
        "{out}"
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    let cases: [(&[&str], &str); 6] = [
        (&["kbuild", "--policy", "nope"], "unknown policy"),
        (&["kbuild", "--mem", "4Q"], "not a size"),
        (&["replay"], "replay needs the recording"),
        (&["replay", "/nonexistent/rec"], "/nonexistent/rec"),
        (&["compile"], "unknown workload"),
        (&["highalloc", "--hp-mode", "x"], "--hp-mode"),
    ];
    for (args, msg) in cases {
        let o = fragsim(args);
        assert_eq!(Some(o.code), Some(1), "{args:?}: {}", o.text);
        assert!(o.text.contains(msg), "{args:?}: {}", o.text);
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad");
    std::fs::write(&f, "# hugetune-pagealloc v1\n1 A 2 3\n").unwrap();
    let o = fragsim(&["replay", f.to_str().unwrap()]);
    assert!(
        o.text.contains("line 2") && o.text.contains("migratetype"),
        "{}",
        o.text
    );
}

/// What `hugetune frag --record` writes (its own header and line writer)
/// replays here: the zones of the header, the events of the trace lines.
#[test]
fn replays_what_frag_records() {
    let zoneinfo = include_str!("../../frag/tests/fixtures/6.18-live/zoneinfo");
    let mut out = Vec::new();
    frag::trace::write_header(&mut out, zoneinfo, Some("6.18.0")).unwrap();
    let mut rec = frag::trace::Recorder::default();
    for i in 0..300u64 {
        let pfn = 0x13f000 + 4 * i;
        let t = 15331.0 + i as f64 * 1e-6;
        rec.line(
            &format!("   cc1-5123    [000] ..... {t:.6}: mm_page_alloc: page=00000000b1c0e9f5 pfn={pfn:#x} order=2 migratetype={} gfp_flags=GFP_KERNEL", i % 3),
            &mut out,
        )
        .unwrap();
        if i % 3 == 0 {
            rec.line(
                &format!("   <idle>-0       [001] ..s1. {t:.6}: mm_page_free: page=00000000a22c9a2b pfn={pfn:#x} order=2"),
                &mut out,
            )
            .unwrap();
        }
    }
    rec.line("   <idle>-0       [001] ..s1. 15332.000000: mm_page_free: page=00000000a22c9a2b pfn=0x1a0b7c order=0", &mut out)
        .unwrap();
    let r = fragsim::replay::parse(&out[..]).unwrap();
    assert_eq!(r.zones.len(), 3);
    assert_eq!(r.events.len(), 401);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rec.pagealloc");
    std::fs::write(&f, &out).unwrap();
    let o = fragsim(&[
        "replay",
        f.to_str().unwrap(),
        "--policy",
        "linux-6.15,illuminator",
        "--json",
    ]);
    assert!(o.code == 0, "{}", o.text);
    let s = o.text.clone();
    assert!(
        s.contains("1 frees of pages allocated before the recording ignored"),
        "{s}"
    );
}
