"""Stop requests: how a run is told to stop cleanly (SIGINT, SIGTERM) and where it does.

A signal handler (``eto``'s command line: :mod:`eto.cli.interrupt`) calls :func:`request` and raises
:class:`Stopped` unless the main thread is in a :func:`deferred` section, whose end or next :func:`check`
raises it instead: a database write (a stop never leaves half of a write behind), and MetaSchedule's
search loop (:func:`tuner.measure.backend.tune_backend`), where Python the threaded C++ search calls (its
cost model) must not raise: there the stop ended the process with ``std::terminate``. eto's own callbacks
in that loop are :func:`interruptible` again. A :class:`Stopped` raised inside
MetaSchedule's C++ loop comes back out of it as a ``RuntimeError`` (TVM's FFI keeps the message, not
the type), and code that catches errors broadly may swallow it; so the measuring code calls
:func:`check` between candidates, which raises again once a stop was requested, and the command line
treats any exception after a request as the stop. Nothing here imports TVM.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_state = {"signal": None, "deferred": 0, "pending": False}


class Stopped(KeyboardInterrupt):
    """The run was asked to stop (``signum``: the signal that asked)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def request(signum: int) -> bool:
    """Record a stop request; whether the caller (the handler, in the main thread) may raise now."""
    if _state["signal"] is None:
        _state["signal"] = signum
    if _state["deferred"]:
        _state["pending"] = True
        return False
    return True


def requested() -> int | None:
    """The signal that asked the run to stop, or None."""
    return _state["signal"]  # type: ignore[return-value]


def check() -> None:
    """Raise :class:`Stopped` if a stop was requested (a point between candidates)."""
    if _state["signal"] is not None:
        _state["pending"] = False  # raised here: a deferred section's end does not raise it again
        raise Stopped(_state["signal"])  # type: ignore[arg-type]


def reset() -> None:
    """Forget a request (a new command in the same process, tests)."""
    _state.update(signal=None, deferred=0, pending=False)


@contextmanager
def interruptible() -> Iterator[None]:
    """eto's own Python inside a deferred loop (MetaSchedule's builder, runner and measure callback,
    called from its loop's main thread): a stop is raised there as outside the loop. Also a decorator."""
    main = threading.current_thread() is threading.main_thread()
    saved = _state["deferred"]
    if main:
        _state["deferred"] = 0
    try:
        check()
        yield
    finally:
        if main:
            _state["deferred"] = saved


@contextmanager
def deferred() -> Iterator[None]:
    """A section the main thread finishes before it stops (other threads are never interrupted)."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        _state["deferred"] += 1  # type: ignore[operator]
    try:
        yield
    finally:
        if main:
            _state["deferred"] -= 1  # type: ignore[operator]
    if main and not _state["deferred"] and _state["pending"]:
        _state["pending"] = False
        check()
