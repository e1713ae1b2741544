"""E7b: one compiled function for a symbolic size (``eto dispatch``) against per-size programs and TVM.

For each operator (``--op TEXT@PARAM=NAME[,PARAM=NAME]``), from a database holding its programs at a
few sizes of the dimension (``eto tune`` / ``eto retune --vary``):

* ``dispatch``: :func:`eto.shapes.dispatch.build_dispatch` times every stored program (padded to its tile
  multiple, and masked) at ``--choose`` sizes, picks the buckets and builds one Relax function;
  its build time is reported;
* at every ``--sizes`` size (other sizes than the ones the buckets were chosen on), side by side in
  this process, interleaved over ``--rounds`` rounds (median): the dispatch function; the
  **per-size program** a static-shape deployment would compile for exactly that size (eto's
  instant program: the nearest stored program's tiles on that size, :func:`tuner.reuse.predict.predict`,
  no measurement); the **tuned program** where the database holds that exact size; the **padded**
  program users run without eto (the stored program of the next larger stored size, on inputs
  padded to it; the copy not counted); and **TVM without eto**: the same symbolic function
  compiled as Relax legalises it, with no schedule (TVM 0.27's CPU dlight rules cover GEMV and
  reductions, not matmuls), timed at every ``--tvm-every``-th size since it is slow.

    python -m experiments.symbolic_bench --db DB --op 'BMM(B=12,M=128,N=128,K=64)@M=seq,N=seq' \
        --op 'BMM(B=1,M=128,N=768,K=768)@M=seq'

Writes the result JSON and a PNG (GFLOP/s against size per method) next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from experiments._env import environment
from experiments._experiment import write_outputs

SCALES = {
    "ci": dict(choose="1,8,16,32,48", sizes="3:64:10", rounds=1, tvm_every=2, min_repeat_ms=5),
    "small": dict(choose="1,2,4,8,16:512:16", sizes="1:512:7", rounds=3, tvm_every=6, min_repeat_ms=20),
}


def _timer(fn_or_lib, dev, min_repeat_ms: int, *, vm: bool):
    """Seconds per call of a compiled function on prepared arguments (median of 3 repeats)."""
    if vm:
        return lambda args: float(np.median(fn_or_lib.time_evaluator("main", dev, number=1, repeat=3,
                                                                      min_repeat_ms=min_repeat_ms)(*args).results))
    f = fn_or_lib.jit().time_evaluator("main", dev, number=1, repeat=3, min_repeat_ms=min_repeat_ms)
    return lambda args: float(np.median(f(*args).results))


def bench_op(op, symbolic, db, target, args, cfg) -> dict:
    import tvm
    from tvm.ir import IRModule

    from eto.shapes.dispatch import at_size, build_dispatch, candidates, parse_sizes, size_of
    from eto.runs.instant import nearest_source
    from tuner.measure.apply import build, scheduled_module
    from tuner.reuse.predict import predict

    dev = tvm.cpu()
    choose, sizes = parse_sizes(args.choose or cfg["choose"]), parse_sizes(args.sizes or cfg["sizes"])
    start = time.perf_counter()
    fn, report = build_dispatch(op, symbolic, db, target, sizes=choose, min_repeat_ms=cfg["min_repeat_ms"],
                                log=lambda m: print(f"  {m}", flush=True))
    build_s = time.perf_counter() - start
    print(f"{op.name}: buckets {report.buckets} ({build_s:.1f} s)", flush=True)
    stored = sorted({c.source: c for c in candidates(op, symbolic, db, target, kinds=("pad",))}.values(),
                    key=lambda c: size_of(c.source, op, symbolic))
    stored_sizes = [size_of(c.source, op, symbolic) for c in stored]
    tvm_plain = tvm.compile(IRModule({"main": op.prim_func(symbolic=dict(symbolic))}), target=target)

    runners: dict[str, dict[int, object]] = {m: {} for m in ("dispatch", "per_size", "tuned", "padded", "tvm")}
    arrays = {}
    for i, s in enumerate(sizes):
        o = at_size(op, symbolic, s)
        x = o.random_inputs(0)
        out = tvm.runtime.tensor(np.zeros(o.output_shape, "float32"), dev)
        arrays[s] = ([tvm.runtime.tensor(a, dev) for a in x], out)
        runners["dispatch"][s] = ("vm", fn._vm)
        src = nearest_source(o, db, target)
        if src is not None and src.op != o:
            runners["per_size"][s] = ("lib", build(predict(o.prim_func(), src.tuning_record, target).schedule.mod, target))
        if s in stored_sizes:
            lib = build(scheduled_module(stored[stored_sizes.index(s)].record), target)
            runners["tuned"][s] = ("lib", lib)
            runners["per_size"].setdefault(s, ("lib", lib))
        nxt = next((j for j, t in enumerate(stored_sizes) if t >= s), None)
        if nxt is not None:
            t = stored_sizes[nxt]
            big = at_size(op, symbolic, t)
            runners["padded"][s] = ("lib", build(scheduled_module(stored[nxt].record), target), t)
            if t not in arrays:
                arrays[t] = ([tvm.runtime.tensor(a, dev) for a in big.random_inputs(0)],
                             tvm.runtime.tensor(np.zeros(big.output_shape, "float32"), dev))
        if i % cfg["tvm_every"] == 0:
            runners["tvm"][s] = ("lib", tvm_plain)
    lat: dict[str, dict[int, list[float]]] = {m: {} for m in runners}
    for r in range(cfg["rounds"]):
        for s in sizes:
            for m, per in runners.items():
                if s not in per:
                    continue
                kind, f, *extra = per[s]
                ins, out = arrays[extra[0]] if extra else arrays[s]
                if kind == "vm":
                    t = _timer(f, dev, cfg["min_repeat_ms"], vm=True)(ins)
                else:
                    t = _timer(f, dev, cfg["min_repeat_ms"] if m != "tvm" else 1, vm=False)(ins + [out])
                lat[m].setdefault(s, []).append(t)
        print(f"  round {r + 1}/{cfg['rounds']} done", flush=True)
    med = {m: {s: statistics.median(v) for s, v in per.items()} for m, per in lat.items()}
    flops = {s: at_size(op, symbolic, s).flops for s in sizes}

    def ratio(other: str) -> list[float]:  # dispatch throughput / other's, per size both ran
        return [med[other][s] / med["dispatch"][s] for s in sizes if s in med[other]]

    summary = {m: {"median": statistics.median(ratio(m)), "worst": min(ratio(m)), "best": max(ratio(m)),
                   "sizes": len(ratio(m))} for m in ("per_size", "tuned", "padded", "tvm") if ratio(m)}
    return {"op": op.name, "symbolic": dict(symbolic), "stored_sizes": stored_sizes, "buckets": list(report.buckets),
            "dispatch_build_s": build_s, "candidates": list(report.candidates), "choose_sizes": choose,
            "skipped": list(report.skipped), "sizes": sizes, "flops": [flops[s] for s in sizes],
            "latency_s": {m: {str(s): v for s, v in per.items()} for m, per in med.items()},
            "dispatch_over": summary}


def plot(result: dict, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = result["ops"]
    fig, axes = plt.subplots(1, len(ops), figsize=(6.5 * len(ops), 4.2), squeeze=False)
    style = {"dispatch": ("eto dispatch (one function)", "-", 2.2), "per_size": ("per-size program (eto instant)", "--", 1.2),
             "tuned": ("tuned at that size", "", 0), "padded": ("next stored size, padded", ":", 1.4),
             "tvm": ("TVM dynamic, no schedule", "-.", 1.2)}
    for ax, r in zip(axes[0], ops):
        flops = dict(zip(r["sizes"], r["flops"]))
        for m, (label, ls, lw) in style.items():
            pts = sorted((int(s), flops[int(s)] / v / 1e9) for s, v in r["latency_s"][m].items())
            if not pts:
                continue
            xs, ys = zip(*pts)
            if m == "tuned":
                ax.plot(xs, ys, "o", label=label, color="k")
            else:
                ax.plot(xs, ys, ls, lw=lw, label=label)
        for b in r["buckets"][:-1]:
            ax.axvline(b["to"] + 0.5, color="grey", lw=0.6, alpha=0.5)
        ax.set_title(f"{r['op']} ({', '.join(f'{p}={v}' for p, v in r['symbolic'].items())})", fontsize=9)
        ax.set_xlabel("size")
        ax.set_ylabel("GFLOP/s")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def run(args: argparse.Namespace) -> dict:
    from eto.store.database import Database
    from eto.shapes.dispatch import parse_symbolic, symbolic_dims
    from eto.operators import Operator
    from eto.target import parse_target

    os.environ.setdefault("TVM_NUM_THREADS", "2")
    cfg = SCALES[args.scale]
    target = parse_target("cpu")
    db = Database(args.db, readonly=True)
    rows = []
    for text in args.op:
        op_text, _, sym = text.rpartition("@")
        op = Operator.parse(op_text)
        rows.append(bench_op(op, symbolic_dims(op, parse_symbolic(sym)), db, target, args, cfg))
    summary = {r["op"]: {m: round(v["median"], 3) for m, v in r["dispatch_over"].items()} for r in rows}
    return {"benchmark": "symbolic_bench", "scale": args.scale, "db": args.db, "settings": cfg,
            "environment": environment(), "summary": {"median dispatch throughput over": summary}, "ops": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--db", required=True, help="database holding the operators at some sizes (read only)")
    ap.add_argument("--op", action="append", required=True, help="OPERATOR@PARAM=NAME[,PARAM=NAME] (repeatable)")
    ap.add_argument("--choose", help="sizes the buckets are chosen on (default: the scale's)")
    ap.add_argument("--sizes", help="sizes every method is timed at (default: the scale's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"symbolic_bench_{args.scale}.json")
    write_outputs(run(args), out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
