#!/usr/bin/env python3
"""The heap-small arena's layout, measured (runtime/README.md, "The arena keeps glibc's
layout"): hugetune-work's heap-small kernels under apply mode with an empty plan (glibc
serves the nodes), with plan `heap-small arena thp-2m`, and optionally the same plan with
another build of the library (OLD_LIB, e.g. built from an earlier commit) and glibc's THP
tunable.

For each kernel the configurations run interleaved: one untimed warm-up run each, then
REPS runs; medians of the kernel phase (`seconds`), its ratio to the empty plan, and the
spread. Checksums must agree between runs of a configuration.

  runtime/tests/arena_layout.py [CONFIG ...]    CONFIG: empty, old, arena, tunable
  environment: REPS (default 7), SIZE (default 256M), LIB (default
  target/release/libhugetune.so), OLD_LIB, WORK (default target/release/hugetune-work)"""
import json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.environ.get("WORK", os.path.join(ROOT, "target/release/hugetune-work"))
LIB = os.environ.get("LIB", os.path.join(ROOT, "target/release/libhugetune.so"))
OLD_LIB = os.environ.get("OLD_LIB")
REPS = int(os.environ.get("REPS", "7"))
SIZE = os.environ.get("SIZE", "256M")
PLANS = {
    "empty": "hugetune-plan 1\nthreshold 131072\n",
    "old": "hugetune-plan 1\nheap-small arena thp-2m\n",
    "arena": "hugetune-plan 1\nheap-small arena thp-2m\n",
    "tunable": "hugetune-plan 1\nheap-small thp-2m\nheap-large 4k\n",
}
KERNELS = [
    ("randmem-0", ["randmem", "--random-pct", "0", "--accesses", "16000000"]),
    ("randmem-100", ["randmem", "--random-pct", "100", "--accesses", "16000000"]),
    ("chase", ["chase"]),
    ("gups", ["gups", "--accesses", "16000000"]),
    ("stream", ["stream", "--iters", "4"]),
]


def env_for(cfg, tmp):
    e = dict(os.environ)
    e.update({"LD_PRELOAD": OLD_LIB if cfg == "old" else LIB, "HUGETUNE_MODE": "apply",
              "HUGETUNE_PLAN": f"{tmp}/plan-{cfg}", "HUGETUNE_SUMMARY": f"{tmp}/sum-{cfg}.json"})
    if cfg == "tunable":
        e["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    return e


def main():
    cfgs = sys.argv[1:] or (["empty", "old", "arena"] if OLD_LIB else ["empty", "arena"])
    for c in cfgs:
        if c not in PLANS:
            sys.exit(f"unknown configuration {c!r} ({', '.join(PLANS)})")
        if c == "old" and not OLD_LIB:
            sys.exit("configuration old needs OLD_LIB")
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for c in cfgs:
            with open(f"{tmp}/plan-{c}", "w") as f:
                f.write(PLANS[c])
        for name, args in KERNELS:
            for rep in range(REPS + 1):
                for cfg in cfgs:
                    cmd = [WORK] + args + ["--place", "heap-small", "--size", SIZE]
                    o = subprocess.run(cmd, env=env_for(cfg, tmp), capture_output=True, text=True)
                    if o.returncode != 0:
                        sys.exit(f"{name} {cfg}: exit {o.returncode}: {o.stderr.strip()[:300]}")
                    j = json.loads(o.stdout)
                    if rep == 0:
                        s = json.load(open(f"{tmp}/sum-{cfg}.json"))
                        print(f"# {name} {cfg}: heap-small backed "
                              f"{s['categories']['heap-small']['backed']}, arena {s['arena']}",
                              flush=True)
                        continue
                    res.setdefault((name, cfg), []).append((j["seconds"], j["checksum"]))
    print(f"{'kernel':12s} {'config':8s} {'median s':>9s} {'/empty':>7s}  runs")
    for name, _ in KERNELS:
        base = statistics.median(x[0] for x in res[(name, cfgs[0])])
        for cfg in cfgs:
            v = res[(name, cfg)]
            m = statistics.median(x[0] for x in v)
            if len({x[1] for x in v}) != 1:
                sys.exit(f"{name} {cfg}: checksums differ between runs")
            print(f"{name:12s} {cfg:8s} {m:9.3f} {m / base:6.2f}x  "
                  f"{' '.join(f'{x[0]:.3f}' for x in v)}", flush=True)


if __name__ == "__main__":
    main()
