"""E9 (issue 17): from a model file to a faster model, eto against MetaSchedule and PyTorch end to end.

For each model built in code (:mod:`eto.models.examples`, random weights, exported with
``torch.export``): ``eto tune --model`` tunes the fused tasks Relax compiles (timed here, the
process's one-time costs paid before, by ``_bench.warm_up``), then ``eto bench`` (:func:`eto.models.bench.bench_model`)
builds the model untuned, with eto's database and with MetaSchedule's own tuning of the same tasks
at the same per-task budget, and times them with PyTorch eager, interleaved in one process; then
again in ``--processes`` - 1 fresh processes (this script, timing only), whose latencies join the
first's: a model's latency depends on the process it runs in (the BERT-Base layer's eto build 14.0 ms
in one, 9.7 ms in the next, beside MetaSchedule's 10.1 and 9.2 ms; docs/findings.md,
``process_lottery.py``), so one process would settle the comparison by its draw. ``per_process_ms`` keeps each
process's medians.

    python -m experiments.model_bench --models resnet50 bert_layer --trials 64   # ~1 h on 2 cores
    python -m experiments.model_bench --scale ci                                 # tiny models, ~3 min

Both tuning runs are resumable: rerunning with the same ``--work`` reuses finished runs (their
recorded wall times too). Results: ``experiments/results/model_bench_<model>_N<trials>.json`` + PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
SCALES = {"ci": {"models": ["tiny_cnn", "tiny_transformer"], "trials": 8},
          "small": {"models": ["resnet50", "bert_layer"], "trials": 64}}


def run_model(name: str, trials: int, work: str, out_dir: str, *, rounds: int, search: str,
              fast_math: bool = False, layout: str = "NCHW", processes: int = 1) -> dict:
    import torch

    from eto.cli import main as eto_main
    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.fast_math import fast_math as approximate
    from eto.models.bench import bench_model, onnxruntime_session
    from eto.models.examples import export
    from eto.models.layout import with_layout
    from eto.target import parse_target

    os.makedirs(work, exist_ok=True)
    tag = _tag(name, layout)
    path = os.path.join(work, f"{name}.pt2")
    if not os.path.exists(path):
        export(name, path)
    db_dir, timing = os.path.join(work, f"{tag}-eto-N{trials}"), os.path.join(work, f"{tag}-eto-N{trials}.time.json")
    if os.path.exists(timing):
        with open(timing) as f:
            saved = json.load(f)
        eto_wall, tune_report = saved["seconds"], saved.get("report")
    else:
        text = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(text):
            rc = eto_main(["tune", "--model", path, "--trials", str(trials), "--db", db_dir, "--json", "--search", search,
                           "--layout", layout, *(["--fast-math"] if fast_math else [])])
        eto_wall = time.perf_counter() - start
        if rc != 0:
            raise SystemExit(f"eto tune --model {path} exited {rc}")
        tune_report = json.loads(text.getvalue())
        with open(timing, "w") as f:
            json.dump({"seconds": eto_wall, "report": tune_report}, f)
    torch.set_num_threads(int(os.environ["TVM_NUM_THREADS"]))
    onnx_path = os.path.join(work, f"{name}.onnx")  # the same weights, for ONNX Runtime
    if not os.path.exists(onnx_path):
        export(name, onnx_path, onnx=True)
    target = parse_target("cpu")
    model = with_layout(approximate(load_relax(path), fast_math), layout)
    report = bench_model(model, target, database=Database(db_dir, readonly=True),
                         torch_module=torch.export.load(path).module(),
                         onnx_session=onnxruntime_session(onnx_path, int(os.environ["TVM_NUM_THREADS"])),
                         ms_trials=trials,
                         ms_work_dir=os.path.join(work, f"{tag}-ms-N{trials}"), rounds=rounds,
                         log=lambda m: print(f"[{name}] {m}", file=sys.stderr, flush=True))
    report, per_process = in_fresh_processes(report, name, trials, work, processes - 1, rounds=rounds, search=search,
                                             fast_math=fast_math, layout=layout)
    # eto's tuning time is its wall time, like MetaSchedule's (the database records per-task seconds)
    recorded = report.result("eto").tuning_s
    report = replace(report, results=tuple(replace(r, tuning_s=eto_wall) if r.method == "eto" else r
                                           for r in report.results))
    result = report.to_json()
    eto, ms, pt, ort = (report.result(m) for m in ("eto", "metaschedule", "pytorch", "onnxruntime"))
    result["eto_tune_wall_s"] = eto_wall
    result["per_process_ms"] = per_process
    result["summary"] = {
        "model": name, "trials_per_task": trials, "fast_math": fast_math, "layout": layout,
        "tunable_tasks": sum(1 for t in result["tasks"] if t["operator"]),
        "eto_tune_wall_s": round(eto_wall, 1), "eto_recorded_s": round(recorded, 1),
        "metaschedule_s": round(ms.tuning_s, 1), "tuning_speedup_wall": round(ms.tuning_s / eto_wall, 2),
        "latency_ms": {r.method: round(r.median_s * 1e3, 3) for r in report.results},
        "eto_vs_metaschedule_throughput": round(ms.median_s / eto.median_s, 3),
        "timing_processes": processes,
        "eto_vs_metaschedule_per_process": [round(m / e, 3) for m, e in zip(per_process["metaschedule"],
                                                                            per_process["eto"])],
        "eto_vs_pytorch_throughput": round(pt.median_s / eto.median_s, 3) if pt else None,
        "eto_vs_onnxruntime_throughput": round(ort.median_s / eto.median_s, 3) if ort else None,
        "eto_applied_flops_share": eto.applied_flops_share,
        "max_abs_error_vs_pytorch": {r.method: r.max_abs_error for r in report.results},
        **(plan_summary(tune_report) if tune_report else {}),
    }
    result["eto_tune_report"] = tune_report
    out = os.path.join(out_dir, result_name(name, layout, trials))
    os.makedirs(out_dir, exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    plot(report, trials, out)
    print(json.dumps(result["summary"], indent=1))
    return result


def _tag(name: str, layout: str) -> str:
    """A model's work folders' prefix: its name, and the layout where not NCHW (the names before --layout)."""
    return name if layout == "NCHW" else f"{name}-{layout}"


def result_name(name: str, layout: str, trials: int) -> str:
    """A run's result file: ``model_bench_<model>[_nhwc]_N<trials>.json``."""
    return f"model_bench_{_tag(name, layout).lower().replace('-', '_')}_N{trials}.json"


def in_fresh_processes(report, name: str, trials: int, work: str, more: int, **options) -> tuple:
    """``report`` with the latencies of ``more`` fresh processes' timings (this script, ``--processes 1``,
    the tuning runs in ``work`` reused) joined to each method's, and each process's medians (ms)."""
    import subprocess
    import tempfile

    from eto.models.bench import BenchReport, join_processes

    reports = [report]
    for _ in range(more):
        with tempfile.TemporaryDirectory(prefix="model-bench-") as out:
            cmd = [sys.executable, "-m", "experiments.model_bench", "--models", name, "--trials", str(trials),
                   "--work", os.path.abspath(work),
                   "--out-dir", out, "--processes", "1", "--rounds", str(options["rounds"]),
                   "--search", options["search"], "--layout", options["layout"],
                   *(["--fast-math"] if options["fast_math"] else [])]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=os.path.dirname(HERE))
            with open(os.path.join(out, result_name(name, options["layout"], trials))) as f:
                reports.append(BenchReport.from_json(json.load(f)))
    joined = join_processes(reports)
    return joined, {r.method: [round(m * 1e3, 3) for m in r.process_medians_s] for r in joined.results}


def plan_summary(report: dict) -> dict:
    """How eto tuned the model (roots, reuses, bridges) and how the plan's estimates held."""
    rows = [r for r in report["operators"] if r["status"] == "tuned" and not r["key"].startswith("TASK(")]
    functions = [r for r in report["operators"] if r["key"].startswith("TASK(")]  # outside the plan
    reused = [r for r in rows if r["method"] == "reuse" and r["estimated_seconds"]]
    ratio = [r["seconds"] / r["estimated_seconds"] for r in reused]
    cand = [r["candidates"] / r["estimated_candidates"] for r in reused if r["estimated_candidates"]]
    role = ["backend" if r["method"] == "polish" else r["method"] for r in rows]  # a polished root is a root
    return {"eto_plan": {m: role.count(m) for m in sorted(set(role))},
            "eto_roots_won_by_polish": sum(r["method"] == "polish" for r in rows),
            "eto_bridges": sum(r["frequency"] == 0 for r in rows),
            "eto_candidates": report["candidates"],
            "eto_functions": {"tasks": len(functions), "candidates": sum(r["candidates"] for r in functions),
                              "seconds": round(sum(r["seconds"] for r in functions), 1)},
            "eto_estimated_seconds": round(report["estimated_seconds"] or 0.0, 1),
            "reuse_seconds_over_estimate_mean": round(sum(ratio) / len(ratio), 2) if ratio else None,
            "reuse_candidates_over_estimate_mean": round(sum(cand) / len(cand), 2) if cand else None}


def plot(report, trials: int, out: str) -> None:
    from eto.plots import model_bench_figure

    model_bench_figure(report, title=f"{report.model}: eto vs MetaSchedule at {trials} trials/task, CPU (2 cores)"
                       ).savefig(out.removesuffix(".json") + ".png", dpi=120)


def replot(path: str) -> None:
    """Redraw a result file's figure, eto's tuning time being its wall time (files written before
    the figure showed the seconds its database recorded; those stay in the summary)."""
    from eto.models.bench import BenchReport

    with open(path) as f:
        result = json.load(f)
    report = BenchReport.from_json(result)
    report = replace(report, results=tuple(replace(r, tuning_s=result["eto_tune_wall_s"]) if r.method == "eto" else r
                                           for r in report.results))
    result["results"] = report.to_json()["results"]
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    plot(report, result["summary"]["trials_per_task"], path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--models", nargs="+", help="built-in models (default: the scale's)")
    ap.add_argument("--trials", type=int, help="backend trials per task, both methods (default: the scale's)")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds (methods interleaved)")
    ap.add_argument("--processes", type=int, default=3,
                    help="processes the timing runs in, this one and fresh ones (the process lottery)")
    ap.add_argument("--search", choices=["evolutionary", "light"], default="evolutionary",
                    help="eto's backend search (MetaSchedule's run always uses its evolutionary search)")
    ap.add_argument("--work", default=os.path.join(HERE, "work", "model_bench"))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--layout", choices=["NCHW", "NHWC", "NHWC-winograd"], default="NCHW",
                    help="the layout eto and MetaSchedule tune and build the convolutions in (eto tune --layout)")
    ap.add_argument("--fast-math", action="store_true",
                    help="every TVM build (eto, MetaSchedule, untuned) with erf/exp/softmax approximated (eto.models.fast_math)")
    ap.add_argument("--replot", nargs="+", metavar="RESULT", help="only redraw these result files' figures")
    args = ap.parse_args(argv)
    if args.replot:
        for path in args.replot:
            replot(path)
        return 0
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    from experiments._bench import warm_up

    from eto.models.bench import MS_TIME_FILE
    from eto.target import parse_target

    cfg = SCALES[args.scale]
    names, trials = args.models or cfg["models"], args.trials or cfg["trials"]
    if not all(os.path.exists(os.path.join(args.work, f"{_tag(n, args.layout)}-eto-N{trials}.time.json"))
               and os.path.exists(os.path.join(args.work, f"{_tag(n, args.layout)}-ms-N{trials}", MS_TIME_FILE))
               for n in names):
        warm_up(parse_target("cpu"))  # one-time imports and worker start-up, before either tuning clock
    for name in names:
        run_model(name, trials, args.work, args.out_dir, rounds=args.rounds, search=args.search,
                  fast_math=args.fast_math, layout=args.layout, processes=max(args.processes, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
