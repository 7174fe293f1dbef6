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
