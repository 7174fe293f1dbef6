//! Persistence: the profile bundle (a versioned single file) and the database of
//! programs, profiles, directives and runs (embedded SQLite).

pub mod bundle;
pub mod db;
pub mod exchange;
pub mod query;
