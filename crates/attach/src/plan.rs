//! What of a plan can be applied from outside: the categories to collapse and
//! the heap-large threshold (docs/attach.md). A plan comes either as the
//! planner's assignments or as a plan file (docs/formats.md §3, read here with
//! the same strictness as the runtime library: a malformed line is an error
//! naming it).
//!
//! Invariants: only THP can be given from outside (MADV_COLLAPSE makes PMD-size
//! pages of anonymous memory): a hugetlb backing becomes THP and an mTHP size
//! becomes 2 MiB, each with a note saying so; `4k` means nothing to do. The
//! directives that only the runtime library can honour (sites, pools, layout,
//! fork-safe, mapped) are accepted and noted as not applied.

use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("plan line {line}: {why}: {text:?}")]
    Bad {
        line: usize,
        why: String,
        text: String,
    },
    #[error("the plan does not start with `hugetune-plan 1`")]
    NoHeader,
}

/// The part of a plan the outside applier acts on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutsidePlan {
    /// heap-large: anonymous mappings of at least this many bytes.
    pub threshold: u64,
    pub heap_large: bool,
    pub heap_small: bool,
    /// `static` for these modules' writable segments; None is the main program.
    pub statics: Vec<Option<String>>,
    /// What was translated or left out, for the user.
    pub notes: Vec<String>,
}

/// glibc's default mmap threshold: the runtime library's default too.
pub const DEFAULT_THRESHOLD: u64 = 128 * 1024;

impl OutsidePlan {
    /// The outside part of the planner's assignments.
    pub fn from_assignments(assignments: &[(Category, Backing)], threshold: u64) -> OutsidePlan {
        let mut p = OutsidePlan {
            threshold,
            heap_large: false,
            heap_small: false,
            statics: vec![],
            notes: vec![],
        };
        for &(c, b) in assignments {
            p.take(c, b, None);
        }
        p
    }

    /// Whether there is anything to collapse.
    pub fn is_empty(&self) -> bool {
        !self.heap_large && !self.heap_small && self.statics.is_empty()
    }

    /// The categories applied, by name.
    pub fn categories(&self) -> Vec<&'static str> {
        let mut v = vec![];
        if self.heap_large {
            v.push("heap-large");
        }
        if self.heap_small {
            v.push("heap-small");
        }
        if !self.statics.is_empty() {
            v.push("static");
        }
        v
    }

    fn take(&mut self, c: Category, b: Backing, module: Option<String>) {
        if !b.is_huge() || !c.is_mappable() {
            return;
        }
        if b.uses_pool() {
            self.note(format!(
                "{c} {}: hugetlb pages cannot be given to a running process from outside; \
                 THP (2 MiB, MADV_COLLAPSE) instead",
                b.name()
            ));
        } else if b.is_mthp() {
            self.note(format!(
                "{c} {}: MADV_COLLAPSE makes 2 MiB pages only; 2 MiB THP instead",
                b.name()
            ));
        }
        match c {
            Category::HeapLarge => self.heap_large = true,
            Category::HeapSmall => self.heap_small = true,
            Category::Static => {
                if !self.statics.contains(&module) {
                    self.statics.push(module)
                }
            }
            Category::Stack | Category::Other => {}
        }
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// Reads a plan file's text: the directives the outside applier acts on,
    /// the others noted as left to the runtime library.
    pub fn parse(text: &str) -> Result<OutsidePlan, PlanError> {
        let mut p = OutsidePlan::from_assignments(&[], DEFAULT_THRESHOLD);
        let mut header = false;
        let mut seen: Vec<String> = vec![];
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.split('#').next().unwrap_or("").trim_end_matches('\r');
            let words: Vec<&str> = l.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
            if words.is_empty() {
                continue;
            }
            let bad = |why: &str| PlanError::Bad {
                line,
                why: why.to_string(),
                text: raw.chars().take(120).collect(),
            };
            if !header {
                if words != ["hugetune-plan", "1"] {
                    return Err(PlanError::NoHeader);
                }
                header = true;
                continue;
            }
            // A directive given twice is malformed (as for the library), keyed
            // like the library keys it.
            let key = match words[0] {
                "site" => words[..words.len().min(3)].join(" "),
                "pool" => words[..words.len().min(2)].join(" "),
                "static" => words
                    .get(2)
                    .map_or("static".into(), |m| format!("static {m}")),
                w => w.to_string(),
            };
            if seen.contains(&key) {
                return Err(bad("the directive is given twice"));
            }
            seen.push(key);
            let backing = |w: Option<&&str>| -> Result<Backing, PlanError> {
                w.ok_or_else(|| bad("a backing is missing"))?
                    .parse::<Backing>()
                    .map_err(|e| bad(&e))
            };
            match words[0] {
                "threshold" => {
                    if words.len() != 2 {
                        return Err(bad("`threshold N` takes one number"));
                    }
                    match words[1].parse::<u64>() {
                        Ok(n) if (1..=1 << 48).contains(&n) => p.threshold = n,
                        _ => return Err(bad("the threshold is not a number of bytes in 1..2^48")),
                    }
                }
                "heap-large" => {
                    if words.len() != 2 {
                        return Err(bad("`heap-large B` takes one backing"));
                    }
                    p.take(Category::HeapLarge, backing(words.get(1))?, None);
                }
                "heap-small" => match words.get(1) {
                    Some(&"arena") => {
                        if !(3..=4).contains(&words.len()) {
                            return Err(bad("`heap-small arena B [BYTES]`"));
                        }
                        let b = backing(words.get(2))?;
                        p.note(
                            "heap-small arena: an arena exists only inside the process; \
                             from outside the heap is collapsed in place"
                                .into(),
                        );
                        p.take(Category::HeapSmall, b, None);
                    }
                    _ => {
                        if words.len() != 2 {
                            return Err(bad("`heap-small B` takes one backing"));
                        }
                        p.take(Category::HeapSmall, backing(words.get(1))?, None);
                    }
                },
                "static" => {
                    if !(2..=3).contains(&words.len()) {
                        return Err(bad("`static B [MODULE]`"));
                    }
                    let b = backing(words.get(1))?;
                    p.take(Category::Static, b, words.get(2).map(|m| m.to_string()));
                }
                "site" => {
                    if words.len() != 4 {
                        return Err(bad("`site MODULE OFFSET B`"));
                    }
                    backing(words.get(3))?;
                    p.note(
                        "site directives need the runtime library (the caller of an allocation \
                         is not visible from outside): their memory is collapsed by category"
                            .into(),
                    );
                }
                "pool" => {
                    if words.len() != 3 {
                        return Err(bad("`pool B N`"));
                    }
                    p.note("pool: a hugetlb pool cannot be given from outside; not applied".into());
                }
                "layout" | "fork-safe" | "mapped" => {
                    if words.len() != 2 {
                        return Err(bad("this directive takes one word"));
                    }
                }
                _ => return Err(bad("unknown directive")),
            }
        }
        if !header {
            return Err(PlanError::NoHeader);
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugetlb_and_mthp_become_thp_with_a_note() {
        let p = OutsidePlan::from_assignments(
            &[
                (Category::HeapLarge, Backing::Hugetlb2m),
                (Category::HeapSmall, Backing::Thp(16)),
                (Category::Static, Backing::Base4k),
                (Category::Stack, Backing::Thp2m),
            ],
            1 << 20,
        );
        assert!(p.heap_large && p.heap_small && p.statics.is_empty());
        assert_eq!(p.threshold, 1 << 20);
        assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
        assert!(p.notes[0].contains("hugetlb") && p.notes[0].contains("THP"));
        assert!(p.notes[1].contains("2 MiB"));
        assert_eq!(p.categories(), ["heap-large", "heap-small"]);
        assert!(
            OutsidePlan::from_assignments(&[(Category::HeapLarge, Backing::Base4k)], 1).is_empty()
        );
    }

    #[test]
    fn plan_files_are_read_like_the_library_reads_them() {
        let p = OutsidePlan::parse(
            "# a plan\nhugetune-plan 1\r\nthreshold 4194304\nheap-large thp-2m  # comment\n\
             static thp-2m\nstatic hugetlb-2m /lib/libx.so\nlayout round-up\nsite /bin/p 0x1a hugetlb-2m\n",
        )
        .unwrap();
        assert_eq!(p.threshold, 4 << 20);
        assert!(p.heap_large && !p.heap_small);
        assert_eq!(p.statics, [None, Some("/lib/libx.so".to_string())]);
        assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
        for (text, err) in [
            ("heap-large thp-2m\n", "does not start"),
            ("", "does not start"),
            ("hugetune-plan 2\n", "does not start"),
            (
                "hugetune-plan 1\nheap-large thp-3m\n",
                "line 2: unknown page backing",
            ),
            ("hugetune-plan 1\nheap-large\n", "line 2: `heap-large B`"),
            ("hugetune-plan 1\nthreshold 0\n", "line 2: the threshold"),
            ("hugetune-plan 1\nthreshold -5\n", "line 2: the threshold"),
            ("hugetune-plan 1\nfrobnicate\n", "line 2: unknown directive"),
            (
                "hugetune-plan 1\nstatic thp-2m\nstatic 4k\n",
                "line 3: the directive is given twice",
            ),
            (
                "hugetune-plan 1\nheap-small arena\n",
                "line 2: `heap-small arena",
            ),
        ] {
            let e = OutsidePlan::parse(text).unwrap_err().to_string();
            assert!(e.contains(err), "{text:?}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_a_plan_or_an_error(s in "\\PC{0,200}") {
            let _ = OutsidePlan::parse(&format!("hugetune-plan 1\n{s}"));
            let _ = OutsidePlan::parse(&s);
        }
    }
}
