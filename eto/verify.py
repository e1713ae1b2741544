"""Checking stored programs against the catalogue's numpy references."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .operators import Operator

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target


@dataclass(frozen=True)
class Check:
    op: Operator
    ok: bool
    max_abs_error: float
    max_rel_error: float


def check_record(op: Operator, record: "TuningRecord", target: "Target", *, seed: int = 0,
                 rtol: float = 1e-4, atol: float = 1e-4) -> Check:
    """Build ``record``'s program for the CPU, run it on random inputs, compare with numpy."""
    from tuner.apply import build, run_once, scheduled_module

    if target.kind.name != "llvm":
        raise ValueError(f"numpy checks run on the CPU; {target.kind.name} programs are checked by the tuner")
    lib = build(scheduled_module(record), target)
    inputs = op.random_inputs(seed)
    got = run_once(lib, inputs, op.output_shape)
    want = op.reference(*inputs)
    err = np.abs(got - want)
    ok = bool(np.all(err <= atol + rtol * np.abs(want)))
    return Check(op, ok, float(err.max()), float((err / np.maximum(np.abs(want), 1e-12)).max()))
