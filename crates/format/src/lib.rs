//! The formats shared by the runtime library (C) and the tool (Rust), one module
//! per section of docs/formats.md, each the only place that reads or writes its
//! format on the Rust side.
//!
//! Invariants: everything here reads untrusted input (files a program under the
//! library wrote, or anyone could plant): readers return typed errors that name
//! the problem (`thiserror`), never panic, and accept what older versions of the
//! library wrote (missing fields take their defaults). No process or kernel I/O
//! beyond reading the file asked for.
//!
//! Now here: the runtime library's exit summary (§4, `summary`). The allocation
//! log, reference stream, plan file and profile bundle move here next (issue 17).

pub mod summary;
