#!/bin/sh
# overhead.sh - record mode's overhead, as figures (a benchmark, not a test).
#
#   overhead.sh [-n REPS] [-d LOGDIR] [-b BENCH,...] BUILD_DIR [HUGETUNE_WORK]
#
# Runs each benchmark without the library ("none"), with it inert
# (LD_PRELOAD only) and in record mode with a log in LOGDIR (default: a fresh
# directory under $TMPDIR or /tmp), REPS times (default 5), the configurations
# interleaved, after one untimed warm-up run of each. Prints, per benchmark,
# the median wall time of the whole process (start to exit, the log's final
# flush included) per configuration, the ratios to "none", the log size and,
# for bench_malloc, the median of its own timed phase. BUILD_DIR is the
# runtime's build directory (libhugetune.so, tests/); HUGETUNE_WORK the
# workload binary (its benchmarks are skipped without it).
#
# Benchmarks (-b selects by name):
#   malloc1      bench_malloc threads=1 ops=10000000
#   malloc2      bench_malloc threads=2 ops=10000000
#   malloc2-use  bench_malloc threads=2 ops=10000000 touch=all (blocks written)
#   randmem-hs   hugetune-work randmem --size 256M --place heap-small
#   chase        hugetune-work chase --size 256M
#   chase-hs     hugetune-work chase --size 256M --place heap-small
set -u
reps=5
logdir=
only=
while getopts n:d:b: o; do
    case $o in
    n) reps=$OPTARG ;;
    d) logdir=$OPTARG ;;
    b) only=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
B=${1:?usage: overhead.sh [-n REPS] [-d LOGDIR] [-b BENCH,...] BUILD_DIR [HUGETUNE_WORK]}
W=${2:-}
L=$B/libhugetune.so
T=$B/tests
[ -f "$L" ] || { echo "overhead.sh: no $L" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hugetune-overhead.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
[ -n "$logdir" ] || logdir=$tmp/logs
mkdir -p "$logdir"

benches="malloc1 malloc2 malloc2-use"
[ -n "$W" ] && benches="$benches randmem-hs chase chase-hs"
if [ -n "$only" ]; then
    benches=$(echo "$only" | tr ',' ' ')
fi
cmd_of() {
    case $1 in
    malloc1) echo "$T/bench_malloc threads=1 ops=10000000" ;;
    malloc2) echo "$T/bench_malloc threads=2 ops=10000000" ;;
    malloc2-use) echo "$T/bench_malloc threads=2 ops=10000000 touch=all" ;;
    randmem-hs) echo "$W randmem --size 256M --place heap-small" ;;
    chase) echo "$W chase --size 256M" ;;
    chase-hs) echo "$W chase --size 256M --place heap-small" ;;
    *) echo "overhead.sh: unknown benchmark $1" >&2; exit 2 ;;
    esac
}

now_ns() { date +%s%N; }
# run BENCH CONFIG REP: appends "bench config wall_s inner_s log_bytes" to $tmp/res
run() {
    cmd=$(cmd_of "$1")
    rm -f "$logdir"/ov.*.log
    case $2 in
    none) set -- "$1" "$2" "$3" env ;;
    inert) set -- "$1" "$2" "$3" env LD_PRELOAD="$L" ;;
    record) set -- "$1" "$2" "$3" env LD_PRELOAD="$L" HUGETUNE_MODE=record HUGETUNE_LOG="$logdir/ov.%p.log" ;;
    esac
    b=$1 c=$2 r=$3
    shift 3
    t0=$(now_ns)
    # shellcheck disable=SC2086
    "$@" $cmd >"$tmp/out" 2>"$tmp/err" || { echo "overhead.sh: $b ($c) failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    t1=$(now_ns)
    inner=$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' "$tmp/out")
    bytes=$(cat "$logdir"/ov.*.log 2>/dev/null | wc -c)
    [ "$r" -ge 0 ] && echo "$b $c $(awk "BEGIN{printf \"%.4f\", ($t1-$t0)/1e9}") ${inner:-0} $bytes" >>"$tmp/res"
    rm -f "$logdir"/ov.*.log
}

echo "# overhead.sh: $reps reps, logs in $logdir ($(df -P "$logdir" | awk 'NR==2{print $1}')), $(nproc) CPUs"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/res"
for b in $benches; do
    for c in none inert record; do run "$b" "$c" -1; done
done
r=0
while [ "$r" -lt "$reps" ]; do
    for b in $benches; do
        for c in none inert record; do run "$b" "$c" "$r"; done
    done
    r=$((r + 1))
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

med() { # med BENCH CONFIG FIELD
    awk -v b="$1" -v c="$2" -v f="$3" '$1==b && $2==c {print $f}' "$tmp/res" | sort -g |
        awk '{v[NR]=$1} END{if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
printf '%-12s %9s %9s %9s %7s %7s %10s   %s\n' bench none_s inert_s record_s inert× record× log_MB "inner phase none/inert/record s"
for b in $benches; do
    n=$(med "$b" none 3) i=$(med "$b" inert 3) rc=$(med "$b" record 3)
    ni=$(med "$b" none 4) ii=$(med "$b" inert 4) ri=$(med "$b" record 4)
    mb=$(med "$b" record 5)
    awk -v b="$b" -v n="$n" -v i="$i" -v r="$rc" -v mb="$mb" -v ni="$ni" -v ii="$ii" -v ri="$ri" 'BEGIN{
        printf "%-12s %9.3f %9.3f %9.3f %7.2f %7.2f %10.1f   %.3f/%.3f/%.3f\n", b, n, i, r, i/n, r/n, mb/1048576, ni, ii, ri}'
done
echo "# all runs (bench config wall_s inner_s log_bytes):"
sed 's/^/#   /' "$tmp/res"
