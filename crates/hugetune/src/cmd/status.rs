//! `hugetune status`: is it really huge? The machine's pools and THP modes, and
//! either the processes that hold huge pages now or, with `-p PID`, every
//! mapping of one process: how much of it is on 4 KB pages, on each mTHP size
//! (pagemap + kpageflags, root), on 2 MB THP, on 2 MB and 1 GB hugetlb pages
//! (smaps), and what asked for it (the kernel's VmFlags: `hg` MADV_HUGEPAGE,
//! `ht` hugetlb), and where hugetune's runtime library is loaded, what it
//! applied there: the arena, owned blocks and static ranges of the library's
//! summary, which status asks for through the process's
//! `HUGETUNE_SUMMARY_REQUEST` file when it has one (`hugetune service install`
//! sets it; the library answers within a second of its next allocation). Reads
//! /proc and that summary; changes nothing else.

use crate::Ctx;
use anyhow::{bail, Context, Result};
use hugetune_format::summary::{AppliedRange, Summary};
use hugetune_host::machine;
use hugetune_host::procfs::{self, SmapsVma};
use hugetune_render::{bytes, table};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {
    /// One process: every mapping and what backs it
    #[arg(short, long, value_name = "PID")]
    pid: Option<u32>,
    /// Print one JSON object
    #[arg(long)]
    json: bool,
    /// Print again every SECS seconds (Ctrl-C stops)
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// With -p: also mappings with nothing resident
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Pool {
    pub page_kb: u64,
    pub total: u64,
    pub free: u64,
    pub reserved: u64,
    pub surplus: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MappingStatus {
    pub start: String,
    pub end: String,
    pub perms: String,
    pub name: String,
    pub size: u64,
    /// Resident bytes on 4 KB pages (what is neither THP, mTHP nor hugetlb).
    pub base_4k: u64,
    /// Resident bytes per mTHP folio size in kB (root only; 2048 is THP).
    pub mthp: BTreeMap<u64, u64>,
    pub thp_2m: u64,
    pub hugetlb_2m: u64,
    pub hugetlb_1g: u64,
    /// What hugetune's library applied in this mapping, with the bytes of it
    /// (from its summary): `heap-large hugetlb-2m 512.0 MiB`.
    pub applied: Vec<String>,
    /// Who asked: "hugetlb", "MADV_HUGEPAGE", "MADV_NOHUGEPAGE" or "".
    pub advice: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessStatus {
    pub pid: u32,
    pub command: String,
    pub hugetune_loaded: bool,
    pub rss: u64,
    pub thp: u64,
    pub hugetlb: u64,
    /// Filled with -p.
    pub mappings: Vec<MappingStatus>,
    /// Whether mTHP sizes could be read (pagemap PFNs need root).
    pub folio_census: bool,
    /// With -p where the library is loaded: where its account came from, or
    /// why there is none.
    pub library_summary: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub thp_enabled: String,
    pub mthp_enabled: Vec<(u64, String)>,
    pub pools: Vec<Pool>,
    pub processes: Vec<ProcessStatus>,
}

fn command(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn hugetune_loaded(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(|l| l.ends_with("/libhugetune.so")))
}

/// One mapping's row: smaps figures, with the folio census (kB → bytes) of
/// its range when there is one.
pub fn mapping_status(v: &SmapsVma, folios: &BTreeMap<u64, u64>) -> MappingStatus {
    let hugetlb = v.hugetlb;
    let (h2, h1) = if v.kernel_page >= (1 << 30) {
        (0, hugetlb)
    } else {
        (hugetlb, 0)
    };
    // smaps counts THP in AnonHugePages; the census sees 2 MB folios too.
    let mthp: BTreeMap<u64, u64> = folios
        .iter()
        .filter(|(&kb, &b)| kb < 2048 && b > 0)
        .map(|(&k, &b)| (k, b))
        .collect();
    let small_huge: u64 = mthp.values().sum();
    let advice = if v.flags.iter().any(|f| f == "ht") {
        "hugetlb"
    } else if v.flags.iter().any(|f| f == "hg") {
        "MADV_HUGEPAGE"
    } else if v.flags.iter().any(|f| f == "nh") {
        "MADV_NOHUGEPAGE"
    } else {
        ""
    };
    MappingStatus {
        start: format!("{:x}", v.start),
        end: format!("{:x}", v.end),
        perms: v.perms.clone(),
        name: v.name.clone(),
        size: v.end.saturating_sub(v.start),
        base_4k: v.rss.saturating_sub(v.anon_huge + small_huge),
        mthp,
        thp_2m: v.anon_huge,
        hugetlb_2m: h2,
        hugetlb_1g: h1,
        applied: Vec::new(),
        advice: advice.into(),
    }
}

/// The process's environment variables that start with `HUGETUNE_` (root, or
/// the process's owner, may read them).
fn hugetune_env(pid: u32) -> BTreeMap<String, String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&c| c == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            k.starts_with("HUGETUNE_")
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// The library's latest summary of a running process, asking for a fresh one
/// when the process has a request file: (summary, where it came from) or why
/// there is none. An exit summary, or one of another pid, is not this
/// process's (a pid used again).
fn library_summary(pid: u32) -> Result<(Summary, String), String> {
    let env = hugetune_env(pid);
    let Some(tmpl) = env.get("HUGETUNE_SUMMARY").filter(|t| !t.is_empty()) else {
        return Err(
            "no HUGETUNE_SUMMARY in its environment (or not readable): what the library applied is unknown"
                .into(),
        );
    };
    let path = std::path::PathBuf::from(tmpl.replace("%p", &pid.to_string()));
    let read = || {
        Summary::read(&path)
            .ok()
            .filter(|s| s.pid == u64::from(pid) && !s.is_final)
    };
    let before = read();
    let Some(req) = env
        .get("HUGETUNE_SUMMARY_REQUEST")
        .filter(|r| !r.is_empty())
    else {
        return before
            .map(|s| (s, format!("its last summary, {}", path.display())))
            .ok_or_else(|| {
                format!(
                    "no summary at {} yet, and no HUGETUNE_SUMMARY_REQUEST to ask for one",
                    path.display()
                )
            });
    };
    // The request file: created, never written through (O_EXCL | O_NOFOLLOW);
    // one that is there already is a request still pending.
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(req);
    let seq = before.as_ref().map_or(0, |s| s.sequence);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < until {
        if let Some(s) = read().filter(|s| s.sequence > seq) {
            return Ok((s, "a summary it wrote on request just now".into()));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    before
        .map(|s| {
            (
                s,
                "its last summary (no answer within 3 s: it answers on its next allocation)".into(),
            )
        })
        .ok_or_else(|| {
            format!(
                "no summary at {}: the process did not answer the request in 3 s (it answers on its next allocation)",
                path.display()
            )
        })
}

/// What the library applied in [start, end): bytes per kind, largest first.
pub fn applied_in(ranges: &[AppliedRange], start: u64, end: u64) -> Vec<String> {
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for r in ranges {
        let lo = r.start.max(start);
        let hi = r.end.min(end);
        if lo < hi {
            *by.entry(r.what.as_str()).or_default() += hi - lo;
        }
    }
    let mut v: Vec<(&str, u64)> = by.into_iter().collect();
    v.sort_by_key(|&(_, b)| std::cmp::Reverse(b));
    v.into_iter()
        .map(|(w, b)| format!("{w} {}", bytes(b)))
        .collect()
}

fn process(pid: u32, all: bool) -> Result<ProcessStatus> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .with_context(|| format!("reading /proc/{pid}/smaps (no such process, or not yours)"))?;
    let vmas: Vec<SmapsVma> = procfs::parse_smaps(&text)
        .into_iter()
        .filter(|v| all || v.rss > 0 || v.hugetlb > 0)
        .collect();
    // The census reads 8 bytes of pagemap per 4 KB of address space: only
    // where an mTHP size below 2 MB is enabled at all, and only mappings with
    // resident pages up to 64 GiB (sanitizer shadows span terabytes).
    let mthp_on = machine::mthp_sizes(Path::new(machine::THP_SYSFS))
        .iter()
        .any(|(kb, m)| *kb < 2048 && m != "never");
    let ranges: Vec<(u64, u64)> = vmas
        .iter()
        .map(|v| {
            let size = v.end.saturating_sub(v.start);
            if mthp_on && v.rss > 16 << 10 && size <= 64 << 30 {
                (v.start, v.end)
            } else {
                (v.start, v.start) // nothing to census
            }
        })
        .collect();
    let census = procfs::folio_census_ranges(pid, &ranges);
    // PFNs (and so folio sizes) are readable as root only.
    let readable = mthp_on && std::fs::File::open("/proc/kpageflags").is_ok();
    let loaded = hugetune_loaded(pid);
    let (applied, library_summary) = if loaded {
        match library_summary(pid) {
            Ok((s, how)) => (s.applied_ranges(), Some(how)),
            Err(why) => (Vec::new(), Some(why)),
        }
    } else {
        (Vec::new(), None)
    };
    let mappings: Vec<MappingStatus> = vmas
        .iter()
        .zip(&census)
        .map(|(v, c)| MappingStatus {
            applied: applied_in(&applied, v.start, v.end),
            ..mapping_status(v, c)
        })
        .collect();
    Ok(ProcessStatus {
        pid,
        command: command(pid),
        hugetune_loaded: loaded,
        library_summary,
        rss: vmas.iter().map(|v| v.rss).sum(),
        thp: vmas.iter().map(|v| v.anon_huge).sum(),
        hugetlb: vmas.iter().map(|v| v.hugetlb).sum(),
        mappings,
        folio_census: readable,
    })
}

/// Processes holding THP or hugetlb pages now, most first.
fn holders() -> Vec<ProcessStatus> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(u) = procfs::read_huge_usage(pid) else {
            continue;
        };
        if u.huge() == 0 {
            continue;
        }
        out.push(ProcessStatus {
            pid,
            command: command(pid),
            hugetune_loaded: hugetune_loaded(pid),
            rss: u.rss,
            thp: u.anon_huge,
            hugetlb: u.hugetlb,
            mappings: Vec::new(),
            folio_census: false,
            library_summary: None,
        });
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.thp + p.hugetlb));
    out
}

pub fn status(pid: Option<u32>, all: bool) -> Result<Status> {
    let thp = Path::new(machine::THP_SYSFS);
    Ok(Status {
        thp_enabled: machine::thp_mode(thp)
            .map_or("absent".into(), |m| format!("{m:?}").to_lowercase()),
        mthp_enabled: machine::mthp_sizes(thp)
            .into_iter()
            .filter(|(_, m)| m != "never")
            .collect(),
        pools: machine::hugetlb_pools(Path::new(machine::HUGEPAGES_SYSFS))
            .into_iter()
            .map(|p| Pool {
                page_kb: p.page_kb,
                total: p.nr,
                free: p.free,
                reserved: p.resv,
                surplus: p.surplus,
            })
            .collect(),
        processes: match pid {
            Some(p) => vec![process(p, all)?],
            None => holders(),
        },
    })
}

fn size_kb(kb: u64) -> String {
    if kb >= 1 << 20 {
        format!("{}G", kb >> 20)
    } else if kb >= 1024 {
        format!("{}M", kb >> 10)
    } else {
        format!("{kb}K")
    }
}

pub fn render(s: &Status, one: bool) -> String {
    let mut out = format!("THP: {}", s.thp_enabled);
    if !s.mthp_enabled.is_empty() {
        let m: Vec<String> = s
            .mthp_enabled
            .iter()
            .map(|(kb, m)| format!("{} {m}", size_kb(*kb)))
            .collect();
        out += &format!("; mTHP: {}", m.join(", "));
    }
    out += "\n";
    for p in &s.pools {
        out += &format!(
            "hugetlb {}: {} pages, {} free, {} reserved, {} surplus\n",
            size_kb(p.page_kb),
            p.total,
            p.free,
            p.reserved,
            p.surplus
        );
    }
    if !one {
        if s.processes.is_empty() {
            out += "\nno process holds THP or hugetlb pages now\n";
            return out;
        }
        let rows: Vec<Vec<String>> = s
            .processes
            .iter()
            .take(20)
            .map(|p| {
                vec![
                    p.pid.to_string(),
                    bytes(p.rss),
                    bytes(p.thp),
                    bytes(p.hugetlb),
                    if p.hugetune_loaded { "yes" } else { "" }.into(),
                    p.command.chars().take(60).collect(),
                ]
            })
            .collect();
        out += "\n";
        out += &table(
            &["pid", "rss", "THP", "hugetlb", "hugetune", "command"],
            &rows,
        );
        out += "\n(hugetune status -p PID: every mapping of one)\n";
        return out;
    }
    for p in &s.processes {
        out += &format!(
            "\n{} {}: rss {}, THP {}, hugetlb {}{}\n",
            p.pid,
            p.command.chars().take(80).collect::<String>(),
            bytes(p.rss),
            bytes(p.thp),
            bytes(p.hugetlb),
            if p.hugetune_loaded {
                "; hugetune's runtime library is loaded"
            } else {
                ""
            }
        );
        if let Some(how) = &p.library_summary {
            out += &format!("what it applied: {how}\n");
        }
        let any_applied = p.mappings.iter().any(|m| !m.applied.is_empty());
        let rows: Vec<Vec<String>> = p
            .mappings
            .iter()
            .map(|m| {
                let mthp: Vec<String> = m
                    .mthp
                    .iter()
                    .map(|(kb, b)| format!("{}:{}", size_kb(*kb), bytes(*b)))
                    .collect();
                let z = |b: u64| if b == 0 { String::new() } else { bytes(b) };
                vec![
                    format!("{}-{}", m.start, m.end),
                    m.perms.clone(),
                    bytes(m.size),
                    z(m.base_4k),
                    mthp.join(" "),
                    z(m.thp_2m),
                    z(m.hugetlb_2m),
                    z(m.hugetlb_1g),
                    m.advice.clone(),
                    m.applied.join(", "),
                    m.name
                        .chars()
                        .rev()
                        .take(40)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect(),
                ]
            })
            .collect();
        let mut head = vec![
            "range",
            "perms",
            "size",
            "4K",
            "mTHP",
            "THP 2M",
            "hugetlb 2M",
            "hugetlb 1G",
            "asked",
            "hugetune applied",
            "name",
        ];
        let mut rows = rows;
        if !any_applied {
            // (the column only where the library's account is known)
            head.remove(9);
            for r in &mut rows {
                r.remove(9);
            }
        }
        out += &table(&head, &rows);
        out += "\n";
        if !p.folio_census && !s.mthp_enabled.iter().all(|(kb, _)| *kb >= 2048) {
            out += "(mTHP sizes need root: pagemap hides page frames otherwise)\n";
        }
    }
    out
}

pub fn run(_ctx: &Ctx, a: Args) -> Result<i32> {
    if let Some(w) = a.watch {
        if !(w > 0.0 && w.is_finite()) {
            bail!("--watch takes a positive number of seconds");
        }
    }
    loop {
        let s = status(a.pid, a.all)?;
        if a.json {
            println!("{}", serde_json::to_string(&s)?);
        } else {
            if a.watch.is_some() {
                print!("\x1b[H\x1b[2J");
            }
            print!("{}", render(&s, a.pid.is_some()));
        }
        match a.watch {
            Some(w) => std::thread::sleep(std::time::Duration::from_secs_f64(w)),
            None => return Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_split_by_what_backs_it() {
        let v = SmapsVma {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0100_0000,
            perms: "rw-p".into(),
            name: String::new(),
            rss: 12 << 20,
            anon_huge: 8 << 20,
            hugetlb: 0,
            kernel_page: 4096,
            flags: vec!["rd".into(), "wr".into(), "hg".into()],
        };
        let folios = BTreeMap::from([(64, 2 << 20), (2048, 8 << 20)]);
        let m = mapping_status(&v, &folios);
        assert_eq!(m.thp_2m, 8 << 20);
        assert_eq!(m.mthp, BTreeMap::from([(64, 2 << 20)]));
        assert_eq!(m.base_4k, 2 << 20);
        assert_eq!(m.advice, "MADV_HUGEPAGE");
        let h = SmapsVma {
            hugetlb: 1 << 30,
            kernel_page: 1 << 30,
            rss: 0,
            anon_huge: 0,
            flags: vec!["ht".into()],
            ..v
        };
        let m = mapping_status(&h, &BTreeMap::new());
        assert_eq!((m.hugetlb_1g, m.hugetlb_2m, m.base_4k), (1 << 30, 0, 0));
        assert_eq!(m.advice, "hugetlb");
    }

    #[test]
    fn this_process_and_the_machine() {
        let s = status(Some(std::process::id()), false).unwrap();
        assert_eq!(s.processes.len(), 1);
        let p = &s.processes[0];
        assert!(p.rss > 0 && !p.mappings.is_empty());
        assert!(p
            .mappings
            .iter()
            .any(|m| m.name == "[stack]" || m.name == "[heap]"));
        let text = render(&s, true);
        assert!(
            text.starts_with("THP: ") && text.contains("hugetlb 2M"),
            "{text}"
        );
        assert!(status(Some(u32::MAX), false).is_err());
    }
}
