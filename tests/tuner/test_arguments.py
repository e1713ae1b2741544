"""The arguments candidates are timed on (tuner.measure.arguments): integer arguments are indices."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # a runner process
def test_a_gather_without_bounds_checks_is_measured_not_crashed():
    """An embedding lookup as Relax legalises ``take`` ("fast": no bounds check) reads ``table[ids[i]]``;
    MetaSchedule's random integer ids crashed the runner process (every transformer's embedding task was
    left untuned, a crash on record). Integer arguments are zeros: the lookup runs and is timed."""
    import numpy as np
    import tvm
    from tvm import te

    from eto.target import parse_target
    from tuner.measure.arguments import alloc_argument
    from tuner.measure.measurer import Measurer

    table = te.placeholder((50257, 64), "float32", "table")
    ids = te.placeholder((128,), "int64", "ids")
    out = te.compute((128, 64), lambda i, j: table[ids[i], j], name="gather")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, out])})
    target = parse_target("cpu")
    with Measurer.local() as measurer:
        (result,) = measurer.measure([mod], target)
    assert result.ok, result.error
    args_info = [["TENSOR", "float32", [4, 3]], ["TENSOR", "int64", [5]], ["TENSOR", "int32", [2]]]
    (args,) = alloc_argument(tvm.cpu(), args_info, 1)
    assert [a.numpy().tolist() for a in args[1:]] == [[0] * 5, [0, 0]]
    assert np.unique(args[0].numpy()).size > 1  # floats random as MetaSchedule fills them
