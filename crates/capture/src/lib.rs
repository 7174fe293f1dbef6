//! Running programs under hugetune's collectors, and reading what they produce:
//! allocation logs, reference traces, DAMON region snapshots, counters, /proc and
//! cpuid.

pub mod ab;
pub mod alloclog;
pub mod calibrate;
pub mod damon;
pub mod elf;
pub mod kernel_state;
pub mod lackey;
pub mod launch;
pub mod machine;
pub mod perf;
pub mod procfs;
pub mod profile;
pub mod qemu;
pub mod record;
pub mod refs;
pub mod runner;
pub mod session;
