"""Benchmark: wall time per candidate of eto's measurement harness vs MetaSchedule's defaults.

The same real candidates (sampled from MetaSchedule's design space of a ResNet-50 conv2d) are
measured by both, batch by batch and interleaved (default batch, eto batch, default batch, ...),
with the same evaluator settings, so the only difference is the harness:

* default: ``LocalBuilder()`` (a new worker pool per batch, ``tensor_intrin`` imported in each
  worker, tar artifacts linked at load time) + ``LocalRunner()``;
* eto: :class:`tuner.measure.measurer.Measurer` (persistent build workers, no ``tensor_intrin`` import,
  ``.so`` linked in the parallel builders) + the same synchronous local runner.

Usage: ``python -m experiments.tools.harness_bench --scale ci|small|paper [--default-timeout S]``; writes
``experiments/results/harness_bench_<scale>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from experiments._env import environment

SCALES = {"ci": (8, 4), "small": (64, 16), "paper": (256, 64)}  # candidates, batch size


def sample_candidates(op, target, n: int, seed: int = 0):
    """``n`` distinct random candidates from MetaSchedule's design space of ``op``."""
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=op.prim_func(), target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name="bench", rand_state=seed, num_threads=2)
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(max_trials=n, num_trials_per_iter=n, design_spaces=spaces)
    cands = ctx.generate_measure_candidates()
    ctx.post_tuning()
    return [c.sch.mod for c in cands][:n]


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: scale, output path and the baseline builder's timeout."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=SCALES, default="ci")
    ap.add_argument("--out", default=None)
    ap.add_argument("--default-timeout", type=float, default=30.0,
                    help="LocalBuilder timeout of the baseline (30 s is MetaSchedule's default; on 2 cores its "
                         "workers' tensor_intrin import alone can exceed it, so a longer one compares like with like)")
    return ap.parse_args(argv)


def make_harnesses(target, config, default_timeout: float):
    """The two harnesses as batch-measuring functions (same evaluator settings), and eto's Measurer to close."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from tuner.measure.measurer import Measurer

    default_builder = ms.builder.LocalBuilder(timeout_sec=default_timeout)
    default_runner = ms.runner.LocalRunner(evaluator_config=config.evaluator())
    eto = Measurer.local(config)

    def run_default(batch_mods):
        built = default_builder.build([BuilderInput(m, target) for m in batch_mods])
        ok = [(m, b) for m, b in zip(batch_mods, built) if b.error_msg is None]
        futures = default_runner.run([RunnerInput(b.artifact_path, "cpu", ArgInfo.from_entry_func(m))
                                      for m, b in ok])
        res = [f.result() for f in futures]
        errors = [str(b.error_msg).splitlines()[0] for b in built if b.error_msg is not None]
        errors += [str(r.error_msg).splitlines()[0] for r in res if r.error_msg is not None]
        secs = [statistics.median(float(s) for s in r.run_secs) for r in res if r.run_secs]
        return secs, errors

    def run_eto(batch_mods):
        res = eto.measure(batch_mods, target)
        return [r.median for r in res if r.ok], [r.error for r in res if not r.ok]

    return run_default, run_eto, eto


def measure_interleaved(mods: list, batch: int, harnesses) -> tuple[dict, dict]:
    """Wall time, successes and errors per harness, batch by batch, alternating default and eto."""
    rows = {"default": {"seconds": [], "ok": 0, "errors": []}, "eto": {"seconds": [], "ok": 0, "errors": []}}
    latencies = {"default": [], "eto": []}
    for start in range(0, len(mods), batch):
        chunk = mods[start:start + batch]
        for name, fn in harnesses:
            t = time.perf_counter()
            secs, errors = fn(chunk)
            dt = time.perf_counter() - t
            rows[name]["seconds"].append(dt)
            rows[name]["ok"] += len(secs)
            rows[name]["errors"] += errors
            latencies[name] += secs
            print(f"  batch {start // batch}: {name:<7} {dt:6.1f} s for {len(chunk)} candidates, "
                  f"{len(errors)} failed", file=sys.stderr)
    return rows, latencies


def summarize(rows: dict, n: int) -> dict:
    """Per harness: total and per-candidate wall time, successes, failures and the first errors."""
    summary = {}
    for name, r in rows.items():
        total = sum(r["seconds"])
        summary[name] = {"wall_s": total, "per_candidate_s": total / n, "ok": r["ok"],
                         "failed": len(r["errors"]), "first_errors": r["errors"][:3],
                         "batch_seconds": r["seconds"]}
    return summary


def write_report(args, op, n: int, batch: int, config, summary: dict, latencies: dict) -> None:
    """Write the result file and print the per-candidate times and their ratio."""
    ratio = summary["eto"]["per_candidate_s"] / summary["default"]["per_candidate_s"]
    out = {"benchmark": "harness_bench", "scale": args.scale, "operator": op.key, "candidates": n,
           "default_builder_timeout_s": args.default_timeout,
           "batch": batch, "evaluator": config.evaluator()._asdict(), "environment": environment(),
           "results": summary, "eto_over_default_time_per_candidate": ratio,
           "median_latency_us": {k: (statistics.median(v) * 1e6 if v else None) for k, v in latencies.items()}}
    path = args.out or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results",
                                     f"harness_bench_{args.scale}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"default: {summary['default']['per_candidate_s']:.3f} s/candidate ({summary['default']['failed']} failed); "
          f"eto: {summary['eto']['per_candidate_s']:.3f} s/candidate ({summary['eto']['failed']} failed); "
          f"ratio eto/default = {ratio:.3f} (target <= 0.5)")
    print(f"wrote {path}")


def main(argv=None) -> int:
    """Sample the candidates, measure them with both harnesses interleaved, and write the comparison."""
    args = parse_args(argv)
    n, batch = SCALES[args.scale]
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    from eto.operators import Operator
    from eto.target import parse_target
    from tuner.measure.measurer import MeasureConfig

    target = parse_target("cpu")
    op = Operator.create("C2D", N=1, CI=128, H=28, W=28, CO=128, KH=3, KW=3, padding=1)
    t0 = time.perf_counter()
    mods = sample_candidates(op, target, n)
    print(f"sampled {len(mods)} candidates of {op.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    config = MeasureConfig(number=3, repeat=3, min_repeat_ms=20)
    run_default, run_eto, eto = make_harnesses(target, config, args.default_timeout)
    rows, latencies = measure_interleaved(mods, batch, (("default", run_default), ("eto", run_eto)))
    eto.close()
    write_report(args, op, len(mods), batch, config, summarize(rows, len(mods)), latencies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
