//! Running programs and measuring them: under a reference source (QEMU plugin,
//! valgrind lackey, perf, DAMON) to profile them, and as measured runs: the one
//! process runner (`runner`: rusage, huge page sampling, server sessions with a
//! driver), `rounds` (the one interleaved-rounds engine of validate, bench, rank
//! and size) and `ab` (validation pairs and their verdict). The formats these
//! read and write are `hugetune_format`'s; what the machine is and the
//! kernel-state guards are `hugetune_host`'s.
//!
//! Invariants: no process started here outlives its run (own process group,
//! tracked by `kernel_state` so that an interrupt stops it, killed on drop or
//! timeout); a failed run is never a timing.

pub mod ab;
pub mod damon;
pub mod elf;
pub mod inputs;
pub mod lackey;
pub mod launcher;
pub mod perf;
pub mod qemu;
pub mod record;
pub mod rounds;
pub mod runner;
pub mod session;
