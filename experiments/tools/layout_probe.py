"""Does a convolution's layout decide how fast MetaSchedule's program for it gets on this CPU?

For each convolution given (``--conv N,CI,H,W,CO,K,stride,padding``; default: four common CNN
layers), MetaSchedule tunes it twice at the same budget, as eto tunes a root (``--trials``, one
batch): in NCHW/OIHW (eto's catalogue layout today) and in NHWC/HWIO (the channel dimension
innermost, which a CPU vectorises). Both programs, ONNX Runtime's Conv (one node, its CPU provider:
MLAS, channel-blocked NCHWc with packed weights) and PyTorch's conv2d (oneDNN) are then timed side
by side, interleaved, on ``TVM_NUM_THREADS`` threads. The weights are marked layout-free, as eto marks
a model's (:mod:`eto.models.prepack`): each program reads them packed in the order its tiles walk them.
The question for issue 68: is the gap to ONNX Runtime a matter of layout, of search budget, or of
neither. ``--layouts NHWC`` tunes one layout only.

    python -m experiments.tools.layout_probe --trials 64 --out experiments/results/layout_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from eto.models.prepack import LAYOUT_FREE
from experiments._env import environment
from experiments._experiment import write_result

DEFAULT_CONVS = ["1,64,56,56,64,3,1,1", "1,256,56,56,64,1,1,0", "1,256,14,14,256,3,1,1", "1,3,224,224,64,7,2,3"]


def conv_funcs(n, ci, h, w, co, k, stride, pad):
    """The convolution as two PrimFuncs, NCHW/OIHW and NHWC/HWIO, and its FLOPs."""
    from tvm import te, topi

    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    flops = 2.0 * n * co * oh * ow * ci * k * k
    data = te.placeholder((n, ci, h, w), name="data")
    weight = te.placeholder((co, ci, k, k), name="weight")
    nchw = topi.nn.conv2d_nchw(data, weight, stride, pad, 1)
    data_t = te.placeholder((n, h, w, ci), name="data")
    weight_t = te.placeholder((k, k, ci, co), name="weight")
    nhwc = topi.nn.conv2d_nhwc(data_t, weight_t, stride, pad, 1)
    # weights layout-free, as eto marks a model's constant weights (eto.models.prepack): each program packs them
    funcs = {"NCHW": te.create_prim_func([data, weight, nchw]), "NHWC": te.create_prim_func([data_t, weight_t, nhwc])}
    return {k: f.with_attr(LAYOUT_FREE, [1]) for k, f in funcs.items()}, flops


def ort_conv(n, ci, h, w, co, k, stride, pad, x, wt, threads):
    """ONNX Runtime's Conv on ``x`` (NCHW) as a no-argument callable."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride, stride], pads=[pad] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, ci, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, co, oh, ow])],
                              [numpy_helper.from_array(wt, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})


def probe(spec: str, trials: int, rounds: int, measurer, target, layouts=("NCHW", "NHWC")) -> dict:
    from tvm.ir import IRModule

    from tuner.measure.apply import scheduled_module
    from tuner.measure.backend import BackendTask, tune_backend
    from tuner.measure.options import BackendOptions

    n, ci, h, w, co, k, stride, pad = (int(v) for v in spec.split(","))
    funcs, flops = conv_funcs(n, ci, h, w, co, k, stride, pad)
    row = {"conv": spec, "gflop": flops / 1e9, "tuning_s": {}}
    mods = {}
    for layout, func in ((k, funcs[k]) for k in layouts):
        t0 = time.perf_counter()
        (res,) = tune_backend([BackendTask(layout, func)], target, BackendOptions(trials=trials, seed=0),
                              measurer=measurer, top_k=1)
        row["tuning_s"][layout] = round(time.perf_counter() - t0, 1)
        mods[layout] = scheduled_module(res.records[0])
        row.setdefault("trace", {})[layout] = str(res.records[0].trace)
    import torch

    threads = int(os.environ.get("TVM_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, ci, h, w), dtype=np.float32)
    wt = rng.standard_normal((co, ci, k, k), dtype=np.float32)
    tx, tw = torch.from_numpy(x), torch.from_numpy(wt)
    calls = {"ort": ort_conv(n, ci, h, w, co, k, stride, pad, x, wt, threads),
             "pytorch": lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad)}
    times: dict[str, list[float]] = {m: [] for m in [*mods, *calls]}
    for _ in range(rounds):
        for layout, secs in zip(mods, measurer.remeasure(list(mods.values()), target, rounds=1)):
            times[layout].append(secs)
        for name, call in calls.items():
            call()
            t = []
            for _ in range(7):
                t0 = time.perf_counter()
                call()
                t.append(time.perf_counter() - t0)
            times[name].append(statistics.median(t))
    row["latency_us"] = {m: round(statistics.median(v) * 1e6, 1) for m, v in times.items()}
    row["gflops"] = {m: round(flops / statistics.median(v) / 1e9, 1) for m, v in times.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conv", action="append", help="N,CI,H,W,CO,K,stride,padding (repeatable)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layouts", default="NCHW,NHWC", help="the layouts MetaSchedule tunes each convolution in")
    ap.add_argument("--out", default="experiments/results/layout_probe.json")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    if unknown := [v for v in layouts if v not in ("NCHW", "NHWC")]:
        ap.error(f"unknown layout(s) {', '.join(unknown)} in --layouts: NCHW, NHWC or both")
    from eto.target import parse_target
    from tuner.measure.measurer import Measurer

    target = parse_target("cpu")
    rows = []
    with Measurer.local() as measurer:
        for spec in args.conv or DEFAULT_CONVS:
            rows.append(probe(spec, args.trials, args.rounds, measurer, target, layouts))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "trace"}), flush=True)
    command = (f"python -m experiments.tools.layout_probe --trials {args.trials} --rounds {args.rounds} "
               f"--layouts {args.layouts}" + "".join(f" --conv {c}" for c in args.conv or ()))
    result = {"experiment": "layout_probe", "trials": args.trials, "packed_weights": True, "command": command,
              "environment": environment(), "rows": rows}
    write_result(result, args.out)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
