//! Running programs under hugetune's collectors, and reading what they produce:
//! allocation logs, reference traces, counters, /proc and cpuid.

pub mod ab;
pub mod alloclog;
pub mod elf;
pub mod kernel_state;
pub mod lackey;
pub mod launch;
pub mod machine;
pub mod procfs;
pub mod profile;
pub mod qemu;
pub mod record;
pub mod refs;
pub mod runner;
