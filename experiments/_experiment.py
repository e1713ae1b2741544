"""What the analysis experiments (E1, E8) share: their ci operator set, and writing a result with its plot."""

from __future__ import annotations

import json
import os
from typing import Callable

#: the ci scale's set: three small batch matmuls whose loop nests dominate one another
CI_SET = "ci_bmm"


def load_set(name: str):
    """:data:`CI_SET`, or a built-in set or JSON file by name."""
    from eto.operators import Operator
    from eto.operators.opsets import OperatorSet, load_opset

    if name != CI_SET:
        return load_opset(name)
    return OperatorSet.from_layers(CI_SET, [Operator.create("BMM", B=2, M=32, N=32, K=16),
                                            Operator.create("BMM", B=2, M=32, N=32, K=32),
                                            Operator.create("BMM", B=2, M=64, N=64, K=32)])


def write_result(result: dict, out: str) -> None:
    """``result`` as JSON in ``out``, its folder made if need be."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


def write_outputs(result: dict, out: str, plot: Callable[[dict, str], None]) -> None:
    """``out`` (JSON) and the PNG ``plot`` draws beside it; print the summary and both paths."""
    write_result(result, out)
    png = out.removesuffix(".json") + ".png"
    plot(result, png)
    print(json.dumps(result["summary"], indent=1))
    print(f"written {out} and {png}")


HERE = os.path.dirname(os.path.abspath(__file__))


def parser(doc: str, scales: dict, name: str):
    """The options every analysis experiment has: ``--scale``, ``--opset``, ``--work``, ``--out``."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--scale", choices=sorted(scales), default="small")
    ap.add_argument("--opset", help="built-in set name or JSON file (default: the scale's)")
    ap.add_argument("--work", help=f"where a tuning run goes (default experiments/work/{name}_<scale>)")
    ap.add_argument("--out", help=f"result JSON (default experiments/results/{name}_<scale>.json)")
    return ap


def setup(args, scales: dict, name: str):
    """The scale's settings, the set, the CPU target, and the work folder and result path."""
    from eto.target import parse_target

    os.environ.setdefault("TVM_NUM_THREADS", "2")
    cfg = scales[args.scale]
    work = args.work or os.path.join(HERE, "work", f"{name}_{args.scale}")
    out = args.out or os.path.join(HERE, "results", f"{name}_{args.scale}.json")
    return cfg, load_set(args.opset or cfg["opset"]), parse_target("cpu"), work, out


def ab_parser(doc: str):
    """The options of an A/B experiment (one search run two ways, both results re-measured side by side):
    ``--target``, ``--rounds`` of the interleaved re-measurement, ``--out``."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved re-measurement rounds")
    ap.add_argument("--out")
    return ap


def ab_target(args):
    """``args.target`` parsed, with TVM's threads set and its tensor intrinsics registered (before any
    clock starts: the registration takes seconds)."""
    from eto.target import parse_target
    from tuner.analysis.intrinsics import register_tensor_intrinsics

    os.environ.setdefault("TVM_NUM_THREADS", "2")
    target = parse_target(args.target)
    register_tensor_intrinsics(target)
    return target


def write_json(result: dict, out: str | None) -> None:
    """``result`` to ``out`` (nothing without one); values JSON lacks (targets, configs) as strings."""
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1, default=str)
