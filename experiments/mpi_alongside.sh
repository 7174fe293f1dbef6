#!/bin/bash
# Walk savings of MPI ranks side by side (docs/model.md §4, "Processes side by
# side"): workloads/mpi/mpi_walk.c on 4 KB pages and on THP (glibc's
# glibc.malloc.hugetlb=1 tunable: malloc advises its memory, THP madvise
# suffices) as one rank of 256 MiB, two ranks of 256 MiB each at once, and one
# rank of 512 MiB, the same 4 M dependent steps per rank; whole-command wall
# times, interleaved, ROUNDS rounds (the first is a warm-up: drop it), free page
# reporting held off while it runs and restored. Prints "ranks MiB thp seconds".
#   experiments/mpi_alongside.sh [ROUNDS]     # default 4; needs mpicc, mpirun, bc
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-4}
STEPS=4194304
DIR=$(mktemp -d)
MFM=/sys/module/page_reporting/parameters/min_free_ms
old=$(cat "$MFM" 2>/dev/null || echo)
restore() {
    [ -n "$old" ] && echo "$old" > "$MFM"
    rm -rf "$DIR"
}
trap restore EXIT
[ -n "$old" ] && echo 60000 > "$MFM"
mpicc -O2 -Wall -Wextra -Werror -o "$DIR/mpi_walk" workloads/mpi/mpi_walk.c
run() { # ranks MiB thp(0|1)
    export GLIBC_TUNABLES=glibc.malloc.hugetlb=$3
    local t0 t1
    t0=$(date +%s.%N)
    mpirun --allow-run-as-root --oversubscribe -x GLIBC_TUNABLES -np "$1" "$DIR/mpi_walk" "$2" "$STEPS" > /dev/null
    t1=$(date +%s.%N)
    echo "$1 $2 $3 $(echo "$t1 - $t0" | bc)"
}
for _ in $(seq "$ROUNDS"); do
    for c in "1 256" "2 256" "1 512"; do
        # shellcheck disable=SC2086 # ranks and MiB split on purpose
        run $c 0
        # shellcheck disable=SC2086
        run $c 1
    done
done
