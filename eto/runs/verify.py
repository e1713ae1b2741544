"""Checking programs against the catalogue's numpy references: ``eto verify`` and the gate every
tuning result passes before it is stored (:func:`gate`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from tuner.analysis.kinds import is_cpu
from tuner.measure import stop
from tuner.measure.faults import kill_point
from tuner.measure.trajectory import median_secs
from tuner.tvm_errors import TVM_ERRORS, error_line

from eto.operators import Operator

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
    from tuner.measure.apply import build, run_once, scheduled_module

    if not is_cpu(target):
        raise ValueError(f"numpy checks run on the CPU; {target.kind.name} programs are checked by the tuner")
    lib = build(scheduled_module(record), target)
    inputs = op.random_inputs(seed)
    dtype = op.dtypes[-1]
    if dtype == "float16":  # both sides round to 11 bits, in different orders
        rtol, atol = max(rtol, 1e-2), max(atol, 1e-2)
    got = run_once(lib, inputs, op.output_shape, dtype).astype(np.float64)
    want = op.reference(*inputs).astype(np.float64)
    err = np.abs(got - want)
    ok = bool(np.all(err <= atol + rtol * np.abs(want)))
    return Check(op, ok, float(err.max()), float((err / np.maximum(np.abs(want), 1e-12)).max()))


#: Programs checked, best first, before a result is given up as wrong.
GATE_CHECKS = 3


def gate(op: Operator, records: Sequence["TuningRecord"], target: "Target", *, local: bool = True,
         checks: int = GATE_CHECKS) -> tuple[list["TuningRecord"], dict]:
    """The correctness gate: no program becomes ``op``'s stored best unless its output matched numpy.

    The fastest record (by median, eto's order) is built and run on random inputs against the
    catalogue's reference; while it is wrong (or fails to build or run here) it is dropped and the
    next is checked, up to ``checks`` wrong ones. MetaSchedule's own queries order by mean run
    time, so a record faster than the checked one by mean is checked too (dropped unchecked beyond
    ``checks``). Every other record is slower than a checked one both ways, so never anyone's best.
    Returns the records to store (none if ``checks`` were all wrong) and metadata for the result:
    ``checked`` ("numpy", or None where the programs cannot run here: not ``local`` -- measured on
    an RPC device -- or a target other than this machine's CPU) and ``rejected`` (latency and error
    of each dropped program). O(checks) builds.
    """
    ordered = sorted(records, key=lambda r: median_secs(r.run_secs))
    if not is_cpu(target) or not local:  # checked where they run (see tuner.measure.measurer)
        return ordered, {"checked": None}
    rejected: list[dict] = []
    tol = tolerance(op)

    def wrong(rec) -> str | None:
        kill_point("gate.check")
        try:
            c = check_record(op, rec, target, atol=tol)
        except TVM_ERRORS as exc:  # a program TVM cannot build or run here is not trusted: rejected, with why
            stop.check()  # unless the error is a stop (SIGINT, SIGTERM) TVM's C++ passed on: no verdict
            return f"could not be checked: {error_line(exc, 200)}"
        return None if c.ok else f"output differs from numpy (max abs error {c.max_abs_error:.3g})"

    def reject(rec, error: str) -> None:
        rejected.append({"latency_s": median_secs(rec.run_secs), "error": error})

    good = None
    for i, rec in enumerate(ordered):
        if len(rejected) >= checks or not median_secs(rec.run_secs) < float("inf"):
            return [], {"checked": "numpy", "rejected": rejected}
        error = wrong(rec)
        if error is None:
            good = i
            break
        reject(rec, error)
    if good is None:
        return [], {"checked": "numpy", "rejected": rejected}
    kept = [ordered[good]]
    for rec in ordered[good + 1:]:
        if _mean(rec) < _mean(ordered[good]):  # MetaSchedule would pick it: it must pass too
            error = wrong(rec) if len(rejected) < checks else "faster by mean than the checked program, unchecked"
            if error is not None:
                reject(rec, error)
                continue
        kept.append(rec)
    return kept, {"checked": "numpy", "rejected": rejected}


def _mean(rec) -> float:
    secs = [float(s) for s in rec.run_secs]
    return sum(secs) / len(secs) if secs else float("inf")


def tolerance(op: Operator) -> float:
    """Absolute tolerance: float32 sums over a long reduction drift by about 1e-7 per term."""
    import math

    return max(1e-4, 1e-6 * math.prod(op.reduction))
