//! A plan's categories as ranges of a process's address space (the contract of
//! docs/attach.md, fixed in issue 19 between the static profiler and this
//! applier):
//!
//! - static: the executable's (or the named module's) private writable file
//!   mapping, and the anonymous mapping right after it (.bss beyond the file);
//! - heap-small: `[heap]`, and anonymous private rw mappings of at least 2 MiB
//!   but below the threshold;
//! - heap-large: anonymous private rw mappings of at least the threshold.
//!
//! Invariants: a mapping belongs to one category at most (static first); a
//! mapping the program marked MADV_NOHUGEPAGE (`nh`) is never a target (the
//! program asked for small pages there); only mappings whose 2 MiB-aligned
//! interior holds a whole huge page are targets.

use crate::maps::Vma;
use crate::plan::OutsidePlan;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Static,
    HeapSmall,
    HeapLarge,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Static => "static",
            Kind::HeapSmall => "heap-small",
            Kind::HeapLarge => "heap-large",
        }
    }
}

/// One planned range: a mapping and the interior of it that can be collapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    /// Index of the mapping in the list it was chosen from.
    pub vma: usize,
    /// The 2 MiB-aligned interior.
    pub start: u64,
    pub end: u64,
    /// A file mapping (the executable's writable segment): collapse works on page
    /// cache there, verified by `FilePmdMapped`.
    pub file: bool,
}

/// Why a mapping of a planned category is not a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The program advised MADV_NOHUGEPAGE.
    NoHugepage,
}

/// The planned ranges of `vmas` (one read of /proc/PID/smaps); `exe` is the
/// path /proc/PID/exe links to (as maps names it). Also returns the mappings of
/// planned categories skipped, with why.
pub fn targets(vmas: &[Vma], exe: &str, plan: &OutsidePlan) -> (Vec<Target>, Vec<(usize, Skip)>) {
    let mut kinds: Vec<Option<(Kind, bool)>> = vec![None; vmas.len()];
    for module in &plan.statics {
        let name = module.as_deref().unwrap_or(exe);
        for (i, v) in vmas.iter().enumerate() {
            if v.name != name || v.inode == 0 || !v.writable() || !v.private() {
                continue;
            }
            kinds[i] = Some((Kind::Static, true));
            if let Some(next) = vmas.get(i + 1) {
                if next.start == v.end && rw_anon(next) {
                    kinds[i + 1] = Some((Kind::Static, false));
                }
            }
        }
    }
    let mut out = vec![];
    let mut skipped = vec![];
    for (i, v) in vmas.iter().enumerate() {
        let kind = match kinds[i] {
            Some(k) => Some(k),
            None if v.name == "[heap]" && v.private() && v.writable() => {
                plan.heap_small.then_some((Kind::HeapSmall, false))
            }
            None if rw_anon(v) && v.len() >= plan.threshold => {
                plan.heap_large.then_some((Kind::HeapLarge, false))
            }
            None if rw_anon(v) && v.len() >= crate::HUGE => {
                plan.heap_small.then_some((Kind::HeapSmall, false))
            }
            None => None,
        };
        let Some((kind, file)) = kind else { continue };
        let Some((start, end)) = v.interior() else {
            continue;
        };
        if v.flags.iter().any(|f| f == "nh") {
            skipped.push((i, Skip::NoHugepage));
            continue;
        }
        out.push(Target {
            kind,
            vma: i,
            start,
            end,
            file,
        });
    }
    (out, skipped)
}

fn rw_anon(v: &Vma) -> bool {
    v.anonymous() && v.readable() && v.writable() && v.private()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::parse_smaps;
    use hugetune_model::category::Category;
    use hugetune_model::page::Backing;

    const SMAPS: &str = "\
00400000-00401000 r--p 00000000 fe:01 1311 /w
00401000-00498000 r-xp 00001000 fe:01 1311 /w
004c5000-004c8000 rw-p 000c4000 fe:01 1311 /w
004c8000-00a00000 rw-p 00000000 00:00 0 
01000000-01600000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000400000 ---p 00000000 00:00 0 
7f0000400000-7f0000c00000 rw-p 00000000 00:00 0 
7f1000000000-7f1020001000 rw-p 00000000 00:00 0 
7f2000000000-7f2000800000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me ac nh
7f3000000000-7f3000800000 rw-s 00000000 00:01 77 /dev/zero (deleted)
7f4000000000-7f4000800000 r--p 00000000 00:00 0 
7f5000000000-7f5000600000 rw-p 00000000 00:00 0 [anon:arena]
7ffd00000000-7ffd00800000 rw-p 00000000 00:00 0 [stack]
";

    fn plan(a: &[(Category, Backing)], threshold: u64) -> OutsidePlan {
        OutsidePlan::from_assignments(a, threshold)
    }

    #[test]
    fn categories_map_to_their_ranges() {
        let v = parse_smaps(SMAPS).unwrap();
        let all = plan(
            &[
                (Category::HeapLarge, Backing::Thp2m),
                (Category::HeapSmall, Backing::Thp2m),
                (Category::Static, Backing::Thp2m),
            ],
            64 << 20,
        );
        let (t, skipped) = targets(&v, "/w", &all);
        let got: Vec<(Kind, u64, u64, bool)> =
            t.iter().map(|t| (t.kind, t.start, t.end, t.file)).collect();
        assert_eq!(
            got,
            [
                // .bss after the rw segment: interior 0x600000..0xa00000 (the rw
                // file mapping itself has no interior)
                (Kind::Static, 0x600000, 0xa00000, false),
                (Kind::HeapSmall, 0x1000000, 0x1600000, false),
                // 8 MiB below the 64 MiB threshold: heap-small
                (Kind::HeapSmall, 0x7f0000400000, 0x7f0000c00000, false),
                (Kind::HeapLarge, 0x7f1000000000, 0x7f1020000000, false),
                (Kind::HeapSmall, 0x7f5000000000, 0x7f5000600000, false),
            ]
        );
        assert_eq!(skipped, [(8, Skip::NoHugepage)]);
        // heap-large only, at the default threshold: every big anonymous mapping,
        // neither the heap nor the .bss (static is not planned).
        let (t, _) = targets(
            &v,
            "/w",
            &plan(&[(Category::HeapLarge, Backing::Hugetlb2m)], 128 << 10),
        );
        let starts: Vec<u64> = t.iter().map(|t| t.start).collect();
        assert_eq!(
            starts,
            [0x600000, 0x7f0000400000, 0x7f1000000000, 0x7f5000000000],
            "the .bss is an anonymous mapping like any other when static is not planned"
        );
        assert!(t.iter().all(|t| t.kind == Kind::HeapLarge));
        // Nothing planned: nothing.
        assert!(targets(&v, "/w", &plan(&[], 1)).0.is_empty());
    }
}
