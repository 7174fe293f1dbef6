#!/usr/bin/env python3
"""Self-check of hugetune-work (no root, no hugetlb pool changes, ~1 minute).

usage: tests/check.py [path/to/hugetune-work]     (default: workloads/build/hugetune-work)

Checks: the output line and its fields for every kernel x placement x page (default,
4k, thp) x threads (1, 2); checksums equal across repeated runs and page settings
(and between heap-large and static; for cg also heap-small and any thread count);
chase walks one single cycle; cg converges and restarts every 25 passes; --trace
writes every reference of cg's passes (counted, in the buffers, per-thread indices
without gaps); bad usage exits 2 with one line on stderr and nothing on stdout;
heap-small never makes an allocation of 64 KiB or more (LD_PRELOAD counter
tests/malloc_max.c, built with gcc).  The newer kernels: mg's and sp's results are
the same for every thread count, placement and page, and mg converges; bigbuf,
panels, ptrees and iocopy give the same checksum for threads 1 and 2 and ignore
--place/--page; panels makes one 3..12 MiB request per panel, ptrees none of 64 KiB;
iocopy removes its files and refuses existing ones; the traced build computes the
same and writes a non-empty, well-formed trace (decoded where small: every reference
inside the buffers); their bad usages exit 2.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build", "hugetune-work")
KERNELS = ["randmem", "chase", "gups", "stream", "primes", "malloc", "cg"]
PLACES = ["heap-large", "heap-small", "static", "mmap"]
PAGES = ["default", "4k", "thp"]
FIELDS = ["kernel", "size", "iters", "threads", "place", "page", "random_pct", "accesses",
          "seconds", "rate", "rate_unit", "checksum", "residual", "init_seconds", "minor_faults",
          "init_minor_faults", "buffer", "pid"]
UNITS = {"randmem": "M accesses/s", "chase": "M accesses/s", "gups": "M updates/s",
         "stream": "GB/s", "primes": "events/s", "malloc": "M ops/s", "cg": "M nonzeros/s",
         "mg": "M points/s", "sp": "M points/s", "bigbuf": "MB/s",
         "panels": "MB/s", "ptrees": "M objects/s", "iocopy": "MB/s"}
RESIDUAL = ("cg", "mg")

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
    if (d["residual"] is None) != (d["kernel"] not in RESIDUAL):
        fail(f"{args}: residual {d['residual']}")
    if not (d["seconds"] >= 0 and d["init_seconds"] >= 0 and d["rate"] >= 0):
        fail(f"{args}: bad times/rate")
    if not d["checksum"].startswith("0x") or not d["buffer"].startswith("0x"):
        fail(f"{args}: checksum/buffer not hex strings")
    return d


def matrix():
    for k in KERNELS:
        extra = {"randmem": ["--random-pct", "40"], "malloc": ["--accesses", "100000"]}.get(k, [])
        all_sums = set()
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
            for sums in by_place.values():
                all_sums |= sums
        # cg does the same operations in the same order in every placement and for
        # any number of threads (fixed reduction blocks).
        if k == "cg" and len(all_sums) != 1:
            fail(f"cg: checksums differ across placements or threads: {all_sums}")


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


def cg_converges():
    # CG on an SPD matrix: the relative residual falls (not monotonically in every
    # pass: CG minimizes the error's A-norm), and pass 25 restarts from x = 0.
    res, sums = {}, {}
    for it in (1, 5, 10, 20, 25, 26, 50):
        d = run_json(["cg", "--size", "4M", "--iters", str(it), "--threads", "2"])
        if d:
            res[it], sums[it] = d["residual"], d["checksum"]
    if len(res) == 7:
        if not (res[5] < res[1] and res[10] < res[5] * 0.1 and res[20] < res[10] * 0.01 and res[25] < 1e-8):
            fail(f"cg does not converge: residual after N passes {res}")
        if res[26] != res[1] or sums[26] != sums[1] or res[50] != res[25] or sums[50] != sums[25]:
            fail(f"cg: pass 26 does not restart from the start: {res} {sums}")
    # A different seed is a different matrix and right-hand side.
    d = run_json(["cg", "--size", "4M", "--iters", "5", "--threads", "2", "--seed", "7"])
    if d and d["checksum"] == sums.get(5):
        fail("cg: --seed does not change the matrix")
    print(f"ok  cg converges: relative residual after N passes {res}")


def same_results(name, runs):
    """runs: list of argument lists that must give the same checksum (and residual)."""
    got = {}
    for args in runs:
        d = run_json(args)
        if d:
            got[" ".join(args)] = (d["checksum"], d["residual"])
    if len(set(got.values())) != 1:
        fail(f"{name}: results differ: {got}")
    return next(iter(got.values()), None)


def mg_checks():
    # The same operations for every thread count, placement and page backing: the
    # same u (checksum) and residual; the V-cycle converges about 5x per pass.
    base = ["mg", "--size", "2M", "--iters", "2"]
    want = same_results("mg", [base + ["--place", pl, "--page", pg, "--threads", t]
                        for pl in ("heap-large", "static") for pg in ("default", "4k", "thp")
                        for t in ("1", "2")] + [base])
    res = {}
    for it in (1, 4, 8):
        d = run_json(["mg", "--size", "2M", "--iters", str(it), "--threads", "2"])
        if d:
            res[it] = d["residual"]
            if d["accesses"] != 64 * 32 * 32:
                fail(f"mg --size 2M: {d['accesses']} points, expected a 64 x 32 x 32 grid")
    if len(res) == 3 and not (res[1] < 0.5 and res[4] < res[1] * 0.05 and res[8] < res[4] * 0.05):
        fail(f"mg does not converge: residual after N passes {res}")
    d = run_json(["mg", "--size", "2M", "--iters", "2", "--seed", "7"])
    if d and want and d["checksum"] == want[0]:
        fail("mg: --seed does not change the charges")
    print(f"ok  mg: same results for threads/placements/pages; residual after N passes {res}")


def sp_checks():
    base = ["sp", "--size", "1M", "--iters", "2"]
    want = same_results("sp", [base + ["--place", pl, "--page", pg, "--threads", t]
                               for pl in ("heap-large", "static") for pg in ("default", "4k", "thp")
                               for t in ("1", "2")] + [base])
    d = run_json(base)
    if d and d["accesses"] != 19 ** 3:
        fail(f"sp --size 1M: {d['accesses']} points, expected 19^3")
    d = run_json(base + ["--seed", "7"])
    if d and want and d["checksum"] == want[0]:
        fail("sp: --seed does not change the initial field")
    print("ok  sp: same results for threads/placements/pages")


def own_memory_checks(k, args):
    """Kernels that ignore --place and --page: the same checksum for threads 1 and 2
    and any --place/--page, which are reported as given."""
    runs = [[k] + args + ["--threads", t] for t in ("1", "2")]
    runs.append([k] + args + ["--place", "static", "--page", "thp"])
    same_results(k, runs)
    d = run_json(runs[-1])
    if d and (d["place"], d["page"]) != ("static", "thp"):
        fail(f"{k}: --place/--page not reported as given: {d['place']} {d['page']}")
    print(f"ok  {k}: same checksum for threads 1/2 and any --place/--page")


def trace_end_total(path):
    """The header and the END record's totals of a reference stream, without decoding
    every reference (for big traces): END is varint(3), varint(n), varint(n)."""
    data = open(path, "rb").read()
    if data[:8] != b"HTREFS\0\2":
        raise ValueError("bad magic")
    n = int.from_bytes(data[8:12], "little")
    header = json.loads(data[12:12 + n])
    for k in range(1, 11):
        tail = data[-(2 * k + 1):]
        if len(tail) == 2 * k + 1 and tail[0] == 3 and tail[1:k + 1] == tail[k + 1:] \
                and all(b >= 0x80 for b in tail[1:k]) and tail[k] < 0x80:
            return header, sum((b & 0x7F) << (7 * i) for i, b in enumerate(tail[1:k + 1]))
    raise ValueError("no END record")


def iocopy_checks():
    # The same checksum for every run and thread count; both files gone afterwards;
    # an existing file is refused (exit 2) and left alone; an uncreatable one exits 3.
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "data")
        same_results("iocopy", [["iocopy", "--file", f, "--size", "3M", "--iters", "2", "--threads", t]
                                for t in ("1", "2", "1")] + [["iocopy", "--file", f, "--size", "3M"]])
        if os.listdir(tmp):
            fail(f"iocopy left files behind: {os.listdir(tmp)}")
        d = run_json(["iocopy", "--file", f, "--size", "100001", "--seed", "7"])
        if d and d["accesses"] != 100001:
            fail(f"iocopy --size 100001: accesses {d['accesses']}")
        open(f + ".copy", "w").close()
        rc, out, err = run(["iocopy", "--file", f, "--size", "1M"])
        if rc != 2 or out or sorted(os.listdir(tmp)) != ["data.copy"]:
            fail(f"iocopy onto an existing PATH.copy: exit {rc}, files {os.listdir(tmp)}")
        rc, out, err = run(["iocopy", "--file", os.path.join(tmp, "no", "such"), "--size", "1M"])
        if rc != 3 or out:
            fail(f"iocopy into a missing directory: exit {rc} {err.strip()}")
        d, _ = traced(["iocopy", "--file", f + "2", "--size", "1M"])
        if os.listdir(tmp) != ["data.copy"]:
            fail(f"iocopy --trace left files behind: {os.listdir(tmp)}")
    print("ok  iocopy: same checksum for every run and thread count, files removed, existing ones refused")


def traced(args):
    """Runs args plain and with --trace; the traced build must compute the same and
    write a complete, non-empty stream.  Returns (result, refs by thread), refs None
    when the trace is too big to decode here (then only its END record is read)."""
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "t.htrefs")
        d, plain = run_json(args + ["--trace", f]), run_json(args)
        if not d or not plain:
            return None, None
        if (d["checksum"], d["residual"]) != (plain["checksum"], plain["residual"]):
            fail(f"{args} --trace: the traced build computes something else")
        try:
            header, total = trace_end_total(f)
            if header.get("source") != "workload-trace" or header.get("sampling") != "complete":
                fail(f"{args} --trace: header {header}")
            refs = read_trace(f)[1] if os.path.getsize(f) < 3 << 20 else None
        except (ValueError, IndexError) as e:
            fail(f"{args} --trace: {e}")
            return d, None
        if total == 0:
            fail(f"{args} --trace: empty trace")
        print(f"ok  {' '.join(args)} --trace: {total} references")
        return d, refs


def new_kernel_traces():
    # Decoded where small: every reference of the static placement lies in the static
    # buffer's used part, bigbuf's in its buffer.
    for args in (["mg", "--size", "64K", "--place", "static", "--threads", "2", "--iters", "2"],
                 ["sp", "--size", "100K", "--place", "static", "--threads", "2", "--iters", "2"],
                 ["bigbuf", "--size", "1M", "--threads", "2", "--iters", "2", "--accesses", "70"],
                 ["panels", "--size", "12M", "--threads", "2", "--accesses", "1"],
                 ["ptrees", "--size", "256K", "--threads", "2", "--accesses", "40"]):
        d, refs = traced(args)
        if not refs:
            continue
        base = int(d["buffer"], 16)
        # ptrees' objects are on the heap after the root, with malloc's headers.
        size = d["size"] * (2 if args[0] == "ptrees" else 1)
        outside = [a for v in refs.values() for a, _ in v if not base <= a < base + size]
        if outside:
            fail(f"{args} --trace: {len(outside)} references outside the buffers, e.g. {outside[0]:#x}")
        if sorted(refs) != list(range(int(args[args.index("--threads") + 1]))):
            fail(f"{args} --trace: threads {sorted(refs)}")


def read_trace(path):
    """Reads a reference stream (docs/formats.md section 6, raw): header JSON, and per
    thread the list of (address, write); checks END's totals and that every thread's
    indices follow each other without gaps."""
    data = open(path, "rb").read()
    if data[:8] != b"HTREFS\0\2":
        raise ValueError("bad magic")
    n = int.from_bytes(data[8:12], "little")
    header = json.loads(data[12:12 + n])
    pos, tid, refs, state, end = 12 + n, 0, {}, {}, None

    def varint():
        nonlocal pos
        v = shift = 0
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while pos < len(data):
        h = varint()
        kind = h & 3
        if kind == 0:
            zz, write = h >> 3, (h >> 2) & 1
            d = (zz >> 1) ^ -(zz & 1)
            gap = varint()
            if gap:
                raise ValueError(f"thread {tid}: gap {gap} in a complete stream")
            prev = state.get(tid, 0)
            addr = (prev + d) & (2**64 - 1)
            state[tid] = addr
            refs.setdefault(tid, []).append((addr, write))
        elif kind == 1:
            tid = h >> 2
        elif kind == 3:
            seen, written = varint(), varint()
            end = (seen, written)
            if pos != len(data):
                raise ValueError("bytes after END")
        else:
            raise ValueError(f"record kind {kind}")
    total = sum(len(v) for v in refs.values())
    if end != (total, total):
        raise ValueError(f"END {end}, {total} references read")
    return header, refs


def cg_trace():
    # Per pass and row: the row pointer; per nonzero: column, value, p[column]; q[i]
    # stored, p[i] read; x, p, r, q read and x, r written (6); r, p read, p written
    # (3; a pass after which the iteration restarts writes x, r, p instead); and each
    # thread's first row pointer once per pass.  Writes: q, x, r, p (+ x, r).
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "t.htrefs")
        for t, iters in (("1", 2), ("2", 26)):
            args = ["cg", "--size", "256K", "--place", "static", "--threads", t, "--iters", str(iters)]
            d, plain = run_json(args + ["--trace", f]), run_json(args)
            if not d or not plain:
                continue
            if d["checksum"] != plain["checksum"] or d["residual"] != plain["residual"]:
                fail(f"{args}: the traced build computes something else")
            try:
                header, refs = read_trace(f)
            except (ValueError, IndexError) as e:
                fail(f"{args} --trace: {e}")
                continue
            nnz = d["accesses"]
            n = nnz // 17
            total = sum(len(v) for v in refs.values())
            writes = sum(w for v in refs.values() for _, w in v)
            base = int(d["buffer"], 16)
            outside = [a for v in refs.values() for a, _ in v if not base <= a < base + d["size"]]
            if header.get("source") != "workload-trace" or header.get("sampling") != "complete":
                fail(f"{args} --trace: header {header}")
            if sorted(refs) != list(range(int(t))):
                fail(f"{args} --trace: threads {sorted(refs)}")
            want, want_w = iters * (int(t) + 12 * n + 3 * nnz), iters * 4 * n + (iters - 1) // 25 * 2 * n
            if total != want or writes != want_w:
                fail(f"{args} --trace: {total} references ({writes} writes), expected {want} ({want_w})")
            if outside:
                fail(f"{args} --trace: {len(outside)} references outside the static buffer, e.g. {outside[0]:#x}")
        # heap-small: the index walks too; a complete stream, same results.
        args = ["cg", "--size", "256K", "--place", "heap-small", "--threads", "2", "--iters", "2"]
        d, plain = run_json(args + ["--trace", f]), run_json(args)
        if d and plain:
            try:
                _, refs = read_trace(f)
                total = sum(len(v) for v in refs.values())
                if d["checksum"] != plain["checksum"] or total < 2 * 3 * d["accesses"]:
                    fail(f"{args} --trace: {total} references, checksum {d['checksum']} vs {plain['checksum']}")
            except (ValueError, IndexError) as e:
                fail(f"{args} --trace: {e}")
    print("ok  cg --trace: every reference of the passes, in the buffers, traced build computes the same")


BAD = [[], ["foo"], ["randmem", "--bogus"], ["randmem", "--size"], ["randmem", "--size", "abc"],
       ["randmem", "--size", "12X"], ["randmem", "--size", "-5"], ["randmem", "--size", "100"],
       ["randmem", "--size", "2T"], ["chase", "--size", "2G", "--place", "static"],
       ["randmem", "--random-pct", "101"], ["randmem", "--random-pct", "x"],
       ["chase", "--random-pct", "5"], ["randmem", "--limit", "5"], ["stream", "--accesses", "5"],
       ["randmem", "--threads", "0"], ["randmem", "--threads", "257"], ["randmem", "--iters", "0"],
       ["randmem", "--seed", "-1"], ["randmem", "--place", "heap"], ["randmem", "--page", "2m"],
       ["randmem", "chase"], ["gups", "--size", "4K", "--threads", "2"],
       ["chase", "--fork", "65"], ["chase", "--fork", "x"], ["chase", "--fork", "1", "--place", "heap-small"],
       ["primes", "--fork", "1"], ["malloc", "--fork", "1"],
       ["cg", "--accesses", "5"], ["cg", "--random-pct", "5"], ["cg", "--limit", "5"],
       ["cg", "--size", "2G", "--place", "static"], ["cg", "--fork", "1", "--place", "heap-small"],
       ["cg", "--size", "1K"], ["cg", "--size", "4K", "--threads", "2"], ["cg", "--iters", "0"],
       ["mg", "--place", "heap-small"], ["mg", "--size", "8K"], ["mg", "--accesses", "5"],
       ["mg", "--random-pct", "5"], ["mg", "--size", "2G", "--place", "static"],
       ["sp", "--place", "heap-small"], ["sp", "--size", "64K"], ["sp", "--accesses", "5"],
       ["sp", "--limit", "5"], ["bigbuf", "--size", "512K"], ["bigbuf", "--fork", "1"],
       ["bigbuf", "--random-pct", "5"], ["panels", "--size", "8M"], ["panels", "--fork", "1"],
       ["panels", "--accesses", "0"], ["ptrees", "--size", "32K"], ["ptrees", "--fork", "1"],
       ["ptrees", "--limit", "5"], ["iocopy"], ["iocopy", "--size", "1M"], ["randmem", "--file", "x"],
       ["iocopy", "--file", "x", "--accesses", "5"], ["iocopy", "--file", ""], ["iocopy", "--file", "x", "--fork", "1"],
       ["iocopy", "--file", "x", "--size", "1K"]]


def bad_usage():
    for args in BAD:
        rc, out, err = run(args)
        if rc != 2 or out or len(err.strip().splitlines()) != 1:
            fail(f"bad usage {args}: exit {rc}, stdout {out!r}, stderr {err!r}")
    print(f"ok  {len(BAD)} bad usages exit 2 with one line on stderr")


def forked_writers():
    # Each child writes every page of the buffer after the passes; the parent's
    # result (and checksum) is the one without --fork, and it exits 0.
    for k in ["randmem", "chase", "gups", "stream", "cg", "mg", "sp"]:
        for pl in ("heap-large", "static"):
            base = [k, "--size", "8M", "--place", pl]
            if k not in ("stream", "cg", "mg", "sp"):
                base += ["--accesses", "10000"]
            a, b = run_json(base), run_json(base + ["--fork", "3"])
            if a and b and a["checksum"] != b["checksum"]:
                fail(f"{base} --fork 3: checksum {b['checksum']} != {a['checksum']}")
    print("ok  --fork: children write the buffers, results unchanged, exit 0")


def allocation_sizes():
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "malloc_max.so")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", so,
                        os.path.join(HERE, "malloc_max.c")], check=True)
        env = dict(os.environ, LD_PRELOAD=so)
        # panels: exactly one large request per panel, 3..12 MiB.
        args = ["panels", "--size", "16M", "--accesses", "8", "--iters", "2", "--threads", "2"]
        rc, out, err = run(args, env)
        line = [l for l in err.splitlines() if l.startswith("malloc_max:")]
        want = "big(>=64KiB)=16"
        if rc != 0 or not line or want not in line[0]:
            fail(f"{args}: {err.strip()} (expected {want})")
        else:
            largest = int(line[0].split("largest=")[1].split()[0])
            if not 3 << 20 < largest <= 12 << 20:
                fail(f"{args}: largest request {largest}")
            print(f"ok  {' '.join(args)}: {line[0]}")
        # ptrees: no large request (the largest, 4 KiB, is stdio's buffer), about
        # --size / 2 KiB objects.
        args = ["ptrees", "--size", "8M", "--accesses", "100", "--threads", "2"]
        rc, out, err = run(args, env)
        line = [l for l in err.splitlines() if l.startswith("malloc_max:")]
        if rc != 0 or not line or "big(>=64KiB)=0" not in line[0]:
            fail(f"{args}: {err.strip()}")
        else:
            largest = int(line[0].split("largest=")[1].split()[0])
            requests = int(line[0].split("requests=")[1].split()[0])
            if largest > 4096 or not 3900 < requests < 4300:
                fail(f"{args}: {line[0]} (expected largest <= 4096, about 4096 requests)")
            print(f"ok  {' '.join(args)}: {line[0]}")
        for k in ["randmem", "chase", "gups", "stream", "cg"]:
            for size in ("64M", "1G"):
                args = [k, "--place", "heap-small", "--size", size, "--threads", "2"]
                if k not in ("stream", "cg"):
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
    cg_converges()
    cg_trace()
    mg_checks()
    sp_checks()
    own_memory_checks("bigbuf", ["--size", "8M", "--iters", "2"])
    own_memory_checks("bigbuf", ["--size", "1M", "--iters", "3", "--accesses", "150"])
    own_memory_checks("panels", ["--size", "16M", "--iters", "2", "--accesses", "6"])
    own_memory_checks("ptrees", ["--size", "4M", "--iters", "2"])
    iocopy_checks()
    new_kernel_traces()
    bad_usage()
    forked_writers()
    allocation_sizes()
    print("FAILED: %d" % len(failures) if failures else "all checks passed")
    sys.exit(1 if failures else 0)
