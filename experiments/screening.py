"""Does screening pay? Each reuse of a database derived twice: screened with finalists, and in full.

For every reuse result in ``--db`` (or the ``--limit`` first), the reuse tuner derives α from the
same source program twice, as ``eto tune`` does (ranked, the ranker trained on the database's other
backend programs of α's type, one ranker per arm kept across the pairs; α's own programs left out):
once screening every candidate (3 repeats of >= 10 ms) and re-timing its 3 best in full
(:mod:`tuner.measure.finalists`, the default), once timing every candidate in full (``finalists=0``, as
before). The order alternates per pair. Both results
are then re-measured side by side (interleaved rounds).

    python experiments/screening.py --db DB --out experiments/results/screening_resnet50.json

Costs: two reuses per pair (3-20 s each on 2 cores) and the re-measurement.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _experiment import ab_parser, ab_target, write_json  # noqa: E402

ARMS = {"screened": 3, "full": 0}  # finalists


def main(argv=None) -> int:
    ap = ab_parser(__doc__)
    ap.add_argument("--db", required=True, help="an eto database with reuse results (their sources' programs)")
    ap.add_argument("--limit", type=int, help="only the first k reuse results")
    args = ap.parse_args(argv)
    target = ab_target(args)

    from eto.store.database import Database
    from eto.operators import Operator
    from eto.runs.pipeline import RANKER_METHODS
    from tuner.measure.apply import scheduled_module
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.measure.measurer import Measurer
    from tuner.reuse.search import reuse_tune

    db = Database(args.db, readonly=True)
    pairs = [(Operator.from_dict(r["op"]), Operator.parse(r["source"])) for r in db.results()
             if r.get("method") == "reuse" and r.get("source") and r.get("records")][: args.limit]
    rows, rankers = [], {arm: LearnedRanker(target) for arm in ARMS}
    with Measurer.local() as measurer:
        if pairs:  # the worker pools start outside both arms' clocks
            measurer.measure([scheduled_module(db.best(pairs[0][1], target).tuning_record)], target)
        for i, (alpha, beta) in enumerate(pairs):
            source = db.best(beta, target)
            history = [p.tuning_record for p in db.programs(target=target)
                       if p.op.type == alpha.type and p.op != alpha and p.method in RANKER_METHODS]
            runs, mods = {}, {}
            for arm in (list(ARMS) if i % 2 == 0 else list(ARMS)[::-1]):
                res = reuse_tune(alpha.prim_func(), source.tuning_record, target, measurer,
                                 ranker=rankers[arm], history=history, finalists=ARMS[arm])
                runs[arm] = {"candidates": res.candidates, "remeasured": res.remeasured, "seconds": res.seconds,
                             "recorded_s": res.latency_s}
                mods[arm] = scheduled_module(res.record)
            t0 = time.perf_counter()
            lat = dict(zip(mods, measurer.remeasure(list(mods.values()), target, rounds=args.rounds)))
            row = {"alpha": alpha.name, "beta": beta.name, "gflop": alpha.flops / 1e9, "runs": runs, "latency_s": lat,
                   "remeasure_s": time.perf_counter() - t0,
                   "time_full_over_screened": runs["full"]["seconds"] / runs["screened"]["seconds"],
                   "throughput_screened_vs_full": lat["full"] / lat["screened"]}
            rows.append(row)
            print(f"{alpha.name} <- {beta.name}: " + ", ".join(
                f"{k} {runs[k]['candidates']} cands {runs[k]['seconds']:.1f} s {lat[k] * 1e6:.1f} us" for k in runs)
                + f"; time x{row['time_full_over_screened']:.2f}, throughput {row['throughput_screened_vs_full']:.2f}",
                flush=True)

    def summary(key: str) -> dict:
        vals = [r[key] for r in rows]
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}

    out = {"experiment": "screened reuse vs full", "db": args.db, "target": str(target), "rows": rows,
           "summary": {"time_full_over_screened": summary("time_full_over_screened"),
                       "throughput_screened_vs_full": summary("throughput_screened_vs_full"),
                       "seconds": {k: sum(r["runs"][k]["seconds"] for r in rows) for k in ARMS},
                       "candidates": {k: statistics.median(r["runs"][k]["candidates"] for r in rows) for k in ARMS}}}
    write_json(out, args.out)
    print(json.dumps(out["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
