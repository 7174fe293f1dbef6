//! hugetune-attach: applies a plan to a running process from outside (issue 19,
//! items 2 and 5), for programs the runtime library cannot enter (static and Go
//! binaries) and for services that cannot be restarted (`hugetune run -p PID`).
//!
//! The data flows once: /proc/PID/smaps ([`maps`]) → the plan's categories as
//! address ranges ([`ranges`], the contract of docs/attach.md) → the 2 MiB-aligned
//! pieces of them the program has populated, collapsed with
//! `process_madvise(pidfd, MADV_COLLAPSE)` ([`process`]) → verified in smaps again
//! → a [`report::Report`] ([`watch`] runs the passes, once or until the process
//! exits).
//!
//! Invariant: the only thing ever done to the process is MADV_COLLAPSE, which keeps
//! its memory's contents; every failure is counted per reason and never fatal to
//! it. The process is named by a pidfd, so a PID reused after it exited is never
//! touched.

pub mod maps;
pub mod plan;
pub mod process;
pub mod ranges;
pub mod report;
pub mod trace;
pub mod watch;

pub use plan::OutsidePlan;
pub use report::Report;
pub use watch::{attach, Options};

/// The page size MADV_COLLAPSE makes (PMD size on x86-64 and with 4 KB base pages
/// elsewhere): only the 2 MiB-aligned interior of a range can be collapsed.
pub const HUGE: u64 = 2 << 20;
/// The base page size whose pagemap entries say what is populated.
pub const BASE: u64 = 4096;
