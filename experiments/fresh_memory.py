#!/usr/bin/env python3
"""The calibration's loops on memory like a measured program's (docs/calibrate.md,
"Fresh memory"): each run in a fresh process pinned to one CPU, after this process
touched and freed 320 MiB, as the measured runs' rounds do (rounds.rs,
`warm_memory`). Per round, in an order rotated each round: hugetune-work chase,
randmem --random-pct 100 and gups over 256 MiB on 4 KB pages and on THP (`--page`;
the timed phase only), and experiments/placement_draws.c's chase, independent loads
and read-modify-writes on one buffer of each. Prints every round and the medians:
the chase's walk (4 KB step less THP step) of the program and of the calibration's
loop, and what each saves per access.

    experiments/fresh_memory.py [ROUNDS]     # default 6; about 10 s a round here
"""

import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "workloads", "build", "hugetune-work")
KERNELS = {
    "chase": (["chase", "--accesses", "4000000"], 4e6),
    "randmem-100": (["randmem", "--random-pct", "100", "--accesses", "16000000"], 16e6),
    "gups": (["gups", "--accesses", "16000000"], 16e6),
}


def warm(mib):
    m = mmap.mmap(-1, mib << 20)
    for off in range(0, mib << 20, 4096):
        m[off] = 1
    m.close()


def pinned(cmd):
    cpu = str(max(os.sched_getaffinity(0)))
    return subprocess.run(["taskset", "-c", cpu] + cmd, capture_output=True, text=True,
                          check=True).stdout


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    tmp = tempfile.mkdtemp()
    exe = os.path.join(tmp, "placement_draws")
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe,
                    os.path.join(ROOT, "experiments", "placement_draws.c")], check=True)
    configs = [(k, p) for k in list(KERNELS) + ["loops"] for p in ("4k", "thp")]
    t = {}
    for r in range(rounds):
        for i in range(len(configs)):
            kernel, page = configs[(i + r) % len(configs)]
            warm(320)
            if kernel == "loops":
                f = pinned([exe, "one", page]).split()
                for name, v in (("loops-chase", f[2]), ("loops-loads", f[4]), ("loops-rmw", f[6])):
                    t.setdefault((name, page), []).append(float(v))
            else:
                args, n = KERNELS[kernel]
                d = json.loads(pinned([WORK] + args + ["--size", "256M", "--page", page]))
                t.setdefault((kernel, page), []).append(d["seconds"] * 1e9 / n)
        print(f"round {r}: " + "  ".join(f"{k} {p} {v[-1]:.1f}" for (k, p), v in t.items()),
              flush=True)
    os.remove(exe)
    os.rmdir(tmp)
    med = {k: statistics.median(v) for k, v in t.items()}
    for name in ["chase", "loops-chase", "randmem-100", "gups", "loops-loads", "loops-rmw"]:
        a, b = med[(name, "4k")], med[(name, "thp")]
        per_round = [x - y for x, y in zip(t[(name, "4k")], t[(name, "thp")])]
        print(f"{name:12s} 4k {a:6.1f} ns  thp {b:6.1f} ns  saved {a - b:6.1f} ns "
              f"(rounds {min(per_round):.1f} to {max(per_round):.1f}), medians of {rounds}")


if __name__ == "__main__":
    main()
