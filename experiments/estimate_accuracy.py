"""E5, cost-estimate accuracy (paper section 6.1): the plan's estimates against what the reuse tuner did.

Reads the per-reuse rows that E2 (``reuse_pairs.py``: ``estimate`` and ``estimated_seconds`` per
pair) and E3 (``set_bench.py``: the ``estimator`` rows of every seed) recorded, pools them, and
reports per source and overall the mean and spread of actual / estimated candidates and seconds and
the share within [0.67, 1.5]; the PNG plots actual against estimated, log-log, with the diagonal.
Nothing is tuned here: the numbers are those of the runs the inputs come from.

    python -m experiments.estimate_accuracy --scale small          # every results file of that scale
    python -m experiments.estimate_accuracy --inputs A.json B.json --out /tmp/e5.json
    python -m experiments.estimate_accuracy --inputs A.json --fit DB1 DB2    # and the time model those
                                                                              # databases' results fit

``--fit``: pools the tuning results of the given databases (one target; a result copied into several
databases counts once) and fits eto's time model on them (:func:`eto.planning.time_model.fit_time_model`), the
fit from which the priors of ``eto.planning.time_priors`` are taken (``--timing``: of runs timed cold or hot).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def rows_of(result: dict) -> list[dict]:
    """(estimated, actual) candidates and seconds of every reuse a result file recorded."""
    out = []
    if result.get("benchmark") == "reuse_pairs":
        for r in result.get("pairs", []):
            if r.get("strategy", "global") != "topk" and r.get("estimate") and r.get("candidates"):
                out.append({"op": r["alpha"], "source": r["beta"], "estimated_candidates": r["estimate"],
                            "candidates": r["candidates"], "estimated_seconds": r.get("estimated_seconds"),
                            "seconds": r.get("seconds")})
    elif result.get("benchmark") == "set_bench":
        for seed in result.get("per_seed", []):
            for r in seed.get("estimator", {}).get("eto", {}).get("rows", []):
                if r.get("estimate") and r.get("candidates"):
                    out.append({"op": r["op"], "source": r.get("source"), "estimated_candidates": r["estimate"],
                                "candidates": r["candidates"], "estimated_seconds": r.get("estimated_seconds"),
                                "seconds": r.get("seconds")})
    return out


def accuracy(rows: list[dict], what: str) -> dict:
    """actual / estimated over the rows that have both: mean, median, min, max, share in [0.67, 1.5]."""
    ratios = [r[what] / r[f"estimated_{what}"] for r in rows if r.get(what) and r.get(f"estimated_{what}")]
    if not ratios:
        return {"n": 0}
    return {"n": len(ratios), "mean_actual_over_estimate": statistics.fmean(ratios),
            "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "within_0.67_1.5": sum(0.67 <= x <= 1.5 for x in ratios) / len(ratios)}


def fit(db_paths: list[str], kind: str, defaults: str | None = None, timing: str = "cold") -> dict:
    """The time model fitted on the pooled results of ``db_paths`` timed as ``timing`` (a result without a
    timing was timed hot), and how many results it saw; where the results cannot tell a coefficient (a
    backend run's set-up when every root ran the same trials) the prior of ``defaults`` (a CPU's ``mcpu``)
    for that timing stands, else the databases' own target's (:func:`eto.planning.time_priors.prior`)."""
    from eto.store.database import Database
    from eto.planning.time_model import fit_time_model
    from eto.planning.time_priors import prior, timing_on

    seen, results = set(), []
    for path in db_paths:
        for r in Database(path).results():
            key = (json.dumps(r.get("op"), sort_keys=True), r.get("method"), r.get("candidates"), r.get("seconds"))
            if r.get("records") and r.get("timing", "hot") == timing_on(kind, timing) and key not in seen:
                seen.add(key)
                results.append(r)
    targets = {r.get("target") for r in results}
    if len(targets) > 1:
        raise SystemExit(f"--fit: the databases hold results of {len(targets)} targets; give one target's")
    target = json.dumps({"kind": "llvm", "mcpu": defaults}) if defaults else next(iter(targets), None)
    model = fit_time_model(results, prior(target, kind, timing))
    return {"databases": db_paths, "kind": kind, "target": next(iter(targets), None), "defaults": defaults,
            "timing": timing, **model.to_json(),
            "results": {m: sum(r.get("method") == m for r in results) for m in ("backend", "reuse")}}


def plot(sources: dict[str, list[dict]], path: str) -> None:
    from eto.plots import new_figure

    fig = new_figure(8.0, 3.8)
    axes = fig.subplots(1, 2)
    for ax, what, unit in ((axes[0], "candidates", ""), (axes[1], "seconds", " (s)")):
        lo, hi = math.inf, 0.0
        for name, rows in sources.items():
            pts = [(r[f"estimated_{what}"], r[what]) for r in rows if r.get(what) and r.get(f"estimated_{what}")]
            if pts:
                ax.scatter(*zip(*pts), s=12, alpha=0.7, label=name)
                lo, hi = min(lo, *(min(p) for p in pts)), max(hi, *(max(p) for p in pts))
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"estimated {what}{unit}")
        ax.set_ylabel(f"actual {what}{unit}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.suptitle("E5: the plan's estimates against the reuse tuner's runs", fontsize=9)
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=("ci", "small", "paper"), default="small",
                    help="pool every E2/E3 results file of this scale (default: small)")
    ap.add_argument("--inputs", nargs="+", help="these results files instead")
    ap.add_argument("--fit", nargs="+", metavar="DB", help="also fit the time model on these databases' results")
    ap.add_argument("--kind", default="cpu", help="target kind of --fit's databases (default cpu)")
    ap.add_argument("--fit-defaults", metavar="MCPU", help="--fit keeps this CPU's prior where the databases "
                    "cannot tell a coefficient (default: their target's)")
    ap.add_argument("--timing", choices=("cold", "hot"), default="cold",
                    help="--fit pools the results of runs timed so (default cold)")
    ap.add_argument("--out", help="result JSON (default experiments/results/estimate_accuracy_<scale>.json)")
    args = ap.parse_args(argv)
    paths = args.inputs or sorted(glob.glob(os.path.join(HERE, "results", "reuse_pairs_*.json"))
                                  + glob.glob(os.path.join(HERE, "results", "set_bench_*.json")))
    sources: dict[str, list[dict]] = {}
    for p in paths:
        with open(p) as f:
            result = json.load(f)
        if args.inputs or result.get("scale") == args.scale:
            rows = rows_of(result)
            if rows:
                sources[os.path.basename(p).removesuffix(".json")] = rows
    if not sources:
        ap.error(f"no reuse rows with estimates in {len(paths)} results files" +
                 ("" if args.inputs else f" of scale {args.scale}"))
    pooled = [r for rows in sources.values() for r in rows]
    result = {"experiment": "E5 cost-estimate accuracy", "scale": None if args.inputs else args.scale,
              "inputs": list(sources),
              "summary": {"all": {w: accuracy(pooled, w) for w in ("candidates", "seconds")},
                          **{k: {w: accuracy(v, w) for w in ("candidates", "seconds")} for k, v in sources.items()}},
              "rows": sources}
    if args.fit:
        result["fit"] = fit(args.fit, args.kind, args.fit_defaults, args.timing)
    out = args.out or os.path.join(HERE, "results", f"estimate_accuracy_{args.scale}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    try:
        plot(sources, out.removesuffix(".json") + ".png")
    except ImportError as exc:  # matplotlib is an optional extra
        print(f"no plot: {exc}")
    print(json.dumps(result["summary"]["all"], indent=1))
    if args.fit:
        print("fitted:", json.dumps({k: result["fit"][k] for k in ("backend", "reuse", "count_scale", "results")}))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
