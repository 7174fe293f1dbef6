//! Deploying to a service: `hugetune service install|remove` in a temporary
//! `--root` (files, contents, modes, the marker, refusals, dry runs, the plan
//! from the database or a checked `--plan FILE`), the generated units checked by
//! `systemd-analyze verify`, the pool unit's scripts run against stand-in sysfs
//! files, and `hugetune run --exec` becoming the program.

mod common;

use common::{hugetune, HUGETUNE, LIB, PLUGIN};
use hugetune_model::rank::{label, Prediction};
use hugetune_model::{Backing, Category};
use hugetune_store::db::{Db, NewDirective};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SYS: &str = "etc/systemd/system";

/// A root with `demo.service` running /bin/sleep (systemd-analyze needs a real program).
fn root_with_unit(unit_text: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let sys = d.path().join(SYS);
    std::fs::create_dir_all(&sys).unwrap();
    std::fs::write(sys.join("demo.service"), unit_text).unwrap();
    d
}

const DEMO: &str = "[Unit]\nDescription=demo\n\n[Service]\nExecStart=/bin/sleep 1000\n";

/// `hugetune ARGS` with an empty database in `dir`.
fn ht(dir: &Path, args: &[&str]) -> (i32, String, String) {
    hugetune(&dir.join("h.db"), args)
}

/// Every file and link under `root`, relative (directories left out).
fn files(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn write_plan(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const MARKER: &str = "# Written by hugetune service install for demo.service:";

#[test]
fn install_and_remove_round_trip() {
    let root = root_with_unit(DEMO);
    let r = root.path();
    let work = tempfile::tempdir().unwrap();
    let before = files(r);
    let plan = write_plan(
        work.path(),
        "p",
        "hugetune-plan 1\npool hugetlb-2m 4\nheap-large hugetlb-2m\n",
    );
    let args = [
        "service",
        "install",
        "demo",
        "--root",
        r.to_str().unwrap(),
        "--plan",
        plan.to_str().unwrap(),
    ];
    let (code, out, err) = ht(work.path(), &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4 2 MB pages"), "{out}");
    assert!(out.contains("systemctl restart demo.service"), "{out}");

    let dropin = r.join(SYS).join("demo.service.d/hugetune.conf");
    let plan_file = r.join("etc/hugetune/demo.service.plan");
    let pool = r.join(SYS).join("hugetune-pool-demo.service");
    let link = r
        .join(SYS)
        .join("sysinit.target.wants/hugetune-pool-demo.service");
    let lib = r.join("usr/local/lib/hugetune/libhugetune.so");
    let d = std::fs::read_to_string(&dropin).unwrap();
    assert!(d.starts_with(MARKER), "{d}");
    // The library hugetune uses is not on the target system: a copy is, and the
    // drop-in names the copy's path there.
    for line in [
        "Environment=\"LD_PRELOAD=/usr/local/lib/hugetune/libhugetune.so\"",
        "Environment=\"HUGETUNE_MODE=apply\"",
        "Environment=\"HUGETUNE_PLAN=/etc/hugetune/demo.service.plan\"",
        // summaries where `hugetune status -p` asks for them (%% is systemd's %)
        "RuntimeDirectory=hugetune-demo",
        "Environment=\"HUGETUNE_SUMMARY=/run/hugetune-demo/summary.%%p.json\"",
        "Environment=\"HUGETUNE_SUMMARY_REQUEST=/run/hugetune-demo/request\"",
        "Wants=hugetune-pool-demo.service",
        "After=hugetune-pool-demo.service",
    ] {
        assert!(d.lines().any(|l| l == line), "{line} missing:\n{d}");
    }
    assert_eq!(std::fs::read(&lib).unwrap(), std::fs::read(LIB).unwrap());
    let p = std::fs::read_to_string(&plan_file).unwrap();
    assert!(p.starts_with(MARKER), "{p}");
    assert!(
        p.ends_with("\nhugetune-plan 1\npool hugetlb-2m 4\nheap-large hugetlb-2m\n"),
        "{p}"
    );
    let u = std::fs::read_to_string(&pool).unwrap();
    assert!(u.starts_with(MARKER), "{u}");
    assert!(
        u.contains("Before=sysinit.target shutdown.target demo.service"),
        "{u}"
    );
    assert!(u.contains("b + 4"), "{u}");
    assert!(
        !u.contains("hugepages-1048576kB"),
        "no 1 GB pages asked: {u}"
    );
    for f in [&dropin, &plan_file, &pool, &lib] {
        assert_eq!(mode(f), 0o644, "{}", f.display());
    }
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("/etc/systemd/system/hugetune-pool-demo.service")
    );

    // Installing again replaces hugetune's own files; a plan without hugetlb
    // pages takes the pool unit away.
    let thp = write_plan(work.path(), "thp", "hugetune-plan 1\nheap-large thp-2m\n");
    let mut again = args;
    again[6] = thp.to_str().unwrap();
    let (code, out, err) = ht(work.path(), &again);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!pool.exists() && !link.exists(), "{out}");
    let d = std::fs::read_to_string(&dropin).unwrap();
    assert!(!d.contains("Wants="), "{d}");
    assert!(std::fs::read_to_string(&plan_file)
        .unwrap()
        .ends_with("heap-large thp-2m\n"));

    let (code, out, err) = ht(
        work.path(),
        &[
            "service",
            "remove",
            "demo.service",
            "--root",
            r.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(files(r), before, "remove left files:\n{out}");
    for gone in [
        "etc/hugetune",
        "usr/local/lib/hugetune",
        "etc/systemd/system/demo.service.d",
    ] {
        assert!(!r.join(gone).exists(), "{gone}");
    }
    let (code, out, _) = ht(
        work.path(),
        &["service", "remove", "demo", "--root", r.to_str().unwrap()],
    );
    assert_eq!(code, 0);
    assert!(out.contains("nothing to remove"), "{out}");
}

#[test]
fn a_dry_run_shows_everything_and_writes_nothing() {
    let root = root_with_unit(DEMO);
    let r = root.path();
    let work = tempfile::tempdir().unwrap();
    let plan = write_plan(work.path(), "p", "hugetune-plan 1\nheap-large hugetlb-1g\n");
    let before = files(r);
    let (code, out, err) = ht(
        work.path(),
        &[
            "service",
            "install",
            "demo",
            "--dry-run",
            "--root",
            r.to_str().unwrap(),
            "--plan",
            plan.to_str().unwrap(),
            "--pages",
            "3",
            "--pages-1g",
            "2",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(files(r), before, "a dry run wrote:\n{out}");
    for want in [
        "--- write",
        "demo.service.d/hugetune.conf (mode 0644)",
        "Environment=\"HUGETUNE_MODE=apply\"",
        "etc/hugetune/demo.service.plan (mode 0644)",
        "heap-large hugetlb-1g",
        "hugetune-pool-demo.service (mode 0644)",
        "hugepages-2048kB/nr_hugepages",
        "hugepages-1048576kB/nr_hugepages",
        "--- link",
        "(the runtime library,",
        // 1 GB pages are best had at boot: the kernel command line, as `size` says it.
        "kernel command line: hugepagesz=1G hugepages=",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    // Removing with --dry-run after a real install removes nothing either.
    let (code, _, err) = ht(
        work.path(),
        &[
            "service",
            "install",
            "demo",
            "--root",
            r.to_str().unwrap(),
            "--plan",
            plan.to_str().unwrap(),
            "--pages",
            "3",
            "--pages-1g",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let installed = files(r);
    let (code, out, _) = ht(
        work.path(),
        &[
            "service",
            "remove",
            "demo",
            "--dry-run",
            "--root",
            r.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("--- remove") && out.contains("hugetune.conf"),
        "{out}"
    );
    assert_eq!(files(r), installed);
}

#[test]
fn files_hugetune_did_not_write_are_never_overwritten_or_removed() {
    let root = root_with_unit(DEMO);
    let r = root.path();
    let work = tempfile::tempdir().unwrap();
    let plan = write_plan(work.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");
    let dropin = r.join(SYS).join("demo.service.d/hugetune.conf");
    std::fs::create_dir_all(dropin.parent().unwrap()).unwrap();
    let mine = "[Service]\nEnvironment=MINE=1\n";
    std::fs::write(&dropin, mine).unwrap();
    let install = [
        "service",
        "install",
        "demo",
        "--root",
        r.to_str().unwrap(),
        "--plan",
        plan.to_str().unwrap(),
    ];
    let (code, _, err) = ht(work.path(), &install);
    assert_eq!(code, 1);
    assert!(
        err.contains("not written by hugetune") && err.contains("hugetune.conf"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&dropin).unwrap(), mine);
    assert!(
        !r.join("etc/hugetune").exists(),
        "nothing written before refusing"
    );
    let (code, _, err) = ht(
        work.path(),
        &["service", "remove", "demo", "--root", r.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("left in place"), "{err}");
    assert_eq!(std::fs::read_to_string(&dropin).unwrap(), mine);

    // A plan file in the way, and one written for another unit, likewise.
    std::fs::remove_file(&dropin).unwrap();
    let plan_file = r.join("etc/hugetune/demo.service.plan");
    std::fs::create_dir_all(plan_file.parent().unwrap()).unwrap();
    for other in [
        "hugetune-plan 1\n".to_string(),
        "# Written by hugetune service install for other.service: x\nhugetune-plan 1\n".into(),
    ] {
        std::fs::write(&plan_file, &other).unwrap();
        let (code, _, err) = ht(work.path(), &install);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("does not overwrite"), "{err}");
        assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), other);
    }
}

#[test]
fn unit_names_and_missing_units_get_clear_errors() {
    let root = root_with_unit(DEMO);
    let r = root.path().to_str().unwrap();
    let work = tempfile::tempdir().unwrap();
    let plan = write_plan(work.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");
    let p = plan.to_str().unwrap();
    for (name, why) in [
        ("../../etc/passwd", "not a unit name"),
        ("a/b", "not a unit name"),
        ("a..b", "not a unit name"),
        ("a b", "cannot be in a unit name"),
        ("x.socket", "socket unit"),
        ("getty@", "template"),
        ("getty@.service", "template"),
        ("nothere", "no unit nothere.service"),
    ] {
        for cmd in ["install", "remove"] {
            if cmd == "remove" && why.starts_with("no unit") {
                continue; // remove needs no unit: it cleans up after a deleted one too
            }
            let (code, out, err) = ht(
                work.path(),
                &["service", cmd, name, "--root", r, "--plan", p]
                    [..if cmd == "install" { 7 } else { 5 }],
            );
            assert_eq!(code, 1, "{cmd} {name}: {out}");
            assert!(err.contains(why), "{cmd} {name}: {err}");
        }
    }
    // A masked unit is refused with the reason.
    std::os::unix::fs::symlink("/dev/null", root.path().join(SYS).join("masked.service")).unwrap();
    let (code, _, err) = ht(
        work.path(),
        &["service", "install", "masked", "--root", r, "--plan", p],
    );
    assert_eq!(code, 1);
    assert!(err.contains("masked"), "{err}");
    let (code, _, err) = ht(
        work.path(),
        &[
            "service",
            "install",
            "demo",
            "--root",
            "/nonexistent/x",
            "--plan",
            p,
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/x"), "{err}");
}

#[test]
fn a_plan_file_is_checked_by_the_runtime_librarys_parser() {
    let root = root_with_unit(DEMO);
    let r = root.path().to_str().unwrap();
    let work = tempfile::tempdir().unwrap();
    let install = |plan: &Path, extra: &[&str]| {
        let mut a = vec![
            "service",
            "install",
            "demo",
            "--dry-run",
            "--root",
            r,
            "--plan",
            plan.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        ht(work.path(), &a)
    };
    let bad = write_plan(
        work.path(),
        "bad",
        "hugetune-plan 1\nheap-large hugetlb-3m\n",
    );
    let (code, _, err) = install(&bad, &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains(bad.to_str().unwrap()) && err.contains("unknown backing"),
        "{err}"
    );
    let junk = write_plan(work.path(), "junk", "not a plan\n");
    let (code, _, err) = install(&junk, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("hugetune-plan 1"), "{err}");
    let (code, _, err) = install(&work.path().join("missing"), &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("missing") && err.contains("No such file"),
        "{err}"
    );
    // Valid, but it does not say how many pages to reserve.
    let unsized_plan = write_plan(
        work.path(),
        "unsized",
        "hugetune-plan 1\nheap-large hugetlb-2m\n",
    );
    let (code, _, err) = install(&unsized_plan, &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--pages N") && err.contains("pool hugetlb-2m N"),
        "{err}"
    );
    let (code, out, err) = install(&unsized_plan, &["--pages", "7"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("b + 7"), "{out}");
    // A pool that the library falls back from (fork-safe thp) needs no pages.
    let forks = write_plan(
        work.path(),
        "forks",
        "hugetune-plan 1\npool hugetlb-2m 9\nheap-large hugetlb-2m\nfork-safe thp\n",
    );
    let (code, out, err) = install(&forks, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("hugetune-pool-demo.service (mode"), "{out}");
}

/// Stores a profile of `argv` (as `hugetune record` + `analyze` would) whose
/// directives are `preds`: the planner then chooses among them.
fn store_profile(db: &Path, argv: &[&str], preds: &[Prediction]) {
    let path = hugetune_capture::elf::resolve_program(argv[0].as_ref()).unwrap();
    let build_id = hugetune_capture::elf::build_id(&path).unwrap();
    let mut s = Db::open(db).unwrap();
    let program = s
        .upsert_program(&path.display().to_string(), build_id.as_deref())
        .unwrap();
    let directives: Vec<NewDirective> = preds
        .iter()
        .map(|p| NewDirective {
            mapping: p.mapping.clone(),
            assignments: serde_json::to_value(&p.assignments).unwrap(),
            base: p.base,
            saving_ns: p.saving_ns,
            pmb: p.pmb,
            predicted_speedup: p.predicted_speedup,
            hugetlb_pages: p.hugetlb_pages,
            thp_pages: p.thp_pages,
            details: serde_json::to_value(p).unwrap(),
            confidence: 1.0,
            validations: 0,
            lost: false,
        })
        .collect();
    let summary = serde_json::json!({
        "significance": {"tlb_misses_per_s": 1e8, "faults_per_s": 0.0, "passes": true, "source": "model"},
        "native_s": 1.0,
        "threshold": 131072,
    });
    let args: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
    s.insert_profile(program, None, &args, None, &summary, &directives)
        .unwrap();
}

fn prediction(
    assignments: Vec<(Category, Backing)>,
    saving_s: f64,
    pages: u64,
    pages_1g: u64,
) -> Prediction {
    Prediction {
        mapping: label(&assignments),
        label: label(&assignments),
        base: true,
        assignments,
        miss_time_ns: 2e8,
        saving_ns: saving_s * 1e9,
        pmb: 100.0,
        predicted_seconds: 1.0 - saving_s,
        predicted_speedup: 1.0 / (1.0 - saving_s),
        hugetlb_pages: pages,
        hugetlb_1g_pages: pages_1g,
        static_pages_1g: (0, 0),
        thp_pages: 0,
        sites: vec![],
        walks: 0,
        faults: 0,
    }
}

#[test]
fn the_plan_comes_from_the_database_for_the_units_exec_start() {
    // The packaged unit starts something else; the administrator's drop-in
    // replaces ExecStart (as systemd merges them) and preloads a library of its own.
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let vendor = r.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&vendor).unwrap();
    std::fs::write(
        vendor.join("demo.service"),
        "[Service]\nExecStart=/bin/true\n",
    )
    .unwrap();
    let admin = r.join(SYS).join("demo.service.d");
    std::fs::create_dir_all(&admin).unwrap();
    std::fs::write(
        admin.join("override.conf"),
        "[Service]\nExecStart=\nExecStart=-/bin/sleep \\\n  1000\nEnvironment=\"LD_PRELOAD=/opt/own.so\" OTHER=1\n",
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("h.db");
    store_profile(
        &db,
        &["/bin/sleep", "1000"],
        &[
            prediction(vec![(Category::HeapLarge, Backing::Hugetlb2m)], 0.2, 8, 0),
            prediction(vec![(Category::HeapLarge, Backing::Thp2m)], 0.1, 0, 0),
        ],
    );
    let rs = r.to_str().unwrap();
    let (code, out, err) = hugetune(&db, &["service", "install", "demo", "--root", rs]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("profile #1 of /bin/sleep 1000"), "{out}");
    let plan = std::fs::read_to_string(r.join("etc/hugetune/demo.service.plan")).unwrap();
    assert!(plan.contains("\nheap-large hugetlb-2m\n"), "{plan}");
    let pool = std::fs::read_to_string(r.join(SYS).join("hugetune-pool-demo.service")).unwrap();
    assert!(pool.contains("b + 8"), "{pool}");
    let d = std::fs::read_to_string(admin.join("hugetune.conf")).unwrap();
    assert!(
        d.contains("Environment=\"LD_PRELOAD=/usr/local/lib/hugetune/libhugetune.so /opt/own.so\""),
        "{d}"
    );
    assert!(std::fs::read_to_string(admin.join("override.conf"))
        .unwrap()
        .contains("own.so"));

    // At most 4 pool pages: the THP mapping, no pool unit (the old one goes).
    let (code, out, err) = hugetune(
        &db,
        &["service", "install", "demo", "--root", rs, "--pages", "4"],
    );
    if std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|t| t.contains("[never]"))
    {
        assert_eq!(code, 1, "THP is off: nothing to install\n{out}{err}");
        assert!(err.contains("nothing to install"), "{err}");
        return;
    }
    assert_eq!(code, 0, "{out}{err}");
    let plan = std::fs::read_to_string(r.join("etc/hugetune/demo.service.plan")).unwrap();
    assert!(plan.contains("\nheap-large thp-2m\n"), "{plan}");
    assert!(
        !r.join(SYS).join("hugetune-pool-demo.service").exists(),
        "{out}"
    );

    // Without a profile of the program: the reason and the way out.
    let (code, _, err) = hugetune(
        &work.path().join("empty.db"),
        &["service", "install", "demo", "--root", rs],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("no profile of /bin/sleep") && err.contains("--plan FILE"),
        "{err}"
    );
}

/// `systemd-analyze verify` on the unit with hugetune's drop-in and the pool
/// unit, read from `root` before the system's own units; its complaints.
fn verify(root: &Path, units: &[&str]) -> (bool, String) {
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .args(units)
        .env(
            "SYSTEMD_UNIT_PATH",
            format!("{}:", root.join(SYS).display()),
        )
        .output()
        .expect("systemd-analyze (package systemd, scripts/setup.sh)");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    // Only what concerns these units: the host's own may warn on their own.
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(&root.display().to_string()) || units.iter().any(|u| l.contains(u)))
        .collect();
    (o.status.success() && ours.is_empty(), ours.join("\n"))
}

#[test]
fn generated_units_pass_systemd_analyze_verify() {
    let work = tempfile::tempdir().unwrap();
    // A plain service with pools of both sizes, and an instance of a template.
    let root = root_with_unit(DEMO);
    std::fs::write(
        root.path().join(SYS).join("app@.service"),
        "[Service]\nExecStart=/bin/sleep %i\n",
    )
    .unwrap();
    let rs = root.path().to_str().unwrap();
    let plan = write_plan(
        work.path(),
        "p",
        "hugetune-plan 1\npool hugetlb-2m 4\npool hugetlb-1g 1\nheap-large hugetlb-1g\nheap-small thp-2m\n",
    );
    let p = plan.to_str().unwrap();
    for unit in ["demo", "app@100"] {
        let (code, out, err) = ht(
            work.path(),
            &["service", "install", unit, "--root", rs, "--plan", p],
        );
        assert_eq!(code, 0, "{unit}: {out}{err}");
    }
    let d = std::fs::read_to_string(root.path().join(SYS).join("demo.service.d/hugetune.conf"))
        .unwrap();
    assert!(
        d.contains("Environment=\"GLIBC_TUNABLES=glibc.malloc.hugetlb=1\""),
        "{d}"
    );
    let units = [
        "demo.service",
        "hugetune-pool-demo.service",
        "app@100.service",
        "hugetune-pool-app_100.service",
    ];
    let (ok, why) = verify(root.path(), &units);
    assert!(ok, "systemd-analyze verify:\n{why}");

    // The check can fail: a drop-in systemd refuses is reported.
    let bad = root.path().join(SYS).join("demo.service.d/zz-broken.conf");
    std::fs::write(&bad, "[Service]\nExecStart=/bin/sleep 1\nType=simple\n").unwrap();
    let (ok, why) = verify(root.path(), &units[..1]);
    assert!(!ok, "a unit with two ExecStart= passed: {why}");
}

/// The pool unit's ExecStart=/ExecStop= scripts, unescaped for sh, with the
/// sysfs files replaced by `(from, to)`.
fn scripts(unit: &str, key: &str, swap: &[(&str, String)]) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=-/bin/sh -c '")))
        .map(|s| {
            let mut s = s.strip_suffix('\'').unwrap().replace("$$", "$");
            for (from, to) in swap {
                s = s.replace(from, to);
            }
            s
        })
        .collect()
}

fn sh(script: &str, runtime_dir: &Path) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("RUNTIME_DIRECTORY", runtime_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}");
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn the_pool_unit_adds_its_pages_and_takes_back_only_those() {
    let root = root_with_unit(DEMO);
    let work = tempfile::tempdir().unwrap();
    let plan = write_plan(
        work.path(),
        "p",
        "hugetune-plan 1\npool hugetlb-2m 8\npool hugetlb-1g 2\nheap-large hugetlb-1g\n",
    );
    let (code, out, err) = ht(
        work.path(),
        &[
            "service",
            "install",
            "demo",
            "--root",
            root.path().to_str().unwrap(),
            "--plan",
            plan.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let unit =
        std::fs::read_to_string(root.path().join(SYS).join("hugetune-pool-demo.service")).unwrap();
    let f2 = work.path().join("nr_2m");
    let f1 = work.path().join("nr_1g");
    let cmdline = work.path().join("cmdline");
    let swap = [
        (
            "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            f2.display().to_string(),
        ),
        (
            "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
            f1.display().to_string(),
        ),
        ("/proc/cmdline", cmdline.display().to_string()),
    ];
    let start = scripts(&unit, "ExecStart", &swap);
    let stop = scripts(&unit, "ExecStop", &swap);
    assert_eq!((start.len(), stop.len()), (2, 2), "{unit}");
    let rt = work.path().join("run");
    std::fs::create_dir(&rt).unwrap();
    let read = |f: &Path| std::fs::read_to_string(f).unwrap().trim().to_string();

    // Others hold 3 and 1 pages: the unit adds its own on top.
    std::fs::write(&f2, "3\n").unwrap();
    std::fs::write(&f1, "1\n").unwrap();
    std::fs::write(&cmdline, "root=/dev/vda1 quiet\n").unwrap();
    for s in &start {
        sh(s, &rt);
    }
    assert_eq!((read(&f2), read(&f1)), ("11".into(), "3".into()));
    // Somebody adds 5 more meanwhile; stopping takes back exactly 8 and 2.
    std::fs::write(&f2, "16\n").unwrap();
    for s in &stop {
        sh(s, &rt);
    }
    assert_eq!((read(&f2), read(&f1)), ("8".into(), "1".into()));
    // Stopped again (nothing noted): nothing changes.
    for s in &stop {
        sh(s, &rt);
    }
    assert_eq!((read(&f2), read(&f1)), ("8".into(), "1".into()));

    // 1 GB pages reserved on the kernel command line are not added again.
    std::fs::write(&cmdline, "quiet hugepagesz=1G hugepages=2\n").unwrap();
    let said = sh(&start[1], &rt);
    assert!(said.contains("kernel command line"), "{said}");
    assert_eq!(read(&f1), "1");
    for s in &stop {
        sh(s, &rt);
    }
    assert_eq!(read(&f1), "1");
}

/// Spawns `hugetune --db DB run --exec -- sh -c SCRIPT`; the child's pid and output.
fn run_exec(db: &Path, cache: &Path, script: &str) -> (u32, i32, String, String) {
    let child = Command::new(HUGETUNE)
        .args([
            "--db",
            db.to_str().unwrap(),
            "run",
            "--exec",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("HUGETUNE_RUNTIME_LIB", LIB)
        .env("HUGETUNE_QEMU_PLUGIN", PLUGIN)
        .env("XDG_CACHE_HOME", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    (
        pid,
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// What the program (sh) shows of itself: its PID; from a child, the signals it
/// passes on and its descriptors (read by each command about itself: sh's own
/// mask and pipes change while it forks); the runtime library's environment.
const SHOW: &str =
    "echo $$; grep -E '^Sig(Blk|Ign)' /proc/self/status; echo fds $(ls /proc/self/fd); \
                    echo \"preload=$LD_PRELOAD mode=$HUGETUNE_MODE summary=$HUGETUNE_SUMMARY\"; \
                    [ -n \"$HUGETUNE_PLAN\" ] && cat \"$HUGETUNE_PLAN\"; exit 7";

#[test]
fn run_exec_becomes_the_program() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("h.db");
    let cache = work.path().join("cache");
    // What sh sees when the test starts it itself: signals, descriptors.
    let direct = Command::new("sh").arg("-c").arg(SHOW).output().unwrap();
    let direct = String::from_utf8_lossy(&direct.stdout).into_owned();
    // The blocked signals, the standard signals ignored (1-31: glibc's own
    // real-time signals depend on what touched them), the descriptors.
    let lines = |s: &str| {
        s.lines()
            .skip(1)
            .take(3)
            .map(|l| match l.strip_prefix("SigIgn:") {
                Some(h) => format!(
                    "{:x}",
                    u64::from_str_radix(h.trim(), 16).unwrap() & 0x7fff_ffff
                ),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
    };

    // No profile: the program unchanged, in hugetune's place.
    let (pid, code, out, err) = run_exec(&db, &cache, SHOW);
    assert_eq!(code, 7, "the program's exit status: {out}{err}");
    assert_eq!(out.lines().next(), Some(pid.to_string().as_str()), "{out}");
    assert_eq!(
        lines(&out),
        lines(&direct),
        "signals or descriptors differ:\n{out}\nvs\n{direct}"
    );
    assert!(out.contains("preload= mode= summary="), "{out}");
    assert!(err.contains("no profile"), "{err}");

    // With a profile: the plan applied, the program still in hugetune's place;
    // nothing is recorded and no summary asked for.
    store_profile(
        &db,
        &["sh", "-c", SHOW],
        &[prediction(
            vec![(Category::HeapLarge, Backing::Hugetlb2m)],
            0.2,
            0,
            0,
        )],
    );
    let (pid, code, out, err) = run_exec(&db, &cache, SHOW);
    assert_eq!(code, 7, "{out}{err}");
    assert_eq!(out.lines().next(), Some(pid.to_string().as_str()), "{out}");
    assert_eq!(lines(&out), lines(&direct), "{out}");
    assert!(
        out.contains(&format!("preload={LIB} mode=apply summary=\n")),
        "{out}"
    );
    assert!(
        out.contains("hugetune-plan 1\n") && out.contains("heap-large hugetlb-2m"),
        "{out}"
    );
    assert!(err.contains("applying heap-large"), "{err}");
    let plans: Vec<_> = std::fs::read_dir(cache.join("hugetune/plans"))
        .unwrap()
        .collect();
    assert_eq!(plans.len(), 1, "one kept plan file");
    let runs: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 0, "--exec records no run");
    // The same plan again: the same file.
    run_exec(&db, &cache, SHOW);
    assert_eq!(
        std::fs::read_dir(cache.join("hugetune/plans"))
            .unwrap()
            .count(),
        1
    );

    let (code, out, _) = hugetune(&db, &["run", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--exec") && out.contains("not recorded"),
        "{out}"
    );
}

#[test]
fn a_library_the_target_system_has_is_named_in_place() {
    // As a package installs it: the same file at the same path on the target
    // system. Here the root holds the library at this build's path.
    let root = root_with_unit(DEMO);
    let r = root.path();
    let lib = std::fs::canonicalize(LIB).unwrap();
    let in_root = r.join(lib.strip_prefix("/").unwrap());
    std::fs::create_dir_all(in_root.parent().unwrap()).unwrap();
    std::fs::copy(&lib, &in_root).unwrap();
    let work = tempfile::tempdir().unwrap();
    let plan = write_plan(work.path(), "p", "hugetune-plan 1\nheap-large thp-2m\n");
    // Where a home, a cache or a temporary directory holds the build, the
    // library would be private to this user: they are elsewhere here.
    let o = Command::new(HUGETUNE)
        .args(["--db", work.path().join("h.db").to_str().unwrap()])
        .args(["service", "install", "demo", "--root", r.to_str().unwrap()])
        .args(["--plan", plan.to_str().unwrap()])
        .env("HUGETUNE_RUNTIME_LIB", LIB)
        .env("HOME", work.path())
        .env("XDG_CACHE_HOME", work.path())
        .env("TMPDIR", work.path())
        .output()
        .unwrap();
    let (code, out, err) = (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(code, 0, "{out}{err}");
    let d = std::fs::read_to_string(r.join(SYS).join("demo.service.d/hugetune.conf")).unwrap();
    assert!(
        d.contains(&format!("Environment=\"LD_PRELOAD={}\"", lib.display())),
        "{d}"
    );
    assert!(!r.join("usr/local/lib/hugetune").exists(), "copied: {out}");
}
