//! Running programs under hugetune's collectors, and reading what they produce:
//! allocation logs, reference traces, DAMON region snapshots, counters; running
//! and measuring programs (runner, sessions, A/B). What the machine is and the
//! kernel-state guards are `hugetune_host`'s.

pub mod ab;
pub mod damon;
pub mod elf;
pub mod inputs;
pub mod lackey;
pub mod perf;
pub mod qemu;
pub mod record;
pub mod rounds;
pub mod runner;
pub mod session;
