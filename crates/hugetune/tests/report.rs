//! `hugetune report` on a database built through the store's API (a synthetic
//! profile with two dozen directives of three page sizes, its runs; no
//! profiling): the terminal, JSON and error outputs, and the HTML page loaded in
//! headless Chromium: it loads without console errors, its DOM has the verdict
//! card first and the plots with their marks, the plan and the knee; its layout
//! holds (measured in the browser by `LAYOUT_CHECK`, which the test injects
//! into a copy of the page: no text outside its plot or over another, no cut
//! label, legends of at most eight entries, data in every plot); and its
//! screenshot shows the plots' colours. `frag --html`'s page (from a /proc
//! fixture) passes the same layout check. Chromium is required:
//! scripts/setup.sh installs it. `HUGETUNE_KEEP_REPORT=DIR` keeps the page there.

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
    directive_1g(mapping, label, pmb, speedup, h, 0, t)
}

fn directive_1g(
    mapping: &str,
    label: &str,
    pmb: f64,
    speedup: f64,
    h: u64,
    g: u64,
    t: u64,
) -> NewDirective {
    NewDirective {
        mapping: mapping.into(),
        assignments: json!([]),
        base: true,
        saving_ns: pmb * 1e6,
        pmb,
        predicted_speedup: speedup,
        hugetlb_pages: h,
        thp_pages: t,
        details: json!({"mapping": mapping, "label": label, "hugetlb_1g_pages": g}),
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
                // Validated once: its confidence is evidence, the others' is not.
                NewDirective {
                    confidence: 0.5,
                    validations: 1,
                    ..directive("static", "static:thp", 1.0, 1.01, 0, 2)
                },
                directive("all-small", "all-small", 0.0, 1.0, 0, 0),
            ]
            .into_iter()
            .chain(more_directives())
            .collect::<Vec<_>>(),
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

/// The rest of a real profile's two dozen: 1 GB pages, and combinations of
/// categories and backings, none cheaper for its benefit than heap-large on 2 MB
/// pages (which stays the knee).
fn more_directives() -> Vec<NewDirective> {
    let mut v = vec![
        directive_1g(
            "heap-large:hugetlb-1g",
            "heap-large:hugetlb-1g",
            40.0,
            1.3,
            0,
            1,
            0,
        ),
        directive_1g("static:hugetlb-1g", "static:hugetlb-1g", 0.5, 1.0, 0, 1, 0),
        directive("static:hugetlb", "static:hugetlb", 1.1, 1.01, 2, 0),
        directive(
            "heap-small:hugetlb",
            "heap-small:hugetlb",
            3.2,
            1.02,
            1090,
            0,
        ),
    ];
    for (i, b) in ["hugetlb", "thp", "hugetlb-1g"].into_iter().enumerate() {
        let i = i as f64;
        for (k, (cats, pmb, pages)) in [
            ("static:thp heap-large:{b}", 95.5 - i, 514u64),
            ("heap-small:thp heap-large:{b}", 95.0 - i, 1602),
            ("static:{b} heap-small:{b}", 3.5 - i, 1092),
            (
                "static:hugetlb heap-small:hugetlb heap-large:{b}",
                94.0 - i,
                1604,
            ),
            ("static:thp heap-small:{b} heap-large:thp", 93.0 - i, 1614),
        ]
        .into_iter()
        .enumerate()
        {
            let label = cats.replace("{b}", b);
            let (h, g, t) = match b {
                "hugetlb" => (pages, 0, 0),
                "thp" => (0, 0, pages),
                _ => (0, 1 + k as u64 % 2, pages),
            };
            let mut d = directive_1g(&label, &label, pmb, 1.0 + pmb / 130.0, h, g, t);
            d.base = false;
            v.push(d);
        }
    }
    v
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
    assert!(
        t.contains("\nverdict: Put heap-large on 2 MB hugetlb pages\n"),
        "{t}"
    );
    assert!(t.contains("  $ hugetune run -- "), "{t}");

    // The same through the command, the newest profile of its program.
    let by_cmd = ok(report(&f.db, &["--", HUGETUNE, "--size", "1G"]));
    assert_eq!(by_cmd, t);

    let j: Value = serde_json::from_str(&ok(report(&f.db, &["--profile", &p, "--json"]))).unwrap();
    assert_eq!(j["profile"]["machine"], "testbox, Test CPU, kernel 6.18");
    assert_eq!(j["mappings"].as_array().unwrap().len(), 25);
    // The plan: validated by the first run; unvalidated directives say so.
    assert_eq!(j["plan"]["label"], "heap-large:hugetlb");
    assert_eq!(j["plan"]["basis"], "validated");
    assert_eq!(j["plan"]["hugetlb_pages"], 512);
    assert_eq!(j["plan"]["run_id"].as_i64(), Some(f.runs[0]));
    assert!(j["plan"]["commands"][1]["command"]
        .as_str()
        .unwrap()
        .starts_with("hugetune run -- "));
    let st = j["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["label"] == "static:thp")
        .unwrap();
    assert_eq!(
        (st["validations"].as_u64(), st["confidence"].as_f64()),
        (Some(1), Some(0.5))
    );
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

/// Measures the page as Chromium laid it out and writes the findings, as JSON,
/// into `body[data-layout]` (read back with `--dump-dom`): which element follows
/// the title; per SVG its title, texts, legend entries, data marks and plan and
/// knee marks; and every text drawn outside its SVG (Chromium clips it: a cut
/// label), over another text, or shortened with an ellipsis. The report
/// promises no scripts, so the test injects this into a copy of the page rather
/// than the page carrying a test mode.
const LAYOUT_CHECK: &str = r#"<script>
(function () {
  var out = {first: null, svgs: [], errors: []};
  var f = document.querySelector('body > h1 + *');
  if (f) out.first = f.tagName.toLowerCase() + '.' + (f.getAttribute('class') || '');
  document.querySelectorAll('svg').forEach(function (svg) {
    var vb = svg.viewBox.baseVal, sr = svg.getBoundingClientRect(), k = vb.width / sr.width;
    var t0 = svg.querySelector('title');
    var info = {title: t0 ? t0.textContent : '', texts: 0,
      legend: svg.querySelectorAll('.legend-entry').length,
      marks: svg.querySelectorAll('.mark').length,
      chosen: svg.querySelectorAll('.chosen').length,
      knee: svg.querySelectorAll('.knee').length};
    var boxes = [];
    svg.querySelectorAll('text').forEach(function (t) {
      var s = t.textContent;
      if (!s.trim()) return;
      info.texts++;
      var r = t.getBoundingClientRect();
      var b = [(r.left - sr.left) * k, (r.top - sr.top) * k, (r.right - sr.left) * k, (r.bottom - sr.top) * k];
      if (b[0] < -0.5 || b[1] < -0.5 || b[2] > vb.width + 0.5 || b[3] > vb.height + 0.5)
        out.errors.push(info.title + ': "' + s + '" runs out of the plot ' + b.map(Math.round));
      if (s.indexOf('\u2026') >= 0) out.errors.push(info.title + ': "' + s + '" is cut');
      boxes.forEach(function (o) {
        var a = o[0];
        if (Math.min(a[2], b[2]) - Math.max(a[0], b[0]) > 1 && Math.min(a[3], b[3]) - Math.max(a[1], b[1]) > 1)
          out.errors.push(info.title + ': "' + s + '" is drawn over "' + o[1] + '"');
      });
      boxes.push([b, s]);
    });
    if (info.legend > 8) out.errors.push(info.title + ': a legend of ' + info.legend + ' entries');
    if (info.marks < 1) out.errors.push(info.title + ': no data drawn');
    out.svgs.push(info);
  });
  document.body.setAttribute('data-layout', JSON.stringify(out));
})();
</script>"#;

/// Loads `html` with `LAYOUT_CHECK` injected and returns its findings.
fn layout(chrome: &Path, user: &Path, html: &Path) -> Value {
    let page = std::fs::read_to_string(html).unwrap();
    let checked = html.with_extension("checked.html");
    std::fs::write(
        &checked,
        page.replace("</body>", &format!("{LAYOUT_CHECK}</body>")),
    )
    .unwrap();
    let o = run_chromium(
        chrome,
        user,
        &["--dump-dom", "--run-all-compositor-stages-before-draw"],
        &format!("file://{}", checked.display()),
    );
    let errors = console_lines(&o.stderr);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let dom = String::from_utf8_lossy(&o.stdout);
    let attr = dom
        .split("data-layout=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("the layout check did not run: {dom}"));
    let json = attr
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let v: Value = serde_json::from_str(&json).unwrap();
    let errors = v["errors"].as_array().unwrap();
    assert!(errors.is_empty(), "{}: {errors:#?}", html.display());
    v
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
    if let Some(dir) = std::env::var_os("HUGETUNE_KEEP_REPORT") {
        std::fs::write(Path::new(&dir).join("report.html"), &page).unwrap();
    }
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
    // The verdict card: the validated plan, its pages, both gains, the commands.
    let card = dom
        .split("<section class=\"verdict good\">")
        .nth(1)
        .and_then(|c| c.split("</section>").next())
        .unwrap_or_else(|| panic!("no verdict card: {dom}"));
    for want in [
        "Put heap-large on 2 MB hugetlb pages",
        "heap-large:hugetlb",
        "512 x 2 MB hugetlb",
        "1.77x faster (96 % of the maximal benefit)",
        "1.74x in run",
        "echo $(( $(cat /proc/sys/vm/nr_hugepages) + 512 )) | sudo tee /proc/sys/vm/nr_hugepages",
        "hugetune run -- ",
        "hugetune service install UNIT",
    ] {
        assert!(card.contains(want), "{want}: {card}");
    }
    // Unvalidated directives say so; the validated one shows its confidence.
    assert!(dom.contains("<td>not validated</td>"));
    assert!(dom.contains("<td>0.50 (1 validation)</td>"));
    assert!(
        !dom.contains("<td>1.00</td>"),
        "a confidence nobody measured"
    );
    // PMB, MRC, two fig. 4 plots (runs, rank) and the run strip plot.
    assert_eq!(dom.matches("<svg").count(), 5, "{dom}");
    let svgs: Vec<&str> = dom.split("<svg").skip(1).collect();
    let count = |s: &str, what: &str| s.matches(what).count();
    // PMB: a point per directive with huge pages (the page axis is log: all-small
    // at 0 pages is left out, and the page says so), the plan = the knee ringed.
    assert_eq!(count(svgs[0], r#"class="mark point"#), 24);
    assert!(dom.contains("without huge pages (0 %) are not drawn"));
    assert!(svgs[0].contains(r#"<circle class="chosen knee""#));
    assert!(svgs[0].contains(">plan (the knee): heap-large:hugetlb</tspan>"));
    // MRC: a curve per page size, the y axis in decades, the plan's 2 MB heavier.
    assert_eq!(count(svgs[1], "<polyline"), 3);
    assert!(svgs[1].contains(">1e-4<") && svgs[1].contains(">0.01<"));
    assert!(svgs[1].contains(r#"class="mark series chosen""#));
    // Fig. 4: two bars per compared mapping (two runs name theirs; two rank
    // mappings), the plan's row shaded in both.
    assert_eq!(count(svgs[2], r#"class="mark bar"#), 4);
    assert_eq!(count(svgs[3], r#"class="mark bar"#), 4);
    assert_eq!(count(svgs[2], r#"class="mark bar chosen""#), 2);
    assert_eq!(count(svgs[3], r#"class="mark bar chosen""#), 2);
    // Runs: every time (5+5, 3+3, 2+2) and a median per column; run 1 is the plan's.
    assert_eq!(count(svgs[4], r#"class="mark point""#), 20);
    assert_eq!(count(svgs[4], r#"class="mark median""#), 6);
    assert_eq!(count(svgs[4], r#"<rect class="chosen""#), 1);
    assert!(dom.contains("Not recorded") || dom.contains("not recorded"));

    // (b) The layout, measured in the browser: the card first, every plot with
    // data, the plan (and the knee) in every plot, short legends, no cut or
    // overlapping text.
    let l = layout(&chrome, &user, &html);
    assert_eq!(l["first"], "section.verdict good");
    let svgs = l["svgs"].as_array().unwrap();
    assert_eq!(svgs.len(), 5);
    for s in svgs {
        assert!(s["chosen"].as_u64().unwrap() >= 1, "no plan in {s}");
        assert!(s["legend"].as_u64().unwrap() <= 8, "{s}");
        assert!(s["marks"].as_u64().unwrap() >= 1, "{s}");
    }
    assert!(svgs[0]["knee"].as_u64().unwrap() >= 1);
    assert!(
        svgs[0]["legend"].as_u64().unwrap() >= 3,
        "grouped, not gone"
    );

    // (c) A screenshot of the whole page shows the plots' colours.
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
        "chromium ({}): DOM, layout and screenshot in {:.2} s",
        chrome.display(),
        t0.elapsed().as_secs_f64()
    );
}

/// `frag --html`'s page, from the /proc files of a NUMA machine with CMA: it
/// opens with its verdict, not terminal text, and its plots pass the layout check.
#[test]
fn frag_page_opens_with_its_verdict_and_its_layout_holds() {
    let chrome = chromium();
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../frag/tests/fixtures/4.4-numa-cma");
    let r = |f: &str| std::fs::read_to_string(d.join(f)).ok();
    let snap = frag::snapshot::build(
        &frag::snapshot::Texts {
            buddyinfo: r("buddyinfo").unwrap(),
            zoneinfo: r("zoneinfo").unwrap(),
            vmstat: r("vmstat").unwrap_or_else(|| "thp_fault_alloc 1\n".into()),
            pagetypeinfo: r("pagetypeinfo"),
            extfrag_threshold: r("extfrag_threshold"),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("frag.html");
    std::fs::write(&html, frag::render::html(&snap, &[])).unwrap();
    if let Some(keep) = std::env::var_os("HUGETUNE_KEEP_REPORT") {
        std::fs::copy(&html, Path::new(&keep).join("frag.html")).unwrap();
    }
    let l = layout(&chrome, &dir.path().join("chromium-profile"), &html);
    assert!(
        l["first"].as_str().unwrap().starts_with("section.verdict"),
        "{l}"
    );
    let svgs = l["svgs"].as_array().unwrap();
    assert!(svgs.len() >= 4, "{l}");
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
