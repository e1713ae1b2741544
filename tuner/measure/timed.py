"""The backend's builder and runner as MetaSchedule's task scheduler calls them: timed per batch, and
every candidate reported the moment it is measured.

MetaSchedule hands a batch's candidates to its measure callbacks only after the whole batch has run,
and eto's defaults make a root's batch its whole budget (64 trials, 64 per batch): a kill inside a
root lost all of it. :class:`Measured` reports each candidate instead: the failed builds when the
batch's builds end, each run as it ends (:meth:`TimedRunner.run` waits for the runs one by one), so
a caller can make it durable at once (:func:`tuner.measure.backend.tune_backend`'s ``on_measured``).
"""

from __future__ import annotations

import time
from typing import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture

from tuner.measure import stop
from tuner.measure.faults import kill_point
from tuner.measure.measurer import BuildCut


class BatchClock:
    """Times each batch from the end of the previous measurement to the end of its own runs.

    The task scheduler generates a task's candidates, builds and runs them, and calls the measure
    callbacks only when it comes back to that task; so the gap before a build (search and cost-model
    update) plus the build and the runs is that batch's cost, and the batch's measurements end when
    its runs do. Batches are matched to tasks by the identity of their first module. Each batch's
    seconds are split at the build's start and end into search, build and run.
    """

    def __init__(self) -> None:
        self.last_end = time.perf_counter()
        self.pending: list[list] = []  # [first module, gap start, build start, run start, end]

    def built(self, first_mod) -> None:
        """A batch's build starts (its search ended)."""
        self.pending.append([first_mod, self.last_end, time.perf_counter(), None, None])

    def running(self) -> None:
        """The batch's builds are done; its runs start."""
        if self.pending and self.pending[-1][3] is None:
            self.pending[-1][3] = time.perf_counter()

    def ran(self) -> None:
        self.last_end = time.perf_counter()
        if self.pending and self.pending[-1][4] is None:
            self.pending[-1][4] = self.last_end

    def take(self, first_mod) -> tuple[float, float, tuple[float, float, float]] | None:
        """The batch's seconds, its end, and its (search, build, run) seconds."""
        for i, (mod, start, build, run, end) in enumerate(self.pending):
            if mod.same_as(first_mod):
                del self.pending[i]
                end = end if end is not None else time.perf_counter()
                run = run if run is not None else end
                return end - start, end, (build - start, run - build, end - run)
        return None


class Measured:
    """Each candidate of the task scheduler's batches as it is measured: ``report(task, candidates,
    result, seconds)`` with the failed builds of a batch together when its builds end (``result``
    None), then each run with its RunnerResult as it ends. ``seconds``: the wall time since the last
    report (the first of a batch also counts its search and its builds), so a batch's reports add up
    to its time. The candidates (their traces) are the task scheduler's; builds and runs are matched
    to them by module identity and artifact path."""

    def __init__(self, scheduler, clock: BatchClock,
                 report: "Callable[[int, list, object | None, float], None]") -> None:
        self.scheduler, self.clock, self.report = scheduler, clock, report
        self.pending: dict[str, tuple[int, object]] = {}  # artifact path -> (task, candidate)
        self.mark = clock.last_end
        self.matched: set[int] = set()  # tasks whose batch in flight is reported here

    def built(self, inputs, results) -> None:
        found = self._task(inputs[0].mod) if inputs else None
        if found is None:
            return
        task, candidates = found
        self.matched.add(task)
        self.mark = self.clock.last_end  # the batch's search and builds go with its first report
        failed = []
        for c, b in zip(candidates, results):
            if b.error_msg is None:
                self.pending[str(b.artifact_path)] = (task, c)
            else:
                failed.append(c)
        if failed:
            self._report(task, failed, None)

    def ran(self, inp, result) -> None:
        task, c = self.pending.pop(str(inp.artifact_path), (None, None))
        if task is not None:
            self._report(task, [c], result)

    def reported(self, task: int) -> bool:
        """Whether ``task``'s batch just measured was reported here (forgotten once asked)."""
        if task in self.matched:
            self.matched.discard(task)
            return True
        return False

    def _report(self, task: int, candidates: list, result) -> None:
        now = time.perf_counter()
        seconds, self.mark = now - self.mark, now
        self.report(task, candidates, result, seconds)

    def _task(self, mod) -> tuple[int, list] | None:
        """The task whose batch starts with ``mod``, and that batch's candidates."""
        for i, task in enumerate(self.scheduler.tasks_):
            candidates = task.measure_candidates
            if candidates is not None and len(candidates) and candidates[0].sch.mod.same_as(mod):
                return i, list(candidates)
        return None


@derived_object
class TimedBuilder(PyBuilder):
    """The measurer's builder, timed. ``timeout``: eto's roots' short build timeout (a
    PersistentBuilder's ``build_within``), lowered per task by a :class:`tuner.measure.measurer.BuildCut` as
    a reuse search's, probing one candidate per worker. Measured on BERT-Base's root (the stored
    programs of an eto run and of MetaSchedule's, 190 and 200, rebuilt one by one): the best 10
    built in 0.2-1.1 s, every build over 2 s ran 2.5-21x slower than the best; cuts at 10 s had
    cost that eto root 114 s of builds against 27 s in MetaSchedule's own run of it. ``measured``:
    told of each batch's builds (:class:`Measured`)."""

    def __init__(self, inner, clock: BatchClock, timeout: float | None = None, measured: Measured | None = None):
        super().__init__()
        self.inner, self.clock, self.timeout, self.measured = inner, clock, timeout, measured
        self.cuts: dict[str, BuildCut] = {}  # per task

    def build(self, build_inputs):
        stop.check()
        if build_inputs:
            self.clock.built(build_inputs[0].mod)
        if self.timeout is None or not build_inputs:
            results = self.inner.build(build_inputs)
        else:
            key = task_key(build_inputs[0].mod)
            cut = self.cuts.setdefault(key, BuildCut(probe=getattr(self.inner, "max_workers", 1), ceiling=self.timeout))
            results = []
            for part in cut.parts(build_inputs):
                res = self.inner.build_within(part, cut.cap)
                results += res
                cut.record(sec if r.error_msg is None else None for sec, r in zip(self.inner.seconds, res))
        self.clock.running()
        kill_point("backend.built")
        if self.measured is not None:
            self.measured.built(build_inputs, results)
        return results


def task_key(mod) -> str:
    """The task a candidate belongs to, by its parameters' shapes and types (what its builds share)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return str([info.as_json() for info in ArgInfo.from_entry_func(mod, remove_preproc=True)])


@derived_object
class TimedRunner(PyRunner):
    """The measurer's runner: its runs waited for one by one (measurements are synchronous: no build
    overlaps a run), each handed to ``measured`` as it ends; a requested stop is raised between runs."""

    def __init__(self, inner, clock: BatchClock, measured: Measured | None = None):
        super().__init__()
        self.inner, self.clock, self.measured = inner, clock, measured

    def run(self, runner_inputs):
        results = []
        for inp, future in zip(runner_inputs, self.inner.run(runner_inputs)):
            results.append(future.result())
            if self.measured is not None:
                self.measured.ran(inp, results[-1])
            stop.check()
        self.clock.ran()
        kill_point("backend.ran")
        return [Done(r) for r in results]


@derived_object
class Done(PyRunnerFuture):
    """A run's result, already there."""

    def __init__(self, result):
        super().__init__()
        self.res = result

    def done(self) -> bool:
        return True

    def result(self):
        return self.res
