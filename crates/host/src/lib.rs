//! This machine and its kernel, and nothing that runs a program: what the CPU
//! and its TLBs are (`machine`: cpuid decoded per vendor, published geometries
//! as data in `tlb_presets`), which page sizes, THP/mTHP modes and hugetlb pools
//! the kernel offers, readers of /proc and /sys (`procfs`), the measured costs
//! of TLB misses and faults (`calibrate`), and the guards through which every
//! change to kernel state goes (`kernel_state`).
//!
//! Invariants: /proc and /sys contents may come from other kernels or fixtures —
//! parsers skip what they do not understand instead of failing; every kernel
//! change is made through a `kernel_state` guard that takes the shared lock and
//! restores the old value on drop, panic and SIGINT/SIGTERM/SIGHUP.

pub mod calibrate;
pub mod journal;
pub mod kernel_state;
pub mod machine;
pub mod procfs;
