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

Usage: ``python experiments/reuse_pairs.py --scale ci|small|gpu|paper [--ranges paper|cpu] [--target cuda-tag]``;
results go to ``experiments/results/reuse_pairs_<scale>[_cpu-ranges][_<gpu>].json``. On a GPU target the
feature ranges are the paper's B (thread blocks), T (threads) and M (shared memory) of the lowered
programs. Interrupted runs resume: finished backend runs
and reuse runs are cached under ``--work`` (default ``experiments/work/reuse_pairs_<scale>``).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _env import environment  # noqa: E402

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
    from selector.reuse import is_reuse_pair

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
def backend_stage(op, target, trials: int, measurer, work: str) -> dict:
    """Tune ``op`` with MetaSchedule alone; cache every measured program in a JSONDatabase."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tuner.backend import BackendTask, tune_backend

    d = os.path.join(work, "backend", op.key)
    meta = os.path.join(d, "result.json")
    if os.path.exists(meta):
        with open(meta) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    res = tune_backend([BackendTask(op.name, op.prim_func())], target, trials_per_task=trials,
                       measurer=measurer, num_trials_per_iter=32, top_k=100_000, seed=0)[0]
    db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
    for rec in res.records:
        db.commit_workload(rec.workload.mod)
        db.commit_tuning_record(rec)
    out = {"op": op.name, "candidates": res.candidates, "failed": res.failed, "seconds": res.seconds,
           "best_s": res.best_latency, "time_to_best_s": res.time_to_best(),
           "trials_to_best": res.trials_to_reach(res.best_latency),
           "trajectory": [[p.seconds, p.trial, p.best_s] for p in res.trajectory]}
    with open(meta, "w") as f:
        json.dump(out, f)
    return out


def records_of(op, work: str) -> list:
    """All programs the backend measured for ``op``, best first."""
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tuner.trajectory import median_secs

    d = os.path.join(work, "backend", op.key)
    db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
    wl = db.commit_workload(IRModule({"main": op.prim_func()}))
    recs = [r for r in db.get_top_k(wl, 100_000) if median_secs(r.run_secs) < math.inf]
    return sorted(recs, key=lambda r: median_secs(r.run_secs))


STRATEGIES = ("per-b", "global")


def _reuse_dir(work: str, strategy: str, ranges: str) -> str:
    return os.path.join(work, "reuse", strategy if ranges == "paper" else f"{strategy}-{ranges}")


def reuse_stage(alpha, beta, target, measurer, work: str, strategy: str, ranges: str) -> dict:
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tuner.reuse import reuse_tune

    d = os.path.join(_reuse_dir(work, strategy, ranges), f"{alpha.key}__from__{beta.key}")
    meta = os.path.join(d, "result.json")
    if os.path.exists(meta):
        with open(meta) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    beta_best = records_of(beta, work)[0]
    res = reuse_tune(alpha.prim_func(), beta_best, target, measurer, strategy=strategy, ranges=ranges)
    if res.record is not None:
        db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
        db.commit_workload(res.record.workload.mod)
        db.commit_tuning_record(res.record)
    out = {"alpha": alpha.name, "beta": beta.name, "strategy": strategy, "candidates": res.candidates, "invalid": res.invalid,
           "failed": res.failed, "seconds": res.seconds, "best_s": res.latency_s, "rounds": res.rounds,
           "trajectory": [[p.seconds, p.trial, p.best_s] for p in res.trajectory],
           "config": None if res.config is None else {"space": res.config.space, "reduction": res.config.reduction}}
    with open(meta, "w") as f:
        json.dump(out, f)
    return out


def reuse_record(alpha, beta, work: str, strategy: str, ranges: str):
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    d = os.path.join(_reuse_dir(work, strategy, ranges), f"{alpha.key}__from__{beta.key}")
    if not os.path.exists(os.path.join(d, "records.json")):
        return None
    db = JSONDatabase(os.path.join(d, "workloads.json"), os.path.join(d, "records.json"))
    recs = db.get_top_k(db.commit_workload(IRModule({"main": alpha.prim_func()})), 1)
    return recs[0] if recs else None


def remeasure(records: list, target, measurer, rounds: int) -> list[float]:
    """Median seconds of each record's program, measured ``rounds`` times interleaved."""
    from tuner.apply import scheduled_module

    mods = [scheduled_module(r) for r in records]
    samples: list[list[float]] = [[] for _ in mods]
    for _ in range(rounds):
        for i, res in enumerate(measurer.measure(mods, target)):
            if res.ok:
                samples[i] += list(res.run_secs)
    return [statistics.median(s) if s else math.inf for s in samples]


# -- feature ranges -------------------------------------------------------------------------------
def range_evidence(ops, pairs, work: str, kind: str = "cpu") -> dict:
    """Section 3: is a near-best program of α inside the B/T/M ranges set by β's best?"""
    from tuner.trajectory import median_secs
    from tuner.features import program_features

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
    ap.add_argument("--ranges", choices=["paper", "cpu"], default="paper",
                    help="B/T/M windows of the reuse tuner: the paper's, or widened as the CPU evidence says")
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES),
                    help="reuse tuner strategies to run (each pair is tuned once per strategy)")
    ap.add_argument("--target", default="cpu", help="cpu (this machine) or a CUDA tag, e.g. nvidia/nvidia-h100")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def run_paths(args, kind: str) -> tuple[str, str]:
    """The cache folder and the result file, named after the scale, the ranges and a GPU target."""
    gpu = "" if kind == "cpu" else "_" + args.target.split("/")[-1].replace("nvidia-", "")
    work = args.work or os.path.join(os.path.dirname(__file__), "work", f"reuse_pairs_{args.scale}{gpu}")
    suffix = ("" if args.ranges == "paper" else f"_{args.ranges}-ranges") + gpu
    out_path = args.out or os.path.join(os.path.dirname(__file__), "results", f"reuse_pairs_{args.scale}{suffix}.json")
    return work, out_path


def run_backend(ops, target, trials: int, measurer, work: str) -> dict:
    """Stage 1: every operator tuned by MetaSchedule alone (or loaded from the cache), with progress lines."""
    backend = {}
    for i, op in enumerate(ops):
        backend[i] = backend_stage(op, target, trials, measurer, work)
        print(f"[backend {i + 1}/{len(ops)}] {op.name}: {backend[i]['candidates']} candidates, "
              f"{backend[i]['seconds']:.1f} s, best {backend[i]['best_s'] * 1e6:.1f} us", flush=True)
    return backend


def run_reuse(ops, pairs, target, kind: str, measurer, work: str, strategies, ranges: str) -> list[dict]:
    """Stage 2 and 3: each pair tuned by the reuse tuner per strategy, with the trial estimator's numbers."""
    from tuner.estimate import estimate_trials, trials_for_config
    from tuner.features import program_features

    rows = []
    for k, (a, b) in enumerate(pairs):
        alpha, beta = ops[a], ops[b]
        beta_cfg, beta_nest = program_features(records_of(beta, work)[0], kind)
        _, alpha_nest = program_features(records_of(alpha, work)[0], kind)
        for strategy in strategies:
            try:
                r = reuse_stage(alpha, beta, target, measurer, work, strategy, ranges)
            except Exception as exc:  # report the pair, keep going
                print(f"[reuse {k + 1}/{len(pairs)} {strategy}] {alpha.name} <- {beta.name}: FAILED {exc}",
                      flush=True)
                rows.append({"alpha": alpha.name, "beta": beta.name, "strategy": strategy, "pair": [a, b],
                             "type": alpha.type, "error": str(exc), "candidates": 0, "seconds": 0.0,
                             "estimate": None})
                continue
            est = estimate_trials(kind, alpha_nest, beta_nest, strategy=strategy, ranges=ranges)
            rows.append({**r, "pair": [a, b], "type": alpha.type, "estimate": est.mean,
                         "estimate_range": [est.low, est.high],
                         "enumeration_for_actual_beta": trials_for_config(kind, alpha_nest, beta_nest, beta_cfg,
                                                                          strategy=strategy, ranges=ranges)})
            print(f"[reuse {k + 1}/{len(pairs)} {strategy}] {alpha.name} <- {beta.name}: {r['candidates']} "
                  f"candidates, {r['seconds']:.1f} s, estimate {est.mean:.1f}", flush=True)
    return rows


def compare_side_by_side(ops, pairs, rows: list[dict], backend: dict, target, measurer, work: str,
                         ranges: str, repeat: int) -> None:
    """Re-measure α's backend program and each strategy's reuse program interleaved; add the ratios to ``rows``."""
    for a, b in pairs:
        mine = [r for r in rows if r["pair"] == [a, b]]
        recs = [None if "error" in r else reuse_record(ops[a], ops[b], work, r["strategy"], ranges) for r in mine]
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
                       speedup=(bk["time_to_best_s"] or bk["seconds"]) / row["seconds"])


def summarize(sel: list[dict]) -> dict:
    """Medians of throughput, speed-up and candidates, and the estimator's accuracy, over the rows ``sel``."""
    thr = [r["throughput"] for r in sel if r.get("throughput")]
    spd = [r["speedup"] for r in sel if r.get("speedup")]
    ratio = [r["estimate"] / r["candidates"] for r in sel if r["candidates"] and r["estimate"]]
    return {"pairs": len(sel), "errors": sum("error" in r for r in sel), "median_throughput": statistics.median(thr) if thr else None,
            "median_speedup": statistics.median(spd) if spd else None,
            "median_candidates": statistics.median([r["candidates"] for r in sel]) if sel else None,
            "estimate_over_actual_mean": statistics.fmean(ratio) if ratio else None,
            "estimate_within_0.67_1.5": (sum(0.67 <= x <= 1.5 for x in ratio) / len(ratio)) if ratio else None}


def assemble_result(args, target, kind: str, trials: int, t0: float, rows: list[dict], backend: dict,
                    ranges: dict) -> dict:
    """The result file's contents: run settings, per-strategy and per-type summaries, all rows and runs."""
    return {
        "benchmark": "reuse_pairs", "scale": args.scale, "ranges": args.ranges, "trials_N": trials,
        "target": str(target.kind.name) if kind == "cpu" else args.target,
        "mcpu": str(target.attrs.get("mcpu", "")), "environment": environment(),
        "backend": "MetaSchedule evolutionary search + XGBoost, one task at a time, 32 candidates per batch",
        "remeasure_rounds": args.repeat, "wall_s": time.perf_counter() - t0,
        "summary": {st: {"all": summarize([r for r in rows if r["strategy"] == st]),
                         **{t: summarize([r for r in rows if r["type"] == t and r["strategy"] == st])
                            for t in sorted({r["type"] for r in rows})}} for st in args.strategies},
        "pairs": rows, "backend_runs": list(backend.values()), "feature_ranges_c2d": ranges,
    }


def write_result(result: dict, ranges: dict, out_path: str) -> None:
    """Write the result file and print the summaries (and the feature-range fractions, if any)."""
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1, default=float)
    print(json.dumps(result["summary"], indent=1))
    if ranges:
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "per_pair"} for k, v in ranges.items()}, indent=1))


def main(argv=None) -> int:
    """Run the backend, reuse and re-measurement stages (resuming from the cache), then write the result."""
    args = parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    from eto import Operator
    from eto.target import parse_target, target_kind
    import tuner.features  # noqa: F401  (used by run_reuse; imported here, before the clock starts, as before)
    import tuner.estimate  # noqa: F401  (likewise)
    from tuner.measure import MeasureConfig, Measurer

    spec, trials, per_type = SCALES[args.scale]
    trials = args.trials or trials
    target = parse_target(args.target)
    kind = target_kind(target)
    work, out_path = run_paths(args, kind)
    ops = [Operator.create(t, **p) for t, p in spec]
    pairs = reuse_pairs(ops, per_type)
    c2d_all = [p for p in reuse_pairs(ops, 10_000) if ops[p[0]].type == "C2D"]
    measurer = Measurer.local(MeasureConfig(number=3, repeat=5, min_repeat_ms=40))
    t0 = time.perf_counter()
    try:
        backend = run_backend(ops, target, trials, measurer, work)
        rows = run_reuse(ops, pairs, target, kind, measurer, work, args.strategies, args.ranges)
        # side-by-side re-measurement of α's programs: backend, then each strategy's
        compare_side_by_side(ops, pairs, rows, backend, target, measurer, work, args.ranges, args.repeat)
        ranges = range_evidence(ops, c2d_all, work, kind) if len(c2d_all) else {}
    finally:
        measurer.close()
    result = assemble_result(args, target, kind, trials, t0, rows, backend, ranges)
    write_result(result, ranges, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
