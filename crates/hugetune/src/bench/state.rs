//! The machine around a suite: what the kernel's huge page settings were before
//! and after (they must be equal), the kernel-state guard that holds the lock,
//! the pools and free page reporting for the whole suite and THP / mTHP modes
//! for single runs (all restored on drop, error and Ctrl-C by
//! `hugetune_host::kernel_state`), and the facts a report states.

use anyhow::{Context, Result};
use hugetune_host::kernel_state::{
    hold_page_reporting, lock_kernel_state, set_hugetlb_pool_holding, set_mthp_enabled_holding,
    set_thp_enabled_holding, KernelStateLock, PoolChange, SysfsChange, ThpChange,
};
use hugetune_host::machine::{self, HUGEPAGES_SYSFS, THP_SYSFS};
use hugetune_host::procfs::{read_trimmed, selected_choice};
use serde::{Deserialize, Serialize};
use std::path::Path;

use super::config::Config;

/// Huge page settings of the kernel that suites may change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSnapshot {
    pub thp_enabled: String,
    /// (size in kB, mode) of every per-size THP control.
    pub mthp: Vec<(u64, String)>,
    /// (page size in kB, persistent pool: nr_hugepages less surplus_hugepages).
    /// The persistent size is the setting a suite changes and restores; surplus
    /// pages are pages still in use after some pool shrank (another test's
    /// interrupted child that has not yet exited), which leave by themselves.
    pub pools: Vec<(u64, u64)>,
}

pub fn snapshot() -> KernelSnapshot {
    let root = Path::new(THP_SYSFS);
    KernelSnapshot {
        thp_enabled: read_trimmed(&root.join("enabled"))
            .and_then(|t| selected_choice(&t))
            .unwrap_or_else(|| "unknown".into()),
        mthp: machine::mthp_sizes(root),
        pools: machine::hugetlb_pools(Path::new(HUGEPAGES_SYSFS))
            .into_iter()
            .map(|p| (p.page_kb, p.nr.saturating_sub(p.surplus)))
            .collect(),
    }
}

/// Reads the settings with the kernel-state lock held, so that a test or tool
/// holding it does not show its temporary values; without the lock (not root),
/// as they are.
pub fn resting_snapshot() -> KernelSnapshot {
    match lock_kernel_state() {
        Ok(_l) => snapshot(),
        Err(_) => snapshot(),
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Kernel state held for a whole suite: the lock, free page reporting held off
/// and the pools grown by what the configurations need. Dropping it (or an
/// interrupt) restores everything.
pub struct Held {
    // Field order is drop order: pools and reporting before the lock.
    pools: Vec<PoolChange>,
    _reporting: Option<SysfsChange>,
    lock: Option<KernelStateLock>,
    /// What was done, for the report.
    pub notes: Vec<String>,
    /// Pages the pools really gained (2 MB, 1 GB).
    pub got_2m: u64,
    pub got_1g: u64,
}

/// A page or two of slack for the 2 MB pool: the library's tails and alignment
/// never need more, and a short pool would silently measure a fallback.
pub const POOL_SLACK: u64 = 2;

impl Held {
    /// Nothing held (not root: configurations that change kernel state are
    /// reported as skipped).
    pub fn none() -> Held {
        Held {
            pools: vec![],
            _reporting: None,
            lock: None,
            notes: vec![],
            got_2m: 0,
            got_1g: 0,
        }
    }

    /// Takes the lock, holds free page reporting off and grows the pools by the
    /// largest need of `configs` (plus slack).
    pub fn take(configs: &[&Config]) -> Result<Held> {
        let lock = lock_kernel_state()?;
        let reporting = hold_page_reporting(&lock)?;
        let mut notes = Vec::new();
        if let Some(r) = &reporting {
            notes.push(format!(
                "free page reporting held off during the suite ({} was {}, restored)",
                r.path.display(),
                r.previous
            ));
        }
        let mut held = Held {
            pools: vec![],
            _reporting: reporting,
            lock: Some(lock),
            notes,
            got_2m: 0,
            got_1g: 0,
        };
        let need_2m = configs.iter().map(|c| c.pool_2m).max().unwrap_or(0);
        let need_1g = configs.iter().map(|c| c.pool_1g).max().unwrap_or(0);
        for (kb, need) in [(2048u64, need_2m), (1 << 20, need_1g)] {
            if need == 0 {
                continue;
            }
            let Some(pool) = machine::pool(kb) else {
                held.notes
                    .push(format!("this kernel has no {kb} kB hugetlb pool"));
                continue;
            };
            // 1 GB pages are taken whole (the library's 1 GB heads, mimalloc's
            // reservation): no slack, it would cost a gigabyte.
            let slack = if kb == 2048 { POOL_SLACK } else { 0 };
            let want = pool.nr + need + slack;
            let c = set_hugetlb_pool_holding(held.lock(), kb, want)?;
            let got = c.now.saturating_sub(pool.nr);
            held.notes.push(format!(
                "{} kB pool grown from {} to {} pages for the suite ({} asked), restored afterwards",
                kb, pool.nr, c.now, want
            ));
            if c.now < want {
                held.notes.push(format!(
                    "the {kb} kB pool got {} of {} pages (fragmentation): runs needing more fall back, see their backing",
                    got,
                    need + slack
                ));
            }
            if kb == 2048 {
                held.got_2m = got;
            } else {
                held.got_1g = got;
            }
            held.pools.push(c);
        }
        Ok(held)
    }

    pub fn holds_lock(&self) -> bool {
        self.lock.is_some()
    }

    fn lock(&self) -> &KernelStateLock {
        self.lock.as_ref().expect("the kernel-state lock is held")
    }

    /// The THP and mTHP settings and the pool budget of `c` for one run;
    /// dropping the value puts the previous settings back.
    pub fn for_run(&self, c: &Config) -> Result<RunSettings> {
        let mut out = RunSettings {
            thp: vec![],
            pool: None,
            budget_given: None,
        };
        if c.thp.is_none() && c.mthp.is_empty() && c.budget_2m.is_none() {
            return Ok(out);
        }
        let Some(lock) = self.lock.as_ref() else {
            anyhow::bail!(
                "configuration {} changes kernel settings (THP, a pool budget), which needs root",
                c.name
            );
        };
        if let Some(mode) = &c.thp {
            out.thp.push(
                set_thp_enabled_holding(lock, mode)
                    .with_context(|| format!("setting THP to {mode} for {}", c.name))?,
            );
        }
        for (kb, mode) in &c.mthp {
            out.thp.push(set_mthp_enabled_holding(lock, *kb, mode)?);
        }
        if let Some(n) = c.budget_2m {
            let p = machine::pool(2048)
                .ok_or_else(|| anyhow::anyhow!("this kernel has no 2 MB hugetlb pool"))?;
            let in_use = p.taken();
            let change = set_hugetlb_pool_holding(lock, 2048, in_use + n)?;
            out.budget_given = Some(change.now.saturating_sub(in_use));
            out.pool = Some(change);
        }
        Ok(out)
    }
}

/// Settings held for one run (restored when dropped: the pool first, then THP).
pub struct RunSettings {
    pub pool: Option<PoolChange>,
    pub thp: Vec<ThpChange>,
    /// Free 2 MB pages the kernel really gave for a budget.
    pub budget_given: Option<u64>,
}

/// What a report says about the machine it ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineFacts {
    pub hostname: String,
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub mem_total_kb: u64,
    pub glibc: String,
    pub thp_enabled: String,
    pub thp_defrag: String,
    /// Hardware TLB counters can be read (`perf stat -e dTLB-load-misses`).
    pub tlb_counters: bool,
    /// What the PMU check found, in words.
    pub pmu_note: String,
    pub load_before: String,
    pub load_after: String,
    pub root: bool,
}

pub fn glibc_version() -> String {
    // SAFETY: returns a pointer to a static NUL-terminated string.
    unsafe {
        let p = libc::gnu_get_libc_version();
        if p.is_null() {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// (major, minor) of a glibc version string.
pub fn glibc_at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut it = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Whether `perf stat` counts dTLB misses here: `perf stat -e dTLB-load-misses
/// true` prints `<not supported>` without a hardware PMU (VMs).
pub fn tlb_counters() -> (bool, String) {
    let out = std::process::Command::new("perf")
        .args(["stat", "-x", ",", "-e", "dTLB-load-misses", "true"])
        .output();
    match out {
        Err(_) => (
            false,
            "perf is not installed (apt-get install linux-perf): no TLB counters".into(),
        ),
        Ok(o) => parse_perf_probe(&String::from_utf8_lossy(&o.stderr)),
    }
}

/// Reads `perf stat -x ,` output of the probe.
pub fn parse_perf_probe(stderr: &str) -> (bool, String) {
    for l in stderr.lines() {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() >= 3 && f[2].starts_with("dTLB-load-misses") {
            if f[0].trim().parse::<u64>().is_ok() {
                return (true, "hardware TLB counters available (perf stat)".into());
            }
            return (
                false,
                format!(
                    "no hardware PMU: perf stat -e dTLB-load-misses says {} (TLB misses are not counted; times and faults are)",
                    f[0].trim()
                ),
            );
        }
    }
    (
        false,
        format!(
            "perf stat -e dTLB-load-misses gave no count ({}): TLB misses are not counted",
            stderr.lines().last().unwrap_or("no output").trim()
        ),
    )
}

pub fn machine_facts() -> MachineFacts {
    let cpu = machine::cpu_ident().brand;
    let mem = machine::mem_total_kb().unwrap_or(0);
    let (tlb, note) = tlb_counters();
    let root = Path::new(THP_SYSFS);
    MachineFacts {
        hostname: read_trimmed(Path::new("/proc/sys/kernel/hostname")).unwrap_or_default(),
        kernel: read_trimmed(Path::new("/proc/sys/kernel/osrelease")).unwrap_or_default(),
        cpu,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        mem_total_kb: mem,
        glibc: glibc_version(),
        thp_enabled: read_trimmed(&root.join("enabled"))
            .and_then(|t| selected_choice(&t))
            .unwrap_or_default(),
        thp_defrag: read_trimmed(&root.join("defrag"))
            .and_then(|t| selected_choice(&t))
            .unwrap_or_default(),
        tlb_counters: tlb,
        pmu_note: note,
        load_before: loadavg(),
        load_after: String::new(),
        root: is_root(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_probe_output() {
        let none = "<not supported>,,dTLB-load-misses,0,100.00,,\n";
        let (ok, note) = parse_perf_probe(none);
        assert!(!ok);
        assert!(note.contains("<not supported>"), "{note}");
        let (ok, _) = parse_perf_probe("12345,,dTLB-load-misses,812345,100.00,,\n");
        assert!(ok);
        let (ok, note) = parse_perf_probe("event syntax error\n");
        assert!(!ok && note.contains("event syntax error"), "{note}");
    }

    #[test]
    fn glibc_versions() {
        assert!(glibc_at_least("2.36", 2, 34));
        assert!(!glibc_at_least("2.33", 2, 34));
        assert!(glibc_at_least("3.0", 2, 34));
        assert!(!glibc_at_least("garbage", 2, 34));
        assert!(!glibc_version().is_empty());
    }
}
