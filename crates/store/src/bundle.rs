//! The profile bundle: one file, a table of named sections, each with a CRC32.
//!
//! ```text
//! "HTBUNDLE"  u32 version  u32 n_sections
//! n × { name[16] (NUL-padded)  u64 offset  u64 length  u32 crc32  u32 reserved }
//! section bytes ...
//! ```
//! Readers check the magic, the version, that every section lies inside the file,
//! and every checksum, and say which check failed. Writers write a temporary file
//! and rename it, so a bundle is never seen half-written.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"HTBUNDLE";
pub const VERSION: u32 = 1;
const ENTRY: usize = 40;
const MAX_SECTIONS: u32 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub data: Vec<u8>,
}

pub fn encode(sections: &[Section]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    let mut offset = (16 + ENTRY * sections.len()) as u64;
    for s in sections {
        if s.name.is_empty() || s.name.len() > 16 || s.name.contains('\0') {
            bail!("bad section name '{}'", s.name);
        }
        let mut name = [0u8; 16];
        name[..s.name.len()].copy_from_slice(s.name.as_bytes());
        out.extend_from_slice(&name);
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(s.data.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&s.data).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        offset += s.data.len() as u64;
    }
    for s in sections {
        out.extend_from_slice(&s.data);
    }
    Ok(out)
}

pub fn decode(b: &[u8]) -> Result<Vec<Section>> {
    if b.len() < 16 {
        bail!("file is {} bytes, too short for a bundle header", b.len());
    }
    if &b[..8] != MAGIC {
        bail!("not a hugetune profile bundle (bad magic)");
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if version != VERSION {
        bail!("bundle version {version} is not supported (this hugetune reads version {VERSION})");
    }
    let n = u32::from_le_bytes(b[12..16].try_into().unwrap());
    if n > MAX_SECTIONS {
        bail!("bundle declares {n} sections (at most {MAX_SECTIONS}): corrupt");
    }
    let table_end = 16 + ENTRY * n as usize;
    if b.len() < table_end {
        bail!("bundle truncated inside its section table");
    }
    let mut out = Vec::new();
    for i in 0..n as usize {
        let e = &b[16 + ENTRY * i..16 + ENTRY * (i + 1)];
        let raw = &e[..16];
        let name = String::from_utf8_lossy(&raw[..raw.iter().position(|&c| c == 0).unwrap_or(16)])
            .into_owned();
        let off = u64::from_le_bytes(e[16..24].try_into().unwrap());
        let len = u64::from_le_bytes(e[24..32].try_into().unwrap());
        let crc = u32::from_le_bytes(e[32..36].try_into().unwrap());
        let end = off
            .checked_add(len)
            .filter(|&end| off >= table_end as u64 && end <= b.len() as u64);
        let Some(end) = end else {
            bail!("section '{name}' ({len} bytes at {off}) lies outside the {}-byte file: truncated or corrupt", b.len());
        };
        let data = &b[off as usize..end as usize];
        if crc32fast::hash(data) != crc {
            bail!("section '{name}' fails its checksum: corrupt");
        }
        out.push(Section {
            name,
            data: data.to_vec(),
        });
    }
    Ok(out)
}

pub fn write(path: &Path, sections: &[Section]) -> Result<()> {
    let bytes = encode(sections)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("bundle"),
        std::process::id()
    ));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

pub fn read(path: &Path) -> Result<Vec<Section>> {
    let b = std::fs::read(path).with_context(|| format!("reading bundle {}", path.display()))?;
    decode(&b).with_context(|| format!("bundle {}", path.display()))
}

pub fn section<'a>(sections: &'a [Section], name: &str) -> Result<&'a [u8]> {
    sections
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.data.as_slice())
        .with_context(|| format!("bundle has no '{name}' section"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<Section> {
        vec![
            Section {
                name: "meta".into(),
                data: br#"{"a":1}"#.to_vec(),
            },
            Section {
                name: "refs".into(),
                data: (0..1000u32).flat_map(|x| x.to_le_bytes()).collect(),
            },
        ]
    }

    #[test]
    fn round_trip_through_a_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.htb");
        write(&p, &sample()).unwrap();
        assert_eq!(read(&p).unwrap(), sample());
        assert_eq!(section(&read(&p).unwrap(), "meta").unwrap(), br#"{"a":1}"#);
        assert!(section(&sample(), "nope").is_err());
    }

    #[test]
    fn every_truncation_fails_cleanly() {
        let b = encode(&sample()).unwrap();
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "truncated at {cut} accepted");
        }
    }

    #[test]
    fn corruption_is_named() {
        let mut b = encode(&sample()).unwrap();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(decode(&b)
            .unwrap_err()
            .to_string()
            .contains("'refs' fails its checksum"));
        let mut b = encode(&sample()).unwrap();
        b[8] = 7;
        assert!(decode(&b).unwrap_err().to_string().contains("version 7"));
    }

    proptest! {
        #[test]
        fn random_mutations_never_panic(pos in 0usize..200, byte in any::<u8>()) {
            let mut b = encode(&sample()).unwrap();
            let p = pos % b.len();
            b[p] = byte;
            let _ = decode(&b);
        }
    }
}
