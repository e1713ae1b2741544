"""Where do reuses lose quality? Every reused operator of set-benchmark results, by how much larger
α is than its source β: in FLOPs, and in reduction iterations (what ``eto.options.MAX_REDUCTION_RATIO``
caps).

Reads ``experiments/set_bench.py`` result files (any number; every seed of each), takes each operator
eto tuned by reuse, and relates its re-measured throughput against MetaSchedule's (``q`` =
MetaSchedule's latency / eto's, the same run and seed) to the FLOP ratio α / β. A plan that derives
large operators from a tiny bridge saves a backend root but may cost quality; this says how much,
from runs already made (no tuning, no measurement: a few seconds).

    python -m experiments.tools.reuse_quality experiments/results/set_bench_bert_base_N200_leads.json \\
        experiments/results/set_bench_resnet50_N100_reach.json --out experiments/results/reuse_quality.json

Prints one line per reuse (sorted by the FLOP ratio) and, per bin of either ratio, the count, median
and minimum of ``q`` and the share of reuses at or above 0.95.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys


#: FLOP-ratio bins [lo, hi) (lower bounds); the last is open
BINS = (0.0, 4.0, 32.0, 256.0)
#: reduction-ratio bins (lo, hi] (lower bounds): the plan's cap (4) is the first bin's upper end
REDUCTION_BINS = (0.0, 4.0, 8.0)


def reuse_rows(result: dict, path: str = "") -> list[dict]:
    """One row per reused operator and seed of a ``set_bench`` result."""
    from eto.operators.base import Operator
    from eto.operators.opsets import load_opset

    by_name = {e.op.name: e.op for e in load_opset(result["opset"])}
    rows = []
    for seed in result["per_seed"]:
        for r in seed["per_operator"]:
            if r.get("eto_method") != "reuse" or not r.get("eto_source"):
                continue
            alpha, beta = by_name[r["op"]], Operator.parse(r["eto_source"])
            rows.append({"result": os.path.basename(path), "seed": seed["seed"], "op": r["op"], "source": beta.name,
                         "flop_ratio": alpha.flops / beta.flops,
                         "reduction_ratio": math.prod(alpha.reduction) / math.prod(beta.reduction),
                         "frequency": r["frequency"],
                         "q": r["metaschedule_latency_s"] / r["eto_latency_s"]})
    return rows


def by_bin(rows: list[dict], bins: tuple[float, ...] = BINS, key: str = "flop_ratio",
           right: bool = False) -> list[dict]:
    """Count, median and minimum of ``q`` per bin of ``key`` ([lo, hi), or (lo, hi] if ``right``), and
    the share at or above 0.95."""
    out = []
    for lo, hi in zip(bins, bins[1:] + (float("inf"),)):
        qs = [r["q"] for r in rows if (lo < r[key] <= hi if right else lo <= r[key] < hi)]
        if qs:
            out.append({key: [lo, hi], "n": len(qs), "median_q": statistics.median(qs), "min_q": min(qs),
                        "share_at_0.95": sum(q >= 0.95 for q in qs) / len(qs)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="set_bench result JSON files")
    ap.add_argument("--out", help="write the rows and bins here")
    args = ap.parse_args(argv)
    rows = []
    for path in args.results:
        with open(path) as f:
            rows += reuse_rows(json.load(f), path)
    if not rows:
        print("no reused operators in these results", file=sys.stderr)
        return 1
    for r in sorted(rows, key=lambda r: (r["flop_ratio"], r["op"])):
        print(f"{r['result']:42s} s{r['seed']} {r['op']:32s} <- {r['source']:28s} x{r['flop_ratio']:8.1f}  q {r['q']:.2f}")
    bins = by_bin(rows)
    reduction_bins = by_bin(rows, REDUCTION_BINS, "reduction_ratio", right=True)
    for b in bins + reduction_bins:
        flops = "flop_ratio" in b
        name, (lo, hi) = ("FLOP ratio", b["flop_ratio"]) if flops else ("reduction ratio", b["reduction_ratio"])
        span = f"[{lo:g}, {hi:g})" if flops else f"({lo:g}, {hi:g}]"
        print(f"{name} {span}: {b['n']} reuses, q median {b['median_q']:.2f}, min {b['min_q']:.2f}, "
              f"{b['share_at_0.95']:.0%} at >= 0.95")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"results": args.results, "bins": bins, "reduction_bins": reduction_bins, "rows": rows}, f,
                      indent=1)
        print("written", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
