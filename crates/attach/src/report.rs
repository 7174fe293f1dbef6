//! What an outside application did, as `hugetune run` prints it and stores it
//! (the counterpart of the runtime library's exit summary, docs/attach.md).
//!
//! Invariants: `huge_bytes` is the largest total verified in smaps at one
//! moment (never a sum over moments, so a range freed and another mapped do not
//! count twice); a range's `huge_bytes` is the largest seen for it, at most its
//! interior; mappings that merged into one are one range from then on; failures are counted in refused MADV_COLLAPSE calls (up to
//! 32 MiB each) per errno name. The tracer's part (`trace`, docs/attach.md
//! "At fault time") counts what it advised inside the program; its advised
//! bytes are the ranges it named, what became huge is still `huge_bytes`.

use crate::ranges::Kind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RangeReport {
    pub category: String,
    /// The mapping (as last seen).
    pub mapping_start: u64,
    pub mapping_end: u64,
    /// The 2 MiB-aligned interior that was planned.
    pub start: u64,
    pub end: u64,
    /// Resident bytes of the mapping at the last look.
    pub rss: u64,
    /// The most bytes of it seen huge in smaps (AnonHugePages, FilePmdMapped for
    /// a file mapping).
    pub huge_bytes: u64,
    /// Bytes MADV_COLLAPSE reported collapsed.
    pub collapsed_bytes: u64,
    /// Bytes of the interior left alone at the last look because the program
    /// had populated less than half of their 2 MiB piece.
    pub unpopulated_bytes: u64,
    /// Refused calls per reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, u64>,
}

impl RangeReport {
    pub fn planned_bytes(&self) -> u64 {
        self.end - self.start
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub pid: u32,
    /// /proc/PID/exe.
    pub program: String,
    /// The categories applied (`heap-large`, `heap-small`, `static`).
    pub categories: Vec<String>,
    pub ranges: Vec<RangeReport>,
    /// The largest total of planned interiors seen at one look.
    pub planned_bytes: u64,
    /// The largest total verified huge at one look (smaps).
    pub huge_bytes: u64,
    pub collapsed_bytes: u64,
    /// Refused MADV_COLLAPSE calls per reason (errno name), over all ranges.
    pub failures: BTreeMap<String, u64>,
    /// Mappings of planned categories left alone, per reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, u64>,
    /// Looks at the process (smaps reads followed by collapses).
    pub passes: u64,
    pub collapse_calls: u64,
    /// Seconds spent in MADV_COLLAPSE calls, and from attach to the end.
    pub collapse_s: f64,
    pub elapsed_s: f64,
    /// How it ended: `once`, `exited` (the process ended), `duration`, `stopped`.
    pub ended: String,
    /// Translations and limits (hugetlb as THP, directives not applied, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the fault-time tracer did (a program `hugetune run` started; absent
    /// for `run -p`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceReport>,
}

/// Calls advised and the bytes they named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advised {
    pub calls: u64,
    pub bytes: u64,
}

/// The fault-time tracer's account (crate::trace).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceReport {
    /// Whether the program ran under the tracer with its seccomp filter (its
    /// mmap, mremap, mprotect and brk calls stopped and the planned ones
    /// advised).
    pub ran: bool,
    /// Why it did not, in one line (the collapse watcher then works alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    /// MADV_HUGEPAGE injected at the calls' exits, per category.
    pub advised: BTreeMap<String, Advised>,
    /// Injections that did not advise, per category and reason
    /// (`heap-large: madvise EINVAL`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, u64>,
    /// Calls of a planned size left alone, per reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, u64>,
    /// Seccomp stops handled (one per traced call).
    pub stops: u64,
    /// Processes and threads followed (the program's included).
    pub processes: u64,
    pub threads: u64,
    /// Seconds the tracer spent handling stops (the program's threads wait
    /// while their own stop is handled).
    pub handling_s: f64,
}

impl TraceReport {
    pub fn advised_calls(&self) -> u64 {
        self.advised.values().map(|a| a.calls).sum()
    }
    pub fn advised_bytes(&self) -> u64 {
        self.advised.values().map(|a| a.bytes).sum()
    }
    pub(crate) fn fail(&mut self, kind: Kind, why: &str) {
        *self
            .failures
            .entry(format!("{}: {why}", kind.name()))
            .or_default() += 1;
    }
    pub(crate) fn skip(&mut self, why: &str) {
        *self.skipped.entry(why.to_string()).or_default() += 1;
    }
}

impl Report {
    /// Planned and huge bytes per category (each range at its largest).
    pub fn per_category(&self) -> Vec<(String, u64, u64)> {
        let mut m: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for r in &self.ranges {
            let e = m.entry(r.category.as_str()).or_default();
            e.0 += r.planned_bytes();
            e.1 += r.huge_bytes;
        }
        m.into_iter()
            .map(|(c, (p, h))| (c.to_string(), p, h))
            .collect()
    }

    /// Collapse throughput: bytes collapsed per second of MADV_COLLAPSE.
    pub fn throughput(&self) -> Option<f64> {
        (self.collapse_s > 0.0 && self.collapsed_bytes > 0)
            .then(|| self.collapsed_bytes as f64 / self.collapse_s)
    }

    /// Failures as `N × REASON` text, None without any.
    pub fn failure_text(&self) -> Option<String> {
        if self.failures.is_empty() {
            return None;
        }
        Some(
            self.failures
                .iter()
                .map(|(r, n)| format!("{n} × {r}"))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }

    pub(crate) fn range_mut(&mut self, kind: Kind, mapping_start: u64) -> &mut RangeReport {
        let i = match self
            .ranges
            .iter()
            .position(|r| r.mapping_start == mapping_start && r.category == kind.name())
        {
            Some(i) => i,
            None => {
                self.ranges.push(RangeReport {
                    category: kind.name().to_string(),
                    mapping_start,
                    ..Default::default()
                });
                self.ranges.len() - 1
            }
        };
        &mut self.ranges[i]
    }

    /// Folds the ranges of `kind` whose planned interior lies inside
    /// [start, end), the interior of the mapping at `mapping_start`, into that
    /// mapping's range: mappings that merged (adjacent chunks, advised alike)
    /// are reported once, not once per mapping they were.
    pub(crate) fn fold_merged(&mut self, kind: Kind, mapping_start: u64, start: u64, end: u64) {
        let (inside, keep): (Vec<RangeReport>, Vec<RangeReport>) =
            std::mem::take(&mut self.ranges).into_iter().partition(|r| {
                r.category == kind.name()
                    && r.mapping_start != mapping_start
                    && r.start < r.end
                    && r.start >= start
                    && r.end <= end
            });
        self.ranges = keep;
        if inside.is_empty() {
            return;
        }
        let x = self.range_mut(kind, mapping_start);
        for r in inside {
            x.collapsed_bytes += r.collapsed_bytes;
            x.huge_bytes = x.huge_bytes.max(r.huge_bytes);
            for (k, n) in r.failures {
                *x.failures.entry(k).or_default() += n;
            }
        }
    }

    pub(crate) fn fail(&mut self, kind: Kind, mapping_start: u64, reason: &str) {
        *self.failures.entry(reason.to_string()).or_default() += 1;
        *self
            .range_mut(kind, mapping_start)
            .failures
            .entry(reason.to_string())
            .or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_and_failures_are_summed() {
        let mut r = Report::default();
        for (k, s, e, h) in [
            (Kind::HeapLarge, 0x200000u64, 0x600000u64, 0x400000u64),
            (Kind::HeapLarge, 0x800000, 0xa00000, 0),
            (Kind::Static, 0x1000000, 0x1200000, 0x200000),
        ] {
            let x = r.range_mut(k, s);
            x.start = s;
            x.end = e;
            x.huge_bytes = h;
        }
        r.fail(Kind::HeapLarge, 0x800000, "ENOMEM");
        r.fail(Kind::HeapLarge, 0x800000, "ENOMEM");
        r.fail(Kind::Static, 0x1000000, "EINVAL");
        assert_eq!(
            r.per_category(),
            [
                ("heap-large".to_string(), 6 << 20, 4 << 20),
                ("static".to_string(), 2 << 20, 2 << 20)
            ]
        );
        assert_eq!(r.failure_text().unwrap(), "1 × EINVAL, 2 × ENOMEM");
        assert_eq!(r.ranges[1].failures["ENOMEM"], 2);
        // Two chunks that merged into one mapping are one range from then on.
        let mut m = Report::default();
        for (s, e, h) in [
            (0x4000000u64, 0x6000000u64, 32 << 20),
            (0x2000000, 0x4000000, 16 << 20),
        ] {
            let x = m.range_mut(Kind::HeapLarge, s);
            (x.start, x.end, x.huge_bytes, x.collapsed_bytes) = (s, e, h, h);
        }
        m.fold_merged(Kind::HeapLarge, 0x2000000, 0x2000000, 0x6000000);
        assert_eq!(m.ranges.len(), 1, "{m:#?}");
        assert_eq!(m.ranges[0].collapsed_bytes, 48 << 20);
        assert_eq!(
            m.per_category()[0].2,
            32 << 20,
            "the largest, until smaps says more"
        );
        // Another category's range, or one outside the interior, stays.
        m.range_mut(Kind::HeapSmall, 0x4000000).end = 0x200000;
        m.fold_merged(Kind::HeapLarge, 0x0, 0x0, 0x6000000);
        assert_eq!(m.ranges.len(), 2, "{m:#?}");

        // The tracer's account: advised per category, failures per category
        // and reason.
        let mut t = TraceReport::default();
        t.advised.insert(
            "heap-large".into(),
            Advised {
                calls: 2,
                bytes: 96 << 20,
            },
        );
        t.advised.insert(
            "heap-small".into(),
            Advised {
                calls: 1,
                bytes: 4 << 20,
            },
        );
        t.fail(Kind::HeapLarge, "madvise EINVAL");
        t.fail(Kind::HeapLarge, "madvise EINVAL");
        t.skip("already advised");
        assert_eq!((t.advised_calls(), t.advised_bytes()), (3, 100 << 20));
        assert_eq!(t.failures["heap-large: madvise EINVAL"], 2);
        assert_eq!(t.skipped["already advised"], 1);
        r.trace = Some(t);
        let back: Report = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
