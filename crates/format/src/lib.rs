//! The formats hugetune's runtime library (C) and its tool (Rust) share, and the
//! profile bundle: one module per section of docs/formats.md, each the only place
//! that reads or writes its format on the Rust side.
//!
//! | module      | docs/formats.md               | C side                              |
//! |-------------|-------------------------------|-------------------------------------|
//! | `env`       | §1 environment (written here) | read by runtime/src/init.c          |
//! | `alloclog`  | §2 allocation log (read here) | written by runtime/src/record.c     |
//! | `plan`      | §3 plan file (written here)   | read by runtime/src/plan.c          |
//! | `summary`   | §4 exit summary (read here)   | written by runtime/src/stats.c      |
//! | `refstream` | §6 reference stream (both)    | include/hugetune/refstream.h (QEMU plugin) |
//! | `bundle`    | §7 profile bundle: container  | —                                   |
//! | `profile`   | §7 profile bundle: sections   | —                                   |
//!
//! Invariants: everything read here is untrusted input (files a program under
//! the library wrote, or anyone could plant): readers return typed errors that
//! name the problem (`thiserror`), never panic, and accept what older versions
//! wrote (missing fields take their defaults). No process or kernel I/O beyond
//! reading and writing the file asked for.

pub mod alloclog;
pub mod bundle;
pub mod env;
pub mod plan;
pub mod profile;
pub mod refstream;
pub mod summary;
