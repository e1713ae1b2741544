"""The backend compiler: MetaSchedule (Ansor's search space, evolutionary search, XGBoost model).

The paper's backend is Ansor; TVM removed ``auto_scheduler`` in v0.20 and MetaSchedule's
multi-level-tiling rules are Ansor's sketch rules, so MetaSchedule plays that role here.
:func:`tune_backend` tunes one or several operators with TVM's task scheduler and, per operator,
records what the benchmarks need: candidates measured, wall seconds, the best programs and the
best-so-far trajectory ``(seconds, trial, best latency)``. Each operator's result is handed to
``on_result`` as soon as its task finishes, so a caller can commit it before the rest is done.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from tvm_ffi import get_global_func, register_global_func
from tvm.s_tir import meta_schedule as ms

from tuner.measure import deadline, stop
from tuner.measure.faults import kill_point
from tuner.measure.finalists import settle_records
from tuner.analysis.intrinsics import register_tensor_intrinsics
from tuner.measure.measurer import Measurer
from tuner.measure.options import BackendOptions
from tuner.measure.progress import ProgressCallback, TaskProgress
from tuner.measure.timed import BatchClock, Measured, TimedBuilder, TimedRunner
from tuner.measure.trajectory import TrajectoryPoint, median_secs, time_to_reach, trials_to_reach

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import Database as MSDatabase, TuningRecord
    from tvm.s_tir import Schedule
    from tvm.target import Target
    from tvm.tirx import PrimFunc


@dataclass(frozen=True)
class BackendTask:
    name: str
    func: "PrimFunc"
    weight: float = 1.0


@dataclass(frozen=True)
class BackendResult:
    """One operator's backend tuning: its best programs (best first) and how it got there."""

    name: str
    records: tuple["TuningRecord", ...]
    candidates: int
    failed: int
    seconds: float
    trajectory: tuple[TrajectoryPoint, ...]
    errors: tuple[str, ...] = ()
    #: where ``seconds`` went, summed over the batches: the search (candidates, cost model), builds, runs
    phases: "tuple[float, float, float]" = (0.0, 0.0, 0.0)

    @property
    def phase_seconds(self) -> dict[str, float]:
        return dict(zip(("search_s", "build_s", "run_s"), self.phases))

    @property
    def best_latency(self) -> float:
        return median_secs(self.records[0].run_secs) if self.records else math.inf

    def time_to_best(self) -> float | None:
        """Run seconds at which the final best latency was first reached ("Ansor best")."""
        return self.time_to_reach(self.best_latency)

    def time_to_reach(self, latency: float) -> float | None:
        """Run seconds at which the best-so-far first got to ``latency`` or better ("Ansor same")."""
        return time_to_reach(self.trajectory, latency)

    def trials_to_reach(self, latency: float) -> int | None:
        return trials_to_reach(self.trajectory, latency)


#: MetaSchedule's own "in a Jupyter kernel?" check, kept before :func:`_notebook_tables` replaces it
_IN_JUPYTER = get_global_func("s_tir.meta_schedule.using_ipython")


def _notebook_tables(shown: bool) -> None:
    """In Jupyter MetaSchedule shows a table per batch whatever its logger's level: only ``verbose`` shows
    it there; otherwise it goes to the task scheduler's logger, quiet as on a terminal."""
    register_global_func("s_tir.meta_schedule.using_ipython", lambda: shown and bool(_IN_JUPYTER()), override=True)


def _task_logger(log_dir: str | None, name: str, verbose: bool) -> logging.Logger:
    """A per-task logger writing MetaSchedule's task log to ``log_dir`` (if any), not the console.

    MetaSchedule's own ``get_loggers_from_work_dir`` reconfigures global logging with
    ``dictConfig`` on every call and fails on a second call in the same process when another
    library has attached an unnamed handler, so eto builds its loggers itself.
    """
    logger = logging.getLogger(f"eto.metaschedule.{name}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG if (log_dir or verbose) else logging.WARNING)
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(log_dir, f"{name}.log"))
        fh.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
        logger.addHandler(fh)
    if verbose:
        logger.addHandler(logging.StreamHandler(sys.stderr))
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def light_search(seed_population: int = 64) -> "ms.search_strategy.SearchStrategy":
    """Evolutionary search with a small population: seconds instead of minutes per batch."""
    return ms.search_strategy.EvolutionarySearch(
        population_size=seed_population, init_measured_ratio=0.1, init_min_unmeasured=16,
        genetic_num_iters=2, genetic_mutate_prob=0.85, genetic_max_fail_count=4,
    )


#: MetaSchedule's searches by name (command lines, benchmarks)
SearchName = Literal["evolutionary", "light"]


def search_strategy(name: SearchName) -> "str | ms.search_strategy.SearchStrategy":
    """The search called ``name``: MetaSchedule's evolutionary default, or :func:`light_search`."""
    if name == "light":
        return light_search()
    if name != "evolutionary":
        raise ValueError(f"unknown search {name!r}: evolutionary or light")
    return name


def single_program(func: "PrimFunc", target: "Target") -> bool:
    """Whether the backend's design space of ``func`` holds one program: one sketch whose trace
    samples nothing. MetaSchedule's rules sample no unroll for a function without a reduction, so an
    element-wise or layout function has one; its search measures that program, then spends empty
    iterations (five, seconds each) looking for another. One trial is such a function's budget."""
    from tvm.ir import IRModule

    register_tensor_intrinsics(target)
    ctx = ms.TuneContext(mod=IRModule({"main": func}), target=target, space_generator="post-order-apply",
                         task_name="space", num_threads=1)
    spaces = ctx.generate_design_space()
    return len(spaces) == 1 and not len(spaces[0].trace.decisions)


#: MetaSchedule's XGBoost model ranks candidates at random until it holds this many measurements
#: (its default), whatever their tasks. A model's dozen tasks pass it in their first batches; one
#: task alone (eto's roots) spent its whole second batch unranked. Measured on two matmuls tuned
#: alone, 6 runs each way (experiments/backend_warmup.py): the second batch of 64 improved the best
#: in 6 of 6 runs ranked after one batch (median 1.16x), in 2 of 6 with MetaSchedule's default.
XGB_WARMUP_SAMPLES = 100


def warmup_samples(batch: int) -> int:
    """Measurements before the cost model ranks: one batch (at most MetaSchedule's 100), so a task
    tuned alone is ranked from its second batch on, as a task tuned among others is."""
    return max(1, min(batch, XGB_WARMUP_SAMPLES))


def default_cost_model(threads: int, batch: int) -> "ms.CostModel":
    """MetaSchedule's XGBoost model, ranking from a task's second batch on (:func:`warmup_samples`)."""
    return ms.CostModel.create("xgb", num_tuning_cores=threads, num_warmup_samples=warmup_samples(batch))


def tune_backend(
    tasks: Sequence[BackendTask],
    target: "Target",
    options: BackendOptions,
    *,
    measurer: Measurer,
    top_k: int | None = None,
    warm_start: "Sequence[Sequence[tuple[Schedule, float] | TuningRecord]] | None" = None,
    cost_model: "ms.CostModel | None" = None,
    work_dir: str | None = None,
    num_threads: int | None = None,
    on_result: Callable[[BackendResult], None] | None = None,
    on_batch: Callable[[str, int, int, float], None] | None = None,
    on_measured: "Callable[[str, list[TuningRecord], int, float], None] | None" = None,
    finalists: int = 0,
    short_builds: bool = False,
    verbose: bool = False,
) -> list[BackendResult]:
    """Tune ``tasks`` with MetaSchedule as ``options`` say (:class:`~tuner.measure.options.BackendOptions`:
    ``trials`` measured candidates each, the batch, the search strategy, the seed, the task scheduler).

    ``warm_start`` gives per task programs measured elsewhere (postprocessed schedules and
    seconds, e.g. the reuse tuner's candidates): they join the search's database, seeding its
    population, and train the cost model before the first batch, so the search continues from them
    instead of starting cold. ``cost_model``: the search's (default: :func:`default_cost_model`).
    Results keep every program that ran, best first (``top_k``: the best few), as MetaSchedule's
    JSON database does: a later reuse's ranker learns from all. ``on_result``: each result at once;
    ``on_measured(name, records, trials, seconds)``: each candidate as soon as it is measured (the
    program if it ran, one trial and its seconds; a batch's failed builds together, no program), so a
    caller can make progress durable before the task ends: a batch is then built and run in chunks
    (:mod:`tuner.measure.timed`), so a kill loses the chunk being built or run. ``warm_start`` entries
    may also be TuningRecords (a resumed run's own batches), stored with their run times.
    ``short_builds``: :meth:`Measurer.search_build_timeout` (eto's roots)."""
    if not tasks:
        raise ValueError("no tasks to tune")
    search = _set_up(tasks, target, options, measurer, warm_start=warm_start, cost_model=cost_model,
                     work_dir=work_dir, num_threads=num_threads, verbose=verbose)
    progress = [TaskProgress(t.name, options.trials) for t in tasks]
    results: list[BackendResult | None] = [None] * len(tasks)

    def finish(i: int) -> None:
        res = _finished(search, i, progress[i], measurer, top_k=top_k, finalists=finalists)
        results[i] = res
        if on_result is not None:
            on_result(res)

    _tune_tasks(search, options, measurer, progress, finish, on_batch=on_batch, on_measured=on_measured,
                short_builds=short_builds, work_dir=work_dir)
    for i in [i for i, r in enumerate(results) if r is None]:  # the search space ran out before the budget
        finish(i)
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class _Search:
    """A MetaSchedule search ready for its first batch (:func:`_set_up`)."""

    tasks: Sequence[BackendTask]
    target: "Target"
    contexts: list
    database: "MSDatabase"
    cost_model: "ms.CostModel"
    batch: int  # candidates per batch


def _set_up(tasks: Sequence[BackendTask], target: "Target", options: BackendOptions, measurer: Measurer, *,
            warm_start: "Sequence[Sequence] | None", cost_model: "ms.CostModel | None",
            work_dir: str | None, num_threads: int | None, verbose: bool) -> _Search:
    """A context per task (:func:`_contexts`), a database holding the warm start's programs,
    and the cost model (default :func:`default_cost_model`) trained on the warm start: all before the
    search's clock starts, so a task's seconds are its batches'."""
    register_tensor_intrinsics(target)  # what a TuneContext would import, without its 25 s
    threads = num_threads or int(os.environ.get("TVM_NUM_THREADS", "0") or 0) or measurer.config.num_threads or 1
    contexts = _contexts(tasks, target, strategy=options.search, seed=options.seed, threads=threads, work_dir=work_dir,
                         verbose=verbose)
    database = ms.database.MemoryDatabase()
    batch = min(options.num_trials_per_iter, options.trials)
    cost_model = cost_model or default_cost_model(threads, batch)
    _warm_start(contexts, tasks, warm_start or [[] for _ in tasks], database, cost_model, target)
    return _Search(tasks, target, contexts, database, cost_model, batch)


def _finished(search: _Search, i: int, p: TaskProgress, measurer: Measurer, *, top_k: int | None,
              finalists: int) -> BackendResult:
    """Task ``i``'s result: its best programs settled (:func:`settle_records`), the settling on its clock;
    marked reported, so a later batch does not finish it again."""
    t0 = time.perf_counter()
    p.reported = True
    records = settle_records(_best_first(search.database, search.contexts[i].mod, top_k), measurer, search.target,
                             finalists)
    return BackendResult(p.name, tuple(records), p.trials, p.failed, p.seconds + time.perf_counter() - t0,
                         tuple(p.trajectory), tuple(p.errors), tuple(p.phases))


def _tune_tasks(search: _Search, options: BackendOptions, measurer: Measurer, progress: list[TaskProgress],
                finish: Callable[[int], None], *, on_batch: Callable[[str, int, int, float], None] | None,
                on_measured: "Callable[[str, list[TuningRecord], int, float], None] | None", short_builds: bool,
                work_dir: str | None) -> None:
    """MetaSchedule's task scheduler over the tasks, each batch timed (:mod:`tuner.measure.timed`) and
    counted (:class:`~tuner.measure.progress.ProgressCallback`), a task finished once its budget is measured."""
    scheduler = ms.task_scheduler.TaskScheduler.create(options.scheduler)
    clock = BatchClock()
    measured = None if on_measured is None else partial(_as_records, search.database, search.contexts, search.target,
                                                        search.tasks, on_measured)
    each = None if measured is None else Measured(scheduler, clock, partial(_one_measured, measured))
    callback = ProgressCallback(progress, clock.last_end, clock, finish, on_batch, measured, each)
    runner = TimedRunner(measurer.runner, clock, each)
    with contextlib.nullcontext(work_dir) if work_dir else tempfile.TemporaryDirectory(prefix="eto-ms-") as scratch, \
            deadline.passed_on(), stop.deferred():
        ms.tune.tune_tasks(
            tasks=search.contexts, task_weights=[t.weight for t in search.tasks], work_dir=scratch,
            max_trials_global=options.trials * len(search.tasks), max_trials_per_task=options.trials,
            num_trials_per_iter=search.batch,
            builder=TimedBuilder(measurer.builder, clock,
                                 measurer.search_build_timeout(search.target) if short_builds else None, each, runner),
            runner=runner, database=search.database, cost_model=search.cost_model,
            measure_callbacks=ms.MeasureCallback.create("default") + [callback], task_scheduler=scheduler,
        )


def _best_first(database, mod, top_k: int | None) -> list:
    """``mod``'s programs that ran, fastest first by median run time, the best ``top_k`` (None: all).
    MetaSchedule's database ranks by the mean, so its first could miss a program with a lower median
    (a warm-start program timed once against a search's three repeats, say)."""
    everything = database.get_top_k(database.commit_workload(mod), 1 << 30)
    ran = (r for r in everything if median_secs(r.run_secs) < math.inf)
    return sorted(ran, key=lambda r: median_secs(r.run_secs))[:top_k or None]


def _one_measured(measured: Callable, i: int, candidates: list, result, seconds: float) -> None:
    """One report of :class:`Measured` (a run, or a batch's failed builds: ``result`` None) to ``measured``."""
    ok = result is not None and result.error_msg is None and median_secs(result.run_secs) < math.inf
    kill_point("backend.measured")
    measured(i, [(candidates[0], result.run_secs)] if ok else [], len(candidates), seconds)


def _as_records(database, contexts, target, tasks, on_measured, i: int, batch: list, trials: int,
                seconds: float) -> None:
    """Hand a measured batch to ``on_measured`` as TuningRecords of task ``i``."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    wl = database.commit_workload(contexts[i].mod)
    records = [TuningRecord(c.sch.trace, wl, [float(x) for x in secs], target, c.args_info) for c, secs in batch]
    on_measured(tasks[i].name, records, trials, seconds)


def _contexts(tasks: Sequence[BackendTask], target: "Target", *, strategy, seed: int | None, threads: int,
              work_dir: str | None, verbose: bool) -> list:
    """One MetaSchedule TuneContext per task, each with its own logger and forked random seed."""
    from tvm.s_tir.meta_schedule.utils import fork_seed

    # Task names become log file names: keep them to safe characters.
    names = [re.sub(r"[^A-Za-z0-9_.,-]+", "_", t.name) for t in tasks]
    log_dir = os.path.join(work_dir, "logs") if work_dir else None
    _notebook_tables(verbose)
    return [
        ms.TuneContext(
            mod=t.func, target=target, space_generator="post-order-apply", search_strategy=strategy,
            task_name=name, rand_state=rs, num_threads=threads,
            logger=_task_logger(log_dir, f"task_{i}_{name}", verbose),
        ).clone()
        for i, (t, name, rs) in enumerate(zip(tasks, names, fork_seed(seed, n=len(tasks))))
    ]


def _warm_start(contexts, tasks, warm_start, database, cost_model, target) -> None:
    """Commit each task's warm-start programs to ``database`` and train ``cost_model`` on them."""
    if len(warm_start) != len(tasks):
        raise ValueError(f"warm_start has {len(warm_start)} entries for {len(tasks)} tasks")
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    for ctx, task, programs in zip(contexts, tasks, warm_start):
        programs = [_as_program(p, ctx.mod) for p in programs]
        programs = [(sch, secs) for sch, secs in programs if math.isfinite(median_secs(secs))]
        if not programs:
            continue
        args = ArgInfo.from_prim_func(task.func)
        wl = database.commit_workload(ctx.mod)
        for sch, secs in programs:
            database.commit_tuning_record(TuningRecord(sch.trace, wl, secs, target, args))
        cost_model.update(ctx, [MeasureCandidate(sch, args) for sch, _ in programs],
                          [RunnerResult(secs, None) for _, secs in programs])


def _as_program(p, mod) -> tuple:
    """A warm-start entry as (schedule, run seconds): a (schedule, seconds) pair or a TuningRecord."""
    from tvm.s_tir import Schedule

    if isinstance(p, tuple):
        return p[0], [float(p[1])]
    sch = Schedule(mod)
    p.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch, [float(x) for x in p.run_secs]
