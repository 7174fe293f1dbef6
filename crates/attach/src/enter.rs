//! Whether the runtime library (LD_PRELOAD) can enter a program, or its plan
//! must be applied from outside.
//!
//! `preload_can_enter_fallback` is this crate's private copy of the rule issue 19
//! gives `hugetune_capture::elf::preload_can_enter` (written by another part of
//! the work; until it is in, this one decides): false for an ELF without
//! PT_INTERP (static: no dynamic loader reads LD_PRELOAD) and for Go binaries
//! (a `.go.buildinfo` section or a Go build-id note), static or not, since the
//! Go runtime makes its own system calls and allocates outside malloc; true
//! otherwise (scripts and other files start an interpreter that can take it).

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Endianness, Object, ObjectSection};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct EnterError {
    pub path: String,
    pub why: String,
}

/// See the module comment.
pub fn preload_can_enter_fallback(path: &Path) -> Result<bool, EnterError> {
    let err = |why: String| EnterError {
        path: path.display().to_string(),
        why,
    };
    let data = std::fs::read(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    if !data.starts_with(b"\x7fELF") {
        // A script: its interpreter is what runs, and takes the preload.
        return Ok(true);
    }
    let f = ElfFile64::<Endianness>::parse(&*data)
        .map_err(|e| err(format!("not a 64-bit ELF file hugetune can read: {e}")))?;
    let endian = f.endian();
    let interp = f
        .elf_header()
        .program_headers(endian, &*data)
        .map_err(|e| err(format!("unreadable program headers: {e}")))?
        .iter()
        .any(|ph| ph.p_type(endian) == elf::PT_INTERP);
    if !interp {
        return Ok(false);
    }
    if f.section_by_name(".go.buildinfo").is_some() {
        return Ok(false);
    }
    // Go's build-id note: owner "Go", type 4.
    for s in f.sections() {
        if s.name().is_ok_and(|n| n == ".note.go.buildid") {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_programs_take_the_preload_and_files_that_are_not_elf_too() {
        assert!(preload_can_enter_fallback(Path::new("/bin/sh")).unwrap());
        let d = std::env::temp_dir().join(format!("attach-enter-{}", std::process::id()));
        std::fs::write(&d, "#!/bin/sh\n").unwrap();
        assert!(preload_can_enter_fallback(&d).unwrap());
        std::fs::write(&d, b"\x7fELF garbage").unwrap();
        let e = preload_can_enter_fallback(&d).unwrap_err().to_string();
        assert!(e.contains("not a 64-bit ELF"), "{e}");
        std::fs::remove_file(&d).unwrap();
        assert!(preload_can_enter_fallback(Path::new("/nonexistent/x")).is_err());
    }
}
