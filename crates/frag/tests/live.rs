//! Tests on this machine's live kernel state. Those that change state (debugfs
//! and tracefs mounts, hugetlb pools, tracefs instances) take the kernel-state lock
//! and restore everything; without root they print why they skip.

use frag::{debugfs, index, parse, scan, snapshot, trace, trial};
use std::path::Path;
use std::time::Duration;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn mounted(at: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(at))
}

/// Our integer formulas against the kernel's debugfs output, same moment.
#[test]
fn indices_match_live_debugfs() {
    let was_mounted = mounted(debugfs::DEBUGFS);
    let r = debugfs::with_debugfs(|dir| debugfs::consistent_read(dir, 200)).unwrap();
    let (bi, un, ef, consistent) = match r {
        Ok(x) => x,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    assert_eq!(
        mounted(debugfs::DEBUGFS),
        was_mounted,
        "debugfs mount state not restored"
    );
    let b = parse::parse_buddyinfo(&bi, "/proc/buddyinfo").unwrap();
    let mut compared = 0;
    for (file, text, unusable) in [("unusable_index", &un, true), ("extfrag_index", &ef, false)] {
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            let (head, vals) = l.split_at(l.find("zone").unwrap() + 4);
            let node: u32 = head
                .trim_start_matches("Node")
                .trim()
                .trim_end_matches("zone")
                .trim()
                .trim_end_matches(',')
                .parse()
                .unwrap();
            let mut toks = vals.split_whitespace();
            let zone = toks.next().unwrap();
            let bz = b.iter().find(|z| z.node == node && z.zone == zone).unwrap();
            for (o, tok) in toks.enumerate() {
                let want = index::parse_index(tok).unwrap();
                let info = index::fill_contig_page_info(&bz.free, o as u32);
                let got = if unusable {
                    index::unusable_free_index(o as u32, &info)
                } else {
                    index::fragmentation_index(o as u32, &info, 10)
                };
                if consistent {
                    assert_eq!(got, want, "{file} node {node} {zone} order {o}");
                } else {
                    // Free counts moved during every attempt: allow a little drift.
                    assert!(
                        (got - want).abs() <= 20,
                        "{file} {zone} order {o}: {got} vs {want}"
                    );
                }
                compared += 1;
            }
        }
    }
    eprintln!("compared {compared} index values with debugfs (same-moment read: {consistent})");
    assert!(compared >= 22);
}

#[test]
fn live_snapshot_reads_and_scans() {
    let s = snapshot::take(&snapshot::Paths::default(), root()).unwrap();
    assert!(!s.zones.is_empty());
    if !root() {
        eprintln!("skipped the kpageflags part: not root");
        assert!(!s.skipped.is_empty());
        return;
    }
    let info = s.scan.as_ref().expect("root scans kpageflags");
    eprintln!(
        "kpageflags scan: {} PFNs in {:.3} s ({:.0} MB/s)",
        info.pfns,
        info.seconds,
        info.bytes_read as f64 / info.seconds / 1e6
    );
    for z in &s.zones {
        let sc = z.scan.as_ref().unwrap();
        let total = sc.pages_free
            + sc.pages_movable
            + sc.pages_thp
            + sc.pages_hugetlb
            + sc.pages_unmovable
            + sc.pages_hole;
        assert_eq!(
            total, z.spanned,
            "{}: every PFN of the span classified",
            z.zone
        );
        // The inferred free memory is an upper bound of the buddy allocator's free
        // pages (up to what moved during the scan and the per-CPU lists).
        let slack = z.managed / 20 + 4096;
        assert!(
            sc.inferred_free_pages + slack >= z.free_pages,
            "{}: inferred {} vs free {}",
            z.zone,
            sc.inferred_free_pages,
            z.free_pages
        );
        assert!(sc.clean_pageblocks >= z.now_2m.allocatable.min(sc.clean_pageblocks));
    }
}

#[test]
fn scan_reads_kpageflags_in_chunks() {
    if !root() {
        eprintln!("skipped: /proc/kpageflags needs root");
        return;
    }
    let f = std::fs::File::open("/proc/kpageflags").unwrap();
    let p = Path::new("/proc/kpageflags");
    // Across a chunk boundary (4 MiB = 524288 PFNs) and past the end of memory.
    let a = scan::read_flags(&f, 524_000, 525_000, p).unwrap();
    assert_eq!(a.len(), 1000);
    let far = scan::read_flags(&f, 1 << 40, (1 << 40) + 3, p).unwrap();
    assert!(far.iter().all(|&w| w == 1 << scan::kpf::NOPAGE));
}

#[test]
fn try_raises_the_pool_and_restores_it() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let r = trial::try_pool(2048, 2).unwrap();
    assert!(r.given <= 2);
    assert_eq!(r.pool_after, r.pool_before);
    eprintln!(
        "asked 2, got {} 2 MB pages in {:.1} ms",
        r.given,
        r.seconds * 1e3
    );
    // Under the lock, the pool is where the trial found it.
    let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    let now: u64 =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert_eq!(now, r.pool_before);
}

#[test]
fn event_session_restores_tracefs() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let before = {
        let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
        let m = mounted(trace::TRACEFS);
        let enable = std::fs::read_to_string(format!(
            "{}/events/kmem/mm_page_alloc_extfrag/enable",
            trace::TRACEFS
        ))
        .ok();
        (m, enable)
    };
    let c = trace::count_extfrag(Duration::from_millis(300)).unwrap();
    eprintln!(
        "extfrag events in 0.3 s: {} ({} fragmenting)",
        c.events, c.fragmenting
    );
    let _l = hugetune_host::kernel_state::lock_kernel_state().unwrap();
    assert_eq!(
        mounted(trace::TRACEFS),
        before.0,
        "tracefs mount state restored"
    );
    let enable = std::fs::read_to_string(format!(
        "{}/events/kmem/mm_page_alloc_extfrag/enable",
        trace::TRACEFS
    ))
    .ok();
    assert_eq!(enable, before.1, "global enable switch untouched");
    if mounted(trace::TRACEFS) {
        let inst = Path::new(trace::TRACEFS)
            .join("instances")
            .join(format!("hugetune-{}", std::process::id()));
        assert!(!inst.exists(), "instance removed");
    }
}

#[test]
fn record_writes_the_v1_format() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    for name in ["r.txt", "r.txt.zst"] {
        let p = d.path().join(name);
        // Allocation pressure for as long as the recording lasts (record may
        // first wait for the kernel-state lock that another test holds).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Fresh pages every time: a mapping of our own, written and
                // unmapped (glibc's malloc would keep reusing one heap once its
                // mmap threshold rose, and a recording that began after the
                // first round would see no allocation).
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    const LEN: usize = 8 << 20;
                    // SAFETY: a private anonymous mapping of our own, written
                    // within its length and unmapped before the next round.
                    unsafe {
                        let p = libc::mmap(
                            std::ptr::null_mut(),
                            LEN,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                            -1,
                            0,
                        );
                        if p != libc::MAP_FAILED {
                            std::ptr::write_bytes(p as *mut u8, 1, LEN);
                            libc::munmap(p, LEN);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let s = trace::record(&p, Duration::from_millis(400));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().unwrap();
        let s = s.unwrap();
        let raw = std::fs::read(&p).unwrap();
        let text = if name.ends_with(".zst") {
            String::from_utf8(zstd::decode_all(&raw[..]).unwrap()).unwrap()
        } else {
            String::from_utf8(raw).unwrap()
        };
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("# hugetune-pagealloc v1"));
        assert!(text.contains("# zone node=0 name=Normal start_pfn="));
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("# dropped=") && last.contains(" failed="),
            "{last}"
        );
        let mut prev_t = 0u64;
        let mut events = 0;
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = l.split(' ').collect();
            let t: u64 = f[0].parse().unwrap();
            assert!(t >= prev_t, "times ascend");
            prev_t = t;
            match f[1] {
                "A" => assert_eq!(f.len(), 5, "{l}"),
                "F" => assert_eq!(f.len(), 4, "{l}"),
                _ => panic!("bad line {l}"),
            }
            let _pfn: u64 = f[2].parse().unwrap();
            let order: u32 = f[3].parse().unwrap();
            assert!(order <= 10);
            events += 1;
        }
        assert_eq!(events as u64, s.allocs + s.frees);
        assert!(s.allocs > 0, "some allocations in 0.4 s");
        eprintln!(
            "{name}: {} allocs, {} frees, {} dropped",
            s.allocs, s.frees, s.dropped
        );
    }
}

/// Unmovable allocation pressure (pipe buffers) while counting fallback events:
/// on this machine the Unmovable free lists run dry and allocations claim Movable
/// pageblocks. The count depends on the machine's state, so it is printed and only
/// its consistency is checked.
#[test]
fn extfrag_events_under_unmovable_pressure() {
    if !root() {
        eprintln!("skipped: needs root");
        return;
    }
    let pressure = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
        unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = lim.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        let n = ((lim.rlim_cur as usize).saturating_sub(200) / 2).min(3000);
        let buf = vec![b'x'; 65536];
        let mut fds = Vec::new();
        for _ in 0..n {
            let mut p = [0i32; 2];
            // SAFETY: pipe2 fills the two-element array; writes from our buffer.
            unsafe {
                if libc::pipe2(p.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) != 0 {
                    break;
                }
                libc::write(p[1], buf.as_ptr().cast(), buf.len());
            }
            fds.push(p);
        }
        std::thread::sleep(Duration::from_millis(500));
        for p in fds {
            // SAFETY: closing the descriptors we opened.
            unsafe {
                libc::close(p[0]);
                libc::close(p[1]);
            }
        }
        n
    });
    let c = trace::count_extfrag(Duration::from_secs(2)).unwrap();
    let pipes = pressure.join().unwrap();
    eprintln!(
        "{pipes} pipes x 64 KiB: {} fallback events ({} fragmenting, {} took the block), by type {:?}",
        c.events, c.fragmenting, c.change_ownership, c.by_migratetype
    );
    assert_eq!(c.unparsed, 0);
    let sum: u64 = c.by_migratetype.values().map(|p| p.events).sum();
    assert_eq!(sum, c.events);
    assert!(c.fragmenting <= c.events && c.change_ownership <= c.events);
}
