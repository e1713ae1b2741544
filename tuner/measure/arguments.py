"""The arguments a runner process times candidates on.

MetaSchedule's runner fills every argument with random values. An integer argument is an index (an
embedding's token ids, a gather's positions), and Relax legalises ``take`` without bounds checks
("fast" mode), so random indices crashed the runner on every transformer's embedding lookup, and the
task kept TVM's default schedule with a crash on record. Here integer arguments are zeros (in range on
any non-empty axis) and the rest are filled as MetaSchedule fills them. Each local runner process
registers :func:`alloc_argument` under :data:`ALLOC_ARGUMENT` (its initializer calls :func:`register`).
"""

from __future__ import annotations

from typing import Any

#: The global function name a local runner is given as ``f_alloc_argument``.
ALLOC_ARGUMENT = "eto.measure.alloc_argument"


def alloc_argument(device: Any, args_info: list, alloc_repeat: int) -> list:
    """MetaSchedule's ``default_alloc_argument``, with integer tensors zero-filled."""
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    random_fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")

    def fill(arg: Any) -> None:
        if "int" in str(arg.dtype):
            arg.copyfrom(np.zeros(tuple(int(d) for d in arg.shape), str(arg.dtype)))
        else:
            random_fill(arg)

    return alloc_argument_common(fill, device, args_info, alloc_repeat)


def register() -> None:
    """Make :func:`alloc_argument` callable by name in this process (a runner process's initializer)."""
    import tvm_ffi

    tvm_ffi.register_global_func(ALLOC_ARGUMENT, alloc_argument, override=True)
