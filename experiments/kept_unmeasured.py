"""Which reuses never measured β's own tiles? A reading of eto databases, nothing tuned or timed.

For every reuse an eto database recorded (α and the source β it was derived from), β's best
program's tile factors kept on α's loops (:meth:`tuner.reuse.space.ReuseSpace.kept_tiles`) are compared
with the tile configurations of all of α's programs the search measured. Before commit 56512fa the
kept tiles led round T only where round T did not hold them; where it did, they were measured only
if round T's ranker put them in a measured batch. Prints, per database, the reuses whose round T
holds the kept tiles and whether they were measured.

    python experiments/kept_unmeasured.py experiments/work/set_bench_resnet50_N200/seed0/eto [DB ...]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _experiment import ab_target, write_json  # noqa: E402


def check(db_dir: str, target) -> dict:
    """Counts for one database: reuses, those whose round T holds the kept tiles, those never measured."""
    from eto.store.database import Database
    from eto.operators import Operator
    from tuner.reuse.search import ReuseTuner, config_of

    db = Database(db_dir, readonly=True)
    rows = []
    for p in db.best_programs(target, predicted=False):
        if p.method != "reuse" or not p.source:
            continue
        beta = Operator.parse(p.source)
        sources = sorted(db.programs(target=target, op=beta), key=lambda q: q.latency_s)
        if not sources:
            continue
        tuner = ReuseTuner(p.op.prim_func(), sources[0].tuning_record, target)
        if not tuner.has_mlt:
            continue
        in_t = tuner.reuse.space.kept_lead() is not None and tuner.reuse.space.kept_in_t_round()
        measured = [config_of(q.tuning_record, tuner) for q in db.programs(target=target, op=p.op)]
        rows.append({"alpha": p.op.name, "beta": beta.name, "kept_in_t_round": in_t,
                     "kept_measured": tuner.reuse.space.kept_tiles() in measured})
    held = [r for r in rows if r["kept_in_t_round"]]
    return {"db": db_dir, "reuses": len(rows), "kept_in_t_round": len(held),
            "kept_never_measured": sum(not r["kept_measured"] for r in held), "rows": rows}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", nargs="+")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    target = ab_target(args)
    results = []
    for db_dir in args.db:
        res = check(db_dir, target)
        results.append(res)
        for r in res["rows"]:
            if r["kept_in_t_round"]:
                print(f"  {r['alpha']:40s} <- {r['beta']:40s} kept tiles measured: {r['kept_measured']}")
        print(f"{db_dir}: {res['reuses']} reuses, round T held the kept tiles in {res['kept_in_t_round']}, "
              f"never measured in {res['kept_never_measured']}", flush=True)
    write_json({"experiment": "kept tiles never measured", "databases": results}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
