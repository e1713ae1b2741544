"""A backend search's progress, task by task, as MetaSchedule's measure callbacks see it.

After each batch :class:`ProgressCallback` counts a task's trials and failures, extends its best-so-far
trajectory and the seconds of its phases (:class:`~tuner.measure.timed.BatchClock`), reports the batch to the
caller (:func:`tuner.measure.backend.tune_backend`'s ``on_batch`` and ``on_measured``), and finishes the task
as soon as its budget is measured, so its result is committed before the other tasks end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from tuner.measure import deadline, stop
from tuner.measure.faults import kill_point
from tuner.measure.measurer import run_error_message
from tuner.measure.timed import BatchClock, Measured
from tuner.measure.trajectory import TrajectoryPoint, median_secs


@dataclass
class TaskProgress:
    """One task's search so far: what its :class:`~tuner.measure.backend.BackendResult` reports."""

    name: str
    budget: int
    trials: int = 0
    failed: int = 0
    seconds: float = 0.0
    best: float = math.inf
    trajectory: list[TrajectoryPoint] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reported: bool = False
    phases: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # search, build, run


@derived_object
class ProgressCallback(PyMeasureCallback):
    """Runs after MetaSchedule's own callbacks (so the batch is already in its database)."""

    def __init__(self, progress: list[TaskProgress], start: float, clock: BatchClock,
                 finish: Callable[[int], None], on_batch: Callable[[str, int, int, float], None] | None,
                 on_measured: "Callable[[int, list, int, float], None] | None" = None, each: Measured | None = None):
        super().__init__()
        self.progress = progress
        self.start = start
        self.clock = clock
        self.finish = finish
        self.on_batch = on_batch
        self.on_measured = on_measured
        self.each = each  # reports each candidate as it is measured; a batch it could not match, here

    @stop.interruptible()
    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        p = self.progress[task_id]
        timing = self.clock.take(measure_candidates[0].sch.mod) if measure_candidates else None
        if timing is None:
            timing = (0.0, time.perf_counter(), (0.0, 0.0, 0.0))
        p.seconds += timing[0]
        p.phases = [a + b for a, b in zip(p.phases, timing[2])]
        at = timing[1] - self.start
        measured = []
        for c, b, r in zip(measure_candidates, builder_results, runner_results):
            p.trials += 1
            latency = median_secs(r.run_secs)
            if b.error_msg is not None or r.error_msg is not None or math.isinf(latency):
                p.failed += 1
                if len(p.errors) < 5:
                    p.errors.append(str(b.error_msg).strip().splitlines()[-1][:300] if b.error_msg is not None
                                    else run_error_message(r.error_msg))
                continue
            measured.append((c, r.run_secs))
            p.best = min(p.best, latency)
            p.trajectory.append(TrajectoryPoint(at, p.trials, p.best))
        if self.on_measured is not None and not (self.each is not None and self.each.reported(task_id)):
            kill_point("backend.measured")
            self.on_measured(task_id, measured, len(measure_candidates), timing[0])
        if not p.trajectory or p.trajectory[-1].trial != p.trials:
            p.trajectory.append(TrajectoryPoint(at, p.trials, p.best))
        if self.on_batch is not None:
            self.on_batch(p.name, p.trials, p.budget, p.best)
        if p.trials >= p.budget and not p.reported:
            self.finish(task_id)
        # the callers' work on this batch (checkpoint, correctness gate) is not the next batch's cost
        self.clock.last_end = time.perf_counter()
        deadline.check()  # before the next batch's search, which takes seconds before anything is built
