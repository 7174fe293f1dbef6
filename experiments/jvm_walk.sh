#!/usr/bin/env bash
# jvm_walk.sh - the JVM figures of docs/runtimes.md: workloads/java/Walk.java
# (a long[] walked at random) on 4 KB pages, with -XX:+UseTransparentHugePages,
# with -XX:+UseLargePages on a pool sized for it, and under `hugetune run`,
# interleaved (one run of each variant per round), medians of wall time.
#
#   experiments/jvm_walk.sh DB [MIB] [STEPS] [ROUNDS]
#
# DB: a hugetune database that holds a profile of `java -Xmx1g -cp DIR Walk`
# (e.g. from `hugetune optimize --profile-cmd "java -Xmx1g -cp DIR Walk 32 1000000"
# -- java -Xmx1g -cp DIR Walk 512 20000000`), DIR being where this script
# compiles Walk (/tmp/jvm-walk). Phase 1 runs with the pool as it is (no free
# hugetlb pages here: `hugetune run` plans THP); phase 2 grows the 2 MB pool by
# the heap + the code cache under the kernel-state lock (hugetune run then plans
# hugetlb) and gives it back on exit, also on error and Ctrl-C. THP `always`
# is not measured: it changes a global setting other users' timings depend on.
set -euo pipefail
db=${1:?usage: jvm_walk.sh DB [MIB] [STEPS] [ROUNDS]}
mib=${2:-512}
steps=${3:-20000000}
rounds=${4:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
hugetune=${HUGETUNE:-$here/target/release/hugetune}
dir=/tmp/jvm-walk
mkdir -p "$dir"
javac -d "$dir" "$here/workloads/java/Walk.java"
cmd=(java -Xmx1g -cp "$dir" Walk "$mib" "$steps")
pool=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages

one() { # variant -> seconds
  local t0 t1
  t0=$(date +%s.%N)
  case "$1" in
    4k) env -u JAVA_TOOL_OPTIONS "${cmd[@]}" >/dev/null ;;
    thp) JAVA_TOOL_OPTIONS=-XX:+UseTransparentHugePages "${cmd[@]}" >/dev/null 2>&1 ;;
    hugetlb) JAVA_TOOL_OPTIONS="-XX:+UseLargePages -XX:LargePageSizeInBytes=2m" "${cmd[@]}" >/dev/null 2>&1 ;;
    hugetune) "$hugetune" --db "$db" run -- "${cmd[@]}" >/dev/null 2>"$dir/run.err" ;;
  esac
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

phase() { # name variants...
  local name=$1
  shift
  declare -A times
  for r in $(seq "$rounds"); do
    for v in "$@"; do
      times[$v]+="$(one "$v") "
    done
  done
  for v in "$@"; do
    med=$(echo "${times[$v]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
    echo "$name $v median ${med}s runs: ${times[$v]}"
  done
  grep -h "JVM:\|Java heap" "$dir/run.err" | sed "s/^/$name hugetune: /" || true
}

echo "java ${cmd[*]:1}; $rounds rounds, interleaved; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
phase "pool-as-is" 4k thp hugetune

exec 9>/run/lock/hugetune-kernel-state.lock
flock 9
old=$(cat /proc/sys/vm/nr_hugepages)
trap 'echo "$old" > /proc/sys/vm/nr_hugepages' EXIT INT TERM
# The heap (-Xmx1g: 512 pages, all committed at start-up) and the code cache
# (240 MiB: 120 pages), on top of what is there.
echo $(($(cat $pool) + 512 + 120 + 8)) > $pool
phase "pool-grown" 4k hugetlb hugetune
