//! Fault-time advice for programs the runtime library cannot enter (issue 19,
//! item 2; docs/attach.md "At fault time"): `hugetune run --plan` of a static C
//! program and of a Go program starts them under the seccomp filter and the
//! tracer, whose injected MADV_HUGEPAGE makes their planned memory huge as it
//! is first touched, with nothing left for the collapse watcher to copy; a
//! traced program behaves exactly as untraced (threads, fork + exec, signal
//! handlers, stop and continue, exit status, death by a signal); and where the
//! tracer cannot start (the program is already traced) the run goes on with
//! the watcher alone and says why.
//!
//! Kernel state: none is changed. THP stays `madvise` (the machine's mode);
//! the tests check it is, since under `always` every page would be huge anyway
//! and the advice could not be told apart. Skipped (said) without a static
//! libc, without Go, without strace.

mod common;
use common::{is_root, need_program, static_c};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Maps MB MiB (mmap, private anonymous), writes it, prints its own
/// AnonHugePages in kB, exits 3.
const MAPPER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    if (argc != 2) return 1;
    size_t len = (size_t)atol(argv[1]) << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    memset(p, 1, len);
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char l[256];
    long kb = -1;
    while (f && fgets(l, sizeof l, f))
        if (!strncmp(l, "AnonHugePages:", 14)) kb = atol(l + 14);
    printf("%ld\n", kb);
    return 3;
}
"#;

/// Grows the brk heap in 64 KiB steps to MB MiB, writing each step as it
/// comes (as glibc's malloc grows its main arena by small sbrk calls), then
/// keeps reading it for SECS seconds (time for the watcher), prints a sum.
const BRK_GROWER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) return 1;
    size_t len = (size_t)atol(argv[1]) << 20, step = 64 << 10;
    char *base = sbrk(0);
    for (size_t off = 0; off < len; off += step) {
        if (sbrk(step) == (void *)-1) return 2;
        memset(base + off, 1, step);
    }
    time_t end = time(NULL) + atol(argv[2]);
    unsigned long sum = 0;
    while (time(NULL) < end)
        for (size_t i = 0; i < len; i += 4096) sum += base[i];
    printf("%d\n", sum > 0);
    return 0;
}
"#;

/// Threads that map and fill memory, a SIGALRM handler that must run, a
/// stop and a continue from its child, fork + exec of /bin/echo, exit 3; with
/// `term`, dies of SIGTERM after a line.
const BEHAVES: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
static volatile sig_atomic_t alarms;
static void on_alarm(int s) { (void)s; alarms++; }
static void *worker(void *arg) {
    size_t n = (size_t)arg << 20;
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 7, n);
    unsigned long s = 0;
    for (size_t i = 0; i < n; i += 4096) s += p[i];
    return (void *)s;
}
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "term")) {
        printf("before\n");
        fflush(stdout);
        raise(SIGTERM);
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    pthread_t t[4];
    unsigned long sum = 0;
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(8 + 4 * i));
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (unsigned long)r;
    }
    ualarm(10000, 10000);
    while (alarms < 5) {
        char *q = malloc(3 << 20);
        memset(q, 1, 3 << 20);
        free(q);
    }
    ualarm(0, 0);
    fflush(stdout);
    pid_t waker = fork();
    if (waker == 0) {
        usleep(100000);
        kill(getppid(), SIGCONT);
        _exit(0);
    }
    raise(SIGSTOP);
    int st;
    waitpid(waker, &st, 0);
    pid_t c = fork();
    if (c == 0) {
        execl("/bin/echo", "echo", "child", "says", "hi", (char *)0);
        _exit(127);
    }
    waitpid(c, &st, 0);
    printf("sum %lu alarms %d child %d\n", sum, alarms >= 5, WEXITSTATUS(st));
    return 3;
}
"#;

/// Goroutines that allocate, a signal it asked for, os/exec (vfork + exec),
/// exit 4: its output must be the same traced.
const GO_BEHAVES: &str = r#"package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	var wg sync.WaitGroup
	sums := make([]uint64, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := 0; r < 20; r++ {
				a := make([]uint64, 1<<20)
				for i := range a {
					a[i] = uint64(i * g)
				}
				sums[g] += a[len(a)-1]
			}
		}(g)
	}
	wg.Wait()
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case s := <-ch:
		fmt.Println("got", s)
	case <-time.After(10 * time.Second):
		fmt.Println("no signal")
	}
	out, err := exec.Command("/bin/echo", "from", "child").Output()
	fmt.Printf("%s %v %v\n", out, err, sums)
	os.Exit(4)
}
"#;

/// Makes a 256 MiB slice, writes it, prints its own AnonHugePages in kB.
const GO_FILL: &str = r#"package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	a := make([]uint64, (256<<20)/8)
	for i := range a {
		a[i] = uint64(i) * 2654435761
	}
	b, _ := os.ReadFile("/proc/self/smaps_rollup")
	kb := -1
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "AnonHugePages:") {
			kb, _ = strconv.Atoi(strings.Fields(l)[1])
		}
	}
	fmt.Println(kb, a[len(a)-1]&1)
}
"#;

/// The test programs compile clean with every warning on.
const CFLAGS: &[&str] = &["-Wall", "-Wextra", "-Werror", "-pthread"];

/// THP is `madvise` here (else the advice cannot be told from the mode).
fn thp_madvise() -> bool {
    let m = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .unwrap_or_default()
        .contains("[madvise]");
    if !m {
        eprintln!("SKIPPED: THP is not `madvise` on this machine");
    }
    m
}

fn plan(dir: &Path, text: &str) -> String {
    let p = dir.join("p.plan");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `hugetune run --plan PLAN --json -- ARGV`: exit code, the program's own
/// stdout (every line before the JSON), the JSON, stderr.
fn run(
    dir: &Path,
    plan: &str,
    argv: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, Value, String) {
    let db = dir.join("a.db");
    let db = db.to_str().unwrap();
    let mut args = vec!["--db", db, "run", "--plan", plan, "--json", "--"];
    args.extend_from_slice(argv);
    let mut c = Command::new(common::HUGETUNE);
    c.args(&args)
        .env("HUGETUNE_RUNTIME_LIB", common::LIB)
        .env("HUGETUNE_QEMU_PLUGIN", common::PLUGIN);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let (prog, json) = out
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", out.trim_end()));
    let j: Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {out}{err}"));
    (o.status.code().unwrap_or(-1), format!("{prog}\n"), j, err)
}

fn kb(line: &str) -> u64 {
    line.split_whitespace()
        .next()
        .unwrap()
        .parse::<i64>()
        .unwrap()
        .max(0) as u64
}

#[test]
fn a_static_programs_mmap_is_huge_at_fault_time_without_a_collapse() {
    if !thp_madvise() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = static_c(d.path(), "mapper", MAPPER, CFLAGS) else {
        return;
    };
    let exe_s = exe.to_str().unwrap();
    // Natively (THP `madvise`, no advice): small pages.
    let native = Command::new(&exe).arg("64").output().unwrap();
    assert_eq!(native.status.code(), Some(3));
    let native_kb = kb(&String::from_utf8_lossy(&native.stdout));
    assert!(native_kb < 8 << 10, "{native_kb} kB huge natively");

    let p = plan(d.path(), "hugetune-plan 1\nheap-large thp-2m\n");
    let (code, out, j, err) = run(d.path(), &p, &[exe_s, "64"], &[]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(j["exit_code"], 3);
    let a = &j["attach"][0];
    let t = &a["trace"];
    assert_eq!(t["ran"], true, "{j}\n{err}");
    assert_eq!(t["advised"]["heap-large"]["calls"], 1, "{j}");
    assert_eq!(t["advised"]["heap-large"]["bytes"], 64 << 20, "{j}");
    assert!(t.get("failures").is_none(), "{j}");
    assert!(err.contains("at fault time: MADV_HUGEPAGE given"), "{err}");
    // The program saw its memory huge, as it wrote it: most of the 64 MiB
    // (the kernel may lack a free 2 MiB page for a few faults on a busy host).
    let traced_kb = kb(&out);
    assert!(
        traced_kb >= 48 << 10,
        "{traced_kb} kB huge under the tracer: {err}"
    );
    // Nothing was left for the watcher to copy (it sees huge pieces as such
    // through pagemap's frame numbers, shown to root only).
    if is_root() {
        let collapsed = a["collapsed_bytes"].as_u64().unwrap();
        assert!(collapsed <= 4 << 20, "{collapsed} bytes collapsed: {j}");
    }

    // Without the tracer (turned off) the same run leaves it to the watcher,
    // and the report says why.
    let (code, out, j, _) = run(
        d.path(),
        &p,
        &[exe_s, "64"],
        &[("HUGETUNE_ATTACH_TRACE", "0")],
    );
    assert_eq!(code, 3);
    let t = &j["attach"][0]["trace"];
    assert_eq!(t["ran"], false, "{j}");
    assert!(t["why_not"].as_str().unwrap().contains("turned off"), "{j}");
    // What the program saw huge came from the watcher's collapse calls (which
    // may catch its memory while it still runs; a call refused with EAGAIN
    // part way may still have collapsed some pieces), not from its faults.
    let calls = j["attach"][0]["collapse_calls"].as_u64().unwrap_or(0);
    assert!(
        kb(&out) < 8 << 10 || calls > 0,
        "huge at fault time without the tracer: {} kB seen, no collapse call\n{j}",
        kb(&out)
    );
    // And the report counts it, pieces of calls refused part way included
    // (pagemap's frame numbers, shown to root only).
    if is_root() {
        let collapsed = j["attach"][0]["collapsed_bytes"].as_u64().unwrap_or(0);
        assert!(
            kb(&out) <= (collapsed >> 10) + (8 << 10),
            "{} kB seen huge, {collapsed} bytes collapsed on record\n{j}",
            kb(&out)
        );
    }
}

/// A brk heap grown in steps far below 2 MiB is advised at each step, but its
/// faults come before a whole 2 MiB range is mapped, so they take 4 KB pages:
/// the watcher must still collapse it (it leaves alone only advised mappings
/// that are mostly huge already).
#[test]
fn a_brk_heap_grown_in_small_steps_is_advised_and_collapsed() {
    if !thp_madvise() || !is_root() {
        eprintln!("SKIPPED: needs root (pagemap) and THP `madvise`");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = static_c(d.path(), "brk", BRK_GROWER, CFLAGS) else {
        return;
    };
    let p = plan(d.path(), "hugetune-plan 1\nheap-small thp-2m\n");
    let (code, out, j, err) = run(d.path(), &p, &[exe.to_str().unwrap(), "64", "3"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "1");
    let a = &j["attach"][0];
    assert_eq!(a["trace"]["ran"], true, "{j}");
    assert!(
        a["trace"]["advised"]["heap-small"]["calls"]
            .as_u64()
            .unwrap()
            >= 100,
        "each brk step advised: {j}"
    );
    let collapsed = a["collapsed_bytes"].as_u64().unwrap();
    assert!(
        collapsed >= 32 << 20,
        "the heap's 4 KB pages collapsed: {collapsed} bytes\n{j}\n{err}"
    );
}

#[test]
fn a_traced_program_behaves_exactly_as_untraced() {
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = static_c(d.path(), "behaves", BEHAVES, CFLAGS) else {
        return;
    };
    let exe_s = exe.to_str().unwrap();
    let p = plan(
        d.path(),
        "hugetune-plan 1\nheap-large thp-2m\nheap-small thp-2m\n",
    );
    for args in [vec![], vec!["term"]] {
        let native = Command::new(&exe).args(&args).output().unwrap();
        let mut argv = vec![exe_s];
        argv.extend(args.iter().copied());
        let (code, out, j, err) = run(d.path(), &p, &argv, &[]);
        assert_eq!(
            out,
            String::from_utf8_lossy(&native.stdout),
            "{args:?}: the output changed: {err}"
        );
        let t = &j["attach"][0]["trace"];
        assert_eq!(t["ran"], true, "{j}\n{err}");
        if args.is_empty() {
            assert_eq!(native.status.code(), Some(3));
            assert_eq!(code, 3, "{err}");
            assert!(out.contains("alarms 1 child 0"), "{out}");
            // Its threads and its children were followed, and its mmaps of
            // 8 MiB and more advised.
            assert!(t["threads"].as_u64().unwrap() >= 5, "{j}");
            assert!(t["processes"].as_u64().unwrap() >= 3, "{j}");
            assert!(
                t["advised"]["heap-large"]["calls"].as_u64().unwrap() >= 4,
                "{j}"
            );
        } else {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(native.status.signal(), Some(libc::SIGTERM));
            assert_eq!(code, 128 + libc::SIGTERM, "{err}");
            assert_eq!(j["exit_code"], 128 + libc::SIGTERM);
        }
    }
}

#[test]
fn a_go_programs_heap_is_huge_at_fault_time_and_it_behaves_as_untraced() {
    if !thp_madvise() {
        return;
    }
    let go = ["/usr/local/go/bin/go", "/usr/lib/go/bin/go", "/usr/bin/go"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    let Some(go) = go else {
        eprintln!("SKIPPED: Go is not installed");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let exe = go_build(&go, d.path(), "gofill", GO_FILL);
    let native = Command::new(&exe).output().unwrap();
    assert!(native.status.success());
    let native_kb = kb(&String::from_utf8_lossy(&native.stdout));
    assert!(native_kb < 32 << 10, "{native_kb} kB huge natively");
    let p = plan(d.path(), "hugetune-plan 1\nheap-large thp-2m\n");
    let (code, out, j, err) = run(d.path(), &p, &[exe.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let t = &j["attach"][0]["trace"];
    assert_eq!(t["ran"], true, "{j}\n{err}");
    // The Go heap: arenas reserved PROT_NONE, then mapped read-write with
    // MAP_FIXED, each advised as it is mapped.
    assert!(
        t["advised"]["heap-large"]["bytes"].as_u64().unwrap() >= 256 << 20,
        "{j}"
    );
    assert!(t["threads"].as_u64().unwrap() >= 2, "Go's threads: {j}");
    let traced_kb = kb(&out);
    assert!(
        traced_kb >= 128 << 10,
        "{traced_kb} kB huge when the Go program looked: {err}"
    );

    // Goroutines, its own signal, os/exec: the same output and exit status.
    let exe = go_build(&go, d.path(), "gobehaves", GO_BEHAVES);
    let native = Command::new(&exe).output().unwrap();
    assert_eq!(native.status.code(), Some(4));
    let p = plan(
        d.path(),
        "hugetune-plan 1\nheap-large thp-2m\nheap-small thp-2m\n",
    );
    let (code, out, j, err) = run(d.path(), &p, &[exe.to_str().unwrap()], &[]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(out, String::from_utf8_lossy(&native.stdout), "{err}");
    assert!(
        out.starts_with("got user defined signal 1\nfrom child\n"),
        "{out}"
    );
    let t = &j["attach"][0]["trace"];
    assert_eq!(t["ran"], true, "{j}");
    assert!(t["processes"].as_u64().unwrap() >= 2, "the echo child: {j}");
}

/// `go build` of a one-file program (no cgo).
fn go_build(go: &Path, dir: &Path, name: &str, src: &str) -> PathBuf {
    let pkg = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("main.go"), src).unwrap();
    std::fs::write(pkg.join("go.mod"), format!("module {name}\n\ngo 1.18\n")).unwrap();
    let exe = dir.join(name);
    // The build cache outlives the test (tests/static_programs.rs uses it too).
    let cache = std::env::temp_dir().join("hugetune-test-gocache");
    let o = Command::new(go)
        .current_dir(&pkg)
        .env("GOCACHE", &cache)
        .env("GOPATH", cache.join("path"))
        .env("HOME", &cache)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

#[test]
fn an_already_traced_program_runs_with_the_watcher_alone_and_says_why() {
    let Some(strace) = need_program("strace") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let Some(exe) = static_c(d.path(), "mapper", MAPPER, CFLAGS) else {
        return;
    };
    let p = plan(d.path(), "hugetune-plan 1\nheap-large thp-2m\n");
    // strace -f attaches to hugetune's child the moment it is forked, so the
    // tracer's PTRACE_SEIZE is refused.
    let db = d.path().join("a.db");
    let o = Command::new(strace)
        .args(["-f", "-qq", "-e", "trace=none", "-o", "/dev/null"])
        .arg(common::HUGETUNE)
        .arg("--db")
        .arg(&db)
        .args(["run", "--plan", &p, "--json", "--"])
        .arg(&exe)
        .arg("16")
        .env("HUGETUNE_RUNTIME_LIB", common::LIB)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{out}{err}");
    let j: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let a = &j["attach"][0];
    assert_eq!(a["trace"]["ran"], false, "{j}");
    let why = a["trace"]["why_not"].as_str().unwrap();
    assert!(why.contains("PTRACE_SEIZE refused"), "{why}");
    assert!(err.contains("not traced (PTRACE_SEIZE refused"), "{err}");
    // The watcher still watched it to its end.
    assert_eq!(a["ended"], "exited", "{j}");
    assert!(out.lines().next().unwrap().parse::<i64>().is_ok(), "{out}");
}
