"""E8: tuned programs against PyTorch's CPU kernels (oneDNN / MKL) and against the CPU's fp32 roofline.

For every operator of a set that the given databases hold, the best program of each database and
PyTorch's kernel for the same operator (``torch.nn.functional.conv{1,2,3}d`` with its groups,
``conv_transpose2d``, ``torch.bmm``, ``torch.nn.functional.linear``; PyTorch on ``TVM_NUM_THREADS``
threads, the same inputs) are timed side by side in this process, interleaved over ``--rounds``
rounds (median of the rounds, each the median of several calls after a warm-up). Each is reported in
GFLOP/s and as a share of the roofline: min(peak fp32 FLOP/s, operational intensity x memory
bandwidth), the peak being threads x clock x fp32 vector lanes x 2 (FMA) x FMA units per core
(``--fma-units``, 2 on the Zen and Skylake server cores these machines have; the clock read from
/proc/cpuinfo), the bandwidth measured here by a large numpy copy, the intensity the FLOPs over the
bytes of the inputs and output read or written once. The bandwidth is DRAM's: an operator whose data
fit in the caches can run above its memory roof (a share over 1).

    python -m experiments.vendor_roofline --scale small --opset resnet50 --db eto=DB_A --db metaschedule=DB_B
    python -m experiments.vendor_roofline --scale ci --work /tmp/e8 --out /tmp/e8.json

Without ``--db`` the set is tuned first by eto (``--trials`` per root) into ``--work``, which is
what scale ``ci`` does for two small batch matmuls. Writes the result JSON and a PNG next to it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

from experiments._env import environment
from experiments._experiment import CI_SET, parser, setup, write_outputs

SCALES = {
    "ci": dict(opset=CI_SET, trials=8, rounds=2),
    "small": dict(opset="resnet50", trials=100, rounds=3),
    "paper": dict(opset="resnet50", trials=1000, rounds=5),
}
CALLS = 7  # timed calls per round (after one warm-up call)


def torch_call(op, inputs):
    """PyTorch's kernel for ``op`` as a no-argument callable on ``inputs`` (None: no such kernel)."""
    import torch
    import torch.nn.functional as F

    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
    if op.type in ("C1D", "C2D", "C3D", "GRP", "DEP"):
        conv = {"C1D": F.conv1d, "C3D": F.conv3d}.get(op.type, F.conv2d)
        groups = op["groups"] if op.type == "GRP" else (op["C"] if op.type == "DEP" else 1)
        return lambda: conv(t[0], t[1], stride=op["stride"], padding=op["padding"], dilation=op["dilation"],
                            groups=groups)
    if op.type == "T2D":
        return lambda: F.conv_transpose2d(t[0], t[1], stride=op["stride"], padding=op["padding"],
                                          output_padding=op["output_padding"])
    if op.type == "BMM":
        y = t[1].transpose(1, 2).contiguous()  # the catalogue's Y is [b, j, k]
        return lambda: torch.bmm(t[0], y)
    if op.type == "DENSE":
        return lambda: F.linear(t[0], t[1])
    return None


def _median_time(fn) -> float:
    fn()
    times = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tvm_call(record, op, inputs, target):
    """The database program built, as a no-argument callable on ``inputs``."""
    import tvm

    from tuner.measure.apply import build, scheduled_module

    lib = build(scheduled_module(record), target)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in inputs]
    out = tvm.runtime.tensor(np.zeros(tuple(op.output_shape), "float32"), dev)
    return lambda: (lib(*args, out), dev.sync())


def memory_bandwidth(nbytes: int = 1 << 28) -> float:
    """Bytes per second of a large numpy copy (read + write), the best of 5."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def clock_hz() -> float:
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        return max(mhz) * 1e6
    except (OSError, ValueError):  # pragma: no cover - not Linux
        return float("nan")


def rows_for(opset, dbs: dict, target, rounds: int, peak: float, bandwidth: float) -> list[dict]:
    """Per operator: GFLOP/s and roofline share of every database's best program and of PyTorch."""
    import torch

    torch.set_num_threads(int(os.environ.get("TVM_NUM_THREADS", "2")))
    rows = []
    for e in opset:
        op = e.op
        inputs = op.random_inputs(0)
        calls = {}
        for name, db in dbs.items():
            best = db.best(op, target, predicted=False)
            if best is not None:
                calls[name] = tvm_call(best.tuning_record, op, inputs, target)
        fn = torch_call(op, inputs)
        if fn is not None:
            calls["pytorch"] = fn
        samples: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(rounds):
            for k, call in calls.items():
                samples[k].append(_median_time(call))
        lat = {k: statistics.median(v) for k, v in samples.items()}
        nbytes = 4 * (sum(int(np.prod(s)) for s in op.input_shapes) + int(np.prod(op.output_shape)))
        roof = min(peak, op.flops / nbytes * bandwidth)
        rows.append({"op": op.name, "frequency": e.frequency, "flops": op.flops, "bytes": nbytes,
                     "roofline_gflops": roof / 1e9, "latency_s": lat,
                     "gflops": {k: op.flops / v / 1e9 for k, v in lat.items()},
                     "share_of_roofline": {k: op.flops / v / roof for k, v in lat.items()}})
        print(json.dumps({"op": op.name, **{k: round(v * 1e6, 1) for k, v in lat.items()}}), flush=True)
    return rows


def summary(rows: list[dict], names: list[str]) -> dict:
    def weighted(k: str) -> float | None:
        if not all(k in r["latency_s"] for r in rows):
            return None
        return sum(r["frequency"] * r["latency_s"][k] for r in rows)

    w = {k: weighted(k) for k in names + ["pytorch"]}
    return {"weighted_latency_s": w,
            "throughput_vs_pytorch": {k: (w["pytorch"] / w[k] if w[k] and w["pytorch"] else None) for k in names},
            "median_share_of_roofline": {k: statistics.median([r["share_of_roofline"][k] for r in rows
                                                               if k in r["share_of_roofline"]] or [float("nan")])
                                         for k in names + ["pytorch"]}}


def plot(result: dict, path: str) -> None:
    from eto.plots import new_figure

    rows = result["rows"]
    names = list(rows[0]["gflops"]) if rows else []
    fig = new_figure(max(6.4, 0.5 * len(rows) + 2), 4.0)
    ax = fig.add_subplot()
    width = 0.8 / max(len(names), 1)
    for i, k in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r["gflops"].get(k, 0) for r in rows], width, label=k)
    ax.plot(range(len(rows)), [r["roofline_gflops"] for r in rows], "k_", markersize=14, label="roofline")
    ax.set_xticks(range(len(rows)), [r["op"] for r in rows], rotation=70, fontsize=6)
    ax.set_ylabel("GFLOP/s")
    ax.set_yscale("log")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"E8: {result['opset']} against PyTorch and the fp32 roofline "
                 f"(peak {result['peak_gflops']:.0f} GFLOP/s, {result['bandwidth_gbs']:.1f} GB/s)", fontsize=9)
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = parser(__doc__, SCALES, "vendor_roofline")
    ap.add_argument("--db", action="append", default=[], metavar="NAME=DIR", help="a database to compare (repeatable)")
    ap.add_argument("--trials", type=int, help="eto's backend trials per root when tuning (no --db)")
    ap.add_argument("--rounds", type=int, help="interleaved timing rounds")
    ap.add_argument("--fma-units", type=int, default=2, help="FMA units per core (for the peak)")
    args = ap.parse_args(argv)
    cfg, opset, target, work, out = setup(args, SCALES, "vendor_roofline")
    from eto.store.database import Database
    from eto.target import cpu_info

    dbs = {}
    for spec in args.db:
        label, sep, folder = spec.partition("=")
        if not sep or not os.path.isdir(folder):
            ap.error(f"--db {spec!r}: expected NAME=DIR with an existing database directory")
        dbs[label] = Database(folder, readonly=True)
    if not dbs:
        from eto.options import TuneOptions
        from eto.runs.pipeline import tune

        dbs["eto"] = Database(os.path.join(work, "eto"))
        tune(opset, target, dbs["eto"], TuneOptions.of(trials=args.trials or cfg["trials"],
                                                       plan_budget=max(64, args.trials or 0), seed=0))
    info = cpu_info()
    threads = int(os.environ["TVM_NUM_THREADS"])
    peak = threads * clock_hz() * info.vector_lanes_fp32 * 2 * args.fma_units
    bandwidth = memory_bandwidth()
    rows = rows_for(opset, dbs, target, args.rounds or cfg["rounds"], peak, bandwidth)
    result = {"experiment": "E8 tuned programs vs PyTorch and the roofline", "scale": args.scale,
              "opset": opset.name, "databases": {k: v for k, v in (s.partition("=")[::2] for s in args.db)},
              "threads": threads, "clock_hz": clock_hz(), "fma_units": args.fma_units,
              "vector_lanes_fp32": info.vector_lanes_fp32, "peak_gflops": peak / 1e9, "bandwidth_gbs": bandwidth / 1e9,
              "environment": environment(), "summary": summary(rows, list(dbs)), "rows": rows}
    write_outputs(result, out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
