"""Kill points: where eto's fault-injection tests stop a run with SIGKILL, to prove nothing is lost.

Set ``ETO_KILL_AT=<point>`` (or ``<point>:<n>``: the n-th time it is reached) and the process kills
itself, without cleanup, the moment it reaches that point; nothing happens otherwise (one dict
lookup per point). The points are spread over everything a tuning run does: planning, backend
build and run, reuse, database appends and the gaps between operators. ``POINTS`` lists them; a
test checks that every one is reached by a small run.

Hang points: ``ETO_HANG_AT=<point>[:<n>][@<file>]`` makes the process reach that point and never
return (it says so on stderr first): a build that hangs (``build``, in a build worker or its build
server), or a run held where a signal test wants it (any of ``POINTS``). Visits are counted per
process; ``@<file>`` hangs once in all processes together, the first to create that file (a worker
killed for its hang is restarted with a fresh count).
"""

from __future__ import annotations

import os
import signal
import time

POINTS = (
    "plan.before", "plan.after",  # the reuse pair selector
    "backend.built", "backend.ran", "backend.measured", "backend.checkpointed", "backend.result",
    "reuse.start", "reuse.measured", "reuse.checkpointed", "reuse.result",
    "gate.check",  # the correctness gate, before a program is built and compared
    "db.workload", "db.records", "db.meta", "db.progress", "db.torn",  # torn: half a line written
    "between.operators", "tune.end",
)
_count: dict[str, int] = {}


def _target(var: str = "ETO_KILL_AT") -> tuple[str, int, str] | None:
    spec = os.environ.get(var)
    if not spec:
        return None
    spec, _, once = spec.partition("@")
    name, _, n = spec.partition(":")
    return name, int(n or 1), once


def reached(point: str, var: str = "ETO_KILL_AT") -> bool:
    """Whether this is the moment to die (or hang) at ``point`` (counts the visit)."""
    t = _target(var)
    if t is None or t[0] != point:
        return False
    key = f"{var}:{point}"
    _count[key] = _count.get(key, 0) + 1
    return _count[key] == t[1] and (not t[2] or _first(t[2]))


def _first(path: str) -> bool:
    """Whether this process is the first to get here (it creates ``path``)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def hang_point(point: str) -> None:
    """Never return from here if ``ETO_HANG_AT`` names this point (a hang for the timeout and signal tests)."""
    if reached(point, "ETO_HANG_AT"):
        os.write(2, f"eto: fault: hanging at {point} (pid {os.getpid()})\n".encode())
        while True:
            time.sleep(3600)


def kill_point(point: str) -> None:
    """SIGKILL this process (and its build/run workers) here if ``ETO_KILL_AT`` names this point (hang
    here if ``ETO_HANG_AT`` does)."""
    if reached(point):
        die()
    hang_point(point)


def torn_write(fd: int, data: bytes) -> None:
    """At ``db.torn``: write half of ``data`` to ``fd`` and die (a kill in the middle of a write)."""
    if reached("db.torn"):
        os.write(fd, data[: len(data) // 2])
        die()


def die() -> None:
    try:  # the whole process group when it is ours (as a terminal's Ctrl-\ or an OOM kill would)
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)
