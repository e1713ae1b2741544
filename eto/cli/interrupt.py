"""Ctrl-C and SIGTERM: a command stops cleanly, and a second signal stops it at once.

While a command runs (:func:`handled`), the first SIGINT or SIGTERM asks it to stop
(:mod:`tuner.measure.stop`): the main thread raises :class:`tuner.measure.stop.Stopped` where it is
(after the database write in progress, if any), the measurers' ``close`` stops the build workers,
their build servers and the runner processes at once (:func:`tuner.measure.workers.stop_pool`), and
the command exits with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM), saying how to
continue (:func:`stopped_message`). Every candidate measured before the signal is already on disk;
the ones being built or run are dropped.

A second signal exits at once, and so does a stop that takes longer than :data:`GRACE_S` (the main
thread may be in C++ for a while, where no Python handler runs): a watcher thread, woken by
``signal.set_wakeup_fd``, does both. Exiting at once loses nothing measured either: every worker
dies with the process (:func:`tuner.measure.workers.bind_to_parent`) and the database keeps every
complete line (at worst records no result owns yet, counted by ``eto db show``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from tuner.measure import stop

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: seconds a clean stop may take before the process exits at once (``ETO_STOP_GRACE_S``)
GRACE_S = 10.0
_timer: list[threading.Timer] = []


def grace_s() -> float:
    try:
        return float(os.environ.get("ETO_STOP_GRACE_S") or GRACE_S)
    except ValueError:
        return GRACE_S


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM stop the command in this block cleanly (see the module); outside the main
    thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stop.reset()
    read, write = os.pipe()
    # a signal ignored when eto started (a background job's SIGINT, nohup's) stays ignored
    old = {sig: signal.signal(sig, _handler) for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    try:  # the watcher (no grace timer, no exit from C++ without it where a pipe cannot wake it)
        os.set_blocking(write, False)
        old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except (ValueError, OSError):
        old_fd = None
    else:
        threading.Thread(target=_watch, args=(read,), daemon=True, name="eto-signals").start()
    try:
        yield
    finally:
        if old_fd is not None:
            signal.set_wakeup_fd(old_fd)
        else:
            os.close(read)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        os.close(write)  # the watcher reads the end and goes
        while _timer:
            _timer.pop().cancel()
        stop.reset()


def _handler(signum: int, _frame) -> None:
    if stop.requested() is not None:  # the second signal
        _exit_now(signum, "stopped at once")
    if stop.request(signum):
        raise stop.Stopped(signum)


def _watch(fd: int) -> None:
    """Signals as they arrive, whatever the main thread is doing: the first starts the grace timer,
    the second exits."""
    seen = 0
    try:
        while data := os.read(fd, 64):
            for signum in data:
                if signum not in SIGNALS:
                    continue
                seen += 1
                if seen > 1:
                    _exit_now(signum, "stopped at once")
                _say(f"eto: {signal.Signals(signum).name}: stopping; a second Ctrl-C (or signal) quits at once")
                _timer.append(threading.Timer(grace_s(), _exit_now, (signum, f"stopping took over {grace_s():g} s; "
                                                                               f"stopped at once")))
                _timer[-1].daemon = True
                _timer[-1].start()
    finally:
        os.close(fd)


_exiting = threading.Lock()


def _exit_now(signum: int, why: str) -> None:
    if not _exiting.acquire(blocking=False):  # another thread is exiting already
        return
    _say(f"eto: {signal.Signals(signum).name}: {why}; every candidate measured so far is saved: run the same "
         f"command again to continue")
    os._exit(128 + signum)


def _say(line: str) -> None:
    """A line on stderr without Python's buffered stream (which the main thread may be writing)."""
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass


def stopped_message(args: argparse.Namespace, signum: int) -> str:
    """What a command stopped by ``signum`` says: for a command that tunes into a database, that what
    was measured is saved and that the same command continues."""
    name = signal.Signals(signum).name
    if getattr(args, "command", None) not in ("tune", "retune") or not getattr(args, "db", None):
        return f"eto: interrupted ({name})"
    again = shlex.join(["eto", *getattr(args, "command_line", sys.argv[1:])])
    return (f"eto: stopped by {name}: every candidate measured so far is saved in {args.db}; the ones being "
            f"built or run were dropped. To continue where it stopped, run the same command again:\n  {again}")
