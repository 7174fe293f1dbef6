#!/usr/bin/python3
"""The model's proof (issue 5; seed 001 §5.3.2): predicted vs measured ranking of
mappings on hugetune-work kernels with their data in static, heap-small and
heap-large memory.

For each workload, `hugetune rank` profiles the command once (QEMU plugin, every
reference), predicts every base mapping at every page size, then runs each mapping
--runs times, interleaved, after one untimed warm-up round, and reports the ranking
error: the mean over the mappings of |predicted PMB - measured PMB|. This script
runs every workload, keeps one JSON line per workload in --results (a rerun skips
the workloads already there), and writes the tables to --md.

    experiments/ranking.py                      # everything, 5 runs (about 35 min)
    experiments/ranking.py --only chase-heap-large --runs 3
    experiments/ranking.py --render-only        # tables from the results file

Run it on a quiet machine: timings of concurrent builds are noise. It changes
hugetlb pools only through `hugetune rank`, under the shared lock, restored after.
"""

import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUGETUNE = os.path.join(ROOT, "target", "release", "hugetune")
WORK = os.path.join(ROOT, "workloads", "build", "hugetune-work")

# 256 MiB: 64 K pages of 4 KB, 16 times the L2 DTLB's reach, and a profile of
# tens of millions of references (every reference is recorded and analysed).
KERNELS = [
    ("randmem-0", ["randmem", "--random-pct", "0", "--accesses", "16000000"], "256M"),
    ("randmem-20", ["randmem", "--random-pct", "20", "--accesses", "16000000"], "256M"),
    ("randmem-40", ["randmem", "--random-pct", "40", "--accesses", "16000000"], "256M"),
    ("randmem-60", ["randmem", "--random-pct", "60", "--accesses", "16000000"], "256M"),
    ("randmem-80", ["randmem", "--random-pct", "80", "--accesses", "16000000"], "256M"),
    ("randmem-100", ["randmem", "--random-pct", "100", "--accesses", "16000000"], "256M"),
    ("chase", ["chase", "--accesses", "4000000"], "256M"),
    ("gups", ["gups", "--accesses", "16000000"], "256M"),
    ("stream", ["stream", "--iters", "4"], "256M"),
    ("cg", ["cg", "--iters", "4"], "128M"),
]
PLACES = ["heap-large", "static", "heap-small"]
# 1 GB pages only exist for blocks of at least 1 GiB: three heap-large workloads
# at 1 GiB add heap-large:hugetlb-1g to the mappings compared.
GIGANTIC = [
    ("chase-1g", ["chase", "--accesses", "4000000"], "1G"),
    ("gups-1g", ["gups", "--accesses", "16000000"], "1G"),
    ("randmem-100-1g", ["randmem", "--random-pct", "100", "--accesses", "16000000"], "1G"),
]


def workloads():
    for kname, args, size in KERNELS:
        for place in PLACES:
            yield f"{kname}-{place}", [WORK] + args + ["--size", size, "--place", place]
    for kname, args, size in GIGANTIC:
        yield f"{kname}-heap-large", [WORK] + args + ["--size", size, "--place", "heap-large"]


def load(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    r = json.loads(line)
                    out[r["name"]] = r
    return out


def geomean(values, floor=0.1):
    """Geometric mean; errors below `floor` points count as `floor` (a workload
    measured exactly would otherwise zero the mean)."""
    if not values:
        return float("nan")
    return math.exp(sum(math.log(max(v, floor)) for v in values) / len(values))


def render(results, order):
    rows = [results[n] for n in order if n in results]
    lines = []
    lines.append("| workload | mappings | significance | best predicted = best measured | "
                 "ranking error | FA vs set-assoc walks |")
    lines.append("|---|---|---|---|---|---|")
    errs = []
    for r in rows:
        errs.append(r["ranking_error"])
        fa = sum(m["walks"] for m in r["mappings"])
        sim = [m["sim_walks"] for m in r["mappings"] if m["sim_walks"] is not None]
        sim_txt = "—"
        if len(sim) == len(r["mappings"]) and sum(sim) > 0:
            sim_txt = f"{(fa - sum(sim)) / sum(sim) * 100:+.2f}%"
        lines.append(
            f"| {r['name']} | {len(r['mappings'])} | "
            f"{'passes' if r['significance_passes'] else 'fails'} | "
            f"{'yes' if r['best_agrees'] else 'no'} | {r['ranking_error']:.1f}% | {sim_txt} |"
        )
    lines.append("")
    lines.append(f"**Geometric mean of the ranking error over {len(errs)} workloads: "
                 f"{geomean(errs):.2f}%** (arithmetic mean {sum(errs) / max(len(errs), 1):.2f}%, "
                 f"median {sorted(errs)[len(errs) // 2] if errs else float('nan'):.2f}%, "
                 f"max {max(errs) if errs else float('nan'):.1f}%).")
    lines.append("")
    lines.append("### Every mapping: predicted vs measured")
    lines.append("")
    lines.append("| workload | mapping | PMB predicted | PMB measured | speedup predicted | "
                 "speedup measured | median [min, max] s | huge backed |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for m in r["mappings"]:
            lines.append(
                f"| {r['name']} | {m['label']} | {m['predicted_pmb']:.0f}% | "
                f"{m['measured_pmb']:.0f}% | {m['predicted_speedup']:.2f}x | "
                f"{m['measured_speedup']:.2f}x | {m['measured_median_s']:.3f} "
                f"[{m['measured_min_s']:.3f}, {m['measured_max_s']:.3f}] | "
                f"{m['huge_bytes'] / 2**20:.0f} MiB |"
            )
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--results", default=os.path.join(ROOT, "experiments", "results", "ranking.jsonl"))
    ap.add_argument("--bundles", default="/var/tmp/hugetune-ranking")
    ap.add_argument("--md", default=os.path.join(ROOT, "experiments", "results", "ranking.md"))
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--no-simulate", action="store_true")
    a = ap.parse_args()
    order = [n for n, _ in workloads()]
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    os.makedirs(a.bundles, exist_ok=True)
    results = load(a.results)
    if not a.render_only:
        for name, cmd in workloads():
            if a.only and name not in a.only:
                continue
            if name in results:
                print(f"{name}: already measured", file=sys.stderr)
                continue
            argv = [HUGETUNE, "rank", "--json", "--runs", str(a.runs), "--name", name,
                    "--bundle", os.path.join(a.bundles, name + ".htb")]
            if not a.no_simulate:
                argv.append("--simulate")
            argv += ["--"] + cmd
            print(f"{name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                print(f"{name}: FAILED ({p.returncode})\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(p.stdout)
            results[name] = r
            with open(a.results, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(f"{name}: ranking error {r['ranking_error']:.1f}%", file=sys.stderr, flush=True)
    with open(a.md, "w") as f:
        f.write(render(results, order))
    print(f"wrote {a.md}", file=sys.stderr)


if __name__ == "__main__":
    main()
