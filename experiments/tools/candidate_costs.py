"""What a reuse search's candidates cost to compile, against what they run: where reuse seconds go.

A reuse's seconds are its candidates' builds (LLVM, two at a time on 2 cores) and runs, and its
set-up. Every candidate an eto database's reuses measured is in its progress file; this rebuilds each (the same
TVM, now, nothing else running) and times the build, beside the run time the search recorded, the
op's best, and the register model's accumulators for the candidate's register block
(:mod:`tuner.reuse.registers`: vectors its innermost tiles keep live per reduction step, against the
machine's vector registers). It shows whether slow builds are also slow programs, so that a search
could skip them unbuilt.

    python -m experiments.tools.candidate_costs --db experiments/work/set_bench_bert_base_N100_xeon_s2/seed2/eto \\
        --out experiments/results/candidate_costs_bert_base_N100_xeon_s2.json

Prints one line per slow build (over ``--slow`` seconds) and a summary by accumulators: candidates,
median and total build seconds, and the best of them relative to the op's best.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time


from experiments._env import environment


def accumulators(cfg, nest, lanes: int) -> int:
    """Vector accumulators of ``cfg``'s register block (its innermost space tiles) on ``nest``."""
    from tuner.analysis.tiling import accumulators as block_accumulators

    return block_accumulators(nest.space, tuple(f[-1] for f in cfg.space), lanes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="an eto database whose runs reused operators")
    ap.add_argument("--slow", type=float, default=1.0, help="print builds slower than this (seconds)")
    ap.add_argument("--out", help="results JSON")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    import tvm
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from eto.store.database import Database
    from tuner.measure.apply import build, scheduled_module
    from tuner.analysis.features import program_features
    from tuner.analysis.kinds import kind_of
    from tuner.analysis.host import vector_bits, vector_registers

    path = os.path.join(args.db, "eto_progress.json")
    if not os.path.isfile(path):
        raise SystemExit(f"{args.db}: no eto_progress.json (not an eto database, or nothing was tuned)")
    db = Database(args.db, readonly=True)
    lanes, registers = max(vector_bits() // 32, 1), vector_registers()
    rows: list[dict] = []
    with open(path) as f:
        for line in f:
            batch = json.loads(line)
            if batch.get("method") != "reuse":
                continue
            target = tvm.target.Target(json.loads(batch["target"]))
            for wl, rec, secs in batch["records"]:
                record = TuningRecord.from_json(rec, db.workload(wl))
                cfg, nest = program_features(record, kind_of(target))
                start = time.perf_counter()
                build(scheduled_module(record), target)
                rows.append({"op": batch["op_key"], "latency_us": secs * 1e6, "round_s": batch["seconds"],
                             "build_s": time.perf_counter() - start, "accumulators": accumulators(cfg, nest, lanes),
                             "space": [list(t) for t in cfg.space], "reduction": [list(t) for t in cfg.reduction]})
                if rows[-1]["build_s"] > args.slow:
                    r = rows[-1]
                    print(f"{r['op']:40s} build {r['build_s']:5.2f} s  {r['latency_us']:10.1f} us  "
                          f"{r['accumulators']:3d} accumulators  {r['space']} {r['reduction']}", flush=True)
    best = {}
    for r in rows:
        best[r["op"]] = min(best.get(r["op"], math.inf), r["latency_us"])
    for r in rows:
        r["vs_best"] = r["latency_us"] / best[r["op"]]
    budget = registers
    buckets = {f"<= {budget}": lambda a: a <= budget, f"{budget + 1}-{2 * budget}": lambda a: budget < a <= 2 * budget,
               f"> {2 * budget}": lambda a: a > 2 * budget}
    summary = {}
    for name, inside in buckets.items():
        sel = [r for r in rows if inside(r["accumulators"])]
        summary[name] = {"candidates": len(sel),
                         "build_s_median": statistics.median(r["build_s"] for r in sel) if sel else None,
                         "build_s_total": sum(r["build_s"] for r in sel),
                         "slowest_build_s": max((r["build_s"] for r in sel), default=None),
                         "best_vs_op_best": min((r["vs_best"] for r in sel), default=None),
                         "op_bests": sum(r["vs_best"] == 1.0 for r in sel)}
        s = summary[name]
        print(f"accumulators {name:>8s}: {s['candidates']:4d} candidates, build median "
              f"{s['build_s_median'] or 0:.2f} s, total {s['build_s_total']:.1f} s, "
              f"slowest {s['slowest_build_s'] or 0:.2f} s; nearest to its op's best "
              f"{s['best_vs_op_best'] or math.nan:.2f}x, op bests {s['op_bests']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"benchmark": "candidate_costs", "db": args.db, "vector_lanes": lanes,
                       "vector_registers": registers, "environment": environment(), "summary": summary,
                       "candidates": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
