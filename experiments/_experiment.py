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
    from eto.opsets import OperatorSet, load_opset

    if name != CI_SET:
        return load_opset(name)
    return OperatorSet.from_layers(CI_SET, [Operator.create("BMM", B=2, M=32, N=32, K=16),
                                            Operator.create("BMM", B=2, M=32, N=32, K=32),
                                            Operator.create("BMM", B=2, M=64, N=64, K=32)])


def write_outputs(result: dict, out: str, plot: Callable[[dict, str], None]) -> None:
    """``out`` (JSON) and the PNG ``plot`` draws beside it; print the summary and both paths."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    png = out.removesuffix(".json") + ".png"
    plot(result, png)
    print(json.dumps(result["summary"], indent=1))
    print(f"written {out} and {png}")
