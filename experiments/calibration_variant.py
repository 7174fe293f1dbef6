#!/usr/bin/python3
"""A stored calibration with some fault figures moved by a constant, to re-analyse a
window's bundles and measurements as if calibrate had measured that much more per
fault (docs/ranking.md, "A seventh window": the unmap a calibration made before
stop 41 did not time).

    calibration_variant.py SRC.db DST.db --fault 4k=+420 --fault thp-2m=+8000
    calibration_variant.py SRC.db DST.db --l2-hit 0.001

copies SRC.db (a database holding a calibration, e.g. an interleaved window's
cal-A.db) to DST.db and stores there, as the machine's latest calibration, a copy of
its latest one whose named fault figures (ns per fault: the median, the spread's
ends and every raw pass) are moved by the given ns, or whose L2-hit costs are set to
one figure. Analyses with `--db DST.db` (or
DB=DST.db experiments/ranking_sampled.py) then use it."""
import argparse
import json
import shutil
import sqlite3
import sys
import uuid


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--fault", action="append", default=[], metavar="BACKING=+NS",
                    help="move this backing's fault figure by NS (repeatable)")
    ap.add_argument("--l2-hit", type=float, metavar="NS",
                    help="set every page size's L2-hit cost to NS (> 0; docs/model.md §4, "
                         "\"cg's L2-TLB hits\": 0.001 takes them out)")
    a = ap.parse_args()
    if a.l2_hit is not None and not a.l2_hit > 0:
        sys.exit(f"--l2-hit {a.l2_hit}: the L2-hit cost must be a positive number of ns")
    delta = {}
    for f in a.fault:
        name, _, v = f.partition("=")
        try:
            delta[name] = float(v)
        except ValueError:
            sys.exit(f"--fault {f}: not BACKING=+NS (e.g. 4k=+420)")
    if a.src == a.dst:
        sys.exit("DST must be another file than SRC")
    try:
        src = sqlite3.connect(f"file:{a.src}?mode=ro", uri=True)
        row = src.execute("select machine_id, data from calibrations order by id desc limit 1").fetchone()
        src.close()
    except sqlite3.Error as e:
        sys.exit(f"{a.src}: {e}")
    if row is None:
        sys.exit(f"{a.src} holds no calibration")
    machine, data = row
    d = json.loads(data)
    known = {e[0] for e in d["fault_ns"]}
    for name in delta:
        if name not in known:
            sys.exit(f"the calibration has no fault figure {name!r} (it has {sorted(known)})")
    for e in d["fault_ns"]:
        e[1] += delta.get(e[0], 0.0)
    if a.l2_hit is not None:
        d["l2_hit_ns"] = [a.l2_hit] * len(d["l2_hit_ns"])
        for f in d["figures"]:
            if f.get("kind") == "l2-hit" and f.get("ns"):
                for k in ("median", "min", "max"):
                    f["ns"][k] = a.l2_hit
    for f in d["figures"]:
        if f.get("kind") == "fault" and f.get("ns") and f["what"] in delta:
            for k in ("median", "min", "max"):
                f["ns"][k] += delta[f["what"]]
    for r in d.get("raw", []):
        # The fault passes are stored as "touch <size> <backing>".
        parts = r["config"].split()
        if parts and parts[0] == "touch" and parts[-1] in delta:
            v = delta[parts[-1]]
            r["samples"] = [x + v for x in r["samples"]]
            for k in ("median", "min", "max"):
                if r.get(k) is not None:
                    r[k] += v
    shutil.copyfile(a.src, a.dst)
    con = sqlite3.connect(a.dst)
    con.execute("insert into calibrations (machine_id, data, uid) values (?, ?, ?)",
                (machine, json.dumps(d), str(uuid.uuid4())))
    con.commit()
    print(a.dst, "fault ns:", ", ".join(f"{e[0]} {e[1]:.0f}" for e in d["fault_ns"]))


if __name__ == "__main__":
    main()
