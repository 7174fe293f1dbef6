//! The runtime library, driven from the outside: its record log read with the
//! tool's own reader, apply mode checked in /proc by the test programs, pools set
//! under the shared kernel-state lock and always restored.

use hugetune_capture::alloclog::{AllocLog, Kind, FLAG_PREINIT};
use hugetune_capture::kernel_state::set_hugetlb_pool;
use hugetune_capture::profile::inputs_from_log;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = env!("HUGETUNE_BUILT_RUNTIME");
const TESTS: &str = env!("HUGETUNE_BUILT_RUNTIME_TESTS");

fn prog(name: &str) -> PathBuf {
    Path::new(TESTS).join(name)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

struct Out {
    code: i32,
    json: Value,
    stderr: String,
}

fn run(program: &Path, args: &[&str], env: &[(&str, String)]) -> Out {
    let o = Command::new(program)
        .args(args)
        .env("LD_PRELOAD", LIB)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run test program");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    Out {
        code: o.status.code().unwrap_or(-1),
        json: serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn hex(v: &Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("not a hex string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn summary(dir: &Path, pid: u64) -> Value {
    let p = dir.join(format!("summary.{pid}.json"));
    serde_json::from_str(
        &std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// Apply mode with `plan_text`, the summary written into `dir`.
fn apply_env(dir: &Path, plan_text: &str) -> Vec<(&'static str, String)> {
    let plan = dir.join("plan");
    std::fs::write(&plan, plan_text).unwrap();
    vec![
        ("HUGETUNE_MODE", "apply".into()),
        ("HUGETUNE_PLAN", plan.display().to_string()),
        (
            "HUGETUNE_SUMMARY",
            dir.join("summary.%p.json").display().to_string(),
        ),
    ]
}

#[test]
fn record_log_of_a_known_program() {
    let d = tempfile::tempdir().unwrap();
    let out = run(
        &prog("t_known"),
        &[],
        &[
            ("HUGETUNE_MODE", "record".into()),
            (
                "HUGETUNE_LOG",
                d.path().join("alloc.%p.log").display().to_string(),
            ),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = &out.json;
    let pid = j["pid"].as_u64().unwrap();
    let log = AllocLog::read(&d.path().join(format!("alloc.{pid}.log"))).unwrap();
    assert_eq!(log.header.pid as u64, pid);
    assert_eq!(log.header.threshold, 128 * 1024);
    // Every record (blobs included) takes a sequence number: 1..N, no gaps.
    let mut seqs: Vec<u64> = log
        .records
        .iter()
        .map(|r| r.seq)
        .chain(log.modules.iter().map(|m| m.seq))
        .chain(log.maps.iter().map(|m| m.seq))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());

    let bias = hex(&j["load_bias"]);
    let (lo, hi) = (hex(&j["seq_text_start_off"]), hex(&j["seq_text_end_off"]));
    let find = |kind: Kind, addr: u64| {
        log.records
            .iter()
            .find(|r| r.kind == kind && r.addr == addr)
            .unwrap_or_else(|| panic!("no {kind:?} record at {addr:#x}"))
    };
    for (who, tid) in [
        ("main", j["main_tid"].as_u64().unwrap()),
        ("thread", j["thread_tid"].as_u64().unwrap()),
    ] {
        let p = &j[who];
        let m = find(Kind::Malloc, hex(&p["malloc100"]));
        assert_eq!((m.size, m.tid as u64), (100, tid));
        let c = find(Kind::Calloc, hex(&p["calloc"]));
        assert_eq!((c.size, c.arg, c.arg2), (200, 10, 20));
        let r = find(Kind::Realloc, hex(&p["realloc300"]));
        assert_eq!((r.size, r.arg), (300, hex(&p["malloc100"])));
        let pm = find(Kind::PosixMemalign, hex(&p["posix_memalign"]));
        assert_eq!((pm.size, pm.arg, pm.arg2), (1000, 64, 0));
        let a = find(Kind::AlignedAlloc, hex(&p["aligned_alloc"]));
        assert_eq!((a.size, a.arg), (8192, 4096));
        let me = find(Kind::Memalign, hex(&p["memalign"]));
        assert_eq!((me.size, me.arg), (500, 256));
        let v = find(Kind::Valloc, hex(&p["valloc"]));
        assert_eq!(v.size, 1000);
        for r in [m, c, r, pm, a, me, v] {
            let off = r.caller - bias;
            assert!(
                off >= lo && off < hi,
                "{:?} caller offset {off:#x} outside [{lo:#x}, {hi:#x})",
                r.kind
            );
            assert_eq!(r.tid as u64, tid);
        }
        for key in [
            "realloc300",
            "calloc",
            "posix_memalign",
            "aligned_alloc",
            "memalign",
            "valloc",
        ] {
            let f = find(Kind::Free, hex(&p[key]));
            assert!(f.seq > find(Kind::Malloc, hex(&p["malloc100"])).seq);
        }
    }
    let big = find(Kind::Malloc, hex(&j["large"]["malloc1m"]));
    assert_eq!(big.size, 1 << 20);
    assert!(find(Kind::Free, big.addr).seq > big.seq);
    let mm = find(Kind::Mmap, hex(&j["large"]["mmap1m"]));
    assert_eq!(mm.size, 1 << 20);
    let un = find(Kind::Munmap, mm.addr);
    assert_eq!(un.size, 1 << 20);
    // Threads announce themselves with a stack hint; modules and maps are there.
    let thread_tids: Vec<u32> = log
        .records
        .iter()
        .filter(|r| r.kind == Kind::Thread)
        .map(|r| r.tid)
        .collect();
    assert!(thread_tids.contains(&(j["thread_tid"].as_u64().unwrap() as u32)));
    let exe = j["exe"].as_str().unwrap();
    assert!(
        log.modules.iter().any(|m| m.path == exe && m.bias == bias),
        "main program module"
    );
    assert!(log.maps.iter().any(|m| m.at_exit) && log.maps.iter().any(|m| !m.at_exit));

    // The tool resolves callers to (module, offset) of this executable.
    let inputs = inputs_from_log(&log);
    let exe_idx = inputs.modules.iter().position(|m| m == exe).unwrap() as u32;
    let sites: Vec<_> = inputs
        .events
        .iter()
        .filter_map(|e| match e.op {
            hugetune_model::categorize::AllocOp::Alloc { addr, site, .. }
                if addr == hex(&j["main"]["malloc100"]) =>
            {
                site
            }
            _ => None,
        })
        .collect();
    assert_eq!(sites.len(), 1);
    assert_eq!(sites[0].module, exe_idx);
    assert!(sites[0].offset >= lo && sites[0].offset < hi);
    assert!(inputs.space.static_segments.iter().any(|s| s.main_program));
    assert!(!inputs.space.stack_ranges.is_empty());
    assert!(
        !inputs.space.excluded_ranges.is_empty(),
        "the library's own buffers are excluded"
    );
}

#[test]
fn apply_backs_large_allocations_with_whole_hugetlb_pages() {
    if !is_root() {
        eprintln!("skipped: needs root to set a hugetlb pool");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let pool = set_hugetlb_pool(2048, 40).unwrap();
    assert!(pool.now >= 25, "the kernel gave only {} pages", pool.now);
    let out = run(
        &prog("t_apply"),
        &["expect=hugetlb-2m"],
        &apply_env(d.path(), "hugetune-plan 1\nheap-large hugetlb-2m\n"),
    );
    drop(pool);
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.json);
    let j = &out.json;
    // 8 MiB + 1 byte takes 5 whole 2 MB pages: no partial huge page.
    assert_eq!(j["big1"]["private_hugetlb_kb"], 10240);
    assert_eq!(j["big1"]["kernel_page_kb"], 2048);
    assert_eq!(j["big2"]["private_hugetlb_kb"], 16384);
    // realloc of owned and of glibc pointers keeps contents and huge backing.
    for k in [
        "realloc_grow_ok",
        "realloc_shrink_ok",
        "shrunk_is_glibc",
        "glibc_to_large_ok",
        "usable_size_ok",
    ] {
        assert_eq!(j[k], true, "{k}");
    }
    assert_eq!(j["glibc_grown"]["private_hugetlb_kb"], 4096);
    let s = summary(d.path(), j["pid"].as_u64().unwrap());
    assert_eq!(s["fallbacks"].as_array().unwrap().len(), 0, "{s}");
    assert!(s["backed"]["hugetlb-2m"]["bytes"].as_u64().unwrap() >= 8 << 20);
    assert!(s["peak_huge_pages"]["hugetlb-2m"].as_u64().unwrap() >= 5);
}

#[test]
fn apply_falls_back_cleanly_when_the_pool_is_empty() {
    if !is_root() {
        eprintln!("skipped: needs root to empty the hugetlb pool");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let pool = set_hugetlb_pool(2048, 0).unwrap();
    let out = run(
        &prog("t_apply"),
        &["expect=owned"],
        &apply_env(d.path(), "hugetune-plan 1\nheap-large hugetlb-2m\n"),
    );
    drop(pool);
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.json);
    assert_eq!(out.json["ok"], true);
    assert_eq!(out.json["big1"]["private_hugetlb_kb"], 0);
    let s = summary(d.path(), out.json["pid"].as_u64().unwrap());
    let f = &s["fallbacks"][0];
    assert_eq!(
        (f["from"].as_str(), f["reason"].as_str()),
        (Some("hugetlb-2m"), Some("ENOMEM")),
        "{s}"
    );
    assert!(f["count"].as_u64().unwrap() >= 4);
}

#[test]
fn multithreaded_malloc_free_in_both_modes() {
    let d = tempfile::tempdir().unwrap();
    let out = run(
        &prog("t_threads"),
        &["threads=4", "ops=30000"],
        &[
            ("HUGETUNE_MODE", "record".into()),
            (
                "HUGETUNE_LOG",
                d.path().join("alloc.%p.log").display().to_string(),
            ),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let log = AllocLog::read(&d.path().join(format!("alloc.{}.log", out.json["pid"]))).unwrap();
    let ops = out.json["ops"].as_u64().unwrap();
    let calls = log
        .records
        .iter()
        .filter(|r| r.kind.is_malloc_alloc() || r.kind == Kind::Free || r.kind == Kind::Realloc)
        .count();
    assert!(calls as u64 >= ops, "{calls} records for {ops} operations");
    let tids: std::collections::BTreeSet<u32> = log.records.iter().map(|r| r.tid).collect();
    assert!(tids.len() >= 5, "threads seen: {tids:?}");
    // Apply mode, whatever the pool holds: large allocations are owned (hugetlb, or
    // THP/4 KB after a counted fallback) and every content check passes.
    let out = run(
        &prog("t_threads"),
        &["threads=4", "ops=30000"],
        &apply_env(d.path(), "hugetune-plan 1\nheap-large hugetlb-2m\n"),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.json["large_allocs"].as_u64().unwrap() > 0);
}

#[test]
fn a_site_directive_owns_only_that_site() {
    let d = tempfile::tempdir().unwrap();
    let probe = run(&prog("t_site"), &[], &[]);
    assert_eq!(probe.code, 0);
    let exe = probe.json["exe"].as_str().unwrap().to_string();
    let a_off = probe.json["a_caller_off"].as_str().unwrap().to_string();
    let out = run(
        &prog("t_site"),
        &["a=owned", "b=glibc"],
        &apply_env(
            d.path(),
            &format!("hugetune-plan 1\nsite {exe} {a_off} thp-2m\n"),
        ),
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.json);
    assert_eq!(out.json["ok"], true);
}

#[test]
fn a_bad_plan_changes_nothing_and_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let out = run(
        &prog("t_apply"),
        &["expect=glibc"],
        &apply_env(d.path(), "hugetune-plan 1\nheap-large gigantic-pages\n"),
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.json);
    let s = summary(d.path(), out.json["pid"].as_u64().unwrap());
    assert!(
        s["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap_or("").contains("gigantic")),
        "{s}"
    );
}

#[test]
fn markers_place_every_call_in_the_lackey_stream() {
    if !hugetune_capture::lackey::valgrind_available() {
        eprintln!("skipped: valgrind is not installed");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let rec = hugetune_capture::record::record_with_lackey(
        Path::new(LIB),
        &[prog("t_known").into_os_string()],
        d.path(),
        false,
        |_, _| {},
    )
    .unwrap();
    let inputs = inputs_from_log(&rec.log);
    let spec = hugetune_model::stream::StreamSpec {
        space: inputs.space.clone(),
        events: inputs.events.clone(),
        threshold: inputs.threshold,
        markers: inputs.markers,
    };
    let mut r =
        hugetune_capture::refs::RefReader::new(std::fs::File::open(&rec.refs_path).unwrap())
            .unwrap();
    let refs = std::iter::from_fn(move || r.next_ref().unwrap().map(|(a, _)| a));
    let (present, s) = hugetune_model::stream::present_categories(&spec, refs);
    // Every hooked call has its marker (pre-init calls, before the marker area
    // existed, would not; THREAD, STACK, OWN_REGION, MODULE, MAPS are not calls).
    let hooked = rec
        .log
        .records
        .iter()
        .filter(|r| r.has_marker(&rec.log.header))
        .count() as u64;
    assert!(hooked > 30, "{hooked} hooked calls");
    assert_eq!(s.markers, hooked, "one marker per hooked call");
    assert_eq!(
        s.events_applied, s.events,
        "every event applied in the stream"
    );
    assert!(
        present.contains(&hugetune_model::Category::HeapLarge),
        "the 1 MiB buffer is heap-large: {present:?}"
    );
    assert!(present.contains(&hugetune_model::Category::Stack));
}

fn record_env(dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("HUGETUNE_MODE", "record".into()),
        (
            "HUGETUNE_LOG",
            dir.join("alloc.%p.log").display().to_string(),
        ),
        (
            "HUGETUNE_SUMMARY",
            dir.join("summary.%p.json").display().to_string(),
        ),
    ]
}

fn in_range(a: u64, lo: u64, hi: u64) -> bool {
    a >= lo && a < hi
}

#[test]
fn calls_before_initialization_are_recorded_signal_handlers_included() {
    let d = tempfile::tempdir().unwrap();
    let out = run(&prog("t_early"), &[], &record_env(d.path()));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = &out.json;
    let log = AllocLog::read(
        &d.path()
            .join(format!("alloc.{}.log", j["pid"].as_u64().unwrap())),
    )
    .unwrap();
    let find = |kind: Kind, addr: u64| {
        log.records
            .iter()
            .find(|r| r.kind == kind && r.addr == addr)
            .unwrap_or_else(|| panic!("no {kind:?} record at {addr:#x}"))
    };
    let pre = |r: &hugetune_capture::alloclog::Record| r.flags & FLAG_PREINIT != 0;
    let m = find(Kind::Malloc, hex(&j["malloc4321"]));
    assert_eq!(m.size, 4321);
    let c = find(Kind::Calloc, hex(&j["calloc3000"]));
    assert_eq!((c.size, c.arg, c.arg2), (3000, 3, 1000));
    let r = find(Kind::Realloc, hex(&j["realloc5000"]));
    assert_eq!((r.size, r.arg), (5000, m.addr));
    let pm = find(Kind::PosixMemalign, hex(&j["memalign300"]));
    assert_eq!((pm.size, pm.arg, pm.arg2), (300, 64, 0));
    let f = find(Kind::Free, c.addr);
    let mm = find(Kind::Mmap, hex(&j["mmap_page"]));
    let un = find(Kind::Munmap, mm.addr);
    for r in [m, c, r, pm, f, mm, un] {
        assert!(pre(r), "{r:?} is not marked pre-init");
    }
    // Every call of the signal handler (which may interrupt the library's own
    // pre-init path) is there, pre-init too.
    let (hlo, hhi) = (hex(&j["handler_start"]), hex(&j["handler_end"]));
    let calls = j["handler_calls"].as_u64().unwrap();
    for kind in [Kind::Mmap, Kind::Munmap] {
        let from_handler: Vec<_> = log
            .records
            .iter()
            .filter(|r| r.kind == kind && in_range(r.caller, hlo, hhi))
            .collect();
        assert_eq!(
            from_handler.len() as u64,
            calls,
            "{kind:?} from the handler"
        );
        assert!(from_handler.iter().all(|r| pre(r)));
    }
    eprintln!(
        "{calls} handler calls, {} while inside malloc/free",
        j["in_call_hits"]
    );
    let loops = j["loops"].as_u64().unwrap();
    let small = log
        .records
        .iter()
        .filter(|r| r.kind == Kind::Malloc && r.size == 200 && pre(r))
        .count() as u64;
    assert_eq!(small, loops);
    // Pre-init calls come first, before anything recorded after initialization.
    let last_pre = log.records.iter().filter(|r| pre(r)).map(|r| r.seq).max();
    let first_post = log.records.iter().filter(|r| !pre(r)).map(|r| r.seq).min();
    assert!(last_pre < first_post, "{last_pre:?} {first_post:?}");
    // And they are counted in the summary.
    let s = summary(d.path(), j["pid"].as_u64().unwrap());
    assert!(
        s["categories"]["heap-small"]["allocations"]
            .as_u64()
            .unwrap()
            >= loops + 4
    );
}

#[test]
fn static_segments_and_stacks_of_a_log_are_the_programs() {
    let d = tempfile::tempdir().unwrap();
    let out = run(&prog("t_early"), &[], &record_env(d.path()));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = &out.json;
    let log = AllocLog::read(
        &d.path()
            .join(format!("alloc.{}.log", j["pid"].as_u64().unwrap())),
    )
    .unwrap();
    let inputs = inputs_from_log(&log);
    let seg_of = |a: u64| {
        inputs
            .space
            .static_segments
            .iter()
            .find(|s| in_range(a, s.start, s.end))
            .unwrap_or_else(|| panic!("{a:#x} is in no static segment"))
    };
    let exe = j["exe"].as_str().unwrap();
    for key in ["main_data", "main_bss"] {
        let s = seg_of(hex(&j[key]));
        assert!(s.main_program, "{key}");
        assert_eq!(inputs.modules[s.module as usize], exe, "{key}");
    }
    for key in ["lib_data", "lib_bss"] {
        let s = seg_of(hex(&j[key]));
        assert!(!s.main_program, "{key}");
        assert!(
            inputs.modules[s.module as usize].ends_with("/libt_early.so"),
            "{key}: {}",
            inputs.modules[s.module as usize]
        );
    }
    // The runtime library's own data is not the program's.
    assert!(inputs
        .space
        .static_segments
        .iter()
        .all(|s| !inputs.modules[s.module as usize].ends_with("libhugetune.so")));
    // Both threads' stacks come from STACK records.
    let stacks: Vec<_> = log
        .records
        .iter()
        .filter(|r| r.kind == Kind::Stack)
        .collect();
    for key in ["main_stack", "thread_stack"] {
        let a = hex(&j[key]);
        assert!(
            stacks.iter().any(|r| in_range(a, r.addr, r.addr + r.size)),
            "{key} {a:#x} not in a STACK record: {stacks:?}"
        );
        assert!(
            inputs
                .space
                .stack_ranges
                .iter()
                .any(|&(lo, hi)| in_range(a, lo, hi)),
            "{key}"
        );
    }
    assert!(
        stacks.iter().any(|r| r.arg2 == 1),
        "the main thread's [stack]"
    );
}

#[test]
fn fork_and_exec_every_process_and_image_has_a_complete_log() {
    let d = tempfile::tempdir().unwrap();
    let out = run(&prog("t_exec"), &[], &record_env(d.path()));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = &out.json;
    let (pid, a, b) = (
        j["pid"].as_u64().unwrap(),
        j["fork_child"].as_u64().unwrap(),
        j["exec_child"].as_u64().unwrap(),
    );
    let me = j["self"].as_str().unwrap();
    let read = |name: String| {
        AllocLog::read(&d.path().join(&name)).unwrap_or_else(|e| panic!("{name}: {e:#}"))
    };
    let has_malloc = |l: &AllocLog, size: u64| {
        l.records
            .iter()
            .any(|r| r.kind == Kind::Malloc && r.size == size)
    };

    // The parent's first image: its children by pid, the failed exec, the exec.
    let p0 = read(format!("alloc.{pid}.log"));
    assert_eq!((p0.header.pid as u64, p0.header.exec_gen), (pid, 0));
    assert!(has_malloc(&p0, 1111));
    // A live thread's buffered events were written out before the exec.
    assert!(has_malloc(&p0, 5555));
    let mut kids = p0.children();
    kids.sort_unstable();
    assert_eq!(kids, vec![a as u32, b as u32]);
    let execs: Vec<(&str, u32, u32)> = p0
        .execs
        .iter()
        .map(|e| (e.path.as_str(), e.new_gen, e.errno))
        .collect();
    assert_eq!(
        execs,
        vec![
            ("/nonexistent/hugetune-t_exec", 1, 0),
            ("/nonexistent/hugetune-t_exec", 1, libc::ENOENT as u32),
            (me, 1, 0)
        ]
    );
    let inputs = inputs_from_log(&p0);
    assert!(inputs.forks);
    assert_eq!(inputs.execs, vec![me.to_string()]);
    // Its second image: same pid, generation 1, its own log and summary.
    let p1 = read(format!("alloc.{pid}.x1.log"));
    assert_eq!((p1.header.pid as u64, p1.header.exec_gen), (pid, 1));
    assert!(has_malloc(&p1, 4444) && !has_malloc(&p1, 1111));
    for s in [
        format!("summary.{pid}.json"),
        format!("summary.{pid}.x1.json"),
    ] {
        assert!(d.path().join(&s).exists(), "{s}");
    }
    // The forked child.
    let ca = read(format!("alloc.{a}.log"));
    assert_eq!(ca.header.ppid as u64, pid);
    assert!(has_malloc(&ca, 2222) && !has_malloc(&ca, 1111));
    // The child that exec'd: both its images.
    let cb0 = read(format!("alloc.{b}.log"));
    assert_eq!(cb0.execs.len(), 1);
    assert_eq!((cb0.execs[0].path.as_str(), cb0.execs[0].new_gen), (me, 1));
    let cb1 = read(format!("alloc.{b}.x1.log"));
    assert_eq!((cb1.header.ppid as u64, cb1.header.exec_gen), (pid, 1));
    assert!(has_malloc(&cb1, 3333));
    // Nothing else.
    let n = std::fs::read_dir(d.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count();
    assert_eq!(n, 5);
}
