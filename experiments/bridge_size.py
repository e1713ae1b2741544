"""Does a larger bridge give better reuses? The same operators reused from bridges of different size.

The plan picks the cheapest bridge that can seed a group of operators, and on ResNet-50 that is a
0.17 MFLOP 3x3 convolution with 3 input channels for 3x3 convolutions of 64-512 channels (a FLOP
ratio of 256-1,400); ``reuse_quality.py`` shows reuses across such ratios losing 17% at the median.
Here each ``--bridge`` is tuned fresh by the backend (``--trials``, ``--seed``), every ``--alpha``
is then tuned from a copy of that bridge's database alone (``eto.runs.pipeline.tune`` with no bridges of
its own, so it reuses the bridge, as the set's plan did, or falls back to the backend where the
plan says so), and the results are re-measured side by side with the ``--reference`` database's
programs of the same operators (a MetaSchedule run), each round in a fresh runner process
(``set_bench.remeasure``). It reports, per bridge, what tuning the bridge cost and, per operator, the
reuse's candidates and seconds and its throughput against the reference.

    python experiments/bridge_size.py --seed 0 --trials 100 \\
        --reference experiments/work/set_bench_resnet50_N100_reach/seed0/metaschedule \\
        --bridge 'ci3=C2D(N=1,CI=3,H=9,W=9,CO=64,KH=3,KW=3)' --bridge 'ci64=C2D(N=1,CI=64,H=9,W=9,CO=64,KH=3,KW=3)' \\
        --alpha 'C2D(N=1,CI=128,H=28,W=28,CO=128,KH=3,KW=3,padding=1)' --work experiments/work/bridge_size/seed0

A repeated command with the same ``--work`` reuses the tuning it finished (times included).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import warm_measurer, warm_up  # noqa: E402
from _env import environment  # noqa: E402


def _named(text: str) -> tuple[str, str]:
    name, eq, op = text.partition("=")
    if not eq or not name or "(" in name:
        raise argparse.ArgumentTypeError(f"want NAME=OPERATOR, got {text!r}")
    return name, op


def _tuned(db_dir: str, ops, target, trials: int, seed: int, measurer, stamp: str) -> dict:
    """Tune ``ops`` into ``db_dir`` with eto (timed); a finished step's stamp file gives it back."""
    from eto.store.database import Database
    from eto.operators.opsets import OperatorSet
    from eto.runs.pipeline import tune

    if os.path.exists(stamp):
        with open(stamp) as f:
            return json.load(f)
    t0 = time.perf_counter()
    tune(OperatorSet.from_layers("bridge_size", ops), target, Database(db_dir), trials=trials, bridges="none",
         seed=seed, measurer=measurer)
    seconds = time.perf_counter() - t0
    keys = {op.key for op in ops}
    rows = [r for r in Database(db_dir, readonly=True).results() if r.get("op_key") in keys]
    out = {"seconds": seconds, "results": [{k: r.get(k) for k in ("op_key", "method", "source", "candidates",
                                                                  "seconds")} for r in rows]}
    with open(stamp, "w") as f:
        json.dump(out, f)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bridge", type=_named, action="append", required=True, help="NAME=OPERATOR (repeatable)")
    ap.add_argument("--alpha", action="append", required=True, help="an operator to reuse (repeatable)")
    ap.add_argument("--reference", help="a database holding the operators' MetaSchedule programs")
    ap.add_argument("--trials", type=int, default=100, help="backend trials for each bridge")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved re-measurement rounds")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", help="results JSON (default: WORK/bridge_size.json)")
    args = ap.parse_args(argv)

    from eto.store.database import Database
    from eto.operators import Operator
    from eto.operators.opsets import OperatorSet
    from eto.target import parse_target, target_key
    from set_bench import remeasure
    from tuner.measure.measurer import MeasureConfig, Measurer

    bridges = [(name, Operator.parse(op)) for name, op in args.bridge]
    alphas = [Operator.parse(a) for a in args.alpha]
    target = parse_target("cpu")
    warmup_s = warm_up(target)
    os.makedirs(args.work, exist_ok=True)
    steps: dict[str, dict] = {}
    with Measurer.local(MeasureConfig()) as measurer:
        warm_measurer(measurer, target)
        for name, bridge in bridges:
            base = os.path.join(args.work, name)
            steps[name] = {"bridge": _tuned(base, [bridge], target, args.trials, args.seed, measurer,
                                            base + ".json")}
            for i, alpha in enumerate(alphas):
                d = os.path.join(args.work, f"{name}-{i}")
                if not os.path.exists(d + ".json"):
                    shutil.rmtree(d, ignore_errors=True)
                    shutil.copytree(base, d)
                steps[name][alpha.key] = _tuned(d, [alpha], target, args.trials, args.seed, measurer, d + ".json")
    opset = OperatorSet.from_layers("alphas", alphas)
    progs = {name: [Database(os.path.join(args.work, f"{name}-{i}"), readonly=True).best(a, target)
                    for i, a in enumerate(alphas)] for name, _ in bridges}
    if args.reference:
        ref_db = Database(args.reference, readonly=True)
        progs = {"reference": [ref_db.best(a, target) for a in alphas], **progs}
    lat = remeasure(progs, opset, target, args.rounds)
    rows = []
    for i, alpha in enumerate(alphas):
        for name, bridge in bridges:
            r = next((x for x in steps[name][alpha.key]["results"] if x["op_key"] == alpha.key), {})
            row = {"alpha": alpha.name, "bridge": name, "bridge_op": bridge.name,
                   "flop_ratio": alpha.flops / bridge.flops, "method": r.get("method"),
                   "candidates": r.get("candidates"), "seconds": r.get("seconds"), "latency_us": lat[name][i] * 1e6}
            if args.reference:
                row["throughput_vs_reference"] = lat["reference"][i] / lat[name][i]
            rows.append(row)
            print(f"{alpha.name:32s} <- {name:6s} x{row['flop_ratio']:7.1f} {row['method']}: "
                  f"{row['candidates']} candidates, {row['seconds'] or 0:.1f} s, {row['latency_us']:.1f} us"
                  + (f", {row['throughput_vs_reference']:.2f} of the reference" if args.reference else ""), flush=True)
    summary = {}
    for name, bridge in bridges:
        mine = [r for r in rows if r["bridge"] == name]
        b = next((x for x in steps[name]["bridge"]["results"] if x["op_key"] == bridge.key), {})
        summary[name] = {"bridge_op": bridge.name, "bridge_mflop": bridge.flops / 1e6,
                         "bridge_seconds": b.get("seconds"), "reuse_seconds": sum(r["seconds"] or 0 for r in mine),
                         "median_candidates": statistics.median(r["candidates"] or 0 for r in mine)}
        if args.reference:
            summary[name]["median_throughput_vs_reference"] = statistics.median(
                r["throughput_vs_reference"] for r in mine)
        print(f"{name}: {summary[name]}")
    out = args.out or os.path.join(args.work, "bridge_size.json")
    with open(out, "w") as f:
        json.dump({"benchmark": "bridge_size", "seed": args.seed, "trials": args.trials, "rounds": args.rounds,
                   "reference": args.reference, "target": target_key(target), "environment": environment(),
                   "warmup_s": warmup_s, "summary": summary, "rows": rows}, f, indent=1)
    print("written", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
