#!/bin/bash
# Profile + analysis against the native run (issue 18's 10x budget): `optimize` on
# the four 1 GiB kernels without --profile-cmd, one optimize each, default costs (a
# scratch database per build), one line per run. With OLD_BIN (another build's
# target/release), that build runs too, interleaved kernel by kernel (the order
# alternates), so both see the machine of the same minutes. Root (optimize grows
# the 2 MB pool for its runs and gives it back). DB=FILE uses that database (a
# calibrated one: `hugetune --db FILE calibrate`) instead of scratch ones. Usage:
#   experiments/profile_budget.sh [OLD_BIN] | tee results.txt
set -u
NEW=${NEW_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
OLD=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
builds="new"; [ -n "$OLD" ] && builds="old new"
i=0
for k in randmem cg gups chase; do
  order=$builds
  [ -n "$OLD" ] && [ $((i % 2)) = 1 ] && order="new old"
  i=$((i + 1))
  for v in $order; do
    if [ "$v" = old ]; then B=$OLD; else B=$NEW; fi
    out=$tmp/$k-$v
    PATH=$B:$PATH "$B/hugetune" --db "${DB:-$tmp/$v.db}" optimize --reserve --runs 1 --max-runs 1 \
      --mthp none --json -- "$B/hugetune-work" "$k" --size 1G > "$out.json" 2> "$out.err" ||
      { echo "$k $v: optimize failed:"; tail -3 "$out.err"; continue; }
    python3 - "$k" "$v" "$out.json" "$out.err" <<'PY'
import json, os, re, sys
k, v, j, e = sys.argv[1:]
d = json.load(open(j)); t = d['timings']; err = open(e).read()
cap = re.search(r'captured ([\d.]+) M of ([\d.]+) M data references .* in ([\d.]+) s', err)
b = d['profile']['bundle']
size = os.path.getsize(b) / 1e6 if os.path.exists(b) else float('nan')
p = d['predicted_speedup']
n = t['native_s']
print(f"{k:8s} {v}: native {n:.2f} s, profile {t['profile_s']:.1f} s "
      f"(capture {cap.group(3)} s, {cap.group(1)} M of {cap.group(2)} M written), "
      f"analysis {t['analyze_s']:.1f} s, ratio {(t['profile_s'] + t['analyze_s']) / n:.1f}x, "
      f"emulation alone {(t['profile_s'] - n) / n:.1f}x, bundle {size:.0f} MB, "
      f"predicted {p['value']:.2f} ({p['lo']:.2f}-{p['hi']:.2f}), measured {d.get('speedup') or 0:.2f}",
      flush=True)
PY
  done
done
