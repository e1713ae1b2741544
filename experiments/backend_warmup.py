"""Does a task tuned alone lose its second batch to an untrained cost model?

MetaSchedule's XGBoost model ranks candidates at random until it holds 100 measurements, across all
its tasks. A model's many tasks pass that in their first batches; eto tunes its few roots alone, so
a root's second batch of 64 was chosen at random. For each ``--op`` and seed this tunes the operator
alone with the backend twice, ``--trials`` each: with MetaSchedule's warm-up (100) and with eto's
(:func:`tuner.measure.backend.warmup_samples`, one batch). It records the best-so-far at every batch and
re-measures the two final programs side by side (interleaved rounds, fresh processes). Both arms of a
seed are seeded alike (:func:`tune_one`), yet their first batches still differed here, so the final
programs carry each first batch's luck; the clean measure is ``second_batch_gain``, the best after
the second batch over the best after the first.

    python experiments/backend_warmup.py --op "BMM(B=1,M=128,N=768,K=768)" \\
        --op "C2D(N=1,CI=96,H=28,W=28,CO=160,KH=3,KW=3,padding=1)" --seeds 0 1 --trials 128 \\
        --out experiments/results/backend_warmup_xeon.json

Costs: 2 x seeds x ops backend runs of ``--trials`` (about 0.5 s a trial on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ARMS = ("ms-default", "eto")


def best_at(trajectory, trials: int) -> float:
    """Best latency (s) reached within ``trials`` measured candidates (inf if none ran)."""
    return min((p.best_s for p in trajectory if p.trial <= trials), default=float("inf"))


def tune_one(op, target, trials: int, seed: int, warmup: int | None):
    """One backend run of ``op`` alone; ``warmup`` None: eto's default. MetaSchedule samples with the
    task's seed and the untrained model scores with numpy's global generator, seeded here."""
    import numpy as np
    from tvm.s_tir import meta_schedule as ms

    from tuner.measure.backend import BackendTask, tune_backend
    from tuner.measure.measurer import MeasureConfig, Measurer

    with Measurer.local(MeasureConfig()) as measurer:
        threads = measurer.config.num_threads or 2
        model = None if warmup is None else ms.CostModel.create("xgb", num_tuning_cores=threads,
                                                                 num_warmup_samples=warmup)
        np.random.seed(seed)
        return tune_backend([BackendTask(op.name, op.prim_func())], target, trials_per_task=trials,
                            measurer=measurer, seed=seed, cost_model=model)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", action="append", required=True, help="operator key, e.g. 'BMM(B=1,M=128,N=768,K=768)'")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved re-measurement rounds")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    from _bench import warm_up
    from eto.operators import Operator
    from eto.target import parse_target
    from tuner.measure.apply import scheduled_module
    from tuner.measure.measurer import MeasureConfig, Measurer

    target = parse_target("cpu")
    warm_up(target, plan=False)
    rows = []
    for text in args.op:
        op = Operator.parse(text)
        for seed in args.seeds:
            row = {"op": op.key, "seed": seed}
            finals = {}
            for arm in ARMS:
                res = tune_one(op, target, args.trials, seed, 100 if arm == "ms-default" else None)
                marks = sorted({min(args.trials, k) for k in range(64, args.trials + 64, 64)})
                row[arm] = {"seconds": res.seconds, "candidates": res.candidates,
                            "best_at_us": {str(k): best_at(res.trajectory, k) * 1e6 for k in marks}}
                finals[arm] = scheduled_module(res.records[0])
                print(f"{op.key} seed {seed} {arm}: " + ", ".join(
                    f"{k}: {v:.1f} us" for k, v in row[arm]["best_at_us"].items()), flush=True)
            samples = {arm: [] for arm in ARMS}
            for r in range(args.rounds):
                with Measurer.local(MeasureConfig()) as measurer:
                    order = ARMS if r % 2 == 0 else ARMS[::-1]
                    for arm, res in zip(order, measurer.measure([finals[a] for a in order], target)):
                        samples[arm] += list(res.run_secs or ())
            for arm in ARMS:
                row[arm]["remeasured_us"] = statistics.median(samples[arm]) * 1e6 if samples[arm] else None
            ms_us, eto_us = row["ms-default"]["remeasured_us"], row["eto"]["remeasured_us"]
            row["eto_vs_ms_default"] = ms_us / eto_us if ms_us and eto_us else None
            print(f"{op.key} seed {seed}: re-measured ms-default {ms_us:.1f} us, eto {eto_us:.1f} us", flush=True)
            rows.append(row)
    ratios = [r["eto_vs_ms_default"] for r in rows if r["eto_vs_ms_default"]]
    gain = {arm: [r[arm]["best_at_us"]["64"] / r[arm]["best_at_us"]["128"] for r in rows
                  if "128" in r[arm]["best_at_us"]] for arm in ARMS}
    summary = {"trials": args.trials, "runs": len(rows),
               "median_final_ratio": statistics.median(ratios) if ratios else None, "final_ratios": ratios,
               "first_batch_us": {arm: [r[arm]["best_at_us"]["64"] for r in rows] for arm in ARMS},
               "second_batch_gain": gain,
               "median_second_batch_gain": {arm: statistics.median(g) if g else None for arm, g in gain.items()}}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "backend_warmup", "target": str(target), "summary": summary, "rows": rows}, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
