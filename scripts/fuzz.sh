#!/bin/sh
# Fuzzes every reader of untrusted input (the cargo-fuzz targets in fuzz/, one
# per entry point of crates/fuzzing) for SECONDS each (default 600), JOBS at a
# time (default: the number of cores), and prints per target the executions,
# their rate, the corpus size and whether a crash was found. New inputs land in
# fuzz/corpus/TARGET (replayed by `cargo test -p hugetune-fuzzing`); a crash in
# fuzz/artifacts/TARGET. Needs the nightly toolchain and cargo-fuzz
# (`rustup toolchain install nightly; cargo install cargo-fuzz`).
#
#   scripts/fuzz.sh [SECONDS]           build, then run every target
#   FUZZ_BIN=DIR scripts/fuzz.sh 600    run targets already built into DIR
set -eu
secs=${1:-600}
jobs=${JOBS:-$(nproc)}
cd "$(dirname "$0")/../fuzz"
if [ -z "${FUZZ_BIN:-}" ]; then
    cargo +nightly fuzz build -O
    FUZZ_BIN=target/x86_64-unknown-linux-gnu/release
fi
targets=$(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' Cargo.toml | grep -v '^hugetune-fuzz$')
mkdir -p logs artifacts
running=0
for t in $targets; do
    mkdir -p "corpus/$t" "artifacts/$t"
    # Inputs up to 64 KiB: the bundle seed is a 6 KB profile.
    "$FUZZ_BIN/$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=4096 \
        -timeout=20 -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
        "corpus/$t" > "logs/$t.log" 2>&1 &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n 2>/dev/null || wait
        running=$((running - 1))
    fi
done
wait
printf '%-14s %12s %10s %8s %s\n' target executions 'exec/s' corpus result
for t in $targets; do
    l="logs/$t.log"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$l" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$l" | tail -1)
    n=$(ls "corpus/$t" | wc -l)
    if ls "artifacts/$t" | grep -q .; then res="CRASH: $(ls artifacts/$t | head -1)"; else res=ok; fi
    printf '%-14s %12s %10s %8s %s\n' "$t" "${runs:-?}" "${rate:-?}" "$n" "$res"
done
