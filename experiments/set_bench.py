"""Operator-set benchmark: eto's pipeline against MetaSchedule alone, same per-operator budget N, over seeds.

Per seed (``--seeds K``: 0..K-1, or ``--seed-list``) both methods tune the whole set from empty
databases in this process, one after the other, the order alternating from seed to seed so that
drift in the machine's speed favours neither: MetaSchedule with its task scheduler and N trials per
operator (``eto tune --method ansor``), and eto with the reuse pair selector, N trials per backend
root and the reuse tuner for the rest (``eto tune``), both with that seed. MetaSchedule's result
varies a lot between seeds, so every number is given per seed and as median, min and max.

Clocks (experiments/README.md, "How we measure"): the process's one-time costs (tensor_intrin,
xgboost and scipy.optimize imports, a tiny MetaSchedule run, a tiny plan) are paid before any clock; each
run gets a fresh measurer whose worker pools are started before its clock; design-space generation
is on both clocks. A seed counts only when both its runs are finished, and both come from one
process; a repeated command with the same ``--work`` reuses finished seeds and reruns an unfinished
one from empty databases. A work folder is bound to its settings (``settings.json``).

Quality: the final programs of every run (all seeds and the control) are re-measured, each round in
a fresh runner process, interleaved operator by operator over ``--rounds`` rounds, and compared by the paper's
weighted latency Σ frequency x latency. Per seed, each over eto's total seconds (paper section 7):

- ``total``: MetaSchedule's whole run;
- ``best``: when MetaSchedule's set first reached its own final weighted latency (its trajectory);
- ``same``: when MetaSchedule's set first reached eto's quality. Latencies recorded while tuning are
  on another scale than re-measured ones (the same program varies up to 2x between runs here), so
  the threshold is eto's re-measured weighted latency converted to MetaSchedule's recorded scale,
  ``eto_remeasured x MS_recorded_final / MS_remeasured_final``, and ``same`` is the first time
  MetaSchedule's recorded set trajectory is at or below it (None: never within its budget);
- ``throughput``: MetaSchedule's re-measured weighted latency / eto's.

Trajectory seconds count from the moment MetaSchedule's clock started (the same start as its
``total``), each operator's points placed on the wall clock by its commit time
(:func:`eto.report.set_trajectory`).

Control row: MetaSchedule alone twice with the same seed (the list's first) on the same set at
``--control-trials``, both timed in this process and re-measured with the rest. Identical work: its
time and latency ratios are the noise floor, and a speed-up or throughput ratio within it is no result.

Estimator: per reused operator, the plan's estimated candidates against those the reuse tuner
measured (and estimated against actual seconds when the database has ``estimated_seconds``).

Usage: ``python -m experiments.set_bench [--scale ci|small|paper] [--opset bert_base] [--trials 64]
[--seeds 3] [--variant V ...] [--target nvidia/nvidia-h100]``; results go to
``experiments/results/set_bench_<opset>_N<trials>[_first<k>][_<gpu>][_<variant>...].json`` and a PNG of every
run's convergence beside it. Variants run per seed beside MetaSchedule and plain eto, each compared
with both (``variants`` per seed and in the aggregate): options beyond the paper (``hot``,
``evolve``), the paper's baselines (``st`` Selective Tuning, ``topk`` eto's plan with TopK reuses) and
its bridge ablation (``nobridges``, ``allbridges``; plain eto uses 1-hop bridges); ``nocap`` plans without
the cap on a reuse's reduction growth, ``nodistance`` by cost alone (no preference for near sources);
``paperbshape`` ranks BShapes by the paper's count (CPU); ``settle2`` times finalists and backend roots in
two runner processes (``ETO_SETTLE_PROCESSES=2``; default one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import time

from experiments._bench import (SESSION, add_search_option, backend_search, bind_settings, search_settings,
                                warm_measurer, warm_up)

#: eto options beyond the paper, and the paper's baselines (Selective Tuning, eto's plan with TopK
#: reuses), each measured against plain eto and MetaSchedule on the same set
VARIANTS = {"plain": {}, "hot": {"hot_share": 0.3, "hot_factor": 1.5}, "evolve": {"evolve_trials": 32},
            "st": {"method": "st"}, "topk": {"method": "topk"},
            # E4, the bridge ablation (paper figure 11): plain eto uses 1-hop bridges
            "nobridges": {"bridges": "none"}, "allbridges": {"bridges": "all"},
            # the plan without its cap on a reuse's reduction growth (eto.options.MAX_REDUCTION_RATIO)
            "nocap": {"max_reduction_ratio": None},
            # the plan by cost alone, without its preference for near sources (eto.options.DISTANCE_WEIGHT)
            "nodistance": {"distance_weight": 0.0},
            # the roots as MetaSchedule leaves them, not polished by a self-reuse (eto.runs.polish)
            "nopolish": {"polish": False},
            # the paper's BShape cost (all blocks' cache-line requests) instead of the per-core one
            "paperbshape": {"env": {"ETO_CPU_CACHE_BYTES": "0"}},
            # finalists and backend roots timed in two runner processes (default: the measurer's alone)
            "settle2": {"env": {"ETO_SETTLE_PROCESSES": "2"}}}
#: defaults per scale; every one can be overridden on the command line
SCALES = {
    # ci: quickstart's two BMMs, one planned as a reuse of the other at plan budget 64
    "ci": dict(opset="quickstart", pick=[3, 4], trials=8, plan_budget=64, seeds=2, rounds=2),
    "small": dict(opset="bert_base", trials=64, seeds=3, rounds=4),
    "paper": dict(opset="bert_base", trials=1000, seeds=3, rounds=4),
}
MS = "metaschedule"
ETO = "eto"  # plain eto: the headline numbers


def parse_args(argv=None) -> argparse.Namespace:
    """The command line; options left out take the scale's defaults."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=SCALES, default="small")
    ap.add_argument("--opset", help="built-in set name or JSON file")
    ap.add_argument("--limit", type=int, help="only the set's first k operators")
    ap.add_argument("--pick", type=int, nargs="+", help="only these operators of the set (0-based indices)")
    ap.add_argument("--trials", type=int, help="budget N per operator (MetaSchedule) and per root (eto)")
    ap.add_argument("--plan-budget", type=int, help="eto's planning budget (default: --trials)")
    ap.add_argument("--seeds", type=int, help="run seeds 0..K-1")
    ap.add_argument("--seed-list", type=int, nargs="+", help="run these seeds instead")
    ap.add_argument("--control-trials", type=int, help="budget of the control row (default min(N, 32))")
    ap.add_argument("--no-control", action="store_true", help="skip the control row")
    ap.add_argument("--rounds", type=int, help="interleaved re-measurement rounds")
    ap.add_argument("--variant", choices=sorted(VARIANTS), nargs="+", default=["plain"],
                    help="eto as in the paper (plain), or also with an option beyond it (hot, evolve), "
                         "a baseline of the paper's (st: Selective Tuning; topk: eto's plan with TopK reuses) "
                         "or another bridge mode (nobridges, allbridges)")
    ap.add_argument("--target", default="cpu", help="cpu (this machine) or a CUDA tag, e.g. nvidia/nvidia-h100")
    add_search_option(ap)
    ap.add_argument("--work", default=None, help="folder of the tuning runs (finished seeds are reused)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.opset is None:  # a scale's subset belongs to its own set
        for k, v in SCALES[args.scale].items():
            setattr(args, k, v if getattr(args, k) is None else getattr(args, k))
    for k in ("trials", "seeds", "rounds"):
        if getattr(args, k) is None:
            setattr(args, k, SCALES[args.scale][k])
    args.seed_list = args.seed_list or list(range(args.seeds))
    args.control_trials = args.control_trials or min(args.trials, 32)
    return args


def load_set(args):
    """The operator set, limited to ``--pick``'s operators or its first ``--limit``."""
    from eto.operators.opsets import OperatorSet, load_opset

    opset = load_opset(args.opset)
    entries = [opset.entries[i] for i in args.pick] if args.pick else opset.entries[: args.limit or None]
    return OperatorSet(opset.name, tuple(entries), opset.description)


def subset_tag(args) -> str:
    """The part of file and folder names that says which operators of the set ran (and on which GPU)."""
    gpu = "" if args.target == "cpu" else "_" + args.target.split("/")[-1].replace("nvidia-", "")
    if args.pick:
        return "_pick" + "-".join(map(str, args.pick)) + gpu
    return (f"_first{args.limit}" if args.limit else "") + gpu


def set_trajectory(db, opset, target, since: float | None = None) -> list[tuple[float, float]]:
    """(seconds since ``since``, weighted latency) each time the set's best-so-far improved (all tuned)."""
    from eto.report import set_trajectory as trajectory
    from eto.target import target_key

    return trajectory(db.results(), {e.op.key: e.frequency for e in opset}, target_key(target), since=since)


def ms_best_and_same(traj: list[tuple[float, float]], ms_remeasured: float,
                     eto_remeasured: float) -> tuple[float | None, float | None, float | None]:
    """MetaSchedule's "best" and "same" seconds from its recorded set trajectory, and the threshold used.

    "same" compares with eto's re-measured weighted latency moved to MetaSchedule's recorded scale.
    """
    if not traj:
        return None, None, None
    final = traj[-1][1]
    best = next(sec for sec, w in traj if w <= final)
    if not (math.isfinite(ms_remeasured) and math.isfinite(eto_remeasured)):
        return best, None, None
    threshold = eto_remeasured * final / ms_remeasured
    same = next((sec for sec, w in traj if w <= threshold), None)
    return best, same, threshold


# -- tuning ------------------------------------------------------------------------------------------
def run_method(kind: str, opset, target, db_dir: str, trials: int, seed: int, plan_budget: int | None,
               search="evolutionary") -> dict:
    """Tune ``opset`` into an empty database with MetaSchedule (``kind`` "metaschedule") or an eto variant,
    every backend run with ``search``."""
    from eto.store.database import Database
    from eto.runs.pipeline import tune
    from eto.runs.tuning import tune_with_backend
    from tuner.measure.options import BackendOptions
    from tuner.measure.measurer import MeasureConfig, Measurer

    db = Database(db_dir)
    options = {} if kind == MS else dict(VARIANTS[kind.partition("_")[2] or "plain"])
    with _environment(options.pop("env", {})), Measurer.local(MeasureConfig()) as measurer:
        warm_measurer(measurer, target)  # worker pools up before the clock
        started = time.time()
        t0 = time.perf_counter()
        if kind == MS:
            report = tune_with_backend(opset, target, db, BackendOptions(trials=trials, seed=seed, search=search), measurer=measurer)
        else:
            from eto.options import TuneOptions

            report = tune(opset, target, db, TuneOptions.of(trials=trials, plan_budget=plan_budget, seed=seed,
                                                            search=search, **options),
                          measurer=measurer, log=lambda m: print(f"    {m}", flush=True))
        seconds = time.perf_counter() - t0
    rep = report.to_json()
    print(f"  {os.path.basename(db_dir)}: {seconds:.1f} s, {rep['candidates']} candidates", flush=True)
    return {"kind": kind, "seconds": seconds, "started_unix": started, "report": rep}


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """``env`` set for the block (a variant's, read when the measurer and the tuner are made), then restored."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_group(folder: str, runs: list[tuple[str, str]], opset, target, trials: int, seed: int,
              plan_budget: int | None, search="evolutionary") -> dict:
    """Run each (name, kind) in order into ``folder``, or load the group if a session finished it.

    A group is all or nothing: an unfinished one is wiped and run again, so its times share a process.
    """
    done = os.path.join(folder, "group.json")
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    out = {"seed": seed, "trials": trials, "folder": os.path.basename(folder), "order": [n for n, _ in runs],
           "session": SESSION, "runs": {}}
    for name, kind in runs:
        out["runs"][name] = run_method(kind, opset, target, os.path.join(folder, name), trials, seed, plan_budget,
                                      search)
    with open(done, "w") as f:
        json.dump(out, f)
    return out


def variants_of(args) -> list[str]:
    """The variants run beside plain eto (``plain`` alone: none)."""
    return [v for v in dict.fromkeys(args.variant) if v != "plain"]


def variant_tag(args) -> str:
    return "".join(f"_{v}" for v in variants_of(args))


def run_all(args, opset, target, work: str, search="evolutionary") -> tuple[dict, dict | None]:
    """Every seed's runs (order rotated per seed) and the control pair, from ``work`` where finished."""
    methods = [MS, "eto"] + [f"eto_{v}" for v in variants_of(args)]
    seeds = {}
    for i, seed in enumerate(args.seed_list):
        order = methods[i % len(methods):] + methods[: i % len(methods)]
        folder = os.path.join(work, f"seed{seed}{variant_tag(args)}")
        print(f"seed {seed}: {' then '.join(order)}", flush=True)
        seeds[seed] = run_group(folder, [(m, m) for m in order], opset, target, args.trials, seed, args.plan_budget,
                                search)
    control = None
    if not args.no_control:
        seed = args.seed_list[0]
        print(f"control: MetaSchedule twice, seed {seed}, {args.control_trials} trials", flush=True)
        control = run_group(os.path.join(work, f"control_N{args.control_trials}_seed{seed}"),
                            [("a", MS), ("b", MS)], opset, target, args.control_trials, seed, None, search)
    return seeds, control


# -- quality -----------------------------------------------------------------------------------------
#: How the final programs are re-timed (:func:`remeasure`, :func:`_retry_failed`): MeasureConfig's fields.
REMEASURE = {"number": 3, "repeat": 5, "min_repeat_ms": 40}


def remeasure(progs: dict[str, list], opset, target, rounds: int,
              per_round: dict[str, list[list[float]]] | None = None, timing: str = "hot") -> dict[str, list[float]]:
    """Median re-measured seconds of each run's final programs; per operator all runs back to back.

    Each round runs in a fresh worker process: a program can run up to 1.75x faster in one process
    than in the next, and keeps that speed for the process's life (BERT-Base's 768x768 matmul at
    0.64 or 1.11 ms; docs/findings.md, ``process_lottery.py``), so one process would settle a
    comparison by its lottery. ``per_round``: filled with each round's (process's) median per
    program, ``per_round[run][op]``, to show it. ``timing``: ``"hot"`` (MetaSchedule's way, several
    runs a sample, at least 40 ms) or ``"cold"`` (as eto tunes on a CPU: :func:`tuner.measure.timing.measure_config`)."""
    from tuner.measure.apply import scheduled_module
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tuner.measure.timing import measure_config

    config = MeasureConfig(**REMEASURE) if timing == "hot" else measure_config(timing, target)
    mods = {u: [None if p is None else scheduled_module(p.tuning_record) for p in ps] for u, ps in progs.items()}
    samples = {u: [[] for _ in opset] for u in progs}
    rounds_out = {u: [[] for _ in opset] for u in progs}
    units = list(progs)
    for r in range(rounds):
        with Measurer.local(config) as measurer:
            warm_measurer(measurer, target)
            order = units[r % len(units):] + units[: r % len(units)]
            for i in range(len(opset)):
                todo = [u for u in order if mods[u][i] is not None]
                timed = dict(zip(todo, measurer.measure([mods[u][i] for u in todo], target)))
                for u in units:
                    res = timed.get(u)
                    if res is not None and res.ok:
                        samples[u][i] += list(res.run_secs)
                    rounds_out[u][i].append(res.median if res is not None else math.inf)
    if per_round is not None:
        per_round.update(rounds_out)
    _retry_failed(mods, samples, target)
    return {u: [statistics.median(s) if s else math.inf for s in samples[u]] for u in progs}


def _retry_failed(mods: dict[str, list], samples: dict[str, list[list[float]]], target, tries: int = 2) -> None:
    """Time again, alone and in a fresh worker, each program that no round could time.

    On a loaded machine (CI runs tests side by side) a build or run can miss its timeout once; one
    such miss would make a run's weighted latency inf and its ratios None. A program that fails
    every try keeps no sample (inf) and its last error is printed."""
    from tuner.measure.measurer import MeasureConfig, Measurer

    for _ in range(tries):
        todo = [(u, i) for u in mods for i, m in enumerate(mods[u]) if m is not None and not samples[u][i]]
        if not todo:
            return
        with Measurer.local(MeasureConfig(**REMEASURE)) as measurer:
            for (u, i), res in zip(todo, measurer.measure([mods[u][i] for u, i in todo], target)):
                if res.ok:
                    samples[u][i] += list(res.run_secs)
                else:
                    print(f"re-measure: {u} operator {i} failed: {res.error}", flush=True)


def weighted(opset, lats: list[float]) -> float:
    """Σ frequency x latency (inf if an operator has no program)."""
    return sum(e.frequency * lat for e, lat in zip(opset, lats))


def reuse_rows(db, target) -> list[dict]:
    """Per reused operator (bridges too): the plan's estimate against what the reuse tuner measured."""
    from eto.target import target_key

    tk = target_key(target)
    rows = []
    for r in db.results():
        if (r.get("target") != tk or not str(r.get("method", "")).startswith("reuse")
                or not (r.get("estimate") or r.get("estimated_seconds"))):
            continue
        ev = r.get("evolve") or {}
        actual = r["candidates"] - ev.get("candidates", 0)  # reuse-then-evolve: the reuse tuner's share
        seconds = r["seconds"] - ev.get("seconds", 0.0)
        row = {"op": r["op_key"], "source": r.get("source"), "estimate": r.get("estimate"), "candidates": actual,
               "actual_over_estimate": actual / r["estimate"] if r.get("estimate") else None, "seconds": seconds,
               "estimated_seconds": r.get("estimated_seconds")}
        if r.get("estimated_seconds"):
            row["actual_over_estimated_seconds"] = seconds / r["estimated_seconds"]
        rows.append(row)
    return rows


def polish_rows(db, target) -> list[dict]:
    """Per polished root (eto.runs.polish): what the polish measured and cost, and its side-by-side gain."""
    from eto.target import target_key

    tk = target_key(target)
    return [{"op": r["op_key"], "candidates": r["candidates"], "seconds": r["seconds"],
             "gain": r["polish"]["backend_latency_s"] / r["polish"]["polished_latency_s"]
             if r["polish"]["polished_latency_s"] > 0 else None}
            for r in db.results() if r.get("target") == tk and r.get("method") == "polish" and r.get("polish")]


def estimator_summary(rows: list[dict]) -> dict:
    """Mean actual/estimate ratios (candidates; seconds where estimated) over ``rows``."""
    cand = [r["actual_over_estimate"] for r in rows if r["actual_over_estimate"] is not None]
    secs = [r["actual_over_estimated_seconds"] for r in rows if "actual_over_estimated_seconds" in r]
    timed = [r for r in rows if r.get("estimated_seconds")]
    return {"reused": len(rows), "mean_actual_over_estimate": statistics.fmean(cand) if cand else None,
            "estimated_candidates": sum(r["estimate"] or 0 for r in rows),
            "actual_candidates": sum(r["candidates"] for r in rows),
            "mean_actual_over_estimated_seconds": statistics.fmean(secs) if secs else None,
            "estimated_seconds": sum(r["estimated_seconds"] for r in timed) if timed else None,
            "actual_seconds_of_those": sum(r["seconds"] for r in timed) if timed else None}


def spread(values) -> dict:
    """Median, min and max of the values that exist (None and inf left out), and how many there were."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b or not math.isfinite(a) or not math.isfinite(b) else a / b


# -- the result --------------------------------------------------------------------------------------
def seed_summary(group: dict, folder: str, progs: dict, lat: dict, opset, target) -> dict:
    """One seed's row: times, re-measured and recorded weighted latencies, speed-ups, estimator accuracy."""
    from eto.store.database import Database

    runs = group["runs"]
    w = {m: weighted(opset, lat[m]) for m in runs}
    ms_db = Database(os.path.join(folder, MS), readonly=True)
    traj = set_trajectory(ms_db, opset, target, since=runs[MS]["started_unix"])
    best, same, threshold = ms_best_and_same(traj, w[MS], w[ETO])
    sec = {m: runs[m]["seconds"] for m in runs}
    est = {m: reuse_rows(Database(os.path.join(folder, m), readonly=True), target) for m in runs if m != MS}
    out = {
        "seed": group["seed"], "order": group["order"], "session": group["session"],
        "seconds": {**{f"{m}_total": s for m, s in sec.items()}, "metaschedule_best": best, "metaschedule_same": same},
        "weighted_latency_s": w,
        "recorded_weighted_latency_s": {m: runs[m]["report"]["weighted_latency_s"] for m in runs},
        "same_threshold_recorded_scale_s": threshold,
        "speedup": {"total": sec[MS] / sec[ETO], "best": _div(best, sec[ETO]),
                    "same": _div(same, sec[ETO])},
        "throughput": _div(w[MS], w[ETO]),
        "candidates": {m: runs[m]["report"]["candidates"] for m in runs},
        "eto_estimated_candidates": runs[ETO]["report"].get("estimated_candidates"),
        "eto_estimated_seconds": runs[ETO]["report"].get("estimated_seconds"),
        "estimator": {m: {**estimator_summary(rows), "rows": rows} for m, rows in est.items()},
        "polish": {m: polish_rows(Database(os.path.join(folder, m), readonly=True), target)
                   for m in runs if m != MS},
        "per_operator": [{"op": e.op.name, "frequency": e.frequency, **{f"{m}_latency_s": lat[m][i] for m in runs},
                          "eto_method": getattr(progs[ETO][i], "method", None),
                          "eto_source": getattr(progs[ETO][i], "source", None)} for i, e in enumerate(opset)],
    }
    out["variants"] = {}
    for m in runs:
        if m.startswith("eto_"):  # each variant against MetaSchedule (as eto above) and against plain eto
            same_v = ms_best_and_same(traj, w[MS], w[m])[1]
            out["variants"][m.removeprefix("eto_")] = {
                "speedup": {"total": sec[MS] / sec[m], "best": _div(best, sec[m]), "same": _div(same_v, sec[m])},
                "throughput": _div(w[MS], w[m]),
                "vs_plain_eto": {"throughput": _div(w["eto"], w[m]), "seconds": _div(sec[m], sec["eto"])}}
    return out


def control_summary(group: dict, lat: dict, opset) -> dict:
    """The control row: two identical MetaSchedule runs; their ratios are the noise floor."""
    runs = group["runs"]
    w = {m: weighted(opset, lat[m]) for m in ("a", "b")}
    t_ratio = runs["a"]["seconds"] / runs["b"]["seconds"]
    w_ratio = _div(w["a"], w["b"])
    return {"seed": group["seed"], "trials": group["trials"], "session": group["session"],
            "seconds": {m: runs[m]["seconds"] for m in ("a", "b")}, "weighted_latency_s": w,
            "candidates": {m: runs[m]["report"]["candidates"] for m in ("a", "b")},
            "time_ratio_a_over_b": t_ratio, "latency_ratio_a_over_b": w_ratio,
            "noise_floor": {"time": max(t_ratio, 1 / t_ratio),
                            "throughput": None if not w_ratio else max(w_ratio, 1 / w_ratio)}}


def aggregate(per_seed: list[dict], control: dict | None) -> dict:
    """Median, min and max over seeds, each headline ratio marked if it lies inside the control's noise."""
    agg = {name: spread([s["speedup"][name] for s in per_seed]) for name in ("total", "best", "same")}
    agg = {f"speedup_{k}": v for k, v in agg.items()}
    agg["speedup_same"]["reached_in"] = f"{sum(s['seconds']['metaschedule_same'] is not None for s in per_seed)}" \
                                        f"/{len(per_seed)} seeds"
    agg["throughput"] = spread([s["throughput"] for s in per_seed])
    for m in per_seed[0]["weighted_latency_s"]:
        agg[f"seconds_{m}_total"] = spread([s["seconds"][f"{m}_total"] for s in per_seed])
    if control is not None:
        for key, floor in (("speedup_total", control["noise_floor"]["time"]),
                           ("throughput", control["noise_floor"]["throughput"])):
            med = agg[key]["median"]
            agg[key]["inside_noise_floor"] = None if med is None or floor is None else 1 / floor <= med <= floor
    rows = [r for s in per_seed for r in s["estimator"][ETO]["rows"]]
    agg["estimator"] = estimator_summary(rows)
    agg["variants"] = {
        v: {**{f"speedup_{k}": spread([s["variants"][v]["speedup"][k] for s in per_seed]) for k in ("total", "best", "same")},
            "throughput": spread([s["variants"][v]["throughput"] for s in per_seed]),
            **{f"vs_plain_eto_{k}": spread([s["variants"][v]["vs_plain_eto"][k] for s in per_seed])
               for k in ("throughput", "seconds")}}
        for v in per_seed[0].get("variants", {})}
    return agg


def assemble_result(args, opset, target, seeds: dict, control: dict | None, progs: dict, lat: dict,
                    work: str, warm_s: float) -> dict:
    """The result file's contents: settings, environment, per-seed rows, the aggregate and the control row."""
    from experiments._env import environment

    per_seed = []
    for seed, group in seeds.items():
        unit = {m: f"seed{seed}/{m}" for m in group["runs"]}
        per_seed.append(seed_summary(group, os.path.join(work, group["folder"]), {m: progs[u] for m, u in unit.items()},
                                     {m: lat[u] for m, u in unit.items()}, opset, target))
    ctrl = None if control is None else control_summary(control, {m: lat[f"control/{m}"] for m in ("a", "b")}, opset)
    agg = aggregate(per_seed, ctrl)
    return {
        "benchmark": "set_bench", "scale": args.scale, "opset": args.opset, "limit": args.limit, "pick": args.pick,
        "operators": [e.op.name for e in opset], "trials_N": args.trials, "plan_budget": args.plan_budget,
        "search": args.search,
        "seeds": args.seed_list, "control_trials": None if args.no_control else args.control_trials,
        "remeasure_rounds": args.rounds, "variants": variants_of(args), "variant_options": {v: VARIANTS[v] for v in variants_of(args)},
        "target": str(target), "environment": environment(), "work": os.path.abspath(work), "session": SESSION,
        "warmup_s": warm_s,
        # headline numbers: medians over seeds (older result files had one run's values here)
        "throughput_eto_vs_metaschedule": agg["throughput"]["median"],
        "speedup": {k: agg[f"speedup_{k}"]["median"] for k in ("total", "best", "same")},
        "aggregate": agg, "control": ctrl, "per_seed": per_seed,
        "notes": "times of both methods of a seed come from one process, the order alternating per seed; one-time "
                 "costs (imports, worker pools) are outside both clocks; 'same' is eto's re-measured weighted "
                 "latency moved to MetaSchedule's recorded scale (x MS recorded final / MS re-measured final)",
    }


def write_result(args, result: dict) -> str:
    """Write the result file (``--out`` or the default name) and print its headline numbers."""
    suffix = subset_tag(args) + variant_tag(args)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"set_bench_{os.path.basename(args.opset).removesuffix('.json')}"
                                   f"_N{args.trials}{suffix}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    agg = result["aggregate"]
    print(json.dumps({k: v for k, v in agg.items() if k != "estimator"}, indent=1))
    print("estimator:", json.dumps(agg["estimator"]))
    if result["control"]:
        c = result["control"]
        print(f"control (noise floor): time a/b {c['time_ratio_a_over_b']:.3f}, "
              f"latency a/b {c['latency_ratio_a_over_b']}")
    print(f"written {out}")
    return out


def write_plot(out: str, seeds: dict, work: str, opset, target) -> None:
    """``<result>.png``: each run's best weighted latency so far against its seconds (every seed)."""
    from eto.store.database import Database

    curves = {}
    for seed, group in seeds.items():
        for m, run in group["runs"].items():
            db = Database(os.path.join(work, group["folder"], m), readonly=True)
            curves[f"{m}, seed {seed}"] = set_trajectory(db, opset, target, since=run["started_unix"])
    from eto.plots import convergence_figure

    try:
        fig = convergence_figure(curves, title=f"{opset.name}: recorded weighted latency while tuning")
    except ImportError as exc:  # matplotlib is an optional extra
        print(f"no plot: {exc}")
        return
    path = out.removesuffix(".json") + ".png"
    fig.savefig(path, dpi=120)
    print(f"written {path}")


def main(argv=None) -> int:
    """Warm up, tune every seed (and the control) or load the finished ones, re-measure, compare, write."""
    args = parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    from eto.store.database import Database
    from eto.target import parse_target

    opset = load_set(args)
    target = parse_target(args.target)
    work = args.work or os.path.join(os.path.dirname(os.path.abspath(__file__)), "work",
                                     f"set_bench_{opset.name}_N{args.trials}{subset_tag(args)}")
    search = backend_search(args)
    bind_settings(work, {"operators": [[e.op.key, e.frequency] for e in opset], "trials": args.trials,
                         "plan_budget": args.plan_budget, "target": str(target), **search_settings(args)})
    warm_s = warm_up(target)
    print(f"warm-up (outside both clocks): {warm_s:.1f} s", flush=True)
    seeds, control = run_all(args, opset, target, work, search)
    progs = {}
    for seed, group in seeds.items():
        for m in group["runs"]:
            db = Database(os.path.join(work, group["folder"], m), readonly=True)
            progs[f"seed{seed}/{m}"] = [db.best(e.op, target) for e in opset]
    if control is not None:
        for m in ("a", "b"):
            db = Database(os.path.join(work, control["folder"], m), readonly=True)
            progs[f"control/{m}"] = [db.best(e.op, target) for e in opset]
    lat = remeasure(progs, opset, target, args.rounds)
    out = write_result(args, assemble_result(args, opset, target, seeds, control, progs, lat, work, warm_s))
    write_plot(out, seeds, work, opset, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
