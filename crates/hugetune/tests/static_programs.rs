//! Programs the runtime library cannot enter (issue 19 item 2: static and Go
//! binaries): `elf::preload_can_enter` says so, the QEMU plugin's `alloc=`
//! record holds the guest's mmap, munmap, mremap, mprotect and brk system calls
//! (each with its marker in the reference stream), and `record` + `analyze` +
//! `plan` of a static C random walk and of a Go one put the misses in heap-large
//! and back it with thp-2m, applied from outside the process. Skipped (with a
//! message) where qemu-x86_64, a static libc or Go is missing.

mod common;
use common::{hugetune, qemu_or_skip, static_c};

use hugetune_capture::elf::{preload_barrier, preload_can_enter, PreloadBarrier};
use hugetune_capture::qemu::{ALLOC_MARKER_ADDR, MARKER_SPAN};
use hugetune_format::alloclog::{AllocLog, Kind, PF_W};
use hugetune_format::refstream::RefReader;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const PLUGIN: &str = env!("HUGETUNE_BUILT_QEMU_PLUGIN");

/// The Go toolchain, or `None` (said).
fn go_or_skip() -> Option<PathBuf> {
    let go = ["/usr/local/go/bin/go", "/usr/lib/go/bin/go", "/usr/bin/go"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if go.is_none() {
        eprintln!("SKIPPED: Go is not installed (scripts/setup.sh installs golang-go)");
    }
    go
}

/// `go build` of a one-file program; `cgo_external`: linked by gcc against
/// libc, so the binary has an interpreter (a dynamic Go program).
fn go_build(go: &Path, dir: &Path, name: &str, src: &str, cgo_external: bool) -> PathBuf {
    let pkg = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("main.go"), src).unwrap();
    std::fs::write(pkg.join("go.mod"), format!("module {name}\n\ngo 1.18\n")).unwrap();
    let exe = dir.join(name);
    // The build cache outlives the test: a cold standard library takes half a minute.
    let cache = std::env::temp_dir().join("hugetune-test-gocache");
    let mut c = Command::new(go);
    c.current_dir(&pkg)
        .env("GOCACHE", &cache)
        .env("GOPATH", cache.join("path"))
        .env("HOME", &cache)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("CGO_ENABLED", if cgo_external { "1" } else { "0" })
        .arg("build")
        .arg("-o")
        .arg(&exe);
    if cgo_external {
        c.arg("-ldflags=-linkmode=external");
    }
    let out = c.arg(".").output().expect("run go build");
    assert!(
        out.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

const WALK_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc, char **argv) {
    size_t mb = atol(argv[1]); long n = atol(argv[2]);
    size_t len = mb << 20, cnt = len / 8;
    uint64_t *a = malloc(len);
    for (size_t i = 0; i < cnt; i++) a[i] = i * 2654435761u;
    uint64_t x = 1, s = 0;
    for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += a[x % cnt]; }
    printf("%lu\n", (unsigned long)(s & 1));
    return 0;
}
"#;

const WALK_GO: &str = r#"package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	mb, _ := strconv.Atoi(os.Args[1])
	n, _ := strconv.Atoi(os.Args[2])
	cnt := (mb << 20) / 8
	a := make([]uint64, cnt)
	for i := range a {
		a[i] = uint64(i) * 2654435761
	}
	x, s := uint64(1), uint64(0)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		s += a[x%uint64(cnt)]
	}
	fmt.Println(s & 1)
}
"#;

/// Every system call the record knows, with the addresses printed to check.
const SYSCALLS_C: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
    char *b0 = sbrk(0);
    char *b1 = sbrk(3 << 20);
    memset(b1, 1, 3 << 20);
    char *m = mmap(NULL, 8 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 2, 8 << 20);
    char *r = mmap(NULL, 64 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *f = mmap(r, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    memset(f, 3, 4 << 20);
    mprotect(r + (32 << 20), 2 << 20, PROT_READ | PROT_WRITE);
    char *m2 = mremap(m, 8 << 20, 16 << 20, MREMAP_MAYMOVE);
    munmap(m2, 16 << 20);
    printf("%lx %lx %lx %lx %lx\n", (unsigned long)b0, (unsigned long)b1, (unsigned long)m,
           (unsigned long)r, (unsigned long)m2);
    return 0;
}
"#;

#[test]
fn preload_can_enter_tells_static_and_go_programs() {
    let d = tempfile::tempdir().unwrap();
    assert!(preload_can_enter(Path::new("/bin/true")).unwrap());
    if let Some(exe) = static_c(d.path(), "walk", WALK_C, &[]) {
        assert!(!preload_can_enter(&exe).unwrap());
        assert_eq!(preload_barrier(&exe).unwrap(), Some(PreloadBarrier::Static));
    }
    let Some(go) = go_or_skip() else { return };
    for external in [false, true] {
        let exe = go_build(
            &go,
            d.path(),
            &format!("gowalk{external}"),
            WALK_GO,
            external,
        );
        let has_interp = Command::new("readelf")
            .arg("-l")
            .arg(&exe)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("INTERP"))
            .unwrap_or(external);
        assert_eq!(has_interp, external, "{}", exe.display());
        assert_eq!(
            preload_barrier(&exe).unwrap(),
            Some(PreloadBarrier::Go),
            "{} (interpreter: {has_interp})",
            exe.display()
        );
    }
}

#[test]
fn the_plugin_records_a_static_programs_system_calls_in_stream_order() {
    let Some(qemu_bin) = qemu_or_skip() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = static_c(d.path(), "syscalls", SYSCALLS_C, &[]) else {
        return;
    };
    let (raw, log) = (d.path().join("refs.raw"), d.path().join("alloc.log"));
    let out = Command::new(&qemu_bin)
        .arg("-plugin")
        .arg(format!(
            "{PLUGIN},out={},sampling=complete,alloc={}",
            raw.display(),
            log.display()
        ))
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|w| u64::from_str_radix(w, 16).unwrap())
        .collect();
    let [b0, b1, m, r, m2] = printed[..] else {
        panic!("{printed:?}")
    };
    let l = AllocLog::read(&log).unwrap();
    assert!(l.header.syscalls);
    assert_eq!(
        (l.header.marker_base, l.header.marker_span),
        (ALLOC_MARKER_ADDR, MARKER_SPAN)
    );
    let find = |what: &str, f: &dyn Fn(&hugetune_format::alloclog::Record) -> bool| {
        l.records
            .iter()
            .find(|x| f(x))
            .unwrap_or_else(|| panic!("no {what} in {:#?}", l.records))
            .clone()
    };
    // brk: the query at start-up, the break sbrk(0) then reported (static
    // glibc's start-up moves it for its TLS), and the heap grown by 3 MiB.
    find("brk query", &|x| {
        x.kind == Kind::Brk && x.arg == 0 && x.addr != 0
    });
    find("brk at sbrk(0)", &|x| x.kind == Kind::Brk && x.addr == b0);
    find("brk", &|x| {
        x.kind == Kind::Brk && x.arg == b1 + (3 << 20) && x.addr == b1 + (3 << 20)
    });
    let map = find("mmap", &|x| x.kind == Kind::Mmap && x.addr == m);
    assert_eq!(map.size, 8 << 20);
    assert!(map.is_anon_rw_mapping() && map.is_backable_mapping());
    assert!(map.caller != 0, "the syscall instruction's address");
    let res = find("reservation", &|x| {
        x.kind == Kind::Mmap && x.addr == r && x.size == 64 << 20
    });
    assert!(!res.is_anon_rw_mapping());
    let fixed = find("MAP_FIXED", &|x| {
        x.kind == Kind::Mmap && x.addr == r && x.size == 4 << 20
    });
    assert!(fixed.is_anon_rw_mapping() && !fixed.is_backable_mapping());
    let prot = find("mprotect", &|x| {
        x.kind == Kind::RangeCall && x.addr == r + (32 << 20)
    });
    assert_eq!((prot.size, prot.arg, prot.arg2), (2 << 20, 3, 0));
    let rem = find("mremap", &|x| x.kind == Kind::Mremap && x.arg == m);
    assert_eq!((rem.addr, rem.size, rem.arg2), (m2, 16 << 20, 8 << 20));
    let unmap = find("munmap", &|x| x.kind == Kind::Munmap && x.addr == m2);
    assert_eq!((unmap.size, unmap.arg), (16 << 20, 0));
    // Program order: the seqs follow the calls.
    assert!(map.seq < res.seq && res.seq < fixed.seq && fixed.seq < prot.seq);
    assert!(prot.seq < rem.seq && rem.seq < unmap.seq);
    // The executable, not relocated (static, not PIE), with its .data/.bss.
    let module = l
        .modules
        .iter()
        .find(|x| Path::new(&x.path) == exe)
        .unwrap_or_else(|| panic!("no MODULE of {}: {:?}", exe.display(), l.modules));
    assert_eq!(module.bias, 0);
    assert!(module.segments.iter().any(|s| s.flags & PF_W != 0));
    // One marker per recorded call in the stream, in seq order.
    let mut rr = RefReader::new(std::fs::File::open(&raw).unwrap()).unwrap();
    let mut markers = Vec::new();
    while let Some(x) = rr.next_record().unwrap() {
        if x.addr.wrapping_sub(ALLOC_MARKER_ADDR) < MARKER_SPAN {
            markers.push(x.addr - ALLOC_MARKER_ADDR);
        }
    }
    let calls: Vec<u64> = l
        .records
        .iter()
        .filter(|x| x.has_marker(&l.header))
        .map(|x| x.seq % MARKER_SPAN)
        .collect();
    assert!(calls.len() >= 8, "{calls:?}");
    assert_eq!(markers, calls);
    assert!(rr.totals().is_some(), "the stream has its END");
}

#[test]
fn a_static_pie_programs_load_bias_is_where_qemu_put_it() {
    let Some(qemu_bin) = qemu_or_skip() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("g.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nchar big[1 << 20];\nint main(void) { big[0] = 1; printf(\"%lx\\n\", (unsigned long)big); return 0; }\n",
    )
    .unwrap();
    let exe = d.path().join("g");
    let built = Command::new("gcc")
        .args(["-O2", "-static-pie", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    let nm = Command::new("nm").arg(&exe).output();
    let (true, Ok(nm)) = (built, nm) else {
        eprintln!("SKIPPED: gcc -static-pie or nm is not available");
        return;
    };
    let vaddr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(" big"))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .expect("the symbol big");
    assert_eq!(preload_barrier(&exe).unwrap(), Some(PreloadBarrier::Static));
    let log = d.path().join("alloc.log");
    let out = Command::new(&qemu_bin)
        .arg("-plugin")
        .arg(format!(
            "{PLUGIN},out={},alloc={}",
            d.path().join("r.raw").display(),
            log.display()
        ))
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let runtime = u64::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 16).unwrap();
    let l = AllocLog::read(&log).unwrap();
    let m = l
        .modules
        .iter()
        .find(|m| Path::new(&m.path) == exe)
        .unwrap();
    assert_eq!(m.bias + vaddr, runtime, "bias {:#x}", m.bias);
}

/// `record` + `analyze` + `plan` of `argv`: the share of modelled 4 KB walks
/// in heap-large, the references per category, and the plan's JSON.
fn profile(db: &Path, dir: &Path, argv: &[&str]) -> (f64, Value, Value) {
    let bundle = dir.join("p.htprof");
    let mut args = vec![
        "record",
        "--refs",
        "qemu",
        "-o",
        bundle.to_str().unwrap(),
        "--",
    ];
    args.extend_from_slice(argv);
    let (code, _, err) = hugetune(db, &args);
    assert_eq!(code, 0, "record: {err}");
    assert!(err.contains("applied from outside the process"), "{err}");
    let (code, out, err) = hugetune(db, &["analyze", "--json", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "analyze: {err}");
    let an: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(an["program"]["outside"], true, "{}", an["program"]);
    let walks = an["significance"]["walks_by_category"]
        .as_array()
        .unwrap()
        .clone();
    let total: f64 = walks.iter().map(|w| w[1].as_f64().unwrap()).sum();
    let large: f64 = walks
        .iter()
        .filter(|w| w[0] == "heap-large")
        .map(|w| w[1].as_f64().unwrap())
        .sum();
    // The bar of a plan is a share of the native run time, which a loaded test
    // machine stretches (several seconds under parallel builds): a low one.
    let mut args = vec!["plan", "--json", "--min-gain", "0.001", "--"];
    args.extend_from_slice(argv);
    let (code, out, err) = hugetune(db, &args);
    assert_eq!(code, 0, "plan: {err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    (
        large / total.max(1.0),
        an["stream"]["refs_per_category"].clone(),
        plan,
    )
}

fn check_outside_plan(plan: &Value) {
    let text = plan["plan"].as_str().unwrap();
    assert!(
        text.contains("heap-large thp-2m\n"),
        "heap-large on THP: {text}\n{}",
        plan["decision"]["reasons"]
    );
    assert!(
        text.contains("# applied from outside the process"),
        "{text}"
    );
    for absent in ["hugetlb", "pool", "arena", "site ", "fork-safe", "mapped"] {
        assert!(
            !text.contains(absent),
            "{absent} in an outside plan: {text}"
        );
    }
    let reasons = plan["decision"]["reasons"].to_string();
    assert!(
        reasons.contains("applied from outside the process"),
        "{reasons}"
    );
}

#[test]
fn a_static_c_random_walk_is_profiled_and_planned_on_thp() {
    if qemu_or_skip().is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = static_c(d.path(), "walk", WALK_C, &[]) else {
        return;
    };
    let db = d.path().join("db.sqlite");
    // valgrind cannot record it: the error names qemu.
    let (code, _, err) = hugetune(
        &db,
        &[
            "record",
            "--refs",
            "valgrind",
            "-o",
            d.path().join("v.htprof").to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "1",
            "10",
        ],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("statically linked") && err.contains("--refs qemu"),
        "{err}"
    );
    let (large, refs, plan) = profile(&db, d.path(), &[exe.to_str().unwrap(), "64", "2000000"]);
    assert!(
        large > 0.9,
        "heap-large has {large} of the walks; refs {refs}"
    );
    check_outside_plan(&plan);
    // The same program already running, with other arguments: `run -p PID`
    // finds its stored plan (the program's newest profile) and applies it.
    let mut child = Command::new(&exe)
        .args(["128", "4000000000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    // Wait until the buffer is filled (the walk then runs for many seconds).
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(60) {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kb: u64 = st
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        if rss_kb >= 120 << 10 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, out, err) = hugetune(&db, &["run", "-p", &pid, "--min-gain", "0.001", "--json"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code, 0, "run -p: {err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert!(r["plan"]["profile"].as_i64().is_some(), "{r}");
    assert!(
        r["plan"]["mapping"]
            .as_str()
            .unwrap()
            .contains("heap-large"),
        "{r}"
    );
    assert!(
        r["attach"]["huge_bytes"].as_u64().unwrap() >= 96 << 20,
        "the stored plan made the running buffer huge: {r}"
    );
}

#[test]
fn a_go_random_walk_is_profiled_and_planned_on_thp() {
    if qemu_or_skip().is_none() {
        return;
    }
    let Some(go) = go_or_skip() else { return };
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("db.sqlite");
    for external in [false, true] {
        let exe = go_build(
            &go,
            d.path(),
            &format!("gowalk{external}"),
            WALK_GO,
            external,
        );
        let (large, refs, plan) = profile(&db, d.path(), &[exe.to_str().unwrap(), "64", "2000000"]);
        // The Go heap: arenas reserved PROT_NONE and mapped MAP_FIXED read-write.
        assert!(
            large > 0.9,
            "{}: heap-large has {large} of the walks; refs {refs}",
            exe.display()
        );
        check_outside_plan(&plan);
    }
}
