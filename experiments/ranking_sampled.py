#!/usr/bin/python3
"""Ranking error of *sampled* profiles (issue 18): each workload of the ranking run
(experiments/results/ranking.jsonl: its measured PMBs) profiled again the way
`optimize` does by default (fixed-size sample with a reference budget), analysed,
and its predicted PMBs set against the same measured ones. The measured side does
not depend on the profile, so it is reused, not re-measured.

NATIVE=measured (the default) takes the predicted speedups over the measured
all-small median of that same run (`analyze --native-time`), the baseline the
measured speedups are taken over; NATIVE=profile over the profile's own native run
(timed by `record`, on whatever load the machine had then).

MEASURED names the measured run (default experiments/results/ranking.jsonl);
COMPLETE a folder of complete bundles of the same workloads (`ranking.py
--profile-only --bundles FOLDER`): the complete-trace predictions set against the
sampled ones are then analysed from those, with the same costs and native time,
instead of taken from the measured run's file (whose `hugetune rank` predicted
from whatever bundle it was given, and with the costs of its day);
DB the database whose calibration of this machine supplies the costs (default:
hugetune's own; a path that does not exist: the default costs). Ends with the
summary: workloads whose best mapping's predicted speedup is within 15 % of the
measured one, and the geometric-mean ranking errors."""
import json, os, subprocess, sys, math
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H = os.environ.get("HUGETUNE", os.path.join(ROOT, "target", "release", "hugetune"))
W = os.environ.get("WORK", os.path.join(ROOT, "target", "release", "hugetune-work"))
BUDGET = os.environ.get("BUDGET", "20000000")
NATIVE = os.environ.get("NATIVE", "measured")
if NATIVE not in ("measured", "profile"):
    sys.exit("NATIVE must be 'measured' or 'profile'")
OUT = "/var/tmp/hugetune-ranking-sampled"
os.makedirs(OUT, exist_ok=True)
res = os.environ.get("MEASURED", os.path.join(ROOT, "experiments/results/ranking.jsonl"))
DB = ["--db", os.environ["DB"]] if os.environ.get("DB") else []
COMPLETE = os.environ.get("COMPLETE")
summary = []


def analyse(bundle, extra):
    """`hugetune analyze --json` of a bundle: (predictions by label, the JSON), or
    None with the reason printed."""
    r = subprocess.run([H, "analyze", "--json", "--no-db", "--max-refs", BUDGET] + DB + extra + [bundle],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(os.path.basename(bundle), "analyze failed", r.stderr[-500:])
        return None
    a = json.loads(r.stdout)
    return {p["label"]: p for p in a["predictions"]}, a


def pmbs(savings):
    """PMB among the mappings compared, as `hugetune rank` computes it."""
    top = max(savings)
    return [100.0 * max(x, 0.0) / top if top > 0 else 0.0 for x in savings]


out = open(os.environ.get("RESULTS", os.path.join(ROOT, "experiments", "results", "ranking-sampled.jsonl")), "a")
for line in open(res):
    w = json.loads(line)
    name = w["name"]
    cmd = [W] + w["command"][1:]
    b = os.path.join(OUT, name + ".htb")
    if not os.path.exists(b):
        r = subprocess.run([H, "record", "--refs", "qemu", "--max-refs", BUDGET, "-o", b, "--"] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ, HUGETUNE_PROGRESS="0"))
        if r.returncode != 0:
            print(name, "record failed", r.stderr[-500:]); continue
    extra = []
    if NATIVE == "measured":
        base = [m for m in w["mappings"] if m["label"] == "all-small"]
        if not base:
            print(name, "no all-small baseline"); continue
        extra = ["--native-time", str(base[0]["measured_median_s"])]
    got = analyse(b, extra)
    if got is None:
        continue
    pred, a = got
    comp = None
    if COMPLETE:
        cb = os.path.join(COMPLETE, name + ".htb")
        if not os.path.exists(cb):
            print(name, "no complete bundle in", COMPLETE); continue
        got = analyse(cb, extra)
        if got is None:
            continue
        comp = got[0]
    pairs = []
    for m in w["mappings"]:
        p = pred.get(m["label"])
        if p is None or (comp is not None and m["label"] not in comp):
            continue
        c = comp[m["label"]] if comp is not None else None
        pairs.append([m["label"], p["saving_ns"], c["saving_ns"] if c else None, m["measured_pmb"],
                      p["predicted_speedup"], m["measured_speedup"], c["predicted_speedup"] if c else None,
                      m["predicted_pmb"]])
    for x, v in zip(pairs, pmbs([x[1] for x in pairs])):
        x[1] = v
    if comp is not None:
        for x, v in zip(pairs, pmbs([x[2] for x in pairs])):
            x[2] = v
    else:
        for x in pairs:
            x[2] = x[7]
    err_s = sum(abs(x[1] - x[3]) for x in pairs) / len(pairs)
    err_c = sum(abs(x[2] - x[3]) for x in pairs) / len(pairs)
    best_s = max(pairs, key=lambda x: x[1])[0]
    best_c = max(pairs, key=lambda x: x[2])[0]
    best_m = max(pairs, key=lambda x: x[3])[0]
    bs = [x for x in pairs if x[0] == best_s][0]
    rec = {"name": name, "sampled_error": err_s, "complete_error": err_c, "best_sampled": best_s,
           "best_complete": best_c, "best_measured": best_m, "mappings": len(pairs),
           "pred_speedup_best": bs[4], "meas_speedup_best": bs[5], "refs": a["meta"]["refs"],
           "sampling": a["meta"]["ref_sampling"], "native_s": a["meta"]["native"]["wall_s"],
           "native_from": NATIVE,
           "complete_from": "analyze " + COMPLETE if COMPLETE else "the measured run's predicted PMBs"}
    if comp is not None:
        bc = [x for x in pairs if x[0] == best_c][0]
        rec["pred_speedup_best_complete"] = bc[6]
        rec["meas_speedup_best_complete"] = bc[5]
    # The best mapping's interval (docs/model.md §4.1): the calibration's
    # spread with the sampling on top, and the calibration's alone.
    iv = [i for i in a.get("intervals", []) if i["label"] == best_s]
    if iv:
        rec["pred_interval_best"] = [iv[0]["low"], iv[0]["high"]]
        rec["pred_interval_best_calibration"] = [iv[0]["calibration_low"], iv[0]["calibration_high"]]
    rec["measured"] = os.path.basename(res)
    rec["costs"] = a["cost"]["source"]
    out.write(json.dumps(rec) + "\n"); out.flush()
    summary.append(rec)
    within = f" [{iv[0]['low']:.2f}-{iv[0]['high']:.2f}]" if iv else ""
    print(f"{name:28s} sampled {err_s:6.2f} complete {err_c:6.2f} best {best_s} / {best_c} / measured {best_m}  pred {bs[4]:.2f}{within} meas {bs[5]:.2f}", flush=True)
if summary:
    ok = sum(1 for r in summary if abs(r["pred_speedup_best"] / r["meas_speedup_best"] - 1) <= 0.15)
    g = lambda k: math.exp(sum(math.log(max(r[k], 0.1)) for r in summary) / len(summary))
    same = sum(1 for r in summary if r["best_sampled"] == r["best_complete"])
    ivs = [r for r in summary if "pred_interval_best" in r]
    inside = ""
    if ivs:
        n_in = sum(1 for r in ivs if r["pred_interval_best"][0] <= r["meas_speedup_best"] <= r["pred_interval_best"][1])
        widths = sorted(r["pred_interval_best"][1] / r["pred_interval_best"][0] for r in ivs)
        inside = (f"; measured within the predicted interval: {n_in} of {len(ivs)} "
                  f"(high/low median {widths[len(widths) // 2]:.2f})")
    print(f"predicted speedup of the best mapping within 15 % of measured: {ok} of {len(summary)} "
          f"({100 * ok / len(summary):.0f} %){inside}; ranking error (geometric mean) sampled {g('sampled_error'):.2f} %, "
          f"complete {g('complete_error'):.2f} %; best mapping as the complete profile's: {same} of {len(summary)}; "
          f"costs: {summary[0]['costs']}")
    comp = [r for r in summary if r.get("pred_speedup_best_complete")]
    if comp:
        meas = {r["name"]: r["meas_speedup_best_complete"] for r in comp}
        okc = sum(1 for r in comp if abs(r["pred_speedup_best_complete"] / meas[r["name"]] - 1) <= 0.15)
        print(f"the complete profiles' best mapping within 15 % of measured: {okc} of {len(comp)}; "
              f"ranking error gap (sampled - complete, geometric means): {g('sampled_error') - g('complete_error'):+.2f} points")
