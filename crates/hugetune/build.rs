//! Builds the C parts (runtime library, workloads, runtime tests, QEMU plugin) with their own
//! Makefiles into OUT_DIR, so that `cargo build` is the one command that builds
//! everything. The binaries are embedded into `hugetune` (an installed or copied
//! binary finds them without the source tree) and copied next to it for direct use.

use std::path::{Path, PathBuf};
use std::process::Command;

fn make(dir: &Path, build_dir: &Path, targets: &[&str]) {
    let out = Command::new("make")
        .arg("-C")
        .arg(dir)
        .arg(format!("BUILD_DIR={}", build_dir.display()))
        .args(targets)
        .output()
        .unwrap_or_else(|e| panic!("cannot run make (install make and gcc): {e}"));
    if !out.status.success() {
        panic!(
            "building {} failed:\n{}\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../..");
    let root = root.canonicalize().expect("workspace root");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let runtime_dir = root.join("runtime");
    let work_dir = root.join("workloads");
    let qemu_dir = root.join("qemu-plugin");
    for d in [&runtime_dir, &work_dir, &qemu_dir] {
        println!("cargo:rerun-if-changed={}", d.join("Makefile").display());
        println!("cargo:rerun-if-changed={}", d.join("src").display());
    }
    for sub in ["tests", "tools"] {
        println!("cargo:rerun-if-changed={}", runtime_dir.join(sub).display());
    }
    let rt_build = out.join("runtime");
    let work_build = out.join("workloads");
    let qemu_build = out.join("qemu-plugin");
    make(&runtime_dir, &rt_build, &["lib", "tests"]);
    make(&work_dir, &work_build, &["all"]);
    make(&qemu_dir, &qemu_build, &["all"]);
    println!(
        "cargo:rerun-if-changed={}",
        root.join("include/hugetune").display()
    );
    let lib = rt_build.join("libhugetune.so");
    let work = work_build.join("hugetune-work");
    let plugin = qemu_build.join("libhugetune-qemu.so");
    println!(
        "cargo:rustc-env=HUGETUNE_BUILT_QEMU_PLUGIN={}",
        plugin.display()
    );
    println!("cargo:rustc-env=HUGETUNE_BUILT_RUNTIME={}", lib.display());
    println!("cargo:rustc-env=HUGETUNE_BUILT_WORK={}", work.display());
    println!(
        "cargo:rustc-env=HUGETUNE_BUILT_RUNTIME_TESTS={}",
        rt_build.join("tests").display()
    );
    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out: put copies in target/<profile>/.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        for f in [&lib, &work, &plugin] {
            let dest = profile_dir.join(f.file_name().unwrap());
            let tmp =
                profile_dir.join(format!(".{}.tmp", f.file_name().unwrap().to_string_lossy()));
            if std::fs::copy(f, &tmp).is_ok() {
                let _ = std::fs::rename(&tmp, &dest);
            }
        }
    }
}
