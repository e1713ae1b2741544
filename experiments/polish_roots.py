"""Root polish (eto.runs.polish): how much a self-reuse improves MetaSchedule's program of a root.

Per operator and seed: MetaSchedule tunes the operator alone (N trials, eto's root settings), then
the reuse tuner searches from its best program (α = β); both best programs are re-measured side
by side (5 interleaved rounds). The gain is the backend's latency over the polished one. The
reuse tuner runs with its defaults (no ranker: every candidate of a round measured), not with the
pipeline's ranked few.

    python experiments/polish_roots.py --ops "BMM[1,128,768,768];C2D[1,64,112,112,3,7,7]" \
        --trials 100 --seeds 0,1,2 --out experiments/results/polish_roots.json

Operators are named by a prefix of their name in the built-in sets (bert_base, resnet50, mobilenetv2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", required=True, help="';'-separated operator name prefixes")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    from eto.store.database import Database
    from eto.operators.opsets import builtin_opset
    from eto.target import export_threads, parse_target
    from eto.runs.tuning import tune_with_backend
    from tuner.measure.apply import scheduled_module
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tuner.reuse.search import reuse_tune

    target = parse_target("cpu")
    export_threads()
    known = {e.op.name: e.op for s in ("bert_base", "resnet50", "mobilenetv2") for e in builtin_opset(s)}
    rows = []
    with Measurer.local(MeasureConfig()) as m:
        for prefix in args.ops.split(";"):
            op = next((o for name, o in known.items() if name.startswith(prefix)), None)
            if op is None:
                sys.exit(f"polish_roots: no built-in operator named {prefix}...")
            for seed in (int(s) for s in args.seeds.split(",")):
                db = Database(tempfile.mkdtemp(prefix="polish_"))
                t = time.perf_counter()
                tune_with_backend([op], target, db, trials=args.trials, measurer=m, seed=seed, short_builds=True)
                backend_s, best = time.perf_counter() - t, db.best(op, target, predicted=False)
                t = time.perf_counter()
                res = reuse_tune(op.prim_func(), best.tuning_record, target, m)
                polish_s = time.perf_counter() - t
                a, b = m.remeasure([scheduled_module(best.tuning_record), scheduled_module(res.record)], target,
                                   rounds=5)
                rows.append(dict(op=op.name, seed=seed, backend_s=backend_s, polish_s=polish_s,
                                 polish_candidates=res.candidates, backend_us=a * 1e6, polished_us=b * 1e6,
                                 gain=a / b))
                print(json.dumps(rows[-1]), flush=True)
    out = {"experiment": "polish_roots", "trials": args.trials, "target": str(target), "rows": rows,
           "summary": {o: {"median_gain": statistics.median(r["gain"] for r in rows if r["op"] == o),
                           "median_polish_s": statistics.median(r["polish_s"] for r in rows if r["op"] == o)}
                       for o in dict.fromkeys(r["op"] for r in rows)}}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["summary"], indent=1))
    return out


if __name__ == "__main__":
    main()
