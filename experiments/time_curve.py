"""E10 (issue 69): a built model's latency against the seconds spent tuning it, eto and MetaSchedule.

For a model built in code (:mod:`eto.models.examples`, random weights): eto tunes one database in stages
with ``eto tune --model --time-budget`` (each stage goes on from the last with the next budget, as a user
who wants more would; its tuning time is the stages' wall times added up), a snapshot of the database
after each stage; MetaSchedule's ``tune_relax`` of the same tasks (its task scheduler, eto's builder and
runner) runs once per budget of trials per task. Then every build -- untuned, eto after each stage,
MetaSchedule at each budget -- is timed interleaved in one process with ONNX Runtime and PyTorch eager
on the same weights, which are lines on the figure (no tuning).

    python -m experiments.time_curve --model bert_layer --eto 120 240 480 --ms 8 16 32 64
    python -m experiments.time_curve --scale ci          # tiny_cnn, two budgets each, ~6 min

Rerunning with the same ``--work`` reuses finished stages and MetaSchedule runs. Results:
``experiments/results/time_curve_<model>.json`` and the PNG beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCALES = {"ci": {"model": "tiny_cnn", "eto": [30, 60], "ms": [4, 8]},
          "small": {"model": "bert_layer", "eto": [120, 240, 480], "ms": [8, 16, 32, 64]}}


def eto_stages(path: str, budgets: list[float], work: str, layout: str, timing: str) -> list[dict]:
    """eto tuned in stages up to each budget (cumulative seconds), candidates timed as ``timing`` says
    (``eto tune --timing``); each stage's snapshot and wall time."""
    from eto.cli import main as eto_main

    db, stages, spent = os.path.join(work, "eto-db"), [], 0.0
    for budget in budgets:
        snap, done = f"{db}@{budget:g}", f"{db}@{budget:g}.json"
        if os.path.exists(done):
            with open(done) as f:
                stage = json.load(f)
        else:
            out = io.StringIO()
            start = time.perf_counter()
            # the stage's progress (where its improvement steps went) kept beside its snapshot
            with contextlib.redirect_stdout(out), open(f"{db}@{budget:g}.log", "w") as log, \
                    contextlib.redirect_stderr(log):
                rc = eto_main(["tune", "--model", path, "--db", db, "--time-budget", f"{budget - spent:g}", "--json",
                               "--layout", layout, "--timing", timing])
            seconds = time.perf_counter() - start
            if rc != 0:
                raise SystemExit(f"eto tune --model {path} --time-budget {budget - spent:g} exited {rc}")
            report = json.loads(out.getvalue())
            shutil.copytree(db, snap, dirs_exist_ok=True)
            stage = {"budget_s": budget, "stage_budget_s": budget - spent, "stage_wall_s": seconds,
                     "tuning_s": spent + seconds, "stopped": report.get("stopped"),
                     "estimated_s": report.get("estimated_seconds"),
                     "pending": sum(r["status"] == "pending" for r in report["operators"]),
                     "instant": sum(r["status"] == "pending" and r["latency_s"] is not None
                                    for r in report["operators"]),
                     "candidates": report["candidates"], "snapshot": snap}
            with open(done, "w") as f:
                json.dump(stage, f)
        print(f"eto up to {budget:g} s: {stage['tuning_s']:.0f} s tuning", file=sys.stderr, flush=True)
        spent = stage["tuning_s"]
        stages.append(stage)
    return stages


def run(name: str, budgets: list[float], ms_trials: list[int], work: str, out_dir: str, *, rounds: int,
        layout: str, timing: str = "cold") -> dict:
    import torch

    from experiments._bench import warm_up
    from eto.models import load_relax
    from eto.models.bench import build_with_metaschedule, onnxruntime_session, time_side_by_side, tune_metaschedule
    from eto.models.build import build_model, model_inputs
    from eto.models.examples import export
    from eto.models.layout import with_layout
    from eto.models.tasks import model_tasks
    from eto.store.database import Database
    from eto.target import parse_target, use_threads

    os.makedirs(work, exist_ok=True)
    path, onnx_path = os.path.join(work, f"{name}.pt2"), os.path.join(work, f"{name}.onnx")
    for p, onnx in ((path, False), (onnx_path, True)):
        if not os.path.exists(p):
            export(name, p, onnx=onnx)
    target = parse_target("cpu")
    warm_up(target)  # one-time imports and worker start-up, before either tuning clock
    stages = eto_stages(path, budgets, work, layout, timing)
    model = load_relax(path)
    eto_model = with_layout(model, layout)
    tasks, eto_tasks = model_tasks(model, target), model_tasks(eto_model, target)
    ms_runs = {t: tune_metaschedule(tasks, target, t, os.path.join(work, f"ms-N{t}"),
                                    log=lambda m: print(m, file=sys.stderr, flush=True)) for t in ms_trials}
    threads = use_threads()
    torch.set_num_threads(threads)
    builds = {"untuned": build_model(model, None, target, tasks=tasks)}
    for s in stages:
        builds[f"eto@{s['budget_s']:g}"] = build_model(eto_model, Database(s["snapshot"], readonly=True), target,
                                                       tasks=eto_tasks)
    for t, (db, _) in ms_runs.items():
        builds[f"metaschedule@{t}"] = build_with_metaschedule(db, tasks, target)
    inputs = model_inputs(tasks)
    _, errors, times = time_side_by_side(builds, inputs, torch_module=torch.export.load(path).module(),
                                         onnx_session=onnxruntime_session(onnx_path, threads), rounds=rounds)
    ms_ = {m: statistics.median(t) * 1e3 for m, t in times.items()}
    eto_points = [{"tuning_s": s["tuning_s"], "latency_ms": ms_[f"eto@{s['budget_s']:g}"], **s} for s in stages]
    ms_points = [{"trials_per_task": t, "tuning_s": sec, "latency_ms": ms_[f"metaschedule@{t}"]}
                 for t, (_, sec) in ms_runs.items()]
    from experiments._env import environment

    result = {"experiment": "time_curve", "model": name, "layout": layout, "timing": timing,
              "environment": environment(),
              "threads": threads, "rounds": rounds, "eto": eto_points,
              "metaschedule": ms_points, "lines_ms": {m: ms_[m] for m in ("onnxruntime", "pytorch", "untuned")},
              "max_abs_error_vs_pytorch": errors, "samples_ms": {m: [x * 1e3 for x in t] for m, t in times.items()}}
    result["summary"] = summarize(result)
    out = os.path.join(out_dir, f"time_curve_{name}{'_' + layout if layout != 'NCHW' else ''}.json")
    from experiments._experiment import write_outputs

    write_outputs(result, out, plot)
    return result


def summarize(result: dict) -> dict:
    """At each eto point, MetaSchedule's best latency within the same tuning time (None if it had no
    run that short); and the tuning time each needs to reach MetaSchedule's best latency."""
    ms_points = sorted(result["metaschedule"], key=lambda p: p["tuning_s"])
    best_ms = min((p["latency_ms"] for p in ms_points), default=None)

    def ms_within(seconds: float) -> float | None:
        done = [p["latency_ms"] for p in ms_points if p["tuning_s"] <= seconds]
        return min(done) if done else None

    rows = [{"tuning_s": round(p["tuning_s"], 1), "eto_ms": round(p["latency_ms"], 3),
             "metaschedule_within_ms": None if (m := ms_within(p["tuning_s"])) is None else round(m, 3),
             "eto_vs_onnxruntime": round(result["lines_ms"]["onnxruntime"] / p["latency_ms"], 3),
             # operators the stage did not reach: instant programs (eto.runs.finish), else TVM's default schedules
             "pending": p.get("pending"), "instant": p.get("instant")}
            for p in result["eto"]]
    eto_reach = next((p["tuning_s"] for p in sorted(result["eto"], key=lambda p: p["tuning_s"])
                      if best_ms is not None and p["latency_ms"] <= best_ms), None)
    ms_reach = next((p["tuning_s"] for p in ms_points if p["latency_ms"] == best_ms), None)
    return {"model": result["model"], "layout": result["layout"], "points": rows,
            "metaschedule": [{"trials_per_task": p["trials_per_task"], "tuning_s": round(p["tuning_s"], 1),
                              "ms": round(p["latency_ms"], 3)} for p in ms_points],
            "lines_ms": {k: round(v, 3) for k, v in result["lines_ms"].items()},
            "eto_seconds_to_metaschedule_best": eto_reach, "metaschedule_seconds_to_its_best": ms_reach,
            "time_ratio_to_metaschedule_best": round(ms_reach / eto_reach, 2) if eto_reach and ms_reach else None}


def plot(result: dict, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, label, style in (("eto", "eto (--time-budget, in stages)", "o-"),
                              ("metaschedule", "MetaSchedule tune_relax", "s--")):
        pts = sorted(result[key], key=lambda p: p["tuning_s"])
        ax.plot([p["tuning_s"] for p in pts], [p["latency_ms"] for p in pts], style, label=label)
    lines = result["lines_ms"]
    for name, style, color in (("onnxruntime", ":", "black"), ("pytorch", "-.", "grey"), ("untuned", "--", "lightcoral")):
        ax.axhline(lines[name], linestyle=style, color=color, label=f"{name} (no tuning)")
    ax.set_yscale("log")  # a run that left tasks untuned can be 100x slower than one that did not
    ax.set_xscale("log")
    ax.set_xlabel("tuning seconds (wall, 2 cores)")
    ax.set_ylabel("model latency (ms, median)")
    ax.set_title(f"{result['model']} ({result['layout']}): latency against tuning time, CPU")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def replot(path: str) -> None:
    """Redraw a result file's figure."""
    with open(path) as f:
        plot(json.load(f), path.removesuffix(".json") + ".png")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replot", nargs="+", metavar="RESULT", help="only redraw these result files' figures")
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--model", help="a built-in model (default: the scale's)")
    ap.add_argument("--eto", type=float, nargs="+", help="eto's cumulative budgets in seconds (default: the scale's)")
    ap.add_argument("--ms", type=int, nargs="*",
                    help="MetaSchedule's trials per task (default: the scale's; none given: no MetaSchedule run)")
    ap.add_argument("--layout", choices=["NCHW", "NHWC", "NHWC-winograd"], default="NCHW",
                    help="eto's layout (MetaSchedule: NCHW)")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds (builds interleaved)")
    ap.add_argument("--timing", choices=["cold", "hot"], default="cold", help="how eto's stages time candidates "
                    "(eto tune --timing; MetaSchedule times hot)")
    ap.add_argument("--work", help="where the runs go (default experiments/work/time_curve_<model>)")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    if args.replot:
        for path in args.replot:
            replot(path)
        return 0
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    cfg = SCALES[args.scale]
    name = args.model or cfg["model"]
    budgets = sorted(args.eto or cfg["eto"])
    work = args.work or os.path.join(HERE, "work", f"time_curve_{name}_{args.layout}")
    run(name, budgets, sorted(cfg["ms"] if args.ms is None else args.ms), work, args.out_dir, rounds=args.rounds,
        layout=args.layout, timing=args.timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
