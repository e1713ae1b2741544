"""A run's time budget as a deadline the measuring code checks before it starts new work.

A tuning run given a time budget (``eto tune --time-budget``) sets the deadline for its duration
(:func:`until`); the builders check it before each chunk of candidates they build
(:class:`tuner.measure.timed.TimedBuilder`, :meth:`tuner.measure.measurer.Measurer.measure`) and raise
:class:`DeadlineReached` once it has passed. What was measured before is already checkpointed, so a
run cut there resumes like a killed one; candidates already running finish first, so the overrun is
at most one chunk. Raised inside MetaSchedule's C++ loop it comes back out as a ``RuntimeError``;
:func:`passed_on` turns it back into this type, and only it.

The deadline belongs to the code that set it: it is kept in a context variable, so each thread has its
own and nested :func:`until` blocks in different threads (subtrees tuned side by side) never restore one
another's. A new thread starts without a deadline; work handed to one takes the run's along through
:func:`carried`. Nothing here imports TVM.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import Callable, Iterator, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: The ``time.perf_counter()`` instant work stops at, in this thread (``inf``: no deadline).
_AT: ContextVar[float] = ContextVar("tuner.measure.deadline", default=math.inf)

#: In :class:`DeadlineReached`'s message: TVM's FFI keeps a Python exception's message, not its type, so
#: this is how :func:`passed_on` knows the deadline's own exception from any other error out of C++.
MARKER = "(tuner.measure.deadline.DeadlineReached)"


class DeadlineReached(Exception):
    """The run's time budget is spent: no new candidate is built."""

    def __init__(self) -> None:
        super().__init__(f"the time budget is spent {MARKER}")


@contextmanager
def until(seconds: float | None) -> Iterator[None]:
    """Within the block, in this thread, work stops ``seconds`` from now (None: no deadline). An outer,
    earlier deadline stays."""
    at = _AT.get()
    token = _AT.set(at if seconds is None else min(at, time.perf_counter() + float(seconds)))
    try:
        yield
    finally:
        _AT.reset(token)


def carried(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` under this thread's deadline wherever it is called: a thread (a ``ThreadPoolExecutor``'s
    worker) starts without the deadline of the one handing it work, which would let that work run past it."""
    at = _AT.get()

    @wraps(fn)
    def under_deadline(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _AT.set(at)  # reset after: a pool's worker thread serves other work next
        try:
            return fn(*args, **kwargs)
        finally:
            _AT.reset(token)

    return under_deadline


@contextmanager
def passed_on() -> Iterator[None]:
    """Around a C++ loop that calls back into Python (MetaSchedule's task scheduler): not entered past the
    deadline, and the :class:`DeadlineReached` that :func:`check` raised in it, which comes back out as a
    ``RuntimeError`` carrying its message, raised as itself again. Any other error keeps its own type and
    message, even past the deadline: a real failure late in a run is not the end of its time budget."""
    check()
    try:
        yield
    except RuntimeError as exc:  # what TVM's FFI makes of a Python exception raised in a callback
        if MARKER not in str(exc):
            raise
        raise DeadlineReached() from exc


def left() -> float:
    """Seconds until the deadline (``inf`` without one; negative once it has passed)."""
    return _AT.get() - time.perf_counter()


def active() -> bool:
    """Whether a deadline is set."""
    return _AT.get() < math.inf


def check() -> None:
    """Raise :class:`DeadlineReached` if the deadline has passed (a point before new candidates are built)."""
    if left() <= 0:
        raise DeadlineReached()


__all__ = ["MARKER", "DeadlineReached", "active", "carried", "check", "left", "passed_on", "until"]
