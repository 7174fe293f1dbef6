//! Replays every committed fuzzing corpus (`fuzz/corpus/TARGET/`) through its
//! target's entry point: what the fuzzers found interesting stays covered by
//! the tests, and a reader that starts to panic on one of them fails here.

use std::path::PathBuf;

#[test]
fn every_corpus_replays_without_a_panic() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (name, entry) in hugetune_fuzzing::TARGETS {
        let dir = root.join(name);
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            let r = std::panic::catch_unwind(|| entry(&data));
            assert!(r.is_ok(), "{name}: {} panics", p.display());
            n += 1;
        }
        assert!(n > 0, "{name}: empty corpus");
        eprintln!("{name}: {n} inputs");
    }
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for (name, _) in hugetune_fuzzing::TARGETS {
        let f = root.join("fuzz_targets").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(
            text.contains(&format!("hugetune_fuzzing::{name}(")),
            "{}",
            f.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{name} in fuzz/Cargo.toml"
        );
    }
}
