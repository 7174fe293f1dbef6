//! `hugetune db sync --to postgresql://…`: a host that keeps its own SQLite file
//! (offline, or before the fleet store existed) pushes its whole history to
//! the fleet store (with its profiles' bundle files, for hosts of other
//! classes) and pulls what its class learned there (the class's profiles,
//! directives, validations and calibrations). Both halves are imports
//! (`exchange.rs`), so running it again changes nothing.
//!
//! Invariants: each half is one transaction on its side; the pull names the
//! class by its key, never by a row id (ids differ between databases).

use crate::db::{Db, Kept, BUNDLE_MAX};
use crate::exchange::ImportCounts;
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SyncReport {
    /// Rows the fleet store gained from this host.
    pub pushed: ImportCounts,
    /// Rows this host gained from the fleet store.
    pub pulled: ImportCounts,
    /// The class pulled (its summary); None when this host has none.
    pub class: Option<String>,
    /// Bundle files of this host's profiles the fleet store gained (for hosts
    /// of other classes that re-analyze them).
    pub bundles: u64,
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
    // The bundles of the profiles taken here (re-analyses name their origin's),
    // where the files are still on this host.
    let local_bundles = local.query_sql(
        "SELECT uid, bundle FROM profiles WHERE bundle IS NOT NULL AND origin_id IS NULL ORDER BY id",
        &[],
    )?;
    for r in local_bundles {
        let (uid, file) = (r.text(0)?, PathBuf::from(r.text(1)?));
        if !file.is_file() {
            continue;
        }
        let Some(id) = fleet
            .query_sql("SELECT id FROM profiles WHERE uid = ?1", &[uid.into()])?
            .first()
            .map(|r| r.int(0))
            .transpose()?
        else {
            continue;
        };
        if fleet.put_bundle(id, &file, BUNDLE_MAX)? == Kept::Stored {
            report.bundles += 1;
        }
    }
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
