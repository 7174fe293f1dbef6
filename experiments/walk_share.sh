#!/bin/bash
# The share of its time a walking access saves on 2 MB pages, for built-in kernels
# and for the calibration's independent loads and read-modify-writes
# (experiments/walk_share.c), interleaved round by round (docs/model.md §4,
# "Work besides the walks"). Each kernel runs on 4 KB pages and on THP (`--page 4k`,
# `--page thp`; the timed phase only, so no first-touch faults), 256 MiB, 16 M
# accesses (chase: 4 M steps). Prints every round and the medians.
#   experiments/walk_share.sh [ROUNDS]    # default 5; needs THP madvise or always
set -eu
cd "$(dirname "$0")/.."
W=${WORK:-target/release/hugetune-work}
ROUNDS=${1:-5}
BIN=$(mktemp -d)/walk_share
trap 'rm -rf "$(dirname "$BIN")"' EXIT
cc -O2 -Wall -Wextra -Werror -o "$BIN" experiments/walk_share.c
for r in $(seq "$ROUNDS"); do
    for k in "randmem --random-pct 100 --accesses 16000000" "gups --accesses 16000000" "chase --accesses 4000000"; do
        # shellcheck disable=SC2086 # the kernel's arguments split on purpose
        a=$("$W" $k --size 256M --page 4k | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
        # shellcheck disable=SC2086
        b=$("$W" $k --size 256M --page thp | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
        echo "round $r ${k%% *} 4k $a thp $b"
    done
    "$BIN" 1 | sed "s/^/round $r /"
done | tee /dev/stderr | python3 -c '
import sys, statistics as st, collections
k = collections.defaultdict(list)
for l in sys.stdin:
    f = l.split()
    if f[2] in ("randmem", "gups", "chase"):
        a, b = float(f[4]), float(f[6])
        n = 4e6 if f[2] == "chase" else 16e6
        k[f[2]].append((a * 1e9 / n, b * 1e9 / n, (a - b) / a))
    else:
        a, b = float(f[4]), float(f[7])
        k[f[2]].append((a, b, (a - b) / a))
for name, v in k.items():
    print(f"{name:18s} 4k {st.median(x[0] for x in v):6.1f} ns  2m {st.median(x[1] for x in v):6.1f} ns  "
          f"saved {st.median(x[0] - x[1] for x in v):5.1f} ns  share {st.median(x[2] for x in v):.3f} "
          f"[{min(x[2] for x in v):.3f}-{max(x[2] for x in v):.3f}] per access, {len(v)} rounds")
'
