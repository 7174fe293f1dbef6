//! The planner: which categories go on which huge pages, given what the machine
//! can give now. Every analysed mapping has an exact prediction, so the planner
//! picks the feasible one with the largest predicted saving (a knapsack over a
//! handful of items), then drops categories that do not earn their pages.

use crate::category::Category;
use crate::page::{Backing, SIZE_2M};
use crate::rank::{PlannedSite, Prediction, Significance};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    Always,
    #[default]
    Madvise,
    Never,
}

/// What the machine can give right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// Free, unreserved 2 MB hugetlb pages (or the budget the user allows).
    pub hugetlb_2m_free: u64,
    /// The 2 MB pool's size (0: unknown or a budget): with `hugetlb_2m_free`,
    /// how much of it other programs hold (the multi-program PMB bar).
    #[serde(default)]
    pub hugetlb_2m_total: u64,
    /// Free, unreserved 1 GB hugetlb pages.
    #[serde(default)]
    pub hugetlb_1g_free: u64,
    pub thp: ThpMode,
    /// mTHP folio sizes (shifts 14..=20) whose control lets `MADV_HUGEPAGE` use them.
    #[serde(default)]
    pub mthp: Vec<u8>,
    /// THP sizes (shifts 14..=21) whose per-size control hugetune can set for a
    /// run (root, the control writable): an mTHP size here is plannable even
    /// while its control reads `never`, because the run sets it
    /// ([`thp_controls`]) and puts it back afterwards.
    #[serde(default)]
    pub thp_settable: Vec<u8>,
    /// 2 MB blocks the buddy allocator can hand out now (free order >= 9 blocks
    /// within the watermarks; `hugetune frag`): how many THP folios a fault can
    /// get without compaction. None: unknown (not limited).
    #[serde(default)]
    pub thp_2m_allocatable: Option<u64>,
}

/// The share of a mapping's 2 MB THP folios that the free 2 MB blocks can back
/// now (fragmentation); the rest fault in as 4 KB pages unless compaction helps.
pub fn thp_coverage(p: &Prediction, avail: &Availability) -> f64 {
    let uses_thp2m = p.assignments.iter().any(|&(_, b)| b == Backing::Thp2m)
        || p.sites.iter().any(|s| s.backing == Backing::Thp2m);
    match avail.thp_2m_allocatable {
        Some(n) if uses_thp2m && p.thp_pages > n => n as f64 / p.thp_pages as f64,
        _ => 1.0,
    }
}

/// What the profile says about the program beyond its references.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramTraits {
    /// The program calls `fork` (in the profile or the sizing run). Private
    /// hugetlb pages it touched before a fork are shared copy-on-write with the
    /// child, and the first write after the fork needs a fresh huge page: SIGBUS
    /// when the pool has none left. Such programs get THP instead (seed 002;
    /// the runtime library also copies at fork when it still holds hugetlb).
    #[serde(default)]
    pub forks: bool,
    /// Children seen forking in the profile (0 when only failed forks were seen).
    #[serde(default)]
    pub fork_children: u64,
    /// How often the program cut one of its own mappings (partial munmap,
    /// mremap, `MAP_FIXED` over part, mprotect or madvise of part) where a
    /// hugetlb backing would have to be copied away first. Non-zero: its
    /// mappings get THP (plan `mapped thp`), which the kernel splits safely.
    #[serde(default)]
    pub mapping_cuts: u64,
    /// The plan is applied from outside the process: the runtime library cannot
    /// enter the program (static or Go binaries,
    /// `hugetune_capture::elf::preload_can_enter`), so the plan is carried out
    /// with `process_madvise(MADV_COLLAPSE)` on the ranges of /proc/PID/maps.
    /// Only THP backings then (hugetlb pages cannot be given to memory a
    /// process mapped itself), and no allocation sites (the ranges do not say
    /// which call made them).
    #[serde(default)]
    pub outside: bool,
    /// The program is a Java virtual machine: `libjvm.so` was loaded
    /// ([`is_jvm_module`]). Its heap is memory the JVM maps and commits itself
    /// (category `other`); the JVM's own huge page switch backs it (plan `jvm`,
    /// docs/runtimes.md).
    #[serde(default)]
    pub jvm: bool,
}

/// Whether a loaded module is a JVM's library (`libjvm.so`: HotSpot's; OpenJ9
/// ships one too).
pub fn is_jvm_module(path: &str) -> bool {
    path.rsplit('/').next() == Some("libjvm.so")
}

/// What a plan applied from outside the process can do, said in its reasons.
pub const OUTSIDE_REASON: &str = "the runtime library cannot enter this program (static or Go): \
    its plan is applied from outside the process, process_madvise(MADV_COLLAPSE) on the planned \
    ranges of /proc/PID/maps, so THP backings only: no hugetlb, pool, arena or allocation sites";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanDecision {
    /// What to apply; empty (and no sites): run unchanged.
    pub assignments: Vec<(Category, Backing)>,
    /// Allocation sites to place on huge pages (a per-site mapping).
    #[serde(default)]
    pub sites: Vec<PlannedSite>,
    pub prediction: Option<Prediction>,
    /// Human-readable reasons, in the order the planner considered them.
    pub reasons: Vec<String>,
    /// A JVM's heap on huge pages through the JVM's own switch (plan `jvm B`,
    /// `thp-2m` or `hugetlb-2m`); set by hugetune's JVM planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jvm: Option<Backing>,
    /// The model's prediction for the JVM's heap on THP (mapping `jvm`,
    /// `Prediction::is_jvm_heap`) when `jvm` is planned: what the switch is
    /// predicted to save, apart from `prediction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jvm_prediction: Option<Prediction>,
    /// The shared pool weighed against per-allocation pages for the plan's
    /// hugetlb-2m blocks ([`choose_pool`]); `chosen`: the plan writes
    /// `pool hugetlb-2m N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::pool::PoolWeighing>,
    /// The per-size THP controls its runs need ([`thp_controls`]): set for each
    /// run with the plan applied, restored after it; empty for most plans.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thp_controls: Vec<ThpControl>,
}

/// One per-size THP control (`transparent_hugepage/hugepages-<kb>kB/enabled`)
/// as a run needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThpControl {
    /// Folio size in kB (64 for `hugepages-64kB`, 2048 for PMD THP).
    pub kb: u64,
    /// `madvise` (the planned mTHP size) or `never` (a larger size that would
    /// take the planned size's advised ranges).
    pub mode: String,
}

impl ThpControl {
    pub fn text(&self) -> String {
        format!("hugepages-{}kB/enabled = {}", self.kb, self.mode)
    }
}

/// The backings of a plan's categories and sites.
pub fn plan_backings(assignments: &[(Category, Backing)], sites: &[PlannedSite]) -> Vec<Backing> {
    assignments
        .iter()
        .map(|&(_, b)| b)
        .chain(sites.iter().map(|s| s.backing))
        .collect()
}

/// The THP folio sizes (shifts) a plan's backings ask `MADV_HUGEPAGE` for,
/// 2 MB included.
fn thp_shifts(backings: &[Backing]) -> Vec<u8> {
    let mut v: Vec<u8> = backings
        .iter()
        .filter_map(|&b| match b {
            Backing::Thp(s) => Some(s),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The per-size THP controls a run of this plan needs, from what `avail` says
/// is usable now. The controls are system-wide and `MADV_HUGEPAGE` gives a
/// range the largest enabled size that fits, so a plan with an mTHP size S
/// needs S at `madvise` (unless usable already), every larger usable mTHP size
/// at `never`, and PMD THP (`hugepages-2048kB`) at `never` unless the plan has
/// a 2 MB THP category itself (then no mTHP size: `feasible` refuses the mix).
/// Empty for a plan without mTHP: nothing changes for it.
/// `backings`: the plan's ([`plan_backings`]).
pub fn thp_controls(backings: &[Backing], avail: &Availability) -> Vec<ThpControl> {
    let shifts = thp_shifts(backings);
    let Some(&s) = shifts.iter().find(|&&s| (s as u32) < crate::page::SHIFT_2M) else {
        return vec![];
    };
    let kb = |s: u8| 1u64 << (s - 10);
    let mut out = Vec::new();
    if !avail.mthp.contains(&s) {
        out.push(ThpControl {
            kb: kb(s),
            mode: "madvise".into(),
        });
    }
    let mut larger: Vec<u8> = avail.mthp.iter().copied().filter(|&t| t > s).collect();
    larger.sort_unstable();
    for t in larger {
        out.push(ThpControl {
            kb: kb(t),
            mode: "never".into(),
        });
    }
    if !shifts.contains(&(crate::page::SHIFT_2M as u8)) && avail.thp != ThpMode::Never {
        out.push(ThpControl {
            kb: 2048,
            mode: "never".into(),
        });
    }
    out
}

impl PlanDecision {
    /// 2 MB hugetlb pages the plan needs: the prediction's, with a chosen
    /// pool's pages in place of the per-allocation pages it replaces.
    pub fn hugetlb_pages(&self) -> u64 {
        let pages = self.prediction.as_ref().map_or(0, |p| p.hugetlb_pages);
        match &self.pool {
            Some(w) if w.chosen => pages.saturating_sub(w.replaces) + w.profile.all_pool_pages(),
            _ => pages,
        }
    }

    /// `pool hugetlb-2m N` when the plan takes the pool.
    pub fn pool_2m(&self) -> Option<u64> {
        self.pool.as_ref().filter(|w| w.chosen).map(|w| w.pages)
    }

    /// What the applied plan is predicted to save: the planner's prediction;
    /// the JVM heap's (`jvm_prediction`) where only the JVM's switch is
    /// planned; both savings added where both are (two mappings predicted
    /// apart, labelled as the plan is: `heap-small:thp+jvm:thp-2m`).
    pub fn applied_prediction(&self) -> Option<Prediction> {
        let jvm = self.jvm.and(self.jvm_prediction.as_ref());
        match (&self.prediction, jvm) {
            (p, None) => p.clone(),
            (None, Some(j)) => Some(j.clone()),
            (Some(p), Some(j)) => {
                // speedup = native / predicted seconds, exactly (the saving
                // may have been capped at 99 % of the run).
                let native = p.predicted_seconds * p.predicted_speedup;
                let saving = p.saving_ns + j.saving_ns;
                let seconds = (native - saving / 1e9).max(native * 0.01);
                let mut c = p.clone();
                c.label = self.label();
                c.mapping = format!("{}+jvm", p.mapping);
                c.assignments.extend(j.assignments.iter().copied());
                c.base = false;
                c.miss_time_ns = p.miss_time_ns - j.saving_ns;
                c.saving_ns = saving;
                c.predicted_seconds = seconds;
                c.predicted_speedup = if seconds > 0.0 { native / seconds } else { 1.0 };
                c.thp_pages += j.thp_pages;
                Some(c)
            }
        }
    }

    /// The applied mapping's label (a directive's `mapping`); empty when nothing is applied.
    pub fn label(&self) -> String {
        let own = self
            .prediction
            .as_ref()
            .map_or(String::new(), |p| p.label.clone());
        match self.jvm {
            Some(b) if own.is_empty() => format!("jvm:{b}"),
            Some(b) => format!("{own}+jvm:{b}"),
            None => own,
        }
    }
}

fn uses_hugetlb(p: &Prediction) -> bool {
    p.assignments.iter().any(|&(_, b)| b.uses_pool())
        || p.sites.iter().any(|s| s.backing.uses_pool())
}

/// What hugetune cannot back in a category, and what would (None: a directive
/// can back it).
fn unbackable(c: Category) -> Option<&'static str> {
    match c {
        Category::Stack => Some(
            "no directive backs stacks; THP `always` would (transparent_hugepage/enabled), \
             as would a thread stack the program maps itself",
        ),
        Category::Other => Some(
            "file-backed, shared or reserved mappings and memory of allocators hugetune does \
             not see; THP `always` would back their anonymous private part, file data needs \
             hugetlbfs or tmpfs with huge=",
        ),
        Category::Static | Category::HeapSmall | Category::HeapLarge => None,
    }
}

/// Where the TLB misses are (the modelled page walks with 4 KB pages): the
/// share in memory hugetune cannot back, per category with what would back it,
/// and the share it can. Said whenever a plan is empty.
pub fn miss_shares_text(sig: &Significance) -> String {
    let total: u64 = sig.walks_by_category.iter().map(|&(_, w)| w).sum();
    if sig.walks_by_category.is_empty() {
        return "where the TLB misses are is not known: the profile was stored before hugetune \
                counted them per category (analyze it again)"
            .into();
    }
    if total == 0 {
        return "the model predicts no TLB misses with 4 KB pages".into();
    }
    let pct = |w: u64| 100.0 * w as f64 / total as f64;
    // Categories under 0.05 % would print as 0.0 %: left out.
    let mut walks: Vec<(Category, u64)> = sig
        .walks_by_category
        .iter()
        .copied()
        .filter(|&(_, w)| pct(w) >= 0.05)
        .collect();
    walks.sort_by_key(|w| std::cmp::Reverse(w.1));
    let cannot: Vec<String> = walks
        .iter()
        .filter_map(|&(c, w)| {
            unbackable(c).map(|what| format!("{c}: {:.1} % of misses — {what}", pct(w)))
        })
        .collect();
    let can: Vec<String> = walks
        .iter()
        .filter(|&&(c, _)| unbackable(c).is_none())
        .map(|&(c, w)| format!("{c} {:.1} %", pct(w)))
        .collect();
    let cannot_w: u64 = sig
        .walks_by_category
        .iter()
        .filter(|&&(c, _)| unbackable(c).is_some())
        .map(|&(_, w)| w)
        .sum();
    let mut s = format!(
        "TLB misses with 4 KB pages: {:.1} % in memory hugetune cannot back",
        pct(cannot_w)
    );
    if !cannot.is_empty() {
        s += &format!(" ({})", cannot.join("; "));
    }
    s += &format!(", {:.1} % in memory it can back", pct(total - cannot_w));
    if !can.is_empty() {
        s += &format!(" ({})", can.join(", "));
    }
    s
}

/// Why the program's own mappings take THP where the chosen mapping says
/// hugetlb (plan `mapped thp`): the profile saw them cut.
fn mapped_thp_reason(p: &Prediction, program: &ProgramTraits) -> Option<String> {
    let hugetlb_large = p
        .assignments
        .iter()
        .any(|&(c, b)| c == Category::HeapLarge && b.uses_pool())
        || p.sites.iter().any(|s| s.backing.uses_pool());
    (program.mapping_cuts > 0 && hugetlb_large).then(|| {
        format!(
            "the program's own mappings: THP (MADV_HUGEPAGE) instead of hugetlb: the profile \
             shows {} {} of them (partial munmap, mremap, MAP_FIXED, mprotect or madvise of \
             part), which the kernel splits safely on THP; hugetlb stays for malloc'd blocks",
            program.mapping_cuts,
            if program.mapping_cuts == 1 {
                "cut"
            } else {
                "cuts"
            }
        )
    })
}

fn feasible(p: &Prediction, avail: &Availability, program: &ProgramTraits) -> Result<(), String> {
    if program.outside {
        if !p.sites.is_empty() {
            return Err(
                "applied from outside the process, which cannot tell allocation \
                        sites apart"
                    .into(),
            );
        }
        if let Some(&(_, b)) = p
            .assignments
            .iter()
            .find(|&&(_, b)| !b.is_thp() && b.is_huge())
        {
            return Err(format!(
                "{b}: applied from outside the process, which can collapse memory into \
                 THP only"
            ));
        }
    }
    if program.forks && uses_hugetlb(p) {
        return Err(format!(
            "the program forks ({} {} in the profile): private hugetlb pages shared \
             copy-on-write with a child can SIGBUS when the pool runs dry",
            program.fork_children,
            if program.fork_children == 1 {
                "child"
            } else {
                "children"
            }
        ));
    }
    if p.hugetlb_pages > avail.hugetlb_2m_free {
        return Err(format!(
            "needs {} hugetlb 2 MB pages, {} available",
            p.hugetlb_pages, avail.hugetlb_2m_free
        ));
    }
    if p.hugetlb_1g_pages > avail.hugetlb_1g_free {
        return Err(format!(
            "needs {} hugetlb 1 GB pages, {} available",
            p.hugetlb_1g_pages, avail.hugetlb_1g_free
        ));
    }
    if avail.thp == ThpMode::Never && p.assignments.iter().any(|&(_, b)| b == Backing::Thp2m) {
        return Err("needs THP, which is disabled (transparent_hugepage/enabled = never)".into());
    }
    let backings = plan_backings(&p.assignments, &p.sites);
    let shifts = thp_shifts(&backings);
    if shifts.len() > 1 {
        let names: Vec<String> = shifts.iter().map(|&s| Backing::Thp(s).name()).collect();
        return Err(format!(
            "{} in one plan: the per-size THP controls are system-wide and MADV_HUGEPAGE gives \
             every advised range the largest enabled size that fits, so the smaller size's \
             category would get the larger folios where aligned",
            names.join(" and ")
        ));
    }
    if let Some(&(_, b)) = p.assignments.iter().find(|&&(_, b)| b.is_mthp()) {
        if program.outside {
            return Err(format!(
                "{b}: applied from outside the process, whose MADV_COLLAPSE makes 2 MB folios only"
            ));
        }
        if let Backing::Thp(s) = b {
            if !avail.mthp.contains(&s) && !avail.thp_settable.contains(&s) {
                return Err(format!(
                    "needs {b} folios, which are disabled (hugepages-{}kB/enabled), and hugetune \
                     cannot enable them for the run (that needs root)",
                    b.folio_bytes() >> 10
                ));
            }
        }
        for c in thp_controls(&backings, avail) {
            let shift = (c.kb.trailing_zeros() + 10) as u8;
            if c.mode == "never" && !avail.thp_settable.contains(&shift) {
                return Err(format!(
                    "needs {} for its runs (else its advised ranges get {} folios where \
                     aligned), which hugetune cannot set (that needs root)",
                    c.text(),
                    crate::page::size_name(c.kb << 10)
                ));
            }
        }
    }
    Ok(())
}

/// What the planner weighs besides the predictions.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Smallest predicted saving, as a fraction of the native run time, that
    /// justifies placing a category on huge pages.
    pub min_gain: f64,
    /// Labels of mappings that lost a validation: never chosen automatically.
    pub lost: Vec<String>,
    /// How far validations bore each label's prediction out (absent: 1).
    pub confidence: Vec<(String, f64)>,
}

/// The PMB a mapping that takes hugetlb pages must reach (seed 001 §4, the
/// multi-program heuristic): as the pool empties, only the mappings with the
/// most benefit per page still get pages. 0 with the whole pool free, rising
/// linearly to `MAX_PMB_BAR` when other programs hold all of it.
pub fn pmb_bar(avail: &Availability) -> f64 {
    if avail.hugetlb_2m_total == 0 {
        return 0.0;
    }
    let free = avail.hugetlb_2m_free.min(avail.hugetlb_2m_total) as f64;
    MAX_PMB_BAR * (1.0 - free / avail.hugetlb_2m_total as f64)
}

pub const MAX_PMB_BAR: f64 = 90.0;

/// Choose a plan. `min_gain` is the smallest predicted saving, as a fraction of the
/// native run time, that justifies placing a category on huge pages.
pub fn choose(
    preds: &[Prediction],
    sig: &Significance,
    avail: &Availability,
    program: &ProgramTraits,
    native_seconds: f64,
    min_gain: f64,
) -> PlanDecision {
    let policy = Policy {
        min_gain,
        ..Policy::default()
    };
    choose_with(preds, sig, avail, program, native_seconds, &policy)
}

/// `choose` with what validations taught: lost mappings are skipped and each
/// saving counts times its confidence; per-site choices are combined within the
/// pool (a multiple-choice knapsack) when that beats every analysed mapping.
pub fn choose_with(
    preds: &[Prediction],
    sig: &Significance,
    avail: &Availability,
    program: &ProgramTraits,
    native_seconds: f64,
    policy: &Policy,
) -> PlanDecision {
    // The JVM's heap is planned by its own switch (stages/jvm.rs), never as a
    // directive: its prediction stays out, and the others' PMBs are over the
    // best of the rest.
    let own: Vec<Prediction> = if preds.iter().any(Prediction::is_jvm_heap) {
        let rest: Vec<Prediction> = preds.iter().filter(|p| !p.is_jvm_heap()).cloned().collect();
        let best = rest.iter().map(|p| p.saving_ns).fold(0.0f64, f64::max);
        rest.into_iter()
            .map(|mut p| {
                p.pmb = crate::rank::pmb(p.saving_ns, best);
                p
            })
            .collect()
    } else {
        preds.to_vec()
    };
    let mut d = choose_core(&own, sig, avail, program, native_seconds, policy);
    d.thp_controls = thp_controls(&plan_backings(&d.assignments, &d.sites), avail);
    if !d.thp_controls.is_empty() {
        let list: Vec<String> = d.thp_controls.iter().map(ThpControl::text).collect();
        d.reasons.push(format!(
            "its runs set {} and restore them after (the controls are system-wide; a baseline \
             run keeps the machine's settings)",
            list.join(", ")
        ));
    }
    // An empty plan always says where the misses are: the last reason (the one
    // `plan` shows without --explain) gets it.
    if d.assignments.is_empty() && d.sites.is_empty() {
        let shares = miss_shares_text(sig);
        match d.reasons.last_mut() {
            Some(last) => *last = format!("{last}. {shares}"),
            None => d.reasons.push(shares),
        }
    }
    d
}

fn choose_core(
    preds: &[Prediction],
    sig: &Significance,
    avail: &Availability,
    program: &ProgramTraits,
    native_seconds: f64,
    policy: &Policy,
) -> PlanDecision {
    let min_gain = policy.min_gain;
    let mut reasons = Vec::new();
    if program.outside {
        reasons.push(OUTSIDE_REASON.to_string());
    }
    let empty = |reasons| PlanDecision {
        assignments: vec![],
        sites: vec![],
        prediction: None,
        reasons,
        jvm: None,
        jvm_prediction: None,
        pool: None,
        thp_controls: vec![],
    };
    if !sig.passes {
        reasons.push(format!(
            "significance test failed: {:.0} TLB misses/s (< {:.0}) and {:.0} faults/s (< {:.0}) with 4 KB pages",
            sig.tlb_misses_per_s,
            crate::rank::SIG_TLB_MISSES_PER_S,
            sig.faults_per_s,
            crate::rank::SIG_FAULTS_PER_S
        ));
        return empty(reasons);
    }
    let bar = pmb_bar(avail);
    if bar > 0.0 && !program.outside {
        reasons.push(format!(
            "other programs hold {} of the {} pool pages: a hugetlb mapping needs PMB >= {:.0}%",
            avail.hugetlb_2m_total.saturating_sub(avail.hugetlb_2m_free),
            avail.hugetlb_2m_total,
            bar
        ));
    }
    let confidence = |p: &Prediction| {
        policy
            .confidence
            .iter()
            .find(|(l, _)| *l == p.label)
            .map_or(1.0, |&(_, c)| c)
    };
    let expected = |p: &Prediction| p.saving_ns * confidence(p) * thp_coverage(p, avail);
    // A lost plan stays out, and so does every mapping that contains it.
    let lost: Vec<&Prediction> = preds
        .iter()
        .filter(|p| policy.lost.contains(&p.label) && !p.is_all_small())
        .collect();
    let allowed = |p: &Prediction| -> Result<(), String> {
        if let Some(l) = lost.iter().find(|l| {
            l.assignments.iter().all(|a| p.assignments.contains(a))
                && l.sites.iter().all(|s| p.sites.contains(s))
        }) {
            return Err(if l.label == p.label {
                "a validation measured a loss with it; not applied again automatically".into()
            } else {
                format!("contains {}, which lost a validation", l.label)
            });
        }
        if uses_hugetlb(p) && p.pmb < bar {
            return Err(format!("PMB {:.0}% is below the bar of {:.0}%", p.pmb, bar));
        }
        feasible(p, avail, program)
    };
    let threshold_ns = min_gain * native_seconds * 1e9;
    let mut best: Option<&Prediction> = None;
    for p in preds.iter().filter(|p| !p.is_all_small()) {
        match allowed(p) {
            Err(why) => reasons.push(format!("{}: ruled out: {}", p.label, why)),
            Ok(()) => {
                let cover = thp_coverage(p, avail);
                if cover < 1.0 {
                    reasons.push(format!(
                        "{}: only {} free 2 MB blocks for its {} THP folios (fragmentation): counts {:.0}% of its saving",
                        p.label,
                        avail.thp_2m_allocatable.unwrap_or(0),
                        p.thp_pages,
                        cover * 100.0
                    ));
                }
                let c = confidence(p);
                if c < 1.0 {
                    reasons.push(format!(
                        "{}: confidence {:.2} from earlier validations: counts {:.1} of its {:.1} ms",
                        p.label,
                        c,
                        expected(p) / 1e6,
                        p.saving_ns / 1e6
                    ));
                }
                if best.is_none_or(|b| expected(p) > expected(b)) {
                    best = Some(p);
                }
            }
        }
    }
    let Some(mut best) = best else {
        reasons.push("no mapping is possible with what the machine offers now".into());
        return empty(reasons);
    };
    // Drop categories whose marginal saving is below the bar: they would hold
    // huge pages for nothing (seed 001: PMB against pages needed).
    loop {
        let mut improved = false;
        for &(c, _) in &best.assignments {
            let without: Vec<(Category, Backing)> = best
                .assignments
                .iter()
                .copied()
                .filter(|&(ac, _)| ac != c)
                .collect();
            let alt = preds
                .iter()
                .find(|p| p.assignments == without && p.sites.is_empty() && allowed(p).is_ok());
            let alt_saving = alt.map_or(0.0, |p| p.saving_ns);
            if best.saving_ns - alt_saving < threshold_ns {
                reasons.push(format!(
                    "{c}: marginal saving {:.1} ms is below {:.1}% of the run time; left on 4 KB pages",
                    (best.saving_ns - alt_saving) / 1e6,
                    min_gain * 100.0
                ));
                match alt {
                    Some(a) => {
                        best = a;
                        improved = true;
                        break;
                    }
                    None => return empty(reasons),
                }
            }
        }
        if !improved {
            break;
        }
    }
    if best.is_all_small() || best.saving_ns < threshold_ns {
        reasons.push(format!(
            "best predicted saving {:.1} ms is below {:.1}% of the run time: run unchanged",
            best.saving_ns.max(0.0) / 1e6,
            min_gain * 100.0
        ));
        return empty(reasons);
    }
    // 1 GB pages are the scarcest (assembled from whole free or movable
    // gigabytes): like a category, they must earn their marginal saving over
    // the best 2 MB counterpart.
    if let Some(alt) = two_mb_counterpart(best, preds, &allowed, &expected) {
        if best.saving_ns - alt.saving_ns < threshold_ns {
            let on: Vec<&str> = best
                .assignments
                .iter()
                .filter(|&&(_, b)| b == Backing::Hugetlb1g)
                .map(|&(c, _)| c.name())
                .collect();
            reasons.push(format!(
                "1 GB pages: marginal saving {:.1} ms over {} is below {:.1}% of the run time; \
                 {} {} on 2 MB pages",
                (best.saving_ns - alt.saving_ns) / 1e6,
                alt.label,
                min_gain * 100.0,
                on.join(" and "),
                if on.len() > 1 { "stay" } else { "stays" }
            ));
            best = alt;
        }
    }
    if let Some(k) = site_knapsack(preds, best, avail, native_seconds, &allowed, &expected) {
        reasons.push(format!(
            "per-site choice within {} free pool pages beats {} ({:.1} ms): {} (saving {:.1} ms, estimated by additivity)",
            avail.hugetlb_2m_free,
            best.label,
            expected(best) / 1e6,
            k.label,
            k.saving_ns / 1e6
        ));
        reasons.extend(mapped_thp_reason(&k, program));
        return PlanDecision {
            assignments: k.assignments.clone(),
            sites: k.sites.clone(),
            prediction: Some(k),
            reasons,
            jvm: None,
            jvm_prediction: None,
            pool: None,
            thp_controls: vec![],
        };
    }
    reasons.push(format!(
        "chose {}: predicted saving {:.1} ms ({:.2}x), PMB {:.0}%, {} hugetlb + {}{} THP pages",
        best.label,
        best.saving_ns / 1e6,
        best.predicted_speedup,
        best.pmb,
        best.hugetlb_pages,
        if best.hugetlb_1g_pages > 0 {
            format!("{} x 1 GB hugetlb + ", best.hugetlb_1g_pages)
        } else {
            String::new()
        },
        best.thp_pages
    ));
    reasons.extend(gigantic_reason(best, preds, &allowed, &expected));
    reasons.extend(mapped_thp_reason(best, program));
    PlanDecision {
        assignments: best.assignments.clone(),
        sites: best.sites.clone(),
        prediction: Some(best.clone()),
        reasons,
        jvm: None,
        jvm_prediction: None,
        pool: None,
        thp_controls: vec![],
    }
}

/// The shared pool (seed 002) against per-allocation pages for the blocks the
/// decision puts on `hugetlb-2m` (heap-large, planned sites), from the
/// reference run's allocation logs (`traces`, one per process) and the
/// calibrated fault costs ([`crate::pool::weigh`]). Sets `d.pool` and says
/// which it chose and why in the reasons; a pool the free pages cannot hold
/// is not chosen. Nothing is said when no block is planned on `hugetlb-2m`.
#[allow(clippy::too_many_arguments)]
pub fn choose_pool(
    d: &mut PlanDecision,
    traces: &[crate::pool::PoolTrace],
    threshold: u64,
    cost: &crate::cost::CostModel,
    avail: &Availability,
    native_seconds: f64,
    min_gain: f64,
) {
    let key = |s: &PlannedSite| (s.module.clone(), s.site.offset);
    let scope = crate::pool::PoolScope {
        heap_large: d
            .assignments
            .contains(&(Category::HeapLarge, Backing::Hugetlb2m)),
        threshold,
        sites_in: d
            .sites
            .iter()
            .filter(|s| s.backing == Backing::Hugetlb2m)
            .map(key)
            .collect(),
        sites_out: d
            .sites
            .iter()
            .filter(|s| s.backing != Backing::Hugetlb2m)
            .map(key)
            .collect(),
    };
    d.pool = None;
    if scope.is_empty() {
        return;
    }
    let profile = crate::pool::profile(traces, &scope);
    weigh_pool(d, &profile, cost, avail, native_seconds, min_gain);
}

/// [`choose_pool`] for a plan made from a stored profile (`hugetune run`,
/// `plan`, `validate`, service units): `profile` is what the profile's own
/// allocation log showed for heap-large blocks at its threshold
/// (`pool::profile` with heap-large in scope), weighed only where the plan
/// puts heap-large, and no site, on `hugetlb-2m` — the scope it was computed
/// for.
pub fn choose_pool_stored(
    d: &mut PlanDecision,
    profile: &crate::pool::PoolProfile,
    cost: &crate::cost::CostModel,
    avail: &Availability,
    native_seconds: f64,
    min_gain: f64,
) {
    d.pool = None;
    let heap_large = d
        .assignments
        .contains(&(Category::HeapLarge, Backing::Hugetlb2m));
    if !heap_large || !d.sites.is_empty() || profile.blocks == 0 {
        return;
    }
    weigh_pool(d, profile, cost, avail, native_seconds, min_gain);
}

/// Weighs the pool for the blocks `profile` describes, sets `d.pool` and
/// says which it chose in the reasons.
fn weigh_pool(
    d: &mut PlanDecision,
    profile: &crate::pool::PoolProfile,
    cost: &crate::cost::CostModel,
    avail: &Availability,
    native_seconds: f64,
    min_gain: f64,
) {
    let mut w = crate::pool::weigh(profile, cost, native_seconds, min_gain);
    if profile.processes > 1 && w.chosen {
        w.reason += &format!(
            "; {} processes allocate such blocks: each maps a pool of its own ({} pages in all)",
            profile.processes,
            profile.all_pool_pages()
        );
    }
    d.pool = Some(w);
    let need = d.hugetlb_pages();
    let w = d.pool.as_mut().expect("just set");
    if w.chosen && need > avail.hugetlb_2m_free {
        w.chosen = false;
        w.reason = format!(
            "{}; but the plan would need {need} hugetlb 2 MB pages with it, {} available: \
             per-allocation pages instead",
            w.reason, avail.hugetlb_2m_free
        );
    }
    d.reasons.push(w.reason.clone());
}

/// Whether the 1 GB layout applies to `c` (the runtime library's
/// `heap-large hugetlb-1g` and `static hugetlb-1g`).
fn gigantic_capable(c: Category) -> bool {
    matches!(c, Category::HeapLarge | Category::Static)
}

/// `p`'s assignments with what it puts on the 1 GB layout on 2 MB pages
/// instead: heap-large on `to`, static data on THP (its one 2 MB mechanism
/// the planner predicts); None when `p` puts nothing on 1 GB pages.
fn on_2m(p: &Prediction, to: Backing) -> Option<Vec<(Category, Backing)>> {
    if !p.assignments.iter().any(|&(_, b)| b == Backing::Hugetlb1g) {
        return None;
    }
    Some(
        p.assignments
            .iter()
            .map(|&(c, b)| match (c, b) {
                (Category::HeapLarge, Backing::Hugetlb1g) => (c, to),
                (_, Backing::Hugetlb1g) => (c, crate::rank::default_backing(c)),
                _ => (c, b),
            })
            .collect(),
    )
}

/// `p`'s assignments with heap-large and static data, where on 2 MB pages,
/// on the 1 GB layout (the candidates' `:1g` mappings put both there); None
/// when `p` has neither on 2 MB pages.
fn on_1g(p: &Prediction) -> Option<Vec<(Category, Backing)>> {
    let mut changed = false;
    let v = p
        .assignments
        .iter()
        .map(|&(c, b)| {
            if gigantic_capable(c) && b.is_huge() && b.folio_bytes() == SIZE_2M {
                changed = true;
                (c, Backing::Hugetlb1g)
            } else {
                (c, b)
            }
        })
        .collect();
    changed.then_some(v)
}

/// The best allowed mapping that differs from `best` only in putting what it
/// has on 1 GB pages (heap-large, static data) on 2 MB pages instead (hugetlb
/// or THP); None when `best` has nothing on 1 GB pages or no such mapping is
/// allowed.
fn two_mb_counterpart<'a>(
    best: &Prediction,
    preds: &'a [Prediction],
    allowed: &dyn Fn(&Prediction) -> Result<(), String>,
    expected: &dyn Fn(&Prediction) -> f64,
) -> Option<&'a Prediction> {
    if !best.sites.is_empty() {
        return None;
    }
    [Backing::Hugetlb2m, Backing::Thp2m]
        .into_iter()
        .filter_map(|b| {
            let a = on_2m(best, b)?;
            preds
                .iter()
                .find(|p| p.sites.is_empty() && p.assignments == a)
        })
        .filter(|p| allowed(p).is_ok())
        .max_by(|a, b| expected(a).total_cmp(&expected(b)))
}

/// 1 GB pages against 2 MB pages for the chosen mapping `best`: the saving
/// over the best 2 MB counterpart when `best` puts heap-large on 1 GB pages,
/// or why the 1 GB counterpart of a 2 MB choice gains nothing. Nothing to say
/// when there is no 1 GB counterpart (the kernel has no 1 GB pages, or the
/// program no heap-large memory) or it was ruled out (the reasons say why).
fn gigantic_reason(
    best: &Prediction,
    preds: &[Prediction],
    allowed: &dyn Fn(&Prediction) -> Result<(), String>,
    expected: &dyn Fn(&Prediction) -> f64,
) -> Option<String> {
    if !best.sites.is_empty() {
        return None;
    }
    let find = |a: &[(Category, Backing)]| {
        preds
            .iter()
            .find(|p| p.sites.is_empty() && p.assignments == a)
    };
    let gigantic: Vec<&str> = best
        .assignments
        .iter()
        .filter(|&&(_, b)| b == Backing::Hugetlb1g)
        .map(|&(c, _)| c.name())
        .collect();
    if !gigantic.is_empty() {
        // The best 2 MB counterpart, allowed ones first (hugetlb or THP).
        let alts: Vec<&Prediction> = [Backing::Hugetlb2m, Backing::Thp2m]
            .into_iter()
            .filter_map(|b| find(&on_2m(best, b)?))
            .collect();
        let alt = alts
            .iter()
            .filter(|p| allowed(p).is_ok())
            .max_by(|a, b| expected(a).total_cmp(&expected(b)))
            .or_else(|| alts.first())?;
        return Some(format!(
            "chose {} over 2 MB pages: predicted saving {:.1} ms, {:.1} ms more than {} ({:.1} ms{}); \
             page walks {} against {}; {} on {} x 1 GB pages (whole gigabytes of each \
             heap-large block and of static data's interior, the rest on 2 MB and 4 KB pages)",
            best.label,
            best.saving_ns / 1e6,
            (best.saving_ns - alt.saving_ns) / 1e6,
            alt.label,
            alt.saving_ns / 1e6,
            match allowed(alt) {
                Ok(()) => String::new(),
                Err(why) => format!(", ruled out: {why}"),
            },
            best.walks,
            alt.walks,
            gigantic.join(" and "),
            best.hugetlb_1g_pages
        ));
    }
    let g = find(&on_1g(best)?)?;
    if g.label == best.label || allowed(g).is_err() {
        return None;
    }
    if g.saving_ns > best.saving_ns {
        if expected(g) > expected(best) {
            // Left for the --min-gain bar on its marginal saving: said above.
            return None;
        }
        // Only a validation's confidence (or fragmentation) puts it behind.
        return Some(format!(
            "1 GB pages not chosen: {} predicted saving {:.1} ms counts {:.1} ms after earlier \
             validations, less than {} ({:.1} ms)",
            g.label,
            g.saving_ns / 1e6,
            expected(g) / 1e6,
            best.label,
            expected(best) / 1e6
        ));
    }
    let why = if g.hugetlb_1g_pages == 0 {
        "no heap-large block spans a whole 1 GB page, nor does static data's interior (the \
         runtime library puts only whole, aligned gigabytes on 1 GB pages)"
            .to_string()
    } else if g.walks >= best.walks {
        format!(
            "the 2 MB pages' TLB reach covers the footprint ({} page walks with 1 GB pages, {} \
             with 2 MB)",
            g.walks, best.walks
        )
    } else {
        format!(
            "{} fewer page walks with 1 GB pages save less than they cost ({} against {} walks; \
             first touch zeroes whole 1 GB pages)",
            best.walks - g.walks,
            g.walks,
            best.walks
        )
    };
    Some(format!(
        "1 GB pages gain nothing over 2 MB here: {} predicted saving {:.1} ms against {:.1} ms \
         for {}: {why}",
        g.label,
        g.saving_ns / 1e6,
        best.saving_ns / 1e6,
        best.label
    ))
}

/// The multiple-choice knapsack over allocation sites: each analysed site goes
/// on 4 KB, THP or hugetlb pages, hugetlb pages within the pool, together with
/// the best allowed mapping of the other categories; savings add (seed 001's
/// additivity, checked by `rank::additivity_error`). Returned only when it is
/// expected to beat `best` (an exact prediction) by more than 1 %.
fn site_knapsack(
    preds: &[Prediction],
    best: &Prediction,
    avail: &Availability,
    native_seconds: f64,
    allowed: &dyn Fn(&Prediction) -> Result<(), String>,
    expected: &dyn Fn(&Prediction) -> f64,
) -> Option<Prediction> {
    // Options per site: (saving, hugetlb pages, prediction).
    let mut groups: Vec<(crate::categorize::Site, Vec<&Prediction>)> = Vec::new();
    for p in preds
        .iter()
        .filter(|p| p.sites.len() == 1 && p.assignments.is_empty())
    {
        if allowed(p).is_err() || expected(p) <= 0.0 {
            continue;
        }
        match groups.iter_mut().find(|(s, _)| *s == p.sites[0].site) {
            Some((_, v)) => v.push(p),
            None => groups.push((p.sites[0].site, vec![p])),
        }
    }
    if groups.len() < 2 {
        return None;
    }
    let others = preds
        .iter()
        .filter(|p| {
            p.sites.is_empty()
                && !p.assignments.iter().any(|(c, _)| *c == Category::HeapLarge)
                // Sites are on 2 MB pages: an mTHP size cannot run beside them.
                && !p.assignments.iter().any(|(_, b)| b.is_mthp())
                && allowed(p).is_ok()
        })
        .max_by(|a, b| expected(a).total_cmp(&expected(b)));
    let budget = avail.hugetlb_2m_free.min(1 << 20) as usize;
    // dp[b]: best saving with at most b pool pages; choice[g][b] the option taken.
    let mut dp = vec![0.0f64; budget + 1];
    let mut choice = vec![vec![usize::MAX; budget + 1]; groups.len()];
    for (g, (_, opts)) in groups.iter().enumerate() {
        let prev = dp.clone();
        for b in 0..=budget {
            for (k, p) in opts.iter().enumerate() {
                let w = p.hugetlb_pages as usize;
                if w <= b && prev[b - w] + expected(p) > dp[b] {
                    dp[b] = prev[b - w] + expected(p);
                    choice[g][b] = k;
                }
            }
        }
    }
    let mut b = budget;
    let mut sites = Vec::new();
    let (mut saving, mut hugetlb, mut thp, mut walks, mut faults) = (0.0, 0, 0, 0, 0);
    for g in (0..groups.len()).rev() {
        let k = choice[g][b];
        if k == usize::MAX {
            continue;
        }
        let p = groups[g].1[k];
        sites.push(p.sites[0].clone());
        saving += p.saving_ns;
        hugetlb += p.hugetlb_pages;
        thp += p.thp_pages;
        walks += p.walks;
        faults += p.faults;
        b -= p.hugetlb_pages as usize;
    }
    sites.reverse();
    let mut assignments = vec![];
    if let Some(o) = others.filter(|o| o.saving_ns > 0.0) {
        assignments = o.assignments.clone();
        saving += o.saving_ns;
        hugetlb += o.hugetlb_pages;
        thp += o.thp_pages;
    }
    let expected_total = dp[budget] + others.map_or(0.0, |o| expected(o).max(0.0));
    if sites.len() < 2 || expected_total <= expected(best) * 1.01 {
        return None;
    }
    let predicted_seconds = (native_seconds - saving / 1e9).max(native_seconds * 0.01);
    let mut label = crate::rank::site_label(&sites);
    if !assignments.is_empty() {
        label = format!("{} {label}", crate::rank::label(&assignments));
    }
    Some(Prediction {
        mapping: "per-site".into(),
        label,
        base: false,
        assignments,
        miss_time_ns: best.miss_time_ns + best.saving_ns - saving,
        saving_ns: saving,
        pmb: 100.0 * saving / best.saving_ns.max(saving).max(1e-9),
        predicted_seconds,
        predicted_speedup: if native_seconds > 0.0 {
            native_seconds / predicted_seconds
        } else {
            1.0
        },
        hugetlb_pages: hugetlb,
        hugetlb_1g_pages: 0,
        static_pages_1g: (0, 0),
        thp_pages: thp,
        sites,
        walks,
        faults,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn pred(
        name: &str,
        a: Vec<(Category, Backing)>,
        saving_ms: f64,
        hugetlb: u64,
    ) -> Prediction {
        Prediction {
            mapping: name.into(),
            label: name.into(),
            base: true,
            assignments: a,
            miss_time_ns: 0.0,
            saving_ns: saving_ms * 1e6,
            pmb: 0.0,
            predicted_seconds: 1.0,
            predicted_speedup: 1.0,
            hugetlb_pages: hugetlb,
            hugetlb_1g_pages: 0,
            static_pages_1g: (0, 0),
            sites: vec![],
            thp_pages: 0,
            walks: 0,
            faults: 0,
        }
    }

    /// The applied plan's prediction: the planner's, the JVM heap's alone,
    /// or both savings added under the plan's label; the JVM's only while its
    /// switch is planned.
    #[test]
    fn the_applied_prediction_adds_the_jvm_heaps() {
        let with = |saving_ms: f64, label: &str, a| {
            let mut p = pred(label, a, saving_ms, 0);
            // A 2 s run.
            p.predicted_seconds = 2.0 - saving_ms / 1e3;
            p.predicted_speedup = 2.0 / p.predicted_seconds;
            p
        };
        let own = with(
            100.0,
            "heap-small:thp",
            vec![(Category::HeapSmall, Backing::Thp2m)],
        );
        let jvm = with(900.0, "jvm:thp", vec![(Category::Other, Backing::Thp2m)]);
        let mut d = PlanDecision {
            assignments: own.assignments.clone(),
            sites: vec![],
            prediction: Some(own.clone()),
            reasons: vec![],
            jvm: None,
            jvm_prediction: Some(jvm.clone()),
            pool: None,
            thp_controls: vec![],
        };
        assert_eq!(
            d.applied_prediction(),
            Some(own.clone()),
            "no switch planned"
        );
        d.jvm = Some(Backing::Thp2m);
        let both = d.applied_prediction().unwrap();
        assert_eq!(both.label, "heap-small:thp+jvm:thp-2m");
        assert!((both.saving_ns - 1e9).abs() < 1.0, "{both:?}");
        assert!((both.predicted_seconds - 1.0).abs() < 1e-9, "{both:?}");
        assert!((both.predicted_speedup - 2.0).abs() < 1e-9, "{both:?}");
        assert!(both.is_jvm_heap() && !both.base);
        d.prediction = None;
        assert_eq!(d.applied_prediction(), Some(jvm));
        // Their intervals add as the savings do: 0.1 s + 0.9 s of a 2 s run
        // at the points, each end the ends' savings added.
        let i = |label: &str, lo: f64, hi: f64| crate::rank::PredictionInterval {
            label: label.into(),
            calibration_low: lo,
            calibration_high: hi,
            // The sampling's margins on top are not added.
            low: lo * 0.5,
            high: hi * 2.0,
        };
        let a = i("heap-small:thp", 2.0 / 1.95, 2.0 / 1.85);
        let b = i("jvm:thp", 2.0 / 1.3, 2.0 / 1.0);
        let both = crate::rank::added_interval("heap-small:thp+jvm:thp-2m", 2.0, &a, &b);
        assert!((both.low - 2.0 / 1.25).abs() < 1e-9, "{both:?}");
        assert!((both.high - 2.0 / 0.85).abs() < 1e-9, "{both:?}");
        assert_eq!(both.label, "heap-small:thp+jvm:thp-2m");
    }

    pub(crate) fn sig(passes: bool) -> Significance {
        Significance {
            tlb_misses_per_s: 1e6,
            faults_per_s: 0.0,
            passes,
            source: "model".into(),
            walks_by_category: vec![(Category::HeapLarge, 600), (Category::Stack, 400)],
        }
    }

    /// mTHP is planned when its control is usable or settable for the run; a
    /// plan cannot mix THP sizes (the controls are system-wide); the decision
    /// records the controls its runs set: the size at `madvise`, larger usable
    /// sizes and PMD THP at `never`.
    #[test]
    fn mthp_plans_need_their_controls_and_never_mix_thp_sizes() {
        use Category::*;
        let k64 = Backing::Thp(16);
        let p = vec![
            pred("all-small", vec![], 0.0, 0),
            pred("heap-small:64k", vec![(HeapSmall, k64)], 90.0, 0),
            pred(
                "mixed",
                vec![(HeapSmall, k64), (HeapLarge, Backing::Thp2m)],
                120.0,
                0,
            ),
            pred(
                "heap-large",
                vec![(HeapLarge, Backing::Hugetlb2m)],
                40.0,
                10,
            ),
        ];
        let settable = Availability {
            hugetlb_2m_free: 100,
            thp: ThpMode::Madvise,
            mthp: vec![],
            thp_settable: vec![14, 15, 16, 17, 18, 19, 20, 21],
            ..Availability::default()
        };
        let d = choose(
            &p,
            &sig(true),
            &settable,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert_eq!(d.assignments, vec![(HeapSmall, k64)], "{:?}", d.reasons);
        assert!(
            d.reasons.iter().any(|r| r.starts_with(
                "mixed: ruled out: thp-64k and thp-2m in \
                 one plan: the per-size THP controls are system-wide"
            )),
            "{:?}",
            d.reasons
        );
        let text: Vec<String> = d.thp_controls.iter().map(ThpControl::text).collect();
        assert_eq!(
            text,
            vec![
                "hugepages-64kB/enabled = madvise",
                "hugepages-2048kB/enabled = never"
            ]
        );
        assert!(d.reasons.last().unwrap().contains("restore them after"));
        // Usable already, with a larger size usable too: that one goes off.
        let usable = Availability {
            mthp: vec![16, 18],
            thp_settable: vec![16, 18, 21],
            ..settable.clone()
        };
        let c = thp_controls(&[k64], &usable);
        let text: Vec<String> = c.iter().map(ThpControl::text).collect();
        assert_eq!(
            text,
            vec![
                "hugepages-256kB/enabled = never",
                "hugepages-2048kB/enabled = never"
            ]
        );
        // PMD THP already off: nothing for it; no mTHP: nothing at all.
        let pmd_off = Availability {
            thp: ThpMode::Never,
            ..usable.clone()
        };
        assert_eq!(thp_controls(&[k64], &pmd_off).len(), 1);
        assert!(thp_controls(&[Backing::Thp2m, Backing::Hugetlb2m], &usable).is_empty());
        // Not root: neither settable nor usable, so not planned; usable but
        // PMD THP not settable: its advised ranges would get 2 MB folios.
        let none = Availability {
            thp_settable: vec![],
            ..settable.clone()
        };
        let d = choose(&p, &sig(true), &none, &ProgramTraits::default(), 1.0, 0.01);
        assert_eq!(d.assignments, vec![(HeapLarge, Backing::Hugetlb2m)]);
        assert!(d.thp_controls.is_empty());
        assert!(
            d.reasons.iter().any(|r| r.contains(
                "heap-small:64k: ruled out: needs thp-64k folios, which are \
                     disabled (hugepages-64kB/enabled), and hugetune cannot enable them"
            )),
            "{:?}",
            d.reasons
        );
        let no_pmd = Availability {
            mthp: vec![16],
            thp_settable: vec![],
            ..settable.clone()
        };
        let d = choose(
            &p,
            &sig(true),
            &no_pmd,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(
            d.reasons.iter().any(|r| r.contains(
                "needs hugepages-2048kB/enabled = never for its runs (else its advised ranges \
                 get 2m folios"
            )),
            "{:?}",
            d.reasons
        );
        // From outside the process, MADV_COLLAPSE makes 2 MB folios only.
        let outside = ProgramTraits {
            outside: true,
            ..ProgramTraits::default()
        };
        let d = choose(&p, &sig(true), &settable, &outside, 1.0, 0.01);
        assert!(
            !d.assignments.contains(&(HeapSmall, k64)),
            "{:?}",
            d.reasons
        );
    }

    fn preds() -> Vec<Prediction> {
        use Backing::*;
        #[allow(non_upper_case_globals)]
        const Thp2m: Backing = Backing::Thp2m;
        use Category::*;
        vec![
            pred("all-small", vec![], 0.0, 0),
            pred("heap-large", vec![(HeapLarge, Hugetlb2m)], 300.0, 100),
            pred("heap-large thp", vec![(HeapLarge, Thp2m)], 250.0, 0),
            pred("static", vec![(Static, Thp2m)], 2.0, 0),
            pred(
                "all",
                vec![(Static, Thp2m), (HeapLarge, Hugetlb2m)],
                301.0,
                100,
            ),
            pred(
                "all thp",
                vec![(Static, Thp2m), (HeapLarge, Thp2m)],
                251.0,
                0,
            ),
        ]
    }

    #[test]
    fn programs_applied_from_outside_get_thp_only_and_are_told_why() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let outside = ProgramTraits {
            outside: true,
            ..ProgramTraits::default()
        };
        let d = choose(&preds(), &sig(true), &avail, &outside, 1.0, 0.01);
        // heap-large on hugetlb would save more; from outside only THP can be had.
        assert_eq!(
            d.assignments,
            vec![(Category::HeapLarge, Backing::Thp2m)],
            "{:?}",
            d.reasons
        );
        assert_eq!(d.hugetlb_pages(), 0);
        assert_eq!(d.reasons[0], OUTSIDE_REASON);
        assert!(d
            .reasons
            .iter()
            .any(|r| r.starts_with("heap-large: ruled out") && r.contains("THP only")));
        // The same profile of a program the library enters takes hugetlb.
        let inside = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(inside.hugetlb_pages() > 0);
        // A per-site mapping is ruled out from outside.
        let mut site = preds()[2].clone();
        site.assignments.clear();
        site.sites = vec![crate::rank::PlannedSite {
            site: crate::categorize::Site {
                module: 0,
                offset: 0x10,
            },
            module: "/prog".into(),
            backing: Backing::Thp2m,
        }];
        assert!(feasible(&site, &avail, &outside)
            .unwrap_err()
            .contains("allocation sites"));
        assert!(feasible(&site, &avail, &ProgramTraits::default()).is_ok());
    }

    #[test]
    fn picks_hugetlb_when_the_pool_allows_and_drops_tiny_categories() {
        let avail = Availability {
            hugetlb_2m_free: 100,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert_eq!(
            d.assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)]
        );
    }

    #[test]
    fn falls_back_to_thp_when_the_pool_is_short() {
        let avail = Availability {
            hugetlb_2m_free: 10,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert_eq!(d.assignments, vec![(Category::HeapLarge, Backing::Thp2m)]);
        assert!(d.reasons.iter().any(|r| r.contains("needs 100 hugetlb")));
    }

    #[test]
    fn nothing_without_significance_or_resources() {
        let avail = Availability {
            hugetlb_2m_free: 0,
            thp: ThpMode::Never,
            ..Default::default()
        };
        assert!(choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01
        )
        .assignments
        .is_empty());
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &preds(),
            &sig(false),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(d.assignments.is_empty());
        assert!(d.reasons[0].contains("significance"));
    }

    #[test]
    fn small_gains_are_not_worth_pages() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        // 300 ms of a 100 s run is 0.3 %: below a 1 % bar.
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            100.0,
            0.01,
        );
        assert!(d.assignments.is_empty(), "{:?}", d);
    }

    #[test]
    fn an_empty_plan_says_where_the_misses_are() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        // Significance fails: nothing planned, and the last reason names the
        // stack's share and what would back it.
        let d = choose(
            &preds(),
            &sig(false),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(d.assignments.is_empty());
        let last = d.reasons.last().unwrap();
        assert!(last.starts_with("significance test failed"), "{last}");
        assert!(
            last.contains("40.0 % in memory hugetune cannot back (stack: 40.0 % of misses — no directive backs stacks; THP `always` would"),
            "{last}"
        );
        assert!(
            last.contains("60.0 % in memory it can back (heap-large 60.0 %)"),
            "{last}"
        );
        // A plan that backs something says nothing of the kind.
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(!d.assignments.is_empty());
        assert!(!d.reasons.iter().any(|r| r.contains("cannot back")));
        // Other memory and an old profile.
        let mut s = sig(false);
        s.walks_by_category = vec![(Category::Other, 627), (Category::HeapSmall, 373)];
        assert!(miss_shares_text(&s).contains("other: 62.7 % of misses — file-backed"));
        s.walks_by_category.clear();
        assert!(miss_shares_text(&s).contains("analyze it again"));
    }

    #[test]
    fn programs_that_cut_their_mappings_are_told_why_those_get_thp() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let cuts = ProgramTraits {
            mapping_cuts: 3,
            ..ProgramTraits::default()
        };
        let d = choose(&preds(), &sig(true), &avail, &cuts, 1.0, 0.01);
        assert!(d.hugetlb_pages() > 0, "{:?}", d.reasons);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("THP (MADV_HUGEPAGE) instead of hugetlb")
                    && r.contains("3 cuts")),
            "{:?}",
            d.reasons
        );
        let d = choose(
            &preds(),
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert!(!d.reasons.iter().any(|r| r.contains("own mappings")));
    }

    #[test]
    fn programs_that_fork_get_thp_instead_of_private_hugetlb() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let forks = ProgramTraits {
            forks: true,
            fork_children: 3,
            ..ProgramTraits::default()
        };
        let d = choose(&preds(), &sig(true), &avail, &forks, 1.0, 0.01);
        assert_eq!(d.assignments, vec![(Category::HeapLarge, Backing::Thp2m)]);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("heap-large: ruled out: the program forks (3 children")),
            "{:?}",
            d.reasons
        );
        assert_eq!(d.hugetlb_pages(), 0);
        // Without THP there is nothing safe left to apply.
        let no_thp = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Never,
            ..Default::default()
        };
        assert!(choose(&preds(), &sig(true), &no_thp, &forks, 1.0, 0.01)
            .assignments
            .is_empty());
    }

    fn site_pred(offset: u64, backing: Backing, saving_ms: f64, hugetlb: u64) -> Prediction {
        let sites = vec![PlannedSite {
            site: crate::categorize::Site { module: 0, offset },
            module: String::new(),
            backing,
        }];
        let mut p = pred(&crate::rank::site_label(&sites), vec![], saving_ms, hugetlb);
        p.sites = sites;
        p
    }

    /// Three sites, each better on hugetlb than on THP, and a pool too small for
    /// all: the knapsack puts the two with the most saving per page on hugetlb and
    /// the third on THP, which beats every single analysed mapping.
    #[test]
    fn a_short_pool_is_shared_out_among_sites() {
        use Backing::*;
        #[allow(non_upper_case_globals)]
        const Thp2m: Backing = Backing::Thp2m;
        let mut v = vec![
            pred("all-small", vec![], 0.0, 0),
            pred(
                "heap-large",
                vec![(Category::HeapLarge, Hugetlb2m)],
                330.0,
                300,
            ),
            pred(
                "heap-large thp",
                vec![(Category::HeapLarge, Thp2m)],
                200.0,
                0,
            ),
        ];
        for (off, h, t, pages) in [
            (1, 150.0, 90.0, 100),
            (2, 120.0, 60.0, 100),
            (3, 60.0, 50.0, 100),
        ] {
            v.push(site_pred(off, Hugetlb2m, h, pages));
            v.push(site_pred(off, Thp2m, t, 0));
        }
        let avail = Availability {
            hugetlb_2m_free: 200,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let d = choose(
            &v,
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            10.0,
            0.001,
        );
        let got: Vec<(u64, Backing)> = d.sites.iter().map(|s| (s.site.offset, s.backing)).collect();
        assert_eq!(
            got,
            vec![(1, Hugetlb2m), (2, Hugetlb2m), (3, Thp2m)],
            "{:?}",
            d.reasons
        );
        assert_eq!(d.hugetlb_pages(), 200);
        let p = d.prediction.unwrap();
        assert!((p.saving_ns - 320e6).abs() < 1.0);
        // With the whole pool free, the exact whole-category mapping wins again.
        let avail = Availability {
            hugetlb_2m_free: 300,
            ..avail
        };
        let d = choose(
            &v,
            &sig(true),
            &avail,
            &ProgramTraits::default(),
            10.0,
            0.001,
        );
        assert_eq!(d.assignments, vec![(Category::HeapLarge, Hugetlb2m)]);
        assert!(d.sites.is_empty());
    }

    /// Seed 001's multi-program heuristic: as other programs take the pool, a
    /// mapping needs a higher PMB to get pages.
    #[test]
    fn the_pmb_bar_rises_as_the_pool_empties() {
        let mut v = preds();
        // heap-large:hugetlb is the best (PMB 100); make it modest to see the bar.
        for p in &mut v {
            p.pmb = 100.0 * p.saving_ns / 301e6;
        }
        let run = |v: &[Prediction], free, total| {
            let avail = Availability {
                hugetlb_2m_free: free,
                hugetlb_2m_total: total,
                thp: ThpMode::Madvise,
                ..Default::default()
            };
            choose(v, &sig(true), &avail, &ProgramTraits::default(), 1.0, 0.01)
        };
        assert_eq!(
            pmb_bar(&Availability {
                hugetlb_2m_free: 500,
                hugetlb_2m_total: 1000,
                ..Default::default()
            }),
            45.0
        );
        assert_eq!(
            pmb_bar(&Availability {
                hugetlb_2m_free: 5,
                hugetlb_2m_total: 0,
                ..Default::default()
            }),
            0.0
        );
        // Pool mostly free: hugetlb.
        assert_eq!(
            run(&v, 900, 1000).assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)]
        );
        // Other programs hold 99.9 % of a huge pool: the bar (89.9 %) still lets a
        // PMB of 99.7 % through...
        assert_eq!(
            run(&v, 100, 100_000).assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)]
        );
        // ...but not a mapping with PMB 60 %.
        for p in &mut v {
            if p.label == "heap-large" || p.label == "all" {
                p.pmb = 60.0;
            }
        }
        let d = run(&v, 100, 1000);
        assert_eq!(d.assignments, vec![(Category::HeapLarge, Backing::Thp2m)]);
        assert!(
            d.reasons.iter().any(|r| r.contains("below the bar of 81%")),
            "{:?}",
            d.reasons
        );
    }

    #[test]
    fn lost_mappings_are_skipped_and_confidence_discounts() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let go = |policy: &Policy| {
            choose_with(
                &preds(),
                &sig(true),
                &avail,
                &ProgramTraits::default(),
                1.0,
                policy,
            )
            .assignments
        };
        let hugetlb = vec![(Category::HeapLarge, Backing::Hugetlb2m)];
        let thp = vec![(Category::HeapLarge, Backing::Thp2m)];
        assert_eq!(
            go(&Policy {
                min_gain: 0.01,
                ..Policy::default()
            }),
            hugetlb
        );
        let lost = Policy {
            min_gain: 0.01,
            lost: vec!["heap-large".into()],
            ..Policy::default()
        };
        assert_eq!(go(&lost), thp);
        // 300 ms at confidence 0.5 counts less than 250 ms fully borne out.
        let doubted = Policy {
            min_gain: 0.01,
            confidence: vec![("heap-large".into(), 0.5), ("all".into(), 0.5)],
            ..Policy::default()
        };
        assert_eq!(go(&doubted), thp);
    }

    /// A fragmented machine: THP folios beyond the free 2 MB blocks fault in as
    /// 4 KB pages, so hugetlb (reserved ahead) wins where the pool has pages.
    #[test]
    fn fragmentation_discounts_thp() {
        let mut v = preds();
        for p in &mut v {
            if p.label.contains("thp") {
                p.thp_pages = 100;
            }
        }
        let avail = |free_blocks| Availability {
            hugetlb_2m_free: 0,
            thp: ThpMode::Madvise,
            thp_2m_allocatable: free_blocks,
            ..Default::default()
        };
        let thp = vec![(Category::HeapLarge, Backing::Thp2m)];
        let go = |a: &Availability| choose(&v, &sig(true), a, &ProgramTraits::default(), 1.0, 0.01);
        assert_eq!(go(&avail(None)).assignments, thp);
        assert_eq!(go(&avail(Some(1000))).assignments, thp);
        // 10 blocks for 100 folios: 25 ms of 250 expected, still above the 10 ms bar.
        let d = go(&avail(Some(10)));
        assert_eq!(d.assignments, thp);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("only 10 free 2 MB blocks")),
            "{:?}",
            d.reasons
        );
        // With a pool, hugetlb (300 ms, reserved ahead) now wins over THP's 25 ms.
        let mut a = avail(Some(10));
        a.hugetlb_2m_free = 100;
        assert_eq!(
            go(&a).assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)]
        );
        assert_eq!(thp_coverage(&v[2], &avail(Some(50))), 0.5);
    }

    /// Heap-large on 2 MB hugetlb, THP and 1 GB hugetlb pages (`walks` page
    /// walks each, the 1 GB one with `g1` 1 GB pages and no 2 MB ones).
    fn gigantic_preds(saving_1g: f64, walks_1g: u64, g1: u64) -> Vec<Prediction> {
        let mut v = vec![
            pred("all-small", vec![], 0.0, 0),
            pred(
                "heap-large:hugetlb",
                vec![(Category::HeapLarge, Backing::Hugetlb2m)],
                300.0,
                1024,
            ),
            pred(
                "heap-large:thp",
                vec![(Category::HeapLarge, Backing::Thp2m)],
                250.0,
                0,
            ),
            pred(
                "heap-large:hugetlb-1g",
                vec![(Category::HeapLarge, Backing::Hugetlb1g)],
                saving_1g,
                if g1 == 0 { 1024 } else { 0 },
            ),
        ];
        v[1].walks = 5000;
        v[2].walks = 5000;
        v[3].walks = walks_1g;
        v[3].hugetlb_1g_pages = g1;
        v
    }

    fn gigantic_avail(free_1g: u64) -> Availability {
        Availability {
            hugetlb_2m_free: 1024,
            hugetlb_1g_free: free_1g,
            thp: ThpMode::Madvise,
            ..Default::default()
        }
    }

    /// Static data on the 1 GB layout: chosen over static on THP when it saves
    /// more and the pool has its 1 GB page, the reasons naming static; one
    /// page short it stays on 2 MB pages; gaining nothing, the reasons say why.
    #[test]
    fn static_data_on_1gb_pages_is_planned_and_explained() {
        let preds = |saving_1g: f64, walks_1g: u64| {
            let mut v = vec![
                pred("all-small", vec![], 0.0, 0),
                pred(
                    "static:thp",
                    vec![(Category::Static, Backing::Thp2m)],
                    200.0,
                    0,
                ),
                pred(
                    "static:hugetlb-1g",
                    vec![(Category::Static, Backing::Hugetlb1g)],
                    saving_1g,
                    2,
                ),
            ];
            v[1].walks = 4000;
            v[2].walks = walks_1g;
            v[2].hugetlb_1g_pages = 1;
            v[2].static_pages_1g = (1, 2);
            v
        };
        let pick = |v: &[Prediction], free_1g: u64| {
            choose(
                v,
                &sig(true),
                &gigantic_avail(free_1g),
                &ProgramTraits::default(),
                1.0,
                0.01,
            )
        };
        let v = preds(260.0, 10);
        let d = pick(&v, 1);
        assert_eq!(
            d.assignments,
            vec![(Category::Static, Backing::Hugetlb1g)],
            "{:?}",
            d.reasons
        );
        assert!(
            d.reasons.iter().any(|r| r.starts_with(
                "chose static:hugetlb-1g over 2 MB pages: predicted saving 260.0 ms, 60.0 ms more \
                 than static:thp (200.0 ms)"
            ) && r.contains("static on 1 x 1 GB pages")),
            "{:?}",
            d.reasons
        );
        let d = pick(&v, 0);
        assert_eq!(
            d.assignments,
            vec![(Category::Static, Backing::Thp2m)],
            "{:?}",
            d.reasons
        );
        // 1 GB pages that save less than THP's 2 MB pages: why, for static too.
        let v = preds(150.0, 4000);
        let d = pick(&v, 1);
        assert_eq!(
            d.assignments,
            vec![(Category::Static, Backing::Thp2m)],
            "{:?}",
            d.reasons
        );
        assert!(
            d.reasons.iter().any(|r| r.starts_with(
                "1 GB pages gain nothing over 2 MB here: static:hugetlb-1g predicted saving 150.0 ms"
            ) && r.contains("TLB reach covers the footprint")),
            "{:?}",
            d.reasons
        );
        // Below the 1 % bar over THP: static stays on 2 MB pages, and says so.
        let v = preds(205.0, 10);
        let d = pick(&v, 1);
        assert_eq!(
            d.assignments,
            vec![(Category::Static, Backing::Thp2m)],
            "{:?}",
            d.reasons
        );
        assert!(
            d.reasons
                .iter()
                .any(|r| r.ends_with("static stays on 2 MB pages")),
            "{:?}",
            d.reasons
        );
    }

    /// Where 1 GB pages are predicted to save more than 2 MB pages and the pool
    /// has them, heap-large goes on them and the reasons say by how much;
    /// without 1 GB pages it stays on 2 MB pages, and the reasons say why.
    #[test]
    fn one_gb_pages_are_chosen_for_their_saving_over_2mb() {
        let v = gigantic_preds(340.0, 100, 2);
        let go = |a: &Availability| choose(&v, &sig(true), a, &ProgramTraits::default(), 1.0, 0.01);
        let d = go(&gigantic_avail(2));
        assert_eq!(
            d.assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb1g)],
            "{:?}",
            d.reasons
        );
        assert_eq!(d.prediction.as_ref().unwrap().hugetlb_1g_pages, 2);
        assert!(
            d.reasons.iter().any(|r| r.starts_with(
                "chose heap-large:hugetlb-1g over 2 MB pages: predicted saving 340.0 ms, 40.0 ms \
                 more than heap-large:hugetlb (300.0 ms)"
            ) && r.contains("page walks 100 against 5000")
                && r.contains("2 x 1 GB pages")),
            "{:?}",
            d.reasons
        );
        // One 1 GB page short: 2 MB pages, and the 1 GB mapping's reason.
        let d = go(&gigantic_avail(1));
        assert_eq!(
            d.assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)]
        );
        assert!(
            d.reasons.iter().any(|r| r
                == "heap-large:hugetlb-1g: ruled out: needs 2 hugetlb 1 GB pages, 1 available"),
            "{:?}",
            d.reasons
        );
        assert!(!d.reasons.iter().any(|r| r.contains("gain nothing")));
        // 5 ms more than 2 MB pages on a 1 s run is below the 1 % bar.
        let small = gigantic_preds(305.0, 100, 2);
        let d = choose(
            &small,
            &sig(true),
            &gigantic_avail(2),
            &ProgramTraits::default(),
            1.0,
            0.01,
        );
        assert_eq!(
            d.assignments,
            vec![(Category::HeapLarge, Backing::Hugetlb2m)],
            "{:?}",
            d.reasons
        );
        assert!(
            d.reasons.iter().any(|r| r
                == "1 GB pages: marginal saving 5.0 ms over heap-large:hugetlb is below 1.0% of \
                    the run time; heap-large stays on 2 MB pages"),
            "{:?}",
            d.reasons
        );
        assert!(
            !d.reasons.iter().any(|r| r.contains("not chosen")),
            "{:?}",
            d.reasons
        );
        // Without 2 MB pool pages the 1 GB choice is compared with THP.
        let mut a = gigantic_avail(2);
        a.hugetlb_2m_free = 0;
        let d = go(&a);
        assert!(
            d.reasons
                .iter()
                .any(|r| r.contains("90.0 ms more than heap-large:thp (250.0 ms)")),
            "{:?}",
            d.reasons
        );
    }

    /// A 1 GB mapping that is possible but saves no more than 2 MB pages is
    /// left, with the reason: the footprint fits the 2 MB pages' TLB reach,
    /// the fewer walks do not pay, or no block spans a whole gigabyte.
    #[test]
    fn one_gb_pages_that_gain_nothing_say_why() {
        let why = |v: Vec<Prediction>| {
            let d = choose(
                &v,
                &sig(true),
                &gigantic_avail(4),
                &ProgramTraits::default(),
                1.0,
                0.01,
            );
            assert_eq!(
                d.assignments,
                vec![(Category::HeapLarge, Backing::Hugetlb2m)],
                "{:?}",
                d.reasons
            );
            d.reasons
                .into_iter()
                .find(|r| r.starts_with("1 GB pages gain nothing over 2 MB here: "))
                .unwrap_or_default()
        };
        let r = why(gigantic_preds(299.0, 5000, 1));
        assert!(
            r.contains("heap-large:hugetlb-1g predicted saving 299.0 ms against 300.0 ms for heap-large:hugetlb")
                && r.contains("the 2 MB pages' TLB reach covers the footprint (5000 page walks with 1 GB pages, 5000 with 2 MB)"),
            "{r}"
        );
        let r = why(gigantic_preds(280.0, 4000, 1));
        assert!(
            r.contains("1000 fewer page walks with 1 GB pages save less than they cost"),
            "{r}"
        );
        let r = why(gigantic_preds(300.0, 5000, 0));
        assert!(
            r.contains("no heap-large block spans a whole 1 GB page"),
            "{r}"
        );
        // No 1 GB mapping analysed (the kernel has no 1 GB pages): nothing said.
        let mut v = gigantic_preds(340.0, 100, 2);
        v.pop();
        assert_eq!(why(v), "");
    }

    /// `rounds` rounds in which each of `threads` threads allocates a block of
    /// `pages` x 2 MB and frees it.
    fn churn_trace(threads: u32, rounds: u64, pages: u64) -> crate::pool::PoolTrace {
        let mut b = crate::pool::TraceBuilder::default();
        for r in 0..rounds {
            let at = |t: u32| ((r << 8) + t as u64 + 1) << 32;
            for t in 0..threads {
                b.alloc(t, at(t), pages << 21, false, None);
            }
            for t in 0..threads {
                b.free(t, at(t));
            }
        }
        b.finish()
    }

    fn pool_decision(avail: &Availability) -> PlanDecision {
        let mut p = pred(
            "heap-large",
            vec![(Category::HeapLarge, Backing::Hugetlb2m)],
            300.0,
            16,
        );
        p.hugetlb_pages = 16;
        choose(
            &[p],
            &sig(true),
            avail,
            &ProgramTraits::default(),
            1.0,
            0.01,
        )
    }

    #[test]
    fn churning_threads_get_the_shared_pool_sized_to_their_peak() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let cost = crate::cost::CostModel::default();
        // Two threads, 100 rounds of 8 pages each: at most 16 pages live, first
        // fit never fragments, one block of slack for the threads' order.
        let mut d = pool_decision(&avail);
        let before = d.hugetlb_pages();
        choose_pool(
            &mut d,
            &[churn_trace(2, 100, 8)],
            131072,
            &cost,
            &avail,
            1.0,
            0.01,
        );
        let w = d.pool.clone().expect("weighed");
        assert!(w.chosen, "{:?}", d.reasons);
        assert_eq!(w.profile.peak_pages, 16);
        assert_eq!(w.pages, 16 + 8);
        assert_eq!(d.pool_2m(), Some(24));
        // The pool's pages replace the per-allocation peak in the needs.
        assert_eq!(before, 16);
        assert_eq!(d.hugetlb_pages(), 24);
        let line = d.reasons.last().unwrap();
        assert!(
            line.starts_with("pool vs per-allocation: shared pool chosen")
                && line
                    .contains("`pool hugetlb-2m 24` (peak 16 live pages, 8 of slack for 2 threads")
                && line.contains("1600 x 2 MB"),
            "{line}"
        );
        // Single-threaded churn: the peak, no slack.
        let mut d = pool_decision(&avail);
        choose_pool(
            &mut d,
            &[churn_trace(1, 100, 8)],
            131072,
            &cost,
            &avail,
            1.0,
            0.01,
        );
        assert_eq!(d.pool_2m(), Some(8));
        // Too few free pages for the pool: per allocation, and said.
        let short = Availability {
            hugetlb_2m_free: 20,
            ..avail.clone()
        };
        let mut d = pool_decision(&short);
        choose_pool(
            &mut d,
            &[churn_trace(2, 100, 8)],
            131072,
            &cost,
            &short,
            1.0,
            0.01,
        );
        assert_eq!(d.pool_2m(), None);
        assert_eq!(d.hugetlb_pages(), 16);
        assert!(
            d.reasons
                .last()
                .unwrap()
                .contains("would need 24 hugetlb 2 MB pages with it, 20 available"),
            "{:?}",
            d.reasons
        );
    }

    #[test]
    fn a_program_allocating_once_keeps_per_allocation_pages() {
        let avail = Availability {
            hugetlb_2m_free: 1000,
            thp: ThpMode::Madvise,
            ..Default::default()
        };
        let cost = crate::cost::CostModel::default();
        let mut b = crate::pool::TraceBuilder::default();
        b.alloc(1, 1 << 32, 16 << 21, false, None);
        b.thread(2);
        let mut d = pool_decision(&avail);
        choose_pool(&mut d, &[b.finish()], 131072, &cost, &avail, 1.0, 0.0);
        assert_eq!(d.pool_2m(), None);
        assert_eq!(d.hugetlb_pages(), 16);
        let line = d.reasons.last().unwrap();
        assert!(
            line.starts_with("pool vs per-allocation: per-allocation pages: the program allocates its blocks once"),
            "{line}"
        );
        // A plan without hugetlb blocks weighs nothing and says nothing.
        let mut thp = d.clone();
        thp.assignments = vec![(Category::HeapLarge, Backing::Thp2m)];
        thp.pool = None;
        let n = thp.reasons.len();
        choose_pool(
            &mut thp,
            &[churn_trace(2, 100, 8)],
            131072,
            &cost,
            &avail,
            1.0,
            0.0,
        );
        assert!(thp.pool.is_none() && thp.reasons.len() == n);
    }
}
