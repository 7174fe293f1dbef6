//! The kernel's own indices from debugfs (`extfrag/unusable_index`,
//! `extfrag/extfrag_index`), for checking `index` against the kernel. debugfs is
//! mounted at `/sys/kernel/debug` for the read if it is not mounted, under the
//! kernel-state lock, and unmounted afterwards (also on Ctrl-C).

use anyhow::{bail, Context, Result};
use hugetune_host::kernel_state;
use std::ffi::CString;
use std::path::Path;

pub const DEBUGFS: &str = "/sys/kernel/debug";

fn mounted(at: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| m.lines().any(|l| l.split_whitespace().nth(1) == Some(at)))
        .unwrap_or(false)
}

/// Runs `f` with debugfs mounted; `Ok(None)` with a reason when that is impossible
/// (not root, no debugfs, no `extfrag` directory).
pub fn with_debugfs<T>(f: impl FnOnce(&Path) -> Result<T>) -> Result<Result<T, String>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(Err("debugfs needs root".into()));
    }
    if !std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .contains("debugfs")
    {
        return Ok(Err("this kernel has no debugfs".into()));
    }
    let _lock = kernel_state::lock_kernel_state()?;
    let mount = !mounted(DEBUGFS);
    let _restore = if mount {
        let (src, tgt, ty) = (
            CString::new("debugfs")?,
            CString::new(DEBUGFS)?,
            CString::new("debugfs")?,
        );
        // SAFETY: mount with valid C strings and no data.
        if unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) } != 0
        {
            return Ok(Err(format!(
                "mounting debugfs at {DEBUGFS}: {}",
                std::io::Error::last_os_error()
            )));
        }
        Some(kernel_state::on_restore(move || {
            let c = CString::new(DEBUGFS).expect("no NUL");
            // SAFETY: umount2 with a valid C string.
            if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
                eprintln!(
                    "hugetune: could not unmount {DEBUGFS}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }))
    } else {
        None
    };
    let dir = Path::new(DEBUGFS).join("extfrag");
    if !dir.is_dir() {
        return Ok(Err(format!(
            "{} is missing (needs CONFIG_COMPACTION)",
            dir.display()
        )));
    }
    Ok(Ok(f(&dir)?))
}

/// Reads buddyinfo, the two debugfs files and buddyinfo again until both buddyinfo
/// reads agree (at most `tries` times): the indices then belong to that buddyinfo.
/// Returns (buddyinfo, unusable_index, extfrag_index, consistent).
pub fn consistent_read(dir: &Path, tries: usize) -> Result<(String, String, String, bool)> {
    let rd =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let bi = Path::new("/proc/buddyinfo");
    let mut last = None;
    for _ in 0..tries.max(1) {
        let a = rd(bi)?;
        let u = rd(&dir.join("unusable_index"))?;
        let e = rd(&dir.join("extfrag_index"))?;
        let b = rd(bi)?;
        if a == b {
            return Ok((a, u, e, true));
        }
        last = Some((b, u, e));
    }
    match last {
        Some((b, u, e)) => Ok((b, u, e, false)),
        None => bail!("no read"),
    }
}
