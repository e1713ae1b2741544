"""Checking programs against the catalogue's numpy references: ``eto verify`` and the gate every
tuning result passes before it is stored (:func:`gate`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from tuner.faults import kill_point
from tuner.trajectory import median_secs

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


#: Programs checked, best first, before a result is given up as wrong.
GATE_CHECKS = 3


def gate(op: Operator, records: Sequence["TuningRecord"], target: "Target", *,
         checks: int = GATE_CHECKS) -> tuple[list["TuningRecord"], dict]:
    """The correctness gate: no program becomes ``op``'s stored best unless its output matched numpy.

    The fastest record is built and run on random inputs against the catalogue's reference; while
    it is wrong (or fails to build or run here), it is dropped and the next is checked, up to
    ``checks``. The rest are slower than a checked one, so never the best. Returns the records to
    store (wrong ones removed; none if ``checks`` were all wrong) and metadata for the result:
    ``checked`` (how: "numpy", or None where there is no local device for ``target``) and
    ``rejected`` (latency and error of each wrong program). O(checks) builds.
    """
    ordered = sorted(records, key=lambda r: median_secs(r.run_secs))
    if target.kind.name != "llvm":  # CUDA programs are checked where they run (see tuner.measure)
        return ordered, {"checked": None}
    rejected: list[dict] = []
    for rec in ordered[:checks]:
        latency = median_secs(rec.run_secs)
        if not latency < float("inf"):
            break
        kill_point("gate.check")
        try:
            c = check_record(op, rec, target)
            error = None if c.ok else f"output differs from numpy (max abs error {c.max_abs_error:.3g})"
        except Exception as exc:  # noqa: BLE001 -- a program that cannot be checked is not trusted
            error = f"could not be checked: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else exc!r}"
        if error is None:
            return ordered[len(rejected):], {"checked": "numpy", "rejected": rejected}
        rejected.append({"latency_s": latency, "error": error})
    return [], {"checked": "numpy", "rejected": rejected}
