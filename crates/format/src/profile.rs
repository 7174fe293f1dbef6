//! The profile bundle's contents (docs/formats.md §7): metadata (JSON), the
//! allocation log (§2, zstd), the reference stream (§6, zstd) and optional extra
//! sections (DAMON snapshots). The container is `bundle`.
//!
//! Invariants: a bundle is written only with a stream that reads to its END
//! (never a cut one) and is replaced atomically; reading checks the metadata's
//! version before its fields, the allocation log completely and the stream's
//! header (its body is checked as it is read).

use crate::alloclog::{AllocLog, LogError};
use crate::bundle::{self, BundleError, Section};
use crate::refstream::{RefReader, StreamHeader, Totals};
use hugetune_host::machine::Machine;
use hugetune_host::procfs::RunStats;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FORMAT: &str = "hugetune-profile";
/// Version 2 added `ref_stream` (the stream's header and totals).
pub const META_VERSION: u32 = 2;
/// Metadata versions this hugetune reads.
pub const META_VERSIONS: std::ops::RangeInclusive<u32> = 1..=2;

/// What the reference stream section holds, read from it when the bundle is written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefStreamInfo {
    /// The stream's format version (1: lackey bundles before version 2).
    pub version: u32,
    pub header: StreamHeader,
    pub totals: Totals,
}

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
    /// Filled in by `write` from the stream itself (absent in version-1 metadata).
    #[serde(default)]
    pub ref_stream: Option<RefStreamInfo>,
    /// The CPUs the profiled command could run on (its affinity when it was
    /// launched); the analysis spreads its threads over them. Absent in
    /// bundles recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Vec<u32>>,
}

/// What is wrong with a profile bundle, or why one could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Container(#[from] BundleError),
    #[error("bundle {}", path.display())]
    In {
        path: std::path::PathBuf,
        #[source]
        source: Box<ProfileError>,
    },
    #[error("the 'meta' section is not JSON")]
    MetaNotJson(#[source] serde_json::Error),
    #[error("metadata format '{format}' version {version} is not supported (this hugetune reads '{FORMAT}' versions {}..={})", META_VERSIONS.start(), META_VERSIONS.end())]
    Unsupported { format: String, version: u64 },
    #[error("the 'meta' section is not valid profile metadata")]
    BadMeta(#[source] serde_json::Error),
    #[error("the 'alloc' section does not decompress")]
    AllocNotZstd(#[source] std::io::Error),
    #[error(transparent)]
    AllocLog(#[from] LogError),
    #[error("the 'refs' section")]
    Refs(#[source] std::io::Error),
    #[error("the 'refs' section does not match the stream the metadata describes")]
    RefsMismatch,
    #[error("the reference stream has no totals after its end")]
    NoTotals,
    #[error("the captured reference stream")]
    CapturedStream(#[source] Box<ProfileError>),
    #[error("a bundle from {0} needs its reference stream")]
    NeedsStream(String),
    #[error("section name '{0}' is reserved")]
    Reserved(String),
    #[error("encoding the bundle")]
    Encode(#[source] std::io::Error),
}

type Result<T> = std::result::Result<T, ProfileError>;

pub struct Bundle {
    pub meta: ProfileMeta,
    pub alloc_log: Vec<u8>,
    /// The zstd-compressed reference stream (`refstream` format);
    /// `None` only for DAMON bundles, which hold region frequencies instead.
    pub refs: Option<Vec<u8>>,
    /// Sections beyond meta, alloc and refs (e.g. `damon`), as stored.
    pub extra: Vec<Section>,
}

/// Reads a whole reference stream: its header and END's totals, or the reason it is
/// not a valid stream.
pub fn scan_refs(refs: &[u8]) -> Result<RefStreamInfo> {
    let mut r = RefReader::new(refs).map_err(ProfileError::Refs)?;
    while r.next_event().map_err(ProfileError::Refs)?.is_some() {}
    let totals = r.totals().ok_or(ProfileError::NoTotals)?;
    Ok(RefStreamInfo {
        version: r.version(),
        header: r.header().clone(),
        totals,
    })
}

/// `ref_source` of bundles that hold DAMON snapshots and no reference stream.
pub const DAMON_SOURCE: &str = "damon";

/// Section names `write` reserves.
const CORE_SECTIONS: [&str; 3] = ["meta", "alloc", "refs"];

/// Writes a bundle; checks the reference stream end to end first (a bundle never
/// holds a stream that is cut or corrupt) and returns the metadata as written,
/// with `ref_stream` filled in.
pub fn write(
    path: &Path,
    meta: &ProfileMeta,
    alloc_log: &[u8],
    refs: Option<Vec<u8>>,
    extra: Vec<Section>,
) -> Result<ProfileMeta> {
    write_scanned(path, meta, alloc_log, refs, None, extra)
}

/// `write` for a stream its capture has already read to its end and checked
/// (`scanned`: what that read found): the stream is not read again. Reading a
/// sampled stream of tens of millions of references costs seconds, and the
/// capture has just done it.
pub fn write_scanned(
    path: &Path,
    meta: &ProfileMeta,
    alloc_log: &[u8],
    refs: Option<Vec<u8>>,
    scanned: Option<RefStreamInfo>,
    extra: Vec<Section>,
) -> Result<ProfileMeta> {
    let mut meta = meta.clone();
    meta.format = FORMAT.into();
    meta.version = META_VERSION;
    meta.ref_stream = match (&refs, scanned) {
        (Some(_), Some(info)) => Some(info),
        (Some(r), None) => {
            Some(scan_refs(r).map_err(|e| ProfileError::CapturedStream(Box::new(e)))?)
        }
        (None, _) if meta.ref_source == DAMON_SOURCE => None,
        (None, _) => return Err(ProfileError::NeedsStream(meta.ref_source.clone())),
    };
    for e in &extra {
        if CORE_SECTIONS.contains(&e.name.as_str()) {
            return Err(ProfileError::Reserved(e.name.clone()));
        }
    }
    let mut sections = vec![
        Section {
            name: "meta".into(),
            data: serde_json::to_vec_pretty(&meta).map_err(|e| ProfileError::Encode(e.into()))?,
        },
        Section {
            name: "alloc".into(),
            data: zstd::encode_all(alloc_log, 3).map_err(ProfileError::Encode)?,
        },
    ];
    if let Some(r) = refs {
        sections.push(Section {
            name: "refs".into(),
            data: r,
        });
    }
    sections.extend(extra);
    bundle::write(path, &sections)?;
    Ok(meta)
}

pub fn read(path: &Path) -> Result<Bundle> {
    let s = bundle::read(path)?;
    decode(s).map_err(|e| ProfileError::In {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// Checks and splits a bundle's sections (the container is already checked).
pub fn decode(s: Vec<Section>) -> Result<Bundle> {
    let meta_bytes = bundle::section(&s, "meta")?;
    // The version first, so that a newer bundle gets a version error rather than
    // a complaint about a field this hugetune does not know.
    let head: serde_json::Value =
        serde_json::from_slice(meta_bytes).map_err(ProfileError::MetaNotJson)?;
    let format = head["format"].as_str().unwrap_or("");
    let version = head["version"].as_u64().unwrap_or(0);
    if format != FORMAT || !META_VERSIONS.contains(&(version as u32)) || version > u32::MAX as u64 {
        return Err(ProfileError::Unsupported {
            format: format.to_string(),
            version,
        });
    }
    let meta: ProfileMeta = serde_json::from_value(head).map_err(ProfileError::BadMeta)?;
    let alloc_log =
        zstd::decode_all(bundle::section(&s, "alloc")?).map_err(ProfileError::AllocNotZstd)?;
    // Validate now, so a bad log is reported against the bundle, not later.
    AllocLog::parse(&alloc_log, Path::new("alloc section"))?;
    let refs = match bundle::section(&s, "refs") {
        Ok(r) => Some(r.to_vec()),
        Err(_) if meta.ref_source == DAMON_SOURCE => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(refs) = &refs {
        // The stream's header now (cheap); its body is checked as it is read.
        let r = RefReader::new(&refs[..]).map_err(ProfileError::Refs)?;
        if let Some(info) = &meta.ref_stream {
            if info.version != r.version() || &info.header != r.header() {
                return Err(ProfileError::RefsMismatch);
            }
        }
    }
    let extra = s
        .into_iter()
        .filter(|x| !CORE_SECTIONS.contains(&x.name.as_str()))
        .collect();
    Ok(Bundle {
        meta,
        alloc_log,
        refs,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refstream::RefWriter;
    use proptest::prelude::*;

    /// An error and its causes, as the CLI prints them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut s = e.to_string();
        let mut c = e.source();
        while let Some(x) = c {
            s += &format!(": {x}");
            c = x.source();
        }
        s
    }

    /// The smallest valid allocation log: a version-1 header without records.
    fn empty_log() -> Vec<u8> {
        let mut b = crate::alloclog::MAGIC.to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&64u32.to_le_bytes());
        b.extend_from_slice(&42u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&[0u8; 40]);
        b
    }

    fn stream(n: u64) -> Vec<u8> {
        let mut w = RefWriter::new(Vec::new(), &StreamHeader::complete("test")).unwrap();
        for i in 0..n {
            w.push(0x10_0000 + i * 64, i % 3 == 0).unwrap();
        }
        w.finish(n).unwrap()
    }

    fn meta() -> ProfileMeta {
        ProfileMeta {
            format: FORMAT.into(),
            version: META_VERSION,
            created_unix: 1,
            command: vec!["x".into()],
            program: Program {
                path: "/bin/x".into(),
                build_id: None,
            },
            ref_source: "test".into(),
            ref_sampling: "complete".into(),
            refs: 1000,
            instructions: 0,
            capture_s: 0.5,
            pid: 42,
            native: RunStats::default(),
            machine: hugetune_host::machine::machine(None).unwrap(),
            runtime_summary: None,
            ref_stream: None,
            affinity: None,
        }
    }

    fn valid_bundle(dir: &Path) -> (std::path::PathBuf, ProfileMeta) {
        let p = dir.join("b.htb");
        let extra = vec![Section {
            name: "damon".into(),
            data: b"{}".to_vec(),
        }];
        let m = write(&p, &meta(), &empty_log(), Some(stream(1000)), extra).unwrap();
        (p, m)
    }

    #[test]
    fn round_trip_fills_the_stream_info_and_keeps_extra_sections() {
        let d = tempfile::tempdir().unwrap();
        let (p, m) = valid_bundle(d.path());
        let info = m.ref_stream.clone().unwrap();
        assert_eq!(info.version, 2);
        assert_eq!(info.totals.refs_written, 1000);
        let b = read(&p).unwrap();
        assert_eq!(b.meta, m);
        assert_eq!(b.extra.len(), 1);
        assert_eq!(b.extra[0].name, "damon");
    }

    #[test]
    fn a_cut_stream_is_never_written() {
        let d = tempfile::tempdir().unwrap();
        let s = stream(5000);
        let raw = zstd::decode_all(&s[..]).unwrap();
        let cut = zstd::encode_all(&raw[..raw.len() - 3], 3).unwrap();
        let e = write(
            &d.path().join("c.htb"),
            &meta(),
            &empty_log(),
            Some(cut),
            vec![],
        )
        .unwrap_err();
        let e = chain(&e);
        assert!(e.contains("reference stream"), "{e}");
        assert!(!d.path().join("c.htb").exists());
    }

    fn rewrite_meta(p: &Path, f: impl FnOnce(&mut serde_json::Value)) {
        let mut s = bundle::read(p).unwrap();
        let m = s.iter_mut().find(|x| x.name == "meta").unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        f(&mut v);
        m.data = serde_json::to_vec(&v).unwrap();
        bundle::write(p, &s).unwrap();
    }

    #[test]
    fn versions_are_checked_first_and_version_1_still_reads() {
        let d = tempfile::tempdir().unwrap();
        let (p, _) = valid_bundle(d.path());
        rewrite_meta(&p, |v| {
            v["version"] = 3.into();
            v["new_field"] = "x".into();
        });
        let e = chain(&read(&p).err().unwrap());
        assert!(e.contains("version 3 is not supported"), "{e}");
        // Version 1 metadata had no ref_stream.
        let (p, _) = valid_bundle(d.path());
        rewrite_meta(&p, |v| {
            v["version"] = 1.into();
            v.as_object_mut().unwrap().remove("ref_stream");
        });
        let b = read(&p).unwrap();
        assert_eq!(b.meta.version, 1);
        assert!(b.meta.ref_stream.is_none());
        // A stream that does not match its description.
        let (p, _) = valid_bundle(d.path());
        rewrite_meta(&p, |v| v["ref_stream"]["header"]["source"] = "other".into());
        let e = chain(&read(&p).err().unwrap());
        assert!(e.contains("does not match"), "{e}");
    }

    /// The run's affinity is kept; bundles from before it load without one,
    /// and a list that is not CPU numbers is refused.
    #[test]
    fn affinity_round_trips_and_old_bundles_load_without_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.htb");
        let mut m = meta();
        m.affinity = Some(vec![0, 1, 5]);
        write(&p, &m, &empty_log(), Some(stream(100)), vec![]).unwrap();
        assert_eq!(read(&p).unwrap().meta.affinity, Some(vec![0, 1, 5]));
        let (p, _) = valid_bundle(d.path());
        rewrite_meta(&p, |v| {
            v.as_object_mut().unwrap().remove("affinity");
        });
        assert_eq!(read(&p).unwrap().meta.affinity, None);
        rewrite_meta(&p, |v| v["affinity"] = "0-1".into());
        let e = chain(&read(&p).err().unwrap());
        assert!(e.contains("not valid profile metadata"), "{e}");
    }

    fn mutate(bytes: &[u8], ops: &[(u8, usize, u8)]) -> Vec<u8> {
        let mut b = bytes.to_vec();
        for &(op, at, val) in ops {
            if b.is_empty() {
                break;
            }
            let i = at % b.len();
            match op % 4 {
                0 => b[i] ^= val | 1,
                1 => b.truncate(i),
                2 => b.insert(i, val),
                _ => {
                    b.remove(i);
                }
            }
        }
        b
    }

    proptest! {
        // The reader fuzzed: mutated bundles (bit flips, cuts, insertions,
        // deletions) and mutated metadata are errors, never panics. With the
        // container's checksums fixed up, mutations reach the sections' readers.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("HUGETUNE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200)))]
        #[test]
        fn mutated_bundles_never_panic(
            ops in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
            section in 0usize..4,
            reseal in any::<bool>(),
        ) {
            let d = tempfile::tempdir().unwrap();
            let (p, _) = valid_bundle(d.path());
            let bytes = std::fs::read(&p).unwrap();
            let input = if reseal {
                let mut s = bundle::decode(&bytes).unwrap();
                let k = section % s.len();
                s[k].data = mutate(&s[k].data, &ops);
                bundle::encode(&s).unwrap()
            } else {
                mutate(&bytes, &ops)
            };
            if let Ok(s) = bundle::decode(&input) {
                if let Ok(Bundle { refs: Some(refs), .. }) = decode(s) {
                    // Whatever was accepted reads to an end or to an error.
                    let mut r = RefReader::new(&refs[..]).unwrap();
                    let mut n = 0u64;
                    while let Ok(Some(_)) = r.next_event() {
                        n += 1;
                        prop_assert!(n < 10_000_000);
                    }
                }
            }
        }
    }

    #[test]
    fn only_damon_bundles_may_lack_references() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("d.htb");
        assert!(write(&p, &meta(), &empty_log(), None, vec![]).is_err());
        let mut m = meta();
        m.ref_source = DAMON_SOURCE.into();
        m.ref_sampling = "regions".into();
        let extra = vec![Section {
            name: "damon".into(),
            data: b"{}".to_vec(),
        }];
        let w = write(&p, &m, &empty_log(), None, extra).unwrap();
        assert!(w.ref_stream.is_none());
        let b = read(&p).unwrap();
        assert!(b.refs.is_none());
        assert_eq!(b.extra[0].name, "damon");
    }
}
