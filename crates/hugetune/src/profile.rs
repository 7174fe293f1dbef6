//! The profile bundle's contents: metadata (JSON), the allocation log (zstd) and the
//! reference stream (already zstd). The container is `hugetune_store::bundle`;
//! docs/formats.md §6 documents the sections.

use anyhow::{bail, Context, Result};
use hugetune_capture::alloclog::AllocLog;
use hugetune_capture::machine::Machine;
use hugetune_capture::runner::RunStats;
use hugetune_store::bundle::{self, Section};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FORMAT: &str = "hugetune-profile";
pub const META_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub path: String,
    pub build_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileMeta {
    pub format: String,
    pub version: u32,
    pub created_unix: u64,
    /// The profiled command line.
    pub command: Vec<String>,
    pub program: Program,
    /// Which reference source produced the stream (`valgrind-lackey`).
    pub ref_source: String,
    /// Whether every reference is in the stream (`complete`) or a sample.
    pub ref_sampling: String,
    pub refs: u64,
    pub instructions: u64,
    pub capture_s: f64,
    pub pid: u32,
    /// One run of the same command without any instrumentation.
    pub native: RunStats,
    pub machine: Machine,
    pub runtime_summary: Option<serde_json::Value>,
}

pub struct Bundle {
    pub meta: ProfileMeta,
    pub alloc_log: Vec<u8>,
    /// The zstd-compressed reference stream (hugetune_capture::refs format).
    pub refs: Vec<u8>,
}

pub fn write(path: &Path, meta: &ProfileMeta, alloc_log: &[u8], refs: Vec<u8>) -> Result<()> {
    let sections = vec![
        Section {
            name: "meta".into(),
            data: serde_json::to_vec_pretty(meta)?,
        },
        Section {
            name: "alloc".into(),
            data: zstd::encode_all(alloc_log, 3)?,
        },
        Section {
            name: "refs".into(),
            data: refs,
        },
    ];
    bundle::write(path, &sections)
}

pub fn read(path: &Path) -> Result<Bundle> {
    let s = bundle::read(path)?;
    let meta: ProfileMeta =
        serde_json::from_slice(bundle::section(&s, "meta")?).with_context(|| {
            format!(
                "bundle {}: the 'meta' section is not valid profile metadata",
                path.display()
            )
        })?;
    if meta.format != FORMAT || meta.version != META_VERSION {
        bail!(
            "bundle {}: metadata format '{}' version {} is not supported (this hugetune reads '{FORMAT}' version {META_VERSION})",
            path.display(),
            meta.format,
            meta.version
        );
    }
    let alloc_log = zstd::decode_all(bundle::section(&s, "alloc")?).with_context(|| {
        format!(
            "bundle {}: the 'alloc' section does not decompress",
            path.display()
        )
    })?;
    // Validate now, so a bad log is reported against the bundle, not later.
    AllocLog::parse(&alloc_log, path)?;
    Ok(Bundle {
        meta,
        alloc_log,
        refs: bundle::section(&s, "refs")?.to_vec(),
    })
}
