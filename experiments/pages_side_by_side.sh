#!/bin/bash
# Chase and gups over one footprint on 4 KB, THP 2 MB, hugetlb 2 MB and hugetlb 1 GB
# pages, side by side (issue 23): the workload's own --page backings, interleaved per
# round, one warm-up round then ROUNDS rounds; one JSON line per run on stdout.
# Each hugetlb run grows its pool to exactly what the run needs just before it and
# gives it back just after (and on exit, also on error or Ctrl-C), so the 4 KB and THP
# runs see the memory the pools would hold. Root. Usage:
#   experiments/pages_side_by_side.sh SIZE_GIB [ROUNDS] > results.jsonl
set -u
size_gib=${1:?usage: $0 SIZE_GIB [ROUNDS]}
rounds=${2:-3}
W=${HUGETUNE_WORK:-$(dirname "$0")/../workloads/build/hugetune-work}
P2=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
P1=/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages
rest2=$(cat /proc/sys/vm/nr_hugepages)
rest1=$(cat $P1)
restore() { echo "$rest2" > $P2; echo "$rest1" > $P1; }
trap restore EXIT
trap 'exit 130' INT TERM
run() { # kernel accesses page round
  local need
  case $3 in
    hugetlb-2m) need=$(( size_gib * 512 + 8 )); echo "$need" > $P2
                if [ "$(cat $P2)" -lt "$need" ]; then echo "{\"skipped\":\"$1 $3: the kernel gave $(cat $P2) of $need 2 MB pages\"}"; restore; return; fi ;;
    hugetlb-1g) need=$size_gib; echo "$need" > $P1
                if [ "$(cat $P1)" -lt "$need" ]; then echo "{\"skipped\":\"$1 $3: the kernel gave $(cat $P1) of $need 1 GB pages\"}"; restore; return; fi ;;
  esac
  "$W" "$1" --size "${size_gib}G" --accesses "$2" --page "$3" | sed "s/^{/{\"round\":$4,/"
  restore
}
for round in $(seq 0 "$rounds"); do
  for page in 4k thp hugetlb-2m hugetlb-1g; do
    run chase 20000000 "$page" "$round"
    run gups 100000000 "$page" "$round"
  done
done
