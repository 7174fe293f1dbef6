//! Program identity (the executable's path and GNU build-id) and whether the
//! runtime library can enter a program at all.
//!
//! `preload_can_enter` is the one decision of "inside or outside" (issue 19):
//! where it says no, hugetune profiles the program under qemu with the plugin's
//! system-call record and applies plans from outside the process.

use anyhow::{Context, Result};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, Object};
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

/// Why the runtime library (an `LD_PRELOAD` library) cannot enter a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreloadBarrier {
    /// An ELF executable without `PT_INTERP`: no dynamic loader runs, so nothing
    /// is preloaded (statically linked, static-pie included).
    Static,
    /// A Go program (`.go.buildinfo` section or a Go build-id note), static or
    /// dynamic: the Go runtime makes its own system calls and never calls libc's
    /// allocator or mmap, so a preloaded library sees nothing of its memory.
    Go,
}

impl PreloadBarrier {
    /// "statically linked", "a Go program": for messages.
    pub fn describe(self) -> &'static str {
        match self {
            PreloadBarrier::Static => "statically linked",
            PreloadBarrier::Go => "a Go program (its runtime makes its own system calls)",
        }
    }
}

/// Whether the runtime library can enter the program at `path`: false for an
/// ELF file without `PT_INTERP` and for Go binaries (static or dynamic), true
/// otherwise (dynamic ELF programs, and scripts, whose interpreter is followed
/// as a launcher). An error when the file cannot be read or is a malformed ELF.
pub fn preload_can_enter(path: &Path) -> Result<bool> {
    Ok(preload_barrier(path)?.is_none())
}

/// What keeps the runtime library out of the program at `path` (`None`: it can
/// enter); [`preload_can_enter`] with the reason.
pub fn preload_barrier(path: &Path) -> Result<Option<PreloadBarrier>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let barrier = match object::FileKind::parse(&*data) {
        Ok(object::FileKind::Elf64) => barrier_of::<object::elf::FileHeader64<Endianness>>(&data),
        Ok(object::FileKind::Elf32) => barrier_of::<object::elf::FileHeader32<Endianness>>(&data),
        Ok(_) => return Ok(None),
        Err(e) => Err(e),
    };
    barrier.with_context(|| format!("{}: malformed ELF file", path.display()))
}

fn barrier_of<H: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> object::Result<Option<PreloadBarrier>> {
    let h = H::parse(data)?;
    let endian = h.endian()?;
    let phdrs = h.program_headers(endian, data)?;
    // The Go build-id note (name "Go", type 4) is in a PT_NOTE segment; the
    // `.go.buildinfo` section survives `strip`.
    let mut go = false;
    for p in phdrs {
        if p.p_type(endian) != object::elf::PT_NOTE {
            continue;
        }
        if let Some(mut notes) = p.notes(endian, data)? {
            while let Some(n) = notes.next()? {
                if n.name() == b"Go" && n.n_type(endian) == 4 {
                    go = true;
                }
            }
        }
    }
    if !go {
        if let Ok(sections) = h.sections(endian, data) {
            go = sections.section_by_name(endian, b".go.buildinfo").is_some();
        }
    }
    if go {
        return Ok(Some(PreloadBarrier::Go));
    }
    let interp = phdrs
        .iter()
        .any(|p| p.p_type(endian) == object::elf::PT_INTERP);
    Ok((!interp).then_some(PreloadBarrier::Static))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_programs_and_scripts_can_be_entered() {
        // Every Debian has these: a dynamic ELF program and a script.
        assert!(preload_can_enter(Path::new("/bin/true")).unwrap());
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        assert!(preload_can_enter(&script).unwrap());
        assert!(preload_can_enter(&d.path().join("absent")).is_err());
        let bad = d.path().join("bad");
        std::fs::write(&bad, b"\x7fELF\x02\x01\x01garbage").unwrap();
        assert!(preload_can_enter(&bad).is_err());
    }

    #[test]
    fn static_programs_cannot_be_entered() {
        // The runtime test programs include a static one where gcc can link it.
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s.c");
        std::fs::write(&src, "int main(void){return 0;}\n").unwrap();
        let exe = d.path().join("s");
        let ok = std::process::Command::new("gcc")
            .args(["-O1", "-static", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: gcc -static is not available here");
            return;
        }
        assert_eq!(preload_barrier(&exe).unwrap(), Some(PreloadBarrier::Static));
    }
}
