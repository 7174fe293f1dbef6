//! `hugetune report` on a database built through the store's API (a synthetic
//! profile, its directives and runs; no profiling): the terminal, JSON and error
//! outputs, and the HTML page loaded in headless Chromium: it loads without console
//! errors, its DOM has the four plots and their marks, and its screenshot shows
//! the plots' colours. Chromium is required: scripts/setup.sh installs it.

mod common;
use common::{hugetune, HUGETUNE};

use hugetune_store::db::{Db, NewDirective, NewRun};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// The program the synthetic profile belongs to: hugetune itself, so that
/// `report -- CMD` resolves it as `optimize` would have stored it.
fn program() -> (String, Option<String>) {
    let path = hugetune_capture::elf::resolve_program(std::ffi::OsStr::new(HUGETUNE)).unwrap();
    let bid = hugetune_capture::elf::build_id(&path).unwrap();
    (path.display().to_string(), bid)
}

fn directive(mapping: &str, label: &str, pmb: f64, speedup: f64, h: u64, t: u64) -> NewDirective {
    NewDirective {
        mapping: mapping.into(),
        assignments: json!([]),
        base: true,
        saving_ns: pmb * 1e6,
        pmb,
        predicted_speedup: speedup,
        hugetlb_pages: h,
        thp_pages: t,
        details: json!({"mapping": mapping, "label": label, "hugetlb_1g_pages": 0}),
        confidence: 1.0,
        validations: 0,
        lost: false,
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    db: PathBuf,
    out: PathBuf,
    profile: i64,
    runs: Vec<i64>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.db");
    let mut db = Db::open(&path).unwrap();
    let m = db
        .upsert_machine("fp", "testbox", "Test CPU", "6.18", &json!({}))
        .unwrap();
    let (prog_path, bid) = program();
    let prog = db.upsert_program(&prog_path, bid.as_deref()).unwrap();
    // An MRC per page size over TLB capacities 1..64 K entries.
    let curve = |scale: f64| -> Value {
        (0..=16)
            .map(|e| {
                let n = (1u64 << e) as f64;
                json!([n, (1.0 / (1.0 + n / scale)).min(1.0)])
            })
            .collect()
    };
    let summary = json!({
        "refs": 123456, "native_s": 2.1, "ref_source": "qemu",
        "significance": {"passes": true, "tlb_misses_per_s": 2.5e6, "faults_per_s": 4e3, "source": "model"},
        "mrc": {"4k": curve(4096.0), "2m": curve(16.0), "1g": curve(1.0)},
    });
    let profile = db
        .insert_profile(
            prog,
            Some(m),
            &[prog_path.clone(), "--size".into(), "1G".into()],
            None,
            &summary,
            &[
                directive(
                    "all-large",
                    "static:thp heap-small:thp heap-large:hugetlb",
                    100.0,
                    1.8,
                    520,
                    1100,
                ),
                directive("heap-large", "heap-large:hugetlb", 96.0, 1.77, 512, 0),
                directive("heap-large", "heap-large:thp", 94.0, 1.75, 0, 512),
                directive("heap-small", "heap-small:thp", 3.0, 1.02, 0, 1090),
                directive("static", "static:thp", 1.0, 1.01, 0, 2),
                directive("all-small", "all-small", 0.0, 1.0, 0, 0),
            ],
        )
        .unwrap();
    let run = |mapping: Option<&str>, b: Vec<f64>, o: Vec<f64>, verdict: &str| {
        let mut plan = json!({"assignments": []});
        let mut details = json!({});
        if let Some(m) = mapping {
            plan["mapping"] = json!(m);
            details["validation"] = json!({"baseline_s": b, "optimized_s": o, "p_gain": 0.004});
        }
        let speedup = median(&b) / median(&o);
        db.insert_run(&NewRun {
            program_id: prog,
            mapping: plan["mapping"].as_str().unwrap_or_default().to_string(),
            profile_id: Some(profile),
            machine_id: Some(m),
            args: vec![prog_path.clone()],
            plan,
            baseline_s: b,
            optimized_s: o,
            speedup: Some(speedup),
            huge_bytes_backed: 1 << 30,
            verdict: verdict.into(),
            details,
        })
        .unwrap()
    };
    let runs = vec![
        run(
            Some("heap-large"),
            vec![2.10, 2.14, 2.08, 2.2, 2.11],
            vec![1.21, 1.19, 1.25, 1.2, 1.22],
            "gain",
        ),
        run(
            Some("static"),
            vec![2.1, 2.05, 2.12],
            vec![2.09, 2.11, 2.1],
            "no significant change",
        ),
        // A row from before runs named their mapping.
        run(None, vec![2.0, 2.1], vec![1.9, 2.0], "gain"),
    ];
    Fixture {
        out: dir.path().join("out"),
        _dir: dir,
        db: path,
        profile,
        runs,
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (v[(n - 1) / 2] + v[n / 2]) / 2.0
}

/// `hugetune --db DB report ARGS`.
fn report(db: &Path, args: &[&str]) -> (i32, String, String) {
    hugetune(db, &[&["report"], args].concat())
}

fn ok((code, out, err): (i32, String, String)) -> String {
    assert_eq!(code, 0, "hugetune report failed: {err}");
    out
}

#[test]
fn terminal_json_and_errors() {
    let f = fixture();
    let p = f.profile.to_string();
    let t = ok(report(&f.db, &["--profile", &p]));
    assert!(t.starts_with(&format!("profile {p}: ")), "{t}");
    let line = t
        .lines()
        .find(|l| l.trim_start().starts_with("heap-large:hugetlb"))
        .unwrap();
    assert!(line.contains("1.77x") && line.contains("96%") && line.contains("512"));
    assert!(line.trim_end().ends_with("gain"), "{line}");
    assert!(t.contains("knee: heap-large:hugetlb"), "{t}");

    // The same through the command, the newest profile of its program.
    let by_cmd = ok(report(&f.db, &["--", HUGETUNE, "--size", "1G"]));
    assert_eq!(by_cmd, t);

    let j: Value = serde_json::from_str(&ok(report(&f.db, &["--profile", &p, "--json"]))).unwrap();
    assert_eq!(j["profile"]["machine"], "testbox, Test CPU, kernel 6.18");
    assert_eq!(j["mappings"].as_array().unwrap().len(), 6);
    assert_eq!(j["runs"].as_array().unwrap().len(), 3);
    assert_eq!(j["mrc"].as_array().unwrap().len(), 3);
    assert_eq!(j["compared"][0]["mappings"].as_array().unwrap().len(), 2);
    assert_eq!(j["runs"][2]["mapping"], Value::Null);

    let r = f.runs[0].to_string();
    let j: Value = serde_json::from_str(&ok(report(&f.db, &["--run", &r, "--json"]))).unwrap();
    assert_eq!(j["runs"].as_array().unwrap().len(), 1);
    assert_eq!(j["profile"]["id"].as_i64(), Some(f.profile));

    for (args, msg) in [
        (
            vec!["--profile", "999"],
            "no profile with id 999".to_string(),
        ),
        (vec!["--run", "999"], "no run with id 999".into()),
        (vec!["--", "/bin/true"], "no profile of".into()),
        (vec![], "say what to report".into()),
        (
            vec!["--profile", &p, "--rank", "/nonexistent"],
            "reading /nonexistent".into(),
        ),
    ] {
        let (code, _, e) = report(&f.db, &args);
        assert!(code != 0 && e.contains(&msg), "{args:?}: {e}");
    }
    // A report never creates a database.
    let missing = f.out.with_extension("db");
    let e = report(&missing, &["--profile", "1"]).2;
    assert!(e.contains("no database at"), "{e}");
    assert!(!missing.exists());
}

/// Chromium's headless binary (the headless shell first: it starts faster), or a
/// failure saying how to install it: CI runs scripts/setup.sh first, so a missing
/// Chromium is a broken setup, not a reason to skip.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .chain(["/usr/bin".into()])
        .collect();
    for name in ["chromium-headless-shell", "chromium", "chromium-browser"] {
        if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            return p;
        }
    }
    panic!("Chromium is not installed: run scripts/setup.sh (it installs chromium-headless-shell)");
}

fn run_chromium(chrome: &Path, profile_dir: &Path, args: &[&str], url: &str) -> Output {
    let mut c = Command::new("timeout");
    c.arg("120").arg(chrome);
    if !chrome.ends_with("chromium-headless-shell") {
        c.arg("--headless");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--no-sandbox");
    }
    let o = c
        .arg("--disable-gpu")
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .args(["--enable-logging=stderr", "--v=0"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{} failed: {}",
        chrome.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Console messages (the page has no scripts: any is an error, e.g. an SVG
/// attribute Chromium cannot parse).
fn console_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .map(String::from)
        .collect()
}

#[test]
fn html_page_loads_in_headless_chromium_with_its_plots() {
    let chrome = chromium();
    let f = fixture();
    std::fs::create_dir_all(&f.out).unwrap();
    let html = f.out.join("report.html");
    let rank = f.out.join("rank.jsonl");
    // One ranking experiment, as `hugetune rank --json` writes it.
    std::fs::write(
        &rank,
        json!({"name": "w", "command": ["x"], "runs": 5, "refs": 1, "significance_passes": true,
            "tlb_misses_per_s": 1.0, "faults_per_s": 1.0, "ranking_error": 2.0, "best_agrees": true,
            "geometry": "g", "cost_source": "c", "mappings": [
            {"label": "all-small", "predicted_saving_ms": 0.0, "predicted_pmb": 0.0, "predicted_speedup": 1.0,
             "measured_median_s": 0.2, "measured_min_s": 0.19, "measured_max_s": 0.21, "measured_pmb": 0.0,
             "measured_speedup": 1.0, "huge_bytes": 0, "walks": 10, "sim_walks": null},
            {"label": "heap-large:hugetlb", "predicted_saving_ms": 90.0, "predicted_pmb": 100.0, "predicted_speedup": 1.9,
             "measured_median_s": 0.1, "measured_min_s": 0.09, "measured_max_s": 0.11, "measured_pmb": 100.0,
             "measured_speedup": 2.0, "huge_bytes": 1, "walks": 1, "sim_walks": null}]})
        .to_string(),
    )
    .unwrap();
    ok(report(
        &f.db,
        &[
            "--profile",
            &f.profile.to_string(),
            "--rank",
            rank.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    ));
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: no scripts, nothing fetched (the SVG namespace is a name).
    assert!(!page.contains("<script"));
    assert!(!page
        .replace("http://www.w3.org/2000/svg", "")
        .contains("http"));
    let url = format!("file://{}", html.display());
    let user = f.out.join("chromium-profile");
    let t0 = Instant::now();

    // (a) The DOM as Chromium built it.
    let o = run_chromium(&chrome, &user, &["--dump-dom"], &url);
    let dom = String::from_utf8_lossy(&o.stdout);
    let errors = console_lines(&o.stderr);
    assert!(errors.is_empty(), "console errors on load: {errors:#?}");
    // PMB, MRC, two fig. 4 plots (runs, rank) and the run strip plot.
    assert_eq!(dom.matches("<svg").count(), 5, "{dom}");
    let svgs: Vec<&str> = dom.split("<svg").skip(1).collect();
    let count = |s: &str, what: &str| s.matches(what).count();
    // PMB: a point per directive and the knee.
    assert_eq!(count(svgs[0], r#"class="point""#), 7);
    assert!(svgs[0].contains("knee: heap-large:hugetlb"));
    // MRC: a curve per page size.
    assert_eq!(count(svgs[1], "<polyline"), 3);
    // Fig. 4: two bars per compared mapping (two runs name theirs; two rank mappings).
    assert_eq!(count(svgs[2], r#"class="bar""#), 4);
    assert_eq!(count(svgs[3], r#"class="bar""#), 4);
    // Runs: every time (5+5, 3+3, 2+2) and a median per column.
    assert_eq!(count(svgs[4], r#"class="point""#), 20);
    assert_eq!(count(svgs[4], r#"class="median""#), 6);
    assert!(dom.contains("Not recorded") || dom.contains("not recorded"));

    // (b) A screenshot of the whole page shows the plots' colours.
    let png = f.out.join("shot.png");
    let o = run_chromium(
        &chrome,
        &user,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,4200",
            "--hide-scrollbars",
        ],
        &url,
    );
    let errors = console_lines(&o.stderr);
    assert!(errors.is_empty(), "console errors on load: {errors:#?}");
    let (w, h, rgb) = decode(&png);
    assert_eq!((w, h), (1200, 4200));
    let px = rgb.len() / 3;
    let non_white = rgb.chunks(3).filter(|p| p.iter().any(|&c| c < 240)).count();
    assert!(
        non_white * 50 > px,
        "screenshot nearly blank: {non_white} of {px} pixels drawn"
    );
    // The first two series colours (#1f77b4 blue, #ff7f0e orange) fill bars,
    // points and lines: thousands of pixels each.
    for (name, c) in [("blue", [0x1f, 0x77, 0xb4]), ("orange", [0xff, 0x7f, 0x0e])] {
        let n = rgb
            .chunks(3)
            .filter(|p| p.iter().zip(c).all(|(&a, b)| a.abs_diff(b) <= 8))
            .count();
        assert!(n > 2000, "{name}: only {n} pixels in the screenshot");
    }
    eprintln!(
        "chromium ({}): DOM and screenshot in {:.2} s",
        chrome.display(),
        t0.elapsed().as_secs_f64()
    );
}

/// Width, height and RGB bytes of a PNG.
fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let mut d = png::Decoder::new(std::io::Cursor::new(bytes));
    d.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut r = d.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    let rgb = match info.color_type {
        png::ColorType::Rgb => buf,
        png::ColorType::Rgba => buf.chunks(4).flat_map(|p| p[..3].to_vec()).collect(),
        png::ColorType::Grayscale => buf.iter().flat_map(|&g| [g, g, g]).collect(),
        png::ColorType::GrayscaleAlpha => buf.chunks(2).flat_map(|p| [p[0]; 3]).collect(),
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    (info.width, info.height, rgb)
}
