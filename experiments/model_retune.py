"""E7 on a model (issues 16, 17): a model tuned at one size, built fast at new sizes in seconds.

A database ``eto tune --model`` wrote for a built-in model at its example size (``model_bench.py``'s
work folder) serves the same model exported with its dynamic dimension symbolic
(:func:`eto.models.examples.export` with ``dynamic=True``). For each new size, into a copy of the
database: ``eto retune --model --vary DIM=SIZE --instant-only`` (timed: the instant programs), then
``eto retune`` without it into a copy of that (timed: the reuses, and the backend for the functions
outside the catalogue); then the model at that size is built and timed, interleaved in one process
(:func:`eto.models.bench.bench_model`): untuned, with the instant programs, with the retuned
database, PyTorch eager and, for the ``--ms-sizes``, MetaSchedule's own tuning of that size from
scratch at ``--ms-trials`` per task.

    python -m experiments.model_retune --db experiments/work/mb_bert55/bert_layer-eto-N200 \\
        --model bert_layer --sizes 64 192 256 --ms-sizes 192 --ms-trials 200 \\
        --work experiments/work/mr_bert --out experiments/results/model_retune_bert_layer_xeon.json

Resumable: a size whose retunes finished (their time files in ``--work``) is not retuned again, and
MetaSchedule's finished runs are reused (``eto bench --ms-work``). Costs: seconds for the instant
programs, a minute or two per size for the retune, one MetaSchedule run per ``--ms-sizes`` entry.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import time



def _retune(path: str, dim: str, value: int, db: str, trials: int, *, instant_only: bool) -> dict:
    """``eto retune --model`` at one size into ``db``, timed; resumable from its time file."""
    from eto.cli import main as eto_main

    timing = f"{db}.time.json"
    if os.path.exists(timing):
        with open(timing) as f:
            return json.load(f)
    text, start = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(text):
        rc = eto_main(["retune", "--model", path, "--vary", f"{dim}={value}", "--db", db, "--trials", str(trials),
                       "--json", *(["--instant-only"] if instant_only else [])])
    out = {"seconds": time.perf_counter() - start, "rc": rc, "report": json.loads(text.getvalue())}
    with open(timing, "w") as f:
        json.dump(out, f)
    return out


def run_size(path: str, dim: str, value: int, base_db: str, work: str, *, trials: int, ms_trials: int | None,
             rounds: int) -> dict:
    import torch

    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.bench import bench_model
    from eto.target import parse_target

    here = os.path.join(work, f"{dim}_{value}")
    os.makedirs(here, exist_ok=True)
    inst_db, full_db = os.path.join(here, "instant"), os.path.join(here, "retuned")
    if not os.path.exists(inst_db):
        shutil.copytree(base_db, inst_db)
    inst = _retune(path, dim, value, inst_db, trials, instant_only=True)
    if not os.path.exists(full_db):
        shutil.copytree(inst_db, full_db)
    full = _retune(path, dim, value, full_db, trials, instant_only=False)
    log = lambda m: print(f"[{dim}={value}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    report = bench_model(load_relax(path, dims={dim: value}), parse_target("cpu"),
                         database=Database(full_db, readonly=True),
                         others={"instant": Database(inst_db, readonly=True)},
                         torch_module=torch.export.load(path).module(), ms_trials=ms_trials,
                         ms_work_dir=os.path.join(here, f"ms-N{ms_trials}") if ms_trials else None,
                         rounds=rounds, log=log)
    lat = {r.method: r.median_s for r in report.results}
    ms = report.result("metaschedule")
    eto_s = inst["seconds"] + full["seconds"]
    summary = {
        "size": value, "instant_s": round(inst["seconds"], 1), "retune_s": round(full["seconds"], 1),
        "latency_ms": {m: round(v * 1e3, 3) for m, v in lat.items()},
        "retuned_vs_untuned": round(lat["untuned"] / lat["eto"], 3),
        "instant_vs_untuned": round(lat["untuned"] / lat["instant"], 3),
        "retuned_vs_pytorch": round(lat["pytorch"] / lat["eto"], 3) if "pytorch" in lat else None,
        "metaschedule_s": round(ms.tuning_s, 1) if ms else None,
        "retuned_vs_metaschedule": round(lat["metaschedule"] / lat["eto"], 3) if ms else None,
        "instant_vs_metaschedule": round(lat["metaschedule"] / lat["instant"], 3) if ms else None,
        "time_speedup": round(ms.tuning_s / eto_s, 2) if ms else None,
        "instant_time_speedup": round(ms.tuning_s / inst["seconds"], 1) if ms else None,
        "applied_flops_share": {r.method: r.applied_flops_share for r in report.results
                                if r.applied_flops_share is not None},
        "max_abs_error_vs_pytorch": {r.method: r.max_abs_error for r in report.results},
    }
    print(json.dumps(summary), flush=True)
    return {"summary": summary, "bench": report.to_json(), "instant": inst["report"], "retune": full["report"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a database eto tune --model wrote at the model's example size")
    ap.add_argument("--model", default="bert_layer", help="a built-in model (eto.models.examples)")
    ap.add_argument("--sizes", type=int, nargs="+", required=True, help="the new sizes of its dynamic dimension")
    ap.add_argument("--trials", type=int, default=200, help="backend trials where nothing can be reused")
    ap.add_argument("--ms-trials", type=int, default=200, help="MetaSchedule's trials per task at --ms-sizes")
    ap.add_argument("--ms-sizes", type=int, nargs="*", default=(), help="sizes also tuned by MetaSchedule")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    import torch

    from eto.models import load_relax, symbolic_dims
    from eto.models.examples import export

    torch.set_num_threads(int(os.environ["TVM_NUM_THREADS"]))
    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, f"{args.model}_dynamic.pt2")
    if not os.path.exists(path):
        export(args.model, path, dynamic=True)
    (dim,) = symbolic_dims(load_relax(path))  # torch.export names it s0, s27...
    results = [run_size(path, dim, v, args.db, args.work, trials=args.trials, rounds=args.rounds,
                        ms_trials=args.ms_trials if v in args.ms_sizes else None) for v in args.sizes]
    out = {"model": args.model, "source_db": args.db, "dim": dim, "trials": args.trials,
           "ms_trials": args.ms_trials, "sizes": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
