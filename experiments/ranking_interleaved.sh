#!/bin/bash
# Calibration and ranking measurement interleaved in one window (docs/ranking.md,
# "Calibration and measurement interleaved"): calibration A, group 1 measured,
# calibration B, group 2 measured, calibration C; then the sampled predictions of
# every measured workload with each of the three calibrations, so that a miss can be
# told apart from calibration drift. Records the sampled bundles it lacks first
# (`record --refs qemu --max-refs 20000000` into /var/tmp/hugetune-ranking-sampled,
# where experiments/ranking_sampled.py reads them); then it needs a quiet machine for
# about 15 minutes. HUGETUNE_B=<another build> calibrates with that build too, right
# after each calibration of the first (A, A-b, group 1, B, B-b, group 2, C, C-b): two
# calibrate versions set side by side in one window (docs/ranking.md's second window:
# this build and 2fe9f50's, before calibrate held free page reporting off).
# CAL_ARGS: extra arguments of the first calibrate, CAL_ARGS_B of the second (with
# CAL_ARGS_B and no HUGETUNE_B, the second is this build too): `CAL_ARGS="--spread 4m"
# CAL_ARGS_B=" "` sets spread calibrations beside plain ones (docs/ranking.md's third
# window); `CAL_ARGS_B="--same-process"` sets calibrations on fresh memory (the
# default) beside ones in calibrate's own process (docs/ranking.md's fifth window).
# TWICE=1 measures both groups a second time after the last calibration
# (measured-2.jsonl), to see how far the measured speedups themselves repeat, and
# ends with experiments/interleaved_paired.py: each measurement against the
# calibration taken just before it (G1: A, G2: B, the second: C) and the twins.
set -eu
cd "$(dirname "$0")/.."
H=${HUGETUNE:-target/release/hugetune}
CAL_ARGS=${CAL_ARGS:-}
CAL_ARGS_B=${CAL_ARGS_B:-}
HB=${HUGETUNE_B:-}
if [ -z "$HB" ] && [ -n "$CAL_ARGS_B" ]; then HB=$H; fi
OUT=${OUT:-/var/tmp/hugetune-interleaved}
BUNDLES=/var/tmp/hugetune-ranking-sampled
G1=${G1:-randmem-0-heap-large randmem-40-heap-large randmem-80-heap-large randmem-20-static chase-heap-large gups-heap-large stream-heap-large}
G2=${G2:-randmem-20-heap-large randmem-60-heap-large randmem-100-heap-large randmem-60-static chase-static gups-static cg-heap-large}
mkdir -p "$OUT" "$BUNDLES"
G1="$G1" G2="$G2" BUNDLES="$BUNDLES" H="$H" python3 - <<'PY'
import os, subprocess, sys
sys.path.insert(0, "experiments")
import ranking
want = set(os.environ["G1"].split() + os.environ["G2"].split())
for name, cmd in ranking.workloads():
    b = os.path.join(os.environ["BUNDLES"], name + ".htb")
    if name in want and not os.path.exists(b):
        subprocess.run([os.environ["H"], "record", "--refs", "qemu", "--max-refs", "20000000",
                        "-o", b + ".tmp", "--"] + cmd, check=True, stdout=subprocess.DEVNULL)
        os.rename(b + ".tmp", b)
PY
rm -rf experiments/__pycache__
MEASURED_AS=measured
measure() {
    local only=()
    for n in "$@"; do only+=(--only "$n"); done
    python3 experiments/ranking.py --bundles "$BUNDLES" --no-simulate --mthp none --runs 5 --max-runs 5 \
        --results "$OUT/$MEASURED_AS.jsonl" --md "$OUT/$MEASURED_AS.md" "${only[@]}"
}
CALS=()
cal() {
    # shellcheck disable=SC2086 # the arguments split on purpose
    "$H" --db "$OUT/cal-$1.db" calibrate $CAL_ARGS -o "$OUT/cal-$1.json" > "$OUT/cal-$1.txt" 2>&1
    CALS+=("$1")
    echo "calibration $1 done $(date +%T)"
    if [ -n "$HB" ]; then
        # shellcheck disable=SC2086
        "$HB" --db "$OUT/cal-$1-b.db" calibrate $CAL_ARGS_B -o "$OUT/cal-$1-b.json" > "$OUT/cal-$1-b.txt" 2>&1
        CALS+=("$1-b")
        echo "calibration $1-b done $(date +%T)"
    fi
}
cal A
measure $G1
cal B
measure $G2
cal C
if [ -n "${TWICE:-}" ]; then
    # Every workload measured again, the same way, into measured-2.jsonl: how
    # far a measured speedup repeats minutes later bounds how close any
    # prediction can come (docs/ranking.md, "A seventh window").
    MEASURED_AS=measured-2
    measure $G1
    measure $G2
    echo "second measurement done $(date +%T)"
fi
for c in "${CALS[@]}"; do
    MEASURED="$OUT/measured.jsonl" DB="$OUT/cal-$c.db" RESULTS="$OUT/predicted-$c.jsonl" \
        python3 experiments/ranking_sampled.py | tail -1 | sed "s/^/$c: /"
done
if [ -n "${TWICE:-}" ]; then
    # The second measurement came right after C: its predictions with C, then
    # every measurement set against the calibration nearest to it in time.
    MEASURED="$OUT/measured-2.jsonl" DB="$OUT/cal-C.db" RESULTS="$OUT/predicted-C-second.jsonl" \
        python3 experiments/ranking_sampled.py | tail -1 | sed "s/^/C, second measurement: /"
    python3 experiments/interleaved_paired.py "$OUT" | tail -2
fi
rm -rf experiments/__pycache__
