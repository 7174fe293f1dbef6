#!/bin/bash
# Measures one workload under each heap-large backing the runtime library offers:
# none (no library), hugetlb-2m, hugetlb-1g, thp-2m. Interleaved repetitions, medians
# of the kernel phase and of initialization. Root: it sets the 2 MB and 1 GB pools
# under the shared kernel-state lock and puts both back to what they were, also on
# error and Ctrl-C. A backing whose pool cannot be had is reported as a fallback by
# the library's summary (the `backed` column then shows it).
#
#   runtime/tests/pagesizes.sh [REPS] [-- hugetune-work arguments]
#   default: 4 repetitions of  chase --size 1G --accesses 16000000
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-4}
shift || true
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(chase --size 1G --accesses 16000000)
work=$PWD/target/release/hugetune-work
lib=$PWD/target/release/libhugetune.so
for f in "$work" "$lib"; do
    [ -x "$f" ] || [ -f "$f" ] || { echo "missing $f (cargo build --release)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "pagesizes.sh: needs root (it sets hugetlb pools)" >&2; exit 2; }

nr1g=/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages
nr2m=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
tmp=$(mktemp -d /tmp/hugetune-pagesizes.XXXXXX)
exec 9>/run/lock/hugetune-kernel-state.lock
flock 9
old1g=$(cat "$nr1g" 2>/dev/null || echo "")
old2m=$(cat "$nr2m")
restore() {
    [ -n "$old1g" ] && echo "$old1g" >"$nr1g" 2>/dev/null || true
    echo "$old2m" >"$nr2m" || true
    rm -rf "$tmp"
}
trap restore EXIT
trap 'exit 130' INT TERM

# Pools for the largest --size the workload may ask: 2 GiB of 1 GB pages (head
# pages only; the tail is 4 KB) and 1 GiB + 2 MB of 2 MB pages.
[ -n "$old1g" ] && { echo 2 >"$nr1g" || true; }
echo 513 >"$nr2m"
echo "# pools: 1g=$(cat "$nr1g" 2>/dev/null || echo none) 2m=$(cat "$nr2m"); workload: ${args[*]}"

backings=(none hugetlb-2m hugetlb-1g thp-2m)
for b in "${backings[@]:1}"; do
    printf 'hugetune-plan 1\nthreshold 131072\nheap-large %s\n' "$b" >"$tmp/plan.$b"
done
for ((r = 0; r < reps; r++)); do
    for b in "${backings[@]}"; do
        if [ "$b" = none ]; then
            "$work" "${args[@]}" >"$tmp/out.$b.$r"
        else
            HUGETUNE_MODE=apply HUGETUNE_PLAN="$tmp/plan.$b" HUGETUNE_SUMMARY="$tmp/sum.$b.$r.json" \
                LD_PRELOAD="$lib" "$work" "${args[@]}" >"$tmp/out.$b.$r"
        fi
    done
done

python3 - "$tmp" "$reps" "${backings[@]}" <<'EOF'
import json, os, statistics, sys
tmp, reps, backings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def med(xs): return statistics.median(xs) if xs else float("nan")
base = None
print(f"{'backing':<12} {'kernel s':>9} {'init s':>8} {'speedup':>8}  backed (heap-large, library summary)")
for b in backings:
    k, i, backed = [], [], {}
    for r in range(reps):
        d = json.loads(open(f"{tmp}/out.{b}.{r}").read())
        k.append(d["seconds"]); i.append(d["init_seconds"])
        p = f"{tmp}/sum.{b}.{r}.json"
        if os.path.exists(p):
            backed = json.load(open(p))["categories"]["heap-large"]["backed"]
    km = med(k)
    base = base or km
    print(f"{b:<12} {km:9.3f} {med(i):8.3f} {base / km:7.2f}x  {backed if b != 'none' else '-'}")
EOF
