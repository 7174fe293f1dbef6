//! Program identity: the executable's path and GNU build-id.

use anyhow::{Context, Result};
use object::Object;
use std::path::{Path, PathBuf};

/// Resolves a command name the way execvp does (PATH lookup when it has no '/').
pub fn resolve_program(name: &std::ffi::OsStr) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.components().count() > 1 || name.to_string_lossy().contains('/') {
        return std::fs::canonicalize(p).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
        .and_then(|c| std::fs::canonicalize(c).ok())
}

/// The GNU build-id of an ELF file as hex, `None` if it has none.
pub fn build_id(path: &Path) -> Result<Option<String>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{}: not an ELF file", path.display()))?;
    Ok(file
        .build_id()
        .ok()
        .flatten()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect()))
}
