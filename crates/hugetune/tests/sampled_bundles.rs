//! Sampled bundles end to end (issue 18; docs/model.md §3.1): the built-in
//! kernels recorded under qemu complete and sampled (fixed-rate, fixed-size), and
//! `analyze` on the sample picks the mapping it picks on the complete stream,
//! with a saving within the sample's error bar; `analyze --rate` samples a
//! complete bundle the same way; `size` and `report` serve a stored sampled
//! profile. Skipped (with a message) where qemu-x86_64 is not installed.

mod common;
use common::{hugetune, WORK};
use serde_json::Value;
use std::path::Path;

fn have_qemu() -> bool {
    let q = hugetune_capture::qemu::find_qemu().is_some();
    if !q {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh installs it)");
    }
    q
}

fn record(db: &Path, out: &Path, sampling: &[&str], kernel: &[&str]) {
    let mut args = vec!["record", "--refs", "qemu"];
    args.extend_from_slice(sampling);
    args.extend_from_slice(&["-o", out.to_str().unwrap(), "--", WORK]);
    args.extend_from_slice(kernel);
    let (code, out, err) = hugetune(db, &args);
    assert_eq!(code, 0, "{args:?}: {out}\n{err}");
}

fn analyze(db: &Path, bundle: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["analyze", "--json", "--no-db"];
    args.extend_from_slice(extra);
    args.push(bundle.to_str().unwrap());
    let (code, out, err) = hugetune(db, &args);
    assert_eq!(code, 0, "{args:?}: {out}\n{err}");
    serde_json::from_str(&out).unwrap()
}

/// One native time for every analysis that compares savings (`agrees`).
const NATIVE: [&str; 2] = ["--native-time", "0.05"];

/// The best prediction: (label, saving in ns, its standard error).
fn best(v: &Value) -> (String, f64, f64) {
    let p = &v["predictions"][0];
    let label = p["label"].as_str().unwrap().to_string();
    let se = v["errors"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["label"] == p["label"]))
        .map_or(0.0, |e| e["saving_se_ns"].as_f64().unwrap());
    (label, p["saving_ns"].as_f64().unwrap(), se)
}

/// The sample picks the complete stream's mapping, and its saving is within
/// its error bar (3 standard errors) or 10 % of the complete one.
///
/// Every analysis here is over the same native time (`NATIVE`): the walk
/// overlap is taken from the native run's time per walk (docs/model.md §4),
/// and a 32 MiB kernel's native run lasts 35-65 ms from one recording to the
/// next (its first touches on this VM), which moved the saving of identical
/// counts by 7 % (15.84-16.91 ms over six recordings at R = 0.1, whose walks
/// and faults were the same) and failed this test's earlier bounds at 18.4 and
/// 18.3 ms against 16.1 and 15.2 ms. With one native time the six gave one
/// saving, 3 % from the complete stream's: the sampling's own error, which
/// is what this test checks.
fn agrees(what: &str, complete: &Value, sampled: &Value) {
    let (cl, cs, _) = best(complete);
    let (sl, ss, se) = best(sampled);
    assert!(
        sampled["result"]["sampling"].is_object(),
        "{what}: not sampled"
    );
    assert!(
        !sampled["errors"].as_array().unwrap().is_empty(),
        "{what}: no error bars"
    );
    eprintln!(
        "{what}: complete {cl} {:.2} ms, sampled {sl} {:.2} ms ± {:.2}",
        cs / 1e6,
        ss / 1e6,
        se / 1e6
    );
    assert_eq!(sl, cl, "{what}: best mapping");
    assert!(
        (ss - cs).abs() <= (3.0 * se).max(0.10 * cs.abs()),
        "{what}: saving {ss} vs {cs} (se {se})"
    );
}

#[test]
fn sampled_bundles_pick_the_complete_streams_mapping() {
    if !have_qemu() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("db.sqlite");
    for kernel in [
        &["randmem", "--size", "32M"][..],
        &["chase", "--size", "32M"][..],
    ] {
        let name = kernel[0];
        let complete = d.path().join(format!("{name}-complete.htb"));
        let sampled = d.path().join(format!("{name}-sampled.htb"));
        record(&db, &complete, &[], kernel);
        record(&db, &sampled, &["--rate", "0.1"], kernel);
        let c = analyze(&db, &complete, &NATIVE);
        assert!(c["result"]["sampling"].is_null() && c["errors"].is_null());
        agrees(
            &format!("{name}, R = 0.1"),
            &c,
            &analyze(&db, &sampled, &NATIVE),
        );
        // The analysis samples the complete stream itself, as the plugin would.
        let a = analyze(
            &db,
            &complete,
            &["--rate", "0.1", "--seed", "3", NATIVE[0], NATIVE[1]],
        );
        assert_eq!(a["result"]["sampling"]["kind"], "analysis");
        agrees(&format!("{name}, analyze --rate 0.1"), &c, &a);
        if name == "randmem" {
            let fixed = d.path().join("randmem-size.htb");
            record(&db, &fixed, &["--max-pages", "2048"], kernel);
            let f = analyze(&db, &fixed, &NATIVE);
            assert_eq!(f["result"]["sampling"]["kind"], "spatial-size");
            assert!(f["result"]["sampling"]["rate"].as_f64().unwrap() < 1.0);
            agrees("randmem, --max-pages 2048", &c, &f);
        }
    }
}

#[test]
fn size_and_report_serve_a_sampled_profile() {
    if !have_qemu() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("db.sqlite");
    let kernel = ["randmem", "--size", "32M"];
    let b = d.path().join("s.htb");
    record(&db, &b, &["--rate", "0.25"], &kernel);
    let (code, out, err) = hugetune(&db, &["analyze", b.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("stored as profile"), "{out}");
    // --native-time: the predictions are taken over the given native time (the
    // same saving, a speedup over that time); a bad value is named.
    let own = analyze(&db, &b, &[]);
    let quiet = analyze(&db, &b, &["--native-time", "0.25"]);
    assert_eq!(quiet["meta"]["native"]["wall_s"], 0.25);
    let p = &quiet["predictions"][0];
    let (save, speedup) = (
        p["saving_ns"].as_f64().unwrap(),
        p["predicted_speedup"].as_f64().unwrap(),
    );
    if save > 0.0 && save < 0.25e9 {
        let want = 0.25e9 / (0.25e9 - save);
        assert!((speedup - want).abs() < 1e-6 * want, "{speedup} vs {want}");
    }
    assert_ne!(own["meta"]["native"]["wall_s"], 0.25);
    for bad in ["0", "-1", "nan"] {
        let (code, out, err) = hugetune(
            &db,
            &[
                "analyze",
                "--no-db",
                &format!("--native-time={bad}"),
                b.to_str().unwrap(),
            ],
        );
        assert_ne!(code, 0, "--native-time {bad}: {out}");
        assert!(err.contains("--native-time"), "{err}");
    }
    let mut args = vec!["size", "--json", "--", WORK];
    args.extend_from_slice(&kernel);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v.is_object(), "{out}");
    let mut args = vec!["report", "--json", "--", WORK];
    args.extend_from_slice(&kernel);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["profile"]["ref_source"], "qemu", "{out}");
    assert!(v["profile"]["refs"].as_u64().unwrap() > 1_000_000, "{out}");
    assert!(!v["mappings"].as_array().unwrap().is_empty(), "{out}");
}
