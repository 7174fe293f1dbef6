//! The database only: programs, profiles, directives and runs (embedded SQLite),
//! their queries, and export/import of directives as JSON. The profile bundle
//! a `profiles` row names is `hugetune_format::profile`'s.
//!
//! Invariants: every multi-row write is one transaction; the schema is created
//! and migrated on open; nothing here runs processes or reads /proc.

pub mod db;
pub mod exchange;
pub mod query;
