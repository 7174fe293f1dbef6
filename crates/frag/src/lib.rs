//! Live physical memory fragmentation (`hugetune frag`, seed 003):
//!
//! - `parse`: `/proc/buddyinfo`, `/proc/pagetypeinfo`, `/proc/zoneinfo`, `/proc/vmstat`
//!   as pure functions over text (errors name the file and line, never panic);
//! - `index`: the kernel's integer fragmentation metrics (`mm/vmstat.c`);
//! - `scan`: a `/proc/kpageflags` walk classifying every page and pageblock (root);
//! - `snapshot`: everything read at one moment, with the derived estimates
//!   (2 MB pages now and after compaction, clean 1 GB ranges);
//! - `trial`: `--try`, a hugetlb pool raised and restored under the kernel-state lock;
//! - `trace`: tracefs sessions for `kmem:mm_page_alloc_extfrag` counts and
//!   `mm_page_alloc`/`mm_page_free` recording;
//! - `render`: terminal, JSON and HTML views.

pub mod debugfs;
pub mod index;
pub mod parse;
pub mod render;
pub mod scan;
pub mod snapshot;
pub mod trace;
pub mod trial;

pub use parse::ParseError;

/// Migratetype names as the kernel prints them, by number (`include/linux/mmzone.h`,
/// with CMA configured). `ISOLATE` follows CMA when CMA exists; kernels without CMA
/// print `Isolate` in CMA's place, so numbers beyond 2 depend on the kernel: use
/// `migratetype_name` with the pagetypeinfo column list when it is known.
pub const MIGRATETYPES: [&str; 3] = ["Unmovable", "Movable", "Reclaimable"];

/// The name of migratetype `n` given the kernel's column list from pagetypeinfo
/// (which prints the types in number order); falls back to the three fixed types.
pub fn migratetype_name(n: i64, columns: &[String]) -> String {
    if n >= 0 {
        if let Some(c) = columns.get(n as usize) {
            return c.clone();
        }
        if let Some(c) = MIGRATETYPES.get(n as usize) {
            return c.to_string();
        }
    }
    format!("type{n}")
}
