//! Finding the runtime library, the workload program and the QEMU plugin wherever hugetune is
//! installed: an explicit environment variable, files next to the binary (a build
//! tree or a packaged install), or the copies embedded in the binary itself,
//! extracted once into the user's cache directory.

use anyhow::{Context, Result};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

static RUNTIME: &[u8] = include_bytes!(env!("HUGETUNE_BUILT_RUNTIME"));
static WORK: &[u8] = include_bytes!(env!("HUGETUNE_BUILT_WORK"));
static QEMU_PLUGIN: &[u8] = include_bytes!(env!("HUGETUNE_BUILT_QEMU_PLUGIN"));

pub struct Artifacts {
    pub runtime_lib: PathBuf,
    pub work: PathBuf,
    /// The QEMU TCG plugin (qemu-plugin/), the `--refs qemu` source.
    pub qemu_plugin: PathBuf,
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Writes an embedded file into the cache (atomically) unless an identical one is there.
fn extract(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    let path = dir.join(name);
    if std::fs::read(&path).is_ok_and(|b| b == bytes) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

fn beside_exe(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(name), dir.join("../lib/hugetune").join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

fn locate(env_var: &str, name: &str, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        anyhow::ensure!(
            p.is_file(),
            "{env_var}={} does not name a file",
            p.display()
        );
        return Ok(p);
    }
    if let Some(p) = beside_exe(name) {
        // Use a sibling only if it is the same build as this binary (a stale copy
        // next to a newer binary would silently change behaviour).
        if std::fs::read(&p).is_ok_and(|b| b == bytes) {
            return Ok(p);
        }
    }
    // One directory per build of hugetune, keyed by everything it embeds.
    let base = match dirs::cache_dir() {
        Some(c) => c,
        None => private_temp_dir()?,
    };
    let key = fnv(RUNTIME) ^ fnv(WORK).rotate_left(1) ^ fnv(QEMU_PLUGIN).rotate_left(2);
    let version = env!("CARGO_PKG_VERSION");
    let dir = base.join("hugetune").join(format!("{version}-{key:016x}"));
    extract(&dir, name, bytes, mode)
}

/// Without a cache directory (no HOME: a service, a bare `sudo -i`), a
/// directory of our own under the temporary directory: `hugetune-<uid>`,
/// created 0700, and used only when it is a real directory (no symlink) owned
/// by us that nobody else may write. The library extracted there is preloaded
/// into programs: in a shared /tmp another user could otherwise plant it.
fn private_temp_dir() -> Result<PathBuf> {
    private_dir_in(&std::env::temp_dir())
}

fn private_dir_in(tmp: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = tmp.join(format!("hugetune-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    let m =
        std::fs::symlink_metadata(&dir).with_context(|| format!("checking {}", dir.display()))?;
    anyhow::ensure!(
        m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0,
        "{} is not a private directory of this user (a symlink, another owner, or writable by others): \
         refusing to extract the runtime library there; set HOME or XDG_CACHE_HOME, or remove it",
        dir.display()
    );
    Ok(dir)
}

pub fn find() -> Result<Artifacts> {
    Ok(Artifacts {
        runtime_lib: locate("HUGETUNE_RUNTIME_LIB", "libhugetune.so", RUNTIME, 0o755)?,
        work: locate("HUGETUNE_WORK", "hugetune-work", WORK, 0o755)?,
        qemu_plugin: locate(
            "HUGETUNE_QEMU_PLUGIN",
            "libhugetune-qemu.so",
            QEMU_PLUGIN,
            0o755,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_temporary_fallback_is_private_or_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = private_dir_in(t.path()).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(private_dir_in(t.path()).unwrap(), d); // used again as it is
                                                          // Writable by others: refused.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir_in(t.path()).unwrap_err().to_string();
        assert!(e.contains("not a private directory"), "{e}");
        // A symlink planted at the name (to a directory of ours): refused too.
        std::fs::remove_dir(&d).unwrap();
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &d).unwrap();
        assert!(private_dir_in(t.path()).is_err());
    }
}
