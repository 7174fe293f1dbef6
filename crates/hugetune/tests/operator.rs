//! What an operator meets first (issue 21): hugetune in a pipeline that closes
//! early, `--db` pointing somewhere wrong, `db rm` and the bundles hugetune keeps.

mod common;
use common::{hugetune, HUGETUNE};

use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};

/// Runs hugetune with stdout on a pipe whose reading end is already closed
/// (`hugetune … | head -c 0`): its exit status and stderr.
fn into_closed_pipe(db: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is ours and used nowhere else.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is a fresh descriptor owned by nothing else.
    let w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
    let o = Command::new(HUGETUNE)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_closed_pipe_ends_hugetune_quietly() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    // A database with something to export.
    let (code, _, e) = hugetune(&db, &["db", "import", "/dev/null"]);
    assert_eq!(code, 1, "{e}");
    for args in [
        &["machine"][..],
        &["db", "ls"],
        &["--help"],
        &["fragsim", "--json"],
    ] {
        let (code, stderr) = into_closed_pipe(&db, args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert!(
            matches!(code, Some(0) | Some(141)),
            "{args:?}: exit {code:?}: {stderr}"
        );
    }
}

#[test]
fn a_wrong_db_is_refused_with_its_path() {
    let d = tempfile::tempdir().unwrap();
    // A directory that does not exist is not created.
    let missing = d.path().join("no/such/dir/x.db");
    let (code, _, e) = hugetune(&missing, &["plan", "--", "/bin/true"]);
    assert_eq!(code, 1);
    assert!(
        e.contains("does not exist") && e.contains("no/such/dir"),
        "{e}"
    );
    assert!(!d.path().join("no").exists());
    // Listing a database that does not exist creates nothing.
    let (code, out, _) = hugetune(&missing, &["db", "ls"]);
    assert_eq!(code, 0);
    assert!(out.contains("no database yet"), "{out}");
    let (code, _, e) = hugetune(&d.path().join("nothing.db"), &["db", "export"]);
    assert_eq!(code, 1);
    assert!(e.contains("no database at"), "{e}");
    assert!(!d.path().join("nothing.db").exists());
    // Not SQLite: the error names the file.
    let bad = d.path().join("bad.db");
    std::fs::write(&bad, "this is not a database, it is a text file with enough bytes in it to be read as a header by SQLite ......").unwrap();
    let (code, _, e) = hugetune(&bad, &["db", "ls"]);
    assert_eq!(code, 1);
    assert!(
        e.contains(&*bad.to_string_lossy()) && e.contains("not a hugetune database"),
        "{e}"
    );
    // Another program's SQLite database is refused, and left unchanged.
    let other = d.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&other).unwrap();
        c.execute_batch("CREATE TABLE users (id INTEGER); INSERT INTO users VALUES (1);")
            .unwrap();
    }
    let before = std::fs::read(&other).unwrap();
    let (code, _, e) = hugetune(&other, &["db", "ls"]);
    assert_eq!(code, 1);
    assert!(e.contains("not hugetune's") && e.contains("users"), "{e}");
    assert_eq!(std::fs::read(&other).unwrap(), before, "untouched");
}

#[test]
fn removing_a_profile_removes_the_bundle_hugetune_kept_for_it() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let own = data.join("hugetune/profiles");
    std::fs::create_dir_all(&own).unwrap();
    let kept = own.join("app-1.htb");
    let users = d.path().join("mine.htb");
    std::fs::write(&kept, "x").unwrap();
    std::fs::write(&users, "y").unwrap();
    let db = d.path().join("h.db");
    {
        let mut s = hugetune_store::db::Db::open(&db).unwrap();
        let p = s.upsert_program("/bin/app", None).unwrap();
        for b in [&kept, &users] {
            s.insert_profile(
                p,
                None,
                &["app".into()],
                Some(b),
                &serde_json::json!({}),
                &[],
            )
            .unwrap();
        }
    }
    let rm = |id: &str| {
        let o = Command::new(HUGETUNE)
            .args(["--db", db.to_str().unwrap(), "db", "rm", "profile", id])
            .env("XDG_DATA_HOME", &data)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, e) = rm("1");
    assert_eq!(code, Some(0), "{e}");
    assert!(!kept.exists(), "{e}");
    let (code, e) = rm("2");
    assert_eq!(code, Some(0), "{e}");
    assert!(users.exists(), "the user's own bundle stays: {e}");
    assert!(e.contains("kept its bundle"), "{e}");
}

#[test]
fn options_mean_one_thing_and_a_missing_tlb_file_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    // A global --tlb naming no file is refused, whatever the command.
    let (code, _, e) = hugetune(&db, &["--tlb", "/no/such/tlb.json", "machine"]);
    assert_eq!(code, 2, "{e}");
    assert!(
        e.contains("/no/such/tlb.json") && e.contains("no such file"),
        "{e}"
    );
    // Page sizes are --page-size, walk sizes --walk-size, durations of event
    // counting --extfrag-for, output directories --out-dir: each in the help.
    let help = |args: &[&str]| hugetune(&db, &[args, &["--help"]].concat()).1;
    assert!(help(&["size"]).contains("--page-size"));
    assert!(help(&["frag"]).contains("--page-size") && help(&["frag"]).contains("--extfrag-for"));
    assert!(help(&["demo"]).contains("--walk-size"));
    assert!(help(&["bench", "characterize"]).contains("--out-dir"));
    assert!(help(&["calibrate"]).contains("-o, --output"));
    for h in [help(&["size"]), help(&["frag"]), help(&["demo"])] {
        assert!(!h.contains("--size "), "{h}");
    }
    assert!(!help(&["frag"]).contains("--events"));
    // --json is a flag everywhere.
    assert!(
        help(&["fragsim"]).contains("--json "),
        "{}",
        help(&["fragsim"])
    );
    assert!(!help(&["fragsim"]).contains("--json <"));
    // The old spellings still work (hidden aliases).
    let (code, _, e) = hugetune(&db, &["frag", "--try", "1", "--size", "3M"]);
    assert_ne!(code, 0);
    assert!(e.contains("2M or 1G"), "{e}");
}

#[test]
fn a_crashing_program_is_reported_in_its_own_terms() {
    if Command::new("qemu-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: qemu-x86_64 is not installed");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("crash.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\nint main(void) { volatile char *p = malloc(100); \
         fprintf(stderr, \"about to crash\\n\"); p = 0; *p = 1; return 0; }\n",
    )
    .unwrap();
    let exe = d.path().join("crash");
    assert!(Command::new("gcc")
        .args(["-O0", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let out = d.path().join("c.htb");
    let (code, _, e) = hugetune(
        &d.path().join("h.db"),
        &[
            "record",
            "--refs",
            "qemu",
            "-o",
            out.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{e}");
    assert!(e.contains("died of signal 11 (SIGSEGV) under qemu"), "{e}");
    assert!(e.contains("its stderr ended with:\nabout to crash"), "{e}");
    assert!(!e.contains("refs.raw") && !e.contains("qemu said"), "{e}");
    assert!(!out.exists());
}

#[test]
fn hugetune_run_passes_signals_to_the_program_and_ends_as_it_does() {
    use std::io::{BufRead, BufReader};
    let d = tempfile::tempdir().unwrap();
    for (sig, name) in [
        (libc::SIGHUP, "HUP"),
        (libc::SIGTERM, "TERM"),
        (libc::SIGUSR1, "USR1"),
    ] {
        let script = format!(
            "trap 'echo got-{name}; exit 7' {name}; echo ready; while :; do sleep 0.05; done"
        );
        let mut child = common::signalable()
            .args([
                "--db",
                d.path().join("h.db").to_str().unwrap(),
                "run",
                "--",
                "sh",
                "-c",
            ])
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        // SAFETY: kill has no memory effects; the pid is our child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert!(rest.contains(&format!("got-{name}")), "{name}: {rest}");
        assert_eq!(
            status.code(),
            Some(7),
            "{name}: the program's own exit status"
        );
    }
}

#[test]
fn status_shows_what_backs_each_mapping() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    // A process with THP memory: the runtime library's heap-large on thp-2m,
    // held while we look (python waits on its stdin).
    let plan = d.path().join("plan");
    std::fs::write(&plan, "hugetune-plan 1\nheap-large thp-2m\n").unwrap();
    // It keeps making a large allocation now and then: the library answers a
    // summary request on its next call that reaches it.
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, select; b = bytearray(64 << 20); b[::4096] = b'x' * (len(b) // 4096); \
             print('ready', flush=True)\n\
while not select.select([sys.stdin], [], [], 0.05)[0]: x = bytearray(256 << 10)",
        ])
        .env("LD_PRELOAD", common::LIB)
        .env("HUGETUNE_MODE", "apply")
        .env("HUGETUNE_PLAN", &plan)
        .env("HUGETUNE_SUMMARY", d.path().join("s.%p.json"))
        .env("HUGETUNE_SUMMARY_REQUEST", d.path().join("request"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = child.id().to_string();
    let (code, out, e) = hugetune(&db, &["status", "-p", &pid, "--json"]);
    let (tcode, text, _) = hugetune(&db, &["status", "-p", &pid]);
    let (acode, all, _) = hugetune(&db, &["status"]);
    drop(child.stdin.take());
    child.wait().unwrap();
    assert_eq!(code, 0, "{e}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &s["processes"][0];
    assert_eq!(p["pid"].to_string(), pid);
    assert_eq!(p["hugetune_loaded"], true, "{p}");
    let maps = p["mappings"].as_array().unwrap();
    // The 64 MiB buffer is one of the library's owned blocks, asked for with
    // MADV_HUGEPAGE; where THP is on, smaps shows huge pages in it.
    let big = maps
        .iter()
        .find(|m| m["size"].as_u64().unwrap() >= 64 << 20 && m["advice"] == "MADV_HUGEPAGE")
        .unwrap_or_else(|| panic!("no 64 MiB MADV_HUGEPAGE mapping: {p}"));
    if std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|t| !t.contains("[never]"))
    {
        assert!(big["thp_2m"].as_u64().unwrap() > 0, "{big}");
    }
    // What the library applied there, from the summary it wrote on request.
    assert_eq!(
        p["library_summary"], "a summary it wrote on request just now",
        "{p}"
    );
    assert!(
        big["applied"].as_array().is_some_and(|a| a.iter().any(|x| x
            .as_str()
            .unwrap()
            .starts_with("heap-large thp-2m 64.0 MiB"))),
        "{big}"
    );
    assert!(text.contains("hugetune applied"), "{text}");
    assert!(s["pools"].as_array().is_some_and(|p| !p.is_empty()));
    assert_eq!(tcode, 0);
    assert!(
        text.contains("hugetune's runtime library is loaded") && text.contains("THP 2M"),
        "{text}"
    );
    assert_eq!(acode, 0);
    assert!(all.starts_with("THP: "), "{all}");
    let (code, _, e) = hugetune(&db, &["status", "-p", "4294967295"]);
    assert_eq!(code, 1);
    assert!(e.contains("no such process"), "{e}");
}

/// The demo's set-up installs only what the demo needs (the C toolchain and
/// its reference source); the test suite's the rest (issue 21, item 7: it
/// used to install Redis, clang, AFL++ and Chromium to run one demo).
#[test]
fn the_demo_installs_only_what_it_needs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let list = |args: &[&str]| -> Vec<String> {
        let o = std::process::Command::new(root.join("scripts/setup.sh"))
            .args(args)
            .output()
            .expect("scripts/setup.sh runs");
        assert!(o.status.success(), "setup.sh {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let demo = list(&["--demo", "--list"]);
    let all = list(&["--list"]);
    assert_eq!(demo, ["gcc", "make", "libc6-dev", "qemu-user"]);
    for p in &demo {
        assert!(all.contains(p), "the suite's set-up lacks {p}");
    }
    for heavy in ["chromium-headless-shell", "redis-server", "clang", "afl++"] {
        assert!(all.iter().any(|p| p == heavy) && !demo.iter().any(|p| p == heavy));
    }
    let demo_sh = std::fs::read_to_string(root.join("scripts/demo.sh")).unwrap();
    assert!(
        demo_sh
            .lines()
            .any(|l| l.trim() == "scripts/setup.sh --demo"),
        "scripts/demo.sh must set up with --demo"
    );
    let bad = std::process::Command::new(root.join("scripts/setup.sh"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown option --bogus"));
}

/// Long steps draw progress bars on a terminal (a pty from script(1) here),
/// nothing anywhere else (pipes, logs), and not with HUGETUNE_PROGRESS=0
/// (issue 21, item 5).
#[test]
fn progress_bars_on_a_terminal_only() {
    if common::need_program("qemu-x86_64").is_none() || common::need_program("script").is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("db.sqlite");
    let bundle = d.path().join("p.htb");
    let work = env!("HUGETUNE_BUILT_WORK");
    let rec = |b: &std::path::Path| -> Vec<String> {
        [
            HUGETUNE,
            "--db",
            db.to_str().unwrap(),
            "record",
            "--refs",
            "qemu",
            "-o",
            b.to_str().unwrap(),
            "--",
            work,
            "randmem",
            "--size",
            "4M",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let analyze = [HUGETUNE, "--db", db.to_str().unwrap(), "analyze"]
        .iter()
        .map(|s| s.to_string())
        .chain([bundle.to_str().unwrap().to_string()])
        .collect::<Vec<_>>();
    // On a pty: script -qec CMD /dev/null (stdout and stderr both on it).
    let on_tty = |argv: &[String], progress: Option<&str>| -> String {
        let line = argv
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        let mut c = Command::new("script");
        c.args(["-qec", &line, "/dev/null"]).stdin(Stdio::null());
        if let Some(v) = progress {
            c.env("HUGETUNE_PROGRESS", v);
        }
        let o = c.output().expect("script(1) runs");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{line}:\n{text}");
        text
    };
    let tty = on_tty(&rec(&bundle), None);
    assert!(
        tty.contains("recording"),
        "no spinner while recording:\n{tty}"
    );
    let tty = on_tty(&analyze, None);
    assert!(
        tty.contains("analyzing [") && (tty.contains("M refs") || tty.contains("K refs")),
        "no bar while analyzing:\n{tty}"
    );
    let off = on_tty(&analyze, Some("0"));
    assert!(!off.contains("analyzing ["), "HUGETUNE_PROGRESS=0:\n{off}");
    // Not a terminal: only the hugetune: lines, no bar, no carriage return.
    let piped = |argv: &[String]| -> String {
        let o = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    for err in [piped(&rec(&d.path().join("q.htb"))), piped(&analyze)] {
        assert!(
            !err.contains('\r') && !err.contains("analyzing [") && !err.contains("recording"),
            "progress drawn on a pipe:\n{err}"
        );
        assert!(
            err.lines()
                .all(|l| l.starts_with("hugetune") || l.starts_with("  ")),
            "{err}"
        );
    }
}

/// A signal ignored when hugetune starts (nohup, a script's background job)
/// stays ignored: for hugetune, for the program `run` starts and for the one
/// `run --exec` becomes (the suite, run under nohup, saw SIGHUP, SIGINT and
/// SIGQUIT reset in the exec'd program).
#[test]
fn signals_ignored_at_start_stay_ignored() {
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    for exec in [true, false] {
        let mut args = vec!["--db", db.to_str().unwrap(), "run"];
        if exec {
            args.push("--exec");
        }
        args.extend(["--", "sh", "-c", "grep SigIgn /proc/$$/status"]);
        let mut c = Command::new(HUGETUNE);
        c.args(&args).env("XDG_CACHE_HOME", d.path().join("cache"));
        // SAFETY: signal() is async-signal-safe; nothing else runs in the child.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            });
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let mask = out
            .trim()
            .strip_prefix("SigIgn:")
            .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
            .unwrap_or_else(|| panic!("exec {exec}: {out} {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!(
            mask & 1,
            1,
            "exec {exec}: SIGHUP no longer ignored: {mask:x}"
        );
    }
}
