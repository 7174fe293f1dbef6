//! A JVM's heap on huge pages through the JVM's own switch (plan `jvm`,
//! docs/runtimes.md): the runtime library leaves the JVM's mappings alone
//! under `jvm thp-2m` and reports their huge pages; `optimize` on a small
//! Java random walk (workloads/java/Walk.java) plans `jvm thp-2m`, prints what
//! the plain run prints and backs the heap; `run` says how much of the Java
//! heap was huge, keeps the user's JAVA_TOOL_OPTIONS and leaves a user's own
//! switch alone. Skipped (with a message) where java/javac (openjdk-17-jdk-headless),
//! or for the profile qemu-x86_64, is not installed, or THP is `never`;
//! scripts/setup.sh installs them.

mod common;
use common::{hugetune, need_program, LIB};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const WALK: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../workloads/java/Walk.java"
);
const MAP_WALK: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../workloads/java/MapWalk.java"
);

/// java, with Walk compiled into `dir` (None, with a message: skipped).
fn java_walk(dir: &Path) -> Option<PathBuf> {
    let java = need_program("java")?;
    need_program("javac")?;
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains("[never]") {
        eprintln!("SKIPPED: THP is `never` here: -XX:+UseTransparentHugePages has nothing to use");
        return None;
    }
    javac(dir, WALK);
    Some(java)
}

/// Compiles `source` into `dir`.
fn javac(dir: &Path, source: &str) {
    let out = Command::new("javac")
        .arg("-d")
        .arg(dir)
        .arg(source)
        .output()
        .expect("run javac");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scratch directory with Walk compiled into it, for a test that profiles
/// java under qemu (None, with a message: skipped).
fn java_under_qemu() -> Option<tempfile::TempDir> {
    if hugetune_capture::qemu::find_qemu().is_none() {
        eprintln!("SKIPPED: qemu-x86_64 is not installed (scripts/setup.sh installs it)");
        return None;
    }
    let d = tempfile::tempdir().unwrap();
    java_walk(d.path())?;
    Some(d)
}

/// `java ARGS` with `env`: exit code, stdout, stderr.
fn java(args: &[&str], env: &[(&str, String)]) -> (i32, String, String) {
    let mut c = Command::new("java");
    for k in [
        "LD_PRELOAD",
        "JAVA_TOOL_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "_JAVA_OPTIONS",
        "HUGETUNE_MODE",
    ] {
        c.env_remove(k);
    }
    let o = c
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .expect("run java");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Under `jvm thp-2m` (and `heap-large hugetlb-2m`, which would otherwise
/// take the program's own mappings) the library takes none of the JVM's
/// mappings, the JVM's switch backs its heap, and the summary proves it.
#[test]
fn the_library_leaves_the_jvm_alone_and_reports_its_huge_pages() {
    let d = tempfile::tempdir().unwrap();
    if java_walk(d.path()).is_none() {
        return;
    }
    let cp = d.path().to_str().unwrap();
    let args = [
        "-Xmx64m",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        cp,
        "Walk",
        "32",
        "200000",
    ];
    let (code, plain, err) = java(&args, &[]);
    assert_eq!(code, 0, "{err}");
    let plan = d.path().join("plan");
    std::fs::write(
        &plan,
        "hugetune-plan 1\nthreshold 131072\njvm thp-2m\nheap-large hugetlb-2m\n",
    )
    .unwrap();
    let env = [
        ("LD_PRELOAD", LIB.to_string()),
        ("HUGETUNE_MODE", "apply".into()),
        ("HUGETUNE_PLAN", plan.display().to_string()),
        (
            "HUGETUNE_SUMMARY",
            d.path().join("summary.%p.json").display().to_string(),
        ),
        ("JAVA_TOOL_OPTIONS", "-XX:+UseTransparentHugePages".into()),
    ];
    let (code, out, err) = java(&args, &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain, "the same output as the plain run");
    let summaries: Vec<Value> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("summary."))
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect();
    let s = summaries
        .iter()
        .find(|s| s["mode"] == "apply" && s["jvm"].is_object())
        .unwrap_or_else(|| panic!("no apply summary with a jvm object: {summaries:?}"));
    assert_eq!(s["plan"]["valid"], true, "{s}");
    assert_eq!(
        s["mapped"]["mappings"], 0,
        "no JVM mapping taken: {}",
        s["mapped"]
    );
    assert_eq!(s["mapped"]["hugetlb_mappings"], 0, "{}", s["mapped"]);
    let j = &s["jvm"];
    assert_eq!(j["backing"], "thp-2m");
    assert!(
        j["mappings_left"].as_u64().unwrap() > 0,
        "the JVM maps its own memory: {j}"
    );
    let huge = j["anon_huge_bytes"].as_u64().unwrap();
    // The 32 MiB array lives in the heap, which the JVM advised.
    assert!(huge >= 16 << 20, "{j}");
    let listed: u64 = j["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["anon_huge_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        listed + j["unlisted_huge_bytes"].as_u64().unwrap(),
        huge,
        "{j}"
    );
}

/// The real program: optimize profiles the walk under qemu, recognizes the
/// JVM and plans `jvm thp-2m`; every run prints what the plain run prints,
/// and the heap was huge. `run` then says so of the Java heap, appends to
/// the user's JAVA_TOOL_OPTIONS, and leaves a user's own switch alone.
#[test]
fn optimize_plans_the_jvm_heap_and_run_reports_it() {
    let Some(d) = java_under_qemu() else {
        return;
    };
    // The pool stays as it is for the whole test (another test's pool would
    // make the plan hugetlb at one run and not the next).
    let lock = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    let db = d.path().join("h.db");
    let cp = d.path().to_str().unwrap();
    // C1 only: the JIT's work under qemu is most of the profile's time.
    let cmd = [
        "java",
        "-Xmx64m",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        cp,
        "Walk",
        "32",
        "1000000",
    ];
    let (_, plain, _) = java(&cmd[1..], &[]);
    let mut args = vec![
        "optimize",
        "--runs",
        "2",
        "--max-runs",
        "2",
        "--compare-output",
        "--max-pages",
        "4096",
        "--json",
        "--",
    ];
    args.extend_from_slice(&cmd);
    let (code, out, err) = hugetune(&db, &args);
    let r: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("optimize --json: {e}: {out}\n{err}"));
    assert_ne!(r["verdict"], "broke", "{err}");
    assert!(code == 0 || code == 2, "{code}: {err}");
    let plan = r["plan"]["text"].as_str().unwrap();
    assert!(
        plan.contains("\njvm thp-2m\n") || plan.contains("\njvm hugetlb-2m\n"),
        "{plan}\n{err}"
    );
    assert_eq!(
        r["plan"]["program"]["jvm"], true,
        "libjvm.so seen in the profile"
    );
    assert!(err.contains("the JVM's heap →"), "{err}");
    // The switch's own prediction (the heap on THP, mapping `jvm`), not "no plan".
    let ps = &r["predicted_speedup"];
    assert!(
        !ps["basis"].as_str().unwrap().starts_with("no plan"),
        "{ps}"
    );
    assert!(ps["value"].as_f64().unwrap() > 1.0, "{ps}");
    assert!(
        r["predicted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["label"] == "jvm:thp" && p["base"] == false),
        "{}",
        r["predicted"]
    );
    let v = &r["validation"];
    assert_eq!(
        v["exit_codes_match"], true,
        "every run printed what the first baseline run printed: {err}"
    );
    let jvm_huge: u64 = v["runtime_summaries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|run| run.as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["jvm"]["anon_huge_bytes"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(
        jvm_huge >= 16 << 20,
        "the heap's huge pages in the summaries: {v}"
    );
    assert!(
        r["huge_bytes_backed"].as_u64().unwrap() >= jvm_huge,
        "{}",
        r["huge_bytes_backed"]
    );

    // run: the plan applied, the user's JAVA_TOOL_OPTIONS kept before ours.
    let o = Command::new(common::HUGETUNE)
        .arg("--db")
        .arg(&db)
        .args(["run", "--"])
        .args(cmd)
        .env("HUGETUNE_RUNTIME_LIB", LIB)
        .env("JAVA_TOOL_OPTIONS", "-Dhugetune.test=1")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    assert_eq!(out, plain);
    assert!(
        err.contains("Picked up JAVA_TOOL_OPTIONS: -Dhugetune.test=1 -XX:+UseTransparentHugePages"),
        "{err}"
    );
    let line = err
        .lines()
        .find(|l| l.contains("Java heap: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(heap_mib(line) >= 16.0, "{line}");
    assert!(
        line.contains("page_size=2M"),
        "the JVM used 2 MB pages for its heap: {line}"
    );

    // A user's own switch wins: nothing of ours in the JVM's options.
    let mut own = cmd.to_vec();
    own.insert(1, "-XX:-UseTransparentHugePages");
    let mut args = vec!["run", "--"];
    args.extend_from_slice(&own);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain);
    assert!(err.contains("sets its own huge page switch"), "{err}");
    assert!(!err.contains("Picked up JAVA_TOOL_OPTIONS"), "{err}");

    // A pool that holds the -Xmx heap and the code cache (C1 only: 48 MiB):
    // -XX:+UseLargePages, and the heap on hugetlb pages.
    if !common::is_root() {
        eprintln!("SKIPPED (hugetlb part): not root, the pool cannot be grown");
        return;
    }
    let taken = hugetune_host::machine::pool(2048).map_or(0, |p| p.taken());
    let need = 32 + 24 + 120; // heap, C1's code cache, and the default code cache hugetune assumes
    let pool =
        hugetune_host::kernel_state::set_hugetlb_pool_holding(&lock, 2048, taken + need).unwrap();
    let mut args = vec!["run", "--"];
    args.extend_from_slice(&cmd);
    let (code, out, err) = hugetune(&db, &args);
    drop(pool);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain);
    assert!(
        err.contains("-XX:+UseLargePages -XX:LargePageSizeInBytes=2m"),
        "{err}"
    );
    let line = err
        .lines()
        .find(|l| l.contains("Java heap: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains("of its 64.0 MiB reservation") && line.contains("page_size=2M"),
        "{line}"
    );
    assert!(
        heap_mib(line) >= 32.0,
        "the 32 MiB array on hugetlb pages: {line}"
    );
}

/// The huge MiB of a "Java heap: 36.0 MiB of its ..." line.
fn heap_mib(line: &str) -> f64 {
    let rest = &line[line.find("Java heap: ").unwrap() + 11..];
    let mut w = rest.split_whitespace();
    let v: f64 = w.next().unwrap().parse().unwrap();
    match w.next().unwrap() {
        "B" => v / 1048576.0,
        "KiB" => v / 1024.0,
        "MiB" => v,
        "GiB" => v * 1024.0,
        u => panic!("unit {u} in {line}"),
    }
}

/// A JVM whose misses are in a file it maps (workloads/java/MapWalk.java,
/// `FileChannel.map` of 32 MiB read at random): the misses are in `other`,
/// but not in the heap, and the switch leaves file pages as they are. The
/// profile predicts nothing for the heap on THP, and the plan says why it
/// does not add the switch (before, its 64 MiB form was planned `jvm thp-2m`
/// at 1.08x predicted; the switch measured 0.99x on a 512 MiB file:
/// docs/runtimes.md, "Recognition and plan").
#[test]
fn a_jvm_walking_a_mapped_file_gets_no_heap_switch() {
    let Some(d) = java_under_qemu() else {
        return;
    };
    javac(d.path(), MAP_WALK);
    let db = d.path().join("h.db");
    let bundle = d.path().join("m.htb");
    let index = d.path().join("index");
    let cmd = [
        "java",
        "-Xmx64m",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        d.path().to_str().unwrap(),
        "MapWalk",
        index.to_str().unwrap(),
        "32",
        "300000",
    ];
    let mut args = vec![
        "record",
        "--refs",
        "qemu",
        "--max-pages",
        "4096",
        "-o",
        bundle.to_str().unwrap(),
        "--",
    ];
    args.extend_from_slice(&cmd);
    let (code, _, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = hugetune(&db, &["analyze", "--json", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let an: Value = serde_json::from_str(&out).unwrap();
    let jvm = an["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["label"] == "jvm:thp")
        .unwrap_or_else(|| panic!("a JVM: the jvm mapping is evaluated: {an}"));
    // Nothing of the file's walks is counted as saved: at most noise.
    assert!(jvm["predicted_speedup"].as_f64().unwrap() < 1.02, "{jvm}");
    let mut args = vec!["plan", "--json", "--"];
    args.extend_from_slice(&cmd);
    let (code, out, err) = hugetune(&db, &args);
    assert_eq!(code, 0, "{err}");
    let p: Value = serde_json::from_str(&out).unwrap();
    let text = p["plan"].as_str().unwrap();
    assert!(!text.contains("jvm "), "{text}");
    let reasons = p["decision"]["reasons"].to_string();
    assert!(
        reasons.contains("its heap stays on 4 KB pages")
            && reasons.contains("files or shared memory it maps"),
        "{reasons}"
    );
}
