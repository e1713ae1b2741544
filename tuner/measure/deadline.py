"""A run's time budget as a deadline the measuring code checks before it starts new work.

A tuning run given a time budget (``eto tune --time-budget``) sets the deadline for its duration
(:func:`until`); the builders check it before each chunk of candidates they build
(:class:`tuner.measure.timed.TimedBuilder`, :meth:`tuner.measure.measurer.Measurer.measure`) and raise
:class:`DeadlineReached` once it has passed. What was measured before is already checkpointed, so a
run cut there resumes like a killed one; candidates already running finish first, so the overrun is
at most one chunk. Raised inside MetaSchedule's C++ loop it comes back out as a ``RuntimeError``;
:func:`passed_on` turns it back into this type. Nothing here imports TVM.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Iterator

_state: dict[str, float] = {"at": math.inf}


class DeadlineReached(Exception):
    """The run's time budget is spent: no new candidate is built."""

    def __init__(self) -> None:
        super().__init__("the time budget is spent")


@contextmanager
def until(seconds: float | None) -> Iterator[None]:
    """Within the block, work stops ``seconds`` from now (None: no deadline). An outer, earlier deadline stays."""
    before = _state["at"]
    if seconds is not None:
        _state["at"] = min(before, time.perf_counter() + float(seconds))
    try:
        yield
    finally:
        _state["at"] = before


@contextmanager
def passed_on() -> Iterator[None]:
    """Around a C++ loop that calls back into Python (MetaSchedule's task scheduler): not entered past
    the deadline, and the :class:`DeadlineReached` it passed on as a ``RuntimeError`` raised as itself again."""
    check()
    try:
        yield
    except Exception:
        check()
        raise


def left() -> float:
    """Seconds until the deadline (``inf`` without one; negative once it has passed)."""
    return _state["at"] - time.perf_counter()


def active() -> bool:
    """Whether a deadline is set."""
    return _state["at"] < math.inf


def check() -> None:
    """Raise :class:`DeadlineReached` if the deadline has passed (a point before new candidates are built)."""
    if left() <= 0:
        raise DeadlineReached()


__all__ = ["DeadlineReached", "active", "check", "left", "passed_on", "until"]
