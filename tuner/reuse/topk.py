"""TopK, the paper's baseline from Selective Tuning (Yu et al.): α runs the best of β's top programs.

No search: β's measured programs are taken best first, each applied to α (β's tile factors kept on
α's loops, :func:`tuner.reuse.predict.predict`), and measured, until ``k`` of them ran; α keeps the
fastest. A program that does not apply to α or fails to build or run is passed over for the next
of β's records ("walking down"), so TopK measures at most ``k`` programs that ran plus the
failures. It is the yardstick the reuse tuner's search must beat (paper, figures 7 and 8).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Sequence

from tuner.reuse.predict import Prediction, predict
from tuner.reuse.search import ReuseResult
from tuner.measure.trajectory import TrajectoryPoint, median_secs

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target
    from tvm.tirx import PrimFunc

    from tuner.measure.measurer import Measurer

#: Selective Tuning's K.
DEFAULT_K = 3


def topk_tune(func: "PrimFunc", source_records: Sequence["TuningRecord"], target: "Target", measurer: "Measurer",
              *, k: int = DEFAULT_K, vector_lanes: int = 8) -> ReuseResult:
    """α's program as the fastest of β's best ``k`` programs that apply to α and run.

    ``source_records``: β's measured programs (any order; taken fastest first by median run
    time). The result counts measured programs in ``candidates``, those that did not apply to α
    in ``invalid`` and those that did not build or run in ``failed``; ``record`` is None when
    none ran. O(len(source_records)) replays, at most ``k`` + failures measurements.
    """
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    start = time.perf_counter()
    ran: list[tuple[Prediction, float]] = []
    trajectory: list[TrajectoryPoint] = []
    measured = invalid = failed = 0
    best_s = math.inf
    for rec in sorted(source_records, key=lambda r: median_secs(r.run_secs)):
        if len(ran) >= k:
            break
        try:
            pred = predict(func, rec, target, vector_lanes=vector_lanes)
        except ValueError:  # β's sketch is not in α's space, or nothing derived passes the checks
            invalid += 1
            continue
        res = measurer.measure([pred.schedule.mod], target)[0]
        measured += 1
        if not res.ok:
            failed += 1
        else:
            ran.append((pred, res.median))
            best_s = min(best_s, res.median)
        trajectory.append(TrajectoryPoint(time.perf_counter() - start, measured, best_s))
    ran.sort(key=lambda x: x[1])
    records = tuple(p.record(s) for p, s in ran)
    return ReuseResult(
        records[0] if records else None, best_s, ran[0][0].config if ran else None, measured, invalid, failed,
        time.perf_counter() - start, tuple(trajectory), {"topk": measured},
        tuple((p.schedule, s) for p, s in ran), records=records)


__all__ = ["topk_tune", "DEFAULT_K"]
