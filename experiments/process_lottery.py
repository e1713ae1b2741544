"""The process lottery: a database's best programs timed in many fresh processes, one median each.

    python experiments/process_lottery.py --db experiments/work/mb56/bert_layer-eto-N200 --processes 8 \\
        --threads 2 1 --out experiments/results/process_lottery_bert_layer.json

Every process is a fresh runner worker (MetaSchedule's ``LocalRunner``, the full ``MeasureConfig``:
5 repeats of >= 40 ms) that times each program of at least ``--min-gflop`` once, and then ``--again``
more times, so a process's own spread shows beside the spread between processes. ``--env NAME=VALUE``
sets more variables in the runner (``TVM_BIND_THREADS=0``: TVM pins no thread). Per program and thread
count: the latency its tuning run recorded, each process's medians, and the slowest process over the
fastest. About 2.7 s per process to start it, plus the programs' timings.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import warm_measurer  # noqa: E402
from _env import environment  # noqa: E402


def _set_env(env: dict[str, str]) -> None:
    """Runner worker initializer (picklable by reference)."""
    os.environ.update(env)


def time_in_fresh_processes(mods: list, target, *, processes: int, again: int, env: dict[str, str]) -> list[list]:
    """``[program][process]`` -> the process's medians (its first and ``again`` more), each process new."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.measure.builder import PersistentBuilder
    from tuner.measure.measurer import MeasureConfig, Measurer

    config = MeasureConfig(settle_processes=1)
    builder = PersistentBuilder(timeout_sec=config.build_timeout_s)
    out: list[list] = [[] for _ in mods]
    try:
        for _ in range(processes):
            runner = ms.runner.LocalRunner(timeout_sec=config.run_timeout_s, evaluator_config=config.evaluator(),
                                           initializer=functools.partial(_set_env, env))
            m = Measurer(builder, runner, config)
            warm_measurer(m, target)
            seen: list[list[float]] = [[] for _ in mods]
            for _ in range(1 + again):
                for i, r in enumerate(m.measure(mods, target)):
                    seen[i].append(r.median)
            for i, s in enumerate(seen):
                out[i].append(s)
            runner.pool.shutdown()
    finally:
        builder.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="an eto database")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--again", type=int, default=2, help="more timings of each program in the same process")
    ap.add_argument("--threads", type=int, nargs="+", default=[2], help="TVM_NUM_THREADS values, one pass each")
    ap.add_argument("--min-gflop", type=float, default=0.1, help="programs of at least this many GFLOP")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="more runner variables")
    ap.add_argument("--out", required=True, help="results JSON")
    args = ap.parse_args(argv)
    bad = [e for e in args.env if "=" not in e]
    if bad:
        ap.error(f"--env takes NAME=VALUE: got {', '.join(bad)}")

    from eto.store.database import Database
    from eto.target import parse_target
    from tuner.measure.apply import scheduled_module

    target = parse_target("cpu")
    db = Database(args.db, readonly=True)
    progs = [p for p in db.best_programs(target, predicted=False) if p.op.flops >= args.min_gflop * 1e9]
    if not progs:
        ap.error(f"{args.db}: no tuned program of at least {args.min_gflop} GFLOP")
    mods = [scheduled_module(p.tuning_record) for p in progs]
    rows = [{"op": p.op.name, "method": p.method, "recorded_ms": p.latency_s * 1e3} for p in progs]
    for threads in args.threads:
        env = {"TVM_NUM_THREADS": str(threads), **dict(e.split("=", 1) for e in args.env)}
        timed = time_in_fresh_processes(mods, target, processes=args.processes, again=args.again, env=env)
        for row, per_process in zip(rows, timed):
            medians = [statistics.median(s) for s in per_process]
            row[f"threads_{threads}"] = {
                "per_process_ms": [[round(x * 1e3, 4) for x in s] for s in per_process],
                "slowest_over_fastest_process": max(medians) / min(medians),
                "within_process_spread": max(max(s) / min(s) for s in per_process)}
            print(f"{row['op'][:48]:48s} {threads}T recorded {row['recorded_ms']:.3f} ms; processes "
                  + " ".join(f"{x * 1e3:.3f}" for x in medians), flush=True)
    with open(args.out, "w") as f:
        json.dump({"experiment": "process_lottery", "db": args.db, "processes": args.processes, "again": args.again,
                   "env": args.env, "environment": environment(), "programs": rows}, f, indent=1)
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
