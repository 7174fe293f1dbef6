//! The fleet side of the pipeline (issue 20): how this host describes itself
//! to the database (its machine description, from which the store derives its
//! class), and what a host of a class that has no analysis of a program does:
//! analyze a stored profile's bundle (its file, or the copy a fleet store
//! keeps) again with its own TLB geometry and costs, and store the result for
//! its class.
//!
//! Invariants: a host never plans with another class's predictions; a
//! re-analysis is stored as a profile of this host's class whose origin is the
//! profile it re-analyzed (`db show profile`, `run --json`'s source).

use super::{analyze, cost_model, note, store_analysis_from};
use anyhow::{Context, Result};
use hugetune_host::machine::Machine;
use hugetune_store::db::{Db, StoredProfile};
use hugetune_store::identity::HostSpec;
use std::path::Path;

/// What this host registers with: its `hugetune machine` description.
pub fn host_spec(m: &Machine) -> Result<HostSpec> {
    Ok(HostSpec {
        hostname: m.hostname.clone(),
        cpu: m.cpu.brand.clone(),
        kernel: m.kernel.clone(),
        details: serde_json::to_value(m)?,
    })
}

/// This host's machine description, as it registered with the database.
fn this_machine(db: &Db) -> Result<Machine> {
    let host = db
        .host()?
        .context("this host has not described itself to the database")?;
    serde_json::from_value(host.details).context("this host's stored description")
}

/// Analyzes `foreign` (another class's profile) again for this host's class;
/// the stored profile, or None (with a note saying why) when its bundle is not
/// on this host.
pub fn reanalyze(db: &Db, foreign: &StoredProfile) -> Result<Option<StoredProfile>> {
    let Some(bundle) = foreign.bundle.as_deref().map(Path::new) else {
        return Ok(None);
    };
    // The file where it was taken (this host, or a shared filesystem), else the
    // copy a fleet store keeps, in a private temporary file.
    let mut kept = None;
    if !bundle.is_file() {
        let Some(bytes) = db.bundle_bytes(foreign.id)? else {
            note(format!(
                "only other machine classes have analyzed this program (profile #{}), and its bundle {} is neither \
                 on this host nor in the database: copy it here, or run `hugetune optimize` on this host",
                foreign.id,
                bundle.display()
            ));
            return Ok(None);
        };
        let mut f = tempfile::Builder::new()
            .prefix("hugetune-bundle-")
            .suffix(".htb")
            .tempfile()?;
        std::io::Write::write_all(&mut f, &bytes).context("writing the stored bundle")?;
        kept = Some(f);
    }
    let source = kept.as_ref().map_or(bundle, |f| f.path());
    let machine = this_machine(db)?;
    note(format!(
        "no analysis of this program for this machine class yet: analyzing profile #{} ({}{}) again with this host's TLB geometry and costs",
        foreign.id,
        bundle.display(),
        if kept.is_some() { ", from the database" } else { "" }
    ));
    let cost = cost_model(db, &machine)?;
    let an = analyze(source, &machine.tlb.geometry, &cost)
        .with_context(|| format!("re-analyzing profile #{}", foreign.id))?;
    let (id, _, _) = store_analysis_from(db, &an, Some(bundle), &machine, Some(foreign.id))?;
    note(format!("stored as profile #{id} for this machine class"));
    let mut p = foreign.clone();
    p.id = id;
    p.class_id = db.class_id()?;
    // The summary is this analysis's (its geometry and costs), not the origin's.
    p.summary = db
        .profile(id)?
        .context("the re-analysis just stored is not there")?
        .summary;
    Ok(Some(p))
}
