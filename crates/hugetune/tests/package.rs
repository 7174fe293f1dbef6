//! The Debian package's asset list (`[package.metadata.deb]` in this crate's
//! Cargo.toml) against what the build and `scripts/package.sh --stage` produce,
//! without cargo-deb: every source exists, every file a user needs has its
//! place, and the artifacts land where a packaged hugetune looks for them.
//! (scripts/package.sh builds the real package and checks its contents.)

mod common;

use common::{HUGETUNE, LIB};
use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST: &str = include_str!("../Cargo.toml");

/// The `assets = [[SOURCE, DEST, MODE], ...]` entries of `[package.metadata.deb]`.
fn assets() -> Vec<[String; 3]> {
    let section = MANIFEST
        .split_once("[package.metadata.deb]")
        .expect("Cargo.toml has [package.metadata.deb]")
        .1;
    let list = section
        .split_once("assets = [")
        .expect("[package.metadata.deb] has assets")
        .1;
    let mut out = Vec::new();
    for line in list.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t == "]" {
            break;
        }
        let Some(inner) = t
            .strip_prefix('[')
            .and_then(|t| t.trim_end_matches(',').strip_suffix(']'))
        else {
            panic!("not an asset [SOURCE, DEST, MODE]: {t}");
        };
        let fields: Vec<String> = inner
            .split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect();
        assert_eq!(fields.len(), 3, "{t}");
        out.push([fields[0].clone(), fields[1].clone(), fields[2].clone()]);
    }
    out
}

/// The files a source names: a glob's matches (`*` in the file name only).
fn matches(source: &Path) -> Vec<PathBuf> {
    let name = source.file_name().unwrap().to_string_lossy().into_owned();
    let Some((pre, post)) = name.split_once('*') else {
        return vec![source.to_path_buf()]
            .into_iter()
            .filter(|p| p.is_file())
            .collect();
    };
    std::fs::read_dir(source.parent().unwrap())
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap().to_string_lossy();
                    n.starts_with(pre) && n.ends_with(post) && n.len() >= pre.len() + post.len()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_package_takes_what_the_build_and_package_sh_produce() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = crate_dir.join("../..");
    // This build's output directory stands in for target/release: the same build
    // script puts the artifacts beside the binary in both profiles.
    let bin_dir = Path::new(HUGETUNE).parent().unwrap();
    let staged = tempfile::tempdir().unwrap();
    let o = Command::new(repo.join("scripts/package.sh"))
        .arg("--stage")
        .arg(bin_dir)
        .arg(staged.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "package.sh --stage: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let assets = assets();
    let mut dests = Vec::new();
    for [source, dest, mode] in &assets {
        let found = if let Some(built) = source.strip_prefix("target/release/") {
            matches(&bin_dir.join(built))
        } else if let Some(s) = source.strip_prefix("../../target/package/") {
            matches(&staged.path().join(s))
        } else {
            matches(&crate_dir.join(source))
        };
        assert!(
            !found.is_empty(),
            "asset {source}: nothing there to package"
        );
        assert!(
            u32::from_str_radix(mode, 8).is_ok_and(|m| m == 0o644 || m == 0o755),
            "{source}: mode {mode}"
        );
        for f in found {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            dests.push(if dest.ends_with('/') {
                format!("{dest}{name}")
            } else {
                dest.clone()
            });
        }
    }
    // Where a hugetune in /usr/bin looks for its artifacts (artifacts.rs: ../lib/hugetune/).
    for want in [
        "usr/bin/hugetune",
        "usr/lib/hugetune/libhugetune.so",
        "usr/lib/hugetune/hugetune-work",
        "usr/lib/hugetune/libhugetune-qemu.so",
        "usr/share/man/man1/hugetune.1",
        "usr/share/man/man1/hugetune-service.1",
        "usr/share/man/man1/hugetune-run.1",
        "usr/share/bash-completion/completions/hugetune",
        "usr/share/zsh/vendor-completions/_hugetune",
        "usr/share/fish/vendor_completions.d/hugetune.fish",
    ] {
        assert!(
            dests.iter().any(|d| d == want),
            "{want} not packaged: {dests:?}"
        );
    }
    let exec_mode = |d: &str| {
        assets
            .iter()
            .find(|[_, dest, _]| d.starts_with(dest.as_str()) || dest == d)
            .map(|[_, _, m]| m.clone())
    };
    assert_eq!(exec_mode("usr/bin/hugetune").as_deref(), Some("755"));

    // Staged byte for byte: a packaged hugetune uses the copies in place only then.
    assert_eq!(
        std::fs::read(staged.path().join("lib/libhugetune.so")).unwrap(),
        std::fs::read(LIB).unwrap()
    );
    let bash = std::fs::read_to_string(staged.path().join("completions/hugetune.bash")).unwrap();
    assert!(
        bash.contains("service") && bash.contains("--dry-run"),
        "{bash}"
    );
    let man = std::fs::read_to_string(staged.path().join("man/hugetune-service.1")).unwrap();
    assert!(man.contains("install") && man.contains("remove"), "{man}");
}
