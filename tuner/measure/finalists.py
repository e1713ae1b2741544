"""Screen, then settle: a reuse search times its candidates briefly and its best few precisely.

A reuse candidate's measurement is mostly its timed runs, not its build: with the full configuration
(5 repeats of >= 40 ms) 0.28 s of 0.34 s per candidate on this 2-core host, against 0.05 s for 3
repeats of >= 10 ms (:attr:`~tuner.measure.measurer.MeasureConfig.screen_repeat`), whose medians were
1.4-3.1% off the full ones (median; the full configuration against itself: 1.0-1.4%;
``experiments/tools/timing_split.py``, experiments/README). A round
only needs its candidates ranked, so the reuse tuner screens every candidate and, once the search
is done, re-times its ``finalists`` best with the full configuration (:func:`settle`): the program
it returns, and the latency stored for it, are a full measurement, comparable with MetaSchedule's
records, and the winner is decided by it.

Settling can also draw the process lottery more than once: a program can run up to 1.75x faster in
one process than in another and keeps its speed there. With
:attr:`tuner.measure.measurer.MeasureConfig.settle_processes` >= 2 (``ETO_SETTLE_PROCESSES``; default 1, which
measured better) the finalists are timed in every runner process of the measurer, and so are the
backend's best few in an eto run (:func:`settle_records`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer

#: candidates re-timed at the end of a screened search (0: every candidate timed in full, as in the paper)
DEFAULT_FINALISTS = 3


class Timed(Protocol):
    sch: Any
    latency: float


T = TypeVar("T", bound=Timed)


def settle(cands: Sequence[T], remeasure: Callable[[list[Any]], list[float]], finalists: int) -> tuple[T | None, float]:
    """Re-time the ``finalists`` fastest of ``cands`` (screened) and put every latency on the full scale.

    Finalists take their new times (inf where the full run failed); every other candidate its
    screened time times the finalists' median full/screened ratio, which keeps it behind the winner
    (a finalist at or below that ratio was screened no slower than it). Returns the winner (None,
    and nothing changed, if no finalist ran again) and the winner's full time over the screened
    best, which maps a screened best-so-far curve onto the full scale. O(n log n) plus
    ``finalists`` measurements.
    """
    done = sorted((c for c in cands if math.isfinite(c.latency)), key=lambda c: c.latency)
    top = done[:max(finalists, 0)]
    again = remeasure([c.sch for c in top]) if top else []
    ratios = [a / c.latency for c, a in zip(top, again) if math.isfinite(a) and c.latency > 0]
    if not ratios:
        return None, 1.0
    scale, screened_best = statistics.median(ratios), top[0].latency
    for c, a in zip(top, again):
        c.latency = a
    winner = min(top, key=lambda c: c.latency)
    for c in done[len(top):]:
        c.latency *= scale
    return winner, winner.latency / screened_best


@dataclass
class _Record:
    sch: Any  # a TuningRecord
    latency: float


def settle_records(records: Sequence[Any], measurer: "Measurer", target: "Target", finalists: int) -> list:
    """A search's TuningRecords (best first) with their ``finalists`` best re-timed in every runner
    process of ``measurer`` (:func:`settle`), best first again; each record's run time becomes its
    settled one. Unchanged with one process to time in (an RPC measurer, ``settle_processes=1``: the search's
    own choice stands), no finalists, or no finalist that ran."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from tuner.measure.apply import scheduled_module
    from tuner.measure.trajectory import median_secs

    if not records or finalists < 1 or measurer.spare is None or measurer.config.settle_processes < 2:
        return list(records)
    timed = [_Record(r, median_secs(r.run_secs)) for r in records]

    def remeasure(recs: list) -> list[float]:
        return [m.median for m in measurer.measure([scheduled_module(r) for r in recs], target, spread=True)]

    winner, _ = settle(timed, remeasure, finalists)
    if winner is None:
        return list(records)
    ran = sorted((t for t in timed if math.isfinite(t.latency)), key=lambda t: t.latency)
    return [TuningRecord(t.sch.trace, t.sch.workload, [t.latency], t.sch.target, t.sch.args_info) for t in ran]
