"""Other processes' CPU time during a run: a program timed on a busy machine is timed against them.

On a machine of few cores a timed run whose thread is descheduled for another process's time slice
comes out milliseconds slow whatever the program: a reuse search run beside another benchmark on
this project's 2-core VMs stored 1x1 convolutions of 10-100 us at 2.4-7.6 ms, and a later model that
read that database as a prior inherited them. Nothing in a single timing tells such a run from a slow
program, so :class:`BusyMeter` measures the machine instead: the CPU time every process outside the
run's own process tree (the run, its build workers and runners, their children) spent meanwhile, read
from ``/proc`` once a second (Linux; elsewhere it measures nothing; reading every process costs a few
milliseconds), and the time the hypervisor took from this VM (``steal``). A run reports it when it is
worth a warning (:func:`busy_warning`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Mapping

#: Cores' worth of other processes' CPU time (over the run) from which a run warns that its timings
#: may be off: a quarter of a core is well above an idle VM's background (its kernel threads and
#: monitors: 0.01-0.03 here) and below one busy process (1.0).
WARN_CORES = 0.25
#: clock ticks a second, the unit of ``/proc``'s CPU times
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Busy:
    """What other processes and the hypervisor took, in cores on average, over ``seconds``."""

    seconds: float
    others: float
    steal: float


def _steal() -> float | None:
    """The hypervisor's steal since boot, in CPU seconds (``/proc/stat``), or None where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return float(fields[8]) / TICK if len(fields) > 8 else 0.0
    except (OSError, ValueError):
        return None


def processes() -> dict[int, tuple[int, int, float]]:
    """Every process now: pid -> (parent pid, start time in clock ticks since boot, its own CPU seconds,
    user and system). O(processes on the machine)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:  # it ended meanwhile
            continue
        rest = text[text.rfind(")") + 2:].split()  # after the command name, which may hold spaces
        try:  # fields 4 (ppid), 14-15 (utime, stime) and 22 (starttime) of proc(5), counted from 1
            found[int(pid)] = (int(rest[1]), int(rest[19]), (float(rest[11]) + float(rest[12])) / TICK)
        except (IndexError, ValueError):
            continue
    return found


def descendants(root: int, procs: Mapping[int, tuple[int, int, float]]) -> set[int]:
    """``root`` and every process below it in ``procs``. O(processes)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


class OthersClock:
    """CPU seconds of every process that has never been in ``root``'s tree, counted from the first
    :meth:`tick` on. Each tick reads every process; a process once in the tree is the tree's for good,
    even after its parent ends and it is re-parented away (a build server whose worker was stopped), so
    the run's own work never counts as another's. A process outside the tree born after the first tick
    counts whole; one born and ended between two ticks is missed."""

    def __init__(self, root: int) -> None:
        self.root, self.seconds, self.first = root, 0.0, True
        self.ours: set[tuple[int, int]] = set()  # (pid, start time): pids are reused
        self.last: dict[tuple[int, int], float] = {}

    def tick(self) -> None:
        procs = processes()
        self.ours.update((pid, procs[pid][1]) for pid in descendants(self.root, procs) if pid in procs)
        seen = {}
        for pid, (_, start, cpu) in procs.items():
            key = (pid, start)
            if key in self.ours:
                continue
            if not self.first:
                self.seconds += max(cpu - self.last.get(key, 0.0), 0.0)
            seen[key] = cpu
        self.last, self.first = seen, False


class BusyMeter:
    """What other processes (:class:`OthersClock`, read every ``interval`` seconds by a thread of its
    own) and the hypervisor (steal) took from :meth:`start` to :meth:`stop`; ``stop`` gives None where
    ``/proc`` cannot be read."""

    def __init__(self, *, root: int | None = None, interval: float = 1.0) -> None:
        self.root, self.interval = root, interval
        self._clock: OthersClock | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._started, self._steal = 0.0, 0.0

    def start(self) -> "BusyMeter":
        steal = _steal()
        if steal is None:
            return self
        self._started, self._steal = time.perf_counter(), steal
        self._clock = OthersClock(self.root or os.getpid())
        self._clock.tick()
        self._thread = threading.Thread(target=self._run, args=(self._clock,), daemon=True, name="eto-busy-meter")
        self._thread.start()
        return self

    def _run(self, clock: OthersClock) -> None:
        while not self._done.wait(self.interval):
            clock.tick()

    def stop(self) -> Busy | None:
        if self._clock is None or self._thread is None:
            return None
        self._done.set()
        self._thread.join()
        self._clock.tick()
        wall = max(time.perf_counter() - self._started, 1e-9)
        steal = max((_steal() or 0.0) - self._steal, 0.0)
        return Busy(wall, self._clock.seconds / wall, steal / wall)


def busy_warning(busy: Busy | None, cores: int, threshold: float = WARN_CORES) -> str | None:
    """A line saying the machine was busy during the run, or None where it was not (or is unknown)."""
    if busy is None or busy.others + busy.steal < threshold:
        return None
    steal = f" and the hypervisor {busy.steal:.2f} (steal)" if busy.steal >= 0.05 else ""
    return (f"other processes used {busy.others:.2f} of this machine's {cores} cores on average during "
            f"the run{steal}: candidates timed while they ran are slow by their time slices, and the "
            "programs chosen by those timings may be too; tune on a quiet machine where the numbers matter")


__all__ = ["Busy", "BusyMeter", "OthersClock", "WARN_CORES", "busy_warning", "descendants", "processes"]
