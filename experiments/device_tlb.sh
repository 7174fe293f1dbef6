#!/bin/bash
# device_tlb.sh [WORK] - what a machine with hardware counters and many cores says
# about the model's premises: dTLB misses of the built-in kernels on 4 KB pages
# against THP (`perf stat`, where the PMU counts them), their time ratio, and
# thread scaling of gups on both page sizes (strong: the updates in all fixed). Changes no kernel state (the kernels
# advise their own pages: --page 4k / thp). Figures: docs/model.md, "On a second machine
# with counters". Needs hugetune-work (make -C workloads, or the cargo build's).
W=${1:-target/release/hugetune-work}
[ -x "$W" ] || W=workloads/build/hugetune-work
echo "== machine"; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r
cat /sys/kernel/mm/transparent_hugepage/enabled
if ! "$W" primes --limit 1000 >/dev/null 2>&1; then
  if command -v gcc >/dev/null; then make -s -C workloads >/dev/null 2>&1; W=workloads/build/hugetune-work; fi
fi
"$W" primes --limit 1000 >/dev/null || { echo "hugetune-work does not run here"; exit 1; }
PERF=$(command -v perf)
ev=dTLB-load-misses,dTLB-loads,cycles,instructions
if [ -n "$PERF" ] && perf stat -e dTLB-load-misses -x, "$W" primes --limit 100000 2>&1 >/dev/null | grep dTLB | grep -qv "not supported\|not counted"; then
  echo "perf counts dTLB-load-misses"
else
  echo "no perf dTLB counters: times only"; PERF=
fi
run() { # hugetune-work arguments
  local t0 t1
  if [ -n "$PERF" ]; then
    t0=$(date +%s.%N); perf stat -e $ev -x, -o /tmp/ps.$$ "$W" "$@" >/dev/null; t1=$(date +%s.%N)
    printf '%s wall %.3f s | %s\n' "$*" "$(awk "BEGIN{print $t1 - $t0}")" "$(grep -v '^#' /tmp/ps.$$ | grep -v '^$' | awk -F, '{printf "%s=%s ", $3, $1}')"
  else
    t0=$(date +%s.%N); "$W" "$@" >/dev/null; t1=$(date +%s.%N)
    printf '%s wall %.3f s\n' "$*" "$(awk "BEGIN{print $t1 - $t0}")"
  fi
}
echo "== kernels, 1 GiB, 4k vs thp (two rounds, interleaved)"
for r in 1 2; do
  for k in "chase --accesses 20000000" "gups --accesses 40000000" "randmem --random-pct 100 --accesses 40000000"; do
    for p in 4k thp; do run $k --size 1G --page $p; done
  done
done
echo "== gups thread scaling, 4 GiB (20 M updates in all: strong scaling)"
for t in 1 2 4 8 16; do
  for p in 4k thp; do run gups --size 4G --threads $t --accesses 20000000 --page $p; done
done
