"""Dynamic-shape retuning benchmark: new sizes from a database of known sizes, against MetaSchedule.

Per new size (one value of ``--vary``), in one process, one-time costs outside both clocks:

* eto: ``eto.shapes.retune.retune`` on a fresh copy of ``--db`` (only that size): instant programs first,
  then reuse tuning planned over the database; its time, and the instant programs' time;
* MetaSchedule: every operator of that size tuned from scratch with ``--trials`` trials each (or,
  with ``--metaschedule-from``, an earlier run's databases and seconds: eto's side measured anew);
* padded (what users do without eto): for sizes up to the database's (``--pad-to``, default the
  built-in set's default size), the stored program of the same layer at that size, run on inputs
  padded to it: the same real tokens, so its latency compares directly;
* then the instant, eto, MetaSchedule and padded programs of each operator re-measured side by
  side (interleaved rounds), both ways a CPU times a program (hot, MetaSchedule's way, and cold, eto's
  default: :mod:`tuner.measure.timing`), and the ratios: time MetaSchedule / eto, weighted throughput
  eto / MetaSchedule, instant / MetaSchedule and eto / padded (weights: the operators' frequencies),
  and the geometric mean over operators of eto's and the instant programs' speed against MetaSchedule's
  (the hot ratios at the top level of each size, as before; the cold ones under ``cold``).

eto's retune times its candidates as ``--timing`` says (default: eto's default, cold), as a user's
``eto retune`` does; MetaSchedule tunes with its own timing (hot).

    python -m experiments.retune_bench --db DB_AT_SEQ128 --opset bert_base --vary seq=64,256 --trials 100
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from typing import Callable

from eto.options import TuneOptions
from tuner.measure.timing import DEFAULT_TIMING
from experiments._bench import SESSION, add_search_option, backend_search, search_name, warm_measurer, warm_up
from experiments._env import environment

SCALES = {"ci": {"opset": "quickstart", "vary": "M=48", "trials": 8},
          "small": {"opset": "bert_base", "vary": "seq=64,256", "trials": 100}}


def run(args: argparse.Namespace, done: list | None = None,
        save: Callable[[dict], None] | None = None) -> dict:
    """Every size of ``--vary`` not in ``done`` (sizes a stopped run already finished, kept as they
    were measured); ``save(result)`` is called after each size, so a stopped run loses at most one."""
    from tuner.measure.apply import scheduled_module
    from tuner.measure.measurer import MeasureConfig, Measurer

    from eto.store.database import Database
    from eto.operators.opsets import OperatorSet, parse_vary, vary
    from eto.shapes.retune import retune
    from eto.target import parse_target
    from eto.runs.tuning import tune_with_backend
    from tuner.measure.options import BackendOptions

    from tuner.measure.timing import measure_config

    target = parse_target("cpu")
    search = backend_search(args)
    warm = warm_up(target)
    dim, values = parse_vary(args.vary)
    shapes = list(done or [])
    finished = {s["value"] for s in shapes}
    ms_earlier: dict = {}
    if args.metaschedule_from:
        with open(args.metaschedule_from) as f:
            ms_earlier = {s["value"]: s for s in json.load(f)["shapes"]}
    with Measurer.local(MeasureConfig()) as measurer, Measurer.local(measure_config("cold", target)) as cold:
        warm_measurer(measurer, target)
        warm_measurer(cold, target)
        mine = cold if args.timing == "cold" else measurer  # eto's: as --timing says; MetaSchedule's: hot
        for value, opset in vary(args.opset, dim, values):
            if value in finished:
                print(f"{dim}={value}: done in an earlier run, kept", flush=True)
                continue
            if args.limit:  # the set's first LIMIT operators (a scaled-down run)
                opset = OperatorSet(opset.name, opset.entries[:args.limit], opset.description)
            eto_dir, ms_dir = (os.path.join(args.work, f"{m}_{dim}{value}") for m in ("eto", "ms"))
            earlier = ms_earlier.get(value)
            if ms_earlier and earlier is None:
                raise SystemExit(f"--metaschedule-from {args.metaschedule_from}: no {dim}={value} there")
            if earlier is not None:  # MetaSchedule's database and seconds from the earlier run
                ms_dir = os.path.join(args.metaschedule_work, f"ms_{dim}{value}")
                if not os.path.isdir(ms_dir):
                    raise SystemExit(f"--metaschedule-work: {ms_dir} does not exist")
            for d in (eto_dir, ms_dir) if earlier is None else (eto_dir,):
                shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(args.db, eto_dir)
            eto_db, ms_db = Database(eto_dir), Database(ms_dir)
            source_db = Database(args.db, readonly=True)
            t0 = time.perf_counter()
            rep = retune([(value, opset)], target, eto_db,
                         TuneOptions.of(trials=args.trials, seed=args.seed, search=search, timing=args.timing),
                         dim=dim, measurer=mine, log=lambda m: print(f"  eto: {m}", flush=True))
            eto_s = time.perf_counter() - t0
            if earlier is None:
                t0 = time.perf_counter()
                tune_with_backend(opset, target, ms_db, BackendOptions(trials=args.trials, seed=args.seed, search=search), measurer=measurer)
                ms_s = time.perf_counter() - t0
            else:
                ms_s = earlier["seconds"]["metaschedule"]
            progs = {}
            padded = padded_ops(args.opset, dim, value, args.pad_to)
            for e in opset:
                inst = next((p for p in eto_db.programs(target=target, op=e.op) if p.method == "instant"), None)
                pad_op = padded.get(e.op)
                progs[e.op] = {"instant": inst, "eto": eto_db.best(e.op, target, predicted=False),
                               "metaschedule": ms_db.best(e.op, target),
                               "padded": source_db.best(pad_op, target, predicted=False) if pad_op else None}
            keys = [(op, m) for op, d in progs.items() for m, p in d.items() if p is not None]
            mods = [scheduled_module(progs[op][m].tuning_record) for op, m in keys]
            remeasured = dict(zip(keys, measurer.remeasure(mods, target, rounds=args.rounds)))
            remeasured_cold = dict(zip(keys, cold.remeasure(mods, target, rounds=args.rounds)))
            freq = {e.op: e.frequency for e in opset}
            per_op = []
            for e in opset:
                row = {"op": e.op.name, "frequency": e.frequency}
                for m in ("instant", "eto", "metaschedule", "padded"):
                    row[f"{m}_latency_s"] = remeasured.get((e.op, m))
                    row[f"{m}_latency_cold_s"] = remeasured_cold.get((e.op, m))
                row["padded_op"] = padded[e.op].name if e.op in padded else None
                r = next((r for r in rep.rows if r.op == e.op.name), None)
                row.update(eto_method=r.method if r else None, eto_source=r.source if r else None,
                           eto_candidates=r.candidates if r else 0, instant_source=r.instant_source if r else None)
                per_op.append(row)
            ms_best = time_to_best(ms_db, opset, target)
            shape = {"value": value, "seconds": {"eto": eto_s, "eto_instant": rep.instant_seconds,
                                                 "metaschedule": ms_s, "metaschedule_to_best": ms_best},
                     "time_ratio_metaschedule_over_eto": ms_s / eto_s,
                     "time_ratio_metaschedule_best_over_eto": ms_best / eto_s if ms_best is not None else None,
                     "time_ratio_metaschedule_over_instant": ms_s / rep.instant_seconds if rep.instant_seconds else None,
                     **quality(remeasured, opset, freq), "cold": quality(remeasured_cold, opset, freq),
                     "per_operator": per_op}
            print(json.dumps({k: v for k, v in shape.items() if k != "per_operator"}), flush=True)
            shape["session"] = SESSION
            if earlier is not None:
                shape["metaschedule_from"] = {"result": args.metaschedule_from, "session": earlier.get("session")}
            shapes.append(shape)
            if save is not None:
                save(summary(args, shapes, warm))
    return summary(args, shapes, warm)


def time_to_best(ms_db, opset, target) -> float | None:
    """MetaSchedule's time to its best on a size: its run's clock when the last of the set's operators
    first reached the latency it ended with (each backend result's trajectory holds [seconds into the
    run, trials, best so far]); None when a result has no trajectory. MetaSchedule tunes the operators
    of a set together, so one clock covers them all. O(trials)."""
    ends = []
    for e in opset:
        rows = [r for r in ms_db.results() if r["op_key"] == e.op.key and r.get("trajectory")]
        if not rows:
            return None
        trajectory = rows[-1]["trajectory"]
        best = min(p[2] for p in trajectory)
        ends.append(next(p[0] for p in trajectory if p[2] <= best))
    return max(ends, default=None)


def quality(remeasured: dict, opset, freq: dict) -> dict:
    """One timing's re-measurement: the weighted latencies (frequency x latency, summed), the weighted
    throughputs against MetaSchedule and the padded program, and the geometric mean over operators of
    the instant and eto programs' speed against MetaSchedule's."""
    methods = ("instant", "eto", "metaschedule", "padded")
    w = {m: sum(freq[e.op] * remeasured[(e.op, m)] for e in opset) if all((e.op, m) in remeasured for e in opset)
         else None for m in methods}

    def geomean(m: str) -> float | None:
        pairs = [(remeasured.get((e.op, "metaschedule")), remeasured.get((e.op, m))) for e in opset]
        if not pairs or any(a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) for a, b in pairs):
            return None  # a program whose re-measurement failed (inf) has no ratio
        return math.exp(statistics.fmean(math.log(a / b) for a, b in pairs))

    return {"weighted_latency_s": w,
            "throughput_eto_vs_metaschedule": w["metaschedule"] / w["eto"] if w["eto"] else None,
            "throughput_instant_vs_metaschedule": (w["metaschedule"] / w["instant"]
                                                   if w["instant"] and w["metaschedule"] else None),
            # the same real tokens through the source size's program on padded inputs
            "throughput_eto_vs_padded": w["padded"] / w["eto"] if w["padded"] and w["eto"] else None,
            "throughput_instant_vs_padded": w["padded"] / w["instant"] if w["padded"] and w["instant"] else None,
            "geomean_eto_vs_metaschedule": geomean("eto"), "geomean_instant_vs_metaschedule": geomean("instant")}


def summary(args: argparse.Namespace, shapes: list, warm: float) -> dict:
    """The result file: per size as measured, and the medians over sizes."""
    def med(key: str, within: str | None = None) -> float | None:
        vals = [((s.get(within) or {}) if within else s).get(key) for s in shapes]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    ratios = ("throughput_eto_vs_metaschedule", "throughput_instant_vs_metaschedule", "geomean_eto_vs_metaschedule",
              "geomean_instant_vs_metaschedule", "throughput_eto_vs_padded", "throughput_instant_vs_padded")

    shapes = sorted(shapes, key=lambda s: s["value"])
    return {"benchmark": "retune_bench", "scale": args.scale, "source_db": args.db, "opset": args.opset,
            "vary": args.vary, "limit": args.limit, "trials_N": args.trials, "seed": args.seed, "remeasure_rounds": args.rounds,
            "search": args.search, "environment": environment(), "session": SESSION, "warmup_s": warm,
            "pad_to": args.pad_to,
            "timing": args.timing,
            "median": {**{k: med(k) for k in ("time_ratio_metaschedule_over_eto", "time_ratio_metaschedule_best_over_eto",
                                              "time_ratio_metaschedule_over_instant", *ratios)},
                       "cold": {k: med(k, "cold") for k in ratios}},
            "shapes": shapes,
            "notes": "per size: eto on a fresh copy of the source database, MetaSchedule from scratch, one "
                     "process, one-time costs outside both clocks; latencies re-measured side by side"}


#: Settings a resumed run must share with the stopped one: sizes measured otherwise do not compare.
SAME = ("source_db", "opset", "trials_N", "seed", "remeasure_rounds", "limit", "pad_to", "search", "timing")


def resumable(out: str, args: argparse.Namespace) -> list:
    """The sizes ``out`` holds from an earlier run with the same settings (none if it does not
    exist); a file from other settings is an error, not silently mixed in."""
    if not os.path.exists(out):
        return []
    with open(out) as f:
        old = json.load(f)
    now = {"source_db": args.db, "opset": args.opset, "trials_N": args.trials, "seed": args.seed,
           "remeasure_rounds": args.rounds, "limit": args.limit, "pad_to": args.pad_to, "search": args.search,
           "timing": args.timing}
    # files from before --search ran the evolutionary search, from before --timing retuned with a hot measurer
    was = {"search": "evolutionary", "timing": "hot"}
    differ = [k for k in SAME if old.get(k, was.get(k)) != now[k]]
    if differ:
        what = ", ".join(f"{k}: {old.get(k, was.get(k))!r} there, {now[k]!r} now" for k in differ)
        raise SystemExit(f"--resume: {out} was measured with other settings ({what}); use another --out")
    return list(old.get("shapes", []))


def padded_ops(opset: str, dim: str, value: int, pad_to: int | None) -> dict:
    """Each operator of a built-in set at ``dim=value`` -> the same layer at ``dim=pad_to`` (the
    program users run today on inputs padded to the size they tuned); empty when not applicable."""
    from eto.operators.zoo import BUILTIN

    b = BUILTIN.get(opset.lower().replace("-", "_")) if isinstance(opset, str) else None
    if b is None or dim not in b.dims:
        return {}
    pad = pad_to or b.dims[dim]
    if value > pad:
        return {}
    out: dict = {}
    for new, old in zip(b.build(**{dim: value}), b.build(**{dim: pad})):
        out.setdefault(new, old)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--db", required=True, help="database of the known sizes (copied, never written)")
    ap.add_argument("--opset")
    ap.add_argument("--vary")
    ap.add_argument("--trials", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--limit", type=int, default=None, help="only the first LIMIT operators of each size")
    ap.add_argument("--timing", choices=("hot", "cold"), default=DEFAULT_TIMING,
                    help="how eto's retune times its candidates (default: eto's, %(default)s); MetaSchedule's are hot")
    ap.add_argument("--pad-to", type=int, default=None,
                    help="padded baseline: the size the database was tuned at (default: the set's default size)")
    add_search_option(ap)
    ap.add_argument("--work", default="experiments/work/retune_bench")
    ap.add_argument("--out", default=None)
    ap.add_argument("--resume", action="store_true",
                    help="keep the sizes --out already holds from a run with the same settings; run the rest")
    ap.add_argument("--metaschedule-from", metavar="RESULT",
                    help="eto only: MetaSchedule's databases (in --metaschedule-work) and tuning seconds from this "
                         "earlier result of the same settings; its programs are re-measured side by side with eto's")
    ap.add_argument("--metaschedule-work", metavar="DIR", help="the --work of the run that wrote --metaschedule-from")
    args = ap.parse_args(argv)
    if bool(args.metaschedule_from) != bool(args.metaschedule_work):
        ap.error("--metaschedule-from and --metaschedule-work go together")
    for k, v in SCALES[args.scale].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    search_name(args)  # the scale's default if not given
    os.makedirs(args.work, exist_ok=True)
    out = args.out or f"experiments/results/retune_bench_{args.scale}.json"
    done = resumable(out, args) if args.resume else []

    def save(result: dict) -> None:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, out)

    result = run(args, done, save)
    save(result)
    print(f"written {out}")
    try:
        plot(result, out.removesuffix(".json") + ".png")
    except ImportError as exc:  # matplotlib is an optional extra
        print(f"no plot: {exc}")
    return 0


def plot(result: dict, path: str) -> None:
    """E7's figure: per new size, MetaSchedule's time over eto's (and over the instant programs'), and
    the weighted throughput of eto, the instant programs and the padded program against MetaSchedule."""
    from eto.plots import new_figure, ratio_axis

    shapes = sorted(result["shapes"], key=lambda s: (not isinstance(s["value"], (int, float)), s["value"]))
    xs = [str(s["value"]) for s in shapes]
    dim = str(result["vary"]).split("=")[0]  # the sizes are the axis's ticks, in order
    fig = new_figure(8.0, 3.6)
    left, right = fig.subplots(1, 2)
    left.plot(xs, [s["time_ratio_metaschedule_over_eto"] for s in shapes], "o-", label="eto (instant + reuse)")
    left.plot(xs, [s["time_ratio_metaschedule_over_instant"] for s in shapes], "s--", label="instant only")
    ratio_axis(left)
    left.set_ylabel("MetaSchedule's time / method's")
    left.set_xlabel(dim)
    left.legend(fontsize=7)
    w = [s["weighted_latency_s"] for s in shapes]
    for key, style in (("eto", "o-"), ("instant", "s--"), ("padded", "x:")):  # padded: sizes below --pad-to
        have = [(x, v["metaschedule"] / v[key]) for x, v in zip(xs, w) if v.get(key)]
        if have:
            right.plot([x for x, _ in have], [y for _, y in have], style, label=key)
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set_ylabel("throughput vs MetaSchedule")
    right.set_xlabel(dim)
    right.legend(fontsize=7)
    fig.suptitle(f"E7: {result['opset']} at new sizes from a database, N = {result['trials_N']}", fontsize=9)
    fig.savefig(path, dpi=120)
    print(f"written {path}")


if __name__ == "__main__":
    sys.exit(main())
