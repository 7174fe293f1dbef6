#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, lint, build, and run the Rust
# tests (unit, property, end-to-end and robustness with real programs), the runtime
# library's C tests (plain and under AddressSanitizer/UBSan), the replay of its fuzz
# corpus and the workloads' self-check. docs/testing.md says how to run parts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

echo "== format and lint"
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings

echo "== runtime library: C unit tests, plain and with ASan/UBSan (the arena also with TSan)"
make -C runtime BUILD_DIR="$PWD/target/c-check/runtime" check

echo "== runtime library: fuzz corpus regression (plain and with ASan/UBSan)"
runtime/fuzz/run.sh --regress

echo "== workloads: self-check"
make -C workloads BUILD_DIR="$PWD/target/c-check/workloads"
python3 workloads/tests/check.py "$PWD/target/c-check/workloads/hugetune-work"

echo "== Rust: unit, property and end-to-end tests (with a throw-away PostgreSQL cluster)"
scripts/pg.sh run -- cargo test --locked --workspace --release

echo "== all tests passed"
