//! `hugetune frag --try N --size 2M|1G`: raise a hugetlb pool by N pages under the
//! kernel-state lock, see how many the kernel really gives and how long it takes
//! (with the compaction counters it moved), then put the pool back exactly —
//! on return, on error and on Ctrl-C (`host::kernel_state`).

use crate::snapshot::Counters;
use anyhow::{bail, Context, Result};
use hugetune_host::kernel_state;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// `2M`/`2MB`/`2048k` → 2048 kB; `1G`/`1GB` → 1048576 kB.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = if let Some(n) = t.strip_suffix('g') {
        (n, 1 << 20)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1 << 10)
    } else if let Some(n) = t.strip_suffix('k') {
        (n, 1)
    } else {
        bail!("huge page size {s:?}: expected 2M or 1G");
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("huge page size {s:?}: expected 2M or 1G"))?;
    let kb = n * mult;
    if kb != 2048 && kb != 1 << 20 {
        bail!("huge page size {s:?}: this command tries 2M or 1G pages");
    }
    Ok(kb)
}

#[derive(Debug, Clone, Serialize)]
pub struct TrialResult {
    pub page_kb: u64,
    pub asked: u64,
    pub pool_before: u64,
    pub given: u64,
    /// Time the kernel took to grow the pool (the write to nr_hugepages).
    pub seconds: f64,
    /// Pool size after restoring (equals `pool_before`).
    pub pool_after: u64,
    pub restore_seconds: f64,
    /// vmstat counters that moved while the pool grew (compact_*, pgmigrate_*, …).
    pub counters_delta: BTreeMap<String, i64>,
}

fn vmstat() -> Result<Counters> {
    let t = std::fs::read_to_string("/proc/vmstat").context("reading /proc/vmstat")?;
    Ok(Counters::from_vmstat(&crate::parse::parse_vmstat(
        &t,
        "/proc/vmstat",
    )?))
}

/// Grows the `page_kb` pool by `n` pages (relative to its size now), measures,
/// restores. Holds the kernel-state lock throughout.
pub fn try_pool(page_kb: u64, n: u64) -> Result<TrialResult> {
    if n == 0 {
        bail!("--try needs at least one page");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("--try changes the hugetlb pool (nr_hugepages), which needs root");
    }
    let lock = kernel_state::lock_kernel_state()?;
    let before = vmstat()?;
    let t0 = Instant::now();
    let change = kernel_state::reserve_hugetlb_holding(&lock, page_kb, n)?;
    let seconds = t0.elapsed().as_secs_f64();
    let after = vmstat()?;
    let (previous, given) = (change.previous, change.added());
    let t1 = Instant::now();
    drop(change);
    let restore_seconds = t1.elapsed().as_secs_f64();
    let path = format!("/sys/kernel/mm/hugepages/hugepages-{page_kb}kB/nr_hugepages");
    let pool_after: u64 = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}"))?
        .trim()
        .parse()
        .with_context(|| format!("parsing {path}"))?;
    if pool_after != previous {
        bail!("{path} reads {pool_after} after restoring, expected {previous}");
    }
    let mut delta = after.delta(&before);
    delta.retain(|_, v| *v != 0);
    Ok(TrialResult {
        page_kb,
        asked: n,
        pool_before: previous,
        given,
        seconds,
        pool_after,
        restore_seconds,
        counters_delta: delta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2M").unwrap(), 2048);
        assert_eq!(parse_size("2mb").unwrap(), 2048);
        assert_eq!(parse_size("1G").unwrap(), 1 << 20);
        assert_eq!(parse_size("2048k").unwrap(), 2048);
        assert!(parse_size("4M").is_err());
        assert!(parse_size("xG").is_err());
        assert!(parse_size("").is_err());
    }
}
