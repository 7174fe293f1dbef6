//! Readers for /proc and /sys files. Contents can come from other kernels (or be
//! fixtures), so parsers skip what they do not understand instead of failing.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub path: String,
}

/// Parses the text of /proc/PID/maps.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(6, ' ');
            let range = it.next()?;
            let perms = it.next()?.to_string();
            let offset = u64::from_str_radix(it.next()?, 16).ok()?;
            let _dev = it.next()?;
            let _inode = it.next()?;
            let path = it.next().unwrap_or("").trim().to_string();
            let (s, e) = range.split_once('-')?;
            Some(MapEntry {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms,
                offset,
                path,
            })
        })
        .collect()
}

/// Huge-page figures of a process, from /proc/PID/smaps_rollup (kB → bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HugeUsage {
    pub rss: u64,
    pub anon_huge: u64,
    pub hugetlb: u64,
}

impl HugeUsage {
    pub fn huge(&self) -> u64 {
        self.anon_huge + self.hugetlb
    }
    pub fn max(self, o: HugeUsage) -> HugeUsage {
        HugeUsage {
            rss: self.rss.max(o.rss),
            anon_huge: self.anon_huge.max(o.anon_huge),
            hugetlb: self.hugetlb.max(o.hugetlb),
        }
    }
    pub fn plus(self, o: HugeUsage) -> HugeUsage {
        HugeUsage {
            rss: self.rss + o.rss,
            anon_huge: self.anon_huge + o.anon_huge,
            hugetlb: self.hugetlb + o.hugetlb,
        }
    }
}

pub fn parse_smaps_rollup(text: &str) -> HugeUsage {
    let mut u = HugeUsage::default();
    for l in text.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
        match k {
            "Rss" => u.rss = kb * 1024,
            "AnonHugePages" => u.anon_huge = kb * 1024,
            "Private_Hugetlb" | "Shared_Hugetlb" => u.hugetlb += kb * 1024,
            _ => {}
        }
    }
    u
}

pub fn read_huge_usage(pid: u32) -> Option<HugeUsage> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .map(|t| parse_smaps_rollup(&t))
}

/// Children of a process (all its threads' children), from /proc/PID/task/*/children.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
        }
    }
    out
}

/// Sum of the huge page usage of `pid` and all its descendants (at most 4096
/// processes are read).
pub fn tree_usage(pid: u32) -> HugeUsage {
    let mut total = HugeUsage::default();
    let mut stack = vec![pid];
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 4096 {
            break;
        }
        if let Some(u) = read_huge_usage(p) {
            total = total.plus(u);
        }
        stack.extend(children(p));
    }
    total
}

/// Reads a small sysfs/procfs value, trimmed.
pub fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

pub fn read_u64(path: &Path) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

/// The selected value of a sysfs choice file such as `always [madvise] never`.
pub fn selected_choice(text: &str) -> Option<String> {
    let s = text.find('[')?;
    let e = text[s..].find(']')? + s;
    Some(text[s + 1..e].to_string())
}

/// What a finished process cost, as the kernel reports it: wait4's rusage and
/// the peaks sampled from /proc while it ran (capture::runner fills it in).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunStats {
    /// Exit code, or 128 + signal number when killed by a signal.
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub wall_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub max_rss_kb: u64,
    /// Peak huge page usage seen while it ran (sampled).
    pub peak: HugeUsage,
    /// The largest census of large folios seen (bytes per folio size in kB),
    /// when asked for (`RunSpec::folio_census`).
    #[serde(default)]
    pub peak_folios: Vec<(u64, u64)>,
    /// Why a server's session failed (its driver's failure, or the server's
    /// death under load); `None` for a plain command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_error: Option<String>,
    #[serde(skip)]
    pub stdout: Vec<u8>,
    #[serde(skip)]
    pub stderr: Vec<u8>,
    /// A server session's driver's stdout, when it asked for it.
    #[serde(skip)]
    pub driver_stdout: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let t =
            "55fd73c00000-55fd73c01000 r--p 00000000 fe:00 9977924                    /tmp/bss\n\
                 55fd73e00000-55fe33e00000 rw-p 00000000 00:00 0 \n\
                 55fe3c292000-55fe3c2b3000 rw-p 00000000 00:00 0                          [heap]\n\
                 garbage line\n";
        let m = parse_maps(t);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, "/tmp/bss");
        assert_eq!(m[1].path, "");
        assert_eq!(m[2].path, "[heap]");
        assert_eq!(m[2].start, 0x55fe3c292000);
        assert_eq!(m[1].perms, "rw-p");
    }

    #[test]
    fn rollup() {
        let t = "55a0-7ff [rollup]\nRss:             1048576 kB\nAnonHugePages:    2048 kB\nShared_Hugetlb:        0 kB\nPrivate_Hugetlb:  1048576 kB\nBogus\n";
        let u = parse_smaps_rollup(t);
        assert_eq!(
            u,
            HugeUsage {
                rss: 1 << 30,
                anon_huge: 2 << 20,
                hugetlb: 1 << 30
            }
        );
    }

    #[test]
    fn choices() {
        assert_eq!(
            selected_choice("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected_choice("no brackets"), None);
    }
}

// ---------------------------------------------------------------- folio census

const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
const KPF_HUGE: u64 = 1 << 17;
const KPF_THP: u64 = 1 << 22;

/// Bytes mapped in large folios, per folio size in kB, from the PFNs of
/// consecutive virtual pages (`0`: not present) and a reader of
/// `/proc/kpageflags` for a PFN range. A folio is a head page followed by its
/// tail pages, physically contiguous; only runs of four or more contiguous pages
/// (a 16 kB folio at least) are looked up. Tails whose head lies outside the
/// mapping (a folio mapped in part) and hugetlb pages (counted by the hugetlb
/// counters) are left out.
pub fn count_folios(
    pfns: &[u64],
    mut flags: impl FnMut(u64, usize) -> Option<Vec<u64>>,
) -> std::collections::BTreeMap<u64, u64> {
    let mut out = std::collections::BTreeMap::new();
    let mut i = 0;
    while i < pfns.len() {
        let mut j = i + 1;
        while j < pfns.len() && pfns[i] != 0 && pfns[j] == pfns[j - 1] + 1 {
            j += 1;
        }
        if pfns[i] != 0 && j - i >= 4 {
            if let Some(f) = flags(pfns[i], j - i) {
                let mut k = 0;
                while k < f.len() {
                    if f[k] & KPF_COMPOUND_HEAD != 0 && f[k] & KPF_HUGE == 0 && f[k] & KPF_THP != 0
                    {
                        let mut n = 1;
                        while k + n < f.len() && f[k + n] & KPF_COMPOUND_TAIL != 0 {
                            n += 1;
                        }
                        let kb = 4 * (1u64 << (63 - (n as u64).leading_zeros()));
                        *out.entry(kb).or_insert(0) += n as u64 * 4096;
                        k += n;
                    } else {
                        k += 1;
                    }
                }
            }
        }
        i = j;
    }
    out
}

/// The large folios process `pid` maps now, per folio size in kB (bytes), read
/// from its pagemap and `/proc/kpageflags`: the proof that mTHP sizes, which
/// smaps_rollup does not show, were really used. Needs root (PFNs are hidden
/// otherwise: the census is then empty).
pub fn folio_census(pid: u32) -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return vec![];
    };
    // Anonymous and private writable mappings: where the library places data.
    let ranges: Vec<(u64, u64)> = parse_maps(&maps)
        .into_iter()
        .filter(|m| m.perms.starts_with("rw") && !m.path.starts_with("[v"))
        .map(|m| (m.start, m.end))
        .collect();
    let mut total = std::collections::BTreeMap::new();
    for counts in folio_census_ranges(pid, &ranges) {
        for (kb, bytes) in counts {
            *total.entry(kb).or_insert(0) += bytes;
        }
    }
    total.into_iter().collect()
}

/// `folio_census` per address range of process `pid` (one map per range, empty
/// where PFNs cannot be read: not root, or the process is gone).
pub fn folio_census_ranges(
    pid: u32,
    ranges: &[(u64, u64)],
) -> Vec<std::collections::BTreeMap<u64, u64>> {
    use std::os::unix::fs::FileExt;
    let mut out = vec![std::collections::BTreeMap::new(); ranges.len()];
    let (Ok(pagemap), Ok(kpf)) = (
        std::fs::File::open(format!("/proc/{pid}/pagemap")),
        std::fs::File::open("/proc/kpageflags"),
    ) else {
        return out;
    };
    for (slot, &(start, end)) in out.iter_mut().zip(ranges) {
        let pages = (end.saturating_sub(start) / 4096) as usize;
        let mut pfns = Vec::with_capacity(pages.min(1 << 20));
        let mut buf = vec![0u8; 8 * 8192];
        let mut done = 0;
        while done < pages {
            let n = (pages - done).min(8192);
            let off = (start / 4096 + done as u64) * 8;
            if pagemap.read_exact_at(&mut buf[..n * 8], off).is_err() {
                break;
            }
            for e in buf[..n * 8].chunks_exact(8) {
                let v = u64::from_le_bytes(e.try_into().unwrap_or([0; 8]));
                let present = v >> 63 == 1;
                pfns.push(if present { v & ((1 << 55) - 1) } else { 0 });
            }
            done += n;
        }
        *slot = count_folios(&pfns, |start, n| {
            let mut b = vec![0u8; n * 8];
            kpf.read_exact_at(&mut b, start * 8).ok()?;
            Some(
                b.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect(),
            )
        });
    }
    out
}

/// One mapping of /proc/PID/smaps: its range and name, and what backs it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SmapsVma {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub name: String,
    pub rss: u64,
    pub anon_huge: u64,
    pub hugetlb: u64,
    /// KernelPageSize in bytes (2 MB or 1 GB for hugetlb mappings).
    pub kernel_page: u64,
    /// VmFlags: `hg` (MADV_HUGEPAGE), `nh` (MADV_NOHUGEPAGE), `ht` (hugetlb), ...
    pub flags: Vec<String>,
}

/// Parses the text of /proc/PID/smaps (bytes, from the kB fields).
pub fn parse_smaps(text: &str) -> Vec<SmapsVma> {
    let mut out: Vec<SmapsVma> = Vec::new();
    for l in text.lines() {
        if let Some(m) = parse_maps(l).into_iter().next() {
            out.push(SmapsVma {
                start: m.start,
                end: m.end,
                perms: m.perms,
                name: m.path,
                ..Default::default()
            });
            continue;
        }
        let (Some(v), Some((k, rest))) = (out.last_mut(), l.split_once(':')) else {
            continue;
        };
        let kb = || -> u64 {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                .saturating_mul(1024)
        };
        match k {
            "Rss" => v.rss = kb(),
            "AnonHugePages" => v.anon_huge = kb(),
            "Private_Hugetlb" | "Shared_Hugetlb" => v.hugetlb += kb(),
            "KernelPageSize" => v.kernel_page = kb(),
            "VmFlags" => v.flags = rest.split_whitespace().map(String::from).collect(),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod folio_tests {
    use super::*;

    #[test]
    fn smaps_mappings_with_their_backing() {
        let t = "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]\n\
Size:                132 kB\nKernelPageSize:        4 kB\nRss:                  12 kB\nAnonHugePages:         0 kB\n\
Private_Hugetlb:       0 kB\nVmFlags: rd wr mr mw me ac\n\
7f0000000000-7f0000400000 rw-p 00000000 00:0f 1234                       /anon_hugepage (deleted)\n\
Size:               4096 kB\nKernelPageSize:     2048 kB\nRss:                   0 kB\nAnonHugePages:         0 kB\n\
Private_Hugetlb:    4096 kB\nVmFlags: rd wr mr mw me de ht\n\
7f1000000000-7f1000800000 rw-p 00000000 00:00 0 \n\
Rss:                8192 kB\nAnonHugePages:      6144 kB\nKernelPageSize:        4 kB\nVmFlags: rd wr mr mw me ac hg\n";
        let v = parse_smaps(t);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].name, "[heap]");
        assert_eq!(v[0].rss, 12 << 10);
        assert_eq!((v[1].hugetlb, v[1].kernel_page), (4 << 20, 2 << 20));
        assert!(v[1].flags.contains(&"ht".to_string()));
        assert_eq!((v[2].anon_huge, v[2].rss), (6 << 20, 8 << 20));
        assert!(v[2].flags.contains(&"hg".to_string()));
        assert_eq!(v[2].name, "");
        assert!(parse_smaps("garbage\nRss: 4 kB\n").is_empty());
    }

    const H: u64 = KPF_COMPOUND_HEAD | KPF_THP;
    const T: u64 = KPF_COMPOUND_TAIL | KPF_THP;

    #[test]
    fn folios_are_counted_by_size() {
        // pfns 100..116: a 64 kB folio (16 pages); then 200..204: a 16 kB folio;
        // then two 4 kB pages (300, 302): never looked up; then a partial folio
        // (tails only) at 400..404; a hugetlb head at 500..504.
        let mut pfns: Vec<u64> = (100..116).collect();
        pfns.extend(200..204);
        pfns.extend([300, 0, 302]);
        pfns.extend(400..404);
        pfns.extend(500..504);
        let mut looked = vec![];
        let c = count_folios(&pfns, |start, n| {
            looked.push((start, n));
            Some(
                (start..start + n as u64)
                    .map(|p| match p {
                        100 | 200 => H,
                        400..=403 => T,
                        500 => KPF_COMPOUND_HEAD | KPF_HUGE,
                        501..=503 => KPF_COMPOUND_TAIL | KPF_HUGE,
                        _ => T,
                    })
                    .collect(),
            )
        });
        assert_eq!(
            c.into_iter().collect::<Vec<_>>(),
            vec![(16, 16384), (64, 65536)]
        );
        assert_eq!(looked, vec![(100, 16), (200, 4), (400, 4), (500, 4)]);
    }

    /// With 64 kB mTHP enabled (for the test, under the kernel-state lock,
    /// restored after), a 1 MB madvised buffer is seen in 64 kB folios.
    #[test]
    fn mthp_folios_are_seen_by_size() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0
            || !Path::new("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled").exists()
        {
            eprintln!("skipped: needs root and a kernel with 64 kB mTHP");
            return;
        }
        let _serial = crate::kernel_state::test_serial();
        let lock = crate::kernel_state::lock_kernel_state().unwrap();
        let _m = crate::kernel_state::set_mthp_enabled_holding(&lock, 64, "always").unwrap();
        let len = 1usize << 20;
        // SAFETY: a fresh private anonymous mapping, unmapped below; 1 MB cannot
        // hold a 2 MB folio, so the fault path picks 64 kB folios.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: writes inside the mapping.
        unsafe {
            libc::madvise(p, len, libc::MADV_HUGEPAGE);
            for i in (0..len).step_by(4096) {
                *(p as *mut u8).add(i) = 1;
            }
        }
        let c = folio_census(std::process::id());
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, len) };
        let k64 = c.iter().find(|(kb, _)| *kb == 64).map_or(0, |&(_, b)| b);
        assert!(k64 >= 64 << 10, "census {c:?}");
    }

    /// This process's own THP-backed buffer shows up as 2 MB folios (root, THP
    /// not `never`; otherwise it says why and checks nothing).
    #[test]
    fn a_madvised_buffer_is_seen_in_2mb_folios() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: pagemap PFNs need root");
            return;
        }
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if mode.contains("[never]") {
            eprintln!("skipped: THP is never");
            return;
        }
        let len = 8usize << 20;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + (2 << 20),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let aligned = ((p as usize + (2 << 20) - 1) & !((2 << 20) - 1)) as *mut u8;
        // SAFETY: inside the mapping; madvise and writes on memory we own.
        unsafe {
            assert_eq!(libc::madvise(aligned.cast(), len, libc::MADV_HUGEPAGE), 0);
            for i in (0..len).step_by(4096) {
                *aligned.add(i) = 1;
            }
        }
        let c = folio_census(std::process::id());
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, len + (2 << 20)) };
        let two_mb = c.iter().find(|(kb, _)| *kb == 2048).map_or(0, |&(_, b)| b);
        // The machine may lack free 2 MB blocks for some of them: at least one.
        assert!(two_mb >= 2 << 20, "census {c:?}");
    }
}
