//! DAMON through the whole command line: `record --refs damon` (a command, or a
//! running process with `-p`), `analyze` and `plan` of its bundle, and
//! `optimize --refs damon`, against a fake DAMON sysfs tree
//! (`HUGETUNE_DAMON_ROOT`) that a thread here fills as the kernel would: the
//! monitored process's mappings as regions, the hot ones chosen by the test.
//! And the real DAMON where this machine can monitor a process (skipped with
//! the reason printed where it cannot).

mod common;
use common::{signalable, HUGETUNE, LIB, PLUGIN, WORK};
use hugetune_host::procfs::{parse_maps, MapEntry};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// One test at a time: each DAMON session takes the kernel-state lock, and a
/// short process could end while its monitor waits for another test's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn put(root: &Path, rel: &str, value: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, value).unwrap();
}

fn get(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The admin tree with no kdamond, and kdamond 0's files as the kernel creates
/// them on `nr_kdamonds = 1`.
fn fake_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    put(r, "kdamonds/nr_kdamonds", "0\n");
    let c = "kdamonds/0/contexts/0";
    for (rel, v) in [
        ("kdamonds/0/state".to_string(), "off"),
        ("kdamonds/0/pid".into(), "-1"),
        ("kdamonds/0/contexts/nr_contexts".into(), "0"),
        (format!("{c}/avail_operations"), "vaddr fvaddr paddr"),
        (format!("{c}/operations"), "vaddr"),
        (format!("{c}/monitoring_attrs/intervals/sample_us"), "5000"),
        (format!("{c}/monitoring_attrs/intervals/aggr_us"), "100000"),
        (
            format!("{c}/monitoring_attrs/intervals/update_us"),
            "1000000",
        ),
        (format!("{c}/monitoring_attrs/nr_regions/min"), "10"),
        (format!("{c}/monitoring_attrs/nr_regions/max"), "1000"),
        (format!("{c}/targets/nr_targets"), "0"),
        (format!("{c}/targets/0/pid_target"), "0"),
        (format!("{c}/schemes/nr_schemes"), "0"),
        (format!("{c}/schemes/0/action"), "stat"),
        (format!("{c}/schemes/0/tried_regions/total_bytes"), "0"),
    ] {
        put(r, &rel, &format!("{v}\n"));
    }
    for range in ["sz", "nr_accesses", "age"] {
        for end in ["min", "max"] {
            put(
                r,
                &format!("{c}/schemes/0/access_pattern/{range}/{end}"),
                "0\n",
            );
        }
    }
    t
}

/// The kernel's part: once a target pid is set and DAMON is on, and the
/// process maps something `ready` accepts, its mappings become
/// `tried_regions/N` (each directory complete before it appears), with
/// `nr_accesses` from `heat` (of 20). Written once per monitored process.
struct FakeKdamond {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u32>>,
}

type Heat = fn(&MapEntry) -> u64;

impl FakeKdamond {
    fn start(root: &Path, ready: fn(&[MapEntry]) -> bool, heat: Heat) -> FakeKdamond {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, root) = (stop.clone(), root.to_path_buf());
        let thread = std::thread::spawn(move || {
            let c = "kdamonds/0/contexts/0";
            let dir = root.join(format!("{c}/schemes/0/tried_regions"));
            let mut done_for = 0u32;
            let mut written = 0;
            while !s.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
                let state = get(&root, "kdamonds/0/state");
                let pid: u32 = get(&root, &format!("{c}/targets/0/pid_target"))
                    .parse()
                    .unwrap_or(0);
                if state == "off" || pid == 0 || pid == done_for {
                    continue;
                }
                let Ok(text) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
                    continue;
                };
                let maps = parse_maps(&text);
                if !ready(&maps) {
                    continue;
                }
                // A new target: the old regions go.
                for e in fs::read_dir(&dir).unwrap().flatten() {
                    if e.path().is_dir() {
                        fs::remove_dir_all(e.path()).unwrap();
                    }
                }
                for (i, m) in maps.iter().enumerate() {
                    let tmp = dir.join(format!(".tmp{i}"));
                    fs::create_dir_all(&tmp).unwrap();
                    for (f, v) in [
                        ("start", m.start),
                        ("end", m.end),
                        ("nr_accesses", heat(m)),
                        ("age", 7),
                        ("sz_filter_passed", 0),
                    ] {
                        fs::write(tmp.join(f), format!("{v}\n")).unwrap();
                    }
                    fs::rename(&tmp, dir.join(i.to_string())).unwrap();
                }
                done_for = pid;
                written += 1;
            }
            written
        });
        FakeKdamond {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the thread; how many processes it wrote regions for.
    fn finish(mut self) -> u32 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for FakeKdamond {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// hugetune-work's 64 MiB malloc'd array: glibc maps it with its chunk header,
/// 64 MiB and a page (its 1 GiB .bss array for `--place static` is mapped
/// too, and stays cold).
fn is_array(m: &MapEntry) -> bool {
    m.path.is_empty() && (64 * MIB..66 * MIB).contains(&(m.end - m.start))
}

fn has_array(maps: &[MapEntry]) -> bool {
    maps.iter().any(is_array)
}

/// The array is hot (every sample found it accessed), the brk heap barely
/// touched (1 of 20), everything else never.
fn array_hot(m: &MapEntry) -> u64 {
    if is_array(m) {
        20
    } else if m.path == "[heap]" {
        1
    } else {
        0
    }
}

/// Nothing is ever accessed.
fn all_cold(_: &MapEntry) -> u64 {
    0
}

fn ht(root: &Path, db: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(HUGETUNE)
        .arg("--db")
        .arg(db)
        .args(args)
        .env("HUGETUNE_DAMON_ROOT", root)
        .env("HUGETUNE_RUNTIME_LIB", LIB)
        .env("HUGETUNE_QEMU_PLUGIN", PLUGIN)
        .output()
        .expect("run hugetune");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// randmem over 64 MiB for `passes` passes (1 M random accesses a pass,
/// about 30 ms on this machine).
fn randmem(passes: u32) -> Vec<String> {
    [
        WORK,
        "randmem",
        "--size",
        "64M",
        "--iters",
        &passes.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

fn args<'a>(pre: &[&'a str], cmd: &'a [String]) -> Vec<&'a str> {
    let mut v = pre.to_vec();
    v.push("--");
    v.extend(cmd.iter().map(String::as_str));
    v
}

fn plan_json(root: &Path, db: &Path, cmd: &[String]) -> Value {
    let (code, out, err) = ht(root, db, &args(&["plan", "--json"], cmd));
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn categories(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x[0].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The test: a DAMON bundle from the fake sysfs yields a plan, which
/// backs the hot category (the 64 MiB heap-large array, beyond the 4 KB TLB's
/// reach) and not the cold one (the brk heap, barely touched); the output says
/// that it is a frequency estimate. With nothing accessed, no plan.
#[test]
fn a_damon_bundle_from_the_fake_sysfs_yields_a_plan() {
    let _serial = serial();
    let t = fake_tree();
    let root = t.path();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let cmd = randmem(60);
    let bundle = d.path().join("damon.htb");
    let k = FakeKdamond::start(root, has_array, array_hot);
    let (code, out, err) = ht(
        root,
        &db,
        &args(
            &["record", "--refs", "damon", "-o", bundle.to_str().unwrap()],
            &cmd,
        ),
    );
    assert_eq!(k.finish(), 1);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("next: hugetune analyze"), "{out}");
    assert_eq!(get(root, "kdamonds/nr_kdamonds"), "0", "restored");
    assert_eq!(get(root, "kdamonds/0/state"), "off");

    let (code, out, err) = ht(root, &db, &["analyze", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("frequency estimate, not a TLB model"), "{out}");
    assert!(out.contains("heap-large: hot footprint"), "{out}");
    let row = |cat: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(cat) && l.trim_end().ends_with(['k', 'e']))
            .unwrap_or_else(|| panic!("no {cat} row: {out}"))
            .to_string()
    };
    assert!(row("heap-large").ends_with("back"), "{out}");
    assert!(row("heap-small").ends_with("leave"), "{out}");
    // The default costs have no spread: no interval.
    assert!(!out.contains("interval (speedup"), "{out}");

    // With a calibration whose figures spread, every prediction gets the
    // calibration's interval over the lower-bound counts, and says so.
    let cal_db = d.path().join("cal.db");
    common::store_calibration(&cal_db, &common::spread_calibration());
    let (code, out, err) = ht(root, &cal_db, &["analyze", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("over the lower-bound counts: the speedup may lie above it"),
        "{out}"
    );
    let (code, out, err) = ht(
        root,
        &cal_db,
        &["analyze", "--json", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let preds = v["predictions"].as_array().unwrap();
    let intervals = v["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), preds.len(), "{v}");
    let huge = preds
        .iter()
        .find(|p| p["label"].as_str().unwrap().starts_with("heap-large:"))
        .unwrap_or_else(|| panic!("no heap-large mapping: {v}"));
    let i = intervals
        .iter()
        .find(|i| i["label"] == huge["label"])
        .unwrap();
    let x = huge["predicted_speedup"].as_f64().unwrap();
    let f = |k: &str| i[k].as_f64().unwrap();
    // No sampling on top: the outer ends are the calibration's; the 4 KB
    // faults that heap-large saves move with their figure.
    assert_eq!(
        (f("low"), f("high")),
        (f("calibration_low"), f("calibration_high"))
    );
    assert!(f("low") < x && x < f("high"), "{huge} {i}");

    let v = plan_json(root, &db, &cmd);
    let cats = categories(&v["decision"]["assignments"]);
    assert!(cats.contains(&"heap-large".to_string()), "{v}");
    assert!(!cats.contains(&"heap-small".to_string()), "{v}");
    assert!(!cats.contains(&"static".to_string()), "{v}");

    // The same program with nothing accessed: no category is backed.
    let db2 = d.path().join("cold.db");
    let k = FakeKdamond::start(root, has_array, all_cold);
    let (code, _, err) = ht(
        root,
        &db2,
        &args(
            &["record", "--refs", "damon", "-o", bundle.to_str().unwrap()],
            &cmd,
        ),
    );
    k.finish();
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = ht(root, &db2, &["analyze", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cold: no access seen"), "{out}");
    let v = plan_json(root, &db2, &cmd);
    assert!(categories(&v["decision"]["assignments"]).is_empty(), "{v}");
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(cmd: &[String]) -> Running {
    let c = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Until the array is mapped.
    let t0 = Instant::now();
    while !fs::read_to_string(format!("/proc/{}/maps", c.id()))
        .map(|m| has_array(&parse_maps(&m)))
        .unwrap_or(false)
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "no array mapped");
        std::thread::sleep(Duration::from_millis(10));
    }
    Running(c)
}

/// `record -p`: a process hugetune did not start is monitored for --duration,
/// left running, its regions categorized from its maps; analyze and plan then
/// back its hot anonymous memory for the same program and arguments. Other
/// sources are refused with -p.
#[test]
fn record_p_monitors_a_running_process_and_plans_for_it() {
    let _serial = serial();
    let t = fake_tree();
    let root = t.path();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let cmd = randmem(100_000);
    let p = start(&cmd);
    let pid = p.0.id().to_string();
    let bundle = d.path().join("pid.htb");
    let b = bundle.to_str().unwrap();

    let (code, _, err) = ht(
        root,
        &db,
        &["record", "--refs", "qemu", "-p", &pid, "-o", b],
    );
    assert_ne!(code, 0);
    assert!(err.contains("only be monitored with DAMON"), "{err}");
    let (code, _, err) = ht(root, &db, &["record", "-p", "999999999", "-o", b]);
    assert_ne!(code, 0);
    assert!(err.contains("no such running process"), "{err}");
    assert_eq!(get(root, "kdamonds/nr_kdamonds"), "0");

    let k = FakeKdamond::start(root, has_array, array_hot);
    let t0 = Instant::now();
    let (code, out, err) = ht(
        root,
        &db,
        &[
            "record",
            "--refs",
            "damon",
            "-p",
            &pid,
            "--duration",
            "1.5",
            "-o",
            b,
        ],
    );
    let took = t0.elapsed();
    assert_eq!(k.finish(), 1);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("pid {pid}")), "{out}");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(8),
        "{took:?}"
    );
    // Never harmed: still running.
    assert!(
        hugetune_capture::damon::pid_alive(p.0.id()),
        "the process died"
    );
    assert_eq!(get(root, "kdamonds/nr_kdamonds"), "0", "restored");

    let (code, out, err) = ht(root, &db, &["analyze", b]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("frequency estimate, not a TLB model"), "{out}");
    assert!(out.contains("heap-large: hot footprint"), "{out}");
    let v = plan_json(root, &db, &cmd);
    assert!(
        categories(&v["decision"]["assignments"]).contains(&"heap-large".to_string()),
        "{v}"
    );
}

/// A process that ends while monitored ends the recording (well before
/// --duration), and the bundle holds what was seen; Ctrl-C does the same for
/// one that keeps running, which is left running.
#[test]
fn exit_and_ctrl_c_end_monitoring_early_with_a_bundle() {
    let _serial = serial();
    let t = fake_tree();
    let root = t.path();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");

    // About 3 s of randmem, monitored for up to 60 s.
    let p = start(&randmem(100));
    let pid = p.0.id();
    // Reap it when it ends, as its parent.
    let mut child = p;
    let reaper = std::thread::spawn(move || {
        let s = child.0.wait().unwrap();
        std::mem::forget(child);
        s
    });
    let k = FakeKdamond::start(root, has_array, array_hot);
    let b = d.path().join("exit.htb");
    let t0 = Instant::now();
    let (code, out, err) = ht(
        root,
        &db,
        &[
            "record",
            "-p",
            &pid.to_string(),
            "--duration",
            "60",
            "-o",
            b.to_str().unwrap(),
        ],
    );
    k.finish();
    assert!(reaper.join().unwrap().success());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("process {pid} ended")), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(b.exists(), "{out}");
    assert_eq!(get(root, "kdamonds/nr_kdamonds"), "0");

    // Ctrl-C.
    let p = start(&randmem(100_000));
    let k = FakeKdamond::start(root, has_array, array_hot);
    let b = d.path().join("int.htb");
    let mut h = signalable()
        .arg("--db")
        .arg(&db)
        .args([
            "record",
            "-p",
            &p.0.id().to_string(),
            "--duration",
            "60",
            "-o",
        ])
        .arg(&b)
        .env("HUGETUNE_DAMON_ROOT", root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1800));
    let t0 = Instant::now();
    // SAFETY: kill has no memory effects; the pid is our child.
    unsafe { libc::kill(h.id() as i32, libc::SIGINT) };
    let status = h.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(h.stderr.as_mut().unwrap(), &mut err).unwrap();
    k.finish();
    assert!(status.success(), "{status}: {err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(err.contains("interrupted after"), "{err}");
    assert!(b.exists());
    assert!(hugetune_capture::damon::pid_alive(p.0.id()));
    assert_eq!(get(root, "kdamonds/nr_kdamonds"), "0");
    assert_eq!(get(root, "kdamonds/0/state"), "off");
}

/// `optimize --refs damon` end to end: the run monitored, the frequency
/// estimate, a plan sized by the sizing run, A/B runs; the JSON and the text
/// say it is a frequency estimate.
#[test]
fn optimize_refs_damon_end_to_end() {
    let _serial = serial();
    let t = fake_tree();
    let root = t.path();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    // Long enough (about 1.5 s natively) that snapshots land in the walk, not
    // only in the initialization, when a loaded machine slows the kdamond.
    let cmd = randmem(60);
    let b = d.path().join("o.htb");
    // A calibration with spread: the predicted speedup gets an interval.
    common::store_calibration(&db, &common::spread_calibration());
    let k = FakeKdamond::start(root, has_array, array_hot);
    let (code, out, err) = ht(
        root,
        &db,
        &args(
            &[
                "optimize",
                "--refs",
                "damon",
                "--runs",
                "2",
                "--max-runs",
                "2",
                "--json",
                "--bundle",
                b.to_str().unwrap(),
            ],
            &cmd,
        ),
    );
    k.finish();
    assert!([0, 2].contains(&code), "{code}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["profile"]["ref_source"], "damon");
    assert_eq!(
        v["frequency"]["basis"],
        "frequency estimate, not a TLB model"
    );
    let cats = categories(&v["plan"]["assignments"]);
    assert!(cats.contains(&"heap-large".to_string()), "{v}");
    assert!(
        v["predicted_speedup"]["basis"]
            .as_str()
            .unwrap()
            .starts_with("frequency estimate, not a TLB model"),
        "{v}"
    );
    // The calibration's interval over the lower bounds, no sampling interval.
    let ps = &v["predicted_speedup"];
    let g = |k: &str| ps[k].as_f64().unwrap();
    assert!(g("lo") < g("value") && g("value") < g("hi"), "{ps}");
    assert!(
        ps.get("calibration").is_some() && ps.get("sampling").is_none(),
        "{ps}"
    );
    assert!(
        ps["basis"].as_str().unwrap().contains("may lie above it"),
        "{ps}"
    );
    assert_eq!(v["validation"]["baseline_s"].as_array().unwrap().len(), 2);
    // Walks are lower bounds from the frequencies: some with 4 KB pages.
    let all_small = v["predicted"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["label"] == "all-small")
        .unwrap();
    assert!(all_small["walks"].as_u64().unwrap() > 0, "{all_small}");
}

/// The real DAMON, where this machine lets hugetune monitor a process:
/// `record --refs damon` of randmem over 256 MiB, then analyze sees the array
/// hot. Skipped, with the reason printed, where DAMON cannot monitor a process
/// (no vaddr operations, someone else's kdamond running, not root).
#[test]
fn real_damon_where_available() {
    let _serial = serial();
    let root = Path::new(hugetune_capture::damon::DAMON_ADMIN);
    if let Err(why) = hugetune_capture::damon::available(root) {
        eprintln!("skipped: the real DAMON cannot monitor a process here: {why}");
        return;
    }
    let before = fs::read_to_string(root.join("kdamonds/nr_kdamonds")).ok();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let b = d.path().join("real.htb");
    let cmd: Vec<String> = [WORK, "randmem", "--size", "256M", "--iters", "30"]
        .map(String::from)
        .to_vec();
    let (code, _, err) = ht(
        Path::new(hugetune_capture::damon::DAMON_ADMIN),
        &db,
        &args(
            &["record", "--refs", "damon", "-o", b.to_str().unwrap()],
            &cmd,
        ),
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = ht(root, &db, &["analyze", b.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{out}");
    assert!(out.contains("frequency estimate, not a TLB model"), "{out}");
    assert!(out.contains("heap-large: hot footprint"), "{out}");
    assert_eq!(
        fs::read_to_string(root.join("kdamonds/nr_kdamonds")).ok(),
        before
    );
}
