"""Which candidate should an instant program be? The kept tiles against round T's alternatives.

For each new size of a built-in set (``--vary``), each operator the database does not hold is
derived from its nearest stored program (:func:`eto.shapes.instant.nearest_source`) and these candidates
are built and timed side by side in one process (wall-clock median of 5 calls, as
:func:`eto.shapes.instant.instant` times its program):

* ``kept``: β's tile factors kept, only the outer factors following the new extents
  (:meth:`tuner.reuse.space.ReuseSpace.kept_tiles`, what :func:`tuner.reuse.predict.predict` now returns);
* ``ranker``: round T's best-ranked candidate by the learned ranker trained on the database;
* ``nearest``: round T's candidate closest to β's per-block work and threads per block;
* ``best`` / ``median`` of a seeded sample of round T (``--sample`` candidates, plus the two above).

    python experiments/instant_choice.py --db DB --opset bert_base --vary seq=64,200,384
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench import SESSION  # noqa: E402
from _env import environment  # noqa: E402


def choices(op, src, db, target, ranker, sample: int, seed: int) -> dict | None:
    """The candidates' latencies for one operator (None: its sketch has no multi-level tiling)."""
    from tuner.measure.apply import build
    from tuner.reuse.search import ReuseTuner, built_candidate

    from eto.shapes.instant import _time

    tuner = ReuseTuner(op.prim_func(), src.tuning_record, target)
    if not tuner.has_mlt:
        return None
    built = [c for c in (tuner._cand(cfg) for cfg in tuner.reuse.space.t_round()) if built_candidate(tuner, c)]
    beta = tuner.beta_cfg
    near = min(range(len(built)), key=lambda i: abs(math.log(math.prod(built[i].cfg.bshape) / math.prod(beta.bshape)))
               + abs(math.log(built[i].cfg.threads_per_block / beta.threads_per_block)))
    ranked = ranker.rank(tuner.alpha_mod, [c.sch for c in built])[0] if ranker else None
    pick = set(random.Random(seed).sample(range(len(built)), min(sample, len(built)))) | {near}
    pick |= {ranked} if ranked is not None else set()
    inputs = op.random_inputs(0)
    lat = {i: _time(build(built[i].sch.mod, target), inputs, op) for i in sorted(pick)}
    kept = tuner._cand(tuner.reuse.space.kept_tiles())
    return {"op": op.name, "source": src.op.name, "source_latency_s": src.latency_s, "round_t": len(built),
            "kept": _time(build(kept.sch.mod, target), inputs, op) if built_candidate(tuner, kept) else None,
            "ranker": lat[ranked] if ranked is not None else None, "nearest": lat[near],
            "best": min(lat.values()), "median": statistics.median(lat.values()), "timed": len(lat) + 1}


def _ranker(database, target, op_type: str):
    """The learned ranker trained on every stored program of ``op_type`` (None if too few to trust)."""
    from tuner.reuse.cost_model import LearnedRanker

    ranker = LearnedRanker(target)
    ranker.observe_records([p.tuning_record for p in database.programs(target=target)
                            if p.op.type == op_type and p.method != "instant"])
    return ranker if ranker.trained else None


def run(args: argparse.Namespace) -> dict:
    from eto.store.database import Database
    from eto.shapes.instant import nearest_source
    from eto.operators.opsets import parse_vary, vary
    from eto.target import parse_target

    target = parse_target("cpu")
    db = Database(args.db, readonly=True)
    dim, values = parse_vary(args.vary)
    rows, rankers = [], {}
    for value, opset in vary(args.opset, dim, values):
        for e in list(opset)[:args.limit]:
            src = nearest_source(e.op, db, target)
            if src is None or db.best(e.op, target) is not None:
                continue
            if e.op.type not in rankers:
                rankers[e.op.type] = _ranker(db, target, e.op.type)
            row = choices(e.op, src, db, target, rankers[e.op.type], args.sample, args.seed)
            if row:
                row["value"] = value
                print(json.dumps(row), flush=True)
                rows.append(row)

    def ratio(key: str) -> float | None:  # median over operators of best-of-sample / choice (1 = as good)
        vals = [r["best"] / r[key] for r in rows if r.get(key)]
        return statistics.median(vals) if vals else None

    return {"benchmark": "instant_choice", "db": args.db, "opset": args.opset, "vary": args.vary,
            "sample": args.sample, "seed": args.seed, "environment": environment(), "session": SESSION,
            "median_best_over_choice": {k: ratio(k) for k in ("kept", "ranker", "nearest", "median")},
            "worst_best_over_choice": {k: min((r["best"] / r[k] for r in rows if r.get(k)), default=None)
                                       for k in ("kept", "ranker", "nearest")},
            "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, help="database of the known sizes (read only)")
    ap.add_argument("--opset", default="bert_base")
    ap.add_argument("--vary", default="seq=64,200,384")
    ap.add_argument("--limit", type=int, default=None, help="the first LIMIT operators of each size")
    ap.add_argument("--sample", type=int, default=16, help="round T candidates timed besides the choices")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="experiments/results/instant_choice.json")
    args = ap.parse_args(argv)
    result = run(args)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("median_best_over_choice", "worst_best_over_choice")}))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
