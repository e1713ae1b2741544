"""Does the lead "set-safe" (tuner/cachesets.py) pay? Each reuse pair tuned with it and without it.

For each ``--pair ALPHA BETA`` (β's programs from ``--db``, e.g. a MetaSchedule run), the reuse tuner
derives α twice, as ``eto tune`` does (ranked, the ranker trained on β's records): once with the lead
and once with it switched off. Both results and, where ``--reference`` holds α, its MetaSchedule
program are then re-measured side by side (interleaved rounds). Pairs whose rows do not collide in
L1 have no lead: both runs are the same search, so they show the noise of a reuse's result.

    python experiments/set_safe.py --db experiments/work/set_bench_resnet50_N100_bshape/seed0_paperbshape/metaschedule \\
        --pair 'C2D(N=1,CI=1024,H=14,W=14,CO=256,KH=1,KW=1)' 'C2D(N=1,CI=512,H=28,W=28,CO=128,KH=1,KW=1)' \\
        --out experiments/results/set_safe.json

Costs: two reuses per pair (10-40 s each on 2 cores) and the re-measurement.
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


def tune_pair(alpha, beta_records, target, measurer, *, lead: bool) -> dict:
    """One ranked reuse of α from β's best, with or without the lead."""
    import tuner.reuse as reuse
    from tuner.cachesets import set_safe_tiles
    from tuner.cost_model import LearnedRanker

    reuse.set_safe_tiles = set_safe_tiles if lead else (lambda space: None)
    try:
        res = reuse.reuse_tune(alpha.prim_func(), beta_records[0], target, measurer, ranker=LearnedRanker(target),
                               history=beta_records)
    finally:
        reuse.set_safe_tiles = set_safe_tiles
    return {"res": res, "candidates": res.candidates, "seconds": res.seconds, "recorded_s": res.latency_s,
            "rounds": res.rounds, "config": None if res.config is None else [res.config.space, res.config.reduction]}


def main(argv=None) -> int:
    ap = ab_parser(__doc__)
    ap.add_argument("--db", required=True, help="database holding β's programs (all of them rank)")
    ap.add_argument("--reference", help="database holding α's programs to compare with (e.g. MetaSchedule's)")
    ap.add_argument("--pair", nargs=2, action="append", required=True, metavar=("ALPHA", "BETA"))
    args = ap.parse_args(argv)
    target = ab_target(args)

    from eto.database import Database
    from eto.operators import Operator
    from tuner.apply import scheduled_module
    from tuner.cachesets import set_safe_tiles
    from tuner.host import cpu_cache
    from tuner.measure import Measurer
    from tuner.reuse import ReuseTuner

    db = Database(args.db, readonly=True)
    ref_db = Database(args.reference, readonly=True) if args.reference else None
    rows = []
    with Measurer.local() as measurer:
        for a, b in args.pair:
            alpha, beta = Operator.parse(a), Operator.parse(b)
            progs = sorted(db.programs(target=target, op=beta), key=lambda p: p.latency_s)
            beta_records = [p.tuning_record for p in progs]  # best first; all of them train the ranker
            if not beta_records:
                raise SystemExit(f"{beta.name}: no program in {args.db}")
            lead = set_safe_tiles(ReuseTuner(alpha.prim_func(), beta_records[0], target).space)
            row = {"alpha": alpha.name, "beta": beta.name,
                   "lead": None if lead is None else [lead.space, lead.reduction]}
            t0 = time.perf_counter()
            runs = {"with_lead": tune_pair(alpha, beta_records, target, measurer, lead=True),
                    "without": tune_pair(alpha, beta_records, target, measurer, lead=False)}
            mods = {k: scheduled_module(r.pop("res").record) for k, r in runs.items()}
            ref = ref_db.best(alpha, target) if ref_db is not None else None
            if ref is not None:
                mods["reference"] = scheduled_module(ref.tuning_record)
            lat = dict(zip(mods, measurer.remeasure(list(mods.values()), target, rounds=args.rounds)))
            row.update(runs, latency_s=lat, wall_s=time.perf_counter() - t0,
                       with_over_without=lat["without"] / lat["with_lead"])
            if "reference" in lat:
                row["throughput_vs_reference"] = {k: lat["reference"] / lat[k] for k in runs}
            rows.append(row)
            print(f"{alpha.name} <- {beta.name}: lead {'-' if lead is None else lead.space}; "
                  + ", ".join(f"{k} {runs[k]['candidates']} cands {runs[k]['seconds']:.1f} s {lat[k] * 1e6:.1f} us"
                              for k in runs)
                  + (f", reference {lat['reference'] * 1e6:.1f} us" if "reference" in lat else ""), flush=True)
    out = {"experiment": "set-safe lead", "l1": vars(cpu_cache(1)) if cpu_cache(1) else None, "db": args.db,
           "reference": args.reference, "rows": rows,
           "median_with_over_without": statistics.median(r["with_over_without"] for r in rows if r["lead"]) if
           any(r["lead"] for r in rows) else None}
    write_json(out, args.out)
    print(json.dumps({k: out[k] for k in ("l1", "median_with_over_without")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
