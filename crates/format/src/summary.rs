//! The runtime library's exit summary (docs/formats.md §4), typed: what the tool
//! reads of it — what was backed by which page size, the verified THP and mTHP
//! bytes, the fallbacks and errors, the allocator and the plan's validity. The
//! rest (per-category and arena counters) is kept as JSON for the reports.
//!
//! Invariants: every field the library may leave out (record mode, older
//! versions) has a default; unknown fields are ignored; numbers out of range or
//! of the wrong type are an error naming the field (serde's path), never a panic.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("reading runtime summary {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("runtime summary {path} is not a valid summary: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
}

/// Bytes one backing holds (`backed.<backing>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Backed {
    pub bytes: u64,
    pub held_bytes: u64,
    pub peak_bytes: u64,
    /// THP: bytes smaps showed on huge pages.
    pub verified_bytes: u64,
    pub unverified_bytes: u64,
}

/// One entry of `fallbacks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Fallback {
    pub category: String,
    pub from: String,
    pub to: String,
    pub reason: String,
    pub count: u64,
    pub bytes: u64,
}

impl Fallback {
    /// `heap-large hugetlb-2m -> thp-2m (ENOMEM)`.
    pub fn describe(&self, arrow: &str) -> String {
        format!(
            "{} {} {arrow} {} ({})",
            self.category, self.from, self.to, self.reason
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanState {
    /// False: the plan was refused and nothing applied. Record mode has no plan
    /// (and says nothing): true.
    pub valid: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThpSizes {
    /// Bytes per folio size (`4k`, `16k`, …, `2m`).
    pub bytes: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Verify {
    pub thp_sizes: ThpSizes,
}

/// An address range the library applied something to (`owned.ranges`,
/// `static.ranges`): start as hex, mapped bytes, what got it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RangeEntry {
    pub start: String,
    pub bytes: u64,
    /// Owned blocks: their category (static ranges are `static`).
    pub category: String,
    /// The backing it got (its first segment's).
    pub backing: String,
    /// Owned blocks: the planned backing (differs after a fallback).
    pub planned: String,
}

/// `owned`: live owned blocks (apply mode; the largest 64 listed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Owned {
    pub blocks: u64,
    /// The registry was locked when a signal asked for the summary: no list.
    pub busy: bool,
    pub ranges: Vec<RangeEntry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StaticSection {
    pub ranges: Vec<RangeEntry>,
}

/// A range of the process's address space and what the library did there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedRange {
    pub start: u64,
    pub end: u64,
    /// `heap-large hugetlb-2m`, `heap-small arena thp-2m`, `static hugetlb-2m`,
    /// `heap-large thp-2m (planned hugetlb-2m)`.
    pub what: String,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// One process's summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub version: u64,
    pub pid: u64,
    pub mode: String,
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Counts the summaries this process wrote (snapshots, then the final one).
    pub sequence: u64,
    pub allocator: Option<String>,
    pub backed: BTreeMap<String, Backed>,
    pub fallbacks: Vec<Fallback>,
    pub errors: Vec<String>,
    pub plan: PlanState,
    pub verify: Verify,
    /// Hugetlb segments placed by MAP_FIXED after the kernel refused the move.
    pub moves_refused: u64,
    /// Per-category counters and the arena's, as written (the reports show them).
    pub categories: serde_json::Value,
    pub arena: serde_json::Value,
    pub owned: Owned,
    #[serde(rename = "static")]
    pub static_ranges: StaticSection,
    /// The program's own mappings the library backed at mmap time.
    pub mapped: Mapped,
    /// Plan `jvm B`: what smaps shows of the JVM's own anonymous mappings
    /// (absent without the directive).
    pub jvm: Option<Jvm>,
}

/// `jvm`: the huge pages of a JVM's own anonymous mappings at the summary
/// (plan `jvm B`, docs/formats.md §4), which the JVM's switch backed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Jvm {
    pub backing: String,
    /// AnonHugePages over the anonymous mappings.
    pub anon_huge_bytes: u64,
    /// Private_Hugetlb over them.
    pub hugetlb_bytes: u64,
    /// Adjacent anonymous mappings with any huge bytes, merged.
    pub ranges: Vec<JvmRange>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JvmRange {
    pub start: String,
    pub bytes: u64,
    pub anon_huge_bytes: u64,
    pub hugetlb_bytes: u64,
}

impl JvmRange {
    /// [start, end) when the start is a readable hex address.
    pub fn span(&self) -> Option<(u64, u64)> {
        let s = hex(&self.start)?;
        Some((s, s.saturating_add(self.bytes)))
    }
}

/// `mapped`: the program's own anonymous mappings (apply mode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mapped {
    pub mappings: u64,
    pub hugetlb_mappings: u64,
    pub thp_mappings: u64,
    pub disowned: u64,
    /// AnonHugePages over THP-backed mappings (live at the summary, or read at
    /// their munmap): what the kernel really gave.
    pub thp_verified_bytes: u64,
    pub ranges: Vec<RangeEntry>,
}

impl Summary {
    pub fn from_value(v: &serde_json::Value) -> Result<Summary, serde_json::Error> {
        Summary::deserialize(v)
    }

    pub fn read(path: &Path) -> Result<Summary, SummaryError> {
        let text = std::fs::read_to_string(path).map_err(|source| SummaryError::Io {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| SummaryError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    /// Where the library applied what: the arena's committed part, the listed
    /// owned blocks and the static ranges. Entries that do not parse (a start
    /// that is no hex number, a range past the end of the address space) are
    /// left out: the summary is the program's writing, not ours.
    pub fn applied_ranges(&self) -> Vec<AppliedRange> {
        let mut out = Vec::new();
        let mut push = |start: Option<u64>, bytes: u64, what: String| {
            if let Some(start) = start {
                if let Some(end) = start.checked_add(bytes).filter(|_| bytes > 0) {
                    out.push(AppliedRange { start, end, what });
                }
            }
        };
        let a = &self.arena;
        if a["enabled"].as_bool() == Some(true) {
            push(
                a["base"].as_str().and_then(hex),
                a["committed_bytes"].as_u64().unwrap_or(0),
                format!("heap-small arena {}", a["backing"].as_str().unwrap_or("?")),
            );
        }
        for r in &self.owned.ranges {
            let mut what = format!("{} {}", r.category, r.backing);
            if r.backing == "4k" && r.bytes < 2 << 20 {
                // Laid out on 4 KB pages by its size, not a fallback.
                what += " (smaller than a huge page)";
            } else if !r.planned.is_empty() && r.planned != r.backing {
                what += &format!(" (planned {})", r.planned);
            }
            push(hex(&r.start), r.bytes, what);
        }
        for r in &self.static_ranges.ranges {
            push(hex(&r.start), r.bytes, format!("static {}", r.backing));
        }
        for r in &self.mapped.ranges {
            push(
                hex(&r.start),
                r.bytes,
                format!("{} {} (the program's own mapping)", r.category, r.backing),
            );
        }
        out.sort_by_key(|r| r.start);
        out
    }

    fn bytes(&self, backing: &str) -> Backed {
        self.backed.get(backing).copied().unwrap_or_default()
    }

    pub fn hugetlb_2m_bytes(&self) -> u64 {
        self.bytes("hugetlb-2m").bytes
    }

    pub fn hugetlb_1g_bytes(&self) -> u64 {
        self.bytes("hugetlb-1g").bytes
    }

    /// THP 2 MB bytes smaps confirmed.
    pub fn thp_verified_bytes(&self) -> u64 {
        self.bytes("thp-2m").verified_bytes
    }

    /// Bytes in mTHP folios (below 2 MB, above 4 KB: pagemap + kpageflags).
    pub fn mthp_bytes(&self) -> u64 {
        self.verify
            .thp_sizes
            .bytes
            .iter()
            .filter(|(k, _)| k.as_str() != "4k" && k.as_str() != "2m")
            .map(|(_, v)| v)
            .sum()
    }

    /// What was really huge: hugetlb bytes plus THP bytes verified in smaps
    /// and mTHP folios counted through pagemap.
    pub fn huge_bytes(&self) -> u64 {
        self.hugetlb_2m_bytes()
            + self.hugetlb_1g_bytes()
            + self.thp_verified_bytes()
            + self.mthp_bytes()
            + self.mapped.thp_verified_bytes
            + self
                .jvm
                .as_ref()
                .map_or(0, |j| j.anon_huge_bytes + j.hugetlb_bytes)
    }

    /// The plan was refused (apply mode only).
    pub fn plan_refused(&self) -> bool {
        self.plan.valid == Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"{"version":1,"pid":7,"mode":"apply","final":true,"allocator":"glibc",
      "categories":{"heap-large":{"allocations":3}},
      "backed":{"hugetlb-2m":{"bytes":4194304,"held_bytes":0,"peak_bytes":4194304},
                "hugetlb-1g":{"bytes":0,"held_bytes":0,"peak_bytes":0},
                "thp-2m":{"bytes":6291456,"held_bytes":0,"peak_bytes":6291456,"verified_bytes":2097152,"unverified_bytes":0}},
      "fallbacks":[{"category":"heap-large","from":"hugetlb-2m","to":"thp-2m","reason":"ENOMEM","count":2,"bytes":8388608}],
      "errors":["something"],"plan":{"valid":true,"layout":"head-tail"},
      "verify":{"thp_sizes":{"bytes":{"4k":4096,"64k":65536,"2m":2097152}}},
      "moves_refused":1,"arena":{"enabled":false},"future_field":[1,2]}"#;

    #[test]
    fn reads_what_the_library_writes() {
        let s: Summary = serde_json::from_str(FULL).unwrap();
        assert_eq!(s.hugetlb_2m_bytes(), 4 << 20);
        assert_eq!(s.thp_verified_bytes(), 2 << 20);
        assert_eq!(s.huge_bytes(), (6 << 20) + 65536);
        assert_eq!(s.mthp_bytes(), 65536);
        assert_eq!(s.fallbacks[0].count, 2);
        assert_eq!(
            s.fallbacks[0].describe("->"),
            "heap-large hugetlb-2m -> thp-2m (ENOMEM)"
        );
        assert_eq!(s.allocator.as_deref(), Some("glibc"));
        assert!(!s.plan_refused());
        assert_eq!(s.moves_refused, 1);
        assert_eq!(s.categories["heap-large"]["allocations"], 3);
    }

    #[test]
    fn older_and_record_mode_summaries_take_defaults() {
        let s: Summary = serde_json::from_str(r#"{"version":1,"mode":"record"}"#).unwrap();
        assert_eq!(s.huge_bytes(), 0);
        assert!(s.fallbacks.is_empty() && !s.plan_refused());
        let r: Summary = serde_json::from_str(r#"{"plan":{"valid":false}}"#).unwrap();
        assert!(r.plan_refused());
    }

    #[test]
    fn wrong_types_are_errors_that_name_the_field() {
        let e = serde_json::from_str::<Summary>(r#"{"backed":{"hugetlb-2m":{"bytes":-1}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid value") || e.contains("expected u64"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("ht-summary-{}", std::process::id()));
        std::fs::write(&dir, "{not json").unwrap();
        let e = Summary::read(&dir).unwrap_err().to_string();
        let _ = std::fs::remove_file(&dir);
        assert!(
            e.contains("not a valid summary") && e.contains("ht-summary-"),
            "{e}"
        );
        assert!(Summary::read(Path::new("/nonexistent/s.json"))
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/s.json"));
    }

    #[test]
    fn applied_ranges_from_the_arena_owned_blocks_and_static_ranges() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"arena":{"enabled":true,"backing":"thp-2m","base":"0x7f0000000000","committed_bytes":4194304},
                "owned":{"blocks":3,"ranges":[
                  {"start":"0x7f1000000000","bytes":6291456,"category":"heap-large","backing":"thp-2m","planned":"hugetlb-2m"},
                  {"start":"0x7e0000000000","bytes":2097152,"category":"sites","backing":"hugetlb-2m","planned":"hugetlb-2m"},
                  {"start":"nothex","bytes":1,"category":"heap-large","backing":"4k"},
                  {"start":"0xffffffffffffffff","bytes":2,"category":"heap-large","backing":"4k"}]},
                "static":{"ranges":[{"start":"0x600000","bytes":2097152,"backing":"hugetlb-2m"}]}}"#,
        )
        .unwrap();
        let s = Summary::from_value(&v).unwrap();
        let r = s.applied_ranges();
        let whats: Vec<&str> = r.iter().map(|x| x.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "static hugetlb-2m",
                "sites hugetlb-2m",
                "heap-small arena thp-2m",
                "heap-large thp-2m (planned hugetlb-2m)"
            ]
        );
        assert_eq!((r[2].start, r[2].end), (0x7f00_0000_0000, 0x7f00_0040_0000));
        // An arena that is off, or a summary without these sections: nothing.
        let off = Summary::from_value(&serde_json::json!({"arena":{"enabled":false}})).unwrap();
        assert!(off.applied_ranges().is_empty());
        // Wrong types are an error naming the field, not a panic.
        let e = Summary::from_value(&serde_json::json!({"owned":{"blocks":"many"}})).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
    }
}
