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

use std::io::Write;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"HTBUNDLE";
pub const VERSION: u32 = 1;
const ENTRY: usize = 40;
const MAX_SECTIONS: u32 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub data: Vec<u8>,
}

/// What is wrong with a bundle container (its sections' contents are
/// `profile::ProfileError`'s).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("file is {0} bytes, too short for a bundle header")]
    TooShort(usize),
    #[error("not a hugetune profile bundle (bad magic)")]
    BadMagic,
    #[error("bundle version {0} is not supported (this hugetune reads version {VERSION})")]
    Version(u32),
    #[error("bundle declares {0} sections (at most {MAX_SECTIONS}): corrupt")]
    TooManySections(u32),
    #[error("bundle truncated inside its section table")]
    TruncatedTable,
    #[error("section '{name}' ({len} bytes at {offset}) lies outside the {file_len}-byte file: truncated or corrupt")]
    OutOfFile {
        name: String,
        offset: u64,
        len: u64,
        file_len: usize,
    },
    #[error("section '{0}' fails its checksum: corrupt")]
    Checksum(String),
    #[error("bundle has no '{0}' section")]
    Missing(String),
    #[error("bad section name '{0}' (1 to 16 bytes, no NUL)")]
    BadName(String),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BundleError + 'a {
    move |source| BundleError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

pub fn encode(sections: &[Section]) -> Result<Vec<u8>, BundleError> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    let mut offset = (16 + ENTRY * sections.len()) as u64;
    for s in sections {
        if s.name.is_empty() || s.name.len() > 16 || s.name.contains('\0') {
            return Err(BundleError::BadName(s.name.clone()));
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

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from(u32_at(b, o)) | u64::from(u32_at(b, o + 4)) << 32
}

pub fn decode(b: &[u8]) -> Result<Vec<Section>, BundleError> {
    if b.len() < 16 {
        return Err(BundleError::TooShort(b.len()));
    }
    if &b[..8] != MAGIC {
        return Err(BundleError::BadMagic);
    }
    let version = u32_at(b, 8);
    if version != VERSION {
        return Err(BundleError::Version(version));
    }
    let n = u32_at(b, 12);
    if n > MAX_SECTIONS {
        return Err(BundleError::TooManySections(n));
    }
    let table_end = 16 + ENTRY * n as usize;
    if b.len() < table_end {
        return Err(BundleError::TruncatedTable);
    }
    let mut out = Vec::new();
    for i in 0..n as usize {
        let e = &b[16 + ENTRY * i..16 + ENTRY * (i + 1)];
        let raw = &e[..16];
        let name = String::from_utf8_lossy(&raw[..raw.iter().position(|&c| c == 0).unwrap_or(16)])
            .into_owned();
        let off = u64_at(e, 16);
        let len = u64_at(e, 24);
        let crc = u32_at(e, 32);
        let end = off
            .checked_add(len)
            .filter(|&end| off >= table_end as u64 && end <= b.len() as u64);
        let Some(end) = end else {
            return Err(BundleError::OutOfFile {
                name,
                offset: off,
                len,
                file_len: b.len(),
            });
        };
        let data = &b[off as usize..end as usize];
        if crc32fast::hash(data) != crc {
            return Err(BundleError::Checksum(name));
        }
        out.push(Section {
            name,
            data: data.to_vec(),
        });
    }
    Ok(out)
}

/// What the program holds while a bundle's temporary file exists (`on_temp_file`).
pub type TempGuard = Box<dyn std::any::Any>;

static TEMP_GUARD: std::sync::OnceLock<fn(&Path) -> TempGuard> = std::sync::OnceLock::new();

/// Lets the program know of every temporary file `write` makes: `f` is called
/// with its path once it exists, and what it returns is dropped once the file
/// was renamed into place or removed. hugetune removes the file if it is
/// interrupted in between (an interrupt exits without dropping anything, and
/// a bundle of tens of MB would stay, hidden, beside the one asked for). Set
/// once; later calls are ignored.
pub fn on_temp_file(f: fn(&Path) -> TempGuard) {
    let _ = TEMP_GUARD.set(f);
}

/// Writes a temporary file beside `path` and renames it over `path`.
pub fn write(path: &Path, sections: &[Section]) -> Result<(), BundleError> {
    let bytes = encode(sections)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    // A fresh file under a random name (O_EXCL, 0600: never through anything
    // planted, private to its owner, since a bundle holds the profiled command
    // line), renamed over the bundle's name once complete.
    let mut f = tempfile::Builder::new()
        .prefix(".bundle.")
        .tempfile_in(dir)
        .map_err(io("creating a temporary file in", dir))?;
    let guard = TEMP_GUARD.get().map(|g| g(f.path()));
    f.write_all(&bytes)
        .and_then(|_| f.as_file().sync_all())
        .map_err(io("writing", f.path()))?;
    let done = f
        .persist(path)
        .map(|_| ())
        .map_err(|e| io("renaming a temporary file to", path)(e.error));
    drop(guard);
    done
}

pub fn read(path: &Path) -> Result<Vec<Section>, BundleError> {
    let b = std::fs::read(path).map_err(io("reading bundle", path))?;
    decode(&b)
}

pub fn section<'a>(sections: &'a [Section], name: &str) -> Result<&'a [u8], BundleError> {
    sections
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.data.as_slice())
        .ok_or_else(|| BundleError::Missing(name.to_string()))
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

    /// The temporary file is announced once it exists, and its guard is
    /// dropped once it was renamed into place (then nothing is left to clean
    /// up). Other tests' writes are announced too: only this directory's count.
    #[test]
    fn the_temporary_file_is_announced_and_released_after_the_rename() {
        use std::sync::Mutex;
        /// (temporary path, existed when announced, existed when released).
        static SEEN: Mutex<Vec<(PathBuf, bool, Option<bool>)>> = Mutex::new(Vec::new());
        struct Guard(PathBuf);
        impl Drop for Guard {
            fn drop(&mut self) {
                let mut s = SEEN.lock().unwrap();
                if let Some(e) = s.iter_mut().find(|e| e.0 == self.0) {
                    e.2 = Some(self.0.exists());
                }
            }
        }
        fn hook(p: &Path) -> TempGuard {
            SEEN.lock()
                .unwrap()
                .push((p.to_path_buf(), p.exists(), None));
            Box::new(Guard(p.to_path_buf()))
        }
        on_temp_file(hook);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.htb");
        write(&p, &sample()).unwrap();
        let seen: Vec<_> = SEEN
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0.parent() == Some(d.path()))
            .cloned()
            .collect();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (tmp, announced, released) = &seen[0];
        assert!(tmp
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".bundle."));
        assert!(*announced, "announced once it exists");
        assert_eq!(*released, Some(false), "released after the rename");
        assert_eq!(read(&p).unwrap(), sample());
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_written_through() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let p = d.path().join("x.htb");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        write(&p, &sample()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_file());
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&p).unwrap(), sample());
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            2,
            "no temporary left"
        );
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
