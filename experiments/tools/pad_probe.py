"""Does padding an axis to the vector width pay? One MetaSchedule search per size, same trials.

The numbers behind ``eto/models/padding.py`` (docs/models.md, "Padded rows and channels"): a
channels-last 3x3 depthwise or 1x1 convolution (with bias and ReLU) at each channel count given,
each tuned from scratch by ``ms.tune_tir``; prints MetaSchedule's best latency for each.

    python -m experiments.tools.pad_probe --kind pointwise --size 28 --channels 116,128 --trials 64
    python -m experiments.tools.pad_probe --kind depthwise --size 28 --channels 116,120,128

One search a size: read a difference of a few percent as noise, not as a result.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile


def convolution(kind: str, size: int, channels: int):
    """The PrimFunc of ``relu(conv(x) + b)`` on a ``[1, size, size, channels]`` NHWC input."""
    from tvm import te, topi

    x = te.placeholder((1, size, size, channels), name="x")
    if kind == "depthwise":
        w = te.placeholder((3, 3, channels, 1), name="w")
        y = topi.nn.depthwise_conv2d_nhwc(x, w, 1, 1, 1)
    else:
        w = te.placeholder((1, 1, channels, channels), name="w")
        y = topi.nn.conv2d_nhwc(x, w, 1, 0, 1)
    b = te.placeholder((channels,), name="b")
    z = te.compute(y.shape, lambda n, h, v, c: te.max(y[n, h, v, c] + b[c], 0.0), name="z")
    return te.create_prim_func([x, w, b, z])


def best_us(kind: str, size: int, channels: int, trials: int, target) -> float:
    """MetaSchedule's best measured latency after ``trials`` trials, microseconds."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": convolution(kind, size, channels)})
    with tempfile.TemporaryDirectory() as work:
        db = ms.tune_tir(mod, target, work, max_trials_global=trials, num_trials_per_iter=16)
        best = db.get_top_k(db.commit_workload(mod), 1)[0]
    return statistics.mean(float(s) for s in best.run_secs) * 1e6


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=("depthwise", "pointwise"), default="depthwise")
    p.add_argument("--size", type=int, default=28, help="height and width of the input")
    p.add_argument("--channels", default="116,128", help="comma-separated channel counts")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--target", default="cpu")
    args = p.parse_args(argv)
    from eto.target import parse_target

    target = parse_target(args.target)
    for c in (int(v) for v in args.channels.split(",")):
        print(f"{args.kind} {args.size}x{args.size}, {c} channels: {best_us(args.kind, args.size, c, args.trials, target):.1f} us",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
