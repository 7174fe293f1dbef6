#!/usr/bin/env python3
"""Self-check of hugetune-work (no root, no hugetlb pool changes, ~1 minute).

usage: tests/check.py [path/to/hugetune-work]     (default: workloads/build/hugetune-work)

Checks: the output line and its fields for every kernel x placement x page (default,
4k, thp) x threads (1, 2); checksums equal across repeated runs and page settings
(and between heap-large and static); chase walks one single cycle; bad usage exits 2
with one line on stderr and nothing on stdout; heap-small never makes an allocation
of 64 KiB or more (LD_PRELOAD counter tests/malloc_max.c, built with gcc).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build", "hugetune-work")
KERNELS = ["randmem", "chase", "gups", "stream", "primes", "malloc"]
PLACES = ["heap-large", "heap-small", "static"]
PAGES = ["default", "4k", "thp"]
FIELDS = ["kernel", "size", "iters", "threads", "place", "page", "random_pct", "accesses",
          "seconds", "rate", "rate_unit", "checksum", "init_seconds", "minor_faults",
          "init_minor_faults", "buffer", "pid"]
UNITS = {"randmem": "M accesses/s", "chase": "M accesses/s", "gups": "M updates/s",
         "stream": "GB/s", "primes": "events/s", "malloc": "M ops/s"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(args, env=None):
    p = subprocess.run([BIN] + args, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def run_json(args):
    rc, out, err = run(args)
    if rc != 0:
        fail(f"{args}: exit {rc}: {err.strip()}")
        return None
    lines = out.splitlines()
    if len(lines) != 1:
        fail(f"{args}: {len(lines)} lines on stdout")
        return None
    d = json.loads(lines[0])
    if list(d.keys()) != FIELDS:
        fail(f"{args}: fields {list(d.keys())}")
    if d["rate_unit"] != UNITS[d["kernel"]]:
        fail(f"{args}: rate_unit {d['rate_unit']}")
    if (d["random_pct"] is None) != (d["kernel"] != "randmem"):
        fail(f"{args}: random_pct {d['random_pct']}")
    if not (d["seconds"] >= 0 and d["init_seconds"] >= 0 and d["rate"] >= 0):
        fail(f"{args}: bad times/rate")
    if not d["checksum"].startswith("0x") or not d["buffer"].startswith("0x"):
        fail(f"{args}: checksum/buffer not hex strings")
    return d


def matrix():
    for k in KERNELS:
        extra = {"randmem": ["--random-pct", "40"], "malloc": ["--accesses", "100000"]}.get(k, [])
        for t in ("1", "2"):
            by_place = {}
            for pl in PLACES:
                sums = set()
                for pg in PAGES:
                    d = run_json([k, "--size", "8M", "--place", pl, "--page", pg,
                                  "--threads", t, "--iters", "2"] + extra)
                    if d:
                        sums.add(d["checksum"])
                d = run_json([k, "--size", "8M", "--place", pl, "--threads", t, "--iters", "2"] + extra)
                if d:
                    sums.add(d["checksum"])
                if len(sums) != 1:
                    fail(f"{k} {pl} threads={t}: checksums differ across runs/pages: {sums}")
                by_place[pl] = sums
            if k != "primes" and by_place["heap-large"] != by_place["static"]:
                fail(f"{k} threads={t}: heap-large and static checksums differ")
            print(f"ok  {k:8s} threads={t} {sorted(by_place.items())}")


def chase_cycle():
    # One pass, one walker per thread, together one full cycle: sum of all node ids.
    for pl in PLACES:
        for t in ("1", "2"):
            d = run_json(["chase", "--size", "8M", "--place", pl, "--threads", t])
            if d:
                n = d["accesses"]
                if int(d["checksum"], 16) != n * (n - 1) // 2:
                    fail(f"chase {pl} threads={t}: not a single cycle of {n} nodes")
    print("ok  chase visits every node once per pass")


BAD = [[], ["foo"], ["randmem", "--bogus"], ["randmem", "--size"], ["randmem", "--size", "abc"],
       ["randmem", "--size", "12X"], ["randmem", "--size", "-5"], ["randmem", "--size", "100"],
       ["randmem", "--size", "2T"], ["chase", "--size", "2G", "--place", "static"],
       ["randmem", "--random-pct", "101"], ["randmem", "--random-pct", "x"],
       ["chase", "--random-pct", "5"], ["randmem", "--limit", "5"], ["stream", "--accesses", "5"],
       ["randmem", "--threads", "0"], ["randmem", "--threads", "257"], ["randmem", "--iters", "0"],
       ["randmem", "--seed", "-1"], ["randmem", "--place", "heap"], ["randmem", "--page", "2m"],
       ["randmem", "chase"], ["gups", "--size", "4K", "--threads", "2"],
       ["chase", "--fork", "65"], ["chase", "--fork", "x"], ["chase", "--fork", "1", "--place", "heap-small"],
       ["primes", "--fork", "1"], ["malloc", "--fork", "1"]]


def bad_usage():
    for args in BAD:
        rc, out, err = run(args)
        if rc != 2 or out or len(err.strip().splitlines()) != 1:
            fail(f"bad usage {args}: exit {rc}, stdout {out!r}, stderr {err!r}")
    print(f"ok  {len(BAD)} bad usages exit 2 with one line on stderr")


def forked_writers():
    # Each child writes every page of the buffer after the passes; the parent's
    # result (and checksum) is the one without --fork, and it exits 0.
    for k in ["randmem", "chase", "gups", "stream"]:
        for pl in ("heap-large", "static"):
            base = [k, "--size", "8M", "--place", pl]
            if k != "stream":
                base += ["--accesses", "10000"]
            a, b = run_json(base), run_json(base + ["--fork", "3"])
            if a and b and a["checksum"] != b["checksum"]:
                fail(f"{base} --fork 3: checksum {b['checksum']} != {a['checksum']}")
    print("ok  --fork: children write the buffers, results unchanged, exit 0")


def heap_small_allocations():
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "malloc_max.so")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", so,
                        os.path.join(HERE, "malloc_max.c")], check=True)
        env = dict(os.environ, LD_PRELOAD=so)
        for k in ["randmem", "chase", "gups", "stream"]:
            for size in ("64M", "1G"):
                args = [k, "--place", "heap-small", "--size", size, "--threads", "2"]
                if k != "stream":
                    args += ["--accesses", "1000"]
                rc, out, err = run(args, env)
                line = [l for l in err.splitlines() if l.startswith("malloc_max:")]
                if rc != 0 or not line or "big(>=64KiB)=0" not in line[0]:
                    fail(f"{args}: {err.strip()}")
                else:
                    print(f"ok  {' '.join(args)}: {line[0]}")


if __name__ == "__main__":
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no executable {BIN} (build it with make -C workloads)")
    matrix()
    chase_cycle()
    bad_usage()
    forked_writers()
    heap_small_allocations()
    print("FAILED: %d" % len(failures) if failures else "all checks passed")
    sys.exit(1 if failures else 0)
