#!/bin/bash
# Usage: experiments/walk_cost_series.sh [SECONDS] (default 720), on a quiet machine, as root.
# A time series (docs/ranking.md, "Calibration and measurement interleaved"), one line
# about every 30 s: `calibrate --quick`'s chase saving per walk over 256 MiB on 2 MB
# pages (cal_chase_saving, ns), then in rest=[...] its independent loads' saving per
# walk and its 4 KB walk cost by page-table size; next to it the chase workload's walk
# phase over the same 256 MiB on 4 KB pages and on THP (glibc.malloc.hugetlb=1), one
# run each on CPU 1 (seconds), and its saving per step (work_saving_ns).
cd "$(dirname "$0")/.."
H=${HUGETUNE:-target/release/hugetune}; W=${WORK:-workloads/build/hugetune-work}
CMD="$W chase --accesses 4000000 --size 256M --place heap-large"
end=$(( $(date +%s) + ${1:-720} ))
while [ $(date +%s) -lt $end ]; do
  c=$($H calibrate --quick --no-db --json 2>/dev/null | python3 -c '
import json,sys; c=json.loads(sys.stdin.read())
w={f["pt_bytes"]:f["ns"]["median"] for f in c["figures"] if f["kind"]=="walk" and f["what"]=="4k" and f.get("ns")}
print(round(c["overlap"]["dependent_walk"]["median"],1), round(c["overlap"]["independent_walk"]["median"],2), " ".join(f"{k/1024:.0f}K:{v:.1f}" for k,v in sorted(w.items())))')
  a=$(taskset -c 1 $CMD | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
  b=$(GLIBC_TUNABLES=glibc.malloc.hugetlb=1 taskset -c 1 $CMD | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
  echo "$(date +%T) cal_chase_saving=${c%% *} rest=[${c#* }] work_4k=$a work_thp=$b work_saving_ns=$(python3 -c "print(round(($a-$b)/4e6*1e9,1))")"
done
echo DONE
