"""Operator-set benchmark: eto's pipeline against MetaSchedule alone, same per-operator budget N.

Both tune the whole set from empty databases in one run on this machine: MetaSchedule with its
task scheduler and N trials per operator (``eto tune --method ansor``), eto with the reuse pair
selector, N trials per backend root and the reuse tuner for the rest (``eto tune``). The final
programs of both are then re-measured side by side (interleaved rounds) and compared by the
paper's quality metric, the weighted latency sum Σ frequency x latency.

Speed-ups (paper section 7): MetaSchedule "total" (its whole run), "best" (when every operator
had reached its final best) and "same" (when its weighted latency, from the latencies it recorded
while tuning, first reached eto's final weighted latency as eto recorded it), each over eto's
total time.

Usage: ``python experiments/set_bench.py --opset bert_base --trials 64 [--variant hot|evolve]``; results
go to ``experiments/results/set_bench_<opset>_N<trials>[_<variant>].json``. Finished tuning runs are
reused from ``--work`` when the command is repeated; a variant (an option beyond the paper) runs eto
again with that option and is compared with MetaSchedule's run and with plain eto's, if it exists.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time


def set_trajectory(db, opset, target) -> list[tuple[float, float]]:
    """(seconds, weighted latency) each time any operator's best-so-far improved (all tuned)."""
    from eto.target import target_key

    tk = target_key(target)
    events = []
    for r in db.results():
        if r.get("target") == tk and r.get("trajectory"):
            for sec, _trial, best in r["trajectory"]:
                events.append((float(sec), r["op_key"], float(best)))
    events.sort()
    freq = {e.op.key: e.frequency for e in opset}
    best: dict[str, float] = {}
    out = []
    for sec, key, lat in events:
        if key in freq and lat < best.get(key, math.inf):
            best[key] = lat
            if len(best) == len(freq):
                out.append((sec, sum(freq[k] * best[k] for k in freq)))
    return out


#: eto options beyond the paper, each measured against plain eto on the same set
VARIANTS = {"plain": {}, "hot": {"hot_share": 0.3, "hot_factor": 1.5}, "evolve": {"evolve_trials": 32}}


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: operator set, budget N, re-measurement rounds, eto variant and paths."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opset", default="bert_base")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4, help="interleaved re-measurement rounds")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="plain",
                    help="eto as in the paper (plain) or with an option beyond it")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def tuning_methods(variant: str, work: str) -> tuple[str, list[str]]:
    """eto's run name for ``variant`` and the runs to compare (plain eto too, if a variant and already tuned)."""
    eto_name = "eto" if variant == "plain" else f"eto_{variant}"
    methods = ["metaschedule", eto_name] + (["eto"] if variant != "plain" and os.path.exists(
        os.path.join(work, "eto.json")) else [])
    return eto_name, methods


def run_tunings(opset, target, work: str, methods: list[str], trials: int, variant: str) -> dict:
    """Tune the set once per method from an empty database, or load the run already finished in ``work``."""
    from eto.database import Database
    from eto.pipeline import tune
    from eto.tuning import tune_with_backend

    runs = {}
    for method in methods:
        meta = os.path.join(work, f"{method}.json")
        db = Database(os.path.join(work, method))
        if os.path.exists(meta):
            with open(meta) as f:
                runs[method] = json.load(f)
            continue
        t0 = time.perf_counter()
        if method == "metaschedule":
            report = tune_with_backend(opset, target, db, trials=trials)
        else:
            report = tune(opset, target, db, trials=trials, log=lambda m: print(m, flush=True),
                          **VARIANTS[variant])
        runs[method] = {"seconds": time.perf_counter() - t0, "report": report.to_json()}
        with open(meta, "w") as f:
            json.dump(runs[method], f)
        print(f"{method}: {runs[method]['seconds']:.1f} s, {report.to_json()['candidates']} candidates", flush=True)
    return runs


def remeasure_side_by_side(runs: dict, opset, target, work: str, rounds: int) -> tuple[dict, dict, dict]:
    """Each run's final programs re-measured in interleaved rounds, so their latencies compare fairly."""
    from eto.database import Database
    from tuner.apply import scheduled_module
    from tuner.measure import MeasureConfig, Measurer

    dbs = {m: Database(os.path.join(work, m)) for m in runs}
    progs = {m: [dbs[m].best(e.op, target) for e in opset] for m in runs}
    mods = {m: [scheduled_module(p.tuning_record) for p in progs[m]] for m in runs}
    samples = {m: [[] for _ in opset] for m in runs}
    with Measurer.local(MeasureConfig(number=3, repeat=5, min_repeat_ms=40)) as measurer:
        for _ in range(rounds):
            for m in runs:
                for i, res in enumerate(measurer.measure(mods[m], target)):
                    if res.ok:
                        samples[m][i] += list(res.run_secs)
    return dbs, progs, samples


def metaschedule_times(dbs: dict, opset, target, eto_name: str) -> tuple[float, float | None]:
    """MetaSchedule's "best" and "same" seconds, from the latencies both runs recorded while tuning."""
    ms_traj = set_trajectory(dbs["metaschedule"], opset, target)
    ms_final = ms_traj[-1][1]
    ms_best = next(sec for sec, w in ms_traj if w <= ms_final)
    eto_recorded = sum(e.frequency * dbs[eto_name].best(e.op, target).latency_s for e in opset)
    ms_same = next((sec for sec, w in ms_traj if w <= eto_recorded), None)
    return ms_best, ms_same


def assemble_result(args, opset, target, runs: dict, dbs: dict, progs: dict, samples: dict, eto_name: str) -> dict:
    """The result file's contents: weighted latencies, throughput ratios, speed-ups and per-operator rows."""
    from _env import environment

    weighted = {m: sum(e.frequency * statistics.median(s) for e, s in zip(opset, samples[m])) for m in runs}
    ms_best, ms_same = metaschedule_times(dbs, opset, target, eto_name)
    eto_s = runs[eto_name]["seconds"]
    return {
        "benchmark": "set_bench", "opset": args.opset, "trials_N": args.trials, "environment": environment(),
        "variant": args.variant, "variant_options": VARIANTS[args.variant],
        "weighted_latency_s": weighted, "throughput_eto_vs_metaschedule": weighted["metaschedule"] / weighted[eto_name],
        "throughput_variant_vs_plain_eto": (weighted["eto"] / weighted[eto_name]
                                            if args.variant != "plain" and "eto" in weighted else None),
        "seconds_variant_vs_plain_eto": (runs[eto_name]["seconds"] / runs["eto"]["seconds"]
                                         if args.variant != "plain" and "eto" in runs else None),
        "seconds": {"metaschedule_total": runs["metaschedule"]["seconds"], "metaschedule_best": ms_best,
                    "metaschedule_same": ms_same, "eto_total": eto_s},
        "speedup": {"total": runs["metaschedule"]["seconds"] / eto_s, "best": ms_best / eto_s,
                    "same": None if ms_same is None else ms_same / eto_s},
        "candidates": {m: runs[m]["report"]["candidates"] for m in runs},
        "eto_estimated_candidates": runs[eto_name]["report"].get("estimated_candidates"),
        "per_operator": [{"op": e.op.name, "frequency": e.frequency,
                          **{f"{m}_latency_s": statistics.median(samples[m][i]) for m in runs},
                          "eto_method": progs[eto_name][i].method, "eto_source": progs[eto_name][i].source}
                         for i, e in enumerate(opset)],
        "notes": "seconds of each tuning run include MetaSchedule's search and the reuse tuner's search; the "
                 "one-time ~25 s tensor_intrin import is outside both; 'same' uses latencies recorded while tuning",
    }


def write_result(args, result: dict) -> None:
    """Write the result file (``--out`` or the default name) and print its headline numbers."""
    suffix = "" if args.variant == "plain" else f"_{args.variant}"
    out = args.out or os.path.join(os.path.dirname(__file__), "results",
                                   f"set_bench_{args.opset}_N{args.trials}{suffix}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("throughput_eto_vs_metaschedule", "throughput_variant_vs_plain_eto",
                                             "seconds", "speedup", "candidates")},
                     indent=1))


def main(argv=None) -> int:
    """Tune the set with MetaSchedule and eto (or load the finished runs), re-measure, compare, write."""
    args = parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    # the helpers import these again; loading them all here first, as before, keeps imports out of timed runs
    import eto.database  # noqa: F401
    import eto.pipeline  # noqa: F401
    import eto.tuning  # noqa: F401
    import tuner.apply  # noqa: F401
    import tuner.measure  # noqa: F401
    import tvm.s_tir.tensor_intrin  # noqa: F401  (~25 s once per process: on neither method's clock)
    from eto.opsets import load_opset
    from eto.target import parse_target

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for ``_env``, imported by assemble_result

    opset = load_opset(args.opset)
    target = parse_target("cpu")
    work = args.work or os.path.join(os.path.dirname(__file__), "work", f"set_bench_{args.opset}_N{args.trials}")
    eto_name, methods = tuning_methods(args.variant, work)
    runs = run_tunings(opset, target, work, methods, args.trials, args.variant)
    dbs, progs, samples = remeasure_side_by_side(runs, opset, target, work, args.rounds)
    write_result(args, assemble_result(args, opset, target, runs, dbs, progs, samples, eto_name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
