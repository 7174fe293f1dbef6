#!/usr/bin/env bash
# The main job on a fresh machine: install only what the demo needs (setup.sh
# --demo: the C toolchain and qemu-user), build everything, run `hugetune demo`
# (as root it reserves the hugetlb pages it needs and gives them back afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --demo
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
cargo build --release --locked
exec target/release/hugetune demo "$@"
