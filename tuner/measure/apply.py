"""Turning a tuning record back into a program: replay its trace, build it, run it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target


def scheduled_module(record: "TuningRecord") -> "IRModule":
    """The record's program: its trace replayed (postprocessors included) on its workload."""
    from tvm.s_tir import Schedule

    sch = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def build(mod: "IRModule", target: "Target"):
    """Compile for ``target``; any weight-layout preprocessing stays inside the function."""
    import tvm

    return tvm.compile(mod, target=target)


def prepacked(mod: "IRModule") -> "IRModule":
    """``mod`` without its weight-layout preprocessing: its weights taken as already packed, as the measurer
    builds every candidate and a built model runs the program (each weight packed once, at build time:
    :mod:`eto.models.prepack`). Timed with the packing inside, a 1x1 convolution of 960x160 weights ran 3x
    its measured time. Its arguments: ``ArgInfo.from_entry_func(mod, remove_preproc=True)``."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)


def run_once(lib, inputs: Sequence[np.ndarray], output_shape: Sequence[int], dtype: str = "float32") -> np.ndarray:
    """Call a built CPU function on numpy inputs and return its output."""
    import tvm

    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.asarray(a, order="C"), dev) for a in inputs]
    out = tvm.runtime.tensor(np.zeros(tuple(output_shape), dtype), dev)
    lib(*args, out)
    return out.numpy()
