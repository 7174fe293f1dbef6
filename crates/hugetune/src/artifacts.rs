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
    let base = dirs::cache_dir().unwrap_or_else(std::env::temp_dir);
    let key = fnv(RUNTIME) ^ fnv(WORK).rotate_left(1) ^ fnv(QEMU_PLUGIN).rotate_left(2);
    let version = env!("CARGO_PKG_VERSION");
    let dir = base.join("hugetune").join(format!("{version}-{key:016x}"));
    extract(&dir, name, bytes, mode)
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
