"""Re-measure the best programs of several databases side by side, operator by operator.

    python -m experiments.tools.compare_dbs --opset resnet50 ms=DB_A eto=DB_B [more=DB_C ...] --out F.json
    python -m experiments.tools.compare_dbs --model resnet50.pt2 ms=ms:MS_WORK_DIR eto=DB --out F.json

    python -m experiments.tools.compare_dbs --model bert_layer.pt2 --kernels ms=ms:MS_WORK_DIR eto=DB --out F.json

``--kernels`` (with ``--model``) times each database's built model kernel by kernel instead, inside
whole-model runs (``BuiltModel.kernel_times``), the builds alternating over the rounds in one
process: a task that runs slower in the model than alone shows there, not in the isolated timings.
``--model`` takes the operators from a model file: the fused tasks Relax compiles, weighted by
calls (what ``eto tune --model`` tunes), so a model's end-to-end gap (``model_bench.py``) can be
traced to its tasks. ``ms:DIR`` is a MetaSchedule work directory (``tune_tasks``'s JSON database,
as ``model_bench.py`` leaves it). The first database is the reference: every other one's
per-operator and frequency-weighted throughput is given relative to it. The programs of all
databases are measured in one process, interleaved in rounds (``set_bench.remeasure``), so a ratio
never mixes two sessions' clocks. Used
for ablations where each database comes from a separate ``eto tune`` run; it compares quality only,
never tuning time (that needs both methods timed in one run: ``set_bench.py``).
``--timing cold`` re-measures every program as eto times candidates on a CPU (the caches flushed
before each single run) instead of hot (MetaSchedule's way, the default).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any


from experiments._env import environment, metaschedule_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--opset", help="built-in set name or JSON file")
    source.add_argument("--model", help="an ONNX or torch.export (.pt2) file: its fused tasks")
    ap.add_argument("databases", nargs="+", metavar="NAME=DIR", help="the reference first")
    ap.add_argument("--dim", action="append", metavar="NAME=SIZE", help="with --model: a symbolic dimension's size")
    ap.add_argument("--rounds", type=int, default=4,
                    help="interleaved re-measurement rounds, each in a fresh process (the process lottery)")
    ap.add_argument("--kernels", action="store_true", help="with --model: each build's kernels timed inside the model")
    ap.add_argument("--timing", choices=("hot", "cold"), default="hot",
                    help="how each program is re-measured: hot (several runs a sample) or cold (as eto tunes on a CPU)")
    ap.add_argument("--out", help="results JSON")
    args = ap.parse_args(argv)
    if args.kernels and not args.model:
        ap.error("--kernels needs --model")

    from tvm.target import Target

    from eto.store.database import Database
    from eto.operators.opsets import load_opset
    from eto.target import parse_target
    from experiments.set_bench import remeasure, weighted

    bad = [a for a in args.databases if "=" not in a or not a.split("=", 1)[0]]
    if bad:
        ap.error(f"databases are NAME=DIR: got {', '.join(bad)}")
    dbs = dict(a.split("=", 1) for a in args.databases)
    if args.model:
        from eto.models import load_relax
        from eto.models.tasks import model_tasks

        from eto.cli.ops import parse_dims

        opset = model_tasks(load_relax(args.model, dims=parse_dims(args.dim)), parse_target("cpu")).opset
    else:
        opset = load_opset(args.opset)
    opened = {k: _MetaSchedule(metaschedule_dir(v)) if metaschedule_dir(v) else Database(v, readonly=True)
              for k, v in dbs.items()}
    if args.kernels:
        return _kernels(args, dbs, opened)
    first = next((db.best_programs() for db in opened.values() if isinstance(db, Database)), None)
    if first is not None and not first:
        ap.error(f"{next(v for v in dbs.values() if not v.startswith('ms:'))} holds no program")
    target = Target(first[0].target) if first else parse_target("cpu")
    progs = {k: [db.best(e.op, target) for e in opset] for k, db in opened.items()}
    by_round: dict[str, list[list[float]]] = {}
    lat = remeasure(progs, opset, target, args.rounds, by_round, timing=args.timing)
    ref = next(iter(dbs))
    rows = []
    for i, e in enumerate(opset):
        row = {"op": e.op.name, "frequency": e.frequency}
        for k in dbs:
            p = progs[k][i]
            row[k] = {"latency_us": lat[k][i] * 1e6, "vs_" + ref: lat[ref][i] / lat[k][i],
                      "method": p.method if p else None, "per_process_us": [x * 1e6 for x in by_round[k][i]]}
        rows.append(row)
        print(f"{e.op.name:34s} f={e.frequency} " + " ".join(
            f"{k}={lat[k][i] * 1e6:9.1f}us ({lat[ref][i] / lat[k][i]:.2f})" for k in dbs), flush=True)
    summary = {k: {"weighted_latency_us": weighted(opset, lat[k]) * 1e6,
                   "throughput_vs_" + ref: weighted(opset, lat[ref]) / weighted(opset, lat[k]),
                   # each round is a fresh process: the spread of these is the process lottery's
                   "weighted_per_process_us": [weighted(opset, [by_round[k][i][r] for i in range(len(opset))]) * 1e6
                                               for r in range(args.rounds)]} for k in dbs}
    for k, s in summary.items():
        print(f"{k}: weighted {s['weighted_latency_us']:.1f} us, throughput vs {ref} {s['throughput_vs_' + ref]:.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"benchmark": "compare_dbs", "opset": args.opset, "model": args.model, "databases": dbs,
                       "reference": ref, "rounds": args.rounds, "timing": args.timing, "target": str(target),
                       "environment": environment(),
                       "summary": summary, "per_operator": rows}, f, indent=1)
    return 0


def _kernels(args, dbs: dict[str, str], opened: dict) -> int:
    """Each database's model built once, its kernels timed inside whole-model runs, the builds
    alternating over ``args.rounds`` rounds; per kernel call site the median over the rounds."""
    import statistics

    from eto.models import load_relax
    from eto.models.bench import build_with_metaschedule
    from eto.models.build import build_model, model_inputs
    from eto.models.tasks import model_tasks
    from eto.target import parse_target, use_threads

    from eto.cli.ops import parse_dims

    use_threads()
    target = parse_target("cpu")
    model = load_relax(args.model, dims=parse_dims(args.dim))
    tasks = model_tasks(model, target)
    inputs = model_inputs(tasks)
    built = {k: build_with_metaschedule(db.db, tasks, target) if isinstance(db, _MetaSchedule)
             else build_model(model, db, target, tasks=tasks) for k, db in opened.items()}
    seen: dict[str, dict[str, list[float]]] = {k: {} for k in built}  # per build: call site -> seconds
    for r in range(args.rounds):
        for k in (list(built) if r % 2 == 0 else list(reversed(built))):
            for name, secs in built[k].kernel_times(inputs).items():
                for i, s in enumerate(secs):
                    seen[k].setdefault(f"{name}#{i}", []).append(s)
    ref = next(iter(dbs))
    med = {k: {site: statistics.median(v) for site, v in sites.items()} for k, sites in seen.items()}
    rows = []
    for site in sorted(med[ref], key=lambda s: -med[ref][s]):
        row = {"kernel": site, **{k: {"us": med[k][site] * 1e6, "vs_" + ref: med[ref][site] / med[k][site]}
                                  for k in dbs if site in med[k]}}
        rows.append(row)
        print(f"{site[:60]:60s} " + " ".join(f"{k}={row[k]['us']:9.1f}us ({row[k]['vs_' + ref]:.2f})"
                                            for k in dbs if k in row), flush=True)
    totals = {k: sum(med[k].values()) * 1e6 for k in dbs}
    print("sum of kernels: " + ", ".join(f"{k} {t:.1f} us ({totals[ref] / t:.3f})" for k, t in totals.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"benchmark": "compare_dbs --kernels", "model": args.model, "databases": dbs, "reference": ref,
                       "rounds": args.rounds, "target": str(target), "environment": environment(),
                       "kernel_sum_us": totals, "per_kernel": rows}, f, indent=1)
    return 0


@dataclass(frozen=True)
class _Program:
    """A MetaSchedule work directory's best record of one operator, as ``remeasure`` reads it."""

    tuning_record: Any
    method: str = "metaschedule"


class _MetaSchedule:
    """A MetaSchedule JSON database read like an eto one: ``best(op, target)``."""

    def __init__(self, work_dir: str) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.db = ms.database.JSONDatabase(work_dir=work_dir)

    def best(self, op, target) -> _Program | None:
        from tvm import IRModule

        record = self.db.query_tuning_record(IRModule({"main": op.prim_func()}), target, "main")
        return _Program(record) if record is not None else None


if __name__ == "__main__":
    raise SystemExit(main())
