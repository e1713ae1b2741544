"""Run times and best-so-far trajectories, the same for every tuner and for the database.

A measurement gives several repeats; the median is the one number eto compares (it ignores a
noisy repeat). MetaSchedule marks a failed run with run seconds of 1e10: such a run has no
latency (``inf``), so it never wins a comparison. A trajectory records, per measured candidate,
the seconds since the tuning run started, the candidates measured so far and the best median
so far; "time to best" and "time to reach latency X" are read from it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

FAILED_RUN_SECS = 1e9  # MetaSchedule writes 1e10 for a failed run


def median_secs(run_secs: Sequence[float] | None) -> float:
    """Median of the repeats, or +inf when there are none or a repeat is MetaSchedule's failure mark."""
    secs = [float(s) for s in (run_secs or [])]
    return statistics.median(secs) if secs and all(s < FAILED_RUN_SECS for s in secs) else math.inf


@dataclass(frozen=True)
class TrajectoryPoint:
    """One step of a tuning run's best-so-far curve."""

    seconds: float  # since the start of the tuning run
    trial: int  # candidates measured so far
    best_s: float  # best median latency so far (inf before the first success)

    def to_json(self) -> list:
        """``[seconds, trial, best_s]``, the form stored in the database's metadata."""
        return [round(self.seconds, 4), self.trial, self.best_s]

    def after(self, seconds: float, trials: int, best_s: float = math.inf) -> "TrajectoryPoint":
        """This point as seen by a run that continues one which took ``seconds`` and ``trials``."""
        return TrajectoryPoint(seconds + self.seconds, trials + self.trial, min(best_s, self.best_s))


def time_to_reach(points: Iterable[TrajectoryPoint], latency: float) -> float | None:
    """Seconds at which the best-so-far first got to ``latency`` or better (None: never)."""
    return next((p.seconds for p in points if p.best_s <= latency), None)


def trials_to_reach(points: Iterable[TrajectoryPoint], latency: float) -> int | None:
    """Candidates measured when the best-so-far first got to ``latency`` or better (None: never)."""
    return next((p.trial for p in points if p.best_s <= latency), None)
