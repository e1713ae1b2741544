"""The backend's builder and runner as MetaSchedule's task scheduler calls them: timed per batch, and
every candidate made durable in small steps.

MetaSchedule builds a whole batch, then runs it, and hands the batch to its measure callbacks only
after its last run; eto's defaults make a root's batch its whole budget (64 trials, 64 per batch),
so a kill inside a root lost all of it. :class:`Measured` reports each candidate instead (the failed
builds of a chunk together, each run as it ends), and :class:`TimedBuilder` measures a batch in
chunks: build a few candidates, run them, build the next few. The search and the candidates are
MetaSchedule's own; only the order of builds and runs changes (never at the same time, so timings
are as clean), and a kill loses at most one chunk: the candidates being built or run.
"""

from __future__ import annotations

import time
from typing import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture

from tuner.analysis.kinds import is_cpu
from tuner.measure import deadline, stop
from tuner.measure.faults import kill_point
from tuner.measure.measurer import BuildCut


#: Candidates built, then run, at a time within a batch (:class:`TimedBuilder`): a kill loses at most
#: these. Small enough that a kill costs little, large enough that the builder's workers stay busy.
MEASURE_CHUNK = 8


class BatchClock:
    """Times each batch from the end of the previous measurement to the end of its own runs.

    The task scheduler generates a task's candidates, builds and runs them, and calls the measure
    callbacks only when it comes back to that task; so the gap before the first build (search and
    cost-model update) plus the builds and the runs is that batch's cost, and the batch's
    measurements end when its runs do. Batches are matched to tasks by the identity of their first
    module. Each batch's seconds are split into search (before its first build), build (the sum of
    its chunks' builds) and run (the rest).
    """

    def __init__(self) -> None:
        self.last_end = time.perf_counter()
        self.pending: list[list] = []  # [first module, gap start, build start, build seconds, end]

    def built(self, first_mod) -> None:
        """A batch's builds start (its search ended)."""
        self.pending.append([first_mod, self.last_end, time.perf_counter(), 0.0, None])

    def building(self, seconds: float) -> None:
        """One chunk of the current batch took ``seconds`` to build."""
        if self.pending and self.pending[-1][4] is None:
            self.pending[-1][3] += seconds

    def ran(self) -> None:
        self.last_end = time.perf_counter()
        if self.pending and self.pending[-1][4] is None:
            self.pending[-1][4] = self.last_end

    def take(self, first_mod) -> tuple[float, float, tuple[float, float, float]] | None:
        """The batch's seconds, its end, and its (search, build, run) seconds."""
        for i, (mod, start, build, build_s, end) in enumerate(self.pending):
            if mod.same_as(first_mod):
                del self.pending[i]
                end = end if end is not None else time.perf_counter()
                build_s = min(build_s, end - build)
                return end - start, end, (build - start, build_s, end - build - build_s)
        return None


class Measured:
    """Each candidate of the task scheduler's batches as it is measured: ``report(task, candidates,
    result, seconds)`` with a chunk's failed builds together when its builds end (``result`` None),
    then each run with its RunnerResult as it ends. ``seconds``: the wall time since the last report
    (the first of a batch also counts its search and its first builds), so a batch's reports add up
    to its time. The candidates (their traces) are the task scheduler's; builds and runs are matched
    to them by module identity and artifact path."""

    def __init__(self, scheduler, clock: BatchClock,
                 report: "Callable[[int, list, object | None, float], None]") -> None:
        self.scheduler, self.clock, self.report = scheduler, clock, report
        self.pending: dict[str, tuple[int, object]] = {}  # artifact path -> (task, candidate)
        self.mark = clock.last_end
        self.matched: set[int] = set()  # tasks whose batch in flight is reported here

    def built(self, inputs, results) -> list[tuple[str, object]]:
        """A chunk of builds ended: report its failures; the (artifact path, candidate) of each build
        that succeeded (nothing where the chunk is no task's)."""
        found = self._task(inputs[0].mod) if inputs else None
        if found is None:
            return []
        task, candidates, first = found
        self.matched.add(task)
        if first:
            self.mark = self.clock.last_end  # the batch's search and builds go with its first report
        failed, ok = [], []
        for c, b in zip(candidates, results):
            if b.error_msg is None:
                self.pending[str(b.artifact_path)] = (task, c)
                ok.append((str(b.artifact_path), c))
            else:
                failed.append(c)
        if failed:
            self._report(task, failed, None)
        return ok

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

    def _task(self, mod) -> tuple[int, list, bool] | None:
        """The task whose batch holds ``mod``, the batch's candidates from ``mod`` on, and whether
        ``mod`` is the batch's first."""
        for i, task in enumerate(self.scheduler.tasks_):
            candidates = task.measure_candidates
            for k, c in enumerate(candidates if candidates is not None else ()):
                if c.sch.mod.same_as(mod):
                    return i, list(candidates)[k:], k == 0
        return None


@derived_object
class TimedBuilder(PyBuilder):
    """The measurer's builder, timed; with ``runner`` (and ``measured``), a batch measured in chunks of
    ``chunk``: each chunk built, then run at once by ``runner`` (:meth:`TimedRunner.ahead`), so a
    kill loses at most a chunk. ``timeout``: eto's roots' short build timeout (a
    PersistentBuilder's ``build_within``), lowered per task by a :class:`tuner.measure.measurer.BuildCut` as
    a reuse search's, probing one candidate per worker. Measured on BERT-Base's root (the stored
    programs of an eto run and of MetaSchedule's, 190 and 200, rebuilt one by one): the best 10
    built in 0.2-1.1 s, every build over 2 s ran 2.5-21x slower than the best; cuts at 10 s had
    cost that eto root 114 s of builds against 27 s in MetaSchedule's own run of it."""

    def __init__(self, inner, clock: BatchClock, timeout: float | None = None, measured: Measured | None = None,
                 runner: "TimedRunner | None" = None, chunk: int = MEASURE_CHUNK):
        super().__init__()
        self.inner, self.clock, self.timeout, self.measured = inner, clock, timeout, measured
        self.runner, self.chunk = runner, chunk
        self.cuts: dict[str, BuildCut] = {}  # per task

    @stop.interruptible()  # raises a stop requested before the build
    def build(self, build_inputs):
        deadline.check()
        if not build_inputs:
            return self.inner.build(build_inputs)
        self.clock.built(build_inputs[0].mod)
        ahead = self.runner is not None and self.measured is not None
        size = max(1, self.chunk) if ahead else len(build_inputs)
        results = []
        for at in range(0, len(build_inputs), size):
            if at:
                deadline.check()  # a run out of time keeps the chunks it measured
            part = build_inputs[at:at + size]
            t0 = time.perf_counter()
            built = self._build(part)
            self.clock.building(time.perf_counter() - t0)
            kill_point("backend.built")
            results += built
            ok = self.measured.built(part, built) if self.measured is not None else []
            if ahead and ok:
                self.runner.ahead(ok, part[0].target)
        return results

    def _build(self, build_inputs) -> list:
        if self.timeout is None:
            return self.inner.build(build_inputs)
        key = task_key(build_inputs[0].mod)
        cut = self.cuts.setdefault(key, BuildCut(probe=getattr(self.inner, "max_workers", 1), ceiling=self.timeout))
        results = []
        for part in cut.parts(build_inputs):
            res = self.inner.build_within(part, cut.cap)
            results += res
            cut.record(sec if r.error_msg is None else None for sec, r in zip(self.inner.seconds, res))
        return results


def task_key(mod) -> str:
    """The task a candidate belongs to, by its parameters' shapes and types (what its builds share)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return str([info.as_json() for info in ArgInfo.from_entry_func(mod, remove_preproc=True)])


@derived_object
class TimedRunner(PyRunner):
    """The measurer's runner: its runs waited for one by one (measurements are synchronous: no build
    overlaps a run), each handed to ``measured`` as it ends; a requested stop is raised between runs.
    Runs done ahead, as their chunk was built (:meth:`ahead`), are answered from what they measured."""

    def __init__(self, inner, clock: BatchClock, measured: Measured | None = None):
        super().__init__()
        self.inner, self.clock, self.measured = inner, clock, measured
        self.done: dict[str, object] = {}  # artifact path -> RunnerResult of a run done ahead

    def ahead(self, built: "list[tuple[str, object]]", target) -> None:
        """Run the candidates of a chunk just built (artifact path, candidate) now."""
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        device = "cpu" if is_cpu(target) else target.kind.name
        inputs = [RunnerInput(path, device, c.args_info) for path, c in built]
        for inp, result in zip(inputs, self._each(inputs)):
            self.done[str(inp.artifact_path)] = result

    @stop.interruptible()
    def run(self, runner_inputs):
        results = [self.done.pop(str(inp.artifact_path), None) for inp in runner_inputs]
        todo = [inp for inp, r in zip(runner_inputs, results) if r is None]
        fresh = iter(list(self._each(todo)))
        results = [r if r is not None else next(fresh) for r in results]
        self.clock.ran()
        kill_point("backend.ran")
        return [Done(r) for r in results]

    def _each(self, runner_inputs):
        """Each input run, reported to ``measured`` as it ends, a requested stop raised between."""
        for inp, future in zip(runner_inputs, self.inner.run(runner_inputs) if runner_inputs else []):
            result = future.result()
            if self.measured is not None:
                self.measured.ran(inp, result)
            yield result
            stop.check()


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
