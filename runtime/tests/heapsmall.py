#!/usr/bin/env python3
"""heap-small mechanisms on hugetune-work, measured (runtime/README.md, "heap-small: two
mechanisms, measured"): 4 KB pages (no library) against glibc's glibc.malloc.hugetlb=1
tunable and the library's arena on THP and on hugetlb 2 MB pages.

For each kernel the configurations run interleaved: one untimed warm-up run each (the
VM hands freed memory back to the host, so the first touch after a free is slow once),
then REPS runs; medians of the kernel phase and of initialization.

  runtime/tests/heapsmall.py [CONFIG ...]        (root for arena-hugetlb)
  environment: REPS (default 5), SIZE (default 1G)

arena-hugetlb needs a 2 MB pool: the script sets one under the shared kernel-state
lock and puts the old size back at the end, also on error and Ctrl-C."""
import fcntl, json, os, signal, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "target/release/hugetune-work")
LIB = os.path.join(ROOT, "target/release/libhugetune.so")
NR = "/proc/sys/vm/nr_hugepages"
REPS = int(os.environ.get("REPS", "5"))
SIZE = os.environ.get("SIZE", "1G")
PLANS = {
    # The tunable advises everything glibc manages; heap-large stays the library's,
    # on 4 KB pages, to keep the categories apart.
    "tunable": "hugetune-plan 1\nheap-small thp-2m\nheap-large 4k\n",
    "arena-thp": "hugetune-plan 1\nheap-small arena thp-2m\n",
    "arena-hugetlb": "hugetune-plan 1\nheap-small arena hugetlb-2m\n",
}
KERNELS = {"randmem": [], "chase": [], "gups": ["--accesses", "33554432"]}


def env_for(cfg, tmp):
    e = dict(os.environ)
    if cfg == "4k":
        return e
    e.update({"LD_PRELOAD": LIB, "HUGETUNE_MODE": "apply",
              "HUGETUNE_PLAN": f"{tmp}/plan-{cfg}", "HUGETUNE_SUMMARY": f"{tmp}/sum-{cfg}.json"})
    if cfg == "tunable":
        e["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    return e


def measure(cfgs, tmp):
    res = {}
    for kern, extra in KERNELS.items():
        for rep in range(REPS + 1):
            for cfg in cfgs:
                cmd = [WORK, kern, "--place", "heap-small", "--size", SIZE] + extra
                o = subprocess.run(cmd, env=env_for(cfg, tmp), capture_output=True, text=True)
                if o.returncode != 0:
                    sys.exit(f"{kern} {cfg}: exit {o.returncode}: {o.stderr.strip()[:300]}")
                j = json.loads(o.stdout)
                if rep == 0:
                    if cfg != "4k":
                        s = json.load(open(f"{tmp}/sum-{cfg}.json"))
                        print(f"# {kern} {cfg}: heap-small backed "
                              f"{s['categories']['heap-small']['backed']}, "
                              f"fallbacks {s['fallbacks']}", flush=True)
                    continue
                res.setdefault((kern, cfg), []).append(
                    (j["seconds"], j["init_seconds"], j["checksum"]))
    print(f"{'kernel':8s} {'config':14s} {'kernel s':>9s} {'vs 4k':>6s} {'init s':>7s}  runs")
    for kern in KERNELS:
        base = statistics.median(x[0] for x in res[(kern, cfgs[0])])
        for cfg in cfgs:
            v = res[(kern, cfg)]
            m = statistics.median(x[0] for x in v)
            mi = statistics.median(x[1] for x in v)
            if len({x[2] for x in v}) != 1:
                sys.exit(f"{kern} {cfg}: checksums differ between runs")
            print(f"{kern:8s} {cfg:14s} {m:9.3f} {base / m:5.2f}x {mi:7.2f}  "
                  f"{' '.join(f'{x[0]:.3f}' for x in v)}", flush=True)


def main():
    cfgs = sys.argv[1:] or ["4k", "tunable", "arena-thp", "arena-hugetlb"]
    for c in cfgs:
        if c != "4k" and c not in PLANS:
            sys.exit(f"unknown configuration {c!r} (4k, {', '.join(PLANS)})")
    if cfgs[0] != "4k":
        cfgs.insert(0, "4k")
    for f in (WORK, LIB):
        if not os.path.exists(f):
            sys.exit(f"missing {f} (cargo build --release)")
    with tempfile.TemporaryDirectory(prefix="hugetune-heapsmall.") as tmp:
        for k, t in PLANS.items():
            open(f"{tmp}/plan-{k}", "w").write(t)
        if "arena-hugetlb" not in cfgs:
            return measure(cfgs, tmp)
        if os.geteuid() != 0:
            sys.exit("arena-hugetlb needs root (it sets the 2 MB pool)")
        # Turn SIGTERM into an exception so that the pool goes back.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with open("/run/lock/hugetune-kernel-state.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = open(NR).read().strip()
            try:
                # 1 GiB of nodes plus the index and size-class slack.
                open(NR, "w").write("720")
                print(f"# 2 MB pool: {open(NR).read().strip()} pages (was {old})", flush=True)
                measure(cfgs, tmp)
            finally:
                open(NR, "w").write(old)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
