"""Kill points: where eto's fault-injection tests stop a run with SIGKILL, to prove nothing is lost.

Set ``ETO_KILL_AT=<point>`` (or ``<point>:<n>``: the n-th time it is reached) and the process kills
itself, without cleanup, the moment it reaches that point; nothing happens otherwise (one dict
lookup per point). The points are spread over everything a tuning run does: planning, backend
build and run, reuse, database appends and the gaps between operators. ``POINTS`` lists them; a
test checks that every one is reached by a small run.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "plan.before", "plan.after",  # the reuse pair selector
    "backend.built", "backend.ran", "backend.measured", "backend.checkpointed", "backend.result",
    "reuse.start", "reuse.measured", "reuse.checkpointed", "reuse.result",
    "gate.check",  # the correctness gate, before a program is built and compared
    "db.workload", "db.records", "db.meta", "db.progress", "db.torn",  # torn: half a line written
    "between.operators", "tune.end",
)
_count: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("ETO_KILL_AT")
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n or 1)


def reached(point: str) -> bool:
    """Whether this is the moment to die at ``point`` (counts the visit)."""
    t = _target()
    if t is None or t[0] != point:
        return False
    _count[point] = _count.get(point, 0) + 1
    return _count[point] == t[1]


def kill_point(point: str) -> None:
    """SIGKILL this process (and its build/run workers) here if ``ETO_KILL_AT`` names this point."""
    if reached(point):
        die()


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
