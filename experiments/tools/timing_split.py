"""Where a candidate's measurement time goes, and what screening loses: full, screened and bare timings.

Takes up to ``--limit`` programs of a database (spread over its operators), builds them once with the
persistent builder, then times the same batch in ``--rounds`` rounds, each round every configuration
in turn: ``full`` (``MeasureConfig()``: the records eto stores and compares), ``screened`` (its
screening repeats, :mod:`tuner.measure.finalists`) and ``bare`` (one run of one call, no minimum time). Per
configuration: seconds per candidate (the builds timed apart), and how far each program's median
is from its full median in the same round, against how far the full timing is from itself one round
later (the noise any timing has here). This is the split behind the screening default.

    python -m experiments.tools.timing_split --db experiments/work/calibration_screened/bert \\
        --out experiments/results/timing_split.json

Costs: about 1.5 s per program and round on 2 cores.
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from experiments._experiment import ab_parser, ab_target, write_json

CONFIGS = ("full", "screened", "bare")


def spread(programs: list, limit: int) -> list:
    """Up to ``limit`` of ``programs``, taken round-robin over their operators (fastest first in each), so
    a database with one big operator does not fill the sample."""
    by_op: dict = {}
    for p in sorted(programs, key=lambda p: p.latency_s):
        by_op.setdefault(p.op.key, []).append(p)
    picked, queues = [], list(by_op.values())
    while len(picked) < limit and any(queues):
        for q in queues:
            if q and len(picked) < limit:
                picked.append(q.pop(0))
    return picked


def deviations(a: list[float], b: list[float]) -> dict:
    """Median and max of |a/b - 1| over the programs both timed."""
    d = [abs(x / y - 1) for x, y in zip(a, b) if 0 < x < math.inf and 0 < y < math.inf]
    return {"median": statistics.median(d), "max": max(d), "n": len(d)} if d else {"n": 0}


def main(argv=None) -> int:
    ap = ab_parser(__doc__)
    ap.add_argument("--db", required=True, help="an eto (or MetaSchedule-readable eto) database")
    ap.add_argument("--limit", type=int, default=24, help="programs to time")
    ap.set_defaults(rounds=3)
    args = ap.parse_args(argv)
    target = ab_target(args)

    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from eto.store.database import Database
    from tuner.measure.apply import scheduled_module
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tuner.measure.workers import remove_artifact

    db = Database(args.db, readonly=True)
    picked = spread(list(db.programs(target=target)), args.limit)
    if not picked:
        raise SystemExit(f"{args.db}: no program for target {target}")
    mods = [scheduled_module(p.tuning_record) for p in picked]
    bare_config = MeasureConfig(number=1, screen_repeat=1, screen_min_repeat_ms=0)
    times: dict[str, list[list[float]]] = {c: [] for c in CONFIGS}
    seconds: dict[str, list[float]] = {c: [] for c in (*CONFIGS, "build")}
    with Measurer.local() as measurer, Measurer.local(bare_config) as bare:
        measurer.measure(mods[:1], target)  # the worker pools start outside every clock
        bare.measure(mods[:1], target, screen=True)
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            built = measurer.builder.build([BuilderInput(m, target) for m in mods])
            seconds["build"].append(time.perf_counter() - t0)
            for b in built:  # only the build was wanted here
                if b.artifact_path:
                    remove_artifact(str(b.artifact_path))
            for c in CONFIGS:
                t0 = time.perf_counter()
                rs = (bare.measure(mods, target, screen=True) if c == "bare"
                      else measurer.measure(mods, target, screen=c == "screened"))
                seconds[c].append(time.perf_counter() - t0)
                times[c].append([r.median for r in rs])
    n, build = len(mods), statistics.median(seconds["build"])
    per_candidate = {c: {"measure_s": statistics.median(seconds[c]) / n,
                         "run_s": max(0.0, statistics.median(seconds[c]) - build) / n} for c in CONFIGS}
    rounds = range(args.rounds)
    summary = {
        "programs": n, "operators": len({p.op.key for p in picked}), "rounds": args.rounds,
        "build_s_per_candidate": build / n, "per_candidate": per_candidate,
        "screened_vs_full_same_round": [deviations(times["screened"][r], times["full"][r]) for r in rounds],
        "bare_vs_full_same_round": [deviations(times["bare"][r], times["full"][r]) for r in rounds],
        "full_vs_full_next_round": [deviations(times["full"][r + 1], times["full"][r]) for r in rounds[:-1]],
    }
    out = {"experiment": "timing split", "db": args.db, "target": str(target),
           "programs": [p.op.name for p in picked], "times": times, "seconds": seconds, "summary": summary}
    write_json(out, args.out)
    for c in CONFIGS:
        print(f"{c}: {per_candidate[c]['measure_s']:.3f} s per candidate ({per_candidate[c]['run_s']:.3f} s running, "
              f"builds {build / n:.3f} s)")
    for k in ("screened_vs_full_same_round", "bare_vs_full_same_round", "full_vs_full_next_round"):
        print(k + ": " + "; ".join(f"median {d['median']:.1%} max {d['max']:.1%}" for d in summary[k] if d["n"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
