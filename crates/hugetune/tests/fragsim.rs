//! `hugetune fragsim` end to end: every output, replay of a compressed
//! recording, and clear errors for bad arguments.

use std::path::Path;
use std::process::{Command, Output};

fn hugetune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hugetune"))
        .arg("fragsim")
        .args(args)
        .output()
        .expect("run hugetune")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn highalloc_writes_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let o = hugetune(&[
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
        &p("s.json"),
        "--svg",
        &p("svg"),
        "--html",
        &p("r.html"),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("linux-4.5") && out.contains("illuminator") && out.contains("pass success"),
        "{out}"
    );
    let csv = std::fs::read_to_string(p("s.csv")).unwrap();
    assert!(csv.starts_with("policy,events,phase,"));
    assert!(csv.lines().count() > 10);
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p("s.json")).unwrap()).unwrap();
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
    let o = hugetune(&[
        "replay",
        f.to_str().unwrap(),
        "--policy",
        "all",
        "--json",
        "-",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
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
        let o = hugetune(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(msg), "{args:?}: {}", text(&o));
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad");
    std::fs::write(&f, "# hugetune-pagealloc v1\n1 A 2 3\n").unwrap();
    let o = hugetune(&["replay", f.to_str().unwrap()]);
    assert!(
        text(&o).contains("line 2") && text(&o).contains("migratetype"),
        "{}",
        text(&o)
    );
}
