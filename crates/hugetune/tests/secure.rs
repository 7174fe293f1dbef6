//! The runtime library in a hardened deployment (issue 22, item 2): preloaded
//! machine-wide through /etc/ld.so.preload — in a throw-away mount namespace
//! with an overlay on /etc, never the machine's real file — a setuid program
//! run by an unprivileged user stays inert whatever its `HUGETUNE_*` variables
//! say; and no file the library writes (allocation log, summary) is written
//! through a symlink planted at its name or next to it.

mod common;

use common::{is_root, LIB, WORK};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn planted_symlinks_are_never_written_through() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let log = d.path().join("alloc.log");
    let summary = d.path().join("summary.json");
    // At the names, and at the temporary name the library used to write.
    for p in [&log, &summary, &d.path().join("summary.json.tmp")] {
        std::os::unix::fs::symlink(&victim, p).unwrap();
    }
    let o = Command::new(WORK)
        .args(["chase", "--size", "8M", "--iters", "1"])
        .env("LD_PRELOAD", LIB)
        .env("HUGETUNE_MODE", "record")
        .env("HUGETUNE_LOG", &log)
        .env("HUGETUNE_SUMMARY", &summary)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for p in [&log, &summary] {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert!(m.is_file(), "{} replaced by a regular file", p.display());
        assert_eq!(m.mode() & 0o777, 0o600, "{}", p.display());
    }
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(s["mode"], "record", "{s}");
    hugetune_format::alloclog::AllocLog::read(&log).unwrap();
    // Nothing else was left next to them (temporary files are renamed away).
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
}

#[test]
fn a_setuid_program_stays_inert_under_a_machine_wide_preload() {
    if !is_root() {
        eprintln!("SKIPPED: needs root (a setuid binary, a mount namespace)");
        return;
    }
    for tool in ["unshare", "setpriv", "mount"] {
        if common::need_program(tool).is_none() {
            return;
        }
    }
    let d = tempfile::tempdir().unwrap();
    chmod(d.path(), 0o755);
    let lib = d.path().join("libhugetune.so");
    std::fs::copy(LIB, &lib).unwrap();
    chmod(&lib, 0o755);
    // One program twice: a setuid-root copy and a plain one.
    let sort = common::need_program("sort").expect("coreutils");
    let suid = d.path().join("sort-suid");
    let plain = d.path().join("sort-plain");
    std::fs::copy(&sort, &suid).unwrap();
    std::fs::copy(&sort, &plain).unwrap();
    chmod(&suid, 0o4755);
    chmod(&plain, 0o755);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    chmod(&out, 0o777);
    let input = d.path().join("input");
    std::fs::write(&input, "3\n1\n2\n").unwrap();
    chmod(&input, 0o644);
    // The overlay's writable layer and its work directory.
    let (upper, work) = (d.path().join("upper"), d.path().join("work"));
    std::fs::create_dir(&upper).unwrap();
    std::fs::create_dir(&work).unwrap();
    let script = format!(
        "set -e
mount --make-rprivate /
mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc
echo {lib} > /etc/ld.so.preload
for p in suid plain; do
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env HUGETUNE_MODE=record HUGETUNE_SUMMARY={out}/summary-$p.json HUGETUNE_LOG={out}/log-$p \
    {dir}/sort-$p -n {input} > {out}/sorted-$p
done",
        upper = upper.display(),
        work = work.display(),
        lib = lib.display(),
        out = out.display(),
        dir = d.path().display(),
        input = input.display(),
    );
    let o = Command::new("unshare")
        .args(["--mount", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && err.contains("overlay") {
        eprintln!("SKIPPED: no overlay mount here: {err}");
        return;
    }
    assert!(o.status.success(), "{err}");
    assert!(
        !Path::new("/etc/ld.so.preload").exists()
            || !std::fs::read_to_string("/etc/ld.so.preload")
                .unwrap()
                .contains(&lib.display().to_string()),
        "the machine's /etc was never touched"
    );
    for p in ["suid", "plain"] {
        assert_eq!(
            std::fs::read_to_string(out.join(format!("sorted-{p}"))).unwrap(),
            "1\n2\n3\n",
            "{p} ran correctly"
        );
    }
    // The plain copy shows the preload is in force in the namespace ...
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary-plain.json")).unwrap()).unwrap();
    assert_eq!(s["mode"], "record", "{s}");
    assert!(out.join("log-plain").exists());
    // ... and the setuid one (AT_SECURE) ignored every HUGETUNE_* variable.
    assert!(!out.join("summary-suid.json").exists());
    assert!(!out.join("log-suid").exists());
}
