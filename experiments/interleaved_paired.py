#!/usr/bin/python3
"""The interleaved window's predictions taken with the calibration nearest in time
to each measurement (docs/ranking.md, "A seventh window"), and how far the measured
speedups repeat between the window's two measurements.

Reads what experiments/ranking_interleaved.sh leaves in OUT (the first argument):
predicted-A.jsonl and predicted-B.jsonl (experiments/ranking_sampled.py's results
of measured.jsonl with calibrations A and B) and, after TWICE=1,
predicted-C-second.jsonl (measured-2.jsonl with calibration C) and measured-2.jsonl.
Group 1 (G1, as in the script) is measured right after A, group 2 right after B,
the second measurement right after C. Prints one line per workload and measurement,
then the summaries: best mapping's predicted speedup within 15 % of measured, the
measured speedup inside the predicted interval, and the twin repeatability (the best
measured mapping of the first measurement: its speedup in the second, within 15 %).
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranking import load  # noqa: E402 (the results files' reader, by workload name)

G1 = os.environ.get("G1", "randmem-0-heap-large randmem-40-heap-large randmem-80-heap-large "
                    "randmem-20-static chase-heap-large gups-heap-large stream-heap-large").split()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: interleaved_paired.py OUT (the folder ranking_interleaved.sh wrote)")
    out = sys.argv[1]
    sets = []
    for cal in ("A", "B"):
        p = os.path.join(out, f"predicted-{cal}.jsonl")
        if not os.path.exists(p):
            sys.exit(f"{p} is missing: run experiments/ranking_interleaved.sh with OUT={out}")
        sets.append(("first", cal, load(p), lambda n, c=cal: (n in G1) == (c == "A")))
    second = os.path.join(out, "predicted-C-second.jsonl")
    if os.path.exists(second):
        sets.append(("second", "C", load(second), lambda n: True))
    rows = []
    for which, cal, preds, mine in sets:
        for name, d in preds.items():
            if not mine(name):
                continue
            pred, meas = d["pred_speedup_best"], d["meas_speedup_best"]
            iv = d.get("pred_interval_best")
            inside = iv is not None and iv[0] <= meas <= iv[1]
            rows.append((which, name, cal, pred, meas, iv, inside))
    for which, name, cal, pred, meas, iv, inside in rows:
        ivt = f"[{iv[0]:.2f}-{iv[1]:.2f}]" if iv else "[none]"
        mark = "" if abs(pred / meas - 1) <= 0.15 else " off"
        print(f"{which:6s} {name:26s} {cal}  predicted {pred:.2f}x {ivt}  measured {meas:.2f}x"
              f"  ratio {pred / meas:.2f}{mark}{'' if inside else ' outside'}")
    ok = sum(1 for r in rows if abs(r[3] / r[4] - 1) <= 0.15)
    withiv = [r for r in rows if r[5]]
    inside = sum(1 for r in withiv if r[6])
    width = statistics.median(r[5][1] / r[5][0] for r in withiv) if withiv else float("nan")
    print(f"paired with the nearest calibration: predicted speedup of the best mapping within 15 % "
          f"of measured on {ok} of {len(rows)}; measured within the predicted interval on {inside} "
          f"of {len(withiv)} (high/low median {width:.2f})")
    m2 = os.path.join(out, "measured-2.jsonl")
    if os.path.exists(m2):
        a, b = load(os.path.join(out, "measured.jsonl")), load(m2)
        same, n = 0, 0
        for name in a:
            if name not in b:
                continue
            first = {m["label"]: m["measured_speedup"] for m in a[name]["mappings"]}
            again = {m["label"]: m["measured_speedup"] for m in b[name]["mappings"]}
            best = max(first, key=first.get)
            if best in again:
                n += 1
                same += abs(again[best] / first[best] - 1) <= 0.15
        print(f"twin repeatability: the best measured mapping's speedup measured again within 15 % "
              f"on {same} of {n}")


if __name__ == "__main__":
    main()
