"""Hot against cold, settled by the model: one model tuned with its candidates timed each way
(``eto tune --timing cold``, the CPU default, and ``--timing hot``, MetaSchedule's), both builds timed
side by side, each in a process of its own.

    python -m experiments.timing_ab --model resnet18 --trials 32 [--rounds 5]
    python -m experiments.timing_ab --model bert:40 --source bert --trials 32

Models are corpus models, torchvision classification models or a text model at another input length
(``bert:40``; :func:`eto.models.corpus.make_model`), exported to ONNX as E12 exports them. With
``--source S``, S (``bert``: 128 tokens) is tuned first, cold, into a database both runs read as
``--prior``: the new shape's programs are retuned from S's (instant programs, reuses), only the
timing differs. Without it both runs start from empty databases. Each build then runs in a fresh
process per round, the order alternating (:func:`experiments.corpus_bench.round_medians`), with the
same thread count; the row gives both tuning times, both latencies and cold's speed over hot's
(above 1: the programs picked cold make the faster model), with the per-round range.

Results: ``experiments/results/timing_ab_<model>_N<trials>_<cpu>.json``; the work folder keeps the
databases, so a rerun only times the builds again.
"""

from __future__ import annotations

import argparse
import json
import os

from experiments._env import environment
from experiments.corpus_bench import HERE, add_timing_options, export_onnx
from experiments.zoo_bench import build, time_side_by_side, tune

TIMINGS = ("cold", "hot")


def _tuned(name: str, folder: str, kind: str, priors: list[str], trials: int, log, timing: str = "cold") -> str:
    """``name`` tuned into ``folder/<name>-<kind>-db`` (once: a finished database is reused); its path."""
    onnx_path, db = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}-{kind}-db")
    if not os.path.exists(onnx_path):
        export_onnx(name, onnx_path)
    done = db + ".done.json"
    if not os.path.exists(done):
        seconds, report = tune(onnx_path, db, priors, trials, log, extra=("--timing", timing))
        with open(done, "w") as f:
            json.dump({"seconds": seconds, "tasks": len(report["operators"]), "busy": report.get("busy")}, f)
    return db


def run(args: argparse.Namespace) -> dict:
    folder = os.path.join(args.work, args.model.replace(":", "-"))
    os.makedirs(folder, exist_ok=True)
    row: dict = {"model": args.model, "source": args.source, "trials": args.trials}
    with open(os.path.join(folder, "log.txt"), "a") as log:
        priors = [_tuned(args.source, folder, "source", [], args.trials, log)] if args.source else []
        libs = {}
        for timing in TIMINGS:
            db = _tuned(args.model, folder, timing, priors, args.trials, log, timing)
            with open(db + ".done.json") as f:
                done = json.load(f)
            row[f"{timing}_s"], row[f"{timing}_busy"] = done["seconds"], done["busy"]
            libs[timing] = os.path.join(folder, f"{args.model}-{timing}.so")
            build(os.path.join(folder, f"{args.model}.onnx"), db, libs[timing], log)
    row.update(time_side_by_side(args.model, libs, args.rounds, args.repeat, args.threads, reference="hot"))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="corpus or torchvision model, or TEXT:TOKENS (bert:40)")
    p.add_argument("--source", help="a model tuned first (cold) whose database both runs take as --prior")
    p.add_argument("--trials", type=int, default=32)
    add_timing_options(p, "timing_ab")
    args = p.parse_args(argv)
    row = run(args)
    env = environment()
    out = args.out or os.path.join(HERE, "results", f"timing_ab_{args.model.replace(':', '-')}_N{args.trials}_"
                                   f"{env['mcpu']}.json")
    with open(out, "w") as f:
        json.dump({"experiment": "timing_ab", "environment": env, "scale": "small", "rounds": args.rounds,
                   "repeat": args.repeat, "row": row}, f, indent=1)
    print(f"{args.model}: tuned cold {row['cold_s']:.0f} s, hot {row['hot_s']:.0f} s; built model cold "
          f"{row['cold_ms']:.2f} ms, hot {row['hot_ms']:.2f} ms: cold {row['cold_speed']:.2f}x hot's speed "
          f"({row['cold_speed_rounds'][0]:.2f}-{row['cold_speed_rounds'][1]:.2f})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
