"""Single-pair benchmark, estimator accuracy and CPU feature ranges of the reuse-based tuner.

One run, one machine, three results (paper sections 3, 5 and 6.1):

1. **Backend**: every operator of the scale's list is tuned by MetaSchedule alone with budget N
   (one task at a time, so each operator's time is its own). All measured programs are kept.
2. **Single pair**: for each reuse pair (α, β), α is tuned by the reuse tuner from β's best
   program. α's reuse program and α's backend program are then re-measured side by side
   (interleaved, ``--repeat`` repeats each): normalized throughput = latency(backend) /
   latency(reuse); search speed-up = backend time to its best / reuse time.
3. **Estimator**: the trial estimator's mean (random β programs, no measuring) against the
   candidates the reuse tuner actually measured, per pair.
4. **Feature ranges** (section 3, on CPU): for every conv2d reuse pair, the fraction of pairs
   for which α's near-best programs (>= 90% of the best throughput of α's backend run) include
   one whose B, T or M ratio to β's best lies in the paper's range ([r1, r2] for B, [1, r2] for T
   and M); the same for widened ranges, to show which CPU ranges the data supports.

Clocks (experiments/README.md, "How we measure"):

- Every invocation is a new run, with a run id (``run-<timestamp>``) and its own folder under
  ``--work`` (default ``experiments/work/reuse_pairs_<scale>``), so no time ratio ever uses a
  backend run cached by an earlier run. ``--resume [RUN_ID]`` (default: the latest run) continues
  an interrupted run with the same settings, reusing its finished backend and reuse stages. The
  result records the run id, its start time and every session (process) that worked on it; each
  stage records its own session.
- One-time costs (``tvm.s_tir.tensor_intrin``, xgboost, a 2-trial MetaSchedule run of a tiny
  operator, the measurer's worker pools) are paid before any stage starts.
- Design-space generation is on both clocks. The reuse tuner's seconds count from before
  ``ReuseTuner`` is built (α's design space and β's sketch, ``tuner.reuse.search.reuse_tune``).
  MetaSchedule's seconds are its batches' times, and the first batch's starts when the backend's
  batch clock is made, before ``ms.tune.tune_tasks``, whose task scheduler generates the design
  spaces (building a TuneContext does not: 8 ms, against 21 ms for a C2D's
  ``generate_design_space``; checked with this TVM). Each backend result also has ``wall_s``,
  the whole ``tune_backend`` call.

Summaries, per strategy, overall and per operator type: median candidates, throughput, speed-up
against MetaSchedule's time to its best (``median_speedup``) and its whole run, and the trial
estimator against the measured candidates (and estimated against actual seconds where the reuse
result or the estimator gives ``estimated_seconds``).

Usage: ``python -m experiments.reuse_pairs --scale ci|small|gpu|paper [--ranges paper|cpu] [--target cuda-tag]
[--strategies global per-b] [--resume [RUN_ID]]``; results go to
``experiments/results/reuse_pairs_<scale>[_cpu-ranges][_<gpu>].json``. On a GPU target the
feature ranges are the paper's B (thread blocks), T (threads) and M (shared memory) of the lowered
programs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time

from experiments._bench import (SESSION, add_search_option, backend_search, open_run, search_settings,
                                warm_measurer, warm_up)
from experiments._env import environment
from tuner.reuse.options import ReuseOptions
from tuner.reuse.ranked import DEFAULT_TOP_K
from tuner.reuse.space import DEFAULT_STRATEGY, default_ranges

# (type, params) lists per scale. Conv2d operators are chosen so that many ordered pairs satisfy
# the reuse conditions (domination), for the feature-range analysis.
C2D = [dict(N=1, CI=ci, H=h, W=h, CO=co, KH=3, KW=3, padding=1)
       for co, h, ci in [(32, 14, 32), (64, 14, 32), (64, 14, 64), (64, 28, 64), (128, 14, 64),
                         (128, 14, 128), (32, 28, 32)]]
C1D = [dict(N=1, CI=ci, L=l, CO=co, K=3, padding=1) for co, l, ci in [(64, 128, 64), (128, 128, 64), (128, 256, 128)]]
BMM = [dict(B=b, M=m, N=n, K=k) for b, m, n, k in [(4, 64, 64, 64), (12, 128, 128, 64), (12, 128, 64, 128)]]
DEP = [dict(N=1, C=c, H=h, W=h, KH=3, KW=3, padding=1) for c, h in [(64, 28), (128, 28), (128, 56)]]
SCALES = {
    # name: (operators, trials N, max reuse pairs per type)
    "ci": ([("C2D", C2D[0]), ("C2D", C2D[2])], 16, 1),
    "small": ([("C2D", p) for p in C2D] + [("C1D", p) for p in C1D] + [("BMM", p) for p in BMM]
              + [("DEP", p) for p in DEP], 64, 8),
    # a GPU session has minutes of device time: fewer operators, the same types
    # (one device session: MetaSchedule takes ~80 s per operator there at N=64, its search on the host)
    "gpu": ([("C2D", C2D[i]) for i in (0, 1, 2, 4, 5)] + [("BMM", p) for p in BMM[:2]], 64, 4),
    "paper": ([("C2D", p) for p in C2D] + [("C1D", p) for p in C1D] + [("BMM", p) for p in BMM]
              + [("DEP", p) for p in DEP], 1000, 100),
}
RANGE_WIDENINGS = (1.0, 2.0, 4.0)


def reuse_pairs(ops, per_type: int) -> list[tuple[int, int]]:
    """Ordered (α, β) index pairs satisfying the reuse conditions, at most ``per_type`` per type."""
    from selector import LoopNestOp
    from selector.reuse_pairs import is_reuse_pair

    nodes = [LoopNestOp(name=str(i), type=op.type, sketch=op.sketch_key(), space=tuple(op.space),
                        reduction=tuple(op.reduction)) for i, op in enumerate(ops)]
    pairs: dict[str, list[tuple[int, int]]] = {}
    for a, b in itertools.permutations(range(len(ops)), 2):
        if is_reuse_pair(nodes[a], nodes[b]):
            pairs.setdefault(ops[a].type, []).append((a, b))
    out = []
    for t, ps in pairs.items():
        # alternate directions (α smaller / larger than β) so both are represented
        up = [p for p in ps if math.prod(ops[p[0]].extents) > math.prod(ops[p[1]].extents)]
        down = [p for p in ps if p not in up]
        mixed = [x for pair in itertools.zip_longest(up, down) for x in pair if x is not None]
        out += mixed[:per_type]
    return out


# -- cached stages ------------------------------------------------------------------------------
def backend_stage(op, target, trials: int, measurer, work: str, search="evolutionary") -> dict:
    """Tune ``op`` with MetaSchedule alone (``search``); cache every measured program in a JSONDatabase."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tuner.measure.backend import BackendTask, tune_backend

    from tuner.reuse.options import ReuseOptions

    from tuner.measure.options import BackendOptions

    d = os.path.join(work, "backend", op.key)
    meta = os.path.join(d, "result.json")
    if os.path.exists(meta):
        with open(meta) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    res = tune_backend([BackendTask(op.name, op.prim_func())], target, BackendOptions(trials=trials, num_trials_per_iter=32, seed=0, search=search), measurer=measurer, top_k=100_000)[0]
    wall = time.perf_counter() - t0
    db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
    for rec in res.records:
        db.commit_workload(rec.workload.mod)
        db.commit_tuning_record(rec)
    out = {"op": op.name, "candidates": res.candidates, "failed": res.failed, "seconds": res.seconds,
           "wall_s": wall, "session": SESSION, "best_s": res.best_latency, "time_to_best_s": res.time_to_best(),
           "trials_to_best": res.trials_to_reach(res.best_latency),
           "trajectory": [[p.seconds, p.trial, p.best_s] for p in res.trajectory]}
    with open(meta, "w") as f:
        json.dump(out, f)
    return out


def records_of(op, work: str) -> list:
    """All programs the backend measured for ``op``, best first."""
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tuner.measure.trajectory import median_secs

    d = os.path.join(work, "backend", op.key)
    db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
    wl = db.commit_workload(IRModule({"main": op.prim_func()}))
    recs = [r for r in db.get_top_k(wl, 100_000) if median_secs(r.run_secs) < math.inf]
    return sorted(recs, key=lambda r: median_secs(r.run_secs))


STRATEGIES = ("per-b", "global", "topk")  # topk: Selective Tuning's baseline (tuner.reuse.topk), not a search


def _reuse_dir(work: str, strategy: str, ranges: str, top_k: int | None = None) -> str:
    if strategy == "topk":
        return os.path.join(work, "reuse", "topk")
    name = strategy if ranges == "paper" else f"{strategy}-{ranges}"
    return os.path.join(work, "reuse", name + (f"-top{top_k}" if top_k else ""))


def reuse_stage(alpha, beta, target, measurer, work: str, strategy: str, ranges: str,
                top_k: int | None = None) -> dict:
    """α tuned by the reuse tuner from β's best; with ``top_k`` its ranker learns from β's whole backend
    run first (what eto's database holds after β is tuned), on the reuse clock."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tuner.reuse.cost_model import LearnedRanker
    from tuner.reuse.search import reuse_tune

    d = os.path.join(_reuse_dir(work, strategy, ranges, top_k), f"{alpha.key}__from__{beta.key}")
    meta = os.path.join(d, "result.json")
    if os.path.exists(meta):
        with open(meta) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    beta_records = records_of(beta, work)
    if strategy == "topk":  # β's best 3 programs applied to α, the fastest that runs
        from tuner.reuse.topk import topk_tune

        res = topk_tune(alpha.prim_func(), beta_records, target, measurer)
    else:
        res = reuse_tune(alpha.prim_func(), beta_records[0], target, measurer, ReuseOptions(strategy=strategy, ranges=ranges, top_k=top_k), ranker=LearnedRanker(target) if top_k else None, history=beta_records if top_k else ())
    if res.record is not None:
        db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
        db.commit_workload(res.record.workload.mod)
        db.commit_tuning_record(res.record)
    out = {"alpha": alpha.name, "beta": beta.name, "strategy": strategy, "candidates": res.candidates, "invalid": res.invalid,
           "failed": res.failed, "seconds": res.seconds, "best_s": res.latency_s, "rounds": res.rounds,
           "estimated_seconds": getattr(res, "estimated_seconds", None), "session": SESSION,
           "trajectory": [[p.seconds, p.trial, p.best_s] for p in res.trajectory],
           "config": None if res.config is None else {"space": res.config.space, "reduction": res.config.reduction}}
    with open(meta, "w") as f:
        json.dump(out, f)
    return out


def reuse_record(alpha, beta, work: str, strategy: str, ranges: str, top_k: int | None = None):
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    d = os.path.join(_reuse_dir(work, strategy, ranges, top_k), f"{alpha.key}__from__{beta.key}")
    if not os.path.exists(os.path.join(d, "records.json")):
        return None
    db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
    recs = db.get_top_k(db.commit_workload(IRModule({"main": alpha.prim_func()})), 1)
    return recs[0] if recs else None


def remeasure(records: list, target, measurer, rounds: int) -> list[float]:
    """Median seconds of each record's program, measured ``rounds`` times interleaved."""
    from tuner.measure.apply import scheduled_module

    return measurer.remeasure([scheduled_module(r) for r in records], target, rounds=rounds)


# -- feature ranges -------------------------------------------------------------------------------
def range_evidence(ops, pairs, work: str, kind: str = "cpu") -> dict:
    """Section 3: is a near-best program of α inside the B/T/M ranges set by β's best?"""
    from tuner.measure.trajectory import median_secs
    from tuner.analysis.features import program_features

    feats = {}
    for i, op in enumerate(ops):
        recs = records_of(op, work)
        best = median_secs(recs[0].run_secs)
        rows = []
        for r in recs:
            try:
                cfg, nest = program_features(r, kind)
            except ValueError:
                continue
            rows.append((median_secs(r.run_secs), cfg.B, cfg.T, cfg.M(nest)))
        feats[i] = (best, rows)
    out = {}
    for widen in RANGE_WIDENINGS:
        hits = {"B": 0, "T": 0, "M": 0, "all": 0}
        per_pair = []
        for a, b in pairs:
            best_a, rows_a = feats[a]
            _, rows_b = feats[b]
            if not rows_a or not rows_b:
                continue
            _, Bb, Tb, Mb = rows_b[0]
            r1 = math.prod(ops[b].reduction) / math.prod(ops[a].reduction)
            r2 = math.prod(ops[a].extents) / math.prod(ops[b].extents)

            def inside(x, lo, hi):
                lo, hi = min(lo, hi) / widen, max(lo, hi) * widen
                return lo * (1 - 1e-9) <= x <= hi * (1 + 1e-9)

            good = [row for row in rows_a if row[0] <= best_a / 0.9]
            inB = [inside(row[1] / Bb, r1, r2) for row in good]
            inT = [inside(row[2] / Tb, 1, r2) for row in good]
            inM = [inside(row[3] / Mb, 1, r2) for row in good]
            flags = {"B": any(inB), "T": any(inT), "M": any(inM),
                     "all": any(x and y and z for x, y, z in zip(inB, inT, inM))}
            for k, v in flags.items():
                hits[k] += v
            per_pair.append({"alpha": ops[a].name, "beta": ops[b].name, "r1": r1, "r2": r2,
                             "near_best": len(good), **flags})
        n = len(per_pair)
        out[f"x{widen:g}"] = {"pairs": n, **{f"frac_{k}": (v / n if n else None) for k, v in hits.items()},
                              "per_pair": per_pair if widen == 1.0 else None}
    return out


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: scale, budget N, re-measurement rounds, B/T/M ranges, strategies, target, paths."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=SCALES, default="ci")
    ap.add_argument("--trials", type=int, default=None, help="backend budget N (default: the scale's)")
    ap.add_argument("--repeat", type=int, default=4, help="interleaved re-measurement rounds")
    ap.add_argument("--ranges", choices=["paper", "cpu"], default=None,
                    help="B/T/M windows of the reuse tuner: the paper's, or widened as the CPU evidence says "
                         "(default: the tuner's for the target kind, cpu on CPU)")
    ap.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                    help=f"ranked rounds: measure K best-ranked candidates at a time (default {DEFAULT_TOP_K}, "
                         f"the pipeline's; 0: every candidate, as in the paper)")
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=[DEFAULT_STRATEGY],
                    help=f"reuse tuner strategies to run, each pair once per strategy (default: the pipeline's, "
                         f"{DEFAULT_STRATEGY})")
    ap.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                    help="continue an interrupted run (default: the latest under --work) instead of starting one")
    ap.add_argument("--target", default="cpu", help="cpu (this machine) or a CUDA tag, e.g. nvidia/nvidia-h100")
    add_search_option(ap)
    ap.add_argument("--work", default=None, help="parent folder of the runs (each run has its own folder in it)")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def run_paths(args, kind: str, trials: int, target) -> tuple[str, dict, str]:
    """This run's folder and record (a new run, or ``--resume``'s), and the result file.

    Folders and files are named after the scale, the ranges and a GPU target.
    """
    gpu = "" if kind == "cpu" else "_" + args.target.split("/")[-1].replace("nvidia-", "")
    base = args.work or os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", f"reuse_pairs_{args.scale}{gpu}")
    settings = {"scale": args.scale, "trials": trials, "ranges": args.ranges, "top_k": args.top_k,
                "target": str(target), **search_settings(args)}
    work, run = open_run(base, args.resume, settings)
    suffix = ("" if args.ranges == "paper" else f"_{args.ranges}-ranges") + (f"_top{args.top_k}" if args.top_k else "") + gpu
    out_path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                        f"reuse_pairs_{args.scale}{suffix}.json")
    return work, run, out_path


def run_backend(ops, target, trials: int, measurer, work: str, search="evolutionary") -> dict:
    """Stage 1: every operator tuned by MetaSchedule alone (or loaded from the cache), with progress lines."""
    backend = {}
    for i, op in enumerate(ops):
        backend[i] = backend_stage(op, target, trials, measurer, work, search)
        print(f"[backend {i + 1}/{len(ops)}] {op.name}: {backend[i]['candidates']} candidates, "
              f"{backend[i]['seconds']:.1f} s, best {backend[i]['best_s'] * 1e6:.1f} us", flush=True)
    return backend


def run_reuse(ops, pairs, target, kind: str, measurer, work: str, strategies, ranges: str,
              top_k: int | None = None) -> list[dict]:
    """Stage 2 and 3: each pair tuned by the reuse tuner per strategy, with the trial estimator's numbers
    (candidates, and seconds by eto's default time model for the target kind)."""
    from eto.planning.time_priors import learn_time_model
    from tuner.reuse.estimate import estimate_trials, trials_for_config
    from tuner.analysis.features import program_features

    time_model = learn_time_model(None, target, kind)
    rows = []
    for k, (a, b) in enumerate(pairs):
        alpha, beta = ops[a], ops[b]
        beta_cfg, beta_nest = program_features(records_of(beta, work)[0], kind)
        _, alpha_nest = program_features(records_of(alpha, work)[0], kind)
        for strategy in strategies:
            try:
                r = reuse_stage(alpha, beta, target, measurer, work, strategy, ranges, top_k)
            except Exception as exc:  # report the pair, keep going
                print(f"[reuse {k + 1}/{len(pairs)} {strategy}] {alpha.name} <- {beta.name}: FAILED {exc}",
                      flush=True)
                rows.append({"alpha": alpha.name, "beta": beta.name, "strategy": strategy, "pair": [a, b],
                             "type": alpha.type, "error": str(exc), "candidates": 0, "seconds": 0.0,
                             "estimate": None})
                continue
            if strategy == "topk":  # no search to estimate
                rows.append({**r, "pair": [a, b], "type": alpha.type, "estimate": None, "top_k": None})
                print(f"[topk {k + 1}/{len(pairs)}] {alpha.name} <- {beta.name}: {r['candidates']} programs, "
                      f"{r['seconds']:.1f} s", flush=True)
                continue
            est = estimate_trials(kind, alpha_nest, beta_nest, ReuseOptions(strategy=strategy, ranges=ranges, top_k=top_k))
            r = {**r, "estimated_seconds": time_model.reuse_seconds(est.mean, alpha.flops / 1e9, alpha.type)}
            rows.append({**r, "pair": [a, b], "type": alpha.type, "estimate": est.mean,
                         "estimate_range": [est.low, est.high], "top_k": top_k,
                         "enumeration_for_actual_beta": trials_for_config(kind, alpha_nest, beta_nest, beta_cfg,
                                                                          strategy=strategy, ranges=ranges,
                                                                          top_k=top_k)})
            print(f"[reuse {k + 1}/{len(pairs)} {strategy}] {alpha.name} <- {beta.name}: {r['candidates']} "
                  f"candidates, {r['seconds']:.1f} s, estimate {est.mean:.1f}", flush=True)
    return rows


def compare_side_by_side(ops, pairs, rows: list[dict], backend: dict, target, measurer, work: str,
                         ranges: str, repeat: int) -> None:
    """Re-measure α's backend program and each strategy's reuse program interleaved; add the ratios to ``rows``."""
    for a, b in pairs:
        mine = [r for r in rows if r["pair"] == [a, b]]
        recs = [None if "error" in r else reuse_record(ops[a], ops[b], work, r["strategy"], ranges, r.get("top_k"))
                for r in mine]
        base = records_of(ops[a], work)[0]
        lats = remeasure([base] + [r for r in recs if r is not None], target, measurer, repeat)
        lat_backend, lat_reuse = lats[0], iter(lats[1:])
        bk = backend[a]
        for row, rec in zip(mine, recs):
            if "error" in row:
                continue
            lat = next(lat_reuse) if rec is not None else math.inf
            row.update(latency_backend_s=lat_backend, latency_reuse_s=lat,
                       throughput=lat_backend / lat if rec is not None else None,
                       backend_time_to_best_s=bk["time_to_best_s"], backend_trials_to_best=bk["trials_to_best"],
                       backend_seconds=bk["seconds"], backend_candidates=bk["candidates"],
                       speedup=(bk["time_to_best_s"] or bk["seconds"]) / row["seconds"],
                       speedup_vs_total=bk["seconds"] / row["seconds"])


def _median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(sel: list[dict]) -> dict:
    """Medians of throughput, speed-ups and candidates, and the estimator's accuracy, over the rows ``sel``.

    ``median_speedup`` is against MetaSchedule's time to its best, ``median_speedup_vs_total`` against
    its whole run; estimated seconds appear only where the reuse result or the estimator gives them.
    """
    ok = [r for r in sel if "error" not in r]
    ratio = [r["estimate"] / r["candidates"] for r in ok if r["candidates"] and r["estimate"]]
    timed = [r for r in ok if r.get("estimated_seconds") and r["seconds"]]
    return {"pairs": len(sel), "errors": len(sel) - len(ok),
            "median_throughput": _median(r.get("throughput") for r in ok),
            "median_speedup": _median(r.get("speedup") for r in ok),
            "median_speedup_vs_total": _median(r.get("speedup_vs_total") for r in ok),
            "median_candidates": _median(r["candidates"] for r in ok),
            "median_estimate": _median(r["estimate"] for r in ok),
            "median_seconds": _median(r["seconds"] for r in ok),
            "median_backend_time_to_best_s": _median(r.get("backend_time_to_best_s") for r in ok),
            "estimate_over_actual_mean": statistics.fmean(ratio) if ratio else None,
            "actual_over_estimate_mean": statistics.fmean(1 / x for x in ratio) if ratio else None,
            "estimate_within_0.67_1.5": (sum(0.67 <= x <= 1.5 for x in ratio) / len(ratio)) if ratio else None,
            "median_estimated_seconds": _median(r["estimated_seconds"] for r in timed),
            "actual_over_estimated_seconds_mean": (statistics.fmean(r["seconds"] / r["estimated_seconds"] for r in timed)
                                                   if timed else None)}


def assemble_result(args, target, kind: str, trials: int, t0: float, rows: list[dict], backend: dict,
                    ranges: dict, run: dict, warm_s: float) -> dict:
    """The result file's contents: run settings, per-strategy and per-type summaries, all rows and runs."""
    return {
        "benchmark": "reuse_pairs", "run_id": run["run_id"], "run_started": run["started"],
        "run_sessions": run["sessions"], "resumed": len(run["sessions"]) > 1, "warmup_s": warm_s,
        "scale": args.scale, "ranges": args.ranges, "trials_N": trials, "strategies": args.strategies,
        "target": str(target.kind.name) if kind == "cpu" else args.target,
        "mcpu": str(target.attrs.get("mcpu", "")), "environment": environment(),
        "backend": f"MetaSchedule {args.search} search + XGBoost, one task at a time, 32 candidates per batch",
        "search": args.search,
        "remeasure_rounds": args.repeat, "wall_s": time.perf_counter() - t0,
        "notes": "backend and reuse times come from this run only (run_id; each stage records its session); "
                 "one-time costs are outside both clocks; design-space generation is on both",
        "summary": {st: {"all": summarize([r for r in rows if r["strategy"] == st]),
                         **{t: summarize([r for r in rows if r["type"] == t and r["strategy"] == st])
                            for t in sorted({r["type"] for r in rows})}} for st in args.strategies},
        "pairs": rows, "backend_runs": list(backend.values()), "feature_ranges_c2d": ranges,
    }


def write_result(result: dict, ranges: dict, out_path: str) -> None:
    """Write the result file and print the summaries (and the feature-range fractions, if any)."""
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1, default=float)
    print(json.dumps(result["summary"], indent=1))
    print(f"run {result['run_id']} (started {result['run_started']}); written {out_path}")
    if ranges:
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "per_pair"} for k, v in ranges.items()}, indent=1))
    try:
        write_plot(result, out_path.removesuffix(".json") + ".png")
    except ImportError as exc:  # matplotlib is an optional extra
        print(f"no plot: {exc}")


def write_plot(result: dict, path: str) -> None:
    """E2's figure (paper figures 7 and 8): per operator type, the median throughput of each strategy
    against MetaSchedule's best, and the median speed-up over MetaSchedule's time to its best."""
    from eto.plots import new_figure, ratio_axis

    summary = result["summary"]
    types = sorted({t for s in summary.values() for t in s if t != "all"}) + ["all"]
    fig = new_figure(max(6.4, 0.9 * len(types) + 2), 5.2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    width = 0.8 / max(len(summary), 1)
    for i, (strategy, per_type) in enumerate(summary.items()):
        xs = [j + (i - (len(summary) - 1) / 2) * width for j in range(len(types))]
        top.bar(xs, [per_type.get(t, {}).get("median_throughput") or 0 for t in types], width, label=strategy)
        bottom.bar(xs, [per_type.get(t, {}).get("median_speedup") or 0 for t in types], width, label=strategy)
    top.axhline(1.0, color="black", linewidth=0.8)
    top.set_ylabel("throughput vs\nMetaSchedule (median)")
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.set_ylabel("speed-up vs MetaSchedule's\ntime to best (median)")
    ratio_axis(bottom)
    bottom.set_xticks(range(len(types)), types)
    top.legend(fontsize=8)
    top.set_title(f"E2 single reuse pairs, scale {result['scale']}, N = {result['trials_N']}", fontsize=9)
    fig.savefig(path, dpi=120)
    print(f"written {path}")


def main(argv=None) -> int:
    """Run the backend, reuse and re-measurement stages (resuming from the cache), then write the result."""
    args = parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    from eto import Operator
    from eto.target import parse_target, target_kind
    from tuner.measure.measurer import MeasureConfig, Measurer

    spec, trials, per_type = SCALES[args.scale]
    trials = args.trials or trials
    target = parse_target(args.target)
    kind = target_kind(target)
    args.ranges = args.ranges or default_ranges(kind)
    args.top_k = args.top_k or None
    search = backend_search(args)
    work, run, out_path = run_paths(args, kind, trials, target)
    print(f"run {run['run_id']} in {work}" + (" (resumed)" if len(run["sessions"]) > 1 else ""), flush=True)
    ops = [Operator.create(t, **p) for t, p in spec]
    pairs = reuse_pairs(ops, per_type)
    c2d_all = [p for p in reuse_pairs(ops, 10_000) if ops[p[0]].type == "C2D"]
    warm_s = warm_up(target, plan=False)  # one-time costs, before any stage's clock
    print(f"warm-up (outside every clock): {warm_s:.1f} s", flush=True)
    measurer = Measurer.local(MeasureConfig(number=3, repeat=5, min_repeat_ms=40))
    t0 = time.perf_counter()
    try:
        warm_measurer(measurer, target)
        backend = run_backend(ops, target, trials, measurer, work, search)
        rows = run_reuse(ops, pairs, target, kind, measurer, work, args.strategies, args.ranges, args.top_k)
        # side-by-side re-measurement of α's programs: backend, then each strategy's
        compare_side_by_side(ops, pairs, rows, backend, target, measurer, work, args.ranges, args.repeat)
        ranges = range_evidence(ops, c2d_all, work, kind) if len(c2d_all) else {}
    finally:
        measurer.close()
    result = assemble_result(args, target, kind, trials, t0, rows, backend, ranges, run, warm_s)
    write_result(result, ranges, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
