"""One model built with several tuning databases, timed interleaved in one process.

``model_bench.py`` compares eto with MetaSchedule within one run; this compares runs: e.g. the eto
database of an earlier version of the code against today's, with MetaSchedule's beside them, so a
change of end-to-end latency between two runs can be told from the timing of two processes.
Databases are eto databases (``eto tune --model``) or MetaSchedule work directories (``ms:DIR``,
as ``model_bench.py`` leaves them); the first is the reference.

    python -m experiments.tools.model_dbs --model experiments/work/model_bench_N128/resnet50.pt2 \\
        ms128=ms:experiments/work/model_bench_N128/resnet50-ms-N128 \\
        eto128=experiments/work/model_bench_N128/resnet50-eto-N128 \\
        eto64_old=experiments/work/model_bench_xepilogue/resnet50-eto-N64 --out F.json

Prints per database the share of tunable FLOPs it covers and the median latency over ``--rounds``
rounds (the databases' order alternating), and the latency relative to the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys


from experiments._env import environment, metaschedule_dir


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="an ONNX or torch.export (.pt2) file")
    ap.add_argument("databases", nargs="+", metavar="NAME=DIR", help="eto databases or ms:DIR; the reference first")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    bad = [a for a in args.databases if "=" not in a or not a.split("=", 1)[0]]
    if bad:
        ap.error(f"databases are NAME=DIR: got {', '.join(bad)}")
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    from tvm.s_tir import meta_schedule as ms

    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.bench import build_with_metaschedule
    from eto.models.build import build_model, model_inputs
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    target = parse_target("cpu")
    model = load_relax(args.model)
    tasks = model_tasks(model, target)
    inputs = model_inputs(tasks)
    builds = {}
    for spec in args.databases:
        name, path = spec.split("=", 1)
        if metaschedule_dir(path):
            builds[name] = build_with_metaschedule(ms.database.JSONDatabase(work_dir=metaschedule_dir(path)), tasks,
                                                   target)
        else:
            builds[name] = build_model(model, Database(path, readonly=True), target, tasks=tasks)
    outputs = {name: b.run(inputs) for name, b in builds.items()}
    ref = next(iter(builds))
    errors = {name: max(float(abs(o - r).max()) for o, r in zip(out, outputs[ref])) for name, out in outputs.items()}
    times: dict[str, list[float]] = {name: [] for name in builds}
    names = list(builds)
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name] += builds[name].time(inputs, repeat=3, min_repeat_ms=50)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {statistics.median(t) * 1e3:.2f} ms" for n, t in times.items()), flush=True)
    rows = {}
    for name, b in builds.items():
        med = statistics.median(times[name])
        rows[name] = {"median_ms": med * 1e3, "vs_" + ref: statistics.median(times[ref]) / med,
                      "applied_flops_share": b.applied_flops_share, "max_abs_error_vs_" + ref: errors[name]}
        print(f"{name}: {med * 1e3:.2f} ms, throughput vs {ref} {rows[name]['vs_' + ref]:.3f}, "
              f"tuned FLOPs {b.applied_flops_share:.0%}, max abs error vs {ref} {errors[name]:.1e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"benchmark": "model_dbs", "model": args.model, "databases": args.databases,
                       "rounds": args.rounds, "environment": environment(), "results": rows}, f, indent=1)
        print("written", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
