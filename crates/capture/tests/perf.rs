//! The perf hardware-sampling source: the `perf script` parser on fixtures,
//! malformed input, arbitrary bytes; detection on fake sysfs/procfs trees with a
//! fake perf; and live checks on this machine.

use hugetune_capture::perf::{
    parse_script, perf_available, record, sampling_support, sampling_support_in, HwEvents,
    Mechanism, PerfPlan, PerfSample, PerfSamples, ProbeEnv, RecordOptions, Sampling,
};
use proptest::prelude::*;
use std::ffi::OsString;
use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const K4: u64 = 4 << 10;
const M2: u64 = 2 << 20;
const G1: u64 = 1 << 30;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/perf")
        .join(name)
}

fn parse_fixture(name: &str) -> Result<PerfSamples, hugetune_capture::perf::ParseError> {
    let f = fs::File::open(fixture(name)).unwrap();
    parse_script(BufReader::new(f))
}

fn count_pages(s: &PerfSamples, size: Option<u64>) -> usize {
    s.samples
        .iter()
        .filter(|x| x.data_page_size == size)
        .count()
}

#[test]
fn intel_perf_mem_fixture() {
    let s = parse_fixture("intel-mem.txt").unwrap();
    assert_eq!(s.samples.len(), 40);
    assert_eq!(s.dropped, 1);
    assert_eq!(s.total(), 41);
    assert_eq!(s.by_event["cpu/mem-loads,ldlat=30/P"], 31);
    assert_eq!(s.by_event["cpu/mem-stores/P"], 10);
    let loads = s.samples.iter().filter(|x| x.write == Some(false)).count();
    let stores = s.samples.iter().filter(|x| x.write == Some(true)).count();
    assert_eq!((loads, stores), (30, 10));
    assert_eq!(count_pages(&s, Some(K4)), 20);
    assert_eq!(count_pages(&s, Some(M2)), 10);
    assert_eq!(count_pages(&s, Some(G1)), 5);
    assert_eq!(count_pages(&s, None), 5);
    // perf mem record's default: frequency mode, 4000 Hz, on both events.
    assert_eq!(
        s.sampling,
        Sampling::Time {
            period: None,
            frequency_hz: Some(4000)
        }
    );
    let first = &s.samples[0];
    assert_eq!(first.tid, 31209);
    assert_eq!(first.time_ns, 86_401_123_687_728);
    assert!(s.samples.iter().all(|x| x.addr != 0));
    assert!(s.samples.windows(2).all(|w| w[0].time_ns < w[1].time_ns));
    assert!(s.samples.iter().all(|x| x.tid == 31207 || x.tid == 31209));
}

#[test]
fn amd_ibs_fixture() {
    let s = parse_fixture("amd-ibs.txt").unwrap();
    assert_eq!(s.samples.len(), 20);
    assert_eq!(s.dropped, 10);
    assert_eq!(s.by_event["ibs_op//"], 30);
    assert!(s.samples.iter().all(|x| x.write.is_none()));
    assert_eq!(count_pages(&s, Some(M2)), 10);
    assert_eq!(count_pages(&s, Some(K4)), 5);
    assert_eq!(count_pages(&s, Some(G1)), 5);
    assert_eq!(count_pages(&s, None), 0);
    assert_eq!(
        s.sampling,
        Sampling::Time {
            period: Some(100_000),
            frequency_hz: None
        }
    );
}

#[test]
fn arm_spe_fixture() {
    let s = parse_fixture("arm-spe.txt").unwrap();
    assert_eq!(s.samples.len(), 24);
    assert_eq!(s.dropped, 0);
    assert_eq!(s.by_event["memory"], 24);
    assert!(s
        .samples
        .iter()
        .all(|x| x.write.is_none() && x.data_page_size.is_none()));
    let unknown = s
        .samples
        .iter()
        .filter(|x| x.tid == PerfSample::UNKNOWN_TID)
        .count();
    assert_eq!(unknown, 2);
    // Samples are synthesized as `memory`: the period comes from the SPE event,
    // not from perf's sample-less dummy event.
    assert_eq!(
        s.sampling,
        Sampling::Time {
            period: Some(4096),
            frequency_hz: None
        }
    );
}

#[test]
fn real_software_event_output_from_this_vm() {
    let s = parse_fixture("vm-page-faults-real.txt").unwrap();
    assert_eq!(s.total(), 104);
    assert_eq!(s.dropped, 0);
    assert_eq!(s.by_event["page-faults"], 104);
    assert_eq!(count_pages(&s, Some(K4)), 11);
    assert_eq!(count_pages(&s, None), 93);
    assert_eq!(
        s.sampling,
        Sampling::Time {
            period: Some(1),
            frequency_hz: None
        }
    );
    assert_eq!(s.samples[0].tid, 2120);
    assert_eq!(s.samples[0].time_ns, 12_691_754_833_651);
    assert_eq!(s.samples[0].addr, 0x55f478a3f5c0);
    assert_eq!(s.samples[0].ip, 0xffffffff817554ea);
}

fn error_of(name: &str) -> (u64, String) {
    let e = parse_fixture(name).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(&format!("line {}", e.line)), "{text}");
    (e.line, text)
}

#[test]
fn malformed_fixtures_name_the_line() {
    let (line, text) = error_of("truncated.txt");
    assert_eq!(line, 31);
    assert!(text.contains("missing addr and ip"), "{text}");
    let (line, text) = error_of("bad-page-size.txt");
    assert_eq!(line, 27);
    assert!(text.contains("4KX"), "{text}");
    let (line, text) = error_of("bad-address.txt");
    assert_eq!(line, 29);
    assert!(text.contains("zz3a1c1710c8"), "{text}");
}

#[test]
fn malformed_lines() {
    let cases: &[(&str, &str)] = &[
        ("x 1.0: e:  10 20\n", "thread id"),
        ("1 1.0 e:  10 20\n", "does not end with ':'"),
        ("1 1.x: e:  10 20\n", "seconds.fraction"),
        ("1 1.0: e  10 20 4K\n", "no event name"),
        ("1 1.0: e: 10\n", "missing addr and ip"),
        ("1 1.0:\n", "got 2 field"),
        ("1 1.0: e: 10 20 4K extra\n", "unexpected field"),
        ("1 1.0: e: 10 2g0\n", "ip"),
        ("1 1.0: e: 11111111111111111 20\n", "address"),
        ("1 1.0: e: 10 20 3M\n", "power of two"),
    ];
    for (text, want) in cases {
        let input = format!("# comment\n\n{text}");
        let e = parse_script(input.as_bytes()).unwrap_err();
        assert_eq!(e.line, 3, "{text:?}: {e}");
        assert!(e.to_string().contains(want), "{text:?}: {e}");
    }
    let e = parse_script(&b"1 1.0: e: 10 20\n\xff\xfe\n"[..]).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.to_string().contains("UTF-8"), "{e}");
}

#[test]
fn empty_and_header_only_inputs() {
    let s = parse_script(&b""[..]).unwrap();
    assert_eq!(s.total(), 0);
    let s = parse_script(&b"# ========\n#\n\n"[..]).unwrap();
    assert_eq!(s.total(), 0);
}

fn perf_line(x: &PerfSample, page: &str) -> String {
    format!(
        "{:5} {}.{:09}: {:>24}: {:16x} {:16x} {}",
        x.tid,
        x.time_ns / 1_000_000_000,
        x.time_ns % 1_000_000_000,
        &*x.event,
        x.addr,
        x.ip,
        page
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse_script(&bytes[..]);
    }

    #[test]
    fn arbitrary_token_soup_never_panics(
        lines in proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![
                    Just("1".to_string()), Just("-1".to_string()), Just(":".to_string()),
                    Just("1.5:".to_string()), Just("ev:".to_string()), Just("0".to_string()),
                    Just("N/A".to_string()), Just("1024M".to_string()), Just("#".to_string()),
                    "[0-9a-fKMGBx/.:-]{0,20}",
                ],
                0..8,
            ),
            0..20,
        )
    ) {
        let text = lines.iter().map(|l| l.join(" ")).collect::<Vec<_>>().join("\n");
        let _ = parse_script(text.as_bytes());
    }

    #[test]
    fn perf_layout_round_trips(
        raw in proptest::collection::vec(
            (0u32..4_000_000, 0u64..1u64 << 50, any::<u64>(), 1u64..u64::MAX, 0usize..5, any::<bool>()),
            1..50,
        )
    ) {
        let pages = [(Some(K4), "4K"), (Some(M2), "2M"), (Some(G1), "1024M"), (None, "N/A"), (Some(64 << 10), "64K")];
        let mut text = String::from("# ========\n#\n");
        let mut want = Vec::new();
        for &(tid, time_ns, ip, addr, p, store) in &raw {
            let event = if store { "cpu/mem-stores/P" } else { "cpu/mem-loads,ldlat=30/P" };
            let x = PerfSample {
                tid, time_ns, ip, addr,
                write: Some(store),
                data_page_size: pages[p].0,
                event: event.into(),
            };
            text.push_str(&perf_line(&x, pages[p].1));
            text.push('\n');
            want.push(x);
        }
        let got = parse_script(text.as_bytes()).unwrap();
        prop_assert_eq!(got.dropped, 0);
        prop_assert_eq!(got.samples, want);
    }
}

// ---------------------------------------------------------------------------
// Detection on fake trees
// ---------------------------------------------------------------------------

struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    /// A machine with the given event_source devices (and files under them),
    /// perf_event_paranoid, kernel release and a fake perf whose `perf stat`
    /// prints `stat_line` on stderr.
    fn new(
        devices: &[&str],
        files: &[&str],
        paranoid: i32,
        kernel: &str,
        perf: &str,
        stat_line: &str,
    ) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("sys/bus/event_source/devices");
        fs::create_dir_all(&dev).unwrap();
        for d in devices {
            fs::create_dir_all(dev.join(d)).unwrap();
        }
        for f in files {
            let p = dev.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "event=0xcd,umask=0x1,ldlat=3\n").unwrap();
        }
        let k = dir.path().join("proc/sys/kernel");
        fs::create_dir_all(&k).unwrap();
        fs::write(k.join("perf_event_paranoid"), format!("{paranoid}\n")).unwrap();
        fs::write(k.join("osrelease"), format!("{kernel}\n")).unwrap();
        // Run through `sh FILE`: executing a file just written can fail with
        // ETXTBSY when another test thread forks meanwhile.
        fs::write(
            dir.path().join("perf"),
            format!(
                "case \"$1\" in\n  --version) echo 'perf version {perf}' ;;\n  stat) echo '{stat_line}' >&2 ;;\n  *) exit 129 ;;\nesac\n"
            ),
        )
        .unwrap();
        Fake { dir }
    }

    fn env(&self, privileged: bool) -> ProbeEnv {
        ProbeEnv {
            sysfs: self.dir.path().join("sys"),
            procfs: self.dir.path().join("proc"),
            perf: vec!["sh".into(), self.dir.path().join("perf").into()],
            privileged,
        }
    }
}

const STAT_OK: &str = "2113458,,cycles,803520,100.00,,";
const STAT_NO: &str = "<not supported>,,cycles,0,100.00,,";
const SOFTWARE: &[&str] = &["breakpoint", "msr", "software", "tracepoint", "uprobe"];

#[test]
fn detects_intel_pebs() {
    let f = Fake::new(
        &["cpu", "software"],
        &["cpu/events/mem-loads", "cpu/events/mem-stores"],
        2,
        "6.1.0-18-amd64",
        "6.1.76",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(false));
    assert!(s.usable(), "{s:?}");
    assert_eq!(
        s.mechanism,
        Some(Mechanism::IntelPebs {
            pmu: "cpu".into(),
            stores: true
        })
    );
    assert_eq!(s.hardware_events, HwEvents::Open);
    let plan = s.plan.as_ref().unwrap();
    assert!(plan.data_page_size);
    let line = plan.command_line(&RecordOptions::default());
    assert!(
        line.ends_with("mem --data-page-size -t load,store record --output=perf.data -- <command>"),
        "{line}"
    );
    assert!(
        s.summary()
            .starts_with("Intel PEBS (cpu/mem-loads and mem-stores)"),
        "{}",
        s.summary()
    );
}

#[test]
fn detects_hybrid_intel_loads_only() {
    let f = Fake::new(
        &["cpu_core", "cpu_atom"],
        &["cpu_core/events/mem-loads"],
        1,
        "6.5.0",
        "6.5.0",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(false));
    assert_eq!(
        s.mechanism,
        Some(Mechanism::IntelPebs {
            pmu: "cpu_core".into(),
            stores: false
        })
    );
    let line = s.plan.unwrap().command_line(&RecordOptions::default());
    assert!(line.contains("-t load record"), "{line}");
}

#[test]
fn detects_amd_ibs() {
    let f = Fake::new(
        &["cpu", "ibs_fetch", "ibs_op", "amd_iommu_0"],
        &["cpu/events/branch-instructions"],
        1,
        "6.8.0-45-generic",
        "6.8.12",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(false));
    assert!(s.usable(), "{s:?}");
    assert_eq!(s.mechanism, Some(Mechanism::AmdIbs));
    let line = s.plan.unwrap().command_line(&RecordOptions {
        period: Some(100_000),
        ..Default::default()
    });
    assert!(
        line.ends_with(
            "record -e ibs_op// -d --data-page-size --count=100000 --output=perf.data -- <command>"
        ),
        "{line}"
    );
}

#[test]
fn detects_arm_spe_without_page_sizes() {
    let f = Fake::new(
        &["armv8_pmuv3_0", "arm_spe_0", "software"],
        &[],
        2,
        "6.1.0-25-arm64",
        "6.1.106",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(true));
    assert!(s.usable(), "{s:?}");
    assert_eq!(
        s.mechanism,
        Some(Mechanism::ArmSpe {
            pmu: "arm_spe_0".into()
        })
    );
    assert!(!s.plan.as_ref().unwrap().data_page_size);
    assert!(
        s.warnings.iter().any(|w| w.contains("SPE")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn no_pmu_in_a_vm() {
    let f = Fake::new(SOFTWARE, &[], 2, "6.18.44", "6.1.187", STAT_NO);
    let s = sampling_support_in(&f.env(true));
    assert!(!s.usable());
    assert_eq!(s.mechanism, None);
    assert!(matches!(s.hardware_events, HwEvents::NotSupported(_)));
    let why = s.summary();
    assert!(why.contains("no hardware PMU"), "{why}");
    assert!(why.contains("a VM without PMU passthrough"), "{why}");
    assert!(why.contains("<not supported>"), "{why}");
}

#[test]
fn cpu_pmu_without_memory_sampling() {
    let f = Fake::new(
        &["cpu", "software"],
        &["cpu/events/cycles"],
        2,
        "6.1.0",
        "6.1.0",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(true));
    assert!(!s.usable());
    let why = s.summary();
    assert!(
        why.contains("the CPU PMU (cpu) offers no data-address sampling"),
        "{why}"
    );
}

#[test]
fn paranoid_blocks_the_unprivileged_only() {
    let f = Fake::new(
        &["cpu"],
        &["cpu/events/mem-loads", "cpu/events/mem-stores"],
        3,
        "6.1.0",
        "6.1.0",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(false));
    assert!(!s.usable());
    assert!(
        s.summary().contains("perf_event_paranoid is 3"),
        "{}",
        s.summary()
    );
    assert!(sampling_support_in(&f.env(true)).usable());
}

#[test]
fn old_perf_or_kernel_records_no_page_size() {
    let f = Fake::new(
        &["cpu"],
        &["cpu/events/mem-loads", "cpu/events/mem-stores"],
        2,
        "5.10.0-21-amd64",
        "5.10.179",
        STAT_OK,
    );
    let s = sampling_support_in(&f.env(true));
    assert!(s.usable(), "{s:?}");
    assert!(!s.plan.as_ref().unwrap().data_page_size);
    assert!(
        s.warnings.iter().any(|w| w.contains("5.11")),
        "{:?}",
        s.warnings
    );
    let line = s.plan.unwrap().command_line(&RecordOptions::default());
    assert!(!line.contains("data-page-size"), "{line}");
}

#[test]
fn missing_perf_is_reported() {
    let f = Fake::new(
        &["cpu"],
        &["cpu/events/mem-loads"],
        2,
        "6.1.0",
        "6.1.0",
        STAT_OK,
    );
    let mut env = f.env(true);
    env.perf = vec![f.dir.path().join("no-such-perf").into()];
    let s = sampling_support_in(&env);
    assert!(!s.usable());
    assert_eq!(s.perf_version, None);
    assert_eq!(s.hardware_events, HwEvents::NotChecked);
    assert!(
        s.summary().contains("perf is not installed"),
        "{}",
        s.summary()
    );
}

#[test]
fn missing_sysfs_is_reported() {
    let env = ProbeEnv {
        sysfs: "/nonexistent-sysfs".into(),
        procfs: "/nonexistent-procfs".into(),
        perf: vec!["/nonexistent-perf".into()],
        privileged: false,
    };
    let s = sampling_support_in(&env);
    assert!(!s.usable());
    assert!(
        s.summary().contains("cannot read /nonexistent-sysfs"),
        "{}",
        s.summary()
    );
}

// ---------------------------------------------------------------------------
// Live, on this machine
// ---------------------------------------------------------------------------

#[test]
fn live_detection_answers_with_a_reason() {
    let s = sampling_support();
    eprintln!("perf sampling here: {}", s.summary());
    for w in &s.warnings {
        eprintln!("  warning: {w}");
    }
    if s.usable() {
        assert!(s.problems.is_empty());
        assert!(s.plan.is_some());
    } else {
        assert!(!s.problems.is_empty());
        assert!(s
            .summary()
            .starts_with("no hardware data-address sampling: "));
    }
}

/// Whether perf can open a software event here (perf installed, not blocked by
/// perf_event_paranoid or a seccomp profile).
fn software_events_work() -> bool {
    Command::new("perf")
        .args(["stat", "-e", "page-faults", "-x,", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The whole record → script → parse pipeline through real perf, with the
/// `page-faults` software event standing in for a hardware mechanism (which this
/// machine lacks): addresses are fault addresses, one sample per fault (`-c 1`).
#[test]
fn live_record_pipeline_with_a_software_event() {
    let perf: Vec<OsString> = vec!["perf".into()];
    if !perf_available(&perf) || !software_events_work() {
        eprintln!("skipped: perf cannot open software events here");
        return;
    }
    let plan = PerfPlan {
        mechanism: Mechanism::Generic {
            event: "page-faults".into(),
        },
        perf,
        data_page_size: true,
    };
    let keep = tempfile::tempdir().unwrap();
    let opts = RecordOptions {
        period: Some(1),
        keep_data_in: Some(keep.path().to_path_buf()),
        ..Default::default()
    };
    let argv: Vec<OsString> = vec![
        "sh".into(),
        "-c".into(),
        "x=$(seq 1 20000 | wc -l); echo $x".into(),
    ];
    let r = record(&plan, &argv, &[], Stdio::null(), &opts).unwrap();
    eprintln!(
        "{}\n{}\n{} samples, {} dropped, {:?}",
        r.record_command,
        r.script_command,
        r.samples.samples.len(),
        r.samples.dropped,
        r.samples.sampling
    );
    assert!(r.status.success(), "{:?}", r.messages);
    assert!(r.samples.samples.len() > 50, "{}", r.samples.samples.len());
    assert_eq!(
        r.samples.by_event.keys().collect::<Vec<_>>(),
        ["page-faults"]
    );
    assert_eq!(
        r.samples.sampling,
        Sampling::Time {
            period: Some(1),
            frequency_hz: None
        }
    );
    assert!(r
        .samples
        .samples
        .iter()
        .all(|x| x.addr != 0 && x.write.is_none()));
    // Fault addresses: the page is not mapped yet for most of them, so perf
    // prints N/A; any size it does print must be a real page size.
    assert!(r
        .samples
        .samples
        .iter()
        .filter_map(|x| x.data_page_size)
        .all(|p| p == K4 || p == M2 || p == G1));
    assert!(r.data.as_ref().is_some_and(|d| d.exists()));
}

#[test]
fn record_reports_perf_failures_clearly() {
    let perf: Vec<OsString> = vec!["perf".into()];
    if !perf_available(&perf) {
        eprintln!("skipped: perf is not installed");
        return;
    }
    let plan = PerfPlan {
        mechanism: Mechanism::Generic {
            event: "no-such-event-hugetune".into(),
        },
        perf,
        data_page_size: false,
    };
    let e = record(
        &plan,
        &["true".into()],
        &[],
        Stdio::null(),
        &RecordOptions::default(),
    )
    .unwrap_err();
    let text = format!("{e:#}");
    assert!(text.contains("perf record wrote no"), "{text}");
    assert!(text.contains("no-such-event-hugetune"), "{text}");
    let e = record(&plan, &[], &[], Stdio::null(), &RecordOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no command"), "{e}");
}

#[test]
fn samples_become_a_time_sampled_reference_stream() {
    use hugetune_format::refstream::{RefReader, SamplingKind};
    let s = parse_fixture("intel-mem.txt").unwrap();
    let bytes =
        hugetune_capture::perf::write_stream(&s, Some(vec!["x".into()]), Vec::new()).unwrap();
    let mut r = RefReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().sampling, SamplingKind::Time);
    assert_eq!(r.header().source, "perf");
    let mut got = Vec::new();
    while let Some(x) = r.next_record().unwrap() {
        got.push(x);
    }
    assert_eq!(got.len(), s.samples.len());
    for (a, b) in got.iter().zip(&s.samples) {
        assert_eq!(
            (a.addr, a.write, a.thread),
            (b.addr, b.write == Some(true), b.tid)
        );
    }
    assert_eq!(r.totals().unwrap().refs_seen, s.total());
    let sizes = hugetune_capture::perf::page_size_counts(&s);
    assert_eq!(sizes["4K"], 20);
    assert_eq!(sizes["2M"], 10);
    assert_eq!(sizes["1G"], 5);
    assert_eq!(sizes["unknown"], 5);
}
