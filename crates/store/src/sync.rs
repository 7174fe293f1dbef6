//! `hugetune db sync --to postgresql://…`: a host that keeps its own SQLite file
//! (offline, or before the fleet store existed) pushes its whole history to
//! the fleet store and pulls what its class learned there (the class's
//! profiles, directives, validations and calibrations). Both halves are
//! imports (`exchange.rs`), so running it again changes nothing.
//!
//! Invariants: each half is one transaction on its side; the pull names the
//! class by its key, never by a row id (ids differ between databases).

use crate::db::Db;
use crate::exchange::ImportCounts;
use anyhow::{Context, Result};
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SyncReport {
    /// Rows the fleet store gained from this host.
    pub pushed: ImportCounts,
    /// Rows this host gained from the fleet store.
    pub pulled: ImportCounts,
    /// The class pulled (its summary); None when this host has none.
    pub class: Option<String>,
}

fn class_key(db: &Db, class_id: i64) -> Result<String> {
    db.query_sql(
        "SELECT key FROM machine_classes WHERE id = ?1",
        &[class_id.into()],
    )?
    .first()
    .context("this host's class is not in its database")?
    .text(0)
}

/// Pushes `local`'s history to `fleet` and pulls `local`'s class from it.
pub fn sync(local: &mut Db, fleet: &mut Db) -> Result<SyncReport> {
    let class = local.class_id()?;
    let pushed = fleet
        .import(&local.export()?)
        .with_context(|| format!("pushing to {}", fleet.path().display()))?;
    let mut report = SyncReport {
        pushed,
        ..SyncReport::default()
    };
    let Some(class) = class else {
        return Ok(report);
    };
    let key = class_key(local, class)?;
    let remote = fleet
        .query_sql(
            "SELECT id, summary FROM machine_classes WHERE key = ?1",
            &[key.into()],
        )?
        .into_iter()
        .next()
        .context("the fleet store lacks this host's class after the push")?;
    report.class = Some(remote.text(1)?);
    report.pulled = local
        .import(&fleet.export_class(remote.int(0)?)?)
        .with_context(|| format!("pulling from {}", fleet.path().display()))?;
    Ok(report)
}
