#!/usr/bin/env bash
# Fuzzing of the runtime library's parsers (plan file, numbers, path templates,
# JSON strings): see runtime/fuzz/README.md.
#
#   runtime/fuzz/run.sh [SECONDS]   build the libFuzzer target (clang) and fuzz for
#                                   SECONDS (default 60), starting from seeds/ and
#                                   corpus/; new coverage is merged (minimized) back
#                                   into corpus/, crashes land in crashes/
#   runtime/fuzz/run.sh --afl [SECONDS]
#                                   the same target under AFL++ (afl-clang-fast,
#                                   no sanitizers), from seeds/ and corpus/; findings
#                                   stay in $FUZZ_BUILD/afl-out (crashes are reported)
#   runtime/fuzz/run.sh --regress   build the target with gcc, plain and with
#                                   ASan/UBSan, and run seeds/, corpus/ and
#                                   regressions/ through both (part of scripts/test.sh)
#
# Build outputs go to $FUZZ_BUILD (default: target/fuzz in the workspace).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${FUZZ_BUILD:-$root/target/fuzz}"
src="$root/runtime/src"
srcs=("$here/fuzz_parsers.c" "$src/plan.c" "$src/fmt.c")
cflags=(-std=gnu11 -D_GNU_SOURCE -g -Wall -Wextra -Werror -I"$src")
mkdir -p "$build"

inputs=("$here/seeds" "$here/corpus")
[ -d "$here/regressions" ] && inputs+=("$here/regressions")

regress() {
  local cc="${CC:-gcc}"
  "$cc" -O1 "${cflags[@]}" -o "$build/regress-plain" "$here/standalone.c" "${srcs[@]}"
  "$cc" -O1 "${cflags[@]}" -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=all -o "$build/regress-asan" "$here/standalone.c" "${srcs[@]}"
  echo "fuzz regression (plain):"
  "$build/regress-plain" "${inputs[@]}"
  echo "fuzz regression (ASan+UBSan):"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/regress-asan" "${inputs[@]}"
}

fuzz() {
  local secs="$1"
  command -v clang >/dev/null || { echo "run.sh: clang not found (scripts/setup.sh installs it)" >&2; exit 1; }
  clang -O1 "${cflags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -o "$build/fuzz_parsers" "${srcs[@]}"
  local work="$build/work-corpus" crashes="$here/crashes"
  rm -rf "$work"
  mkdir -p "$work" "$crashes"
  cp "$here"/seeds/* "$here"/corpus/* "$work"/ 2>/dev/null || true
  echo "fuzzing for ${secs}s (log: $build/fuzz.log)"
  local rc=0
  # -rss_limit_mb: the target is small; a leak shows up quickly.
  (cd "$build" && ASAN_OPTIONS=detect_leaks=1 "$build/fuzz_parsers" \
      -max_total_time="$secs" -max_len=4096 -rss_limit_mb=1024 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$crashes/" "$work" >"$build/fuzz.log" 2>&1) || rc=$?
  grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::)' "$build/fuzz.log" || true
  # Keep what adds coverage, minimized, in corpus/ (the seeds stay as they are).
  local merged="$build/merged"
  rm -rf "$merged"
  mkdir -p "$merged"
  "$build/fuzz_parsers" -merge=1 -max_len=4096 "$merged" "$here/seeds" "$work" >"$build/merge.log" 2>&1
  # libFuzzer names merged files by their SHA-1: skip what the seeds already hold.
  declare -A seed_sum=()
  local f name added=0
  for f in "$here"/seeds/*; do
    seed_sum[$(sha1sum <"$f" | cut -c1-40)]=1
  done
  for f in "$merged"/*; do
    [ -e "$f" ] || continue
    name="$(basename "$f")"
    [ -n "${seed_sum[$name]:-}" ] && continue
    [ -e "$here/corpus/$name" ] && continue
    cp "$f" "$here/corpus/$name"
    added=$((added + 1))
  done
  echo "corpus: $(find "$here/corpus" -type f | wc -l) files ($added added)"
  local ncrash
  ncrash="$(find "$crashes" -type f | wc -l)"
  echo "crashes: $ncrash (in $crashes)"
  if [ "$rc" -ne 0 ] || [ "$ncrash" -ne 0 ]; then
    echo "run.sh: the fuzzer found a failure (exit $rc); see $build/fuzz.log" >&2
    exit 1
  fi
}

afl() {
  local secs="$1"
  command -v afl-fuzz >/dev/null || { echo "run.sh: afl-fuzz not found (scripts/setup.sh installs afl++)" >&2; exit 1; }
  afl-clang-fast -O1 "${cflags[@]}" -fsanitize=fuzzer -o "$build/afl_parsers" "${srcs[@]}"
  local in="$build/afl-in" out="$build/afl-out"
  rm -rf "$in" "$out"
  mkdir -p "$in"
  cp "$here"/seeds/* "$here"/corpus/* "$in"/ 2>/dev/null || true
  echo "AFL++ for ${secs}s (log: $build/afl.log)"
  AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
    afl-fuzz -i "$in" -o "$out" -V "$secs" -- "$build/afl_parsers" >"$build/afl.log" 2>&1
  grep -E '^(execs_done|execs_per_sec|corpus_count|bitmap_cvg|saved_crashes|saved_hangs)' \
    "$out/default/fuzzer_stats"
  local ncrash
  ncrash="$(find "$out/default/crashes" -type f -name 'id:*' | wc -l)"
  if [ "$ncrash" -ne 0 ]; then
    echo "run.sh: AFL++ found $ncrash crashing inputs in $out/default/crashes" >&2
    exit 1
  fi
}

case "${1:-60}" in
  --regress) regress ;;
  --afl) afl "${2:-60}" ;;
  -h|--help) sed -n '2,16p' "$0" ;;
  *[!0-9]*) echo "usage: $0 [SECONDS] | --afl [SECONDS] | --regress" >&2; exit 2 ;;
  *) fuzz "${1:-60}" ;;
esac
